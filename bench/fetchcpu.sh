#!/bin/bash
# bench/fetchcpu.sh SKIFFD cache|objects [LABEL]
#
# The broker's CPU per GB read by a catch-up consumer: starts SKIFFD on a
# fresh data dir, writes BYTES (default 400 MB) of 1 KiB records to a topic
# of 4 partitions with skload, waits until the broker is quiet (uploads,
# snapshots and view commits done), then reads them back from offset 0 with
# `skload --consume` and prints skiffd's user + system CPU (/proc/PID/stat)
# during the read, per GB read, and its minor page faults (fresh pages).
#   cache:   wal.cache.bytes = 1 GiB: every batch comes from the WAL cache;
#   objects: an 8 MiB WAL cache, uploads every 64 MiB and view snapshots
#            every second (so the WAL is trimmed): batches come from the
#            objects (files in the data dir) through the block cache.
# With PERF=1 it also runs `perf record -g` on skiffd during the read
# (perf.data in the run's directory); the broker's /metrics after the read
# are kept in metrics.txt there. FETCHCPU_OVERRIDES adds skiffd
# overrides (space-separated key=value), e.g. objects.url=s3://... to read the
# objects from an S3 endpoint instead of data.dir. Compare two builds with paired runs,
# alternating them, on a machine as quiet as you can get.
set -u
SKIFFD=$1 MODE=$2 LABEL=${3:-run}
HERE=$(cd "$(dirname "$0")" && pwd)
SKLOAD=${SKLOAD:-$HERE/../build/bench/skload}
BYTES=${BYTES:-400000000}
D=${BENCH_WORK:-$HERE/.work}/fetchcpu-$LABEL-$MODE
rm -rf "$D" && mkdir -p "$D" || exit 1
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
PORT=$(free_port) MPORT=$(free_port)
case $MODE in
cache) EXTRA=(--override wal.cache.bytes=1073741824) ;;
objects) EXTRA=(--override wal.cache.bytes=8388608 --override s3.wal.upload.threshold=67108864
                --override s3.wal.upload.interval.ms=1000 --override s3.view.snapshot.interval.ms=1000) ;;
*) echo "mode: cache or objects" >&2; exit 1 ;;
esac
for kv in ${FETCHCPU_OVERRIDES:-}; do EXTRA+=(--override "$kv"); done
EXTRA+=(--override metrics.listener=127.0.0.1:$MPORT)
"$SKIFFD" --override node.id=1 --override data.dir="$D" \
  --override listeners=PLAINTEXT://127.0.0.1:$PORT \
  --override advertised.listeners=PLAINTEXT://127.0.0.1:$PORT "${EXTRA[@]}" > "$D/log" 2>&1 &
PID=$!
stop() { kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; }
sleep 1
if ! "$SKLOAD" -b 127.0.0.1:$PORT -t t -p 4 -s 1024 -n $((BYTES / 1024 + 20000)) -P 2 \
    > "$D/produce.txt" 2>&1; then
  echo "produce failed" >&2; tail -5 "$D/produce.txt" >&2; stop; exit 1
fi
TK=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15, $14}' "/proc/$PID/stat"; }
minflt() { awk '{print $10}' "/proc/$PID/stat"; }
[ "$MODE" = objects ] && sleep 4
quiet=0
for _ in $(seq 30); do # quiet: under 2 ticks in a second, twice in a row
  a=$(cpu); sleep 1; b=$(cpu)
  if [ $((${b% *} - ${a% *})) -lt 2 ]; then quiet=$((quiet + 1)); [ $quiet -ge 2 ] && break
  else quiet=0; fi
done
if [ -n "${PERF:-}" ]; then
  perf record ${PERF_OPTS:--g} -o "$D/perf.data" -p "$PID" > /dev/null 2>&1 & PP=$!; sleep 0.5
fi
c0=$(cpu) f0=$(minflt)
"$SKLOAD" -b 127.0.0.1:$PORT -t t --no-create --consume --bytes "$BYTES" -d 300 > "$D/consume.txt" 2>&1
c1=$(cpu) f1=$(minflt)
[ -n "${PERF:-}" ] && { kill -INT "$PP"; wait "$PP"; }
curl -s "http://127.0.0.1:$MPORT/metrics" > "$D/metrics.txt" || true
stop
READ=$(grep -o 'records, [0-9]* bytes' "$D/consume.txt" | awk '{print $2}')
[ -n "$READ" ] && [ "$READ" -gt 0 ] || { echo "nothing read" >&2; exit 1; }
awk -v l="$LABEL" -v m="$MODE" -v t="${c1% *} ${c0% *} ${c1#* } ${c0#* }" -v tk="$TK" -v b="$READ" -v f=$((f1 - f0)) 'BEGIN {
  split(t, x, " "); cpu = (x[1] - x[2]) / tk; user = (x[3] - x[4]) / tk; gb = b / 1e9
  printf "%s %s read %d bytes: skiffd %.2f CPU s (user %.2f), %.3f CPU s per GB (user %.3f), %d page faults\n",
    l, m, b, cpu, user, cpu / gb, user / gb, f }'
