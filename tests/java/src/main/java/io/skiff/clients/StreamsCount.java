package io.skiff.clients;

import java.nio.file.Files;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * A Kafka Streams application with processing.guarantee=exactly_once_v2 that counts the
 * values of -i by value: the records are re-keyed by their value (a repartition topic),
 * counted in the state store "counts" (with its changelog topic) and each new count is
 * written to -o as (value, count as a decimal string). -a is the application id, -d the
 * state directory (a new temporary one when absent), --prop any Streams property.
 * Prints {"state":...} at every state change and runs until killed, --timeout, or the
 * application's ERROR state (exit 2).
 */
public final class StreamsCount {
    public static void main(String[] args) throws Exception {
        Cli cli = new Cli(args);
        cli.startWatchdog("streams");
        Properties p = new Properties();
        p.setProperty(StreamsConfig.APPLICATION_ID_CONFIG, cli.require("a"));
        p.setProperty(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, cli.require("b"));
        p.setProperty(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.setProperty(StreamsConfig.STATE_DIR_CONFIG, cli.get("d",
                Files.createTempDirectory("skiff-streams").toString()));
        p.setProperty(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "200");
        p.setProperty(StreamsConfig.REPLICATION_FACTOR_CONFIG, "1");
        p.setProperty(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, "0");
        p.putAll(cli.props);

        StreamsBuilder b = new StreamsBuilder();
        b.stream(cli.require("i"), Consumed.with(Serdes.String(), Serdes.String()))
                .groupBy((k, v) -> v, Grouped.with("by-value", Serdes.String(), Serdes.String()))
                .count(Materialized.as("counts"))
                .toStream()
                .map((k, n) -> KeyValue.pair(k, Long.toString(n)))
                .to(cli.require("o"), Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams app = new KafkaStreams(b.build(), p);
        CountDownLatch failed = new CountDownLatch(1);
        app.setStateListener((now, before) -> {
            System.out.println(new Cli.Json().put("state", now.toString()));
            System.out.flush();
            if (now == KafkaStreams.State.ERROR) failed.countDown();
        });
        app.setUncaughtExceptionHandler(e -> {
            System.out.println(new Cli.Json().put("error", e.toString()));
            System.out.flush();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
                    .StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(app::close));
        app.start();
        failed.await();
        System.exit(2);
    }
}
