// Package bench owns the `moonmq bench` load generator: a self-contained
// producer/consumer benchmark that drives any Kafka-protocol broker over TCP
// with franz-go (kgo for the data path, kadm for topic administration).
//
// For every case in the cross product of --acks × --partitions × --modes it
// creates a fresh topic, produces random incompressible records for a fixed
// duration (or record count), measuring throughput and per-record produce
// latency, and then consumes everything it produced from the start with a
// fresh consumer, measuring consume throughput. Progress is printed to
// stderr, a summary table to stdout and, optionally, a JSON report to a file
// (see Report) so runs against different brokers can be compared by the
// scripts in the repository's bench/ module.
//
// The package has no dependency on the broker itself; Command is the only
// entry point and is wired into cmd/moonmq as the "bench" subcommand.
package bench
