"""The client scenario of scenarios_test.go for kafka-python.

Usage: scenario_kafkapython.py BOOTSTRAP TOPIC GROUP N REPLICATION_FACTOR

kafka-python has no idempotent producer: acks=all with retries, one
request in flight, so a retry across a failover may store a record twice
(the test allows that only in the failover scenario). Otherwise as the
other drivers: create TOPIC, produce N records printing {"acked": V},
read TOPIC in group GROUP with commits printing {"consumed": V}, then
{"done": true, ...}.
"""

import json
import sys
import time

import kafka
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    bootstrap, topic, group = sys.argv[1].split(","), sys.argv[2], sys.argv[3]
    n, rf = int(sys.argv[4]), int(sys.argv[5])
    errors = []
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=60000)
    try:
        admin.create_topics([NewTopic(topic, 3, rf)], timeout_ms=60000)
    except TopicAlreadyExistsError:
        pass
    admin.close()

    acked = set()
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=20, retry_backoff_ms=200,
                      max_in_flight_requests_per_connection=1, compression_type="gzip")
    futures = []
    for i in range(n):
        v = "kafkapython-%d" % i
        futures.append((v, p.send(topic, key=("k%d" % (i % 7)).encode(), value=v.encode(),
                                  headers=[("i", str(i).encode())])))
        time.sleep(0.01)
        while futures and futures[0][1].is_done:
            fv, f = futures.pop(0)
            if f.succeeded():
                acked.add(fv)
                emit({"acked": fv})
            else:
                errors.append("send %s: %s" % (fv, f.exception))
    p.flush(120)
    for fv, f in futures:
        if f.is_done and f.succeeded():
            acked.add(fv)
            emit({"acked": fv})
        else:
            errors.append("send %s: %s" % (fv, f.exception if f.is_done else "no answer"))
    p.close()

    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False)
    seen = set()
    deadline = time.time() + 90
    while not acked <= seen and time.time() < deadline:
        batch = c.poll(timeout_ms=500)
        for recs in batch.values():
            for r in recs:
                v = r.value.decode()
                seen.add(v)
                emit({"consumed": v})
        if batch:
            try:
                c.commit()
            except Exception as e:  # a rebalance or a coordinator move
                errors.append("commit: %s" % e)
    c.close()
    emit({"done": True, "client": "kafka-python %s" % kafka.__version__, "errors": errors[:20]})


if __name__ == "__main__":
    main()
