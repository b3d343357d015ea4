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
    /**
     * Three transactions of the transactional producer (transactions v2 where the broker
     * finalizes it): two committed ({"txn_committed":V}), one aborted ({"txn_aborted":V}).
     */
    static void transactions(String bootstrap, String topic, List<String> errors) {
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "java-tx-" + topic);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {
            p.initTransactions();
            for (int t = 0; t < 3; t++) {
                boolean commit = t != 1;
                List<String> vs = new ArrayList<>();
                p.beginTransaction();
                for (int i = 0; i < 5; i++) {
                    String v = "javatx-" + (commit ? "c" : "a") + "-" + t + "-" + i;
                    p.send(new ProducerRecord<>(topic, "k" + i, v));
                    vs.add(v);
                }
                if (commit) {
                    p.commitTransaction();
                } else {
                    p.abortTransaction();
                }
                for (String v : vs) {
                    emit(commit ? "txn_committed" : "txn_aborted", v);
                }
            }
            emit("check", "transactions");
        } catch (Exception e) {
            errors.add("transactions: " + e);
        }
    }

    /**
     * SCRAM users: one created through the AdminClient, then a client that logs in with it
     * describes and deletes it (while a user exists every client must log in).
     */
    static void scram(String bootstrap, List<String> errors) {
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        var mech = org.apache.kafka.clients.admin.ScramMechanism.SCRAM_SHA_256;
        try (Admin admin = Admin.create(ap)) {
            admin.alterUserScramCredentials(List.of(new org.apache.kafka.clients.admin.UserScramCredentialUpsertion(
                    "java-user", new org.apache.kafka.clients.admin.ScramCredentialInfo(mech, 4096), "java-pw")))
                    .all().get(60, TimeUnit.SECONDS);
        } catch (Exception e) {
            errors.add("scram upsert: " + e);
            return;
        }
        Properties sp = new Properties();
        sp.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        sp.put("security.protocol", "SASL_PLAINTEXT");
        sp.put("sasl.mechanism", "SCRAM-SHA-256");
        sp.put("sasl.jaas.config",
                "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"java-user\" password=\"java-pw\";");
        Exception last = null;
        for (int i = 0; i < 40; i++) { // a follower knows the user once it copied it
            try (Admin admin = Admin.create(sp)) {
                var d = admin.describeUserScramCredentials(List.of("java-user")).all().get(20, TimeUnit.SECONDS);
                if (d.containsKey("java-user")) {
                    emit("check", "scram_users");
                }
                admin.alterUserScramCredentials(List.of(new org.apache.kafka.clients.admin.UserScramCredentialDeletion(
                        "java-user", mech))).all().get(60, TimeUnit.SECONDS);
                return;
            } catch (Exception e) {
                last = e;
                try {
                    Thread.sleep(250);
                } catch (InterruptedException ie) {
                    return;
                }
            }
        }
        errors.add("scram login: " + last);
    }

    /** ACLs, last: once an ACL exists it is enforced, so the one created keeps ANONYMOUS allowed. */
    static void acls(String bootstrap, List<String> errors) {
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(ap)) {
            System.err.println("step: admin acls");
            var pattern = new org.apache.kafka.common.resource.ResourcePattern(
                    org.apache.kafka.common.resource.ResourceType.CLUSTER, "kafka-cluster",
                    org.apache.kafka.common.resource.PatternType.LITERAL);
            var entry = new org.apache.kafka.common.acl.AccessControlEntry("User:ANONYMOUS", "*",
                    org.apache.kafka.common.acl.AclOperation.ALL, org.apache.kafka.common.acl.AclPermissionType.ALLOW);
            admin.createAcls(List.of(new org.apache.kafka.common.acl.AclBinding(pattern, entry))).all().get(60, TimeUnit.SECONDS);
            var acls = admin.describeAcls(org.apache.kafka.common.acl.AclBindingFilter.ANY).values().get(60, TimeUnit.SECONDS);
            if (acls.size() == 1) {
                emit("check", "acls");
            }
        } catch (Exception e) {
            errors.add("acls: " + e);
        }
    }

    /**
     * AdminClient calls a user makes, each reported as {"check":NAME} when it worked:
     * configs, consumer groups and their offsets, producers, transactions, ACLs (last: once
     * an ACL exists it is enforced, so the one created keeps ANONYMOUS allowed).
     */
    static void admin(String bootstrap, String topic, String group, List<String> errors) {
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(ap)) {
            var res = new org.apache.kafka.common.config.ConfigResource(
                    org.apache.kafka.common.config.ConfigResource.Type.TOPIC, topic);
            admin.incrementalAlterConfigs(java.util.Map.of(res, List.of(new org.apache.kafka.clients.admin.AlterConfigOp(
                    new org.apache.kafka.clients.admin.ConfigEntry("retention.ms", "7200000"),
                    org.apache.kafka.clients.admin.AlterConfigOp.OpType.SET)))).all().get(60, TimeUnit.SECONDS);
            for (int i = 0; i < 40; i++) { // a follower shows the change once it copied it
                var cfg = admin.describeConfigs(List.of(res)).all().get(60, TimeUnit.SECONDS).get(res);
                if (cfg.get("retention.ms") != null && "7200000".equals(cfg.get("retention.ms").value())) {
                    emit("check", "configs");
                    break;
                }
                Thread.sleep(250);
            }
            System.err.println("step: admin groups");
            var groups = admin.listGroups().all().get(60, TimeUnit.SECONDS);
            if (groups.stream().anyMatch(g -> g.groupId().equals(group))) {
                emit("check", "list_groups");
            }
            var offs = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(60, TimeUnit.SECONDS);
            if (!offs.isEmpty()) {
                emit("check", "group_offsets");
            }
            var reset = new java.util.HashMap<org.apache.kafka.common.TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata>();
            for (var tp : offs.keySet()) {
                reset.put(tp, new org.apache.kafka.clients.consumer.OffsetAndMetadata(0));
            }
            admin.alterConsumerGroupOffsets(group, reset).all().get(60, TimeUnit.SECONDS);
            var after = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(60, TimeUnit.SECONDS);
            if (!after.isEmpty() && after.values().stream().allMatch(o -> o.offset() == 0)) {
                emit("check", "alter_group_offsets");
            }
            System.err.println("step: admin producers");
            var tp0 = new org.apache.kafka.common.TopicPartition(topic, 0);
            var prod = admin.describeProducers(List.of(tp0)).partitionResult(tp0).get(60, TimeUnit.SECONDS);
            if (!prod.activeProducers().isEmpty()) {
                emit("check", "describe_producers");
            }
            var txns = admin.listTransactions().all().get(60, TimeUnit.SECONDS);
            if (txns.stream().anyMatch(x -> x.transactionalId().equals("java-tx-" + topic))) {
                emit("check", "list_transactions");
            }
            var desc = admin.describeTransactions(List.of("java-tx-" + topic)).all().get(60, TimeUnit.SECONDS);
            if (!desc.isEmpty()) {
                emit("check", "describe_transactions");
            }
        } catch (Exception e) {
            errors.add("admin: " + e);
        }
    }

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
        System.err.println("step: transactions");
        transactions(bootstrap, topic, errors);
        System.err.println("step: admin");
        admin(bootstrap, topic, group, errors);
        System.err.println("step: scram");
        scram(bootstrap, errors);
        System.err.println("step: acls");
        acls(bootstrap, errors);
        System.err.println("step: done");

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
