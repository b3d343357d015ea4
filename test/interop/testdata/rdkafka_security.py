"""Log in to a MoonMQ broker through librdkafka (confluent_kafka) with the
security settings given, then produce and read back records.

Usage: rdkafka_security.py BOOTSTRAP TOPIC N SETTINGS_JSON
SETTINGS_JSON holds librdkafka properties (security.protocol, sasl.*,
ssl.*). With N = 0 the script only asks for metadata, which is how the Go
test checks that a bad login fails. Prints one JSON object on stdout:
{"client", "librdkafka", "produced", "consumed", "errors", "metadata_error"}.
"""

import json
import sys
import time

import confluent_kafka
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def main():
    bootstrap, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    settings = json.loads(sys.argv[4])
    errors = []

    def on_error(err):
        errors.append(str(err))

    def conf(**extra):
        c = {"bootstrap.servers": bootstrap, "error_cb": on_error}
        c.update(settings)
        c.update(extra)
        return c

    out = {
        "client": confluent_kafka.version()[0],
        "librdkafka": confluent_kafka.libversion()[0],
        "produced": 0,
        "consumed": [],
        "errors": errors,
        "metadata_error": "",
    }

    producer = Producer(conf(**{"acks": "all", "linger.ms": 5}))
    try:
        producer.list_topics(timeout=10)
    except KafkaException as e:
        out["metadata_error"] = str(e)
    if n == 0 or out["metadata_error"]:
        print(json.dumps(out))
        return

    acked = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append("delivery: %s" % err)
        else:
            acked.append(msg.offset())

    for i in range(n):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0, on_delivery=on_delivery)
    producer.flush(30)
    out["produced"] = len(acked)

    consumer = Consumer(conf(**{"group.id": "rdkafka-security", "enable.auto.commit": False}))
    consumer.assign([TopicPartition(topic, 0, 0)])
    deadline = time.time() + 30
    while len(out["consumed"]) < n and time.time() < deadline:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            errors.append("consume: %s" % msg.error())
            continue
        out["consumed"].append(msg.value().decode())
    consumer.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
