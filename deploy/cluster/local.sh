#!/usr/bin/env bash
# A cluster of replication groups on this machine, for trying cluster mode
# (docs/CLUSTER.md): groups of three brokers each, on loopback, with the
# metadata log on the first two brokers of g1 and the first of g2.
#
#   bash deploy/cluster/local.sh start [GROUPS]   # write configs, start GROUPS groups (default 2)
#   bash deploy/cluster/local.sh add-group        # start one more group of three
#   bash deploy/cluster/local.sh kill ID          # kill -9 broker ID
#   bash deploy/cluster/local.sh restart ID       # start broker ID again on its data
#   bash deploy/cluster/local.sh status           # which brokers run, and `moonmq cluster status`
#   bash deploy/cluster/local.sh stop             # stop every broker (data stays)
#
# Broker N (1-9) listens for clients on 127.0.0.1:9N92, replicates on 9N94
# and serves /metrics and /stats on 9N96; its config is DIR/broker-N.json,
# its data DIR/data-N and its log DIR/broker-N.log.
#
# Environment:
#   DIR=./moonmq-cluster   where configs, data, logs and pids go
#   MOONMQ=moonmq          the moonmq binary (default: the one on PATH, else
#                          built from this checkout into DIR/bin)
#   AUTO_BALANCE=false     Cluster.AutoBalance on every broker
set -euo pipefail

DIR=${DIR:-./moonmq-cluster}
AUTO_BALANCE=${AUTO_BALANCE:-false}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

die() {
	echo "local.sh: $*" >&2
	exit 1
}

moonmq_bin() {
	if [[ -n ${MOONMQ:-} ]]; then
		echo "$MOONMQ"
	elif command -v moonmq >/dev/null; then
		command -v moonmq
	else
		if [[ ! -x $DIR/bin/moonmq ]]; then
			echo "building moonmq into $DIR/bin" >&2
			mkdir -p "$DIR/bin"
			(cd "$root" && go build -o "$(cd "$DIR/bin" && pwd)/moonmq" ./cmd/moonmq)
		fi
		echo "$DIR/bin/moonmq"
	fi
}

client_port() { echo $((9000 + $1 * 100 + 92)); }
repl_port() { echo $((9000 + $1 * 100 + 94)); }
metrics_port() { echo $((9000 + $1 * 100 + 96)); }

# config ID: broker ID's config; group g = the ids (g-1)*3+1 .. g*3, the
# first of them the group's initial leader.
config() {
	local id=$1 g first peers="" o
	g=$(((id - 1) / 3 + 1))
	first=$(((g - 1) * 3 + 1))
	for o in $first $((first + 1)) $((first + 2)); do
		[[ $o == "$id" ]] && continue
		peers+="${peers:+,}
      {\"Id\": $o, \"Address\": \"127.0.0.1:$(repl_port "$o")\", \"ClientAddress\": \"127.0.0.1:$(client_port "$o")\"}"
	done
	local role=follower
	[[ $id == "$first" ]] && role=leader
	cat <<EOF
{"Server": {
  "Host": "127.0.0.1", "Port": $(client_port "$id"), "DataDir": "$DIR/data-$id",
  "MetricsPort": $(metrics_port "$id"),
  "Replication": {
    "Enabled": true, "ReplicaId": $id, "Role": "$role",
    "ReplicateHost": "127.0.0.1", "ReplicatePort": $(repl_port "$id"),
    "ClientAddress": "127.0.0.1:$(client_port "$id")", "Token": "local-cluster-secret",
    "Failover": {"Enabled": true},
    "Peers": [$peers]
  },
  "Cluster": {
    "Enabled": true, "Experimental": true, "ClusterId": "local",
    "BrokerId": $id, "GroupId": "g$g", "AutoBalance": $AUTO_BALANCE,
    "MetadataVoters": [
      {"Id": 1, "Address": "127.0.0.1:$(repl_port 1)"},
      {"Id": 2, "Address": "127.0.0.1:$(repl_port 2)"},
      {"Id": 4, "Address": "127.0.0.1:$(repl_port 4)"}]
  }
}}
EOF
}

running() { [[ -f $DIR/broker-$1.pid ]] && kill -0 "$(cat "$DIR/broker-$1.pid")" 2>/dev/null; }

start_broker() {
	local id=$1 bin
	bin=$(moonmq_bin)
	if running "$id"; then
		echo "broker $id runs already (pid $(cat "$DIR/broker-$id.pid"))"
		return
	fi
	[[ -f $DIR/broker-$id.json ]] || config "$id" >"$DIR/broker-$id.json"
	"$bin" serve --config "$DIR/broker-$id.json" >>"$DIR/broker-$id.log" 2>&1 &
	echo $! >"$DIR/broker-$id.pid"
	echo "broker $id (g$(((id - 1) / 3 + 1))): clients 127.0.0.1:$(client_port "$id"), pid $!, log $DIR/broker-$id.log"
}

groups_started() {
	local n=0
	while [[ -f $DIR/broker-$((n * 3 + 1)).json ]]; do n=$((n + 1)); done
	echo "$n"
}

bootstrap() { echo "127.0.0.1:$(client_port 1),127.0.0.1:$(client_port 4)"; }

cmd=${1:-}
[[ -n $cmd ]] || die "usage: local.sh start [GROUPS] | add-group | kill ID | restart ID | status | stop"
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
case $cmd in
start)
	groups=${2:-2}
	[[ $groups =~ ^[2-3]$ ]] || die "GROUPS must be 2 or 3 (the metadata voters are brokers 1, 2 and 4; broker ids stop at 9)"
	for id in $(seq 1 $((groups * 3))); do start_broker "$id"; done
	echo "bootstrap: $(bootstrap)   (moonmq cluster status --bootstrap $(bootstrap))"
	;;
add-group)
	g=$(($(groups_started) + 1))
	[[ $g == 3 ]] || die "this script runs 2 or 3 groups; g$g would need broker ids past 9"
	for id in $(((g - 1) * 3 + 1)) $(((g - 1) * 3 + 2)) $((g * 3)); do start_broker "$id"; done
	;;
kill)
	[[ ${2:-} =~ ^[1-9]$ ]] || die "kill wants a broker id, 1-9"
	running "$2" || die "broker $2 is not running"
	kill -9 "$(cat "$DIR/broker-$2.pid")"
	echo "killed broker $2 (kill -9)"
	;;
restart)
	[[ ${2:-} =~ ^[1-9]$ ]] || die "restart wants a broker id, 1-9"
	start_broker "$2"
	;;
status)
	for f in "$DIR"/broker-*.json; do
		[[ -f $f ]] || continue
		id=${f##*/broker-}
		id=${id%.json}
		if running "$id"; then echo "broker $id: running"; else echo "broker $id: stopped"; fi
	done
	"$(moonmq_bin)" cluster status --bootstrap "$(bootstrap)" || true
	;;
stop)
	for f in "$DIR"/broker-*.pid; do
		[[ -f $f ]] || continue
		kill -TERM "$(cat "$f")" 2>/dev/null || true
		rm -f "$f"
	done
	echo "stopped; data stays in $DIR (rm -rf it to start afresh)"
	;;
*)
	die "unknown command $cmd"
	;;
esac
