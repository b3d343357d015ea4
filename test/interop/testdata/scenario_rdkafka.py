"""The client scenario of scenarios_test.go for librdkafka (confluent_kafka).

Usage: scenario_rdkafka.py BOOTSTRAP TOPIC GROUP N REPLICATION_FACTOR

Creates TOPIC (3 partitions) with the admin client, produces N records with
an idempotent acks=all producer (gzip, keys, headers), printing
{"acked": V} per acknowledged record, then reads TOPIC in consumer group
GROUP with commits, printing {"consumed": V}, until every acknowledged
value was read; last {"done": true, ...}.
"""

import json
import sys
import time

import confluent_kafka
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    bootstrap, topic, group = sys.argv[1], sys.argv[2], sys.argv[3]
    n, rf = int(sys.argv[4]), int(sys.argv[5])
    errors = []

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for _, f in admin.create_topics([NewTopic(topic, 3, rf)], request_timeout=60).items():
        try:
            f.result(60)
        except KafkaException as e:
            if e.args[0].code() != confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:
                raise

    acked = set()

    def on_delivery(err, msg):
        v = msg.value().decode()
        if err is not None:
            errors.append("send %s: %s" % (v, err))
        else:
            acked.add(v)
            emit({"acked": v})

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "compression.type": "gzip", "linger.ms": 5})
    for i in range(n):
        v = "rdkafka-%d" % i
        p.produce(topic, value=v.encode(), key=("k%d" % (i % 7)).encode(),
                  headers=[("i", str(i).encode())], on_delivery=on_delivery)
        p.poll(0)
        time.sleep(0.01)
    if p.flush(120) > 0:
        errors.append("records still undelivered after 120 s")

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    seen = set()
    deadline = time.time() + 90
    while not acked <= seen and time.time() < deadline:
        msgs = c.consume(500, 0.5)
        for m in msgs:
            if m.error():
                errors.append("consume: %s" % m.error())
                continue
            v = m.value().decode()
            seen.add(v)
            emit({"consumed": v})
        if msgs:
            try:
                c.commit(asynchronous=False)
            except KafkaException as e:
                errors.append("commit: %s" % e)
    c.close()
    emit({"done": True, "client": "confluent_kafka %s, librdkafka %s" % (confluent_kafka.version()[0], confluent_kafka.libversion()[0]),
          "errors": errors[:20]})


if __name__ == "__main__":
    main()
