// The client scenario of test/interop/scenarios_test.go for kafkajs.
//
// Usage: node scenario.js BOOTSTRAP TOPIC GROUP N REPLICATION_FACTOR
//
// Creates TOPIC (3 partitions) with the admin client, produces N records
// with an idempotent producer (acks=all, gzip, keys, headers), printing
// {"acked":V} per acknowledged record, then reads TOPIC in consumer group
// GROUP (commits after each batch), printing {"consumed":V}, until every
// acknowledged value was read; last {"done":true,...}.
'use strict';
const { Kafka, CompressionTypes, logLevel } = require('kafkajs');

const [bootstrap, topic, group, nArg, rfArg] = process.argv.slice(2);
const n = Number(nArg);
const emit = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const errors = [];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const kafka = new Kafka({
    clientId: 'moonmq-scenario',
    brokers: bootstrap.split(','),
    logLevel: logLevel.NOTHING,
    retry: { retries: 20, initialRetryTime: 200, maxRetryTime: 2000 },
  });
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 3, replicationFactor: Number(rfArg) }], waitForLeaders: true });
  await admin.disconnect();

  const acked = new Set();
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  for (let i = 0; i < n; i++) {
    const v = `kafkajs-${i}`;
    try {
      await producer.send({
        topic, acks: -1, compression: CompressionTypes.GZIP,
        messages: [{ key: `k${i % 7}`, value: v, headers: { i: String(i) } }],
      });
      acked.add(v);
      emit({ acked: v });
    } catch (e) {
      errors.push(`send ${v}: ${e.message}`);
    }
  }
  await producer.disconnect();

  // Transactions (two committed, one aborted), read below by the
  // read_committed group consumer.
  const committed = new Set();
  const tp = kafka.producer({ transactionalId: `kafkajs-tx-${topic}`, idempotent: true, maxInFlightRequests: 1 });
  try {
    await tp.connect();
    for (let t = 0; t < 3; t++) {
      const commit = t !== 1;
      const txn = await tp.transaction();
      const vs = [];
      for (let i = 0; i < 5; i++) {
        vs.push(`kafkajstx-${commit ? 'c' : 'a'}-${t}-${i}`);
      }
      // One send() per record: kafkajs 2.2.4 drops the records of a
      // partition whose leader moves, during a send(), to a broker that
      // already acknowledged another partition of that send (it skips
      // brokers that answered, tulios/kafkajs#1303, fix proposed in
      // #1798), as a move between groups does. docs/COMPATIBILITY.md.
      for (let i = 0; i < vs.length; i++) {
        await txn.send({ topic, acks: -1, compression: CompressionTypes.GZIP, messages: [{ key: `k${i}`, value: vs[i] }] });
      }
      if (commit) {
        await txn.commit();
      } else {
        await txn.abort();
      }
      for (const v of vs) {
        emit(commit ? { txn_committed: v } : { txn_aborted: v });
        if (commit) committed.add(v);
      }
    }
    emit({ check: 'transactions' });
  } catch (e) {
    errors.push(`transactions: ${e.message}`);
  } finally {
    // Also after a failure: its open connections would keep node running.
    await tp.disconnect().catch(() => {});
  }

  const seen = new Set();
  // readUncommitted false (the default): read_committed.
  const consumer = kafka.consumer({ groupId: group, readUncommitted: false, retry: { retries: 20 } });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ message }) => {
      const v = message.value.toString();
      seen.add(v);
      emit({ consumed: v });
    },
  });
  const deadline = Date.now() + 90000;
  while (Date.now() < deadline && [...acked, ...committed].some((v) => !seen.has(v))) {
    await sleep(200);
  }
  await consumer.disconnect();
  emit({ done: true, client: `kafkajs ${require('kafkajs/package.json').version}`, errors: errors.slice(0, 20) });
}

main().catch((e) => {
  emit({ done: true, client: 'kafkajs', fatal: String(e && e.stack || e), errors: errors.slice(0, 20) });
  process.exit(1);
});
