package io.moonmq.interop;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The client scenario of test/interop/scenarios_test.go for the Java client.
 *
 * <p>Usage: Scenario BOOTSTRAP TOPIC GROUP N REPLICATION_FACTOR [PROTOCOL]
 *
 * <p>Creates TOPIC (3 partitions) with the admin client, produces N records with the
 * default producer (idempotent, acks=all), printing {"acked":V} for each one acknowledged,
 * then reads TOPIC in consumer group GROUP (PROTOCOL "classic" or "consumer", KIP-848) with
 * commits, printing {"consumed":V}, until every acknowledged value was read; last
 * {"done":true,...}. The Go test kills brokers meanwhile and judges the output.
 */
public final class Scenario {
    private static synchronized void emit(String key, String value) {
        System.out.println("{\"" + key + "\":\"" + value.replace("\\", "\\\\").replace("\"", "\\\"") + "\"}");
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        int n = Integer.parseInt(args[3]);
        short rf = Short.parseShort(args[4]);
        String protocol = args.length > 5 ? args[5] : "classic";
        List<String> errors = Collections.synchronizedList(new ArrayList<>());

        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(ap)) {
            try {
                admin.createTopics(List.of(new NewTopic(topic, 3, rf))).all().get(60, TimeUnit.SECONDS);
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof TopicExistsException)) {
                    throw e;
                }
            }
        }

        Set<String> acked = Collections.synchronizedSet(new HashSet<>());
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "zstd");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
            for (int i = 0; i < n; i++) {
                String v = "java-" + i;
                producer.send(new ProducerRecord<>(topic, "k" + (i % 7), v), (md, err) -> {
                    if (err != null) {
                        errors.add("send " + v + ": " + err);
                    } else {
                        acked.add(v);
                        emit("acked", v);
                    }
                });
                Thread.sleep(10);
            }
            producer.flush();
        }

        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        Set<String> seen = new HashSet<>();
        long deadline = System.currentTimeMillis() + 90_000;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            consumer.subscribe(List.of(topic));
            while (!seen.containsAll(acked) && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    seen.add(r.value());
                    emit("consumed", r.value());
                }
                try {
                    consumer.commitSync(Duration.ofSeconds(30));
                } catch (Exception e) {
                    errors.add("commit: " + e);
                }
            }
        }
        StringBuilder sb = new StringBuilder("{\"done\":true,\"client\":\"kafka-clients ")
                .append(org.apache.kafka.common.utils.AppInfoParser.getVersion()).append("\",\"errors\":[");
        synchronized (errors) {
            for (int i = 0; i < errors.size() && i < 20; i++) {
                sb.append(i > 0 ? "," : "").append('"')
                        .append(errors.get(i).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ")).append('"');
            }
        }
        System.out.println(sb.append("]}"));
        System.out.flush();
    }
}
