#!/bin/sh
# make bench, cluster section: failover time of a 3-node cluster under SIGKILL (p50 and
# max over BENCH_CLUSTER_KILLS kills, split into detection, fencing + replay, handoff,
# adoption and client), a read-back of every acknowledged record, and the produce latency
# of the cluster beside a single node on the same machine and storage. The work is done
# by bench/cluster.py; this script builds what it runs first.
#
#   bench/cluster.sh                      alone (about 4 minutes)
#   SKIFF_BENCH_ONLY=cluster make bench   the same through make
#   BENCH_CLUSTER=0 make bench            make bench without it
#
# Exit status: 0 measured (whatever the figures), 1 the harness failed, 77 skipped (etcd
# is not installed).
#
# Environment (defaults in brackets; BENCH_SMOKE=1: 2 kills, 2 s latency runs, no docs):
#   SKIFF_BUILD=dir                  [build] where skiffd and bench/skload are
#   BENCH_NOBUILD=1                  do not build
#   BENCH_WORK=dir                   [bench/.work] results in DIR/cluster/results
#   BENCH_CLUSTER_KILLS=n            [10] SIGKILLs (nodes 1, 2, 3, 1, ...)
#   BENCH_CLUSTER_PARTITIONS=n       [12] partitions of the topics
#   BENCH_CLUSTER_PRODUCERS=n        [3] idempotent producers of the failover load
#   BENCH_CLUSTER_INTERVAL_MS=x      [10] each producer sends one record to every
#                                    partition this often
#   BENCH_CLUSTER_NFS=0              the shared volume is a local directory even when
#                                    NFS-Ganesha can run here
#   BENCH_CLUSTER_OBJECTS=file|s3    [file] objects on the local disk or in the S3
#                                    emulator (tools/s3rver.sh)
#   BENCH_CLUSTER_LATENCY=0          skip the latency runs
#   BENCH_CLUSTER_LAT_ROUNDS=1|2     [2, 1 when smoke] latency runs per side: single,
#                                    cluster, (failover), cluster, single
#   BENCH_CLUSTER_RATE=n             [BENCH_RATE, 2000] records/s of the latency runs
#   BENCH_CLUSTER_DURATION=s         [20] measured seconds of each latency run
#   BENCH_WARMUP=s, BENCH_SIZE=bytes [5, 1024] as in bench/run.sh
#   BENCH_CLUSTER_PROPS="k=v ..."    more skiffd properties for every node
#   BENCH_DOCS=0|1                   [1, 0 when smoke] rewrite the Cluster section of
#                                    docs/benchmarks.md
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH_TAG=bench-cluster
. "$ROOT/bench/lib.sh"

WORK=${BENCH_WORK:-$ROOT/bench/.work}
mkdir -p "$WORK"
bench_build "$WORK/cluster.build.log" skiffd skload

SKIFF_BUILD=$BUILD exec "$PY" "$ROOT/bench/cluster.py"
