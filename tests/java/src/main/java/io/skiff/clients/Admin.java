package io.skiff.clients;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.AdminClient;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;

/**
 * AdminClient operations, several per JVM: ops are separated by "+".
 *
 *   Admin -b host:port [--timeout s] create -t NAME [-P parts] [-R rf] [--config k=v]...
 *         + describe -t A,B + list + configs -t NAME + delete -t A,B + cluster
 *
 * Each op prints one JSON line per topic (or one line) with "op", and either
 * "ok": true and its results, or "error" (the exception class) and "message".
 * create waits until every partition has a leader, delete until the topic is
 * no longer listed (each bounded by --wait seconds, default 30). Exit 0 only if
 * every op succeeded.
 */
public final class Admin {
    private static boolean allOk = true;

    public static void main(String[] args) throws Exception {
        List<List<String>> segments = new ArrayList<>();
        segments.add(new ArrayList<>());
        for (String a : args) {
            if (a.equals("+")) segments.add(new ArrayList<>());
            else segments.get(segments.size() - 1).add(a);
        }
        Cli global = new Cli(segments.get(0).toArray(new String[0]));
        global.startWatchdog("admin");
        Properties p = new Properties();
        p.setProperty(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, global.require("b"));
        p.setProperty(AdminClientConfig.CLIENT_ID_CONFIG, "skiff-test-java-admin");
        p.setProperty(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.setProperty(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        p.putAll(global.props);
        try (AdminClient admin = AdminClient.create(p)) {
            for (List<String> seg : segments) {
                Cli c = new Cli(seg.toArray(new String[0]));
                if (c.positional.isEmpty()) throw new IllegalArgumentException("no op in " + seg);
                String op = c.positional.get(0);
                long waitMs = 1000L * c.getInt("wait", 30);
                try {
                    switch (op) {
                        case "create": create(admin, c, waitMs); break;
                        case "describe": describe(admin, topics(c)); break;
                        case "list": list(admin); break;
                        case "delete": delete(admin, topics(c), waitMs); break;
                        case "configs": configs(admin, topics(c)); break;
                        case "cluster": cluster(admin); break;
                        default: throw new IllegalArgumentException("unknown op " + op);
                    }
                } catch (Exception e) {
                    fail(new Cli.Json().put("op", op).put("topic", c.get("t", null)), e);
                }
            }
            admin.close(java.time.Duration.ofSeconds(10));
        }
        System.out.flush();
        System.exit(allOk ? 0 : 2);
    }

    private static List<String> topics(Cli c) {
        return Arrays.asList(c.require("t").split(","));
    }

    private static void fail(Cli.Json j, Exception e) {
        allOk = false;
        System.out.println(j.put("ok", false).put("error", Cli.errorClass(e)).put("message", Cli.describe(e)));
    }

    private static void create(AdminClient admin, Cli c, long waitMs) throws Exception {
        String name = c.require("t");
        int parts = c.getInt("P", -1);
        int rf = c.getInt("R", -1);
        NewTopic nt = new NewTopic(name, parts < 0 ? Optional.empty() : Optional.of(parts),
                rf < 0 ? Optional.empty() : Optional.of((short) rf));
        String cfgs = c.get("config", null);
        if (cfgs != null) {
            Map<String, String> m = new HashMap<>();
            for (String kv : cfgs.split(",")) {
                int eq = kv.indexOf('=');
                m.put(kv.substring(0, eq), kv.substring(eq + 1));
            }
            nt.configs(m);
        }
        long t0 = System.nanoTime();
        CreateTopicsResult r = admin.createTopics(List.of(nt));
        r.all().get(30, TimeUnit.SECONDS);
        Cli.Json j = new Cli.Json().put("op", "create").put("topic", name).put("ok", true);
        // Returned by CreateTopics v5+; absent (UnsupportedVersion) with older brokers.
        try {
            j.put("num_partitions", r.numPartitions(name).get(5, TimeUnit.SECONDS));
            j.put("replication_factor", r.replicationFactor(name).get(5, TimeUnit.SECONDS));
            Config cfg = r.config(name).get(5, TimeUnit.SECONDS);
            j.put("returned_configs", cfg.entries().size());
        } catch (Exception e) {
            j.put("result_details_error", Cli.describe(e));
        }
        // Kafka answers CreateTopics before every broker knows the topic: wait for leaders.
        long deadline = System.currentTimeMillis() + waitMs;
        String last = null;
        while (true) {
            try {
                TopicDescription d = admin.describeTopics(List.of(name)).allTopicNames()
                        .get(10, TimeUnit.SECONDS).get(name);
                boolean leaders = !d.partitions().isEmpty();
                for (TopicPartitionInfo pi : d.partitions()) leaders &= pi.leader() != null;
                if (leaders) break;
                last = "partition without leader";
            } catch (Exception e) {
                last = Cli.describe(e);
            }
            if (System.currentTimeMillis() > deadline) {
                j.put("ready", false).put("ready_error", last);
                allOk = false;
                System.out.println(j);
                return;
            }
            Thread.sleep(100);
        }
        System.out.println(j.put("ready", true)
                .put("ms", TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0)));
    }

    private static void describe(AdminClient admin, List<String> names) throws Exception {
        Map<String, TopicDescription> ds = new LinkedHashMap<>();
        for (String name : names) {
            try {
                ds.put(name, admin.describeTopics(List.of(name)).allTopicNames()
                        .get(30, TimeUnit.SECONDS).get(name));
            } catch (Exception e) {
                fail(new Cli.Json().put("op", "describe").put("topic", name), e);
            }
        }
        for (TopicDescription d : ds.values()) {
            List<Map<String, Object>> parts = new ArrayList<>();
            for (TopicPartitionInfo pi : d.partitions()) {
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("partition", pi.partition());
                m.put("leader", pi.leader() == null ? null : pi.leader().id());
                m.put("replicas", ids(pi.replicas()));
                m.put("isr", ids(pi.isr()));
                parts.add(m);
            }
            System.out.println(new Cli.Json().put("op", "describe").put("topic", d.name()).put("ok", true)
                    .put("id", d.topicId() == null ? null : d.topicId().toString())
                    .put("internal", d.isInternal()).put("partitions", parts));
        }
    }

    private static List<Integer> ids(Collection<Node> nodes) {
        List<Integer> l = new ArrayList<>();
        for (Node n : nodes) l.add(n.id());
        return l;
    }

    private static void list(AdminClient admin) throws Exception {
        Set<String> names = admin.listTopics(new ListTopicsOptions().listInternal(false)).names()
                .get(30, TimeUnit.SECONDS);
        System.out.println(new Cli.Json().put("op", "list").put("ok", true)
                .put("topics", new java.util.TreeSet<>(names)));
    }

    private static void delete(AdminClient admin, List<String> names, long waitMs) throws Exception {
        long t0 = System.nanoTime();
        Map<String, Exception> errs = new HashMap<>();
        admin.deleteTopics(names).topicNameValues().forEach((name, f) -> {
            try {
                f.get(30, TimeUnit.SECONDS);
            } catch (Exception e) {
                errs.put(name, e);
            }
        });
        long deadline = System.currentTimeMillis() + waitMs;
        Set<String> listed = Set.of();
        while (System.currentTimeMillis() < deadline) {
            listed = admin.listTopics().names().get(30, TimeUnit.SECONDS);
            boolean any = false;
            for (String n : names) any |= !errs.containsKey(n) && listed.contains(n);
            if (!any) break;
            Thread.sleep(100);
        }
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        for (String n : names) {
            Cli.Json j = new Cli.Json().put("op", "delete").put("topic", n);
            if (errs.containsKey(n)) {
                fail(j, errs.get(n));
            } else if (listed.contains(n)) {
                allOk = false;
                System.out.println(j.put("ok", false).put("error", "StillListed")
                        .put("message", "still listed " + ms + " ms after DeleteTopics succeeded"));
            } else {
                System.out.println(j.put("ok", true).put("ms", ms));
            }
        }
    }

    private static void configs(AdminClient admin, List<String> names) throws Exception {
        for (String name : names) {
            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, name);
            try {
                Config cfg = admin.describeConfigs(List.of(res)).all().get(30, TimeUnit.SECONDS).get(res);
                Map<String, Object> m = new java.util.TreeMap<>();
                for (ConfigEntry e : cfg.entries()) {
                    Map<String, Object> v = new LinkedHashMap<>();
                    v.put("value", e.value());
                    v.put("source", e.source().name());
                    v.put("read_only", e.isReadOnly());
                    v.put("sensitive", e.isSensitive());
                    m.put(e.name(), v);
                }
                System.out.println(new Cli.Json().put("op", "configs").put("topic", name).put("ok", true)
                        .put("configs", m));
            } catch (Exception e) {
                fail(new Cli.Json().put("op", "configs").put("topic", name), e);
            }
        }
    }

    private static void cluster(AdminClient admin) throws Exception {
        DescribeClusterResult r = admin.describeCluster();
        List<Map<String, Object>> nodes = new ArrayList<>();
        for (Node n : r.nodes().get(30, TimeUnit.SECONDS)) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("id", n.id());
            m.put("host", n.host());
            m.put("port", n.port());
            m.put("rack", n.rack());
            nodes.add(m);
        }
        Node ctl = r.controller().get(30, TimeUnit.SECONDS);
        System.out.println(new Cli.Json().put("op", "cluster").put("ok", true)
                .put("cluster_id", r.clusterId().get(30, TimeUnit.SECONDS))
                .put("controller", ctl == null ? null : ctl.id()).put("nodes", nodes));
    }
}
