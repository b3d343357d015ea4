// Package chaos is the fault-injection harness, tier 2 of the checks that
// failover mode never loses an acknowledged record (docs/RELIABILITY.md): it
// owns the userspace TCP proxies in front of every replication and client
// link, the seeded fault schedules and their execution, the client
// workloads whose every operation goes into a checker.History, the final
// dump of every replica's logs, and the report (an HTML page with the
// fault timeline, throughput, latency, failovers and every anomaly).
//
// It touches brokers only from the outside: through their processes
// (internal/testcluster: signals, restarts), their sockets (proxies,
// Kafka clients, GET /replication/status) and their files (segment
// corruption and log dumps of stopped replicas). Power-loss crashes use
// the brokers' test-only storage mode (vfs.LoseUnsyncedEnv), switched on
// per process start through the environment.
//
// Run takes a testcluster.Harness, which the processes belong to: a
// *testing.T in the tests of test/chaos, a testcluster.Standalone in
// `moonmq chaos` (cmd/moonmq), the command for people. The package does not
// import testing, so the broker binary can carry it.
package chaos
