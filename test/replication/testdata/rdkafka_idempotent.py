"""An idempotent librdkafka (confluent_kafka) producer, acks=all.

Produces N records to TOPIC through BOOTSTRAP (the test gives it one
follower of a replication group only) and prints one JSON object:
{"delivered": n, "errors": [...], "librdkafka": "..."}. librdkafka asks
"any broker" for its producer id; a follower must answer it.

Usage: rdkafka_idempotent.py BOOTSTRAP TOPIC N TIMEOUT_S
"""

import json
import sys

import confluent_kafka
from confluent_kafka import Producer


def main():
    bootstrap, topic, n, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    errors = []
    delivered = [0]

    def on_delivery(err, msg):
        if err is not None:
            errors.append("delivery: %s" % err)
        else:
            delivered[0] += 1

    p = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "error_cb": lambda err: errors.append("client error: %s" % err),
    })
    for i in range(n):
        p.produce(topic, value=("v%d" % i).encode(), key=("k%d" % (i % 7)).encode(), on_delivery=on_delivery)
        p.poll(0)
    left = p.flush(timeout)
    print(json.dumps({"delivered": delivered[0], "undelivered": left, "errors": errors[:20],
                      "librdkafka": confluent_kafka.libversion()[0]}))


if __name__ == "__main__":
    main()
