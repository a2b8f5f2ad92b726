#!/bin/sh
# make bench: the single-node benchmark of Skiff against its own disk.
#
#   1. builds skload and diskfloor (and skiffd unless BENCH_BOOTSTRAP is set);
#   2. measures the disk floor in the bench data directory (bench/.work);
#   3. starts one skiffd on a free loopback port with its data.dir there,
#      sends one Metadata request and reads its idle RSS;
#   4. (a) acks=all 1 KiB records at a fixed moderate rate: latency;
#      (b) acks=all 1 KiB records as fast as possible: throughput;
#      skiffd's RSS is sampled during both, and its VmHWM read at the end;
#   5. prints a report: absolute figures, and the target ratios with
#      PASS/MISS labels (labels, not assertions);
#   6. runs bench/nfs.sh: the same workloads with the WAL on NFS (NFS-Ganesha on
#      loopback, libnfs) beside that server's floor (BENCH_NFS=0 skips it);
#   7. runs bench/s3.sh: catch-up reads from objects in the S3 emulator beside the
#      emulator's raw ranged-GET throughput, and PUTs per GiB ingested
#      (BENCH_S3=0 skips it);
#   8. runs bench/cluster.sh: failover time of a 3-node cluster under SIGKILL and
#      its produce latency beside a single node (BENCH_CLUSTER=0 skips it;
#      SKIFF_BENCH_ONLY=cluster runs only this part);
#   9. runs bench/zones.sh: zone routing in three zones with an inter-zone delay,
#      produce latency through a proxy, cross-zone bytes per produced byte beside
#      Apache Kafka with RF=3 (BENCH_ZONES=0 skips it; SKIFF_BENCH_ONLY=zones runs
#      only this part; skipped, saying why, without root or network namespaces);
#  10. runs bench/secure.sh: (a) and (b) over SASL_SSL beside PLAINTEXT, and beside
#      Apache Kafka over SASL_SSL on the same machine (BENCH_SECURE=0 skips it;
#      BENCH_SECURE_KAFKA=0 leaves Kafka out);
#  11. runs bench/txn.py: the Java transactional producer against skiffd and Apache
#      Kafka (default and log.flush.interval.messages=1): transactions/s, MB/s and
#      commitTransaction p50/p99 (BENCH_TXN=0 skips it; SKIFF_BENCH_ONLY=txn runs
#      only this part).
#
# Exit status: 0 when the figures were measured, whatever they are; 1 when
# the harness failed (build, disk floor, skiffd start-up, skiffd died during
# the run, or a workload produced no measurement at all).
#
# Environment (defaults in brackets; BENCH_SMOKE=1 shrinks everything to a
# run of a few seconds, for tests that keep this script from rotting):
#   BENCH_BOOTSTRAP=host:port  run (a)/(b) against an already running broker
#                              (Apache Kafka, for validation); nothing started
#   BENCH_PID=pid              that broker's PID, to report its RSS too
#   BENCH_WORK=dir             [bench/.work] data dir, floor dir, results
#   BENCH_PORT=n               [a free port] skiffd's listener
#   BENCH_SKIFFD_ARGS="..."    extra skiffd arguments (e.g. --override k=v)
#   BENCH_RATE=n               [2000] records/s of (a)
#   BENCH_DURATION=s           [30] measured seconds of (a) and of (b)
#   BENCH_WARMUP=s             [5] unmeasured seconds before each
#   BENCH_PARTITIONS=n         [4] partitions of the benchmark topics
#   BENCH_SIZE=bytes           [1024] record size
#   BENCH_PRODUCERS=n          [1] producer instances (connections) of (a)
#   BENCH_TP_PRODUCERS=n       [4] producer instances of (b): one librdkafka
#                              producer tops out near 200 MB/s, four near 450
#   BENCH_LINGER_MS=x          [5] linger.ms of (b); (a) always uses 0
#   BENCH_MAX_INFLIGHT=n       [20000] in-flight bound of (b)
#   BENCH_FLOOR_ITER=n         [5000] diskfloor 4 KiB iterations
#   BENCH_FLOOR_SEQ_S=s        [10] diskfloor sequential test duration
#   SKIFF_BUILD=dir            [build] where skiffd and bench/ binaries are built
#   SKIFF_BENCH_ONLY=cluster   only the cluster section (bench/cluster.sh)
#   SKIFF_BENCH_ONLY=zones     only the zones section (bench/zones.sh)
#   SKIFF_BENCH_ONLY=txn       only the transactions section (bench/txn.py)
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH_TAG=bench
. "$ROOT/bench/lib.sh"
EXTERNAL=${BENCH_BOOTSTRAP:-}

if [ "$SMOKE" = 1 ]; then
  d_rate=200; d_dur=2; d_warm=0.5; d_iter=200; d_seq=0.5; d_inflight=2000
else
  d_rate=2000; d_dur=30; d_warm=5; d_iter=5000; d_seq=10; d_inflight=20000
fi
RATE=${BENCH_RATE:-$d_rate}
DURATION=${BENCH_DURATION:-$d_dur}
WARMUP=${BENCH_WARMUP:-$d_warm}
PARTITIONS=${BENCH_PARTITIONS:-4}
SIZE=${BENCH_SIZE:-1024}
PRODUCERS=${BENCH_PRODUCERS:-1}
TP_PRODUCERS=${BENCH_TP_PRODUCERS:-4}
LINGER=${BENCH_LINGER_MS:-5}
INFLIGHT=${BENCH_MAX_INFLIGHT:-$d_inflight}
FLOOR_ITER=${BENCH_FLOOR_ITER:-$d_iter}
FLOOR_SEQ=${BENCH_FLOOR_SEQ_S:-$d_seq}

WORK=${BENCH_WORK:-$ROOT/bench/.work}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
DATA=$WORK/data
FLOOR=$WORK/floor
OUT=$WORK/results
SKLOAD=$BUILD/bench/skload
DISKFLOOR=$BUILD/bench/diskfloor

SAMPLER_PID=""

case "${SKIFF_BENCH_ONLY:-}" in
  "") ;;
  cluster) SKIFF_BUILD=$BUILD exec "$ROOT/bench/cluster.sh" ;;
  zones) SKIFF_BUILD=$BUILD exec "$ROOT/bench/zones.sh" ;;
  txn) SKIFF_BUILD=$BUILD exec "$PY" "$ROOT/bench/txn.py" ;;
  *) say "SKIFF_BENCH_ONLY=$SKIFF_BENCH_ONLY: the parts that run alone are 'cluster', 'zones' and 'txn'"; exit 2 ;;
esac

cleanup() {
  rc=$?
  if [ -n "$SAMPLER_PID" ]; then kill "$SAMPLER_PID" 2>/dev/null || true; wait "$SAMPLER_PID" 2>/dev/null || true; fi
  bench_stop_all
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- 1. build
targets="skload diskfloor"
[ -z "$EXTERNAL" ] && targets="$targets skiffd"
# shellcheck disable=SC2086
bench_build "$WORK/build.log" $targets
[ -x "$SKLOAD" ] || fail "$SKLOAD missing (librdkafka-dev installed? make test-deps)"
[ -x "$DISKFLOOR" ] || fail "$DISKFLOOR missing"

rm -rf "$DATA" "$FLOOR" "$OUT"
mkdir -p "$DATA" "$FLOOR" "$OUT"
cut -d' ' -f1-3 /proc/loadavg > "$OUT/load_before.txt"
say "results in $OUT$( [ "$SMOKE" = 1 ] && echo ' (smoke run)')"

# ---------------------------------------------------------- 2. disk floor
say "disk floor in $FLOOR ($FLOOR_ITER x 4 KiB, ${FLOOR_SEQ} s sequential)"
"$DISKFLOOR" --dir "$FLOOR" --iterations "$FLOOR_ITER" --seq-seconds "$FLOOR_SEQ" \
  --wakeups "$( [ "$SMOKE" = 1 ] && echo 200 || echo 2000 )" > "$OUT/floor.json" \
  || fail "diskfloor"

# ------------------------------------------------------- 3. broker, idle RSS
if [ -n "$EXTERNAL" ]; then
  BOOT=$EXTERNAL
  PID_FOR_RSS=${BENCH_PID:-}
  say "external broker $BOOT${PID_FOR_RSS:+ (pid $PID_FOR_RSS)}"
else
  [ -x "$BUILD/skiffd" ] || fail "$BUILD/skiffd missing"
  # shellcheck disable=SC2086
  skiffd_start "$WORK/skiffd.log" "${BENCH_PORT:-$(free_port)}" --override "data.dir=$DATA" \
      ${BENCH_SKIFFD_ARGS:-}
  PID_FOR_RSS=$SKIFFD_PID
  say "skiffd pid $SKIFFD_PID on $BOOT (log: $WORK/skiffd.log)"
fi

timeout 60 "$SKLOAD" -b "$BOOT" --mode metadata --json > "$OUT/metadata.json" 2> "$OUT/metadata.log" \
  || { cat "$OUT/metadata.log" >&2; fail "Metadata request to $BOOT"; }
if [ -n "$PID_FOR_RSS" ]; then
  sleep 1  # let start-up work (threads, caches) settle before reading
  status_kib "$PID_FOR_RSS" VmRSS > "$OUT/idle_rss_kib.txt"
  # Loaded RSS: sampled every 200 ms during the workloads.
  ( while kill -0 "$PID_FOR_RSS" 2>/dev/null; do
      status_kib "$PID_FOR_RSS" VmRSS; sleep 0.2
    done ) > "$OUT/rss_samples.txt" &
  SAMPLER_PID=$!
fi

# ------------------------------------------------------------ 4. workloads
stamp=$(date +%s)
common="-b $BOOT -p $PARTITIONS -s $SIZE -a all --warmup $WARMUP -d $DURATION --json"
bound=$("$PY" -c "print(int(float('$DURATION') + float('$WARMUP') + 120))")

say "(a) acks=all ${SIZE} B records at $RATE rec/s, linger.ms=0, ${DURATION} s after ${WARMUP} s warm-up"
m0=$( [ -n "$PID_FOR_RSS" ] && cpu_mark "$PID_FOR_RSS" || true)
# shellcheck disable=SC2086
timeout -k 30 "$bound" "$SKLOAD" $common -t "skiff-bench-latency-$stamp" -P "$PRODUCERS" -r "$RATE" --linger-ms 0 \
    --max-inflight "$INFLIGHT" > "$OUT/a.json" 2> "$OUT/a.log" || true
[ -n "$PID_FOR_RSS" ] && echo "$m0 $(cpu_mark "$PID_FOR_RSS")" > "$OUT/a_broker_cpu.txt"
if [ -n "$SKIFFD_PID" ] && ! skiffd_alive; then
  SKIFFD_PID=""; fail "skiffd died during (a) (log: $WORK/skiffd.log)"
fi

say "(b) acks=all ${SIZE} B records, max throughput, $TP_PRODUCERS producers, linger.ms=$LINGER, max in-flight $INFLIGHT"
m0=$( [ -n "$PID_FOR_RSS" ] && cpu_mark "$PID_FOR_RSS" || true)
# shellcheck disable=SC2086
timeout -k 30 "$bound" "$SKLOAD" $common -t "skiff-bench-throughput-$stamp" -P "$TP_PRODUCERS" -r 0 --linger-ms "$LINGER" \
    --batch-size 1000000 --max-inflight "$INFLIGHT" > "$OUT/b.json" 2> "$OUT/b.log" || true
[ -n "$PID_FOR_RSS" ] && echo "$m0 $(cpu_mark "$PID_FOR_RSS")" > "$OUT/b_broker_cpu.txt"
if [ -n "$SKIFFD_PID" ] && ! skiffd_alive; then
  SKIFFD_PID=""; fail "skiffd died during (b) (log: $WORK/skiffd.log)"
fi

if [ -n "$SAMPLER_PID" ]; then
  kill "$SAMPLER_PID" 2>/dev/null || true
  wait "$SAMPLER_PID" 2>/dev/null || true
  SAMPLER_PID=""
  status_kib "$PID_FOR_RSS" VmHWM > "$OUT/hwm_kib.txt"
fi
cut -d' ' -f1-3 /proc/loadavg > "$OUT/load_after.txt"

# --------------------------------------------------------------- 5. report
rc=0
"$PY" - "$OUT" "$BOOT" "$( [ -n "$EXTERNAL" ] && echo external || echo skiffd )" \
    "${PID_FOR_RSS:-}" "$SMOKE" "$RATE" "$DURATION" "$WARMUP" "$PARTITIONS" "$SIZE" \
    "$PRODUCERS" "$LINGER" "$INFLIGHT" "$TP_PRODUCERS" <<'EOF' || rc=$?
import json, os, sys

out, boot, kind, pid, smoke = sys.argv[1:6]
rate, duration, warmup, parts, size, producers, linger, inflight, tp_producers = sys.argv[6:15]

def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None

def num(name):
    try:
        with open(os.path.join(out, name)) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None

def broker_cpu(name):
    """Cores the broker used over a whole workload (warm-up and drain included)."""
    try:
        with open(os.path.join(out, name)) as f:
            t0, k0, t1, k1 = [int(x) for x in f.read().split()]
        return (k1 - k0) / float(os.sysconf("SC_CLK_TCK")) / ((t1 - t0) / 1e9)
    except (OSError, ValueError, ZeroDivisionError):
        return None

def cpu_line(r, name):
    c = broker_cpu(name)
    return "skload %.2f cores, broker %s" % (
        r.get("client_cpu_cores", 0), "%.2f cores" % c if c is not None else "n/a")

def rss_samples():
    try:
        with open(os.path.join(out, "rss_samples.txt")) as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []

floor, a, b = load("floor.json"), load("a.json"), load("b.json")
idle, hwm, samples = num("idle_rss_kib.txt"), num("hwm_kib.txt"), rss_samples()
loaded = max(samples) if samples else None
cores = os.cpu_count()
load_before = open(os.path.join(out, "load_before.txt")).read().strip()
load_after = open(os.path.join(out, "load_after.txt")).read().strip()

def mib(kib):
    return "%.1f MiB" % (kib / 1024.0) if kib is not None else "n/a"

def lat(h):
    return "p50 %7.3f  p99 %7.3f  p999 %7.3f  max %8.3f ms" % (
        h["p50_ms"], h["p99_ms"], h["p999_ms"], h["max_ms"])

def label(ok):
    return "n/a" if ok is None else ("PASS" if ok else "MISS")

lines = []
p = lines.append
p("Skiff single-node benchmark%s: broker %s (%s), %d cores, load %s -> %s"
  % (" (SMOKE: tiny sizes, figures meaningless)" if smoke == "1" else "",
     boot, kind if kind == "external" else "skiffd pid " + pid, cores, load_before, load_after))
p("")
p("Disk floor (%s, %s)" % (floor["dir"], floor["fs"]))
p("  4 KiB append    + fdatasync   %s  (n=%d)" % (lat(floor["append"]["latency"]), floor["append"]["iterations"]))
p("  4 KiB overwrite + fdatasync   %s  (n=%d)" % (lat(floor["overwrite"]["latency"]), floor["overwrite"]["iterations"]))
sq = floor["seq"]
p("  1 MiB write     + fdatasync   %.1f MB/s sustained (2nd half), %.1f MB/s mean; %d MiB in %.1f s,"
  % (sq["sustained_mb_s"], sq["mb_s"], sq["total_bytes"] / 1048576, sq["seconds"]))
p("                                128 MiB windows from %.0f to %.0f MB/s (host cache, then the disk)"
  % (sq["window_min_mb_s"], sq["window_max_mb_s"]))
p("  timer wake-up (1 ms sleep)    %s  (scheduling noise, not disk)" % lat(floor["wakeup"]["latency"]))
p("")
p("Memory (%s)" % ("pid %s" % pid if pid else "no PID: set BENCH_PID for an external broker"))
p("  idle RSS after start-up + Metadata   %s" % mib(idle))
p("  RSS during (a)+(b), max of samples   %s  (%d samples, every 200 ms)" % (mib(loaded), len(samples)))
p("  peak RSS (VmHWM)                     %s" % mib(hwm))
p("")

def errors(r):
    e = r.get("errors") or {}
    s = ", ".join("%s %d" % kv for kv in e.items())
    return "%d failed%s%s" % (r["failed"], " (" + s + ")" if s else "",
                              ", STOPPED EARLY with %d unsent" % r["unsent"] if r.get("stopped_early") else "")

p("(a) latency: acks=all, %s B records, %s rec/s fixed rate (latency from the scheduled send "
  "time), %s partitions, %s producer(s), linger.ms=0, %s s after %s s warm-up" % (size, rate, parts, producers, duration, warmup))
if a:
    p("  produce latency   %s" % lat(a["latency"]))
    p("  achieved          %.0f rec/s, %.2f MB/s; %d acked, %s; send lag p99 %.3f ms"
      % (a["records_s"], a["mb_s"], a["acked"], errors(a), a["send_lag"]["p99_ms"]))
    p("  CPU               %s" % cpu_line(a, "a_broker_cpu.txt"))
else:
    p("  NO RESULT (see %s/a.log)" % out)
p("(b) throughput: acks=all, %s B records, as fast as possible (max in-flight %s), %s partitions, "
  "%s producer(s), linger.ms=%s, batch.size=1000000, %s s after %s s warm-up" % (size, inflight, parts, tp_producers, linger, duration, warmup))
if b:
    p("  throughput        %.2f MB/s, %.0f rec/s" % (b["mb_s"], b["records_s"]))
    p("  produce latency   %s  (queueing included)" % lat(b["latency"]))
    p("  acked             %d, %s" % (b["acked"], errors(b)))
    p("  CPU               %s" % cpu_line(b, "b_broker_cpu.txt"))
else:
    p("  NO RESULT (see %s/b.log)" % out)
p("")

targets = []
r1 = a["latency"]["p99_ms"] / floor["append"]["latency"]["p99_ms"] if a and a["measured"] and floor["append"]["latency"]["p99_ms"] > 0 else None
r2 = b["mb_s"] / sq["sustained_mb_s"] if b and b["measured"] and sq["sustained_mb_s"] > 0 else None
targets.append(("produce p99 (a) / 4 KiB append+fdatasync p99",
                "%.2f  (%.3f / %.3f ms)" % (r1, a["latency"]["p99_ms"], floor["append"]["latency"]["p99_ms"]) if r1 is not None else "n/a",
                "<= 1.5", label(None if r1 is None else r1 <= 1.5)))
targets.append(("throughput (b) / sustained write+fdatasync MB/s",
                "%.2f  (%.1f / %.1f MB/s)" % (r2, b["mb_s"], sq["sustained_mb_s"]) if r2 is not None else "n/a",
                ">= 0.7", label(None if r2 is None else r2 >= 0.7)))
targets.append(("idle RSS", mib(idle), "<= 20 MiB",
                label(None if idle is None else idle <= 20 * 1024)))
busy = max(float(load_before.split()[0]), float(load_after.split()[0]))
if busy > 1.0:
    p("WARNING: load average %.1f on %d cores around the run: other work shared the CPUs and"
      % (busy, cores))
    p("         the disk; tail latencies and throughput are not this broker's alone.")
    p("")
p("Targets (labels, not assertions)")
for name, val, tgt, lab in targets:
    p("  %-48s %-32s %-10s %s" % (name, val, tgt, lab))

text = "\n".join(lines)
print(text)
with open(os.path.join(out, "report.txt"), "w") as f:
    f.write(text + "\n")
with open(os.path.join(out, "report.json"), "w") as f:
    json.dump({"broker": boot, "kind": kind, "pid": pid or None, "smoke": smoke == "1",
               "cores": cores, "load_before": load_before, "load_after": load_after,
               "floor": floor, "idle_rss_kib": idle, "loaded_rss_kib": loaded,
               "hwm_kib": hwm, "a": a, "b": b,
               "a_broker_cpu_cores": broker_cpu("a_broker_cpu.txt"),
               "b_broker_cpu_cores": broker_cpu("b_broker_cpu.txt"),
               "targets": [dict(zip(("name", "measured", "target", "label"), t)) for t in targets]},
              f, indent=1)
sys.exit(0 if (a and a["measured"] and b and b["measured"]) else 3)
EOF
[ $rc -eq 0 ] || fail "a workload measured nothing (logs: $OUT/a.log, $OUT/b.log)"
say "report: $OUT/report.txt"

# ------------------------------------------------------ 6. the WAL on NFS
# bench/nfs.sh: the same workloads with the WAL on NFS-Ganesha through libnfs,
# beside that server's own floor. BENCH_NFS=0 skips it.
if [ -z "$EXTERNAL" ] && [ "${BENCH_NFS:-1}" != 0 ]; then
  # The local-disk broker stops first: the NFS run has the machine to itself.
  skiffd_stop
  echo
  run_section NFS "$ROOT/bench/nfs.sh"
fi

# ------------------------------------------------ 7. the object store (S3)
# bench/s3.sh: a catch-up read served from objects in the S3 emulator, beside the
# emulator's own ranged-GET throughput, and PUTs per GiB ingested. BENCH_S3=0 skips it.
if [ -z "$EXTERNAL" ] && [ "${BENCH_S3:-1}" != 0 ]; then
  skiffd_stop
  echo
  run_section object-store "$ROOT/bench/s3.sh"
fi

# ------------------------------------------------------------- 8. the cluster
# bench/cluster.sh: failover time of a 3-node cluster under SIGKILL (and its split),
# and its produce latency beside a single node. BENCH_CLUSTER=0 skips it.
if [ -z "$EXTERNAL" ] && [ "${BENCH_CLUSTER:-1}" != 0 ]; then
  skiffd_stop
  echo
  run_section cluster env SKIFF_BUILD="$BUILD" "$ROOT/bench/cluster.sh"
fi

# --------------------------------------------------------------- 9. the zones
# bench/zones.sh: zone routing in three zones (network namespaces) with an inter-zone
# delay: produce latency through a proxy, cross-zone bytes per produced byte, beside
# Apache Kafka with RF=3 (Skiff only in smoke runs). BENCH_ZONES=0 skips it.
if [ -z "$EXTERNAL" ] && [ "${BENCH_ZONES:-1}" != 0 ]; then
  skiffd_stop
  echo
  run_section zones env SKIFF_BUILD="$BUILD" "$ROOT/bench/zones.sh"
fi

# ------------------------------------------------------------- 10. security
# bench/secure.sh: what SASL_SSL costs, beside PLAINTEXT and beside Apache Kafka over
# SASL_SSL. BENCH_SECURE=0 skips it.
if [ -z "$EXTERNAL" ] && [ "${BENCH_SECURE:-1}" != 0 ]; then
  skiffd_stop
  echo
  SKIFF_BUILD=$BUILD BENCH_WORK=$WORK "$ROOT/bench/secure.sh" || fail "security section (bench/secure.sh)"
fi

# -------------------------------------------------------- 11. transactions
# bench/txn.py: the Java transactional producer against one skiffd and Apache Kafka
# (default and fsync on every append): throughput and commitTransaction latency.
# BENCH_TXN=0 skips it.
if [ -z "$EXTERNAL" ] && [ "${BENCH_TXN:-1}" != 0 ]; then
  skiffd_stop
  echo
  SKIFF_BUILD=$BUILD BENCH_WORK=$WORK "$PY" "$ROOT/bench/txn.py" || fail "transactions section (bench/txn.py)"
fi
