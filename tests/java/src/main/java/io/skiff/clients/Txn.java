package io.skiff.clients;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The transactional producer's scenarios, one per -m:
 *  commit-abort: three transactions on -t (values c1-i committed, a-i aborted, c2-i
 *      committed, -n each); prints what read_committed and read_uncommitted consumers read.
 *  ctp: consume-transform-produce: a read_committed group -g consumer of -i, a
 *      transactional producer writing each value upper-cased to -o with the consumed
 *      offsets (sendOffsetsToTransaction), until -n records were processed.
 *  zombie: a second producer with the same transactional id fences the first, whose
 *      commit then fails; the second commits z2.
 *  timeout: a transaction left open past transaction.timeout.ms (-T ms); its commit fails.
 *  open: a transaction left open (value o-i, -n of them, flushed); prints OPEN and waits
 *      to be killed.
 *  load: -n transactions of -k records each (value L<txn>-<i>, keys spread over the
 *      partitions of -t), printing "COMMITTED <txn>" once each commit returned; a
 *      transaction whose commit failed is listed as unknown and the producer is made
 *      anew (its init aborts or completes what was left).
 *  zombie-wait: opens a transaction (z1-i), prints READY, waits for a line on stdin,
 *      then sends z1late and tries to commit; reports the error.
 *  read: what read_committed and read_uncommitted consumers read of -t.
 * Then prints a JSON summary. -x names the transactional id.
 */
public final class Txn {
    public static void main(String[] args) throws Exception {
        Cli cli = new Cli(args);
        cli.startWatchdog("txn");
        String mode = cli.require("m");
        Cli.Json out = new Cli.Json().put("mode", mode);
        switch (mode) {
            case "commit-abort" -> commitAbort(cli, out);
            case "ctp" -> ctp(cli, out);
            case "zombie" -> zombie(cli, out);
            case "timeout" -> timeout(cli, out);
            case "open" -> open(cli);
            case "load" -> load(cli, out);
            case "zombie-wait" -> zombieWait(cli, out);
            case "read" -> {
                out.put("committed", readAll(cli, cli.require("t"), "read_committed"));
                out.put("uncommitted", readAll(cli, cli.require("t"), "read_uncommitted"));
            }
            default -> throw new IllegalArgumentException("unknown mode " + mode);
        }
        System.out.println(out);
        System.out.flush();
        System.exit(0);
    }

    static KafkaProducer<String, String> producer(Cli cli, String txnId, int timeoutMs) {
        Properties p = new Properties();
        p.setProperty(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, cli.require("b"));
        p.setProperty(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        p.setProperty(ProducerConfig.CLIENT_ID_CONFIG, "skiff-test-txn");
        p.setProperty(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        if (timeoutMs > 0)
            p.setProperty(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, Integer.toString(timeoutMs));
        p.putAll(cli.props);
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static void send(KafkaProducer<String, String> p, String topic, String prefix, int n) {
        for (int i = 0; i < n; i++)
            p.send(new ProducerRecord<>(topic, prefix + "-" + i, prefix + "-" + i));
    }

    /** Every value of the topic, read from the beginning to the end for the isolation level. */
    static List<String> readAll(Cli cli, String topic, String isolation) {
        Properties p = new Properties();
        p.setProperty(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, cli.require("b"));
        p.setProperty(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.setProperty(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        List<String> vals = new ArrayList<>();
        try (KafkaConsumer<String, String> c =
                     new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : c.partitionsFor(topic))
                tps.add(new TopicPartition(topic, pi.partition()));
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps);
            long deadline = System.currentTimeMillis() + 30000;
            while (System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200)))
                    vals.add(r.value());
                boolean done = true;
                for (TopicPartition tp : tps)
                    done &= c.position(tp) >= end.get(tp);
                if (done)
                    break;
            }
        }
        return vals;
    }

    static void commitAbort(Cli cli, Cli.Json out) {
        String topic = cli.require("t");
        int n = cli.getInt("n", 10);
        try (KafkaProducer<String, String> p = producer(cli, cli.require("x"), 0)) {
            p.initTransactions();
            p.beginTransaction();
            send(p, topic, "c1", n);
            p.commitTransaction();
            p.beginTransaction();
            send(p, topic, "a", n);
            p.flush();
            p.abortTransaction();
            p.beginTransaction();
            send(p, topic, "c2", n);
            p.commitTransaction();
        }
        out.put("committed", readAll(cli, topic, "read_committed"));
        out.put("uncommitted", readAll(cli, topic, "read_uncommitted"));
    }

    static void ctp(Cli cli, Cli.Json out) {
        String in = cli.require("i"), dst = cli.require("o");
        int n = cli.getInt("n", 100);
        Properties cp = new Properties();
        cp.setProperty(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, cli.require("b"));
        cp.setProperty(ConsumerConfig.GROUP_ID_CONFIG, cli.require("g"));
        cp.setProperty(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        cp.setProperty(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.setProperty(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        int done = 0, txns = 0;
        try (KafkaConsumer<String, String> c =
                     new KafkaConsumer<>(cp, new StringDeserializer(), new StringDeserializer());
             KafkaProducer<String, String> p = producer(cli, cli.require("x"), 0)) {
            p.initTransactions();
            c.subscribe(Collections.singletonList(in));
            long deadline = System.currentTimeMillis() + 60000;
            while (done < n && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> recs = c.poll(Duration.ofMillis(200));
                if (recs.isEmpty())
                    continue;
                p.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offs = new HashMap<>();
                for (ConsumerRecord<String, String> r : recs) {
                    p.send(new ProducerRecord<>(dst, r.key(), r.value().toUpperCase()));
                    offs.put(new TopicPartition(r.topic(), r.partition()),
                            new OffsetAndMetadata(r.offset() + 1));
                    done++;
                }
                p.sendOffsetsToTransaction(offs, c.groupMetadata());
                p.commitTransaction();
                txns++;
            }
        }
        out.put("processed", done).put("transactions", txns);
    }

    static void zombie(Cli cli, Cli.Json out) {
        String topic = cli.require("t"), id = cli.require("x");
        KafkaProducer<String, String> first = producer(cli, id, 0);
        first.initTransactions();
        first.beginTransaction();
        send(first, topic, "z1", 3);
        first.flush();
        try (KafkaProducer<String, String> second = producer(cli, id, 0)) {
            second.initTransactions();
            String err = "none";
            try {
                send(first, topic, "z1late", 1);
                first.commitTransaction();
            } catch (Exception e) {
                err = e.getClass().getSimpleName();
            }
            out.put("zombie_error", err);
            first.close(Duration.ZERO);
            second.beginTransaction();
            send(second, topic, "z2", 3);
            second.commitTransaction();
        }
        out.put("committed", readAll(cli, topic, "read_committed"));
    }

    static void timeout(Cli cli, Cli.Json out) throws InterruptedException {
        String topic = cli.require("t");
        int ms = cli.getInt("T", 2000);
        String err = "none";
        try (KafkaProducer<String, String> p = producer(cli, cli.require("x"), ms)) {
            p.initTransactions();
            p.beginTransaction();
            send(p, topic, "late", 3);
            p.flush();
            Thread.sleep(ms + cli.getInt("wait", 4000));
            try {
                p.commitTransaction();
            } catch (Exception e) {
                err = e.getClass().getSimpleName();
            }
            p.close(Duration.ZERO);
        }
        out.put("commit_error", err);
        out.put("committed", readAll(cli, topic, "read_committed"));
        out.put("uncommitted", readAll(cli, topic, "read_uncommitted"));
    }

    static void open(Cli cli) throws InterruptedException {
        KafkaProducer<String, String> p = producer(cli, cli.require("x"), 0);
        p.initTransactions();
        p.beginTransaction();
        send(p, cli.require("t"), "o", cli.getInt("n", 5));
        p.flush();
        System.out.println("OPEN");
        System.out.flush();
        Thread.sleep(600000);
    }

    static void load(Cli cli, Cli.Json out) {
        String topic = cli.require("t"), id = cli.require("x");
        int n = cli.getInt("n", 100), k = cli.getInt("k", 6);
        List<Integer> committed = new ArrayList<>(), unknown = new ArrayList<>();
        KafkaProducer<String, String> p = producer(cli, id, 0);
        p.initTransactions();
        for (int t = 0; t < n; t++) {
            try {
                p.beginTransaction();
                for (int i = 0; i < k; i++) {
                    String v = "L" + t + "-" + i;
                    p.send(new ProducerRecord<>(topic, v, v));
                }
                p.commitTransaction();
                committed.add(t);
                System.out.println("COMMITTED " + t);
                System.out.flush();
            } catch (Exception e) {
                unknown.add(t);
                System.err.println("transaction " + t + ": " + e);
                p.close(Duration.ZERO);
                p = producer(cli, id, 0);
                long until = System.currentTimeMillis() + 60000;
                while (true) {
                    try {
                        p.initTransactions();
                        break;
                    } catch (Exception e2) {
                        if (System.currentTimeMillis() > until)
                            throw e2;
                        System.err.println("init again: " + e2);
                        p.close(Duration.ZERO);
                        p = producer(cli, id, 0);
                    }
                }
            }
        }
        p.close();
        out.put("committed_txns", committed).put("unknown_txns", unknown);
    }

    static void zombieWait(Cli cli, Cli.Json out) throws Exception {
        String topic = cli.require("t"), id = cli.require("x");
        KafkaProducer<String, String> p = producer(cli, id, 0);
        p.initTransactions();
        p.beginTransaction();
        send(p, topic, "z1", 3);
        p.flush();
        System.out.println("READY");
        System.out.flush();
        new java.io.BufferedReader(new java.io.InputStreamReader(System.in)).readLine();
        String err = "none";
        try {
            send(p, topic, "z1late", 1);
            p.commitTransaction();
        } catch (Exception e) {
            err = e.getClass().getSimpleName();
        }
        p.close(Duration.ZERO);
        out.put("zombie_error", err);
    }
}
