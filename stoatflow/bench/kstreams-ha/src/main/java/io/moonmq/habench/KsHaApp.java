package io.moonmq.habench;

import java.time.Duration;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.LagInfo;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.ThreadMetadata;
import org.apache.kafka.streams.TaskMetadata;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * The word count of Kafka Streams' quickstart, for habench's failover
 * runs: exactly_once_v2 and one standby replica per stateful task
 * (num.standby.replicas=1), every other setting Kafka Streams' default
 * unless given on the command line.
 *
 * <pre>
 * KsHaApp --app-id X --bootstrap H:P --input T --output T --state-dir D
 *         [--session-timeout-ms N] [--heartbeat-interval-ms N]
 * </pre>
 *
 * Prints STATE &lt;unix ms&gt; &lt;new&gt; &lt;old&gt; on every state change and
 * TASKS &lt;unix ms&gt; active=&lt;ids&gt; standby=&lt;ids&gt; whenever this
 * instance's task assignment changes (checked every 50 ms), and
 * LAG &lt;unix ms&gt; &lt;records&gt; every 500 ms: the largest offset lag of
 * this instance's store partitions (allLocalStorePartitionLags; for a
 * standby, how far it is behind the changelog).
 */
public final class KsHaApp {
    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            a.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, a.get("app-id"));
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, a.getOrDefault("bootstrap", "127.0.0.1:9092"));
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, 1);
        p.put(StreamsConfig.STATE_DIR_CONFIG, a.get("state-dir"));
        if (a.containsKey("session-timeout-ms")) {
            p.put(StreamsConfig.mainConsumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), a.get("session-timeout-ms"));
        }
        if (a.containsKey("heartbeat-interval-ms")) {
            p.put(StreamsConfig.mainConsumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), a.get("heartbeat-interval-ms"));
        }

        StreamsBuilder b = new StreamsBuilder();
        b.stream(a.get("input"), Consumed.with(Serdes.String(), Serdes.String()))
                .flatMapValues(l -> Arrays.asList(l.toLowerCase(Locale.ROOT).split("\\s+")))
                .groupBy((k, w) -> w, Grouped.with("counts", Serdes.String(), Serdes.String()))
                .count(Materialized.as("counts"))
                .toStream()
                .mapValues(n -> Long.toString(n))
                .to(a.get("output"), Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(b.build(), p);
        streams.setStateListener((now, before) -> say("STATE " + System.currentTimeMillis() + " " + now + " " + before));
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(CloseOptions.groupMembershipOperation(CloseOptions.GroupMembershipOperation.LEAVE_GROUP)
                    .withTimeout(Duration.ofSeconds(30)));
            stopped.countDown();
        }));
        Thread reporter = new Thread(() -> {
            String last = "";
            long n = 0;
            while (true) {
                if (n++ % 10 == 0) {
                    try {
                        long lag = 0;
                        for (Map<Integer, LagInfo> parts : streams.allLocalStorePartitionLags().values()) {
                            for (LagInfo l : parts.values()) {
                                lag = Math.max(lag, l.offsetLag());
                            }
                        }
                        say("LAG " + System.currentTimeMillis() + " " + lag);
                    } catch (RuntimeException e) {
                        // not running
                    }
                }
                try {
                    TreeSet<String> act = new TreeSet<>();
                    TreeSet<String> sb = new TreeSet<>();
                    for (ThreadMetadata t : streams.metadataForLocalThreads()) {
                        for (TaskMetadata m : t.activeTasks()) {
                            act.add(m.taskId().toString());
                        }
                        for (TaskMetadata m : t.standbyTasks()) {
                            sb.add(m.taskId().toString());
                        }
                    }
                    String now = "active=" + String.join(",", act) + " standby=" + String.join(",", sb);
                    if (!now.equals(last)) {
                        last = now;
                        say("TASKS " + System.currentTimeMillis() + " " + now);
                    }
                } catch (RuntimeException e) {
                    // not started yet, or closing
                }
                try {
                    Thread.sleep(50);
                } catch (InterruptedException e) {
                    return;
                }
            }
        }, "habench-tasks");
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
