#!/usr/bin/env bash
# Cluster mode against one replication group: acks=all pipelined produce
# with one group of 3 replicas (3 processes), then two groups of 3 in
# cluster mode (6 processes, each topic split between the groups), one
# after the other with the same `moonmq bench` load, and the ratio of the
# two. On one machine the groups share its cores and its disk, so the
# ratio says what the second group costs here, not what it gives on
# machines of their own: read it with the CPU per record beside it. See
# docs/BENCHMARKS.md, "Cluster mode".
#
#   bash bench/cluster.sh            # 8 s per case, ~3 minutes
#
# Last, with two groups: produce to a topic wholly in group 2, alone and
# then while group 1's leader is killed with SIGKILL a third of the way
# in: group 2's latency while another group fails over.
#
# Environment:
#   DURATION=8s          produce time per case
#   PARTITIONS=8,64      partition counts (one partition cannot be split)
#   RECORD_SIZE=1024
#   RESULTS_DIR=DIR      where reports go (default bench/results/cluster-<timestamp>)
#   MOONMQ=PATH          use this moonmq binary instead of building ./cmd/moonmq
#   GOMAXPROCS_EACH=N    run every broker process with GOMAXPROCS=N
#                        (the issue's "little CPU": 1); unset leaves Go's default
#   BENCH_ARGS           extra flags for `moonmq bench`
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")

DURATION=${DURATION:-8s}
PARTITIONS=${PARTITIONS:-8,64}
RECORD_SIZE=${RECORD_SIZE:-1024}
RESULTS_DIR=${RESULTS_DIR:-$here/results/cluster-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$RESULTS_DIR"
RESULTS_DIR=$(cd "$RESULTS_DIR" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/moonmq-cluster-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

log() { printf '==> %s\n' "$*" >&2; }

bin=$work/bin
mkdir -p "$bin"
log "building into $bin"
(cd "$here" && go build -o "$bin/" ./cmd/replbench ./cmd/benchcompare)
if [[ -z ${MOONMQ:-} ]]; then
	(cd "$root" && go build -o "$bin/moonmq" ./cmd/moonmq)
	MOONMQ=$bin/moonmq
fi
server=$MOONMQ
if [[ -n ${GOMAXPROCS_EACH:-} ]]; then
	server=$bin/moonmq-limited
	printf '#!/bin/sh\nGOMAXPROCS=%d exec "%s" "$@"\n' "$GOMAXPROCS_EACH" "$MOONMQ" >"$server"
	chmod +x "$server"
fi
{
	echo "moonmq: $MOONMQ ($("$MOONMQ" version 2>/dev/null || echo unknown version))"
	echo "tree: $(cd "$root" && git describe --always --dirty 2>/dev/null || echo unknown)"
	echo "started: $(date -u +%FT%TZ); uptime: $(uptime)"
	echo "duration=$DURATION partitions=$PARTITIONS record_size=$RECORD_SIZE gomaxprocs_each=${GOMAXPROCS_EACH:-default}"
} >"$RESULTS_DIR/run-info.txt"
cat "$RESULTS_DIR/run-info.txt" >&2

run() { # NAME GROUPS [replbench flags...]
	local name=$1 groups=$2 rc=0
	shift 2
	log "$name: $groups group(s) of 3 replicas"
	"$bin/replbench" --moonmq "$MOONMQ" --server "$server" --replicas 3 --groups "$groups" --name "$name" \
		--acks=-1 --duration "$DURATION" --partitions "$PARTITIONS" --modes pipelined --record-size "$RECORD_SIZE" \
		--bench-args "${BENCH_ARGS:-}" --json "$RESULTS_DIR/$name.json" --workdir "$work/$name" "$@" \
		2> >(tee "$RESULTS_DIR/$name.log" >&2) | tee "$RESULTS_DIR/$name.txt" || rc=$?
	[[ $rc == 0 ]] || log "$name: replbench exited with $rc (see $RESULTS_DIR/$name.log)"
	for f in "$work/$name"/r*.log; do [[ -f $f ]] && cp "$f" "$RESULTS_DIR/$name-$(basename "$f")"; done
	rm -rf "${work:?}/$name"
}

run moonmq-1x3 1
run moonmq-2x3 2 --other-group-failover

if [[ ! -f $RESULTS_DIR/moonmq-1x3.json || ! -f $RESULTS_DIR/moonmq-2x3.json ]]; then
	log "missing reports; nothing to compare"
	exit 1
fi
echo
# No target: on one machine two groups share what one had. The ratio and
# the CPU per record are the result.
"$bin/benchcompare" --out "$RESULTS_DIR/comparison.txt" --ratio-modes pipelined --max-p50 0 --min-consume 0 \
	"$RESULTS_DIR/moonmq-2x3.json" "$RESULTS_DIR/moonmq-1x3.json"
echo "after: $(uptime)" >>"$RESULTS_DIR/run-info.txt"
log "results in $RESULTS_DIR (comparison.txt, run-info.txt, *.json, *.txt, *.log)"
