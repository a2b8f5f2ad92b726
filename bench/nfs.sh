#!/bin/sh
# make bench, NFS section: Skiff with its WAL on NFS (libnfs, NFSv3) against the
# NFS server's own floor, measured in the same run.
#
#   1. builds nfsfloor, skload and skiffd (unless BENCH_NOBUILD is set);
#   2. starts NFS-Ganesha on loopback (tools/ganesha.sh, free ports) serving
#      $BENCH_WORK/nfs/ganesha/export;
#   3. nfsfloor on the export: 4 KiB WRITE UNSTABLE + COMMIT and 4 KiB WRITE
#      FILE_SYNC latency (appends), sequential 1 MiB WRITE + COMMIT bandwidth;
#   4. one skiffd with wal.url=nfs://... (data.dir in $BENCH_WORK/nfs/data), then
#      (a) acks=all 1 KiB records at a fixed rate, linger.ms=0: latency;
#      (a) again, the same rate on the same topic, from bench/synclat.py's one
#          synchronous client (no librdkafka threads): the broker's share;
#      (b) acks=all 1 KiB records as fast as possible: throughput;
#   5. prints the figures side by side and the targets as PASS/MISS labels (not
#      assertions): produce p99 <= 2 x raw 4 KiB WRITE+COMMIT p99, throughput >=
#      0.7 x sequential 1 MiB WRITE+COMMIT; beside (a), the broker's own view
#      of it from its metrics endpoint (bench/promhist.py over scrapes before
#      and after): its produce latency and its WAL's group commits (WRITEs +
#      COMMIT), which tell the server's share of the tail from the rest;
#   6. stops skiffd and Ganesha (by their PIDs), whatever happened.
#
# Exit status: 0 when measured (whatever the figures), 1 when the harness failed,
# 77 when no NFS server can run here (Ganesha, rpcbind or root missing).
#
# Environment: the knobs of bench/run.sh apply (BENCH_SMOKE, BENCH_RATE,
# BENCH_DURATION, BENCH_WARMUP, BENCH_PARTITIONS, BENCH_SIZE, BENCH_PRODUCERS,
# BENCH_TP_PRODUCERS, BENCH_LINGER_MS, BENCH_MAX_INFLIGHT, BENCH_WORK,
# BENCH_NOBUILD, SKIFF_BUILD), plus
#   BENCH_NFS_ITER=n        [2000] nfsfloor 4 KiB iterations (each of two kinds)
#   BENCH_NFS_SEQ_S=s       [10] nfsfloor sequential seconds
#   BENCH_NFS_URL_EXTRA=... extra WAL URL parameters (e.g. &filesync=0&depth=8, or
#                           &pipeline=1 for one group commit in flight at a time)
#   BENCH_NFS_SKIFFD_ARGS   extra skiffd arguments (--override k=v ...)
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH_TAG=bench-nfs
. "$ROOT/bench/lib.sh"
if [ "$SMOKE" = 1 ]; then
  d_rate=200; d_dur=2; d_warm=0.5; d_iter=200; d_seq=0.5; d_inflight=2000
else
  d_rate=2000; d_dur=30; d_warm=5; d_iter=2000; d_seq=10; d_inflight=20000
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
NFS_ITER=${BENCH_NFS_ITER:-$d_iter}
NFS_SEQ=${BENCH_NFS_SEQ_S:-$d_seq}

WORK=${BENCH_WORK:-$ROOT/bench/.work}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)/nfs
GDIR=$WORK/ganesha
DATA=$WORK/data
OUT=$WORK/results
SKLOAD=$BUILD/bench/skload
NFSFLOOR=$BUILD/bench/nfsfloor

trap 'rc=$?; bench_stop_all; exit $rc' EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- 1. build
bench_build "$WORK.build.log" nfsfloor skload skiffd
[ -x "$NFSFLOOR" ] || fail "$NFSFLOOR missing"
[ -x "$SKLOAD" ] || fail "$SKLOAD missing (librdkafka-dev installed? make test-deps)"

"$ROOT/tools/ganesha.sh" stop "$GDIR" >/dev/null 2>&1 || true  # left by a killed run
rm -rf "$WORK"
mkdir -p "$GDIR" "$DATA" "$OUT"
cut -d' ' -f1-3 /proc/loadavg > "$OUT/load_before.txt"

# ---------------------------------------------------------------- 2. server
if ! nfs_start "$GDIR" "$OUT/ganesha.txt"; then
  say "no NFS server can run here: NFS section skipped"
  exit 77
fi
url_of() { nfs_url "$1"; }
say "NFS-Ganesha $(cat "$GDIR/ganesha.pid"): $NFS_BASE"

# ---------------------------------------------------------------- 3. floor
mkdir -p "$GDIR/export/floor"
say "NFS floor: $NFS_ITER x 4 KiB WRITE+COMMIT and WRITE FILE_SYNC, ${NFS_SEQ} s of 1 MiB WRITE+COMMIT"
"$NFSFLOOR" --url "$(url_of floor)" --iterations "$NFS_ITER" --seq-seconds "$NFS_SEQ" \
  > "$OUT/nfsfloor.json" 2> "$OUT/nfsfloor.log" || { cat "$OUT/nfsfloor.log" >&2; fail "nfsfloor"; }

# ---------------------------------------------------------------- 4. broker, workloads
WAL_URL="$(url_of wal)${BENCH_NFS_URL_EXTRA:-}"
MPORT=$(free_port)
# shellcheck disable=SC2086
skiffd_start "$OUT/skiffd.log" "$(free_port)" --override "data.dir=$DATA" \
    --override "wal.url=$WAL_URL" --override "metrics.listener=127.0.0.1:$MPORT" \
    ${BENCH_NFS_SKIFFD_ARGS:-}
say "skiffd pid $SKIFFD_PID on $BOOT, WAL $WAL_URL"

stamp=$(date +%s)
common="-b $BOOT -p $PARTITIONS -s $SIZE -a all --warmup $WARMUP -d $DURATION --json"
bound=$("$PY" -c "print(int(float('$DURATION') + float('$WARMUP') + 120))")
say "(a) acks=all ${SIZE} B records at $RATE rec/s, linger.ms=0"
scrape() { "$PY" -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(
  "http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=10).read().decode())' "$MPORT" > "$1" || true; }
scrape "$OUT/a_metrics_before.txt"
# shellcheck disable=SC2086
timeout -k 30 "$bound" "$SKLOAD" $common -t "skiff-nfs-latency-$stamp" -P "$PRODUCERS" -r "$RATE" \
    --linger-ms 0 --max-inflight "$INFLIGHT" > "$OUT/a.json" 2> "$OUT/a.log" || true
scrape "$OUT/a_metrics_after.txt"
"$PY" "$ROOT/bench/promhist.py" "$OUT/a_metrics_before.txt" "$OUT/a_metrics_after.txt" \
  skiff_produce_latency_seconds skiff_wal_commit_latency_seconds > "$OUT/a_broker.json" 2>/dev/null \
  || echo '{}' > "$OUT/a_broker.json"
skiffd_alive || { SKIFFD_PID=""; fail "skiffd died during (a) (log: $OUT/skiffd.log)"; }
say "(a) again from one synchronous client (bench/synclat.py), not librdkafka"
if [ "$SMOKE" = 1 ]; then sl="--seconds 1 --warmup 0"; else sl="--seconds $DURATION --warmup $WARMUP"; fi
# shellcheck disable=SC2086
timeout -k 10 "$bound" "$PY" "$ROOT/bench/synclat.py" "$BOOT" "skiff-nfs-latency-$stamp" \
    --partitions "$PARTITIONS" --rate "$RATE" --size "$SIZE" $sl > "$OUT/a_sync.json" 2> "$OUT/a_sync.log" || true
skiffd_alive || { SKIFFD_PID=""; fail "skiffd died during (a) again (log: $OUT/skiffd.log)"; }
say "(b) acks=all ${SIZE} B records, max throughput, $TP_PRODUCERS producers, linger.ms=$LINGER"
# shellcheck disable=SC2086
timeout -k 30 "$bound" "$SKLOAD" $common -t "skiff-nfs-throughput-$stamp" -P "$TP_PRODUCERS" -r 0 \
    --linger-ms "$LINGER" --batch-size 1000000 --max-inflight "$INFLIGHT" > "$OUT/b.json" 2> "$OUT/b.log" || true
skiffd_alive || { SKIFFD_PID=""; fail "skiffd died during (b) (log: $OUT/skiffd.log)"; }
cut -d' ' -f1-3 /proc/loadavg > "$OUT/load_after.txt"

# ---------------------------------------------------------------- 5. report
rc=0
"$PY" - "$OUT" "$SMOKE" "$RATE" "$DURATION" "$WARMUP" "$PARTITIONS" "$SIZE" "$PRODUCERS" \
    "$TP_PRODUCERS" "$LINGER" "$INFLIGHT" "$WAL_URL" <<'EOF' || rc=$?
import json, os, sys

out, smoke, rate, duration, warmup, parts, size, producers, tp, linger, inflight, url = sys.argv[1:13]

def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None

floor, a, b = load("nfsfloor.json"), load("a.json"), load("b.json")
sync_a = load("a_sync.json")
broker_a = load("a_broker.json") or {}
lb = open(os.path.join(out, "load_before.txt")).read().strip()
la = open(os.path.join(out, "load_after.txt")).read().strip()

def lat(h):
    return "p50 %7.3f  p99 %7.3f  p999 %7.3f  max %8.3f ms" % (
        h["p50_ms"], h["p99_ms"], h["p999_ms"], h["max_ms"])

def label(ok):
    return "n/a" if ok is None else ("PASS" if ok else "MISS")

def errors(r):
    e = r.get("errors") or {}
    s = ", ".join("%s %d" % kv for kv in e.items())
    return "%d failed%s" % (r["failed"], " (" + s + ")" if s else "")

L = []
p = L.append
p("Skiff with the WAL on NFS%s: NFS-Ganesha (VFS, loopback, NFSv3) through libnfs, %d cores, "
  "load %s -> %s" % (" (SMOKE: tiny sizes, figures meaningless)" if smoke == "1" else "",
                     os.cpu_count(), lb, la))
p("  WAL %s" % url)
p("")
p("NFS floor (libnfs, same server, same run)")
p("  4 KiB WRITE UNSTABLE + COMMIT  %s  (n=%d)" % (lat(floor["commit"]["latency"]), floor["commit"]["iterations"]))
p("  4 KiB WRITE FILE_SYNC          %s  (n=%d)" % (lat(floor["filesync"]["latency"]), floor["filesync"]["iterations"]))
sq = floor.get("seq")
if sq:
    p("  1 MiB WRITE + COMMIT           %.1f MB/s over %.1f s (%d MiB; WRITEs of %d KiB)"
      % (sq["mb_s"], sq["seconds"], sq["total_bytes"] / 1048576, sq["wtmax"] // 1024))
p("")
p("(a) latency: acks=all, %s B records, %s rec/s fixed rate, %s partitions, %s producer(s), "
  "linger.ms=0, %s s after %s s warm-up" % (size, rate, parts, producers, duration, warmup))
if a:
    p("  produce latency   %s" % lat(a["latency"]))
    p("  achieved          %.0f rec/s, %.2f MB/s; %d acked, %s" % (a["records_s"], a["mb_s"], a["acked"], errors(a)))
    for name, what in (("skiff_produce_latency_seconds", "broker: produce  "),
                       ("skiff_wal_commit_latency_seconds", "broker: WAL commit")):
        h = broker_a.get(name)
        if h and h["count"]:
            p("  %s p50 <= %s  p99 <= %s  p999 <= %s ms (its histogram's buckets, n=%d)" % (
                what, h["p50_ms"], h["p99_ms"], h["p999_ms"], h["count"]))
else:
    p("  NO RESULT (see %s/a.log)" % out)
if sync_a and sync_a.get("service"):
    p("  one synchronous client (synclat.py): service time %s  (n=%d, %d errors)" % (
        lat(sync_a["service"]), sync_a["count"], sync_a["errors"]))
p("(b) throughput: acks=all, %s B records, as fast as possible (max in-flight %s), %s partitions, "
  "%s producer(s), linger.ms=%s" % (size, inflight, parts, tp, linger))
if b:
    p("  throughput        %.2f MB/s, %.0f rec/s" % (b["mb_s"], b["records_s"]))
    p("  produce latency   %s  (queueing included)" % lat(b["latency"]))
    p("  acked             %d, %s" % (b["acked"], errors(b)))
else:
    p("  NO RESULT (see %s/b.log)" % out)
p("")
raw99 = floor["commit"]["latency"]["p99_ms"]
r1 = a["latency"]["p99_ms"] / raw99 if a and a.get("measured") and raw99 > 0 else None
r2 = b["mb_s"] / sq["mb_s"] if b and b.get("measured") and sq and sq["mb_s"] > 0 else None
targets = [
    ("produce p99 (a) / 4 KiB WRITE+COMMIT p99",
     "%.2f  (%.3f / %.3f ms)" % (r1, a["latency"]["p99_ms"], raw99) if r1 is not None else "n/a",
     "<= 2", label(None if r1 is None else r1 <= 2)),
    ("throughput (b) / 1 MiB WRITE+COMMIT MB/s",
     "%.2f  (%.1f / %.1f MB/s)" % (r2, b["mb_s"], sq["mb_s"]) if r2 is not None else "n/a",
     ">= 0.7", label(None if r2 is None else r2 >= 0.7)),
]
busy = max(float(lb.split()[0]), float(la.split()[0]))
if busy > 1.0:
    p("WARNING: load average %.1f on %d cores around the run: other work shared the CPUs;"
      % (busy, os.cpu_count()))
    p("         tail latencies and throughput are not this broker's alone.")
    p("")
p("Targets, WAL on NFS (labels, not assertions)")
for t in targets:
    p("  %-44s %-34s %-8s %s" % t)
text = "\n".join(L)
print(text)
with open(os.path.join(out, "report.txt"), "w") as f:
    f.write(text + "\n")
with open(os.path.join(out, "report.json"), "w") as f:
    json.dump({"url": url, "floor": floor, "a": a, "a_broker": broker_a, "a_sync": sync_a, "b": b,
               "load_before": lb, "load_after": la,
               "targets": [dict(zip(("name", "measured", "target", "label"), t)) for t in targets]},
              f, indent=1)
sys.exit(0 if (a and a.get("measured") and b and b.get("measured")) else 3)
EOF
[ $rc -eq 0 ] || fail "a workload measured nothing (logs: $OUT/a.log, $OUT/b.log)"
say "report: $OUT/report.txt"
