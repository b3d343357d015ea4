#!/usr/bin/env bash
# How cost grows, MoonMQ against Apache Kafka (one KRaft node, bench/kafka.sh),
# one after the other on this machine:
#   footprint   resident memory idle and holding 1,000 and 10,000 partitions
#   partitions  acks=all pipelined produce with 8 producers into 1, 100,
#               1,000 and 10,000 partitions: records/s, broker memory, CPU;
#               records spread round-robin (one record per batch once the
#               partitions outnumber what a producer buffers), and again
#               into 8, 1,000 and 10,000 with the sticky partitioner (a
#               batch per partition, the next partition at random)
#   record size acks=all pipelined produce of 100 B, 1 KiB and 100 KiB
#               records into 8 partitions: records/s and MB/s
# and draws each curve as an SVG in docs/ (PLOTS_DIR). See docs/BENCHMARKS.md.
#
#   bash bench/scale.sh                # ~20 minutes
#   DURATION=3s PARTITIONS=1,100 SIZES=100,1024 bash bench/scale.sh
#
# Environment:
#   DURATION=8s              produce time per case
#   PARTITIONS=1,100,1000,10000
#   STICKY_PARTITIONS=8,1000,10000   ("" skips the sticky curve)
#   FOOTPRINT=1000,10000     partition counts held for the footprint
#   SIZES=100,1024,102400    record sizes
#   RESULTS_DIR=DIR          default bench/results/scale-<timestamp>
#   PLOTS_DIR=DIR            where the SVGs go (default docs/)
#   SKIP_KAFKA=1             MoonMQ only
#   NOFILE=100000            the open-files limit the brokers run with
#   CASE_TIMEOUT=15m         a measurement still running after this is killed
set -euo pipefail

# 10,000 partitions hold tens of thousands of open segment and index files
# in either broker (Kafka's documentation asks for a limit of 100,000):
# raise the soft limit, as far as the hard one allows for a non-root user.
ulimit -n "${NOFILE:-100000}" 2>/dev/null || ulimit -n "$(ulimit -Hn)"

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
DURATION=${DURATION:-8s}
PARTITIONS=${PARTITIONS:-1,100,1000,10000}
STICKY_PARTITIONS=${STICKY_PARTITIONS-8,1000,10000}
FOOTPRINT=${FOOTPRINT:-1000,10000}
SIZES=${SIZES:-100,1024,102400}
CASE_TIMEOUT=${CASE_TIMEOUT:-15m}
RESULTS_DIR=${RESULTS_DIR:-$here/results/scale-$(date +%Y%m%d-%H%M%S)}
PLOTS_DIR=${PLOTS_DIR:-$root/docs}
mkdir -p "$RESULTS_DIR" "$PLOTS_DIR"
RESULTS_DIR=$(cd "$RESULTS_DIR" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/moonmq-scale.XXXXXX")
server=""
cleanup() {
	[[ -n $server ]] && kill -TERM "$server" 2>/dev/null && wait "$server" 2>/dev/null
	kafka_stop
	rm -rf "$work"
}
source "$here/kafka.sh"
trap cleanup EXIT
trap 'exit 130' INT TERM
log() { printf '==> %s\n' "$*" >&2; }

bin=$work/bin
mkdir -p "$bin"
log "building into $bin"
(cd "$here" && go build -o "$bin/" ./cmd/footprint ./cmd/plot)
(cd "$root" && go build -o "$bin/moonmq" ./cmd/moonmq)
{
	echo "tree: $(cd "$root" && git describe --always --dirty 2>/dev/null || echo unknown)"
	echo "started: $(date -u +%FT%TZ); uptime: $(uptime)"
	echo "duration=$DURATION partitions=$PARTITIONS footprint=$FOOTPRINT sizes=$SIZES open-files limit=$(ulimit -n)"
} | tee "$RESULTS_DIR/run-info.txt" >&2

# capped CMD...: runs one measurement, killed after CASE_TIMEOUT: a bench
# client whose broker died keeps retrying, and one such client held a whole
# run for 18 minutes.
capped() {
	timeout -k 10s "$CASE_TIMEOUT" "$@" || {
		local rc=$?
		((rc == 124 || rc == 137)) && log "gave up after $CASE_TIMEOUT: $*"
		return $rc
	}
}

# measure NAME ADDR PIDS: the footprint, partitions and size curves of one
# target.
measure() {
	local name=$1 addr=$2 pids=$3 s rc=0
	log "$name: footprint"
	capped "$bin/footprint" --brokers "$addr" --pids "$pids" --partitions "$FOOTPRINT" --name "$name" \
		--json "$RESULTS_DIR/$name-footprint.json" | tee "$RESULTS_DIR/$name-footprint.txt" || rc=$?
	log "$name: partitions $PARTITIONS, 8 producers"
	capped "$bin/moonmq" bench --brokers "$addr" --name "$name" --broker-pids "$pids" --json "$RESULTS_DIR/$name-partitions.json" \
		--acks=-1 --modes pipelined --partitions "$PARTITIONS" --producers 8 --duration "$DURATION" --no-consume \
		| tee "$RESULTS_DIR/$name-partitions.txt" || rc=$?
	for s in ${SIZES//,/ }; do
		log "$name: $s-byte records"
		capped "$bin/moonmq" bench --brokers "$addr" --name "$name" --broker-pids "$pids" --json "$RESULTS_DIR/$name-size-$s.json" \
			--acks=-1 --modes pipelined --partitions 8 --record-size "$s" --duration "$DURATION" --no-consume \
			| tee "$RESULTS_DIR/$name-size-$s.txt" || rc=$?
	done
	return $rc
}

# measure_sticky NAME ADDR PIDS DATA: the sticky curve. Kafka deletes a
# topic's files a minute after the topic (file.delete.delay.ms), and holding
# a deleted 10,000-partition topic's files while it created the next one's,
# it ran out of open files here (this machine's hard limit is 20,000) and
# stopped. So each point first waits until no deleted partition is left
# under the broker's DATA directory (Kafka names them *-delete), which also
# keeps the deletions' disk and CPU work out of the measurement.
measure_sticky() {
	local name=$1 addr=$2 pids=$3 data=$4 n rc=0
	for n in ${STICKY_PARTITIONS//,/ }; do
		local waited=0
		while [[ -n $(find "$data" -maxdepth 2 -type d -name '*-delete' -print -quit 2>/dev/null) ]] && ((waited < 300)); do
			sleep 1
			waited=$((waited + 1))
		done
		((waited)) && log "$name: waited ${waited}s for deleted topics' files to go"
		log "$name: $n partitions, 8 producers, sticky partitioner"
		capped "$bin/moonmq" bench --brokers "$addr" --name "$name" --broker-pids "$pids" --json "$RESULTS_DIR/$name-partitions-sticky-$n.json" \
			--acks=-1 --modes pipelined --partitions "$n" --producers 8 --duration "$DURATION" --no-consume \
			--partitioner sticky | tee "$RESULTS_DIR/$name-partitions-sticky-$n.txt" || rc=$?
	done
	return $rc
}

port=$(free_port)
mport=$(free_port)
mkdir -p "$work/moonmq-data"
printf '{"Server":{"Host":"127.0.0.1","Port":%d,"DataDir":"%s","MetricsPort":%d}}\n' "$port" "$work/moonmq-data" "$mport" >"$work/moonmq.json"
log "moonmq serve on 127.0.0.1:$port"
"$bin/moonmq" serve --config "$work/moonmq.json" >"$RESULTS_DIR/moonmq-serve.log" 2>&1 &
server=$!
for _ in $(seq 300); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
measure moonmq "127.0.0.1:$port" "$server" || log "moonmq: a measurement failed"
[[ -z $STICKY_PARTITIONS ]] || measure_sticky moonmq "127.0.0.1:$port" "$server" "$work/moonmq-data" ||
	log "moonmq: a sticky measurement failed"
kill -TERM "$server" && wait "$server" 2>/dev/null || true
server=""

if [[ ${SKIP_KAFKA:-0} != 1 ]]; then
	log "apache kafka, one KRaft node (its defaults: no fsync per message)"
	if kafka_start 1 "$work/kafka"; then
		measure kafka "$KAFKA_BOOTSTRAP" "${kafka_pids[0]}" || log "kafka: a measurement failed"
		[[ -z $STICKY_PARTITIONS ]] || measure_sticky kafka "$KAFKA_BOOTSTRAP" "${kafka_pids[0]}" "$work/kafka/kafka-1/logs" ||
			log "kafka: a sticky measurement failed"
	fi
	kafka_stop
	cp "$work"/kafka/kafka-1/server.log "$RESULTS_DIR/kafka-serve.log" 2>/dev/null || true
fi
echo "after: $(uptime)" >>"$RESULTS_DIR/run-info.txt"

# series KIND NAME: the report files of NAME for a curve.
series() {
	local kind=$1 name=$2 s files=()
	if [[ $kind == partitions ]]; then
		files=("$RESULTS_DIR/$name-partitions.json")
	elif [[ $kind == sticky ]]; then
		for s in ${STICKY_PARTITIONS//,/ }; do files+=("$RESULTS_DIR/$name-partitions-sticky-$s.json"); done
		name="$name sticky"
	else
		for s in ${SIZES//,/ }; do files+=("$RESULTS_DIR/$name-size-$s.json"); done
	fi
	local have=()
	for f in "${files[@]}"; do [[ -f $f ]] && have+=("$f"); done
	((${#have[@]})) && echo "$name=$(IFS=,; echo "${have[*]}")"
}
plot() { # OUT TITLE X Y YLABEL KINDS
	local args=() n s k
	for n in moonmq kafka; do
		for k in ${6//,/ }; do s=$(series "$k" "$n") && args+=("$s"); done
	done
	((${#args[@]})) || return 0
	"$bin/plot" --out "$PLOTS_DIR/$1" --title "$2" --x "$3" --y "$4" --ylabel "$5" "${args[@]}"
	log "wrote $PLOTS_DIR/$1"
}
plot scale-partitions-throughput.svg "acks=all produce, 8 producers, 1 KiB records" partitions records_per_sec "records/s" partitions,sticky
plot scale-partitions-memory.svg "Broker resident memory while producing, 8 producers" partitions rss_peak_mb "peak RSS (MB)" partitions,sticky
plot scale-partitions-cpu.svg "Broker CPU per million acknowledged records, 8 producers" partitions cpu_seconds_per_million "CPU s / M records" partitions,sticky
plot scale-size-throughput.svg "acks=all produce into 8 partitions, by record size" record_size mb_per_sec "MB/s" size
plot scale-size-records.svg "acks=all produce into 8 partitions, by record size" record_size records_per_sec "records/s" size
log "results in $RESULTS_DIR"
