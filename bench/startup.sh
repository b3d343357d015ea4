#!/usr/bin/env bash
# Start-up time with many partitions holding much data, MoonMQ against
# Apache Kafka (one KRaft node, bench/kafka.sh), one after the other: each
# broker is filled with PARTITIONS partitions holding BYTES in all, stopped
# cleanly and started (time to serving: every partition led and an acks=all
# produce to the last one acknowledged, bench/cmd/startup), then killed
# with SIGKILL and started again (the same). See docs/BENCHMARKS.md.
#
#   bash bench/startup.sh                               # 10,000 partitions, 20 GB
#   PARTITIONS=1000 BYTES_MB=1000 bash bench/startup.sh  # a quick look
#
# Environment:
#   PARTITIONS=10000   BYTES_MB=20000   RECORD_SIZE=102400
#   RESULTS_DIR=DIR    default bench/results/startup-<timestamp>
#   SKIP_KAFKA=1       MoonMQ only
#   NOFILE=100000      the open-files limit the brokers run with
set -euo pipefail
ulimit -n "${NOFILE:-100000}" 2>/dev/null || ulimit -n "$(ulimit -Hn)"

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
PARTITIONS=${PARTITIONS:-10000}
BYTES_MB=${BYTES_MB:-20000}
RECORD_SIZE=${RECORD_SIZE:-102400}
RESULTS_DIR=${RESULTS_DIR:-$here/results/startup-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$RESULTS_DIR"
RESULTS_DIR=$(cd "$RESULTS_DIR" && pwd)
records=$((BYTES_MB * 1000000 / RECORD_SIZE))

work=$(mktemp -d "${TMPDIR:-/tmp}/moonmq-startup.XXXXXX")
server=""
cleanup() {
	[[ -n $server ]] && kill -KILL "$server" 2>/dev/null && wait "$server" 2>/dev/null
	kafka_stop
	rm -rf "$work"
}
source "$here/kafka.sh"
trap cleanup EXIT
trap 'exit 130' INT TERM
log() { printf '==> %s\n' "$*" >&2; }

bin=$work/bin
mkdir -p "$bin"
(cd "$here" && go build -o "$bin/" ./cmd/startup)
(cd "$root" && go build -o "$bin/moonmq" ./cmd/moonmq)
{
	echo "tree: $(cd "$root" && git describe --always --dirty 2>/dev/null || echo unknown)"
	echo "started: $(date -u +%FT%TZ); uptime: $(uptime)"
	echo "partitions=$PARTITIONS bytes=${BYTES_MB}MB record-size=$RECORD_SIZE records=$records open-files limit=$(ulimit -n)"
} | tee "$RESULTS_DIR/run-info.txt" >&2

# fill NAME ADDR: the topic and its data. Each producer buffers at most 256
# records (25 MB of 100 KiB ones): with the default 8,192 (800 MB each) a
# record of Kafka's fill could wait past the client's delivery timeout
# (130 s with 10,000 partitions), and 5% of them were dropped.
fill() {
	log "$1: $PARTITIONS partitions, $records records of $RECORD_SIZE bytes"
	"$bin/moonmq" bench --brokers "$2" --name "$1" --topic-prefix startup --keep-topics --no-consume \
		--acks=1 --modes pipelined --partitions "$PARTITIONS" --producers 4 --records "$records" --max-buffered 256 \
		--record-size "$RECORD_SIZE" --partitioner roundrobin | tee "$RESULTS_DIR/$1-fill.txt"
}
# measure NAME ADDR HOW: time to serving of a broker started just now.
measure() {
	"$bin/startup" --brokers "$2" --partitions "$PARTITIONS" --name "$1-$3" | tee -a "$RESULTS_DIR/results.jsonl"
}

port=$(free_port)
mport=$(free_port)
mkdir -p "$work/moonmq-data"
printf '{"Server":{"Host":"127.0.0.1","Port":%d,"DataDir":"%s","MetricsPort":%d}}\n' "$port" "$work/moonmq-data" "$mport" >"$work/moonmq.json"
mstart() { "$bin/moonmq" serve --config "$work/moonmq.json" >>"$RESULTS_DIR/moonmq-serve.log" 2>&1 & server=$!; }
mstart
for _ in $(seq 300); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
fill moonmq "127.0.0.1:$port"
du -sh "$work/moonmq-data" | tee -a "$RESULTS_DIR/run-info.txt" >&2
kill -TERM "$server"; wait "$server" 2>/dev/null || true
mstart; measure moonmq "127.0.0.1:$port" clean-stop
kill -KILL "$server"; wait "$server" 2>/dev/null || true
mstart; measure moonmq "127.0.0.1:$port" kill-9
kill -TERM "$server"; wait "$server" 2>/dev/null || true
server=""
rm -rf "$work/moonmq-data"

if [[ ${SKIP_KAFKA:-0} != 1 ]]; then
	log "apache kafka, one KRaft node (its defaults: no fsync per message)"
	kafka_start 1 "$work/kafka"
	fill kafka "$KAFKA_BOOTSTRAP"
	du -sh "$work/kafka" | tee -a "$RESULTS_DIR/run-info.txt" >&2
	kafka_stop
	kafka_restart "$work/kafka"; measure kafka "$KAFKA_BOOTSTRAP" clean-stop
	kill -KILL "${kafka_pids[0]}"; wait "${kafka_pids[0]}" 2>/dev/null || true
	kafka_restart "$work/kafka"; measure kafka "$KAFKA_BOOTSTRAP" kill-9
	kafka_stop
	cp "$work"/kafka/kafka-1/server.log "$RESULTS_DIR/kafka-serve.log" 2>/dev/null || true
fi
echo "after: $(uptime)" >>"$RESULTS_DIR/run-info.txt"
log "results in $RESULTS_DIR/results.jsonl"
cat "$RESULTS_DIR/results.jsonl"
