package io.skiff.clients;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;

import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.utils.Exit;

/**
 * Runs several Kafka command-line tools, and a few AdminClient calls, in one
 * JVM, so that a test pays one JVM start-up for a whole scenario:
 *
 *   Tools [--timeout s] TOOL ARGS... + TOOL ARGS... + ...
 *
 * TOOL is one of the bin/kafka-*.sh classes of Kafka 4.3.1:
 *   groups          org.apache.kafka.tools.consumer.group.ConsumerGroupCommand
 *   configs         kafka.admin.ConfigCommand
 *   acls            org.apache.kafka.tools.AclCommand (kafka-acls.sh)
 *   log-dirs        org.apache.kafka.tools.LogDirsCommand
 *   delete-records  org.apache.kafka.tools.DeleteRecordsCommand
 *   topics          org.apache.kafka.tools.TopicCommand
 *   get-offsets     org.apache.kafka.tools.GetOffsetShell
 *   console-consumer org.apache.kafka.tools.consumer.ConsoleConsumer
 *   reassign        org.apache.kafka.tools.reassign.ReassignPartitionsCommand
 *   transactions    org.apache.kafka.tools.TransactionsCommand
 *   leader-election org.apache.kafka.tools.LeaderElectionCommand
 *   metadata-quorum org.apache.kafka.tools.MetadataQuorumCommand
 * or an AdminClient call whose result is printed as JSON:
 *   admin-groups BOOTSTRAP                 listConsumerGroups
 *   admin-describe BOOTSTRAP GROUP         describeConsumerGroups
 *   admin-offsets BOOTSTRAP GROUP          listConsumerGroupOffsets, with the end offsets (lag)
 *   admin-topics BOOTSTRAP TOPIC...        describeTopics (with authorized operations)
 *   admin-elect BOOTSTRAP TYPE TOPIC P...  electLeaders (TYPE preferred or unclean): the
 *                                          error class per partition, null for none
 *   admin-producers BOOTSTRAP TOPIC P      describeProducers
 *   admin-group-configs BOOTSTRAP GROUP [NAME=VALUE | NAME=]...
 *                                          incrementalAlterConfigs on the group (set, or
 *                                          delete when the value is empty), then
 *                                          describeConfigs: {name: [value, source]}
 *   sleep MS
 * A tool's System.exit (Kafka's Exit.exit) is caught. Each command prints one
 * JSON line: {"op":"tool","tool":..,"args":[..],"exit":code or null,
 * "out":stdout,"err":stderr,"ms":..} (admin-* add "result" or "error").
 */
public final class Tools {
    static final class ToolExit extends RuntimeException {
        private static final long serialVersionUID = 1L;
        final int code;

        ToolExit(int code) {
            super("exit " + code);
            this.code = code;
        }
    }

    static Integer exitCode;

    public static void main(String[] args) throws Exception {
        List<String> rest = new ArrayList<>(Arrays.asList(args));
        long timeout = 120;
        if (rest.size() >= 2 && rest.get(0).equals("--timeout")) {
            timeout = Long.parseLong(rest.get(1));
            rest = rest.subList(2, rest.size());
        }
        new Cli(new String[] {"--timeout", Long.toString(timeout)}).startWatchdog("tools");
        // The first exit counts: some tools catch the exception thrown here
        // and exit again with 1.
        Exit.setExitProcedure((code, msg) -> {
            if (exitCode == null) exitCode = code;
            throw new ToolExit(code);
        });
        Exit.setHaltProcedure((code, msg) -> {
            if (exitCode == null) exitCode = code;
            throw new ToolExit(code);
        });
        List<List<String>> cmds = new ArrayList<>();
        List<String> cur = new ArrayList<>();
        for (String a : rest) {
            if (a.equals("+")) {
                cmds.add(cur);
                cur = new ArrayList<>();
            } else {
                cur.add(a);
            }
        }
        cmds.add(cur);
        PrintStream realOut = System.out, realErr = System.err;
        for (List<String> cmd : cmds) {
            if (cmd.isEmpty()) continue;
            String tool = cmd.get(0);
            String[] targs = cmd.subList(1, cmd.size()).toArray(new String[0]);
            ByteArrayOutputStream out = new ByteArrayOutputStream(), err = new ByteArrayOutputStream();
            System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
            System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
            exitCode = null;
            Cli.Json j = new Cli.Json().put("op", "tool").put("tool", tool).put("args", Arrays.asList(targs));
            long t0 = System.currentTimeMillis();
            try {
                run(tool, targs, j);
            } catch (ToolExit e) {
                // the tool's own exit
            } catch (Throwable t) {
                j.put("error", Cli.errorClass(t)).put("message", Cli.describe(t));
            } finally {
                System.out.flush();
                System.err.flush();
                System.setOut(realOut);
                System.setErr(realErr);
            }
            j.put("exit", exitCode).put("ms", System.currentTimeMillis() - t0)
                    .put("out", out.toString(StandardCharsets.UTF_8))
                    .put("err", err.toString(StandardCharsets.UTF_8));
            realOut.println(j);
            realOut.flush();
        }
        realOut.flush();
        Runtime.getRuntime().halt(0); // tools may leave non-daemon threads behind
    }

    static void run(String tool, String[] a, Cli.Json j) throws Exception {
        switch (tool) {
            case "groups":
                org.apache.kafka.tools.consumer.group.ConsumerGroupCommand.main(a);
                break;
            case "configs":
                kafka.admin.ConfigCommand.main(a);
                break;
            case "acls":
                org.apache.kafka.tools.AclCommand.main(a);
                break;
            case "log-dirs":
                org.apache.kafka.tools.LogDirsCommand.main(a);
                break;
            case "delete-records":
                org.apache.kafka.tools.DeleteRecordsCommand.main(a);
                break;
            case "topics":
                org.apache.kafka.tools.TopicCommand.main(a);
                break;
            case "get-offsets":
                org.apache.kafka.tools.GetOffsetShell.main(a);
                break;
            case "console-consumer":
                org.apache.kafka.tools.consumer.ConsoleConsumer.main(a);
                break;
            case "reassign":
                org.apache.kafka.tools.reassign.ReassignPartitionsCommand.main(a);
                break;
            case "transactions":
                org.apache.kafka.tools.TransactionsCommand.main(a);
                break;
            case "leader-election":
                org.apache.kafka.tools.LeaderElectionCommand.main(a);
                break;
            case "metadata-quorum":
                org.apache.kafka.tools.MetadataQuorumCommand.main(a);
                break;
            case "admin-topics":
            case "admin-elect":
            case "admin-producers":
            case "admin-group-configs":
                AdminCalls.run(tool, a, j);
                break;
            case "sleep":
                Thread.sleep(Long.parseLong(a[0]));
                break;
            case "admin-groups":
            case "admin-describe":
            case "admin-offsets":
                admin(tool, a, j);
                break;
            default:
                throw new IllegalArgumentException("unknown tool " + tool);
        }
    }

    static void admin(String op, String[] a, Cli.Json j) throws Exception {
        Properties p = new Properties();
        p.setProperty(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, a[0]);
        p.setProperty(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.setProperty(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        try (org.apache.kafka.clients.admin.Admin admin = org.apache.kafka.clients.admin.Admin.create(p)) {
            switch (op) {
                case "admin-groups": {
                    List<Cli.Json> gs = new ArrayList<>();
                    @SuppressWarnings("deprecation")
                    Collection<ConsumerGroupListing> ls = admin.listConsumerGroups().all().get();
                    for (ConsumerGroupListing l : ls) {
                        gs.add(new Cli.Json().put("group", l.groupId()).put("simple", l.isSimpleConsumerGroup())
                                .put("state", l.groupState().map(Object::toString).orElse(null)));
                    }
                    j.put("result", gs);
                    break;
                }
                case "admin-describe": {
                    ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(a[1])).all().get().get(a[1]);
                    List<Cli.Json> ms = new ArrayList<>();
                    for (MemberDescription m : d.members()) {
                        List<String> tps = new ArrayList<>();
                        for (TopicPartition tp : m.assignment().topicPartitions()) tps.add(tp.toString());
                        tps.sort(null);
                        ms.add(new Cli.Json().put("member", m.consumerId()).put("client", m.clientId())
                                .put("host", m.host()).put("instance", m.groupInstanceId().orElse(null))
                                .put("assignment", tps));
                    }
                    j.put("result", new Cli.Json().put("group", d.groupId()).put("state", d.groupState().toString())
                            .put("assignor", d.partitionAssignor()).put("simple", d.isSimpleConsumerGroup())
                            .put("coordinator", d.coordinator() == null ? null : d.coordinator().id())
                            .put("members", ms));
                    break;
                }
                default: { // admin-offsets
                    Map<TopicPartition, OffsetAndMetadata> offs =
                            admin.listConsumerGroupOffsets(a[1]).partitionsToOffsetAndMetadata().get();
                    Map<TopicPartition, OffsetSpec> want = new java.util.HashMap<>();
                    for (TopicPartition tp : offs.keySet()) want.put(tp, OffsetSpec.latest());
                    Map<String, Object> rows = new TreeMap<>();
                    var ends = admin.listOffsets(want).all().get();
                    for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offs.entrySet()) {
                        long end = ends.get(e.getKey()).offset();
                        rows.put(e.getKey().toString(), new Cli.Json().put("offset", e.getValue().offset())
                                .put("metadata", e.getValue().metadata()).put("end", end)
                                .put("lag", end - e.getValue().offset()));
                    }
                    j.put("result", rows);
                }
            }
        }
    }
}
