#!/usr/bin/env bash
# Failover time, MoonMQ against Apache Kafka: SIGKILL of the node that leads
# every partition, under acks=all load, -> first acks=all produce
# acknowledged by another node (and, with more than one partition, to an
# acknowledgement on every partition), over KILLS kills each, checking that
# no acknowledged record is lost. For each partition count of PARTITIONS,
# runs one after the other:
#   moonmq          a three-replica MoonMQ group in failover mode
#   kafka-default   three Kafka 4.x KRaft nodes (bench/kafka.sh), its defaults
#                   (broker.session.timeout.ms=9000)
#   kafka-fast      the same with broker.session.timeout.ms at its practical
#                   minimum (2500, heartbeats every 500 ms)
# and prints the medians and the ratios. See docs/BENCHMARKS.md, "Failover time".
#
#   bash bench/failover.sh             # 20 kills each, ~10 minutes
#   KILLS=5 SKIP_KAFKA=1 bash bench/failover.sh
#   PARTITIONS="1 1000" bash bench/failover.sh
#
# Environment:
#   KILLS=20             leader kills per system
#   PARTITIONS=1         partition counts of the topic, each a run of every
#                        system (names get -pN above one partition); every
#                        round produces one record to each partition
#   MOONMQ=PATH          use this moonmq binary instead of building ./cmd/moonmq
#   SKIP_KAFKA=1         MoonMQ only
#   RESULTS_DIR=DIR      where results go (default bench/results/failover-<timestamp>)
#   FAILOVER_ARGS        extra flags for bench/cmd/failoverbench
#                        (--backoff, --isr-lag-seconds, --ack-timeout, --workdir)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
KILLS=${KILLS:-20}
RESULTS_DIR=${RESULTS_DIR:-$here/results/failover-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$RESULTS_DIR"

work=$(mktemp -d "${TMPDIR:-/tmp}/moonmq-failover.XXXXXX")
trap 'rm -rf "$work"' EXIT
source "$here/kafka.sh"

if [[ -z ${MOONMQ:-} ]]; then
	echo "==> building moonmq" >&2
	(cd "$root" && go build -o "$work/moonmq" ./cmd/moonmq)
	MOONMQ=$work/moonmq
fi
echo "==> building failoverbench" >&2
(cd "$here" && go build -o "$work/failoverbench" ./cmd/failoverbench)
echo "started: $(date -u +%FT%TZ); uptime: $(uptime)" | tee "$RESULTS_DIR/run-info.txt" >&2

run() { # NAME FLAGS...
	local name=$1 rc=0
	shift
	echo "==> $name: $KILLS kills" >&2
	# shellcheck disable=SC2086
	"$work/failoverbench" --kills "$KILLS" --name "$name" --json "$RESULTS_DIR/$name.json" "$@" ${FAILOVER_ARGS:-} |
		tee "$RESULTS_DIR/$name.txt" || rc=$?
	[[ $rc == 0 ]] || echo "==> $name: failoverbench exited with $rc" >&2
	return $rc
}

rc=0
if [[ ${SKIP_KAFKA:-0} != 1 ]]; then
	kafka_classpath >/dev/null
	cp=$KAFKA_CACHE/classpath.txt
	java=${JAVA_HOME:+$JAVA_HOME/bin/}java
fi
for n in ${PARTITIONS:-1}; do
	sfx=""
	[[ $n == 1 ]] || sfx=-p$n
	run moonmq$sfx --moonmq "$MOONMQ" --partitions "$n" || rc=1
	if [[ ${SKIP_KAFKA:-0} != 1 ]]; then
		run kafka-default$sfx --system kafka --java "$java" --kafka-classpath "$cp" --partitions "$n" || rc=1
		run kafka-fast$sfx --system kafka --java "$java" --kafka-classpath "$cp" --partitions "$n" \
			--kafka-extra broker.session.timeout.ms=2500,broker.heartbeat.interval.ms=500 || rc=1
	fi
done
echo "after: $(uptime)" >>"$RESULTS_DIR/run-info.txt"

python3 - "$RESULTS_DIR" ${PARTITIONS:-1} <<'PY' | tee "$RESULTS_DIR/comparison.txt"
import json, os, sys
d = sys.argv[1]
for count in sys.argv[2:]:
    sfx = "" if count == "1" else "-p" + count
    rs = {}
    for n in ("moonmq", "kafka-default", "kafka-fast"):
        p = os.path.join(d, n + sfx + ".json")
        if os.path.exists(p):
            rs[n] = json.load(open(p))
    print()
    print("%s partition%s; 'all': to an ack on every partition" % (count, "" if count == "1" else "s"))
    print("%-14s %6s %10s %10s %14s %8s %6s" % ("system", "kills", "median ms", "max ms", "all median ms", "no ack", "lost"))
    for n, r in rs.items():
        print("%-14s %6d %10.0f %10.0f %14.0f %8d %6d" % (n, r["kills"], r["median_ms"], r["max_ms"],
              r.get("all_median_ms", r["median_ms"]), r["kills_without_ack"], r["lost_duplicated_or_moved"]))
    m = rs.get("moonmq")
    for n in ("kafka-default", "kafka-fast"):
        if m and n in rs and rs[n]["median_ms"] > 0:
            ratio = m["median_ms"] / rs[n]["median_ms"]
            target = " (target <= 0.2x: %s)" % ("met" if ratio <= 0.2 else "MISSED") if n == "kafka-default" else ""
            print("moonmq/%s median: %.3fx%s" % (n, ratio, target))
            if count != "1" and rs[n].get("all_median_ms", 0) > 0:
                print("moonmq/%s median to every partition: %.3fx" % (n, m["all_median_ms"] / rs[n]["all_median_ms"]))
PY
echo "==> results in $RESULTS_DIR" >&2
exit $rc
