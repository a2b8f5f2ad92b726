/*
 * status: `skiffd status --bootstrap host:port`, a cluster's state for a person.
 *
 * Asks the bootstrap node for Metadata (the live nodes, with their zones and
 * the partitions each leads), then every node for its NodeStatus (its
 * metrics, the text /metrics serves), and prints per node its zone and
 * health, the partitions it serves, its WAL backlog and upload lag, its
 * objects; a line per long piece of work under way (a rebalance, a
 * reassignment, a retention sweep: progress.h); then the cluster's cross-zone traffic by kind and what it costs
 * (docs/zones.md, summed as tools/zone-report.py does), set against what a
 * classic RF=3 Kafka over three zones would send across for the same
 * produced bytes (docs/operations.md states the model).
 *
 * A command-line tool, not part of a running node: blocking sockets on the
 * main thread, with a timeout per connection. Returns the exit status: 0
 * when every node answered and is healthy, 1 when one is not (the others
 * are still reported), 2 on a usage error or when the bootstrap node cannot
 * be read. Prints nothing secret: nodes' metrics carry none.
 */
#ifndef STATUS_H
#define STATUS_H

/* argv[0] is "status". */
int sk_status_main(int argc, char **argv);

#endif
