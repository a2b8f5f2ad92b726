#!/bin/sh
# bench/s3ab.sh PAIRS SKIFFD_A SKIFFD_B: two skiffd builds' catch-up reads from the
# S3 emulator, in paired runs on the same objects (A B raw, A B raw, ...).
#
# bench/s3.sh's catch-up, made to compare builds on a noisy machine: the S3
# emulator (tools/s3rver.sh) starts once, SKIFFD_A ingests BENCH_S3_BYTES (1 GiB) of
# 16 KiB records over 4 partitions (acks=all) and uploads them; then, PAIRS times,
# each build restarts on that data dir with wal.cache.bytes=0 (cold block cache) and
# `skload --consume` reads every partition from offset 0, all of it from objects;
# after each pair, bench/s3raw.py reads the same objects (8 MiB ranges, 4 in flight,
# bench/s3.sh's best shape on this machine) as the emulator's floor at that moment.
# Both builds must read the same data dir (same object and registry formats).
#
# Prints one line per run: "RUN A|B mb_s=... cpu_s_per_gb=... emu_cpu_s=..."
# (skiffd's and the emulator's user + system CPU, /proc/PID/stat, during the read)
# and "RAW {json}" per pair; the metrics of each build's last run are left in
# $WORK/metrics.A|B.txt. PERF=1: `perf record -g` on skiffd during each read
# ($WORK/perf.A|B.data). EXTRA_A, EXTRA_B: extra skiffd arguments per build.
# Everything it started is stopped by PID whatever happened; the data
# ($BENCH_WORK/s3ab, default bench/.work/s3ab) is removed at the end unless
# BENCH_KEEP is set.
set -eu
[ $# -eq 3 ] || { echo "usage: $0 PAIRS SKIFFD_A SKIFFD_B" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH_TAG=bench-s3ab
. "$ROOT/bench/lib.sh"
PAIRS=$1 A=$2 B=$3
BYTES=${BENCH_S3_BYTES:-1073741824}
WORK=${BENCH_WORK:-$ROOT/bench/.work}/s3ab
SKLOAD=$BUILD/bench/skload
[ -x "$SKLOAD" ] || fail "$SKLOAD missing (build the project first)"
trap 'rc=$?; bench_stop_all; [ -n "${BENCH_KEEP:-}" ] || rm -rf "$WORK"; exit $rc' EXIT
trap 'exit 130' INT TERM

metric() { curl -s "http://127.0.0.1:$MPORT/metrics" | awk -v n="$1" '$1 == n { print $2 }'; }
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

rm -rf "$WORK"
mkdir -p "$WORK/s3" "$WORK/data"
s3_start "$WORK/s3" "$WORK/s3start.log" bench || exit $?
URL=$(s3_url bench catchup)
PORT=$(free_port)
MPORT=$(free_port)
start() { # SKIFFD ARG...
  BUILD=$(dirname "$1")
  shift
  skiffd_start "$WORK/skiffd.log" "$PORT" --override "data.dir=$WORK/data" \
      --override "objects.url=$URL" --override "metrics.listener=127.0.0.1:$MPORT" "$@"
}

start "$A"
TOPIC=s3ab-$(date +%s)
say "ingest: $((BYTES / 1048576)) MiB of 16 KiB records over 4 partitions"
timeout 600 "$SKLOAD" -b "$BOOT" -t "$TOPIC" -p 4 -s 16384 -n $((BYTES / 16384)) -r 0 -a all \
    -P 4 --round-robin --linger-ms 5 --batch-size 1000000 --progress 0 --json \
    > "$WORK/ingest.json" 2> "$WORK/ingest.log" || fail "skload produce ($WORK/ingest.log)"
i=0
while [ "$(metric skiff_s3_upload_lag_bytes | cut -d. -f1)" -ge 65536 ]; do
  i=$((i + 1))
  [ $i -lt 600 ] || fail "upload lag after 120 s"
  sleep 0.2
done
skiffd_stop
find "$WORK/s3/data/bench/catchup/data" -name '*._S3rver_object' -printf '%P %s\n' \
  | sed 's/\._S3rver_object / /; s#^#catchup/data/#' > "$WORK/objects.txt"
EMU=$(cat "$WORK/s3/s3rver.pid")

one() { # LABEL SKIFFD
  eval "x=\${EXTRA_$1:-}"
  # shellcheck disable=SC2086
  start "$2" --override wal.cache.bytes=0 $x
  pp=""
  if [ "${PERF:-0}" = 1 ]; then
    perf record -F 999 -g -p "$SKIFFD_PID" -o "$WORK/perf.$1.data" > /dev/null 2>&1 &
    pp=$!
    sleep 0.5
  fi
  e0=$(ticks "$EMU") c0=$(ticks "$SKIFFD_PID")
  timeout 600 "$SKLOAD" -b "$BOOT" -t "$TOPIC" --consume --no-create --progress 0 --json \
      > "$WORK/catchup.json" 2> "$WORK/catchup.log" || fail "skload consume ($WORK/catchup.log)"
  c1=$(ticks "$SKIFFD_PID") e1=$(ticks "$EMU")
  [ -z "$pp" ] || { kill -INT "$pp"; wait "$pp" || true; }
  curl -s "http://127.0.0.1:$MPORT/metrics" | grep '^skiff_s3' > "$WORK/metrics.$1.txt" || true
  skiffd_stop
  "$PY" - "$1" "$((c1 - c0))" "$((e1 - e0))" "$WORK/catchup.json" <<'EOF'
import json, os, sys
label, cpu, emu, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
cu = json.loads(open(path).read().strip().splitlines()[-1])
tick = os.sysconf("SC_CLK_TCK")
print("RUN %s mb_s=%.1f secs=%.2f cpu_s_per_gb=%.3f emu_cpu_s=%.2f errors=%d" % (
    label, cu["mb_s"], cu["seconds"], cpu / tick / (cu["bytes"] / 1e9), emu / tick,
    cu["errors"]), flush=True)
EOF
}

for p in $(seq 1 "$PAIRS"); do
  echo "PAIR $p load $(loadavg)"
  one A "$A"
  one B "$B"
  "$PY" "$ROOT/bench/s3raw.py" --endpoint "$S3_ENDPOINT" --bucket bench \
      --keys "$WORK/objects.txt" --shape 8388608:4 --max-bytes "$BYTES" --max-seconds 20 \
      | sed 's/^/RAW /'
done
