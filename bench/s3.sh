#!/bin/sh
# make bench, object store section: catch-up reads from S3 against the S3 emulator's
# own ranged-GET throughput measured in the same run, and PUTs per GiB ingested.
#
#   1. builds skload and skiffd (unless BENCH_NOBUILD is set);
#   2. starts the S3 emulator (tools/$S3_EMULATOR.sh: s3rver, the tests', unless
#      S3_EMULATOR=s3emu, the Go one that bench-compare's production-shaped target
#      uses and passes on; loopback, free port, data in $BENCH_WORK/s3/s3rver);
#   3. one skiffd with objects.url pointing at it (data.dir $BENCH_WORK/s3/data)
#      and the default upload settings (s3.wal.upload.threshold 500 MiB,
#      s3.wal.upload.interval.ms 30000); skload writes BENCH_S3_BYTES (1 GiB) of
#      incompressible records (16 KiB, acks=all, 4 producers) over
#      BENCH_PARTITIONS (4) partitions; once all of it is uploaded, the
#      object store's request counters (skiff_s3_requests_total, objects and
#      snapshots put) give the requests and PUTs per GiB ingested;
#   4. skiffd restarts with wal.cache.bytes=0 (cold block cache, WAL trimmed), and
#      skload --consume reads every partition from offset 0: catch-up throughput,
#      all of it served from objects (checked with skiff_s3_read_bytes_total),
#      with the CPU time of skiffd, of the emulator and of the whole machine
#      (/proc) around it: who used the cores;
#   5. bench/s3raw.py reads the same objects from the emulator with signed ranged
#      GETs (1 MiB and 8 MiB ranges, 1 and 4 in flight): the emulator's floor;
#      the last shape (8 MiB x 4) with the same CPU accounting;
#   6. prints the figures and the targets as PASS/MISS labels (not assertions):
#      catch-up >= 0.8 x the best raw ranged-GET throughput; PUTs per GiB <= 4.
#   skiffd and the emulator are stopped (by their PIDs) whatever happened.
#
# Exit status: 0 when measured (whatever the figures), 1 when the harness failed,
# 77 when the emulator cannot run here (node/npm missing, or Go for s3emu).
#
# Environment: BENCH_SMOKE, BENCH_WORK, BENCH_NOBUILD, BENCH_PARTITIONS, SKIFF_BUILD as
# in bench/run.sh, plus
#   BENCH_S3_BYTES=n        [1073741824; smoke 33554432] bytes of records to ingest
#   BENCH_S3_SIZE=n         [16384] record size
#   BENCH_S3_SKIFFD_ARGS    extra skiffd arguments (--override k=v ...), both runs
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH_TAG=bench-s3
. "$ROOT/bench/lib.sh"
MiB=1048576
if [ "$SMOKE" = 1 ]; then
  d_bytes=$((32 * MiB)); up_args="--override s3.wal.upload.threshold=$((8 * MiB)) --override s3.wal.upload.interval.ms=1000"
  raw_cap=$((32 * MiB)); raw_secs=5
else
  d_bytes=$((1024 * MiB)); up_args=""
  raw_cap=$((1024 * MiB)); raw_secs=20
fi
BYTES=${BENCH_S3_BYTES:-$d_bytes}
SIZE=${BENCH_S3_SIZE:-16384}
PARTITIONS=${BENCH_PARTITIONS:-4}
COUNT=$((BYTES / SIZE))

WORK=${BENCH_WORK:-$ROOT/bench/.work}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)/s3
SDIR=$WORK/s3rver
DATA=$WORK/data
OUT=$WORK/results
SKLOAD=$BUILD/bench/skload

trap 'rc=$?; bench_stop_all; exit $rc' EXIT
trap 'exit 130' INT TERM

metric() { skiffd_metric "$MPORT" "$1"; } # NAME -> value from skiffd's metrics (0 when absent)

# One line: CPU ticks of skiffd and of the emulator, and the machine's busy and
# total ticks (/proc/stat), so that the report can say who used the cores.
cpu_marks() {
  echo "$(cpu_mark "${SKIFFD_PID:-0}") $(cpu_mark "$EMU_PID" | cut -d' ' -f2)" \
       "$(machine_ticks)"
}
EMU_PID=0

# ---------------------------------------------------------------- 1. build
bench_build "$WORK.build.log" skload skiffd
[ -x "$SKLOAD" ] || fail "$SKLOAD missing (librdkafka-dev installed? make test-deps)"
[ -x "$BUILD/skiffd" ] || fail "$BUILD/skiffd missing"

rm -rf "$WORK"
mkdir -p "$SDIR" "$DATA" "$OUT"
cut -d' ' -f1-3 /proc/loadavg > "$OUT/load_before.txt"

# ---------------------------------------------------------------- 2. emulator
s3_start "$SDIR" "$OUT/s3rver_start.log" bench || exit $?
URL=$(s3_url bench catchup)
say "S3 emulator on $S3_ENDPOINT (data $SDIR/data)$( [ "$SMOKE" = 1 ] && echo ', smoke run')"

PORT=$(free_port)
MPORT=$(free_port)
BOOT=127.0.0.1:$PORT
start_broker() { # extra args...
  # shellcheck disable=SC2086
  skiffd_start "$WORK/skiffd.log" "$PORT" --override "data.dir=$DATA" \
      --override "objects.url=$URL" --override "metrics.listener=127.0.0.1:$MPORT" \
      $up_args ${BENCH_S3_SKIFFD_ARGS:-} "$@"
}

# ---------------------------------------------------------------- 3. ingest
start_broker
TOPIC=skiff-bench-s3-$(date +%s)
say "ingest: $COUNT records of $SIZE B ($((BYTES / MiB)) MiB) over $PARTITIONS partitions, acks=all"
timeout -k 30 600 "$SKLOAD" -b "$BOOT" -t "$TOPIC" -p "$PARTITIONS" -s "$SIZE" -n "$COUNT" -r 0 \
    -a all -P 4 --round-robin --linger-ms 5 --batch-size 1000000 --progress 0 --json \
    > "$OUT/ingest.json" 2> "$OUT/ingest.log" || fail "skload produce (log: $OUT/ingest.log)"
# Everything uploaded: the default interval is 30 s, so the tail may wait that long.
i=0
while :; do
  lag=$(metric skiff_s3_upload_lag_bytes)
  [ "$lag" -lt 65536 ] && break
  i=$((i + 1))
  [ $i -lt 900 ] || fail "upload lag still $lag bytes after 90 s"
  sleep 0.1
done
for m in skiff_s3_requests_total skiff_s3_objects_put_total skiff_s3_stream_objects_put_total \
         skiff_s3_stream_set_objects_put_total skiff_s3_view_snapshots_total \
         skiff_s3_upload_bytes_total skiff_s3_uploads_total skiff_s3_bytes_up_total; do
  echo "$m $(metric $m)"
done > "$OUT/ingest_metrics.txt"

# ---------------------------------------------------------------- 4. catch-up
skiffd_stop
start_broker --override wal.cache.bytes=0
EMU_PID=$(cat "$SDIR/$S3_EMULATOR.pid" 2>/dev/null || echo 0)
say "catch-up: skload --consume from offset 0, every batch from objects"
cpu_marks > "$OUT/catchup_cpu.txt"
timeout -k 30 600 "$SKLOAD" -b "$BOOT" -t "$TOPIC" --consume --no-create --progress 0 --json \
    > "$OUT/catchup.json" 2> "$OUT/catchup.log" || fail "skload consume (log: $OUT/catchup.log)"
cpu_marks >> "$OUT/catchup_cpu.txt"
for m in skiff_s3_read_bytes_total skiff_s3_requests_total skiff_s3_bytes_down_total \
         skiff_s3_block_gets_total skiff_s3_block_get_bytes_total skiff_s3_block_wait_seconds_total; do
  echo "$m $(metric $m)"
done > "$OUT/catchup_metrics.txt"
skiffd_stop

# ---------------------------------------------------------------- 5. raw GETs
case "$S3_EMULATOR" in # "key size" of every object: s3rver keeps a body beside metadata files
  s3rver) find "$SDIR/data/bench/catchup/data" -name '*._S3rver_object' -printf '%P %s\n' \
            | sed 's/\._S3rver_object / /' ;;
  *) find "$SDIR/data/bench/catchup/data" -type f ! -name '.*' -printf '%P %s\n' ;;
esac | sed 's#^#catchup/data/#' > "$OUT/objects.txt"
say "raw: ranged GETs of the same $(wc -l < "$OUT/objects.txt") objects"
raw() { # SHAPE...: one JSON line per shape appended to raw.json
  args=""
  for sh in "$@"; do args="$args --shape $sh"; done
  # shellcheck disable=SC2086
  "$PY" "$ROOT/bench/s3raw.py" --endpoint "$S3_ENDPOINT" --bucket bench --keys "$OUT/objects.txt" \
      $args --max-bytes "$raw_cap" --max-seconds "$raw_secs" \
      >> "$OUT/raw.json" 2>> "$OUT/raw.log" || fail "s3raw.py (log: $OUT/raw.log)"
}
: > "$OUT/raw.json"
raw 1048576:1 1048576:4 8388608:1
cpu_marks > "$OUT/raw_cpu.txt" # around the last shape alone: the emulator's CPU per GB
raw 8388608:4
cpu_marks >> "$OUT/raw_cpu.txt"
cut -d' ' -f1-3 /proc/loadavg > "$OUT/load_after.txt"

# ---------------------------------------------------------------- 6. report
"$PY" - "$OUT" "$SMOKE" "$PARTITIONS" "$SIZE" "$S3_EMULATOR" <<'EOF'
import json, os, sys

out, smoke, parts, size, emulator = sys.argv[1:6]

def kv(name):
    d = {}
    with open(os.path.join(out, name)) as f:
        for ln in f:
            k, v = ln.split()
            d[k] = int(v)
    return d

def last_json(name):
    with open(os.path.join(out, name)) as f:
        return json.loads(f.read().strip().splitlines()[-1])

ing, cu = last_json("ingest.json"), last_json("catchup.json")
im, cm = kv("ingest_metrics.txt"), kv("catchup_metrics.txt")
raw = [json.loads(ln) for ln in open(os.path.join(out, "raw.json")) if ln.strip()]
best = max(raw, key=lambda r: r["mb_s"])
gib = im["skiff_s3_upload_bytes_total"] / float(1 << 30)
puts = im["skiff_s3_objects_put_total"] + im["skiff_s3_view_snapshots_total"]
ratio = cu["mb_s"] / best["mb_s"] if best["mb_s"] > 0 else 0
label = lambda ok: "PASS" if ok else "MISS"
p = []
p.append("Skiff object store benchmark%s: emulator %s, %s partitions, %s B records, %d cores, "
         "load %s -> %s" % (
    " (SMOKE: tiny sizes, figures meaningless)" if smoke == "1" else "", emulator, parts, size,
    os.cpu_count(), open(os.path.join(out, "load_before.txt")).read().strip(),
    open(os.path.join(out, "load_after.txt")).read().strip()))
p.append("")
p.append("Ingest: %.1f MB/s acks=all; %.3f GiB uploaded in %d uploads: %d StreamObjects, "
         "%d StreamSetObjects, %d view snapshots" % (
             ing.get("mb_s", 0), gib, im["skiff_s3_uploads_total"],
             im["skiff_s3_stream_objects_put_total"], im["skiff_s3_stream_set_objects_put_total"],
             im["skiff_s3_view_snapshots_total"]))
p.append("  object store requests %d (%.1f per GiB); PUTs (objects + snapshots) %d (%.1f per GiB)"
         % (im["skiff_s3_requests_total"], im["skiff_s3_requests_total"] / gib, puts, puts / gib))
p.append("Catch-up read through skiffd (skload --consume from offset 0, wal.cache.bytes=0, cold):")
p.append("  %.1f MB/s: %d records, %.1f MB in %.2f s, %d errors; from objects %.1f MB in %d "
         "requests (%.1f MB downloaded)" % (
             cu["mb_s"], cu["records"], cu["bytes"] / 1e6, cu["seconds"], cu["errors"],
             cm["skiff_s3_read_bytes_total"] / 1e6, cm["skiff_s3_requests_total"],
             cm["skiff_s3_bytes_down_total"] / 1e6))
p.append("Emulator's raw ranged GETs of the same objects (s3raw.py, same run):")
for r in raw:
    p.append("  %5d KiB ranges, %d in flight: %7.1f MB/s (%d requests, %d errors)" % (
        r["range"] // 1024, r["concurrency"], r["mb_s"], r["requests"], r["errors"]))
cpu = {}
for name, what in (("catchup_cpu.txt", "catch-up"), ("raw_cpu.txt", "raw")):
    a, b = [[int(x) for x in ln.split()] for ln in open(os.path.join(out, name))][:2]
    tk = float(os.sysconf("SC_CLK_TCK"))
    wall = (b[0] - a[0]) / 1e9
    busy = (b[3] - a[3]) / float(max(1, b[4] - a[4])) * os.cpu_count()
    sk, emu = (b[1] - a[1]) / tk, (b[2] - a[2]) / tk
    cpu[what] = {"seconds": wall, "skiffd_s": sk, "emulator_s": emu, "busy_cores": busy,
                 "rest_s": busy * wall - sk - emu}
rb = raw[-1]  # the shape raw_cpu.txt brackets
gb_cu, gb_raw = cu["bytes"] / 1e9, max(rb["bytes"], 1) / 1e9
c, r = cpu["catch-up"], cpu["raw"]
p.append("CPU (seconds, and per GB read): who used the %d cores" % os.cpu_count())
p.append("  catch-up, %.2f s: skiffd %.2f (%.2f/GB), emulator %.2f (%.2f/GB), the rest (skload, "
         "kernel) %.2f; %.2f cores busy" % (c["seconds"], c["skiffd_s"], c["skiffd_s"] / gb_cu,
                                           c["emulator_s"], c["emulator_s"] / gb_cu, c["rest_s"],
                                           c["busy_cores"]))
p.append("  raw %d KiB ranges, %d in flight (%.1f MB/s), %.2f s: emulator %.2f (%.2f/GB), "
         "the rest (s3raw.py, kernel) %.2f; %.2f cores busy" % (
             rb["range"] // 1024, rb["concurrency"], rb["mb_s"], r["seconds"], r["emulator_s"],
             r["emulator_s"] / gb_raw, r["rest_s"], r["busy_cores"]))
p.append("")
p.append("Targets (labels, not assertions)")
p.append("  %-48s %-34s %-10s %s" % ("catch-up / best raw ranged-GET throughput",
         "%.2f  (%.1f / %.1f MB/s)" % (ratio, cu["mb_s"], best["mb_s"]), ">= 0.8",
         label(ratio >= 0.8)))
p.append("  %-48s %-34s %-10s %s" % ("PUTs per GiB ingested", "%.1f  (%d in %.3f GiB)" % (
    puts / gib, puts, gib), "<= 4", label(puts / gib <= 4)))
text = "\n".join(p)
print(text)
with open(os.path.join(out, "report.txt"), "w") as f:
    f.write(text + "\n")
with open(os.path.join(out, "report.json"), "w") as f:
    json.dump({"smoke": smoke == "1", "emulator": emulator, "ingest": ing, "catchup": cu, "raw": raw,
               "ingest_metrics": im, "catchup_metrics": cm, "puts_per_gib": puts / gib,
               "requests_per_gib": im["skiff_s3_requests_total"] / gib,
               "catchup_over_raw": ratio, "cpu": cpu}, f, indent=1)
EOF
say "report: $OUT/report.txt"
