package io.moonmq.interop;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.utils.AppInfoParser;

/**
 * Runs the Apache Kafka Java client against a broker and checks what it sees.
 *
 * <p>Usage: {@code JavaClientCheck BOOTSTRAP}. Prints progress to stderr and,
 * last, one line of JSON to stdout: every check by name ("ok" or what went
 * wrong), a note on the KIP-848 consumer, and the counts. Exits 0 only if
 * every check passed.
 */
public final class JavaClientCheck {
    static final String RT_TOPIC = "java-rt";
    static final String TXN_TOPIC = "java-txn";
    static final int PARTITIONS = 3;
    static final String[] CODECS = {"none", "gzip", "snappy", "lz4", "zstd"};
    static final int PER_CODEC = 60; // 5 codecs x 60 = 300 records
    static final long BASE_TS = 1_700_000_000_000L;

    final String bootstrap;
    final Map<String, String> checks = new LinkedHashMap<>();
    final Map<String, String> notes = new LinkedHashMap<>();

    /** What the producers were told, by "partition/offset". */
    final Map<String, Rec> acked = new HashMap<>();

    JavaClientCheck(String bootstrap) {
        this.bootstrap = bootstrap;
    }

    /** One record as sent, to compare with what is read back. */
    record Rec(String key, byte[] value, List<String[]> headers, long ts) {
        String diff(ConsumerRecord<byte[], byte[]> r) {
            List<String> d = new ArrayList<>();
            String k = r.key() == null ? null : new String(r.key(), StandardCharsets.UTF_8);
            if (!Objects.equals(k, key)) d.add("key " + k + ", want " + key);
            if (!((r.value() == null && value == null) || (r.value() != null && value != null && Arrays.equals(r.value(), value)))) {
                d.add("value " + show(r.value()) + ", want " + show(value));
            }
            List<String> got = new ArrayList<>();
            for (Header h : r.headers()) got.add(h.key() + "=" + (h.value() == null ? "<null>" : new String(h.value(), StandardCharsets.UTF_8)));
            List<String> want = new ArrayList<>();
            for (String[] h : headers) want.add(h[0] + "=" + h[1]);
            if (!got.equals(want)) d.add("headers " + got + ", want " + want);
            if (r.timestamp() != ts) d.add("timestamp " + r.timestamp() + ", want " + ts);
            return String.join("; ", d);
        }
    }

    static String show(byte[] b) {
        if (b == null) return "<null>";
        if (b.length > 40) return "\"" + new String(b, 0, 40, StandardCharsets.UTF_8) + "\"...(" + b.length + " bytes)";
        return "\"" + new String(b, StandardCharsets.UTF_8) + "\"";
    }

    /** The i-th record for a codec; some have a null key or value, no headers, a large or an empty value. */
    static Rec rtRecord(String codec, int i) {
        String key = "rt-" + codec + "-" + i;
        byte[] value = (codec + ":" + i + ";").repeat(1 + i % 30).getBytes(StandardCharsets.UTF_8);
        List<String[]> headers = new ArrayList<>(List.of(new String[]{"codec", codec}, new String[]{"i", Integer.toString(i)}));
        if (i % 17 == 5) key = null;
        else if (i % 23 == 7) value = null;
        else if (i % 10 == 3) headers.clear();
        else if (i == 1) value = "0123456789abcdef".repeat(4096).getBytes(StandardCharsets.UTF_8); // 64 KiB
        else if (i == 2) {
            value = new byte[0];
            headers = new ArrayList<>(List.<String[]>of(new String[]{"empty", ""}));
        }
        return new Rec(key, value, headers, BASE_TS + (long) i);
    }

    static ProducerRecord<byte[], byte[]> toProducerRecord(String topic, Rec r) {
        List<Header> hs = new ArrayList<>();
        for (String[] h : r.headers) hs.add(new RecordHeader(h[0], h[1].getBytes(StandardCharsets.UTF_8)));
        return new ProducerRecord<>(topic, null, r.ts,
                r.key == null ? null : r.key.getBytes(StandardCharsets.UTF_8), r.value, hs);
    }

    static Rec simple(String key, long ts) {
        return new Rec(key, ("v-" + key).getBytes(StandardCharsets.UTF_8), List.of(), ts);
    }

    // ------------------------------------------------------------ clients

    Properties common() {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        return p;
    }

    Admin admin() {
        return Admin.create(common());
    }

    /** A producer with the client's defaults (idempotent, acks=all) but the codec and a few bounded timeouts. */
    KafkaProducer<byte[], byte[]> producer(String codec, String transactionalId) {
        Properties p = common();
        p.remove(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG);
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        if (transactionalId != null) {
            p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
            p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "60000");
        }
        return new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
    }

    KafkaConsumer<byte[], byte[]> consumer(String groupId, String isolation, Map<String, String> extra) {
        Properties p = common();
        if (groupId != null) p.put(ConsumerConfig.GROUP_ID_CONFIG, groupId);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
        p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
        p.putAll(extra);
        return new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    // ------------------------------------------------------------ helpers

    static final class CheckFailed extends Exception {
        CheckFailed(String m) {
            super(m);
        }
    }

    static void require(boolean ok, String what) throws CheckFailed {
        if (!ok) throw new CheckFailed(what);
    }

    interface Step {
        void run() throws Exception;
    }

    void check(String name, Step s) {
        long t0 = System.nanoTime();
        String result;
        try {
            s.run();
            result = "ok";
        } catch (CheckFailed e) {
            result = e.getMessage();
        } catch (Throwable e) {
            result = describe(e);
        }
        checks.put(name, result);
        log(String.format("%-28s %s (%d ms)", name, result, (System.nanoTime() - t0) / 1_000_000));
    }

    static String describe(Throwable e) {
        StringBuilder b = new StringBuilder(e.getClass().getName() + ": " + e.getMessage());
        for (Throwable c = e.getCause(); c != null && c != c.getCause(); c = c.getCause()) {
            b.append(" <- ").append(c.getClass().getName()).append(": ").append(c.getMessage());
        }
        return b.toString();
    }

    static void log(String s) {
        System.err.println("[java-interop] " + s);
    }

    static String pk(String topic, int partition, long offset) {
        return topic + "/" + partition + "/" + offset;
    }

    /** Sends recs and waits for each acknowledgement; returns the metadata in order. */
    List<RecordMetadata> sendAll(KafkaProducer<byte[], byte[]> p, String topic, List<Rec> recs) throws Exception {
        List<Future<RecordMetadata>> fs = new ArrayList<>();
        for (Rec r : recs) fs.add(p.send(toProducerRecord(topic, r)));
        p.flush();
        List<RecordMetadata> out = new ArrayList<>();
        for (int i = 0; i < fs.size(); i++) {
            RecordMetadata md = fs.get(i).get(30, TimeUnit.SECONDS);
            out.add(md);
        }
        return out;
    }

    void remember(String topic, List<Rec> recs, List<RecordMetadata> mds) throws CheckFailed {
        for (int i = 0; i < recs.size(); i++) {
            RecordMetadata md = mds.get(i);
            require(md.hasOffset(), "record " + i + " acknowledged without an offset");
            Rec prev = acked.put(pk(topic, md.partition(), md.offset()), recs.get(i));
            require(prev == null, "offset " + md.partition() + "/" + md.offset() + " acknowledged twice");
        }
    }

    /** Polls until want records arrived or the deadline passed, then polls quietMs more for extras. */
    List<ConsumerRecord<byte[], byte[]>> pollFor(KafkaConsumer<byte[], byte[]> c, int want, long timeoutMs, long quietMs) {
        List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (got.size() < want && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) got.add(r);
        }
        long quietEnd = System.currentTimeMillis() + quietMs;
        while (System.currentTimeMillis() < quietEnd) {
            for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) got.add(r);
        }
        return got;
    }

    /** Waits until the group assigned the consumer n partitions, polling meanwhile; returns what those polls read. */
    List<ConsumerRecord<byte[], byte[]>> awaitAssignment(KafkaConsumer<byte[], byte[]> c, int n, long timeoutMs) throws CheckFailed {
        List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (c.assignment().size() < n && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) got.add(r);
        }
        require(c.assignment().size() == n, "assignment " + c.assignment() + " after " + timeoutMs + " ms, want " + n + " partitions");
        return got;
    }

    /** Compares consumed records with the acknowledged ones; returns the keys seen. */
    List<String> verify(String what, List<ConsumerRecord<byte[], byte[]>> got) throws CheckFailed {
        List<String> keys = new ArrayList<>();
        Set<String> seen = new HashSet<>();
        List<String> problems = new ArrayList<>();
        for (ConsumerRecord<byte[], byte[]> r : got) {
            String at = pk(r.topic(), r.partition(), r.offset());
            if (!seen.add(at)) problems.add("duplicate " + at);
            Rec want = acked.get(at);
            if (want == null) {
                problems.add("unexpected record at " + at);
                continue;
            }
            String d = want.diff(r);
            if (!d.isEmpty()) problems.add(at + ": " + d);
            keys.add(want.key);
        }
        require(problems.isEmpty(), what + ": " + (problems.size() > 5 ? problems.subList(0, 5) + " and " + (problems.size() - 5) + " more" : problems));
        return keys;
    }

    static Map<TopicPartition, Long> offsetsOf(Map<TopicPartition, OffsetAndMetadata> m) {
        Map<TopicPartition, Long> out = new TreeMap<>((a, b) -> a.toString().compareTo(b.toString()));
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : m.entrySet()) {
            if (e.getValue() != null) out.put(e.getKey(), e.getValue().offset());
        }
        return out;
    }

    static Map<TopicPartition, Long> sorted(Map<TopicPartition, Long> m) {
        Map<TopicPartition, Long> out = new TreeMap<>((a, b) -> a.toString().compareTo(b.toString()));
        out.putAll(m);
        return out;
    }

    static List<TopicPartition> partitionsOf(String topic) {
        List<TopicPartition> tps = new ArrayList<>();
        for (int p = 0; p < PARTITIONS; p++) tps.add(new TopicPartition(topic, p));
        return tps;
    }

    // ------------------------------------------------------------ steps

    void adminChecks() throws Exception {
        try (Admin a = admin()) {
            a.createTopics(List.of(new NewTopic(RT_TOPIC, PARTITIONS, (short) 1), new NewTopic(TXN_TOPIC, PARTITIONS, (short) 1)))
                    .all().get(30, TimeUnit.SECONDS);
            try {
                a.createTopics(List.of(new NewTopic(RT_TOPIC, PARTITIONS, (short) 1))).all().get(30, TimeUnit.SECONDS);
                throw new CheckFailed("creating " + RT_TOPIC + " a second time succeeded");
            } catch (ExecutionException e) {
                require(e.getCause() instanceof TopicExistsException, "creating a topic twice: " + describe(e.getCause()) + ", want TopicExistsException");
            }

            DescribeClusterResult dc = a.describeCluster();
            String clusterId = dc.clusterId().get(30, TimeUnit.SECONDS);
            Collection<Node> nodes = dc.nodes().get(30, TimeUnit.SECONDS);
            Node controller = dc.controller().get(30, TimeUnit.SECONDS);
            require(clusterId != null && !clusterId.isEmpty(), "describeCluster: empty cluster id");
            require(!nodes.isEmpty(), "describeCluster: no nodes");
            notes.put("cluster", "id=" + clusterId + " nodes=" + nodes + " controller=" + controller);

            Map<String, TopicDescription> td = a.describeTopics(List.of(RT_TOPIC, TXN_TOPIC)).allTopicNames().get(30, TimeUnit.SECONDS);
            for (String t : List.of(RT_TOPIC, TXN_TOPIC)) {
                TopicDescription d = td.get(t);
                require(d != null, "describeTopics: no " + t);
                require(!d.isInternal(), t + " described as internal");
                require(d.topicId() != null && !d.topicId().toString().equals("AAAAAAAAAAAAAAAAAAAAAA"), t + ": zero topic id");
                require(d.partitions().size() == PARTITIONS, t + ": " + d.partitions().size() + " partitions, want " + PARTITIONS);
                for (int i = 0; i < PARTITIONS; i++) {
                    TopicPartitionInfo pi = d.partitions().get(i);
                    require(pi.partition() == i, t + ": partition list out of order: " + d.partitions());
                    require(pi.leader() != null && !pi.leader().isEmpty(), t + "/" + i + ": no leader");
                    require(nodes.contains(pi.leader()), t + "/" + i + ": leader " + pi.leader() + " is not among the cluster's nodes " + nodes);
                    require(!pi.replicas().isEmpty() && !pi.isr().isEmpty(), t + "/" + i + ": replicas " + pi.replicas() + " isr " + pi.isr());
                }
            }
            try {
                a.describeTopics(List.of("java-no-such-topic")).allTopicNames().get(30, TimeUnit.SECONDS);
                throw new CheckFailed("describeTopics of a missing topic succeeded");
            } catch (ExecutionException e) {
                require(e.getCause() instanceof UnknownTopicOrPartitionException, "describeTopics of a missing topic: " + describe(e.getCause()));
            }
            Set<String> names = a.listTopics().names().get(30, TimeUnit.SECONDS);
            require(names.contains(RT_TOPIC) && names.contains(TXN_TOPIC), "listTopics: " + names);
        }
    }

    int produced;

    void produceAllCodecs() throws Exception {
        for (String codec : CODECS) {
            List<Rec> recs = new ArrayList<>();
            for (int i = 0; i < PER_CODEC; i++) recs.add(rtRecord(codec, i));
            try (KafkaProducer<byte[], byte[]> p = producer(codec, null)) {
                try {
                    remember(RT_TOPIC, recs, sendAll(p, RT_TOPIC, recs));
                } catch (ExecutionException e) {
                    throw new CheckFailed("codec " + codec + ": " + describe(e.getCause()));
                }
            }
            produced += recs.size();
        }
        // Offsets per partition must be dense from 0, and every partition used.
        Map<Integer, TreeSet<Long>> byPart = new TreeMap<>();
        for (String k : acked.keySet()) {
            String[] f = k.split("/");
            byPart.computeIfAbsent(Integer.parseInt(f[1]), x -> new TreeSet<>()).add(Long.parseLong(f[2]));
        }
        require(byPart.size() == PARTITIONS, "records landed on partitions " + byPart.keySet() + ", want all " + PARTITIONS);
        for (Map.Entry<Integer, TreeSet<Long>> e : byPart.entrySet()) {
            TreeSet<Long> offs = e.getValue();
            require(offs.first() == 0 && offs.last() == offs.size() - 1, "partition " + e.getKey() + ": offsets not dense 0.." + (offs.size() - 1) + ": first " + offs.first() + " last " + offs.last());
        }
        try (Admin a = admin()) {
            Map<TopicPartition, org.apache.kafka.clients.admin.OffsetSpec> q = new HashMap<>();
            for (TopicPartition tp : partitionsOf(RT_TOPIC)) q.put(tp, org.apache.kafka.clients.admin.OffsetSpec.latest());
            var lo = a.listOffsets(q).all().get(30, TimeUnit.SECONDS);
            for (TopicPartition tp : partitionsOf(RT_TOPIC)) {
                long want = byPart.get(tp.partition()).size();
                require(lo.get(tp).offset() == want, "listOffsets latest " + tp + " = " + lo.get(tp).offset() + ", want " + want);
            }
        }
    }

    Map<TopicPartition, Long> rtEnds() {
        Map<TopicPartition, Long> ends = sorted(new HashMap<>());
        for (TopicPartition tp : partitionsOf(RT_TOPIC)) ends.put(tp, 0L);
        for (String k : acked.keySet()) {
            String[] f = k.split("/");
            if (!f[0].equals(RT_TOPIC)) continue;
            TopicPartition tp = new TopicPartition(RT_TOPIC, Integer.parseInt(f[1]));
            ends.put(tp, Math.max(ends.get(tp), Long.parseLong(f[2]) + 1));
        }
        return ends;
    }

    static final String GROUP = "java-group";

    void consumeGroupFirst() throws Exception {
        try (KafkaConsumer<byte[], byte[]> c = consumer(GROUP, "read_uncommitted", Map.of())) {
            c.subscribe(List.of(RT_TOPIC));
            List<ConsumerRecord<byte[], byte[]>> got = pollFor(c, produced, 60_000, 500);
            require(c.assignment().size() == PARTITIONS, "assignment " + c.assignment());
            List<String> keys = verify("group consumer", got);
            require(got.size() == produced, "group consumer read " + got.size() + " records, want " + produced);
            require(keys.size() == produced, "keys " + keys.size());
            c.commitSync(Duration.ofSeconds(30));
            Map<TopicPartition, Long> committed = offsetsOf(c.committed(new HashSet<>(partitionsOf(RT_TOPIC)), Duration.ofSeconds(30)));
            require(committed.equals(rtEnds()), "committed " + committed + ", want " + rtEnds());
            notes.put("group_protocol_default", String.valueOf(c.groupMetadata().generationId() > 0 ? "classic generation " + c.groupMetadata().generationId() : c.groupMetadata()));
        }
        try (Admin a = admin()) {
            Map<TopicPartition, Long> seen = offsetsOf(a.listConsumerGroupOffsets(GROUP).partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS));
            require(seen.equals(rtEnds()), "listConsumerGroupOffsets " + seen + ", want " + rtEnds());
        }
    }

    void consumeGroupSecond() throws Exception {
        try (KafkaConsumer<byte[], byte[]> c = consumer(GROUP, "read_uncommitted", Map.of())) {
            c.subscribe(List.of(RT_TOPIC));
            List<ConsumerRecord<byte[], byte[]>> old = awaitAssignment(c, PARTITIONS, 60_000);
            old.addAll(pollFor(c, 0, 0, 2_000));
            require(old.isEmpty(), "second consumer of the group re-read " + old.size() + " old records, first at " + (old.isEmpty() ? "" : pk(old.get(0).topic(), old.get(0).partition(), old.get(0).offset())));
            for (TopicPartition tp : partitionsOf(RT_TOPIC)) {
                long pos = c.position(tp, Duration.ofSeconds(30));
                require(pos == rtEnds().get(tp), "position " + tp + " = " + pos + ", want the committed " + rtEnds().get(tp));
            }

            List<Rec> fresh = new ArrayList<>();
            for (int i = 0; i < 30; i++) fresh.add(simple("late-" + i, BASE_TS + 10_000 + i));
            try (KafkaProducer<byte[], byte[]> p = producer("none", null)) {
                remember(RT_TOPIC, fresh, sendAll(p, RT_TOPIC, fresh));
            }
            List<ConsumerRecord<byte[], byte[]>> got = pollFor(c, fresh.size(), 30_000, 1_000);
            List<String> keys = verify("second consumer", got);
            Set<String> want = new TreeSet<>();
            for (Rec r : fresh) want.add(r.key);
            require(got.size() == fresh.size() && new TreeSet<>(keys).equals(want), "second consumer read " + keys + ", want exactly " + want);
            c.commitSync(Duration.ofSeconds(30));
            Map<TopicPartition, Long> committed = offsetsOf(c.committed(new HashSet<>(partitionsOf(RT_TOPIC)), Duration.ofSeconds(30)));
            require(committed.equals(rtEnds()), "committed " + committed + ", want " + rtEnds());
        }
    }

    static final String TXN_GROUP = "java-txn-offsets";
    final Set<String> committedTxnKeys = new TreeSet<>();
    final Set<String> allTxnKeys = new TreeSet<>();

    void transactions() throws Exception {
        // Offsets go into the transactions as in consume-transform-produce: with
        // the metadata (generation, member id) of a live member of the group.
        try (KafkaConsumer<byte[], byte[]> member = consumer(TXN_GROUP, "read_committed", Map.of());
             KafkaProducer<byte[], byte[]> p = producer("lz4", "java-tx-1")) {
            member.subscribe(List.of(RT_TOPIC));
            awaitAssignment(member, PARTITIONS, 60_000);
            ConsumerGroupMetadata gm = member.groupMetadata();
            require(gm.generationId() > 0 && !gm.memberId().isEmpty(), "group member metadata " + gm);
            TopicPartition rt0 = new TopicPartition(RT_TOPIC, 0);

            p.initTransactions();

            p.beginTransaction();
            List<Rec> c1 = keyed("commit-", 30, 20_000);
            remember(TXN_TOPIC, c1, sendAll(p, TXN_TOPIC, c1));
            p.sendOffsetsToTransaction(Map.of(rt0, new OffsetAndMetadata(5)), gm);
            p.commitTransaction();
            addKeys(c1, true);

            p.beginTransaction();
            List<Rec> a1 = keyed("abort-", 30, 30_000);
            remember(TXN_TOPIC, a1, sendAll(p, TXN_TOPIC, a1));
            p.sendOffsetsToTransaction(Map.of(rt0, new OffsetAndMetadata(9)), gm);
            p.abortTransaction();
            addKeys(a1, false);

            p.beginTransaction();
            List<Rec> c2 = keyed("commit2-", 15, 40_000);
            remember(TXN_TOPIC, c2, sendAll(p, TXN_TOPIC, c2));
            p.commitTransaction();
            addKeys(c2, true);

            Map<TopicPartition, Long> seen = offsetsOf(member.committed(Set.of(rt0), Duration.ofSeconds(30)));
            require(seen.equals(sorted(Map.of(rt0, 5L))), "offsets sent in the committed transaction (5) and the aborted one (9): the member sees " + seen + ", want 5");
        }
        checkTxnTopic("after commit/abort/commit");
        try (Admin a = admin()) {
            Map<TopicPartition, Long> seen = offsetsOf(a.listConsumerGroupOffsets(TXN_GROUP).partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS));
            Map<TopicPartition, Long> want = sorted(Map.of(new TopicPartition(RT_TOPIC, 0), 5L));
            require(seen.equals(want), "offsets sent in the committed transaction (5) and the aborted one (9): group has " + seen + ", want " + want);
        }
    }

    List<Rec> keyed(String prefix, int n, long tsBase) {
        List<Rec> out = new ArrayList<>();
        for (int i = 0; i < n; i++) out.add(simple(prefix + i, BASE_TS + tsBase + i));
        return out;
    }

    void addKeys(List<Rec> recs, boolean committed) {
        for (Rec r : recs) {
            allTxnKeys.add(r.key);
            if (committed) committedTxnKeys.add(r.key);
        }
    }

    /** Reads TXN_TOPIC from the start to its end offsets at both isolation levels. */
    void checkTxnTopic(String when) throws Exception {
        for (String iso : List.of("read_committed", "read_uncommitted")) {
            try (KafkaConsumer<byte[], byte[]> c = consumer(null, iso, Map.of())) {
                List<TopicPartition> tps = partitionsOf(TXN_TOPIC);
                c.assign(tps);
                c.seekToBeginning(tps);
                Map<TopicPartition, Long> ends = c.endOffsets(tps, Duration.ofSeconds(30));
                List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>();
                long deadline = System.currentTimeMillis() + 30_000;
                while (System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) got.add(r);
                    boolean done = true;
                    for (TopicPartition tp : tps) done &= c.position(tp) >= ends.get(tp);
                    if (done) break;
                }
                for (TopicPartition tp : tps) {
                    require(c.position(tp) >= ends.get(tp), iso + " " + when + ": position " + tp + " " + c.position(tp) + " short of end " + ends.get(tp));
                }
                Set<String> keys = new TreeSet<>(verify(iso + " " + when, got));
                Set<String> want = iso.equals("read_committed") ? committedTxnKeys : allTxnKeys;
                require(got.size() == want.size() && keys.equals(want), iso + " " + when + ": read " + got.size() + " records " + diffSets(keys, want));
            }
        }
    }

    static String diffSets(Set<String> got, Set<String> want) {
        Set<String> extra = new TreeSet<>(got);
        extra.removeAll(want);
        Set<String> missing = new TreeSet<>(want);
        missing.removeAll(got);
        return "(extra " + extra + ", missing " + missing + ")";
    }

    String fencedBy;

    void fencing() throws Exception {
        KafkaProducer<byte[], byte[]> a = producer("zstd", "java-tx-fence");
        KafkaProducer<byte[], byte[]> b = null;
        try {
            a.initTransactions();
            a.beginTransaction();
            List<Rec> fenced = keyed("fenced-", 5, 50_000);
            remember(TXN_TOPIC, fenced, sendAll(a, TXN_TOPIC, fenced));
            addKeys(fenced, false);

            b = producer("zstd", "java-tx-fence");
            b.initTransactions(); // aborts a's open transaction and bumps the epoch

            try {
                a.commitTransaction();
                throw new CheckFailed("the fenced producer's commitTransaction succeeded");
            } catch (ProducerFencedException | InvalidProducerEpochException e) {
                fencedBy = e.getClass().getSimpleName();
            } catch (CheckFailed e) {
                throw e;
            } catch (Exception e) {
                throw new CheckFailed("fenced producer's commitTransaction threw " + describe(e) + ", want ProducerFencedException or InvalidProducerEpochException");
            }

            b.beginTransaction();
            List<Rec> after = keyed("after-fence-", 10, 60_000);
            remember(TXN_TOPIC, after, sendAll(b, TXN_TOPIC, after));
            b.commitTransaction();
            addKeys(after, true);
        } finally {
            a.close(Duration.ofSeconds(5));
            if (b != null) b.close(Duration.ofSeconds(5));
        }
        checkTxnTopic("after fencing");
    }

    /** KIP-848: documents what a group.protocol=consumer consumer does; never a check. */
    void kip848() {
        String result;
        Map<String, String> extra = Map.of(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer",
                ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "10000");
        // No session.timeout.ms or heartbeat.interval.ms: the consumer protocol rejects them.
        try {
            Properties p = common();
            p.put(ConsumerConfig.GROUP_ID_CONFIG, "java-kip848");
            p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            p.putAll(extra);
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                c.subscribe(List.of(RT_TOPIC));
                int n = 0;
                long deadline = System.currentTimeMillis() + 8_000;
                while (System.currentTimeMillis() < deadline) n += c.poll(Duration.ofMillis(500)).count();
                result = "no error; read " + n + " records, assignment " + c.assignment();
            }
        } catch (Throwable e) {
            result = describe(e);
        }
        notes.put("kip848_group_protocol_consumer", result);
        log("kip848 (not a check): " + result);
    }

    // ------------------------------------------------------------ main

    static String json(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            switch (ch) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                default -> {
                    if (ch < 0x20) b.append(String.format("\\u%04x", (int) ch));
                    else b.append(ch);
                }
            }
        }
        return b.append('"').toString();
    }

    static String jsonMap(Map<String, String> m) {
        List<String> parts = new ArrayList<>();
        for (Map.Entry<String, String> e : m.entrySet()) parts.add(json(e.getKey()) + ":" + json(e.getValue()));
        return "{" + String.join(",", parts) + "}";
    }

    String summary() {
        int passed = 0, failed = 0;
        for (String v : checks.values()) {
            if (v.equals("ok")) passed++;
            else failed++;
        }
        if (fencedBy != null) notes.put("fenced_by", fencedBy);
        return "{\"client\":" + json("kafka-clients " + AppInfoParser.getVersion())
                + ",\"java\":" + json(System.getProperty("java.version"))
                + ",\"checks\":" + jsonMap(checks)
                + ",\"notes\":" + jsonMap(notes)
                + ",\"passed\":" + passed + ",\"failed\":" + failed + "}";
    }

    public static void main(String[] args) {
        if (args.length != 1) {
            System.err.println("usage: JavaClientCheck BOOTSTRAP");
            System.exit(2);
        }
        JavaClientCheck j = new JavaClientCheck(args[0]);
        // Whatever hangs, the summary still comes out.
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep(Long.getLong("moonmq.deadline.ms", 300_000L));
            } catch (InterruptedException e) {
                return;
            }
            j.checks.put("deadline", "the run took longer than moonmq.deadline.ms");
            System.out.println(j.summary());
            System.out.flush();
            Runtime.getRuntime().halt(3);
        });
        watchdog.setDaemon(true);
        watchdog.start();

        j.check("admin", j::adminChecks);
        j.check("produce_all_codecs", j::produceAllCodecs);
        j.check("group_consume_commit", j::consumeGroupFirst);
        j.check("group_second_consumer", j::consumeGroupSecond);
        j.check("transactions", j::transactions);
        j.check("fencing", j::fencing);
        j.kip848();

        String s = j.summary();
        System.out.println(s);
        System.out.flush();
        boolean ok = j.checks.values().stream().allMatch("ok"::equals);
        Runtime.getRuntime().halt(ok ? 0 : 1); // no waiting on client threads that linger
    }
}
