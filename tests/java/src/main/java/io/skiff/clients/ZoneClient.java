package io.skiff.clients;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The Java client of the zone routing tests (test_71NN), whose records any
 * other client can produce and check: the same record format and digest as
 * tests/integration/clients/zone_rw.py.
 *
 * Modes (-m):
 *   produce  -n records to -t, record i to partition (i / --run) % -P (runs of
 *            --run records per partition, default 1), key "ID-i" and
 *            value "ID-i-" padded to --size bytes with filler(ID, i) (--id ID).
 *            Prints "A i partition offset" per acknowledged record, then a JSON
 *            summary. Exit 0 only if every record was acknowledged.
 *   read     reads -t from the beginning, all partitions assigned (or, with -g,
 *            subscribed as a member of that group) until -n records arrived.
 *            Prints "R partition offset digest" per record (digest: the first
 *            16 hex digits of SHA-1(key "|" value)), then a JSON summary.
 * --prop k=v sets any client property (client.id=app,skiff_az=ZONE for the
 * zone).
 */
public final class ZoneClient {
    public static void main(String[] args) throws Exception {
        Cli cli = new Cli(args);
        cli.startWatchdog("zone-client");
        String mode = cli.get("m", "produce");
        if (mode.equals("produce")) {
            produce(cli);
        } else if (mode.equals("read")) {
            read(cli);
        } else {
            throw new IllegalArgumentException("-m produce|read, not " + mode);
        }
    }

    /** Record i of producer id: "ID-i-" and a filler to size bytes, whose byte j is
     *  'a' + (i + j) % 26 (as zone_rw.py's value()). */
    static byte[] value(String id, long i, int size) {
        byte[] head = (id + "-" + i + "-").getBytes(StandardCharsets.US_ASCII);
        byte[] v = new byte[Math.max(size, head.length)];
        System.arraycopy(head, 0, v, 0, head.length);
        for (int j = head.length; j < v.length; j++) {
            v[j] = (byte) ('a' + (int) ((i + (j - head.length)) % 26));
        }
        return v;
    }

    static String digest(byte[] key, byte[] value) throws Exception {
        MessageDigest md = MessageDigest.getInstance("SHA-1");
        if (key != null) md.update(key);
        md.update((byte) '|');
        if (value != null) md.update(value);
        byte[] d = md.digest();
        StringBuilder sb = new StringBuilder(16);
        for (int i = 0; i < 8; i++) sb.append(String.format("%02x", d[i]));
        return sb.toString();
    }

    private static void produce(Cli cli) throws Exception {
        String topic = cli.require("t");
        String id = cli.require("id");
        int n = cli.getInt("n", 1000);
        int parts = cli.getInt("P", 1);
        int run = cli.getInt("run", 1);
        int size = cli.getInt("size", 1000);
        Properties p = new Properties();
        p.setProperty(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, cli.require("b"));
        p.setProperty(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.setProperty(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        p.setProperty(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        p.putAll(cli.props);
        long[] offsets = new long[n];
        int[] partitions = new int[n];
        boolean[] ok = new boolean[n];
        AtomicInteger acked = new AtomicInteger();
        AtomicInteger errors = new AtomicInteger();
        AtomicReference<String> firstError = new AtomicReference<>();
        long t0 = System.nanoTime();
        try (KafkaProducer<byte[], byte[]> producer =
                     new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            for (int i = 0; i < n; i++) {
                final int idx = i;
                byte[] key = (id + "-" + i).getBytes(StandardCharsets.US_ASCII);
                ProducerRecord<byte[], byte[]> rec =
                        new ProducerRecord<>(topic, (i / run) % parts, key, value(id, i, size));
                producer.send(rec, (md, ex) -> {
                    if (ex != null) {
                        errors.incrementAndGet();
                        firstError.compareAndSet(null, "record " + idx + ": " + Cli.describe(ex));
                    } else {
                        partitions[idx] = md.partition();
                        offsets[idx] = md.offset();
                        ok[idx] = true;
                        acked.incrementAndGet();
                    }
                });
            }
            producer.flush();
            producer.close(Duration.ofSeconds(30));
        } catch (Exception e) {
            firstError.compareAndSet(null, Cli.describe(e));
        }
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        StringBuilder out = new StringBuilder(n * 20);
        for (int i = 0; i < n; i++) {
            if (ok[i]) {
                out.append("A ").append(i).append(' ').append(partitions[i]).append(' ')
                        .append(offsets[i]).append('\n');
            }
        }
        System.out.print(out);
        System.out.println(new Cli.Json().put("op", "produce").put("sent", n)
                .put("acked", acked.get()).put("errors", errors.get())
                .put("first_error", firstError.get()).put("ms", ms));
        System.out.flush();
        System.exit(acked.get() == n && firstError.get() == null ? 0 : 1);
    }

    private static void read(Cli cli) throws Exception {
        String topic = cli.require("t");
        int n = cli.getInt("n", -1);
        String group = cli.get("g", null);
        long deadline = System.currentTimeMillis() + 1000L * cli.getInt("read-timeout", 60);
        Properties p = new Properties();
        p.setProperty(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, cli.require("b"));
        p.setProperty(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.setProperty(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.setProperty(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.setProperty(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        if (group != null) {
            p.setProperty(ConsumerConfig.GROUP_ID_CONFIG, group);
            p.setProperty(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
            p.setProperty(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
        }
        p.putAll(cli.props);
        int received = 0;
        String error = null;
        StringBuilder out = new StringBuilder();
        long t0 = System.currentTimeMillis();
        try (KafkaConsumer<byte[], byte[]> consumer =
                     new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            if (group != null) {
                consumer.subscribe(List.of(topic));
            } else {
                List<PartitionInfo> infos = consumer.partitionsFor(topic, Duration.ofSeconds(30));
                List<TopicPartition> tps = new ArrayList<>();
                for (PartitionInfo pi : infos) tps.add(new TopicPartition(topic, pi.partition()));
                consumer.assign(tps);
                consumer.seekToBeginning(tps);
            }
            while (System.currentTimeMillis() < deadline && (n < 0 || received < n)) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    received++;
                    out.append("R ").append(r.partition()).append(' ').append(r.offset()).append(' ')
                            .append(digest(r.key(), r.value())).append('\n');
                }
            }
        } catch (Exception e) {
            error = Cli.describe(e);
        }
        System.out.print(out);
        System.out.println(new Cli.Json().put("op", "read").put("expected", n)
                .put("received", received).put("group", group).put("error", error)
                .put("ms", System.currentTimeMillis() - t0));
        System.out.flush();
        System.exit(error == null && (n < 0 || received >= n) ? 0 : 1);
    }
}
