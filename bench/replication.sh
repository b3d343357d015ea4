#!/usr/bin/env bash
# Replication throughput: acks=all produce with MoonMQ as a single node, as a
# 3-replica group in failover mode, Apache Kafka 4.x as three KRaft nodes
# (replication factor 3, min.insync.replicas=2: bench/kafka.sh) and NATS
# JetStream R3, one target and one case at a time, then the ratios of
# MoonMQ R3 to each. See docs/BENCHMARKS.md, "Replication throughput".
#
#   bash bench/replication.sh            # 8 s per case, ~5 minutes
#   QUICK=1 bash bench/replication.sh    # 2 s per case, ~2 minutes
#
# Environment:
#   DURATION=8s          produce time per case (QUICK: 2s)
#   PARTITIONS=1,8,64    partition counts (streams for NATS)
#   MODES=pipelined,one-at-a-time
#   RECORD_SIZE=1024
#   REPLICAS=3           MoonMQ group size and NATS stream replicas (3 or 5)
#   RESULTS_DIR=DIR      where reports go (default bench/results/repl-<timestamp>)
#   MOONMQ=PATH          use this moonmq binary instead of building ./cmd/moonmq
#   MOONMQ_SERVER=PATH   run the replicas with this binary (the load generator
#                        stays MOONMQ): to compare two builds of MoonMQ
#   SKIP_PEERS=1         leave Apache Kafka and NATS JetStream out
#   PROFILE=1            after the measured MoonMQ group cases, run one more
#                        (p=1 pipelined, 10 s) and save a CPU profile of every
#                        replica in RESULTS_DIR/profile/ (not in the numbers)
#   NATS_SYNC_ALWAYS=1   make JetStream fsync every message (default: it does not)
#   MOONMQ_SERVER_EXTRA  extra JSON members of the "Server" config object (both MoonMQ runs)
#   MOONMQ_REPLICATION_EXTRA  extra JSON members of the "Replication" object
#   BENCH_ARGS           extra flags for `moonmq bench`
#   SKIP_KAFKA=1         leave Apache Kafka out (it needs java and mvn)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")

QUICK=${QUICK:-0}
if [[ $QUICK == 1 ]]; then
	DURATION=${DURATION:-2s}
else
	DURATION=${DURATION:-8s}
fi
PARTITIONS=${PARTITIONS:-1,8,64}
MODES=${MODES:-pipelined,one-at-a-time}
RECORD_SIZE=${RECORD_SIZE:-1024}
REPLICAS=${REPLICAS:-3}
RESULTS_DIR=${RESULTS_DIR:-$here/results/repl-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$RESULTS_DIR"
RESULTS_DIR=$(cd "$RESULTS_DIR" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/moonmq-repl-bench.XXXXXX")
source "$here/kafka.sh"
trap 'kafka_stop; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

log() { printf '==> %s\n' "$*" >&2; }

bin=$work/bin
mkdir -p "$bin"
log "building into $bin"
(cd "$here" && go build -o "$bin/" ./cmd/replbench ./cmd/natsbench ./cmd/benchcompare)
if [[ -z ${MOONMQ:-} ]]; then
	(cd "$root" && go build -o "$bin/moonmq" ./cmd/moonmq)
	MOONMQ=$bin/moonmq
fi
{
	echo "moonmq: $MOONMQ ($("$MOONMQ" version 2>/dev/null || echo unknown version))"
	echo "tree: $(cd "$root" && git describe --always --dirty 2>/dev/null || echo unknown)"
	echo "started: $(date -u +%FT%TZ); uptime: $(uptime)"
	echo "duration=$DURATION partitions=$PARTITIONS modes=$MODES record_size=$RECORD_SIZE replicas=$REPLICAS"
} >"$RESULTS_DIR/run-info.txt"
cat "$RESULTS_DIR/run-info.txt" >&2

common=(--moonmq "$MOONMQ" --server "${MOONMQ_SERVER:-$MOONMQ}" --acks=-1 --duration "$DURATION" --partitions "$PARTITIONS"
	--modes "$MODES" --record-size "$RECORD_SIZE"
	--server-extra "${MOONMQ_SERVER_EXTRA:-}" --bench-args "${BENCH_ARGS:-}")

# replbench runs `moonmq bench` once per case; it creates each topic itself
# because a replication group refuses the replication factor 1 that
# `moonmq bench` asks for.
run_moonmq() { # NAME REPLICAS [extra replbench flags...]
	local name=$1 n=$2 rc=0
	shift 2
	log "$name: moonmq, $n replica(s)"
	"$bin/replbench" "${common[@]}" --replicas "$n" --name "$name" \
		--json "$RESULTS_DIR/$name.json" --workdir "$work/$name" "$@" \
		2> >(tee "$RESULTS_DIR/$name.log" >&2) | tee "$RESULTS_DIR/$name.txt" || rc=$?
	[[ $rc == 0 ]] || log "$name: replbench exited with $rc (see $RESULTS_DIR/$name.log)"
	# Keep the servers' logs, drop their data.
	for f in "$work/$name"/r*.log; do [[ -f $f ]] && cp "$f" "$RESULTS_DIR/$name-$(basename "$f")"; done
	rm -rf "$work/$name"
}

r1=moonmq-r1
rn=moonmq-r$REPLICAS
kn=kafka-r$REPLICAS
nn=nats-r$REPLICAS

run_moonmq "$r1" 1
profile=()
[[ ${PROFILE:-0} == 1 ]] && profile=(--profile-dir "$RESULTS_DIR/profile" --profile-seconds 8)
run_moonmq "$rn" "$REPLICAS" --replication-extra "${MOONMQ_REPLICATION_EXTRA:-}" "${profile[@]+"${profile[@]}"}"

if [[ ${SKIP_KAFKA:-0} != 1 && ${SKIP_PEERS:-0} != 1 ]]; then
	log "$kn: apache kafka, $REPLICAS KRaft nodes (its defaults: no fsync per message)"
	if kafka_start "$REPLICAS" "$work/$kn"; then
		rc=0
		# shellcheck disable=SC2086
		"$MOONMQ" bench --brokers "$KAFKA_BOOTSTRAP" --name "$kn" --json "$RESULTS_DIR/$kn.json" \
			--broker-pids "$(IFS=,; echo "${kafka_pids[*]}")" \
			--duration "$DURATION" --acks=-1 --partitions "$PARTITIONS" --modes "$MODES" \
			--record-size "$RECORD_SIZE" ${BENCH_ARGS:-} | tee "$RESULTS_DIR/$kn.txt" || rc=$?
		[[ $rc == 0 ]] || log "$kn: bench exited with $rc"
	else
		log "$kn: kafka did not start"
	fi
	kafka_stop
	for f in "$work/$kn"/kafka-*/server.log; do [[ -f $f ]] && cp "$f" "$RESULTS_DIR/$kn-$(basename "$(dirname "$f")").log"; done
	rm -rf "${work:?}/$kn"
fi

if [[ ${SKIP_PEERS:-0} != 1 ]]; then
	log "$nn: natsbench, $REPLICAS clustered nats-server processes, JetStream file storage"
	nats_args=()
	[[ ${NATS_SYNC_ALWAYS:-0} == 1 ]] && nats_args+=(--sync-always)
	rc=0
	"$bin/natsbench" --replicas "$REPLICAS" --name "$nn" --json "$RESULTS_DIR/$nn.json" --duration "$DURATION" \
		--partitions "$PARTITIONS" --modes "$MODES" --record-size "$RECORD_SIZE" "${nats_args[@]+"${nats_args[@]}"}" |
		tee "$RESULTS_DIR/$nn.txt" || rc=$?
	[[ $rc == 0 ]] || log "$nn: natsbench exited with $rc"
fi

reports=()
for f in "$rn" "$r1" "$kn" "$nn"; do
	[[ -f $RESULTS_DIR/$f.json ]] && reports+=("$RESULTS_DIR/$f.json")
done
if [[ ! -f $RESULTS_DIR/$rn.json ]] || ((${#reports[@]} < 2)); then
	log "missing reports; nothing to compare"
	exit 1
fi
echo
# Targets: R3 throughput ≥ 70% of R1, ≥ 1.5x Apache Kafka R3 and ≥ 1.5x
# NATS JetStream R3, judged on the pipelined cases; one-at-a-time ratios are printed as
# information (they measure a round trip, not throughput).
"$bin/benchcompare" --out "$RESULTS_DIR/comparison.txt" \
	--min-ratio "$r1=0.7,$kn=1.5,$nn=1.5" --max-cpu-ratio "$kn=0.5" --max-rss-ratio "$kn=0.2" --ratio-modes pipelined --max-p50 0 --min-consume 0 \
	"${reports[@]}"
echo "after: $(uptime)" >>"$RESULTS_DIR/run-info.txt"
log "results in $RESULTS_DIR (comparison.txt, run-info.txt, *.json, *.txt, *.log)"
