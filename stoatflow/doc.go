// Package stoatflow is a stream-processing library on Kafka with
// exactly-once state.
package stoatflow
