#!/bin/sh
# make bench, zones section: zone routing in three availability zones (network
# namespaces, tools/zones.sh) with a one-way delay between them (tools/zonefwd.py):
# produce latency of a client whose partition's main is in its zone and of one served by
# its zone's proxy, end-to-end latency, and the bytes that cross zones per produced byte,
# beside Apache Kafka 4.3.1 with RF=3, one broker per zone, on the same workload. The
# work is done by bench/zones.py; this script builds what it runs first.
#
#   bench/zones.sh                        alone (about 5 minutes; needs root)
#   SKIFF_BENCH_ONLY=zones make bench     the same through make
#   BENCH_ZONES=0 make bench              make bench without it
#
# Exit status: 0 measured (whatever the figures), 1 the harness failed, 77 skipped (no
# network namespaces or nftables here, not root, or etcd missing).
#
# Environment (defaults in brackets; BENCH_SMOKE=1: Skiff only, 2 s phases, no docs):
#   SKIFF_BUILD=dir                 [build] where skiffd and bench/skload are
#   BENCH_NOBUILD=1                 do not build
#   BENCH_WORK=dir                  [bench/.work] results in DIR/zones/results
#   BENCH_ZONES_SYSTEMS="..."       [skiff kafka] (BENCH_ZONES_KAFKA=0: Skiff only)
#   BENCH_ZONES_DELAY_MS=x          [1] one-way delay between zones
#   BENCH_ZONES_PARTITIONS=n        [12] partitions of the topic
#   BENCH_SIZE=bytes                [1024] record size
#   BENCH_ZONES_PRIME=s             [15] unmeasured latency workload on each fresh cluster
#   BENCH_ZONES_RATE=n              [300] latency phase: records/s per zone
#   BENCH_ZONES_LINGER_MS=x         [1] latency phase: linger.ms
#   BENCH_ZONES_DURATION=s          [30] latency phase: measured seconds
#   BENCH_ZONES_WARMUP=s            [10] latency phase: warm-up seconds
#   BENCH_ZONES_BATCH_MBS=x         [4] batching phase: MB/s per zone
#   BENCH_ZONES_BATCH_SIZE=bytes    [131072] batching phase: batch.size (batches leave full)
#   BENCH_ZONES_BATCH_LINGER_MS=x   [200] batching phase: linger.ms
#   BENCH_ZONES_BATCH_DURATION=s    [20] batching phase: measured seconds
#   BENCH_ZONES_BATCH_WARMUP=s      [5] batching phase: warm-up seconds
#   BENCH_ZONES_PHASES="..."        [latency batching produce-only]
#   BENCH_ZONES_GAP=s               [7] pause before each phase (proxies' polls settle)
#   BENCH_ZONES_NFS=0               the shared volume is a local directory even with Ganesha
#   BENCH_ZONES_OBJECTS=file|s3     [file] objects on the local disk or in the S3 emulator
#   BENCH_ZONES_PROPS="k=v ..."     more skiffd properties for every node
#   BENCH_ZONES_KAFKA_HEAP="..."    [-Xms1g -Xmx1g] each Kafka node's heap
#   BENCH_ZONES_KEEP=1              keep the brokers' data, the volume and the objects
#                                   (deleted at the end otherwise; logs and results stay)
#   BENCH_DOCS=0|1                  [1, 0 when smoke] rewrite the Zones section of
#                                   docs/benchmarks.md
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH_TAG=bench-zones
. "$ROOT/bench/lib.sh"

WORK=${BENCH_WORK:-$ROOT/bench/.work}
mkdir -p "$WORK"
bench_build "$WORK/zones.build.log" skiffd skload

SKIFF_BUILD=$BUILD exec "$PY" "$ROOT/bench/zones.py"
