#!/usr/bin/env python3
"""kafka-python (the pure-Python client, Debian's python3-kafka) against a broker.

Usage: kafkapython_roundtrip.py BOOTSTRAP TOPIC GROUP

Creates TOPIC (3 partitions) with the admin client, produces records with
every codec kafka-python can use here, reads them back with a group
consumer and commits; a second consumer of the group must then read
nothing old and exactly the records produced after it joined. The broker
version is left for kafka-python to probe (no api_version setting).

Prints one JSON object to stdout; "errors" lists whatever went wrong, so
the caller fails on any. Client logs go to stderr (KAFKAPYTHON_DEBUG=1 for
the debug level, with every request and response).
"""

import hashlib
import json
import logging
import os
import sys
import time

import kafka
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.codec import has_gzip, has_lz4, has_snappy, has_zstd
from kafka.errors import TopicAlreadyExistsError

PARTITIONS = 3
PER_CODEC = 40
BASE_TS = 1_700_000_000_000
CODECS = [("none", None, True), ("gzip", "gzip", has_gzip()), ("snappy", "snappy", has_snappy()),
          ("lz4", "lz4", has_lz4()), ("zstd", "zstd", has_zstd())]

errors = []


def record(codec, i):
    """The i-th record for codec: some have a null key or value, no headers, a large or empty value."""
    key = ("kp-%s-%d" % (codec, i)).encode()
    value = ("%s:%d;" % (codec, i) * (1 + i % 30)).encode()
    headers = [("codec", codec.encode()), ("i", str(i).encode())]
    if i % 11 == 4:
        key = None
    elif i % 13 == 6:
        value = None
    elif i % 10 == 3:
        headers = []
    elif i == 1:
        value = b"0123456789abcdef" * 4096  # 64 KiB
    elif i == 2:
        value = b""
        headers = [("empty", b"")]
    return key, value, headers, BASE_TS + i


def describe(key, value, headers, ts):
    return {
        "key": None if key is None else key.decode(),
        "value_sha256": None if value is None else hashlib.sha256(value).hexdigest(),
        "value_len": -1 if value is None else len(value),
        "headers": [[k, v.decode()] for k, v in headers],
        "timestamp": ts,
    }


def produce(bootstrap, topic, codec, recs, acked):
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type=codec,
                      linger_ms=5, retries=3, request_timeout_ms=15000, max_block_ms=30000)
    try:
        futs = [(r, p.send(topic, key=r[0], value=r[1], headers=r[2], timestamp_ms=r[3])) for r in recs]
        p.flush(timeout=30)
        for r, f in futs:
            md = f.get(timeout=30)
            where = "%d/%d" % (md.partition, md.offset)
            if where in acked:
                errors.append("offset %s acknowledged twice" % where)
            acked[where] = describe(*r)
        return p.config["api_version"]
    finally:
        p.close(timeout=10)


def consumer(bootstrap, topic, group):
    return KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                         auto_offset_reset="earliest", enable_auto_commit=False,
                         session_timeout_ms=10000, heartbeat_interval_ms=1000,
                         request_timeout_ms=30000, consumer_timeout_ms=1000)


def poll_for(c, want, timeout, quiet):
    """Polls until want records came or timeout passed, then quiet seconds more."""
    got = []
    deadline = time.time() + timeout
    while len(got) < want and time.time() < deadline:
        for recs in c.poll(timeout_ms=200).values():
            got.extend(recs)
    end = time.time() + quiet
    while time.time() < end:
        for recs in c.poll(timeout_ms=200).values():
            got.extend(recs)
    return got


def check_consumed(what, got, acked):
    seen = set()
    keys = []
    for r in got:
        where = "%d/%d" % (r.partition, r.offset)
        if where in seen:
            errors.append("%s: %s read twice" % (what, where))
        seen.add(where)
        want = acked.get(where)
        if want is None:
            errors.append("%s: unexpected record at %s" % (what, where))
            continue
        have = describe(r.key, r.value, [(k, v) for k, v in r.headers], r.timestamp)
        if have != want:
            errors.append("%s: %s is %s, want %s" % (what, where, have, want))
        keys.append(want["key"])
    return keys


def committed_of(c, topic):
    out = {}
    for p in range(PARTITIONS):
        out["%s/%d" % (topic, p)] = c.committed(TopicPartition(topic, p))
    return out


def main():
    bootstrap, topic, group = sys.argv[1:4]
    debug = os.environ.get("KAFKAPYTHON_DEBUG") == "1"
    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if debug else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    out = {"client": "kafka-python " + kafka.__version__, "errors": errors, "codecs": [], "codecs_missing": []}

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    out["api_version"] = ".".join(map(str, admin.config["api_version"]))
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)], timeout_ms=15000)
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)], timeout_ms=15000)
        errors.append("creating %s a second time succeeded" % topic)
    except TopicAlreadyExistsError:
        pass
    if topic not in admin.list_topics():
        errors.append("list_topics does not have %s" % topic)
    admin.close()

    acked = {}
    for name, codec, available in CODECS:
        if not available:
            out["codecs_missing"].append(name)
            continue
        try:
            produce(bootstrap, topic, codec, [record(name, i) for i in range(PER_CODEC)], acked)
            out["codecs"].append(name)
        except Exception as e:  # report and go on with the other codecs
            errors.append("produce with %s: %r" % (name, e))
    produced = len(acked)

    ends = {}
    for where in acked:
        p, o = map(int, where.split("/"))
        ends[p] = max(ends.get(p, 0), o + 1)
    for p in range(PARTITIONS):
        offs = sorted(int(w.split("/")[1]) for w in acked if int(w.split("/")[0]) == p)
        if offs != list(range(len(offs))) or not offs:
            errors.append("partition %d: acknowledged offsets %s are not dense from 0" % (p, offs[:5]))

    # The first member of the group reads everything and commits.
    c = consumer(bootstrap, topic, group)
    got = poll_for(c, produced, 60, 0.5)
    keys = check_consumed("first consumer", got, acked)
    if len(got) != produced:
        errors.append("first consumer read %d records, want %d" % (len(got), produced))
    out["first_assignment"] = sorted(tp.partition for tp in c.assignment())
    c.commit()
    want_committed = {"%s/%d" % (topic, p): ends.get(p, 0) for p in range(PARTITIONS)}
    out["committed_first"] = committed_of(c, topic)
    if out["committed_first"] != want_committed:
        errors.append("committed after the first consumer %s, want %s" % (out["committed_first"], want_committed))
    end_offsets = c.end_offsets([TopicPartition(topic, p) for p in range(PARTITIONS)])
    out["end_offsets"] = {"%s/%d" % (tp.topic, tp.partition): o for tp, o in end_offsets.items()}
    if out["end_offsets"] != want_committed:
        errors.append("end_offsets %s, want %s" % (out["end_offsets"], want_committed))
    c.close()

    # The second member reads nothing old, then exactly what came after it joined.
    c = consumer(bootstrap, topic, group)
    deadline = time.time() + 60
    old = []
    while len(c.assignment()) < PARTITIONS and time.time() < deadline:
        for recs in c.poll(timeout_ms=200).values():
            old.extend(recs)
    old.extend(poll_for(c, 0, 0, 2))
    out["second_assignment"] = sorted(tp.partition for tp in c.assignment())
    if old:
        errors.append("second consumer re-read %d old records, first at %d/%d" % (len(old), old[0].partition, old[0].offset))
    late = [(("late-%d" % i).encode(), ("v-late-%d" % i).encode(), [], BASE_TS + 10_000 + i) for i in range(12)]
    produce(bootstrap, topic, None, late, acked)
    got = poll_for(c, len(late), 30, 1)
    keys2 = check_consumed("second consumer", got, acked)
    want_keys = sorted(k.decode() for k, _, _, _ in late)
    if sorted(k for k in keys2 if k is not None) != want_keys or len(got) != len(late):
        errors.append("second consumer read %s, want exactly %s" % (sorted(map(str, keys2)), want_keys))
    c.commit()
    for where in acked:
        p, o = map(int, where.split("/"))
        ends[p] = max(ends.get(p, 0), o + 1)
    want_committed = {"%s/%d" % (topic, p): ends.get(p, 0) for p in range(PARTITIONS)}
    out["committed_second"] = committed_of(c, topic)
    if out["committed_second"] != want_committed:
        errors.append("committed after the second consumer %s, want %s" % (out["committed_second"], want_committed))
    c.close()

    out["produced"] = acked
    out["consumed_first"] = len(keys)
    out["consumed_second"] = len(keys2)
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # still one JSON line, so the caller shows what broke
        import traceback
        traceback.print_exc()
        errors.append("aborted: %r" % e)
        print(json.dumps({"client": "kafka-python " + kafka.__version__, "errors": errors}))
