package io.skiff.clients;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Group consumers of the Java client (classic protocol, or the consumer
 * protocol with --prop group.protocol=consumer) that commit what they
 * processed: after each poll, and in onPartitionsRevoked, so that a rebalance
 * never hands a processed but uncommitted record to another member.
 *
 * Modes (-m):
 *   churn    a producer writes -n records "k-i" to -t at --rate per second
 *            while members join and leave the group -g: m1 and m2 at once, m3
 *            when a third is written, m2 leaves at two thirds; runs until
 *            every record was consumed (or --read-timeout).
 *   consume  one member (named --name, default m1) reads until -n records
 *            arrived or the file --stop-file exists, then closes (leaving the
 *            group).
 * Output: "REC member partition offset i" per record, "ASSIGN member [tp..]"
 * per assignment (under the consumer protocol: the partitions added), a JSON summary {"op":"group-consume",...}. --prop k=v sets
 * any consumer property.
 */
public final class GroupConsume {

    static final class Member implements Runnable, ConsumerRebalanceListener {
        final String name;
        final KafkaConsumer<String, String> c;
        final String topic;
        final Map<TopicPartition, OffsetAndMetadata> processed = new HashMap<>();
        volatile boolean stop;
        /* consume mode: the member stops polling once it has this many records, so
         * that a restarted member finds the rest (the main thread polls too slowly). */
        volatile long limit = Long.MAX_VALUE;
        final AtomicInteger records = new AtomicInteger();
        final AtomicInteger commitFailures = new AtomicInteger();
        final Map<Integer, Long> firstOffset = new TreeMap<>();
        final StringBuilder log;
        Throwable error;

        Member(String name, Properties p, String topic, StringBuilder log) {
            this.name = name;
            this.topic = topic;
            this.log = log;
            Properties q = new Properties();
            q.putAll(p);
            q.setProperty(ConsumerConfig.CLIENT_ID_CONFIG, "skiff-test-" + name);
            this.c = new KafkaConsumer<>(q, new StringDeserializer(), new StringDeserializer());
        }

        void commit() {
            if (processed.isEmpty()) return;
            try {
                c.commitSync(new HashMap<>(processed), Duration.ofSeconds(30));
                processed.clear();
            } catch (RebalanceInProgressException e) {
                // onPartitionsRevoked commits them before the member rejoins
                commitFailures.incrementAndGet();
            }
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> parts) {
            commit();
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> parts) {
            List<String> tps = new ArrayList<>();
            for (TopicPartition tp : parts) tps.add(Integer.toString(tp.partition()));
            synchronized (log) {
                log.append("ASSIGN ").append(name).append(' ').append(String.join(",", tps)).append('\n');
            }
        }

        @Override
        public void run() {
            try {
                c.subscribe(List.of(topic), this);
                while (!stop && records.get() < limit) {
                    ConsumerRecords<String, String> rs = c.poll(Duration.ofMillis(200));
                    StringBuilder sb = new StringBuilder();
                    for (ConsumerRecord<String, String> r : rs) {
                        firstOffset.putIfAbsent(r.partition(), r.offset());
                        sb.append("REC ").append(name).append(' ').append(r.partition()).append(' ')
                                .append(r.offset()).append(' ').append(r.key().substring(2)).append('\n');
                        processed.put(new TopicPartition(r.topic(), r.partition()),
                                new OffsetAndMetadata(r.offset() + 1));
                        records.incrementAndGet();
                    }
                    if (sb.length() > 0) {
                        synchronized (log) {
                            log.append(sb);
                        }
                    }
                    commit();
                }
                commit();
            } catch (Throwable t) {
                error = t;
            } finally {
                c.close(Duration.ofSeconds(30)); // leaves the group (LeaveGroup)
            }
        }
    }

    public static void main(String[] args) throws Exception {
        Cli cli = new Cli(args);
        cli.startWatchdog("group-consume");
        String mode = cli.get("m", "consume");
        String topic = cli.require("t");
        int n = cli.getInt("n", 1000);
        long deadline = System.currentTimeMillis() + 1000L * cli.getInt("read-timeout", 90);

        Properties p = new Properties();
        p.setProperty(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, cli.require("b"));
        p.setProperty(ConsumerConfig.GROUP_ID_CONFIG, cli.require("g"));
        p.setProperty(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.setProperty(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.setProperty(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
        p.setProperty(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
        p.setProperty(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "200");
        p.setProperty(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.setProperty(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        p.putAll(cli.props);
        if ("consumer".equalsIgnoreCase(p.getProperty(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic"))) {
            // Under the consumer protocol (KIP-848) the coordinator sets these.
            p.remove(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG);
            p.remove(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG);
        }
        StringBuilder log = new StringBuilder();
        Cli.Json sum = new Cli.Json().put("op", "group-consume").put("mode", mode);
        long t0 = System.currentTimeMillis();

        if (mode.equals("consume")) {
            String name = cli.get("name", "m1");
            java.io.File stopFile = new java.io.File(cli.get("stop-file", "/nonexistent/stop"));
            Member m = new Member(name, p, topic, log);
            m.limit = n;
            Thread t = new Thread(m, name);
            t.start();
            while (m.records.get() < n && System.currentTimeMillis() < deadline && m.error == null
                    && !stopFile.exists()) {
                Thread.sleep(50);
            }
            m.stop = true;
            t.join(60000);
            System.out.print(log);
            sum.put("records", m.records.get()).put("first_offsets", m.firstOffset)
                    .put("error", m.error == null ? null : Cli.describe(m.error))
                    .put("ms", System.currentTimeMillis() - t0);
            System.out.println(sum);
            System.out.flush();
            Runtime.getRuntime().halt(m.error == null && m.records.get() >= n ? 0 : 1);
        }

        // churn
        int rate = cli.getInt("rate", 2000);
        Properties pp = new Properties();
        pp.setProperty(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, cli.require("b"));
        pp.setProperty(ProducerConfig.CLIENT_ID_CONFIG, "skiff-test-churn-producer");
        pp.setProperty(ProducerConfig.LINGER_MS_CONFIG, "5");
        int parts = cli.getInt("P", 6);
        AtomicLong produced = new AtomicLong();
        AtomicInteger produceErrors = new AtomicInteger();
        Thread prod = new Thread(() -> {
            try (KafkaProducer<String, String> kp =
                         new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
                long start = System.currentTimeMillis();
                for (int i = 0; i < n; i++) {
                    long due = start + (long) i * 1000L / rate;
                    long now = System.currentTimeMillis();
                    if (due > now) Thread.sleep(due - now);
                    kp.send(new ProducerRecord<>(topic, i % parts, "k-" + i, Cli.value(i, 50)), (md, e) -> {
                        if (e != null) produceErrors.incrementAndGet();
                        else produced.incrementAndGet();
                    });
                }
                kp.flush();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, "producer");

        Map<String, Member> members = new ConcurrentHashMap<>();
        Map<String, Thread> threads = new HashMap<>();
        for (String name : new String[] {"m1", "m2"}) {
            Member m = new Member(name, p, topic, log);
            members.put(name, m);
            threads.put(name, new Thread(m, name));
            threads.get(name).start();
        }
        prod.start();
        boolean m3 = false, m2gone = false;
        while (System.currentTimeMillis() < deadline) {
            long done = produced.get();
            if (!m3 && done >= n / 3) {
                Member m = new Member("m3", p, topic, log);
                members.put("m3", m);
                threads.put("m3", new Thread(m, "m3"));
                threads.get("m3").start();
                m3 = true;
            }
            if (!m2gone && done >= 2L * n / 3) {
                members.get("m2").stop = true;
                m2gone = true;
            }
            int consumed = 0;
            for (Member m : members.values()) consumed += m.records.get();
            if (!prod.isAlive() && m2gone && consumed >= produced.get() && produced.get() + produceErrors.get() >= n) {
                break;
            }
            Thread.sleep(50);
        }
        prod.join(30000);
        for (Member m : members.values()) m.stop = true;
        for (Thread t : threads.values()) t.join(60000);
        System.out.print(log);
        Map<String, Object> perMember = new TreeMap<>();
        boolean ok = produceErrors.get() == 0;
        for (Member m : members.values()) {
            perMember.put(m.name, new Cli.Json().put("records", m.records.get())
                    .put("commit_retries", m.commitFailures.get())
                    .put("error", m.error == null ? null : Cli.describe(m.error)));
            ok &= m.error == null;
        }
        sum.put("produced", produced.get()).put("produce_errors", produceErrors.get())
                .put("members", perMember).put("ms", System.currentTimeMillis() - t0);
        System.out.println(sum);
        System.out.flush();
        Runtime.getRuntime().halt(ok ? 0 : 1);
    }
}
