"""Consumer groups and transactions through librdkafka (confluent_kafka)
against a MoonMQ broker. Prints one JSON object on stdout; the Go test
decides what is right.

Usage:
  rdkafka_groups.py group BOOTSTRAP TOPIC GROUP WANT
      Subscribe to TOPIC in GROUP, read until at least WANT records arrived
      and every assigned partition is at its end, commit synchronously,
      report what was read, the assignment and the committed offsets.
  rdkafka_groups.py txn BOOTSTRAP TOPIC INPUT GROUP TXN_ID
      A transactional producer (TXN_ID) that also consumes INPUT in GROUP:
      txn 1 writes c1-0..9 and the group's INPUT position after 7 records,
      and commits; txn 2 writes ab-0..9 and the position after 9 records,
      and aborts; txn 3 writes c3-0..9 and stays open while read_committed
      and read_uncommitted consumers read TOPIC to its end, then commits and
      both read again.

Set MOONMQ_RDKAFKA_DEBUG (e.g. "cgrp,protocol,eos") for librdkafka debug
logs on stderr.
"""

import json
import os
import sys
import time

import confluent_kafka
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

DEBUG = os.environ.get("MOONMQ_RDKAFKA_DEBUG", "")
errors = []


def on_error(err):
    errors.append("client error: %s" % err)


def conf(bootstrap, **kw):
    c = {"bootstrap.servers": bootstrap, "error_cb": on_error}
    if DEBUG:
        c["debug"] = DEBUG
    c.update({k.replace("_", "."): v for k, v in kw.items()})
    return c


def rec(msg):
    return {
        "key": msg.key().decode() if msg.key() is not None else None,
        "partition": msg.partition(),
        "offset": msg.offset(),
    }


def offsets(tps):
    return {"%s/%d" % (tp.topic, tp.partition): tp.offset for tp in tps}


def read_to_end(c, want, seconds, what, partitions=None):
    """Poll c until at least want records arrived and every partition (the
    assignment's, when partitions is None) is at its end."""
    got = []
    at_eof = set()
    deadline = time.monotonic() + seconds
    while True:
        parts = partitions
        if parts is None:
            parts = {tp.partition for tp in c.assignment()}
        if len(got) >= want and parts and parts <= at_eof:
            return got
        if time.monotonic() > deadline:
            errors.append(
                "%s: timed out with %d records (want %d), at end: %s of %s"
                % (what, len(got), want, sorted(at_eof), sorted(parts))
            )
            return got
        msg = c.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                at_eof.add(msg.partition())
            else:
                errors.append("%s: consume: %s" % (what, msg.error()))
            continue
        at_eof.discard(msg.partition())
        got.append(rec(msg))


def group_mode(bootstrap, topic, group, want):
    out = {"errors": errors}
    c = Consumer(
        conf(
            bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            enable_partition_eof=True,
            session_timeout_ms=10000,
            heartbeat_interval_ms=500,
        )
    )
    c.subscribe([topic])
    out["consumed"] = read_to_end(c, want, 20, "group consumer")
    out["assignment"] = sorted(tp.partition for tp in c.assignment())
    if out["consumed"]:
        try:
            res = c.commit(asynchronous=False)
            for tp in res or []:
                if tp.error:
                    errors.append("commit %s/%d: %s" % (tp.topic, tp.partition, tp.error))
        except KafkaException as e:
            errors.append("commit: %s" % e)
    out["committed"] = offsets(c.committed(c.assignment(), timeout=10))
    c.close()
    return out


def txn_mode(bootstrap, topic, input_topic, group, txn_id):
    out = {"errors": errors}
    md = Consumer(conf(bootstrap, group_id="moonmq-interop-metadata")).list_topics(topic, timeout=10)
    partitions = set(md.topics[topic].partitions)

    # The consume side of consume-transform-produce: a group member on INPUT.
    src = Consumer(
        conf(
            bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            session_timeout_ms=10000,
            heartbeat_interval_ms=500,
        )
    )
    src.subscribe([input_topic])

    def consume_input(n):
        deadline = time.monotonic() + 20
        while n > 0 and time.monotonic() < deadline:
            msg = src.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                errors.append("input consume: %s" % msg.error())
                continue
            n -= 1
        if n:
            errors.append("input: %d records short" % n)
        return src.position(src.assignment())

    p = Producer(conf(bootstrap, transactional_id=txn_id, linger_ms=5))
    delivered = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append("delivery %s: %s" % (msg.key(), err))
        else:
            delivered.append(rec(msg))

    def produce(prefix):
        for i in range(10):
            p.produce(topic, key=("%s-%d" % (prefix, i)).encode(), value=b"v", partition=i % len(partitions), on_delivery=on_delivery)

    steps = []
    try:
        p.init_transactions(15)
        steps.append("init")
        pos7 = consume_input(7)
        out["position_txn1"] = offsets(pos7)
        p.begin_transaction()
        produce("c1")
        p.send_offsets_to_transaction(pos7, src.consumer_group_metadata(), 15)
        p.commit_transaction(15)
        steps.append("txn1 committed")

        pos9 = consume_input(2)
        out["position_txn2"] = offsets(pos9)
        p.begin_transaction()
        produce("ab")
        p.send_offsets_to_transaction(pos9, src.consumer_group_metadata(), 15)
        p.flush(15)
        p.abort_transaction(15)
        steps.append("txn2 aborted")

        p.begin_transaction()
        produce("c3")
        if p.flush(15):
            errors.append("txn3: records not delivered")
        steps.append("txn3 open")
    except KafkaException as e:
        errors.append("transactions after %s: %s" % (steps, e))
        out["steps"] = steps
        return out

    def reader(isolation):
        c = Consumer(
            conf(
                bootstrap,
                group_id="moonmq-interop-assign-only",
                enable_auto_commit=False,
                enable_auto_offset_store=False,
                enable_partition_eof=True,
                isolation_level=isolation,
            )
        )
        c.assign([TopicPartition(topic, part, confluent_kafka.OFFSET_BEGINNING) for part in partitions])
        return c

    rc, ru = reader("read_committed"), reader("read_uncommitted")
    out["rc_open"] = read_to_end(rc, 10, 15, "read_committed, txn3 open", partitions)
    out["ru_open"] = read_to_end(ru, 30, 15, "read_uncommitted, txn3 open", partitions)
    try:
        p.commit_transaction(15)
        steps.append("txn3 committed")
    except KafkaException as e:
        errors.append("commit txn3: %s" % e)
    out["rc_after"] = read_to_end(rc, 10, 15, "read_committed, after txn3", partitions)
    out["ru_after"] = read_to_end(ru, 0, 15, "read_uncommitted, after txn3", partitions)
    rc.close()
    ru.close()

    out["committed"] = offsets(src.committed(src.assignment(), timeout=10))
    src.close()
    out["steps"] = steps
    out["delivered"] = delivered
    return out


def main():
    mode, bootstrap = sys.argv[1], sys.argv[2]
    if mode == "group":
        out = group_mode(bootstrap, sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif mode == "txn":
        out = txn_mode(bootstrap, *sys.argv[3:7])
    else:
        raise SystemExit("unknown mode %r" % mode)
    out["librdkafka"] = confluent_kafka.libversion()[0]
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
