package io.skiff.clients;

import java.util.Arrays;
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The transactions benchmark's load (bench/txn.py): one transactional producer that, for
 * -d seconds after -w seconds of warm-up, runs transactions of -r records of -s bytes
 * spread over the -p partitions of -t, each ended by commitTransaction. Prints one JSON
 * line: transactions and records committed in the measured time, its length, and the
 * commitTransaction latency (ms) at p50, p99 and max. -x names the transactional id.
 */
public final class TxnBench {
    public static void main(String[] args) {
        Cli cli = new Cli(args);
        cli.startWatchdog("txnbench");
        int recs = cli.getInt("r", 100), size = cli.getInt("s", 1024), parts = cli.getInt("p", 4);
        double warm = Double.parseDouble(cli.get("w", "2")), dur = Double.parseDouble(cli.get("d", "20"));
        String topic = cli.require("t");
        Properties p = new Properties();
        p.setProperty(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, cli.require("b"));
        p.setProperty(ProducerConfig.TRANSACTIONAL_ID_CONFIG, cli.require("x"));
        p.setProperty(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.setProperty(ProducerConfig.BATCH_SIZE_CONFIG, "262144");
        p.putAll(cli.props);
        byte[] value = Cli.value(0, size).getBytes();
        long[] lat = new long[1 << 20];
        int n = 0;
        long records = 0;
        try (KafkaProducer<byte[], byte[]> prod = new KafkaProducer<>(p, new ByteArraySerializer(),
                new ByteArraySerializer())) {
            prod.initTransactions();
            long start = System.nanoTime(), measureFrom = start + (long) (warm * 1e9);
            long end = measureFrom + (long) (dur * 1e9);
            long measuredStart = 0;
            while (true) {
                long now = System.nanoTime();
                if (now >= end) break;
                boolean measured = now >= measureFrom;
                if (measured && measuredStart == 0) measuredStart = now;
                prod.beginTransaction();
                for (int i = 0; i < recs; i++)
                    prod.send(new ProducerRecord<>(topic, i % parts, null, value));
                long c0 = System.nanoTime();
                prod.commitTransaction();
                long c1 = System.nanoTime();
                if (measured && n < lat.length) {
                    lat[n++] = c1 - c0;
                    records += recs;
                }
            }
            double secs = (System.nanoTime() - measuredStart) / 1e9;
            long[] l = Arrays.copyOf(lat, n);
            Arrays.sort(l);
            System.out.println(new Cli.Json().put("op", "txnbench").put("transactions", n)
                    .put("records", records).put("record_size", size)
                    .put("records_per_txn", recs).put("seconds", secs)
                    .put("txn_per_s", n / secs).put("records_per_s", records / secs)
                    .put("mb_per_s", records * size / secs / 1e6)
                    .put("commit_p50_ms", pct(l, 0.50)).put("commit_p99_ms", pct(l, 0.99))
                    .put("commit_max_ms", n > 0 ? l[n - 1] / 1e6 : 0));
        }
        System.out.flush();
        System.exit(0);
    }

    static double pct(long[] sorted, double q) {
        if (sorted.length == 0) return 0;
        int i = (int) Math.ceil(q * sorted.length) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, i))] / 1e6;
    }
}
