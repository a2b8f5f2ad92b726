#!/bin/sh
# The security part of `make bench` (bench/run.sh, section 10): what SASL_SSL costs.
#
#   1. makes a CA and a certificate for 127.0.0.1 with the openssl command line;
#   2. starts one skiffd with a PLAINTEXT and a SASL_SSL listener (PLAIN user
#      `bench`; the mechanism only matters once per connection) and runs, over
#      each listener in turn, the same two workloads as bench/run.sh:
#        (a) acks=all records at a fixed rate, linger.ms=0: produce latency
#        (b) acks=all records as fast as possible: throughput
#      (each target is first primed for BENCH_PRIME [15] s on a throwaway topic);
#   3. starts Apache Kafka 4.3.1 (tools/kafka-ref.sh) with the same listeners,
#      certificate and user, and runs the same workloads over its SASL_SSL
#      listener (BENCH_SECURE_KAFKA=0 skips Kafka);
#   4. prints a table (p50/p99 of (a), MB/s of (b)) and writes it, with the raw
#      skload JSON, to $BENCH_WORK/secure/.
# Brokers are stopped by their PIDs. Figures are reported, never judged.
#
# Exit status: 0 when every figure was measured; 1 when the harness failed.
# Environment: as bench/run.sh (BENCH_SMOKE, BENCH_RATE, BENCH_DURATION,
# BENCH_WARMUP, BENCH_PARTITIONS, BENCH_SIZE, BENCH_TP_PRODUCERS, BENCH_LINGER_MS,
# BENCH_MAX_INFLIGHT, BENCH_WORK, SKIFF_BUILD), BENCH_PRIME=s [15; smoke 0.5],
# BENCH_KAFKA_HEAP [-Xms1g -Xmx1g] and BENCH_SECURE_KAFKA=0|1 [1].
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${SKIFF_BUILD:-$ROOT/build}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
SMOKE=${BENCH_SMOKE:-0}
if [ "$SMOKE" = 1 ]; then d_rate=200; d_dur=2; d_warm=0.5; d_inflight=2000; d_prime=0.5
else d_rate=2000; d_dur=30; d_warm=5; d_inflight=20000; d_prime=15; fi
PRIME=${BENCH_PRIME:-$d_prime}
RATE=${BENCH_RATE:-$d_rate}
DURATION=${BENCH_DURATION:-$d_dur}
WARMUP=${BENCH_WARMUP:-$d_warm}
PARTITIONS=${BENCH_PARTITIONS:-4}
SIZE=${BENCH_SIZE:-1024}
TP_PRODUCERS=${BENCH_TP_PRODUCERS:-4}
LINGER=${BENCH_LINGER_MS:-5}
INFLIGHT=${BENCH_MAX_INFLIGHT:-$d_inflight}
WITH_KAFKA=${BENCH_SECURE_KAFKA:-1}
WORK=${BENCH_WORK:-$ROOT/bench/.work}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)/secure
SKLOAD=$BUILD/bench/skload
KREF=$ROOT/tools/kafka-ref.sh
PASSWORD=bench-secret

SKIFF_PID=""
KDIR=""
say() { echo "bench/secure: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }

cleanup() {
  rc=$?
  if [ -n "$SKIFF_PID" ] && kill -0 "$SKIFF_PID" 2>/dev/null; then
    kill -TERM "$SKIFF_PID" 2>/dev/null || true
    i=0
    while kill -0 "$SKIFF_PID" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    kill -KILL "$SKIFF_PID" 2>/dev/null || true
    wait "$SKIFF_PID" 2>/dev/null || true
  fi
  [ -n "$KDIR" ] && "$KREF" stop "$KDIR" > /dev/null 2>&1 || true
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_port() { # PORT SECONDS
  i=0
  while ! "$PY" -c "import socket,sys; socket.create_connection(('127.0.0.1',$1),1)" 2>/dev/null; do
    i=$((i + 1)); [ $i -lt $(($2 * 10)) ] || return 1; sleep 0.1
  done
}

[ -x "$SKLOAD" ] || fail "$SKLOAD missing (librdkafka-dev installed? make test-deps)"
command -v openssl > /dev/null || fail "openssl is missing"
rm -rf "$WORK"
mkdir -p "$WORK/pki"

# ------------------------------------------------------------ 1. certificates
(
  cd "$WORK/pki"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -subj /CN=bench-ca -days 2 \
      -out ca.pem 2> /dev/null
  openssl req -new -newkey rsa:2048 -nodes -keyout node.key -subj /CN=127.0.0.1 \
      -out node.csr 2> /dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > san.ext
  openssl x509 -req -in node.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
      -extfile san.ext -out node.pem 2> /dev/null
  cat node.key node.pem > keystore.pem
) || fail "certificates (openssl)"
PKI=$WORK/pki
JAAS="org.apache.kafka.common.security.plain.PlainLoginModule required user_bench=\"$PASSWORD\";"
SECURE_X="-X security.protocol=SASL_SSL -X sasl.mechanisms=PLAIN -X sasl.username=bench \
-X sasl.password=$PASSWORD -X ssl.ca.location=$PKI/ca.pem"

# --------------------------------------------------------------- workloads
# run TARGET BOOTSTRAP [skload options...]: (a) and (b) into $WORK/TARGET-{a,b}.json
run() {
  target=$1 boot=$2
  shift 2
  stamp=$(date +%s%N)
  # Nagle off everywhere: librdkafka writes a TLS request in several segments,
  # which Nagle's algorithm would hold back for the peer's delayed ACK.
  common="-b $boot -p $PARTITIONS -s $SIZE -a all --warmup $WARMUP -d $DURATION --json \
-X socket.nagle.disable=true"
  bound=$("$PY" -c "print(int(float('$DURATION') + float('$WARMUP') + 120))")
  # A fresh JVM runs its first seconds interpreted: every target is primed alike,
  # on a throwaway topic, before anything is measured (as bench/compare.sh does).
  say "$target: priming for ${PRIME} s"
  # shellcheck disable=SC2086
  timeout -k 30 "$bound" "$SKLOAD" $common "$@" -t "sec-prime-$stamp" -P 1 -r "$RATE" \
      --linger-ms 0 --max-inflight "$INFLIGHT" -d "$PRIME" --warmup 0 > /dev/null \
      2> "$WORK/$target-prime.log" || true
  say "$target (a): $RATE rec/s of $SIZE B, acks=all, linger.ms=0, ${DURATION} s"
  # shellcheck disable=SC2086
  timeout -k 30 "$bound" "$SKLOAD" $common "$@" -t "sec-a-$stamp" -P 1 -r "$RATE" \
      --linger-ms 0 --max-inflight "$INFLIGHT" > "$WORK/$target-a.json" \
      2> "$WORK/$target-a.log" || true
  say "$target (b): max throughput, $TP_PRODUCERS producers, linger.ms=$LINGER"
  # shellcheck disable=SC2086
  timeout -k 30 "$bound" "$SKLOAD" $common "$@" -t "sec-b-$stamp" -P "$TP_PRODUCERS" -r 0 \
      --linger-ms "$LINGER" --batch-size 1000000 --max-inflight "$INFLIGHT" \
      > "$WORK/$target-b.json" 2> "$WORK/$target-b.log" || true
}

# ------------------------------------------------------------------ 2. Skiff
PORT=$(free_port)
SPORT=$(free_port)
LS="PLAINTEXT://127.0.0.1:$PORT,SASL_SSL://127.0.0.1:$SPORT"
mkdir -p "$WORK/skiff-data"
"$BUILD/skiffd" --override "data.dir=$WORK/skiff-data" --override "listeners=$LS" \
    --override "advertised.listeners=$LS" --override "sasl.enabled.mechanisms=PLAIN" \
    --override "listener.name.sasl_ssl.plain.sasl.jaas.config=$JAAS" \
    --override "ssl.keystore.location=$PKI/keystore.pem" \
    > "$WORK/skiffd.log" 2>&1 &
SKIFF_PID=$!
wait_port "$SPORT" 30 || fail "skiffd does not listen on $SPORT (log: $WORK/skiffd.log)"
say "skiffd pid $SKIFF_PID: PLAINTEXT $PORT, SASL_SSL $SPORT"
run skiff-plaintext "127.0.0.1:$PORT"
# shellcheck disable=SC2086
run skiff-sasl_ssl "127.0.0.1:$SPORT" $SECURE_X
kill -0 "$SKIFF_PID" 2>/dev/null || { SKIFF_PID=""; fail "skiffd died (log: $WORK/skiffd.log)"; }
kill -TERM "$SKIFF_PID"
wait "$SKIFF_PID" 2>/dev/null || true
SKIFF_PID=""

# ------------------------------------------------------------------ 3. Kafka
if [ "$WITH_KAFKA" != 0 ]; then
  "$KREF" fetch || fail "Kafka download (tools/kafka-ref.sh fetch)"
  KDIR=$WORK/kafka
  KPORT=$(free_port)
  KSPORT=$(free_port)
  CPORT=$(free_port)
  KAFKA_REF_CONTROLLER_PORT=$CPORT KAFKA_REF_HEAP=${BENCH_KAFKA_HEAP:--Xms1g -Xmx1g} \
  KAFKA_REF_PROPS="listeners=PLAINTEXT://127.0.0.1:$KPORT,SASL_SSL://127.0.0.1:$KSPORT,CONTROLLER://127.0.0.1:$CPORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KPORT,SASL_SSL://127.0.0.1:$KSPORT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
sasl.enabled.mechanisms=PLAIN
listener.name.sasl_ssl.plain.sasl.jaas.config=$JAAS
ssl.keystore.type=PEM
ssl.keystore.location=$PKI/keystore.pem" \
    "$KREF" start "$KDIR" "$KPORT" 2> "$WORK/kafka-start.log" \
    || { cat "$WORK/kafka-start.log" >&2; fail "Kafka start (tools/kafka-ref.sh)"; }
  wait_port "$KSPORT" 60 || fail "Kafka does not listen on $KSPORT"
  say "Kafka pid $(cat "$KDIR/kafka.pid"): PLAINTEXT $KPORT, SASL_SSL $KSPORT"
  # shellcheck disable=SC2086
  run kafka-sasl_ssl "127.0.0.1:$KSPORT" $SECURE_X
  "$KREF" stop "$KDIR" > /dev/null 2>&1 || true
  KDIR=""
fi

# ----------------------------------------------------------------- 4. report
"$PY" - "$WORK" "$SMOKE" "$WITH_KAFKA" "$RATE" "$SIZE" "$TP_PRODUCERS" <<'EOF'
import json, os, sys

work, smoke, with_kafka, rate, size, tp = sys.argv[1:7]
targets = [("skiff-plaintext", "Skiff, PLAINTEXT"), ("skiff-sasl_ssl", "Skiff, SASL_SSL")]
if with_kafka != "0":
    targets.append(("kafka-sasl_ssl", "Apache Kafka 4.3.1, SASL_SSL"))

def load(name):
    try:
        with open(os.path.join(work, name)) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None

rows, missing, out = [], [], {}
for t, title in targets:
    a, b = load(t + "-a.json"), load(t + "-b.json")
    if not a or not a.get("measured") or not b or not b.get("measured"):
        missing.append(t)
        continue
    la = a["latency"]
    out[t] = {"a_p50_ms": la["p50_ms"], "a_p99_ms": la["p99_ms"], "b_mbs": b["mb_s"],
              "b_records_s": b["records_s"]}
    rows.append("| %s | %.2f | %.2f | %.1f |" % (title, la["p50_ms"], la["p99_ms"], b["mb_s"]))
lines = ["SASL_SSL beside PLAINTEXT%s: (a) %s rec/s of %s B acks=all, (b) max throughput "
         "with %s producers" % (" (SMOKE: tiny sizes, figures meaningless)" if smoke == "1"
                                 else "", rate, size, tp), "",
         "| target | (a) p50 ms | (a) p99 ms | (b) MB/s |", "|---|---|---|---|"] + rows
if missing:
    lines.append("")
    lines.append("not measured: " + ", ".join(missing))
text = "\n".join(lines) + "\n"
with open(os.path.join(work, "report.md"), "w") as f:
    f.write(text)
with open(os.path.join(work, "report.json"), "w") as f:
    json.dump({"targets": out, "missing": missing}, f, indent=1)
sys.stdout.write(text)
sys.exit(1 if missing else 0)
EOF
