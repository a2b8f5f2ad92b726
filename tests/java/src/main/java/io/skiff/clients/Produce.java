package io.skiff.clients;

import java.nio.charset.StandardCharsets;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Writes -n records to topic -t with the producer's defaults (Java 4.x: acks=all,
 * idempotent), record i to partition i % -P (or the default partitioner if -P 0),
 * key "k-i", value Cli.value(i, --size), header idx=i. Prints one line
 * "ACK i partition offset" per acknowledged record, then a JSON summary.
 * Exit 0 only if every record was acknowledged. With --prop transactional.id=..., the
 * records go in one transaction (initTransactions, beginTransaction, commitTransaction).
 */
public final class Produce {
    public static void main(String[] args) throws Exception {
        Cli cli = new Cli(args);
        cli.startWatchdog("produce");
        String topic = cli.require("t");
        int n = cli.getInt("n", 1000);
        int parts = cli.getInt("P", 1);
        int size = cli.getInt("size", 100);

        Properties p = new Properties();
        p.setProperty(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, cli.require("b"));
        p.setProperty(ProducerConfig.CLIENT_ID_CONFIG, "skiff-test-java-producer");
        p.setProperty(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.setProperty(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.setProperty(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        p.setProperty(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        p.putAll(cli.props);
        ProducerConfig effective = new ProducerConfig(withSerializers(p));

        long[] offsets = new long[n];
        int[] partitions = new int[n];
        boolean[] ok = new boolean[n]; // written by the producer's I/O thread, read after close()
        AtomicInteger acked = new AtomicInteger();
        AtomicInteger errors = new AtomicInteger();
        AtomicReference<String> firstError = new AtomicReference<>();
        long t0 = System.nanoTime();
        boolean txn = p.containsKey(ProducerConfig.TRANSACTIONAL_ID_CONFIG);
        try (KafkaProducer<String, String> producer =
                     new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            if (txn) {
                producer.initTransactions();
                producer.beginTransaction();
            }
            for (int i = 0; i < n; i++) {
                final int idx = i;
                Integer partition = parts > 0 ? i % parts : null;
                ProducerRecord<String, String> rec = new ProducerRecord<>(topic, partition,
                        "k-" + i, Cli.value(i, size));
                rec.headers().add("idx", Integer.toString(i).getBytes(StandardCharsets.UTF_8));
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
            if (txn)
                producer.commitTransaction();
            else
                producer.flush();
            producer.close(java.time.Duration.ofSeconds(30));
        } catch (Exception e) {
            firstError.compareAndSet(null, Cli.describe(e));
        }
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        StringBuilder out = new StringBuilder(n * 16);
        for (int i = 0; i < n; i++) {
            if (ok[i]) {
                out.append("ACK ").append(i).append(' ').append(partitions[i]).append(' ')
                        .append(offsets[i]).append('\n');
            }
        }
        System.out.print(out);
        System.out.println(new Cli.Json().put("op", "produce").put("topic", topic).put("sent", n)
                .put("acked", acked.get()).put("errors", errors.get())
                .put("first_error", firstError.get()).put("ms", ms)
                .put("acks", effective.getString(ProducerConfig.ACKS_CONFIG))
                .put("idempotence", effective.getBoolean(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG)));
        System.out.flush();
        System.exit(acked.get() == n && firstError.get() == null ? 0 : 1);
    }

    private static Properties withSerializers(Properties p) {
        Properties q = new Properties();
        q.putAll(p);
        q.setProperty(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        q.setProperty(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return q;
    }
}
