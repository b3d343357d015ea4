"""The client scenario of scenarios_test.go for kcat (librdkafka's CLI).

Usage: scenario_kcat.py BOOTSTRAP TOPIC GROUP N REPLICATION_FACTOR

kcat has no admin command, so the topic is created by auto-creation (a
Metadata request naming it; through a follower the leader creates it).
Produces N lines with `kcat -P` (idempotent, acks=all, gzip, keys): kcat
exits 0 only when every message was delivered, and each is then printed
as {"acked": V}. Reads them back with the balanced consumer `kcat -G`
until N messages arrived, printing {"consumed": V}, and runs it again
for the rest if it gave up on a dead bootstrap broker; then {"done": true}.
"""

import json
import os
import re
import subprocess
import sys


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    bootstrap, topic, group, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    kcat = os.environ.get("KCAT", "kcat")
    errors = []
    values = ["kcat-%d" % i for i in range(n)]
    # Three runs of kcat -P, a third each: kcat confirms delivery only as
    # it exits, and the test kills the leader after a third is confirmed,
    # so the kill lands while the second run produces.
    step = max(1, n // 3)
    for start in range(0, n, step):
        chunk = values[start:start + step]
        lines = "".join("k%d:%s\n" % (i % 7, v) for i, v in enumerate(chunk, start))
        p = subprocess.run([kcat, "-b", bootstrap, "-P", "-t", topic, "-K", ":", "-z", "gzip",
                            "-X", "enable.idempotence=true", "-X", "acks=all", "-X", "message.timeout.ms=120000",
                            "-X", "allow.auto.create.topics=true"],
                           input=lines.encode(), capture_output=True, timeout=180)
        if p.returncode != 0:
            errors.append("kcat -P exited %d: %s" % (p.returncode, p.stderr.decode()[-2000:]))
            continue
        for v in chunk:
            emit({"acked": v})
    # kcat -G gives up when every broker it has tried is down; librdkafka
    # tries one bootstrap broker at a time, so a first try at the killed
    # leader ends the run ("All broker connections are down"). Run it
    # again, as a user would, for what is still missing: the group's
    # committed offsets carry on where the last run left off. The same
    # for librdkafka's own assertion in rd_kafka_broker_destroy_final
    # (confluentinc/librdkafka#3608, open): the client aborts now and then
    # when it drops a broker that metadata no longer lists (the killed
    # leader) while a leader change (a moved partition) refreshes it.
    consumed = set()
    for attempt in range(5):
        c = subprocess.run([kcat, "-b", bootstrap, "-G", group, topic, "-c", str(n - len(consumed)), "-f", "%s\\n",
                            "-X", "auto.offset.reset=earliest"],
                           capture_output=True, timeout=120)
        for v in c.stdout.decode().split("\n"):
            if v:
                consumed.add(v)
                emit({"consumed": v})
        if len(consumed) >= n:
            break
        if c.returncode == 0:
            continue  # some of its -c count were records read before
        errors.append("kcat -G exited %d: %s" % (c.returncode, c.stderr.decode()[-2000:]))
        err = c.stderr.decode()
        if "All broker connections are down" not in err and "rd_kafka_broker_destroy_final" not in err:
            break
    version = subprocess.run([kcat, "-V"], capture_output=True).stdout.decode()
    m = re.search(r"Version (\S+) .*librdkafka (\S+)", version)
    emit({"done": True, "client": "kcat %s, librdkafka %s" % m.groups() if m else "kcat", "errors": errors})


if __name__ == "__main__":
    main()
