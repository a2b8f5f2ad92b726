package io.skiff.clients;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;

/**
 * AdminClient calls for Tools (admin-topics, admin-elect, admin-producers,
 * admin-group-configs); each puts its "result" into the JSON line.
 */
final class AdminCalls {
    private AdminCalls() {
    }

    static void run(String op, String[] a, Cli.Json j) throws Exception {
        Properties p = new Properties();
        p.setProperty(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, a[0]);
        p.setProperty(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.setProperty(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        try (Admin admin = Admin.create(p)) {
            switch (op) {
                case "admin-topics":
                    j.put("result", topics(admin, List.of(a).subList(1, a.length)));
                    break;
                case "admin-elect":
                    j.put("result", elect(admin, a));
                    break;
                case "admin-group-configs":
                    j.put("result", groupConfigs(admin, a));
                    break;
                default: // admin-producers
                    j.put("result", producers(admin, new TopicPartition(a[1], Integer.parseInt(a[2]))));
            }
        }
    }

    static List<Integer> ids(List<Node> nodes) {
        List<Integer> out = new ArrayList<>();
        for (Node n : nodes) out.add(n.id());
        return out;
    }

    static Map<String, Object> topics(Admin admin, List<String> names) throws Exception {
        Map<String, TopicDescription> ds = admin.describeTopics(names,
                new DescribeTopicsOptions().includeAuthorizedOperations(true)).allTopicNames().get();
        Map<String, Object> out = new TreeMap<>();
        for (TopicDescription d : ds.values()) {
            List<Cli.Json> ps = new ArrayList<>();
            for (TopicPartitionInfo pi : d.partitions()) {
                ps.add(new Cli.Json().put("partition", pi.partition())
                        .put("leader", pi.leader() == null ? null : pi.leader().id())
                        .put("replicas", ids(pi.replicas())).put("isr", ids(pi.isr())));
            }
            List<String> ops = new ArrayList<>();
            if (d.authorizedOperations() != null) d.authorizedOperations().forEach(o -> ops.add(o.toString()));
            ops.sort(null);
            out.put(d.name(), new Cli.Json().put("id", d.topicId().toString()).put("internal", d.isInternal())
                    .put("partitions", ps).put("ops", ops));
        }
        return out;
    }

    /** a: BOOTSTRAP TYPE TOPIC PARTITION... ; TOPIC "-" elects every partition. */
    static Map<String, Object> elect(Admin admin, String[] a) throws Exception {
        ElectionType type = a[1].equals("unclean") ? ElectionType.UNCLEAN : ElectionType.PREFERRED;
        Set<TopicPartition> tps = null;
        if (!a[2].equals("-")) {
            tps = new HashSet<>();
            for (int i = 3; i < a.length; i++) tps.add(new TopicPartition(a[2], Integer.parseInt(a[i])));
        }
        Map<String, Object> out = new TreeMap<>();
        try {
            admin.electLeaders(type, tps).partitions().get().forEach((tp, err) ->
                    out.put(tp.toString(), err.map(Cli::errorClass).orElse(null)));
        } catch (ExecutionException e) {
            out.put("error", Cli.errorClass(e.getCause()));
        }
        return out;
    }

    /** a: BOOTSTRAP GROUP [NAME=VALUE | NAME=]... */
    static Map<String, Object> groupConfigs(Admin admin, String[] a) throws Exception {
        ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, a[1]);
        List<AlterConfigOp> ops = new ArrayList<>();
        for (int i = 2; i < a.length; i++) {
            String[] kv = a[i].split("=", 2);
            ops.add(kv[1].isEmpty()
                    ? new AlterConfigOp(new ConfigEntry(kv[0], null), AlterConfigOp.OpType.DELETE)
                    : new AlterConfigOp(new ConfigEntry(kv[0], kv[1]), AlterConfigOp.OpType.SET));
        }
        if (!ops.isEmpty()) admin.incrementalAlterConfigs(Map.of(res, ops)).all().get();
        // A Kafka broker describes the change once its metadata caught up: ask until then.
        Map<String, Object> out = new TreeMap<>();
        for (int attempt = 0; attempt < 50; attempt++) {
            out.clear();
            boolean shown = true;
            Map<String, ConfigEntry> got = new TreeMap<>();
            for (ConfigEntry e : admin.describeConfigs(List.of(res)).all().get().get(res).entries()) {
                out.put(e.name(), List.of(e.value(), e.source().toString()));
                got.put(e.name(), e);
            }
            for (AlterConfigOp op : ops) {
                ConfigEntry e = got.get(op.configEntry().name());
                boolean own = e != null && e.source() == ConfigEntry.ConfigSource.DYNAMIC_GROUP_CONFIG;
                shown &= op.opType() == AlterConfigOp.OpType.DELETE
                        ? !own : own && op.configEntry().value().equals(e.value());
            }
            if (shown) break;
            Thread.sleep(100);
        }
        return out;
    }

    static List<Cli.Json> producers(Admin admin, TopicPartition tp) throws Exception {
        List<Cli.Json> out = new ArrayList<>();
        for (ProducerState s : admin.describeProducers(List.of(tp)).partitionResult(tp).get().activeProducers()) {
            out.add(new Cli.Json().put("pid", s.producerId()).put("epoch", s.producerEpoch())
                    .put("lastSequence", s.lastSequence()).put("lastTimestamp", s.lastTimestamp())
                    .put("coordinatorEpoch", s.coordinatorEpoch().isPresent() ? s.coordinatorEpoch().getAsInt() : null)
                    .put("txnStart", s.currentTransactionStartOffset().isPresent()
                            ? s.currentTransactionStartOffset().getAsLong() : null));
        }
        return out;
    }
}
