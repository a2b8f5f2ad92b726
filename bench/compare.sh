#!/bin/sh
# make bench-compare: Skiff and Apache Kafka side by side, same machine, same
# disk, same load generator (skload), same client settings, every figure of the
# performance targets in one run.
#
#   1. builds skload, diskfloor, nfsfloor, relayfloor and skiffd; fetches Kafka 4.3.1 from
#      Maven Central (tools/kafka-ref.sh, cached after the first run);
#   2. describes the machine and measures the disk floor (diskfloor) and the CPU
#      of passing bytes between sockets (relayfloor); starts the
#      S3 emulator (BENCH_S3_EMULATOR: tools/s3emu.sh, or tools/s3rver.sh) with its
#      data directory on a tmpfs (mounted by root under BENCH_WORK, else in /dev/shm)
#      for the production-shaped target;
#   3. BENCH_REPEATS times (the order of the targets rotates from one
#      repetition to the next, so that none always runs first on a rested
#      disk), for each target:
#        skiff-s3     production-shaped: one skiffd, WAL in data.dir on the local
#                     disk (fdatasync, group commit), objects.url on the emulator
#                     (a prefix of its own), so that uploads do not compete with
#                     the WAL for the disk (production: WAL on FSx, objects in S3)
#        skiff        one skiffd, defaults: WAL and objects in data.dir, one disk
#        kafka        one KRaft node (tools/kafka-ref.sh), Kafka's defaults:
#                     acks=all is page-cache durability, no fsync
#        kafka-fsync  the same, topics created with flush.messages=1: Kafka
#                     fsyncs each append before acknowledging it, like Skiff
#      starts the broker on a fresh data directory, reads its idle RSS, primes
#      it (BENCH_PRIME seconds of (a) on a throwaway topic: a fresh JVM runs
#      its first seconds interpreted, Skiff gets the same), then runs
#        (a)    fixed rate, 1 KiB records, acks=all: produce latency
#        (b1k)  max throughput, acks=all, 1 KiB records
#        (b16k) max throughput, acks=all, 16 KiB records
#        (c)    as (a) with a consumer reading at the head: end-to-end latency;
#               BENCH_TAIL_READERS (3) more consumers read at the head too, so
#               that (c)'s CPU minus (a)'s is the broker CPU of tail reads
#        (l)    BENCH_SLOW_RATE (2000) records/s of 1 KiB, linger.ms=0: produce
#               p99 against the disk's 4 KiB append + fdatasync p99, on a
#               quiesced broker and disk: before it, the harness waits (at
#               most BENCH_QUIESCE_S) until Skiff has uploaded its backlog
#               (skiff_s3_upload_lag_bytes 0 on its metrics endpoint) and,
#               for every target, until `sync` has written back the page
#               cache (Dirty + Writeback below BENCH_QUIESCE_DIRTY_MIB):
#               (b1k)/(b16k)/(c) leave gigabytes behind (Skiff: uploads and
#               WAL trims; Kafka default: dirty pages), whose digestion
#               would otherwise fall on (l)'s tail; quiesce_l.txt says what
#               was waited for
#        (d)    catch-up read of the first BENCH_CATCHUP_BYTES of (b1k)'s topic
#        (d2)   the same catch-up again (a second consumer: a broker that has
#               served a catch-up before, its buffers already faulted in)
#      while sampling the broker's RSS and reading its CPU time from /proc
#      around each workload, then stops the broker by its PID and wipes its data;
#      then, in the first BENCH_SECTION_REPEATS repetitions, the sections of
#      BENCH_SECTIONS: nfs (bench/nfs.sh: the WAL on NFS-Ganesha beside nfsfloor)
#      and s3 (bench/s3.sh: catch-up read from objects beside raw ranged GETs, on
#      the emulator of skiff-s3, with the CPU each process used),
#      their results kept in results/sections/r<N>/;
#   4. bench/compare_report.py writes report.md (Markdown tables, min / median
#      / max over the repetitions, ratios Skiff / Kafka, the targets with
#      PASS/MISS labels), report.json and, with gnuplot, the PNG plots; with
#      BENCH_DOCS=1 (the default of a full run) it also replaces the generated
#      section of docs/benchmarks.md and the plots in docs/benchmarks/.
#
# Exit status: 0 when every figure was measured, whatever it says; 1 when the
# harness failed (build, Kafka download or start, a broker died, a workload
# measured nothing).
#
# Environment (defaults in brackets; BENCH_SMOKE=1 shrinks everything to a
# run of about two minutes, Kafka start-up included, for `make test`):
#   BENCH_REPEATS=n          [3] repetitions of every target
#   BENCH_TARGETS="..."      [skiff-s3 skiff kafka kafka-fsync]
#   BENCH_DURATION=s         [15] measured seconds of (a), (b1k), (b16k), (c), (l)
#   BENCH_WARMUP=s           [4] unmeasured seconds before each
#   BENCH_PRIME=s            [10] unmeasured (a)-like run on a new broker first
#   BENCH_PARTITIONS=n       [4] partitions of every topic
#   BENCH_RATE_MBS=x         [20] MB/s (10^6 B) of 1 KiB records in (a) and (c)
#   BENCH_LINGER_A=ms        [1] linger.ms of (a) and (c)
#   BENCH_SLOW_RATE=n        [2000] records/s of (l)
#   BENCH_QUIESCE_S=s        [120; smoke 5] longest wait for a quiet broker and
#                            disk before (l)
#   BENCH_QUIESCE_DIRTY_MIB=n [64] page cache dirty + under write-back that
#                            counts as a quiet disk
#   BENCH_TAIL_READERS=n     [3] consumers of (c) beside the timed one (skload
#                            --tail-readers): the tail reads whose CPU is measured
#   BENCH_MAX_BEHIND=s       [10] (a)/(c)/(l) stop sending once this far behind
#                            the schedule (the rest is counted unsent): a broker
#                            that cannot take the rate ends its run in bounded time
#   BENCH_TP_PRODUCERS=n     [4] producer instances of (b1k)/(b16k)
#   BENCH_LINGER_B=ms        [5] linger.ms of (b1k)/(b16k)
#   BENCH_INFLIGHT_BYTES=n   [20480000] in-flight bound of (b), in bytes (20000
#                            records of 1 KiB, 1250 of 16 KiB)
#   BENCH_CATCHUP_BYTES=n    [1000000000] bytes read by (d)
#   BENCH_RSS_SLACK_MIB=n    [64] the configured memory bound of skiffd is its idle
#                            RSS + wal.cache.bytes + s3.block.cache.bytes + an
#                            upload in flight (the size that starts one) + this
#   BENCH_S3_EMULATOR=name   [s3emu] the emulator of skiff-s3: s3emu (Go, concurrent,
#                            2.5-3x s3rver's PUT floor here; s3rver when Go is
#                            missing) or s3rver (Node.js, the tests'); both verify
#                            SigV4 (bench/README.md)
#   BENCH_FRESHMEM_MIB=n     [4096] MiB written into a new file on that tmpfs before
#                            the emulator starts: what a store into fresh pages costs
#   BENCH_S3_TMPFS=dir       [BENCH_WORK/s3tmpfs, a tmpfs mounted there by root
#                            (size BENCH_S3_TMPFS_SIZE, 16g); else /dev/shm/...]
#                            the emulator's data directory of skiff-s3
#   BENCH_SECTIONS="..."     [nfs s3; empty: none] extra sections, in the first
#                            BENCH_SECTION_REPEATS [2; smoke 1] repetitions
#   BENCH_NFS_DURATION=s     [20; smoke 1] measured seconds of each nfs.sh workload
#   BENCH_S3_BYTES=n         [1073741824; smoke 16777216] bytes s3.sh ingests and
#                            reads back, in BENCH_S3_SIZE [1024] B records (as (d))
#   BENCH_KAFKA_HEAP="..."   [-Xms1g -Xmx1g] Kafka's JVM heap (G1)
#   BENCH_KAFKA_PROPS="..."  extra server.properties lines for Kafka
#   BENCH_KAFKA_SHARED=0|1   [0; smoke 1] one Kafka process per repetition for
#                            both Kafka targets (flush.messages is a topic
#                            config, so the fsync target just uses its own topics)
#   BENCH_SKIFFD_ARGS="..."  extra skiffd arguments (--override k=v), both Skiff targets
#   BENCH_WORK=dir           [bench/.work/compare] data, logs and results
#   BENCH_MIN_FREE_GB=n      [24; not checked in smoke runs] GB that must be free
#                            under BENCH_WORK at the start (a target's data
#                            directory reaches ~19 GB)
#   BENCH_DOCS=0|1           [1; smoke 0] update docs/benchmarks.md and docs/benchmarks/
#   BENCH_NOBUILD=1          use the binaries in SKIFF_BUILD [build] as they are
# A full run takes about 40 minutes on 2 cores (bench/README.md has the sum).
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH_TAG=bench-compare
. "$ROOT/bench/lib.sh"
KREF=$ROOT/tools/kafka-ref.sh

if [ "$SMOKE" = 1 ]; then
  d_rep=1; d_dur=1; d_warm=0.3; d_mbs=2; d_catch=20000000; d_shared=1; d_docs=0; d_behind=3
  d_prime=0.5; d_slow=200; d_secrep=1; d_nfsdur=1; d_s3bytes=16777216; d_quiesce=5
else
  d_rep=3; d_dur=15; d_warm=4; d_mbs=20; d_catch=1000000000; d_shared=0; d_docs=1; d_behind=10
  d_prime=10; d_slow=2000; d_secrep=2; d_nfsdur=20; d_s3bytes=1073741824; d_quiesce=120
fi
REPEATS=${BENCH_REPEATS:-$d_rep}
TARGETS=${BENCH_TARGETS:-skiff-s3 skiff kafka kafka-fsync}
DURATION=${BENCH_DURATION:-$d_dur}
WARMUP=${BENCH_WARMUP:-$d_warm}
PRIME=${BENCH_PRIME:-$d_prime}
PARTITIONS=${BENCH_PARTITIONS:-4}
RATE_MBS=${BENCH_RATE_MBS:-$d_mbs}
LINGER_A=${BENCH_LINGER_A:-1}
SLOW_RATE=${BENCH_SLOW_RATE:-$d_slow}
QUIESCE_S=${BENCH_QUIESCE_S:-$d_quiesce}
QUIESCE_DIRTY_MIB=${BENCH_QUIESCE_DIRTY_MIB:-64}
TAIL_READERS=${BENCH_TAIL_READERS:-3}
MAX_BEHIND=${BENCH_MAX_BEHIND:-$d_behind}
TP_PRODUCERS=${BENCH_TP_PRODUCERS:-4}
LINGER_B=${BENCH_LINGER_B:-5}
INFLIGHT_BYTES=${BENCH_INFLIGHT_BYTES:-20480000}
CATCHUP=${BENCH_CATCHUP_BYTES:-$d_catch}
RSS_SLACK=${BENCH_RSS_SLACK_MIB:-64}
SECTIONS=${BENCH_SECTIONS-nfs s3}
SECTION_REPEATS=${BENCH_SECTION_REPEATS:-$d_secrep}
NFS_DURATION=${BENCH_NFS_DURATION:-$d_nfsdur}
S3_BYTES=${BENCH_S3_BYTES:-$d_s3bytes}
S3_SIZE=${BENCH_S3_SIZE:-1024}
KAFKA_HEAP=${BENCH_KAFKA_HEAP:--Xms1g -Xmx1g}
KSHARED=${BENCH_KAFKA_SHARED:-$d_shared}
DOCS=${BENCH_DOCS:-$d_docs}

WORK=${BENCH_WORK:-$ROOT/bench/.work/compare}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
OUT=$WORK/results
SKLOAD=$BUILD/bench/skload
# Each target's data directory stays until the next target starts: Kafka's logs,
# Skiff's WAL and, all on one disk, its objects, up to ~19 GB at once. A disk
# that fills halfway fails the run there; say so before it starts.
if [ "$SMOKE" != 1 ]; then
  need_gb=${BENCH_MIN_FREE_GB:-24}
  free_gb=$(df -Pk "$WORK" | awk 'NR == 2 {print int($4 / 1048576)}')
  [ "${free_gb:-0}" -ge "$need_gb" ] \
    || fail "$free_gb GB free under $WORK, a full run needs about $need_gb (BENCH_MIN_FREE_GB)"
fi
DISKFLOOR=$BUILD/bench/diskfloor

# records/s of 1 KiB records for RATE_MBS (MB = 10^6 B), and the in-flight bounds
RATE=$("$PY" -c "print(max(1, round(float('$RATE_MBS') * 1e6 / 1024)))")
INFL_1K=$("$PY" -c "print(max(1, int('$INFLIGHT_BYTES') // 1024))")
INFL_16K=$("$PY" -c "print(max(1, int('$INFLIGHT_BYTES') // 16384))")

KDIR=""          # directory of the Kafka we started (tools/kafka-ref.sh keeps its PID there)
SAMPLER_PID=""
TMPFS=""         # the emulator's data directory, when we made it
TMPFS_MOUNTED=""

stop_sampler() {
  if [ -n "$SAMPLER_PID" ]; then
    kill "$SAMPLER_PID" 2>/dev/null || true
    wait "$SAMPLER_PID" 2>/dev/null || true
    SAMPLER_PID=""
  fi
}

stop_kafka() {
  [ -n "$KDIR" ] || return 0
  "$KREF" stop "$KDIR" > /dev/null 2>&1 || true
  KDIR=""
}

drop_tmpfs() {
  [ -n "$TMPFS" ] || return 0
  if [ -n "$TMPFS_MOUNTED" ]; then umount "$TMPFS" 2>/dev/null || true; fi
  rm -rf "$TMPFS"
  TMPFS=""
}

cleanup() {
  rc=$?
  stop_sampler
  bench_stop_all
  stop_kafka
  drop_tmpfs
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- 1. build
bench_build "$WORK/build.log" skload diskfloor nfsfloor relayfloor skiffd
for b in "$SKLOAD" "$DISKFLOOR" "$BUILD/skiffd"; do
  [ -x "$b" ] || fail "$b missing (librdkafka-dev installed? make test-deps)"
done
case " $TARGETS " in
  *" kafka"*)
    command -v java >/dev/null 2>&1 || fail "java not found (make test-deps)"
    "$KREF" fetch || fail "Kafka download (tools/kafka-ref.sh fetch)" ;;
esac

rm -rf "$OUT" "$WORK/floor"
mkdir -p "$OUT" "$WORK/floor"
say "results in $OUT$( [ "$SMOKE" = 1 ] && echo ' (smoke run: tiny sizes, figures meaningless)')"

# ------------------------------------------------- 2. machine, disk floor
{
  echo "cores $(nproc)"
  echo "cpu $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
  echo "mem_kib $(awk '/^MemTotal:/ { print $2 }' /proc/meminfo)"
  echo "kernel $(uname -r)"
  echo "os $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  echo "java $(java -version 2>&1 | head -1)"
  echo "librdkafka $(pkg-config --modversion rdkafka 2>/dev/null || echo '?')"
  echo "git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD -- broker wal proxy s3sink common proto 2>/dev/null || echo ' (with uncommitted changes)')"
} > "$OUT/machine.txt"
cut -d' ' -f1-3 /proc/loadavg > "$OUT/load_start.txt"
if [ "$SMOKE" = 1 ]; then fl="--iterations 100 --seq-seconds 0.3 --wakeups 100"
else fl="--iterations 5000 --seq-seconds 10 --wakeups 2000"; fi
say "disk floor in $WORK/floor"
# shellcheck disable=SC2086
"$DISKFLOOR" --dir "$WORK/floor" $fl > "$OUT/floor.json" || fail "diskfloor"
# What a catch-up's bytes cost a process at least: relayed from a socket to
# another (a broker reading from an object store) or sendfile'd (Kafka).
if [ "$SMOKE" = 1 ]; then rb=67108864; else rb=2147483648; fi
"$BUILD/bench/relayfloor" --bytes $rb > "$OUT/relayfloor.json" || fail "relayfloor"

# The emulator of the production-shaped target, its data on a tmpfs so that the
# uploads do not compete with the WAL for the disk.
S3_BUCKET=bench
S3_EMULATOR=${BENCH_S3_EMULATOR:-s3emu}
case " $TARGETS " in
  *" skiff-s3 "*)
    TMPFS=${BENCH_S3_TMPFS:-$WORK/s3tmpfs}
    mkdir -p "$TMPFS"
    if [ -z "${BENCH_S3_TMPFS:-}" ] && [ "$(id -u)" = 0 ] \
        && mount -t tmpfs -o "size=${BENCH_S3_TMPFS_SIZE:-16g}" skiff-bench "$TMPFS" 2>/dev/null; then
      TMPFS_MOUNTED=1
    elif [ -z "${BENCH_S3_TMPFS:-}" ]; then
      rmdir "$TMPFS"
      TMPFS=/dev/shm/skiff-bench-compare-$$
      mkdir -p "$TMPFS"
    fi
    # What storing into fresh pages costs here (the emulator stores every upload so):
    # a new file on that tmpfs, written 1 MiB at a time, then deleted.
    if [ "$SMOKE" = 1 ]; then fm=64; else fm=${BENCH_FRESHMEM_MIB:-4096}; fi
    "$PY" "$ROOT/bench/freshmem.py" "$TMPFS/freshmem" "$fm" > "$OUT/freshmem.json" \
      || fail "fresh memory floor"
    set +e
    s3_start "$TMPFS/$S3_EMULATOR" "$OUT/${S3_EMULATOR}_start.log" "$S3_BUCKET"
    rc=$?
    set -e
    if [ $rc -eq 77 ] && [ "$S3_EMULATOR" = s3emu ]; then
      say "s3emu cannot run here (no Go): s3rver instead, whose PUT floor may cap skiff-s3"
      S3_EMULATOR=s3rver
      rc=0
      s3_start "$TMPFS/$S3_EMULATOR" "$OUT/${S3_EMULATOR}_start.log" "$S3_BUCKET" || rc=$?
    fi
    [ $rc -eq 0 ] || fail "the production-shaped target needs the S3 emulator (tools/$S3_EMULATOR.sh)"
    echo "$(stat -f -c %T "$TMPFS") $TMPFS" > "$OUT/s3_fs.txt"
    say "S3 emulator on $S3_ENDPOINT, data on $(cat "$OUT/s3_fs.txt")" ;;
esac
"$BUILD/skiffd" --gen-config-doc > "$OUT/skiffd_config.md" 2>/dev/null || true

# ------------------------------------------------------------- 3. brokers
BOOT=""
BROKER_PID=""

start_skiff() { # rundir extra-args...
  dir=$1
  shift
  data=$WORK/skiff-data
  rm -rf "$data"
  mkdir -p "$data"
  MPORT=$(free_port)
  # shellcheck disable=SC2086
  set -- --override "data.dir=$data" --override "metrics.listener=127.0.0.1:$MPORT" "$@" \
    ${BENCH_SKIFFD_ARGS:-}
  skiffd_start "$dir/skiffd.log" "$(free_port)" "$@"
  BROKER_PID=$SKIFFD_PID
  # what an upload in flight may hold, for the report's memory bound
  skiffd_metric "$MPORT" skiff_s3_upload_trigger_bytes > "$dir/upload_trigger_bytes.txt" \
    || rm -f "$dir/upload_trigger_bytes.txt"
  echo "skiffd $BUILD/skiffd --override node.id=1 --override listeners=PLAINTEXT://$BOOT $*" > "$dir/broker.txt"
  say "  skiffd pid $SKIFFD_PID on $BOOT"
}

start_kafka() { # rundir
  KDIR=$WORK/kafka
  rm -rf "$KDIR"
  mkdir -p "$KDIR"
  port=$(free_port)
  BOOT=127.0.0.1:$port
  t0=$(date +%s)
  KAFKA_REF_HEAP=$KAFKA_HEAP KAFKA_REF_PROPS=${BENCH_KAFKA_PROPS:-} \
    "$KREF" start "$KDIR" "$port" 2> "$1/kafka-start.log" \
    || { cat "$1/kafka-start.log" >&2; KDIR=""; fail "Kafka start (log: $WORK/kafka/kafka.log)"; }
  BROKER_PID=$(cat "$KDIR/kafka.pid")
  KBOOT=$BOOT
  echo "$(( $(date +%s) - t0 ))" > "$1/kafka_start_s.txt"
  cp "$KDIR/server.properties" "$1/server.properties"
  echo "kafka pid $BROKER_PID heap $KAFKA_HEAP G1" > "$1/broker.txt"
  say "  Kafka pid $BROKER_PID on $BOOT (started in $(cat "$1/kafka_start_s.txt") s)"
}

# Waits, at most QUIESCE_S in all, until the broker has digested what ran
# before: Skiff's upload backlog uploaded (its metrics endpoint on MPORT,
# empty for Kafka), then the page cache written back. Says what it saw in
# RUNDIR/quiesce_l.txt.
quiesce() { # rundir
  t0=$(date +%s)
  lag0=na lag=na
  if [ -n "$MPORT" ]; then
    lag0=$(skiffd_metric "$MPORT" skiff_s3_upload_lag_bytes || echo na)
    lag=$lag0
    while [ "$lag" != 0 ] && [ $(($(date +%s) - t0)) -lt "$QUIESCE_S" ]; do
      sleep 0.5
      lag=$(skiffd_metric "$MPORT" skiff_s3_upload_lag_bytes || echo na)
    done
  fi
  dirty0=$(dirty_kib)
  sync
  while [ "$(dirty_kib)" -gt $((QUIESCE_DIRTY_MIB * 1024)) ] && [ $(($(date +%s) - t0)) -lt "$QUIESCE_S" ]; do
    sleep 0.5
    sync
  done
  echo "waited_s $(($(date +%s) - t0)) upload_lag_bytes $lag0 -> $lag dirty_kib $dirty0 -> $(dirty_kib)" \
    > "$1/quiesce_l.txt"
  say "  quiesced in $(cat "$1/quiesce_l.txt")"
}

broker_alive() {
  [ -n "$BROKER_PID" ] && kill -0 "$BROKER_PID" 2>/dev/null
}

# ---------------------------------------------------------- 4. workloads
stamp=$(date +%s)

# One line for RUNDIR/NAME_machine.txt: the machine's busy and total CPU ticks
# (/proc/stat) and, for skiff-s3, the emulator's CPU ticks and the bytes skiffd has
# put to it (skiff_s3_bytes_up_total): who used the two cores during a workload.
machine_mark() { # target
  if [ "$1" = skiff-s3 ]; then
    echo "$(machine_ticks) $(cpu_mark "$(cat "$S3_DIR/$S3_EMULATOR.pid" 2>/dev/null || echo 0)" | cut -d' ' -f2)" \
         "$(skiffd_metric "$MPORT" skiff_s3_bytes_up_total || echo 0)"
  else
    machine_ticks
  fi
}

# The broker's minor page faults so far: pages it touched for the first time.
minflt() { awk '{ print $10 }' "/proc/$1/stat" 2>/dev/null || echo 0; }

workload() { # rundir name target-topic-config skload-args...
  dir=$1; name=$2; tcfg=$3; shift 3
  bound=$("$PY" -c "print(int(float('$DURATION') + float('$WARMUP') + float('$MAX_BEHIND') + 120))")
  n0=$(wc -l < "$dir/rss_samples.txt" 2>/dev/null || echo 0)
  m0=$(cpu_mark "$BROKER_PID")
  x0=$(machine_mark "$target")
  f0=$(minflt "$BROKER_PID")
  # shellcheck disable=SC2086
  timeout -k 10 "$bound" "$SKLOAD" -b "$BOOT" --json $tcfg "$@" > "$dir/$name.json" 2> "$dir/$name.log" || true
  echo "$m0 $(cpu_mark "$BROKER_PID")" > "$dir/${name}_cpu.txt"
  echo "$x0 $(machine_mark "$target")" > "$dir/${name}_machine.txt"
  echo "$f0 $(minflt "$BROKER_PID")" > "$dir/${name}_minflt.txt"
  # RSS during this workload: the sample lines it spans, and one reading at its end
  echo "$n0 $(wc -l < "$dir/rss_samples.txt" 2>/dev/null || echo 0) $(status_kib "$BROKER_PID" VmRSS)" \
    > "$dir/${name}_rss.txt"
  broker_alive || fail "the broker died during $name (see $dir)"
  [ -s "$dir/$name.json" ] || { tail -5 "$dir/$name.log" >&2; fail "$name measured nothing (log: $dir/$name.log)"; }
}

run_target() { # rep target
  rep=$1; target=$2
  dir=$OUT/runs/r$rep/$target
  mkdir -p "$dir"
  say "repetition $rep: $target"
  # Write back what the previous broker left dirty in the page cache (Kafka
  # default leaves GBs), so that it does not land on this broker's syncs.
  sync
  loadavg > "$dir/load_before.txt"
  prefix=r$rep-$stamp
  MPORT=""
  case "$target" in
    skiff) start_skiff "$dir"; tcfg="" ;;
    skiff-s3) start_skiff "$dir" --override "objects.url=$(s3_url "$S3_BUCKET" "$prefix")"; tcfg="" ;;
    kafka|kafka-fsync)
      if [ -z "$KDIR" ]; then
        start_kafka "$dir"
        KAFKA_IDLE_FROM=$dir
      else
        BROKER_PID=$(cat "$KDIR/kafka.pid")
        BOOT=$KBOOT
        say "  reusing Kafka pid $BROKER_PID (BENCH_KAFKA_SHARED=1)"
        cp "$KAFKA_IDLE_FROM/broker.txt" "$KAFKA_IDLE_FROM/server.properties" "$dir/"
        echo "shared with $(basename "$KAFKA_IDLE_FROM")" > "$dir/shared.txt"
      fi
      tcfg=""
      [ "$target" = kafka-fsync ] && tcfg="--topic-config flush.messages=1" ;;
    *) fail "unknown target $target (skiff-s3, skiff, kafka, kafka-fsync)" ;;
  esac

  if [ ! -f "$dir/shared.txt" ]; then
    timeout 60 "$SKLOAD" -b "$BOOT" --mode metadata --json > "$dir/metadata.json" 2> "$dir/metadata.log" \
      || { cat "$dir/metadata.log" >&2; fail "Metadata request to $BOOT"; }
    sleep 1  # let start-up work settle before reading
    status_kib "$BROKER_PID" VmRSS > "$dir/idle_rss_kib.txt"
  else
    cp "$KAFKA_IDLE_FROM/idle_rss_kib.txt" "$dir/"
  fi
  : > "$dir/rss_samples.txt"
  ( while kill -0 "$BROKER_PID" 2>/dev/null; do
      status_kib "$BROKER_PID" VmRSS; sleep 0.2
    done ) >> "$dir/rss_samples.txt" &
  SAMPLER_PID=$!

  topic="cmp-$target-r$rep-$stamp"
  common="-p $PARTITIONS -a all --warmup $WARMUP -d $DURATION --buckets"
  if [ "$SMOKE" = 1 ]; then n1k="-n 20000 --warmup 0"; n16k="-n 1500 --warmup 0"; else n1k=""; n16k=""; fi

  if [ ! -f "$dir/shared.txt" ] && [ "$PRIME" != 0 ]; then
    say "  priming: ${PRIME} s of (a), not measured"
    # shellcheck disable=SC2086
    workload "$dir" prime "$tcfg" -p "$PARTITIONS" -a all -d "$PRIME" -t "$topic-prime" -s 1024 \
      -P 1 -r "$RATE" --linger-ms "$LINGER_A" --max-inflight "$INFL_1K" --max-behind "$MAX_BEHIND"
  fi

  say "  (a) $RATE_MBS MB/s of 1 KiB records ($RATE rec/s), linger.ms=$LINGER_A"
  # shellcheck disable=SC2086
  workload "$dir" a "$tcfg" $common -t "$topic-a" -s 1024 -P 1 -r "$RATE" --linger-ms "$LINGER_A" \
    --max-inflight "$INFL_1K" --max-behind "$MAX_BEHIND"
  say "  (b1k) max throughput, 1 KiB records, $TP_PRODUCERS producers, linger.ms=$LINGER_B"
  # shellcheck disable=SC2086
  workload "$dir" b1k "$tcfg" $common $n1k -t "$topic-b1k" -s 1024 -P "$TP_PRODUCERS" -r 0 \
    --linger-ms "$LINGER_B" --batch-size 1000000 --max-inflight "$INFL_1K"
  say "  (b16k) max throughput, 16 KiB records"
  # shellcheck disable=SC2086
  workload "$dir" b16k "$tcfg" $common $n16k -t "$topic-b16k" -s 16384 -P "$TP_PRODUCERS" -r 0 \
    --linger-ms "$LINGER_B" --batch-size 1000000 --max-inflight "$INFL_16K"
  say "  (c) end-to-end at $RATE_MBS MB/s, 1 + $TAIL_READERS consumers at the head"
  # shellcheck disable=SC2086
  workload "$dir" c "$tcfg" $common --e2e -t "$topic-c" -s 1024 -P 1 -r "$RATE" --linger-ms "$LINGER_A" \
    --max-inflight "$INFL_1K" --max-behind "$MAX_BEHIND" --tail-readers "$TAIL_READERS"
  quiesce "$dir"
  say "  (l) $SLOW_RATE records/s of 1 KiB, linger.ms=0"
  # Skiff: what the broker did during (l), to match with its latency (l_metrics.txt)
  TRACE_PID=""
  if [ -n "$MPORT" ]; then
    "$PY" "$ROOT/bench/mtrace.py" "$MPORT" 0.25 "$dir/l_metrics.txt" & TRACE_PID=$!
    date +%s.%N > "$dir/l_start.txt"
  fi
  # shellcheck disable=SC2086
  workload "$dir" l "$tcfg" $common -t "$topic-l" -s 1024 -P 1 -r "$SLOW_RATE" --linger-ms 0 \
    --max-inflight "$INFL_1K" --max-behind "$MAX_BEHIND"
  [ -z "$TRACE_PID" ] || { kill "$TRACE_PID" 2>/dev/null; wait "$TRACE_PID" 2>/dev/null || true; }
  say "  (l) again from one synchronous client (bench/synclat.py), not librdkafka"
  if [ "$SMOKE" = 1 ]; then sl="--seconds 1 --warmup 0"; else sl="--seconds $DURATION --warmup $WARMUP"; fi
  # shellcheck disable=SC2086
  timeout -k 10 300 "$PY" "$ROOT/bench/synclat.py" "$BOOT" "$topic-l" --partitions "$PARTITIONS" \
    --rate "$SLOW_RATE" $sl > "$dir/lsync.json" 2> "$dir/lsync.log" || true
  say "  (d) catch-up read of up to $CATCHUP bytes of the (b1k) topic"
  workload "$dir" d "" --consume -t "$topic-b1k" --no-create --bytes "$CATCHUP" -d 600
  say "  (d2) the same catch-up read again"
  workload "$dir" d2 "" --consume -t "$topic-b1k" --no-create --bytes "$CATCHUP" -d 600

  stop_sampler
  status_kib "$BROKER_PID" VmHWM > "$dir/hwm_kib.txt"
  loadavg > "$dir/load_after.txt"
  case "$target" in
    skiff*)
      skiffd_stop
      # back-pressure: produce refused while uploads were behind (report's note)
      grep -c "refusing produce" "$dir/skiffd.log" > "$dir/refused.txt" || true
      du -sk "$WORK/skiff-data" 2>/dev/null | cut -f1 > "$dir/data_kib.txt" || true
      rm -rf "$WORK/skiff-data"
      if [ "$target" = skiff-s3 ]; then
        du -sk "$S3_DIR/data/$S3_BUCKET/$prefix" 2>/dev/null | cut -f1 > "$dir/objects_kib.txt" || true
        rm -rf "${S3_DIR:?}/data/$S3_BUCKET/$prefix"
      fi ;;
    *)
      # Kafka logs each partition's topic configs when it creates the log: the
      # proof that the fsync target's topics, and only they, had flush.messages=1.
      grep "Created log for partition cmp-$target-r$rep-" "$KDIR/kafka.log" > "$dir/created_logs.txt" || true
      if [ "$KSHARED" != 1 ] || [ "$LAST_KAFKA" = "$target" ]; then
        du -sk "$KDIR/data" 2>/dev/null | cut -f1 > "$dir/data_kib.txt" || true
        stop_kafka
        rm -rf "$WORK/kafka"
      fi ;;
  esac
  BROKER_PID=""
}

run_sections() { # rep: bench/nfs.sh and bench/s3.sh, results kept in results/sections/r<rep>/
  for sec in $SECTIONS; do
    sdir=$OUT/sections/r$1/$sec
    mkdir -p "$sdir"
    sync
    say "repetition $1: section $sec"
    case "$sec" in
      nfs) run_section NFS env BENCH_WORK="$WORK/sections" BENCH_NOBUILD=1 SKIFF_BUILD="$BUILD" \
             BENCH_DURATION="$NFS_DURATION" BENCH_WARMUP="$WARMUP" BENCH_PARTITIONS="$PARTITIONS" \
             BENCH_TP_PRODUCERS="$TP_PRODUCERS" "$ROOT/bench/nfs.sh" > "$sdir/stdout.txt" ;;
      s3) run_section object-store env BENCH_WORK="$WORK/sections" BENCH_NOBUILD=1 SKIFF_BUILD="$BUILD" \
            S3_EMULATOR="$S3_EMULATOR" \
            BENCH_S3_BYTES="$S3_BYTES" BENCH_S3_SIZE="$S3_SIZE" BENCH_PARTITIONS="$PARTITIONS" \
            "$ROOT/bench/s3.sh" > "$sdir/stdout.txt" ;;
      *) fail "unknown section $sec (nfs, s3)" ;;
    esac
    if [ "$SECTION_RC" = 0 ]; then
      cp "$WORK/sections/$sec/results/"*.json "$WORK/sections/$sec/results/"*.txt "$sdir/"
    else
      echo "skipped (exit $SECTION_RC)" > "$sdir/skipped.txt"
    fi
    rm -rf "${WORK:?}/sections/$sec"
  done
}

KBOOT=""
rep=1
while [ "$rep" -le "$REPEATS" ]; do
  # Rotate the order: repetition r starts with target (r-1) mod N.
  set -- $TARGETS
  k=$(( (rep - 1) % $# ))
  while [ $k -gt 0 ]; do t=$1; shift; set -- "$@" "$t"; k=$((k - 1)); done
  order="$*"
  LAST_KAFKA=""
  for t in $order; do case "$t" in kafka*) LAST_KAFKA=$t ;; esac; done
  for t in $order; do run_target "$rep" "$t"; done
  [ "$rep" -gt "$SECTION_REPEATS" ] || run_sections "$rep"
  rep=$((rep + 1))
done
loadavg > "$OUT/load_end.txt"

# --------------------------------------------------------------- 5. report
cat > "$OUT/params.json" <<EOF
{"smoke": $( [ "$SMOKE" = 1 ] && echo true || echo false ), "repeats": $REPEATS,
 "targets": "$(echo $TARGETS)", "duration_s": $DURATION, "warmup_s": $WARMUP, "prime_s": $PRIME,
 "partitions": $PARTITIONS, "rate_mbs": $RATE_MBS, "rate": $RATE, "linger_a": $LINGER_A,
 "max_behind_s": $MAX_BEHIND, "tp_producers": $TP_PRODUCERS, "linger_b": $LINGER_B,
 "inflight_1k": $INFL_1K, "inflight_16k": $INFL_16K, "catchup_bytes": $CATCHUP,
 "kafka_heap": "$KAFKA_HEAP", "kafka_shared": $( [ "$KSHARED" = 1 ] && echo true || echo false ),
 "slow_rate": $SLOW_RATE, "quiesce_s": $QUIESCE_S, "quiesce_dirty_mib": $QUIESCE_DIRTY_MIB,
 "tail_readers": $TAIL_READERS, "rss_slack_mib": $RSS_SLACK, "sections": "$(echo $SECTIONS)",
 "section_repeats": $SECTION_REPEATS, "nfs_duration_s": $NFS_DURATION, "s3_bytes": $S3_BYTES,
 "s3_size": $S3_SIZE, "s3_fs": "$(cat "$OUT/s3_fs.txt" 2>/dev/null || true)", "s3_emulator": "$S3_EMULATOR",
 "kafka_props": "$(printf '%s' "${BENCH_KAFKA_PROPS:-}" | tr '\n' ' ')",
 "skiffd_args": "${BENCH_SKIFFD_ARGS:-}"}
EOF
docs_arg=""
[ "$DOCS" = 1 ] && docs_arg="--docs $ROOT"
# shellcheck disable=SC2086
"$PY" "$ROOT/bench/compare_report.py" "$OUT" $docs_arg || fail "report (see above)"
say "report: $OUT/report.md"
