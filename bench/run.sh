#!/usr/bin/env bash
# Benchmarks MoonMQ against Apache Kafka 4.x (one KRaft node, from Maven
# Central: bench/kafka.sh), kfake (franz-go's in-memory fake Kafka) and NATS
# JetStream (R1, file storage), one target and one case at a time, with the
# same `moonmq bench` workload (franz-go, random values), and prints the
# ratios of MoonMQ to each; then the same produce cases against a peer that
# keeps nothing (kfakepeer --discard): the client's own ceiling on this
# machine. See docs/BENCHMARKS.md.
#
#   bash bench/run.sh            # full run, ~22 minutes
#   QUICK=1 bash bench/run.sh    # acks=-1 only, 2 s per case, produce only
#
# Phases, each on every target that has it:
#   produce     acks × partitions × modes (all four targets)
#   txn         100 records per transaction with 1, 8 and 64 producers, and
#               plain pipelined produce with 64 producers (MoonMQ, Kafka)
#   ctp         consume-transform-produce: 1 and 8 GroupTransactSessions copy
#               a filled topic to another, each poll in one transaction with
#               the group's offsets, exactly once (MoonMQ, Kafka)
#   e2e         end-to-end latency at 50% of MoonMQ's pipelined acks=-1 p=1
#               rate, produce to a long-polling consumer (MoonMQ, Kafka)
# Every MoonMQ, Kafka and kfake case also reports the broker process's CPU
# seconds per million acknowledged records and its peak resident memory.
#
# Environment:
#   DURATION=8s          produce time per case (QUICK: 2s)
#   ACKS=1,-1            acks levels (QUICK: -1)
#   PARTITIONS=1,8,64    partition counts (streams for NATS)
#   MODES=pipelined,one-at-a-time
#   PHASES=produce,txn,ctp,e2e   (QUICK: produce)
#   PRODUCERS=1,8,64     producer counts of the txn phase
#   SESSIONS=1,8         session counts of the ctp phase
#   TXN_PARTITIONS=8     partitions of the txn and ctp phases' topics
#   RECORD_SIZE=1024
#   ROUNDS=2             MoonMQ and Kafka run this many times, in alternating
#                        order (MoonMQ, Kafka, Kafka, MoonMQ, ...), and each
#                        ratio is of their rounds joined (QUICK: 1). The host's
#                        page and write caches fill as a run goes on (writes
#                        to pages the VM has not touched yet cost about six
#                        times more), which would otherwise fall on whichever
#                        target runs first. The end-to-end phase runs once.
#   RESULTS_DIR=DIR      where reports go (default bench/results/<timestamp>)
#   SKIP_MOONMQ=1        only run the peers
#   SKIP_KAFKA=1         leave Apache Kafka out (it needs java and mvn)
#   SKIP_PEERS=1         leave kfake, the ceiling and NATS JetStream out
#   MOONMQ_SERVER=PATH   serve with this moonmq binary (the load generator is
#                        still this tree's): to compare two builds of MoonMQ
#   NATS_SYNC_ALWAYS=1   make JetStream fsync every message (default: it does not)
#   MOONMQ_SERVER_EXTRA  extra JSON members for the "Server" config object,
#                        e.g. '"Acks":"all"'
#   BENCH_ARGS           extra flags for `moonmq bench` (e.g. --max-buffered 4096)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")

QUICK=${QUICK:-0}
if [[ $QUICK == 1 ]]; then
	ROUNDS=${ROUNDS:-1}
	DURATION=${DURATION:-2s}
	ACKS=${ACKS:--1}
	PHASES=${PHASES:-produce}
else
	DURATION=${DURATION:-8s}
	ACKS=${ACKS:-1,-1}
	PHASES=${PHASES:-produce,txn,ctp,e2e}
fi
ROUNDS=${ROUNDS:-2}
PARTITIONS=${PARTITIONS:-1,8,64}
MODES=${MODES:-pipelined,one-at-a-time}
PRODUCERS=${PRODUCERS:-1,8,64}
SESSIONS=${SESSIONS:-1,8}
TXN_PARTITIONS=${TXN_PARTITIONS:-8}
RECORD_SIZE=${RECORD_SIZE:-1024}
RESULTS_DIR=${RESULTS_DIR:-$here/results/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$RESULTS_DIR"
RESULTS_DIR=$(cd "$RESULTS_DIR" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/moonmq-bench.XXXXXX")
pids=()
cleanup() {
	for pid in "${pids[@]+"${pids[@]}"}"; do
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$work"
}
source "$here/kafka.sh"
trap 'kafka_stop; cleanup' EXIT
trap 'exit 130' INT TERM

log() { printf '==> %s\n' "$*" >&2; }
phase() { [[ ,$PHASES, == *,$1,* ]]; }

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

# bench REPORT ADDR PIDS FLAGS...: one `moonmq bench` run (kbench with
# SKIP_MOONMQ) against ADDR, measuring the broker processes PIDS, into
# RESULTS_DIR/REPORT.json and .txt. The run's own flags come last.
bench() {
	local name=$1 addr=$2 broker_pids=$3 rc=0
	shift 3
	# shellcheck disable=SC2086
	"$loadgen" bench --brokers "$addr" --name "${name%%[-.]*}" --json "$RESULTS_DIR/$name.json" \
		--broker-pids "$broker_pids" --duration "$DURATION" --record-size "$RECORD_SIZE" \
		${BENCH_ARGS:-} "$@" | tee "$RESULTS_DIR/$name.txt" || rc=$?
	[[ $rc == 0 ]] || log "$name: bench exited with $rc (see $RESULTS_DIR/$name.txt)"
}

# json_rate REPORT CASE: the produce records/s of CASE in REPORT.json.
json_rate() {
	python3 -c 'import json,sys
r=json.load(open(sys.argv[1]))
print(int(next((c["produce"]["records_per_sec"] for c in r["results"] if c["case"]==sys.argv[2]), 0)))' \
		"$RESULTS_DIR/$1.json" "$2" 2>/dev/null || echo 0
}

# phases NAME ADDR PIDS [ROUND]: run the phases for one Kafka-protocol
# target; the reports of rounds after the first are NAME.rROUND-*.
E2E_RATE=${E2E_RATE:-}
phases() {
	local name=$1 addr=$2 broker_pids=$3 round=${4:-1} n sfx=
	((round > 1)) && sfx=.r$round
	if phase produce; then
		bench "$name$sfx" "$addr" "$broker_pids" --acks "$ACKS" --partitions "$PARTITIONS" --modes "$MODES"
	fi
	[[ $name == kfake || $name == ceiling ]] && return # the durability phases compare brokers that store
	if phase txn; then
		for n in ${PRODUCERS//,/ }; do
			bench "$name$sfx-txn-$n" "$addr" "$broker_pids" --acks=-1 --partitions "$TXN_PARTITIONS" \
				--modes transactional --producers "$n" --txn-size 100
		done
		bench "$name$sfx-plain-64" "$addr" "$broker_pids" --acks=-1 --partitions "$TXN_PARTITIONS" \
			--modes pipelined --producers 64
	fi
	if phase ctp; then
		for n in ${SESSIONS//,/ }; do
			bench "$name$sfx-ctp-$n" "$addr" "$broker_pids" --acks=-1 --partitions "$TXN_PARTITIONS" \
				--modes consume-transform-produce --producers "$n"
		done
	fi
	if phase e2e && ((round == 1)); then
		if [[ -z $E2E_RATE ]]; then
			# Half of MoonMQ's pipelined maximum: MoonMQ runs first.
			local max
			max=$(json_rate "$name" "acks=-1 p=1 pipelined")
			((max > 0)) || max=$(json_rate "$name-plain-64" "acks=-1 p=$TXN_PARTITIONS pipelined")
			E2E_RATE=$((max / 2))
			((E2E_RATE > 0)) || E2E_RATE=10000
			log "end-to-end rate: $E2E_RATE records/s (half of $name's pipelined acks=-1 maximum)"
		fi
		bench "$name-e2e" "$addr" "$broker_pids" --acks=-1 --partitions 1,8 --modes end-to-end --rate "$E2E_RATE"
	fi
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
	echo "duration=$DURATION acks=$ACKS partitions=$PARTITIONS modes=$MODES phases=$PHASES producers=$PRODUCERS record_size=$RECORD_SIZE"
} >"$RESULTS_DIR/run-info.txt"
cat "$RESULTS_DIR/run-info.txt" >&2

# run_moonmq ROUND and run_kafka ROUND: start the target, run its phases,
# stop it; every round starts from empty storage.
run_moonmq() {
	[[ ${SKIP_MOONMQ:-0} != 1 ]] || return 0
	local port mport try
	# A port free when picked can be taken (a client's ephemeral port)
	# before the broker binds it: try again on others.
	for try in 1 2 3; do
		port=$(free_port)
		mport=$(free_port)
		rm -rf "$work/moonmq-data"
		mkdir -p "$work/moonmq-data"
		printf '{"Server":{"Host":"127.0.0.1","Port":%d,"DataDir":"%s","MetricsPort":%d%s}}\n' \
			"$port" "$work/moonmq-data" "$mport" "${MOONMQ_SERVER_EXTRA:+,$MOONMQ_SERVER_EXTRA}" >"$work/moonmq.json"
		log "round $1: moonmq serve on 127.0.0.1:$port"
		"${MOONMQ_SERVER:-$bin/moonmq}" serve --config "$work/moonmq.json" >>"$RESULTS_DIR/moonmq-serve.log" 2>&1 &
		pids+=($!)
		if wait_port "$port" "$!"; then
			phases moonmq "127.0.0.1:$port" "${pids[-1]}" "$1"
			stop "${pids[-1]}"
			rm -rf "$work/moonmq-data"
			return 0
		fi
		log "moonmq did not start (attempt $try); see $RESULTS_DIR/moonmq-serve.log"
		stop "${pids[-1]}"
	done
	rm -rf "$work/moonmq-data"
}

run_kafka() {
	[[ ${SKIP_KAFKA:-0} != 1 ]] || return 0
	log "round $1: apache kafka, one KRaft node (its defaults: no fsync per message)"
	if kafka_start 1 "$work/kafka"; then
		phases kafka "$KAFKA_BOOTSTRAP" "${kafka_pids[0]}" "$1"
	else
		log "kafka did not start"
	fi
	kafka_stop
	for f in "$work"/kafka/kafka-*/server.log; do [[ -f $f ]] && cat "$f" >>"$RESULTS_DIR/kafka-serve.log"; done
	rm -rf "$work/kafka"
}

for round in $(seq "$ROUNDS"); do
	echo "round $round: $(uptime)" >>"$RESULTS_DIR/run-info.txt"
	if ((round % 2)); then
		run_moonmq "$round"
		run_kafka "$round"
	else
		run_kafka "$round"
		run_moonmq "$round"
	fi
done

if phase produce && [[ ${SKIP_PEERS:-0} != 1 ]]; then
	port=$(free_port)
	log "kfakepeer on 127.0.0.1:$port"
	"$bin/kfakepeer" --port "$port" >"$RESULTS_DIR/kfake-serve.log" 2>&1 &
	pids+=($!)
	if wait_port "$port" "$!"; then
		phases kfake "127.0.0.1:$port" "${pids[-1]}"
	else
		log "kfakepeer did not start; see $RESULTS_DIR/kfake-serve.log"
	fi
	stop "${pids[-1]}"

	# The same produce cases against a peer that answers at once and keeps
	# nothing: the rate and latency the client reaches on its own, the
	# ceiling for any broker on this machine.
	port=$(free_port)
	log "kfakepeer --discard (the client's ceiling) on 127.0.0.1:$port"
	"$bin/kfakepeer" --discard --port "$port" >"$RESULTS_DIR/ceiling-serve.log" 2>&1 &
	pids+=($!)
	if wait_port "$port" "$!"; then
		phases ceiling "127.0.0.1:$port" "${pids[-1]}"
	else
		log "kfakepeer --discard did not start; see $RESULTS_DIR/ceiling-serve.log"
	fi
	stop "${pids[-1]}"

	log "natsbench (embedded nats-server, JetStream file storage)"
	nats_args=()
	[[ ${NATS_SYNC_ALWAYS:-0} == 1 ]] && nats_args+=(--sync-always)
	rc=0
	"$bin/natsbench" --json "$RESULTS_DIR/nats.json" --duration "$DURATION" --partitions "$PARTITIONS" \
		--modes "$MODES" --record-size "$RECORD_SIZE" "${nats_args[@]+"${nats_args[@]}"}" |
		tee "$RESULTS_DIR/nats.txt" || rc=$?
	[[ $rc == 0 ]] || log "natsbench exited with $rc"
fi

# compare OUT SUBJECT PEER... [-- benchcompare flags]: the reports that exist.
compare() {
	local out=$1 reports=() flags=()
	shift
	local base rest joined r
	while (($#)) && [[ $1 != -- ]]; do
		if [[ -f $RESULTS_DIR/$1.json ]]; then
			# NAME-REST's later rounds are NAME.rN-REST: join them.
			base=${1%%-*} rest=${1#"$base"}
			joined=$RESULTS_DIR/$1.json
			for r in $(seq 2 "$ROUNDS"); do
				[[ -f $RESULTS_DIR/$base.r$r$rest.json ]] && joined+=+$RESULTS_DIR/$base.r$r$rest.json
			done
			reports+=("$joined")
		fi
		shift
	done
	(($#)) && shift
	flags=("$@")
	if ((${#reports[@]} < 2)); then
		log "$out: fewer than two reports; nothing to compare"
		return
	fi
	echo
	"$bin/benchcompare" --out "$RESULTS_DIR/$out.txt" "${flags[@]+"${flags[@]}"}" "${reports[@]}"
}

compare comparison moonmq kafka kfake nats ceiling -- --min-ratio "kafka=1.5,kfake=1,nats-jetstream=1.5" \
	--max-cpu-ratio kafka=0.5 --max-rss-ratio kafka=0.2
if phase txn; then
	for n in ${PRODUCERS//,/ }; do
		compare "comparison-txn-$n" "moonmq-txn-$n" "kafka-txn-$n" -- --min-ratio kafka=1.5 \
			--ratio-modes transactional --max-p50 0 --min-consume 0 --max-cpu-ratio kafka=0.5
	done
	compare comparison-plain-64 moonmq-plain-64 kafka-plain-64 -- --min-ratio kafka=1.5 --max-p50 0 --min-consume 0
	# Transactions cost at most a fifth of MoonMQ's own plain produce.
	compare comparison-txn-vs-plain-64 moonmq-txn-64 moonmq-plain-64 -- --any-mode --min-ratio moonmq=0.8 \
		--ratio-modes transactional --max-p50 0 --min-consume 0
fi
if phase ctp; then
	for n in ${SESSIONS//,/ }; do
		compare "comparison-ctp-$n" "moonmq-ctp-$n" "kafka-ctp-$n" -- --min-ratio kafka=1.5 --ratio-modes none \
			--max-p50 0 --min-consume 0
	done
fi
if phase e2e; then
	compare comparison-e2e moonmq-e2e kafka-e2e -- --min-ratio kafka=1 --ratio-modes none --max-p50 0 --min-consume 0
fi
echo "after: $(uptime)" >>"$RESULTS_DIR/run-info.txt"
if ((ROUNDS > 1)); then
	# Each round's own ratios, to show the drift the joined ratio evens out.
	"$bin/benchcompare" --out "$RESULTS_DIR/comparison-rounds.txt" --min-ratio kafka=1.5 --max-p50 0 --min-consume 0 \
		"$RESULTS_DIR/moonmq.json" "$RESULTS_DIR/kafka.json" >/dev/null 2>&1 || true
	for r in $(seq 2 "$ROUNDS"); do
		[[ -f $RESULTS_DIR/moonmq.r$r.json && -f $RESULTS_DIR/kafka.r$r.json ]] || continue
		"$bin/benchcompare" --min-ratio kafka=1.5 --max-p50 0 --min-consume 0 \
			"$RESULTS_DIR/moonmq.r$r.json" "$RESULTS_DIR/kafka.r$r.json" >>"$RESULTS_DIR/comparison-rounds.txt" 2>&1 || true
	done
fi
log "results in $RESULTS_DIR (comparison*.txt, run-info.txt, *.json, *.txt)"
