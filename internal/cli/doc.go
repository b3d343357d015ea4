// Package cli owns the human-facing output of MoonMQ's operator commands:
// `moonmq status` (a broker's replication status, or its /stats when
// replication is off) and `moonmq topic describe|list` (the kafka-topics
// view of seed 002).
//
// It touches nothing but HTTP and Kafka clients: it reads a config file to
// learn addresses, the token and the replication port's TLS, asks a running
// broker, and prints. The
// formatting is pure functions over decoded structs (FormatStatus,
// FormatStats, FormatTopics) so it is tested without sockets; Status and
// Topic do the asking.
package cli
