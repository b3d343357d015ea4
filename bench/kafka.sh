#!/usr/bin/env bash
# Apache Kafka 4.x (KRaft) on loopback, the first peer of every benchmark.
# Sourced by bench/run.sh and bench/replication.sh; run by hand it starts
# a node or a group and waits:
#
#   bash bench/kafka.sh 1      # one combined broker+controller (R1)
#   bash bench/kafka.sh 3      # three combined nodes (R3, replication factor 3,
#                              # min.insync.replicas=2)
#
# Kafka keeps its own defaults except what one machine needs (listeners,
# replication factors of the internal topics for R1). In particular it does
# not fsync each message: log.flush.interval.messages is unset, so a produce
# is acknowledged once it is in the page cache of the in-sync replicas.
# The JVM gets what kafka-server-start.sh gives it: a 1 GiB heap (-Xms1G
# -Xmx1G) and G1 with a 20 ms pause goal (kafka-run-class.sh).
#
# Environment:
#   KAFKA_CACHE=DIR   where the resolved classpath is kept
#                     (default ~/.cache/moonmq-bench/kafka; the jars are in ~/.m2)
#   KAFKA_HEAP_OPTS   override the heap flags
#   KAFKA_EXTRA       extra server.properties lines, one per line
#                     (e.g. broker.session.timeout.ms=...)

kafka_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KAFKA_CACHE=${KAFKA_CACHE:-$HOME/.cache/moonmq-bench/kafka}
KAFKA_HEAP_OPTS=${KAFKA_HEAP_OPTS:--Xms1G -Xmx1G}
KAFKA_JVM_OPTS=${KAFKA_JVM_OPTS:--server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true}
kafka_pids=()
kafka_ports=()
KAFKA_BOOTSTRAP=

kafka_log() { printf '==> kafka: %s\n' "$*" >&2; }

# kafka_classpath prints Kafka's runtime classpath, resolving it with Maven
# the first time.
kafka_classpath() {
	local cp=$KAFKA_CACHE/classpath.txt
	if [[ ! -s $cp || $kafka_here/kafka/pom.xml -nt $cp ]]; then
		command -v mvn >/dev/null || { kafka_log "mvn is not installed (apt-get install maven)"; return 1; }
		mkdir -p "$KAFKA_CACHE"
		kafka_log "resolving Apache Kafka from Maven Central (once; cached in ~/.m2 and $KAFKA_CACHE)"
		(cd "$kafka_here/kafka" && mvn -q -B compile -Dclasspath.file="$cp") >&2 || return 1
		rm -rf "$kafka_here/kafka/target"
	fi
	cat "$cp"
}

# free_port prints a loopback TCP port nothing accepts on (the scripts that
# source this file use it too). It picks below the kernel's ephemeral range,
# which outgoing connections draw from: a JVM takes seconds to bind, and a
# port from that range can be some connection's local end by then.
free_port() {
	local p low=32768
	read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
	((low > 12000)) || low=32768
	for _ in $(seq 100); do
		p=$((10000 + RANDOM % (low - 10000)))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	return 1
}

# kafka_cluster_id prints a random id as Kafka's Uuid.toString writes it
# (16 bytes, URL-safe base64, no padding, not starting with '-').
kafka_cluster_id() {
	local id
	while :; do
		id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
		[[ $id != -* ]] && { echo "$id"; return; }
	done
}

# kafka_start NODES DIR: format and start NODES (1 or 3) combined nodes
# with their data under DIR; sets KAFKA_BOOTSTRAP, kafka_pids and
# kafka_ports, and returns once every node accepts clients.
kafka_start() {
	local nodes=$1 dir=$2 cp java id voters="" i
	cp=$(kafka_classpath) || return 1
	java=${JAVA_HOME:+$JAVA_HOME/bin/}java
	id=$(kafka_cluster_id)
	local -a cports=()
	kafka_ports=()
	for ((i = 1; i <= nodes; i++)); do
		kafka_ports+=("$(free_port)")
		cports+=("$(free_port)")
		voters+="${voters:+,}$i@127.0.0.1:${cports[-1]}"
	done
	# Every partition on every node, acknowledged by a majority: the
	# durability MoonMQ's replication group gives.
	local rf=$nodes minisr=$((nodes / 2 + 1))
	KAFKA_BOOTSTRAP=
	for ((i = 1; i <= nodes; i++)); do
		local nd=$dir/kafka-$i port=${kafka_ports[i - 1]} cport=${cports[i - 1]}
		mkdir -p "$nd"
		cat >"$nd/server.properties" <<PROPS
process.roles=broker,controller
node.id=$i
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$nd/logs
default.replication.factor=$rf
min.insync.replicas=$minisr
offsets.topic.replication.factor=$rf
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$minisr
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$minisr
group.initial.rebalance.delay.ms=0
${KAFKA_EXTRA:-}
PROPS
		# shellcheck disable=SC2086
		"$java" $KAFKA_HEAP_OPTS $KAFKA_JVM_OPTS -cp "$cp" kafka.tools.StorageTool format \
			--cluster-id "$id" --config "$nd/server.properties" >"$nd/format.log" 2>&1 ||
			{ kafka_log "storage format of node $i failed:"; tail -20 "$nd/format.log" >&2; return 1; }
		# shellcheck disable=SC2086
		"$java" $KAFKA_HEAP_OPTS $KAFKA_JVM_OPTS -Dorg.slf4j.simpleLogger.showDateTime=true \
			-cp "$cp" kafka.Kafka "$nd/server.properties" >"$nd/server.log" 2>&1 &
		kafka_pids+=($!)
		KAFKA_BOOTSTRAP+="${KAFKA_BOOTSTRAP:+,}127.0.0.1:$port"
	done
	for ((i = 1; i <= nodes; i++)); do
		local ok=0
		for _ in $(seq 1200); do
			if (exec 3<>"/dev/tcp/127.0.0.1/${kafka_ports[i - 1]}") 2>/dev/null; then ok=1; break; fi
			kill -0 "${kafka_pids[i - 1]}" 2>/dev/null || break
			sleep 0.1
		done
		if ((!ok)); then
			kafka_log "node $i did not start; last lines of $dir/kafka-$i/server.log:"
			tail -20 "$dir/kafka-$i/server.log" >&2
			return 1
		fi
	done
	kafka_log "$nodes node(s) serving on $KAFKA_BOOTSTRAP"
}

# kafka_restart DIR: start the one node kafka_start 1 DIR formatted, on the
# data it holds (no format); sets kafka_pids. Returns at once: the caller
# measures how long the node takes to serve.
kafka_restart() {
	local dir=$1 cp java nd=$1/kafka-1
	cp=$(kafka_classpath) || return 1
	java=${JAVA_HOME:+$JAVA_HOME/bin/}java
	# shellcheck disable=SC2086
	"$java" $KAFKA_HEAP_OPTS $KAFKA_JVM_OPTS -Dorg.slf4j.simpleLogger.showDateTime=true \
		-cp "$cp" kafka.Kafka "$nd/server.properties" >>"$nd/server.log" 2>&1 &
	kafka_pids=($!)
}

# kafka_stop: SIGTERM every node (a clean shutdown) and wait.
kafka_stop() {
	local pid
	for pid in "${kafka_pids[@]+"${kafka_pids[@]}"}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${kafka_pids[@]+"${kafka_pids[@]}"}"; do wait "$pid" 2>/dev/null || true; done
	kafka_pids=()
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	set -euo pipefail
	dir=$(mktemp -d "${TMPDIR:-/tmp}/moonmq-kafka.XXXXXX")
	trap 'kafka_stop; rm -rf "$dir"' EXIT
	trap 'exit 130' INT TERM
	kafka_start "${1:-1}" "$dir"
	echo "bootstrap: $KAFKA_BOOTSTRAP (Ctrl-C stops and removes $dir)"
	wait
fi
