#!/usr/bin/env bash
# Benchmarks MoonMQ against Apache Kafka 4.x (one KRaft node, from Maven
# Central: bench/kafka.sh), kfake (franz-go's in-memory fake Kafka) and NATS
# JetStream (R1, file storage), one target and one case at a time, and
# prints a comparison with ratios. See docs/BENCHMARKS.md.
#
#   bash bench/run.sh            # full run, ~5 minutes
#   QUICK=1 bash bench/run.sh    # acks=-1 only, 2 s per case, ~1 minute
#
# Environment:
#   DURATION=8s          produce time per case (QUICK: 2s)
#   ACKS=1,-1            acks levels (QUICK: -1)
#   PARTITIONS=1,8       partition counts (streams for NATS)
#   MODES=pipelined,one-at-a-time
#   RECORD_SIZE=1024
#   RESULTS_DIR=DIR      where reports go (default bench/results/<timestamp>)
#   SKIP_MOONMQ=1        only run the peers
#   SKIP_KAFKA=1         leave Apache Kafka out (it needs java and mvn)
#   NATS_SYNC_ALWAYS=1   make JetStream fsync every message (default: it does not)
#   MOONMQ_SERVER_EXTRA  extra JSON members for the "Server" config object,
#                        e.g. '"Acks":"all"'
#   BENCH_ARGS           extra flags for `moonmq bench` (e.g. --max-buffered 4096)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")

QUICK=${QUICK:-0}
if [[ $QUICK == 1 ]]; then
	DURATION=${DURATION:-2s}
	ACKS=${ACKS:--1}
else
	DURATION=${DURATION:-8s}
	ACKS=${ACKS:-1,-1}
fi
PARTITIONS=${PARTITIONS:-1,8}
MODES=${MODES:-pipelined,one-at-a-time}
RECORD_SIZE=${RECORD_SIZE:-1024}
RESULTS_DIR=${RESULTS_DIR:-$here/results/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$RESULTS_DIR"
RESULTS_DIR=$(cd "$RESULTS_DIR" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/moonmq-bench.XXXXXX")
pids=()
cleanup() {
	for pid in "${pids[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$work"
}
source "$here/kafka.sh"
trap 'kafka_stop; cleanup' EXIT
trap 'exit 130' INT TERM

log() { printf '==> %s\n' "$*" >&2; }

# free_port prints a TCP port on 127.0.0.1 that nothing accepts on.
free_port() {
	local p
	for _ in $(seq 100); do
		p=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	echo "no free port found" >&2
	return 1
}

# wait_port PORT PID: wait until PORT accepts connections while PID lives.
wait_port() {
	for _ in $(seq 300); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
			return 0
		fi
		if ! kill -0 "$2" 2>/dev/null; then
			return 1
		fi
		sleep 0.1
	done
	return 1
}

# stop PID: SIGTERM and wait.
stop() {
	kill -TERM "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
	local keep=()
	for p in "${pids[@]}"; do [[ $p != "$1" ]] && keep+=("$p"); done
	pids=("${keep[@]+"${keep[@]}"}")
}

bench_kafka() { # NAME PORT PIDS: run `moonmq bench` (or kbench) against 127.0.0.1:PORT,
	# measuring the broker processes PIDS (comma-separated)
	local rc=0
	# shellcheck disable=SC2086
	"$loadgen" bench --brokers "127.0.0.1:$2" --name "$1" --json "$RESULTS_DIR/$1.json" --broker-pids "$3" \
		--duration "$DURATION" --acks "$ACKS" --partitions "$PARTITIONS" --modes "$MODES" \
		--record-size "$RECORD_SIZE" ${BENCH_ARGS:-} | tee "$RESULTS_DIR/$1.txt" || rc=$?
	[[ $rc == 0 ]] || log "$1: bench exited with $rc (see $RESULTS_DIR/$1.txt)"
}

log "building into $work"
bin=$work/bin
mkdir -p "$bin"
(cd "$here" && go build -o "$bin/" ./cmd/kfakepeer ./cmd/natsbench ./cmd/benchcompare ./cmd/kbench)
if [[ ${SKIP_MOONMQ:-0} == 1 ]]; then
	# kbench runs the same internal/bench code as `moonmq bench`.
	loadgen=$work/loadgen
	printf '#!/bin/sh\nshift\nexec "%s" "$@"\n' "$bin/kbench" >"$loadgen"
	chmod +x "$loadgen"
else
	(cd "$root" && go build -o "$bin/moonmq" ./cmd/moonmq)
	loadgen=$bin/moonmq
fi

{
	echo "tree: $(cd "$root" && git describe --always --dirty 2>/dev/null || echo unknown)"
	echo "started: $(date -u +%FT%TZ); uptime: $(uptime)"
	echo "duration=$DURATION acks=$ACKS partitions=$PARTITIONS modes=$MODES record_size=$RECORD_SIZE"
} >"$RESULTS_DIR/run-info.txt"
cat "$RESULTS_DIR/run-info.txt" >&2

reports=()
if [[ ${SKIP_MOONMQ:-0} != 1 ]]; then
	port=$(free_port)
	mport=$(free_port)
	mkdir -p "$work/moonmq-data"
	printf '{"Server":{"Host":"127.0.0.1","Port":%d,"DataDir":"%s","MetricsPort":%d%s}}\n' \
		"$port" "$work/moonmq-data" "$mport" "${MOONMQ_SERVER_EXTRA:+,$MOONMQ_SERVER_EXTRA}" >"$work/moonmq.json"
	log "moonmq serve on 127.0.0.1:$port"
	"$bin/moonmq" serve --config "$work/moonmq.json" >"$RESULTS_DIR/moonmq-serve.log" 2>&1 &
	pids+=($!)
	if wait_port "$port" "$!"; then
		bench_kafka moonmq "$port" "${pids[-1]}"
	else
		log "moonmq did not start; see $RESULTS_DIR/moonmq-serve.log"
	fi
	stop "${pids[-1]}"
	[[ -f $RESULTS_DIR/moonmq.json ]] && reports+=("$RESULTS_DIR/moonmq.json")
fi

if [[ ${SKIP_KAFKA:-0} != 1 ]]; then
	log "apache kafka, one KRaft node (its defaults: no fsync per message)"
	if kafka_start 1 "$work/kafka"; then
		bench_kafka kafka "${KAFKA_BOOTSTRAP#127.0.0.1:}" "${kafka_pids[0]}"
	else
		log "kafka did not start"
	fi
	kafka_stop
	for f in "$work"/kafka/kafka-*/server.log; do [[ -f $f ]] && cp "$f" "$RESULTS_DIR/kafka-serve.log"; done
	rm -rf "$work/kafka"
	[[ -f $RESULTS_DIR/kafka.json ]] && reports+=("$RESULTS_DIR/kafka.json")
fi

port=$(free_port)
log "kfakepeer on 127.0.0.1:$port"
"$bin/kfakepeer" --port "$port" >"$RESULTS_DIR/kfake-serve.log" 2>&1 &
pids+=($!)
if wait_port "$port" "$!"; then
	bench_kafka kfake "$port" "${pids[-1]}"
else
	log "kfakepeer did not start; see $RESULTS_DIR/kfake-serve.log"
fi
stop "${pids[-1]}"
[[ -f $RESULTS_DIR/kfake.json ]] && reports+=("$RESULTS_DIR/kfake.json")

log "natsbench (embedded nats-server, JetStream file storage)"
nats_args=()
[[ ${NATS_SYNC_ALWAYS:-0} == 1 ]] && nats_args+=(--sync-always)
rc=0
"$bin/natsbench" --json "$RESULTS_DIR/nats.json" --duration "$DURATION" --partitions "$PARTITIONS" \
	--modes "$MODES" --record-size "$RECORD_SIZE" "${nats_args[@]+"${nats_args[@]}"}" |
	tee "$RESULTS_DIR/nats.txt" || rc=$?
[[ $rc == 0 ]] || log "natsbench exited with $rc"
[[ -f $RESULTS_DIR/nats.json ]] && reports+=("$RESULTS_DIR/nats.json")

if ((${#reports[@]} < 2)); then
	log "fewer than two reports; nothing to compare"
	exit 1
fi
echo
"$bin/benchcompare" --out "$RESULTS_DIR/comparison.txt" --min-ratio "kafka=1.5,kfake=1,nats-jetstream=1.5" \
	--max-cpu-ratio kafka=0.5 --max-rss-ratio kafka=0.2 "${reports[@]}"
echo "after: $(uptime)" >>"$RESULTS_DIR/run-info.txt"
log "results in $RESULTS_DIR (comparison.txt, *.json, *.txt)"
