package io.moonmq.flowbench;

import java.time.Duration;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.WindowStore;

/**
 * The Kafka Streams side of flowbench: the same three topologies as
 * flowapp, with Kafka Streams' defaults except application.id,
 * bootstrap.servers, state.dir and processing.guarantee.
 *
 * <pre>
 * KsApp --mode wordcount|windowed|fill --app-id X --bootstrap H:P --guarantee exactly_once_v2|at_least_once
 *       --input T [--output T] --state-dir D [--window-ms 60000]
 * </pre>
 *
 * Prints PROGRESS &lt;unix ms&gt; &lt;n&gt; &lt;s&gt; every 50 ms (records seen by the
 * counting step, input records read), READY &lt;unix ms&gt; on each move to RUNNING, and
 * RESTORE_START / RESTORE_END &lt;unix ms&gt; &lt;records&gt; from the restore listener.
 */
public final class KsApp {
    static final AtomicLong COUNTER = new AtomicLong();
    static final AtomicLong SOURCE = new AtomicLong();

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            a.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        String mode = a.getOrDefault("mode", "wordcount");
        String input = a.get("input");
        String output = a.get("output");

        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, a.get("app-id"));
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, a.getOrDefault("bootstrap", "127.0.0.1:9092"));
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, a.getOrDefault("guarantee", StreamsConfig.AT_LEAST_ONCE));
        p.put(StreamsConfig.STATE_DIR_CONFIG, a.get("state-dir"));

        StreamsBuilder b = new StreamsBuilder();
        switch (mode) {
            case "wordcount": {
                // The word count of Kafka Streams' own quickstart; count() is
                // aggregate() with these two functions, plus the counter.
                KStream<String, String> lines = b.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                        .peek((k, v) -> SOURCE.incrementAndGet());
                lines.flatMapValues(l -> Arrays.asList(l.toLowerCase(Locale.ROOT).split("\\s+")))
                        .groupBy((k, w) -> w, Grouped.with("counts", Serdes.String(), Serdes.String()))
                        .aggregate(() -> 0L, (w, v, n) -> {
                            COUNTER.incrementAndGet();
                            return n + 1;
                        }, Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts")
                                .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
                        .toStream()
                        .mapValues(n -> Long.toString(n))
                        .to(output, Produced.with(Serdes.String(), Serdes.String()));
                break;
            }
            case "windowed": {
                long size = Long.parseLong(a.getOrDefault("window-ms", "60000"));
                b.stream(input, Consumed.with(Serdes.String(), Serdes.ByteArray()))
                        .peek((k, v) -> SOURCE.incrementAndGet())
                        .groupByKey()
                        .windowedBy(TimeWindows.ofSizeWithNoGrace(Duration.ofMillis(size)))
                        .aggregate(() -> 0L, (k, v, n) -> {
                            COUNTER.incrementAndGet();
                            return n + 1;
                        }, Materialized.<String, Long, WindowStore<Bytes, byte[]>>as("win-counts")
                                .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
                        .toStream()
                        .map((wk, n) -> KeyValue.pair(wk.key() + "@" + wk.window().start(), n))
                        .to(output, Produced.with(Serdes.String(), Serdes.Long()));
                break;
            }
            case "fill": {
                b.stream(input, Consumed.with(Serdes.String(), Serdes.ByteArray()))
                        .peek((k, v) -> {
                            COUNTER.incrementAndGet();
                            SOURCE.incrementAndGet();
                        })
                        .groupByKey()
                        .reduce((old, v) -> v, Materialized.<String, byte[], KeyValueStore<Bytes, byte[]>>as("big")
                                .withKeySerde(Serdes.String()).withValueSerde(Serdes.ByteArray()));
                break;
            }
            default:
                throw new IllegalArgumentException("unknown --mode " + mode);
        }

        KafkaStreams streams = new KafkaStreams(b.build(), p);
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING) {
                say("READY " + System.currentTimeMillis());
            }
            if (now == KafkaStreams.State.ERROR) {
                say("ERROR " + System.currentTimeMillis());
            }
        });
        AtomicLong restored = new AtomicLong();
        streams.setGlobalStateRestoreListener(new StateRestoreListener() {
            @Override
            public void onRestoreStart(TopicPartition tp, String store, long start, long end) {
                say("RESTORE_START " + System.currentTimeMillis() + " " + tp + " " + (end - start));
            }

            @Override
            public void onBatchRestored(TopicPartition tp, String store, long end, long n) {
                restored.addAndGet(n);
            }

            @Override
            public void onRestoreEnd(TopicPartition tp, String store, long n) {
                say("RESTORE_END " + System.currentTimeMillis() + " " + restored.get());
            }
        });
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            // Leave the group, so that a restart of the same application
            // (the restore phase) is not held up by a session timeout.
            streams.close(CloseOptions.groupMembershipOperation(CloseOptions.GroupMembershipOperation.LEAVE_GROUP)
                    .withTimeout(Duration.ofSeconds(30)));
            say("PROGRESS " + System.currentTimeMillis() + " " + COUNTER.get() + " " + SOURCE.get());
            stopped.countDown();
        }));
        Thread reporter = new Thread(() -> {
            while (true) {
                say("PROGRESS " + System.currentTimeMillis() + " " + COUNTER.get() + " " + SOURCE.get());
                try {
                    Thread.sleep(50);
                } catch (InterruptedException e) {
                    return;
                }
            }
        }, "flowbench-progress");
        reporter.setDaemon(true);
        reporter.start();
        streams.start();
        stopped.await();
    }

    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }
}
