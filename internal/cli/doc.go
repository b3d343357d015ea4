// Package cli owns the human-facing output of MoonMQ's operator commands:
// `moonmq status` (a broker's replication status, or its /stats when
// replication is off), `moonmq topic describe|list` (the kafka-topics
// --describe view, so operators read the lines they know from Kafka) and
// `moonmq group list|describe|delete|seek` (the kafka-consumer-groups
// view: committed offsets and lag).
//
// It touches nothing but HTTP and Kafka clients: it reads a config file to
// learn addresses, the token and the replication port's TLS, asks a running
// broker, and prints. The
// formatting is pure functions over decoded structs (FormatStatus,
// FormatStats, FormatTopics, FormatGroups, BuildGroupView) so it is tested
// without sockets; Status, Topic and Group do the asking.
package cli
