#!/usr/bin/env bash
# Measures failover time of a three-replica MoonMQ group in failover mode:
# SIGKILL of the serving leader -> first acks=all produce acknowledged by the
# new leader, over KILLS kills, and checks that no acknowledged record is lost.
# See docs/BENCHMARKS.md, "Failover time".
#
#   bash bench/failover.sh             # 20 kills, ~2 minutes
#   KILLS=10 bash bench/failover.sh
#
# Environment:
#   KILLS=20             leader kills
#   MOONMQ=PATH          use this moonmq binary instead of building ./cmd/moonmq
#   FAILOVER_ARGS        extra flags for bench/cmd/failoverbench
#                        (--backoff, --isr-lag-seconds, --ack-timeout, --workdir)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
KILLS=${KILLS:-20}

work=$(mktemp -d "${TMPDIR:-/tmp}/moonmq-failover.XXXXXX")
trap 'rm -rf "$work"' EXIT

if [[ -z ${MOONMQ:-} ]]; then
	echo "==> building moonmq" >&2
	(cd "$root" && go build -o "$work/moonmq" ./cmd/moonmq)
	MOONMQ=$work/moonmq
fi
echo "==> building failoverbench" >&2
(cd "$here" && go build -o "$work/failoverbench" ./cmd/failoverbench)

# shellcheck disable=SC2086
"$work/failoverbench" --moonmq "$MOONMQ" --kills "$KILLS" ${FAILOVER_ARGS:-}
