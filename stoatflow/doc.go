// Package stoatflow is a stream-processing library on Kafka (MoonMQ or
// Apache Kafka, unchanged) with exactly-once state.
//
// It owns the typed DSL and the low-level processor API the DSL compiles
// to (topology.go, dsl*.go, windows.go, suppress.go, fkjoin.go,
// processor.go), and the runtime of one application instance: tasks and
// rounds (task.go), the commit protocol and recovery (app.go), restore
// and the standby's changelog applier (restore.go), internal topics
// (topics.go), the HTTP endpoints (http*.go, ha_http.go) and the hot
// standby's runtime (ha_runtime.go). The local stores belong to
// internal/state and the active-standby decisions to internal/ha; this
// package drives them and may not reach into their storage or their
// state machine. How it keeps state exactly once: docs/STOATFLOW.md.
package stoatflow
