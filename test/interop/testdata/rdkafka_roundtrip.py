"""Round trip through librdkafka (confluent_kafka) against a MoonMQ broker.

Creates a topic with the admin client, produces records with acks=all once
per compression codec, then reads everything back with a consumer that only
assign()s partitions (no group membership, no offset commits). Prints one
JSON object on stdout; the Go test decides what is right.

Usage: rdkafka_roundtrip.py BOOTSTRAP TOPIC PARTITIONS N_PER_CODEC
Set MOONMQ_RDKAFKA_DEBUG (e.g. "protocol,fetch,broker") for librdkafka
debug logs on stderr.
"""

import json
import os
import sys
import time

import confluent_kafka
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def value_for(codec, i):
    # Must match rdkafkaValue in interop_test.go.
    return ("%s:%d;" % (codec, i)) * (1 + i % 50)


def main():
    bootstrap, topic = sys.argv[1], sys.argv[2]
    partitions, n = int(sys.argv[3]), int(sys.argv[4])
    debug = os.environ.get("MOONMQ_RDKAFKA_DEBUG", "")
    errors = []

    def on_error(err):
        errors.append("client error: %s" % err)

    def base_conf():
        conf = {"bootstrap.servers": bootstrap, "error_cb": on_error}
        if debug:
            conf["debug"] = debug
        return conf

    out = {
        "client": confluent_kafka.version()[0],
        "librdkafka": confluent_kafka.libversion()[0],
        "produced": [],
        "consumed": [],
        "errors": errors,
    }

    admin = AdminClient(base_conf())
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)],
        operation_timeout=10,
        request_timeout=10,
    )
    try:
        futures[topic].result(timeout=15)
    except Exception as e:  # noqa: BLE001 - reported to the Go side
        errors.append("create_topics: %s" % e)

    for codec in CODECS:
        conf = base_conf()
        conf.update(
            {
                "acks": "all",
                "compression.type": codec,
                "enable.idempotence": False,
                "linger.ms": 20,
            }
        )
        p = Producer(conf)

        def on_delivery(err, msg, codec=codec):
            if err is not None:
                errors.append("delivery %s: %s" % (msg.key(), err))
                return
            out["produced"].append(
                {
                    "key": msg.key().decode(),
                    "partition": msg.partition(),
                    "offset": msg.offset(),
                }
            )

        for i in range(n):
            p.produce(
                topic,
                key=("%s-%d" % (codec, i)).encode(),
                value=value_for(codec, i).encode(),
                partition=i % partitions,
                headers=[("codec", codec.encode()), ("i", str(i).encode())],
                on_delivery=on_delivery,
            )
            p.poll(0)
        left = p.flush(15)
        if left:
            errors.append("%s: %d records not delivered after flush" % (codec, left))

    c = Consumer(
        dict(
            base_conf(),
            **{
                # librdkafka insists on a group.id, but with assign() only and
                # no commits it should never need the group coordinator.
                "group.id": "moonmq-interop-assign-only",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": True,
                # Small fetches, so each partition takes several round
                # trips and responses end mid-way through the log.
                "fetch.max.bytes": 1 << 20,
                "max.partition.fetch.bytes": 8192,
            }
        )
    )
    c.assign(
        [
            TopicPartition(topic, part, confluent_kafka.OFFSET_BEGINNING)
            for part in range(partitions)
        ]
    )
    want = len(out["produced"])
    at_eof = set()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if len(out["consumed"]) >= want and len(at_eof) == partitions:
            break
        msg = c.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                at_eof.add(msg.partition())
            else:
                errors.append("consume: %s" % msg.error())
            continue
        at_eof.discard(msg.partition())
        out["consumed"].append(
            {
                "key": msg.key().decode(),
                "value": msg.value().decode(),
                "partition": msg.partition(),
                "offset": msg.offset(),
                "headers": [[k, v.decode()] for k, v in (msg.headers() or [])],
            }
        )
    c.close()
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
