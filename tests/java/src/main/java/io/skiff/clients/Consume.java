package io.skiff.clients;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Reads topic -t from the beginning with manually assigned partitions (no group)
 * until -n records arrived or every partition reached its end offset and -n is
 * unknown. Checks each record written by Produce: key "k-i", value Cli.value(i,
 * --size), header idx=i. Prints "REC partition offset i" per record, "BAD ..."
 * per mismatch, then a JSON summary. Exit 0 only if all -n records arrived and
 * none was bad.
 */
public final class Consume {
    public static void main(String[] args) throws Exception {
        Cli cli = new Cli(args);
        cli.startWatchdog("consume");
        String topic = cli.require("t");
        int n = cli.getInt("n", -1);
        int size = cli.getInt("size", 100);
        long deadline = System.currentTimeMillis() + 1000L * cli.getInt("read-timeout", 60);

        Properties p = new Properties();
        p.setProperty(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, cli.require("b"));
        p.setProperty(ConsumerConfig.CLIENT_ID_CONFIG, "skiff-test-java-consumer");
        p.setProperty(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.setProperty(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.setProperty(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        p.putAll(cli.props);

        int received = 0, bad = 0, dup = 0;
        String firstBad = null;
        Map<Integer, Long> seen = new HashMap<>();
        StringBuilder out = new StringBuilder();
        Map<TopicPartition, Long> ends;
        Map<TopicPartition, Long> positions = new HashMap<>();
        long t0 = System.currentTimeMillis();
        try (KafkaConsumer<String, String> consumer =
                     new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
            List<PartitionInfo> infos = consumer.partitionsFor(topic, Duration.ofSeconds(30));
            if (infos == null || infos.isEmpty()) {
                System.out.println(new Cli.Json().put("op", "consume").put("error", "no partitions")
                        .put("topic", topic));
                System.exit(1);
            }
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : infos) tps.add(new TopicPartition(topic, pi.partition()));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            ends = consumer.endOffsets(tps, Duration.ofSeconds(30));
            while (System.currentTimeMillis() < deadline) {
                if (n >= 0 ? received >= n : reached(consumer, ends)) break;
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    received++;
                    String why = check(r, size);
                    if (why == null) {
                        int idx = Integer.parseInt(r.key().substring(2));
                        Long prev = seen.put(idx, r.offset());
                        if (prev != null) {
                            dup++;
                            why = "duplicate idx " + idx + " (also at offset " + prev + ")";
                        } else {
                            out.append("REC ").append(r.partition()).append(' ').append(r.offset())
                                    .append(' ').append(idx).append('\n');
                        }
                    }
                    if (why != null) {
                        bad++;
                        if (firstBad == null) firstBad = why;
                        out.append("BAD ").append(r.partition()).append(' ').append(r.offset())
                                .append(' ').append(why).append('\n');
                    }
                }
            }
            for (TopicPartition tp : tps) positions.put(tp, consumer.position(tp, Duration.ofSeconds(10)));
        }
        System.out.print(out);
        Map<String, Long> endJson = new HashMap<>();
        ends.forEach((tp, off) -> endJson.put(Integer.toString(tp.partition()), off));
        Map<String, Long> posJson = new HashMap<>();
        positions.forEach((tp, off) -> posJson.put(Integer.toString(tp.partition()), off));
        boolean ok = bad == 0 && (n < 0 || received == n);
        System.out.println(new Cli.Json().put("op", "consume").put("topic", topic)
                .put("expected", n).put("received", received).put("bad", bad).put("duplicates", dup)
                .put("first_bad", firstBad).put("end_offsets", endJson).put("positions", posJson)
                .put("ms", System.currentTimeMillis() - t0).put("ok", ok));
        System.out.flush();
        System.exit(ok ? 0 : 1);
    }

    private static boolean reached(KafkaConsumer<?, ?> c, Map<TopicPartition, Long> ends) {
        for (Map.Entry<TopicPartition, Long> e : ends.entrySet()) {
            if (c.position(e.getKey(), Duration.ofSeconds(10)) < e.getValue()) return false;
        }
        return true;
    }

    private static String check(ConsumerRecord<String, String> r, int size) {
        String k = r.key();
        if (k == null || !k.startsWith("k-")) return "bad key " + k;
        long idx;
        try {
            idx = Long.parseLong(k.substring(2));
        } catch (NumberFormatException e) {
            return "bad key " + k;
        }
        if (!Cli.value(idx, size).equals(r.value())) return "bad value for " + k + ": " + abbrev(r.value());
        Header h = r.headers().lastHeader("idx");
        if (h == null || !Long.toString(idx).equals(new String(h.value(), StandardCharsets.UTF_8))) {
            return "bad or missing header idx for " + k;
        }
        return null;
    }

    private static String abbrev(String s) {
        if (s == null) return "null";
        return s.length() > 60 ? s.substring(0, 60) + "..." : s;
    }
}
