// Package testenv owns the real broker processes that StoatFlow's
// integration tests run against, all on loopback and all owned by one test:
//
//   - MoonMQ starts moonmq brokers built from this repository's working
//     tree: a single node, or a failover-mode (Raft) replication group
//     whose replicas a test kills and restarts with real signals.
//   - ApacheKafka starts one Apache Kafka 4.x node (KRaft, broker and
//     controller in one process) from Maven Central artifacts, so a test
//     can show that StoatFlow runs unchanged on real Kafka.
//   - BuildBinary and StartProcess build and run StoatFlow's own programs
//     (example applications, workers) as processes a test can kill, pause
//     and stop.
//
// Every process gets its own ports, data directory and log file under the
// test's TempDir, is killed when the test ends, and has the tail of its log
// printed if the test failed.
//
// The package does not import testing, so that the programs StoatFlow
// ships (a demo, a soak driver) can reuse it without linking the test
// framework: it asks only for a TB. It is Unix-only (it pauses processes
// with SIGSTOP), and on Linux the kernel kills every process it starts if
// the test binary dies first.
//
// It deliberately does not import the broker module
// (github.com/moonmq/moonmq): StoatFlow is a separate module, and the
// broker is run only as a binary, exactly as users run it.
package testenv

// TB is what testenv needs from its owner. testing.TB satisfies it. When
// the value also has a Failed() bool method (as testing.TB does), log
// tails are printed only for failed tests; without it they are never
// printed.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
	TempDir() string
	Skipf(format string, args ...any)
}
