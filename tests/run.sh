#!/bin/sh
# `make test`: every test phase, then a summary with the duration of each.
#
#   tests/run.sh                              all phases (after `make build`)
#   SKIFF_TEST_PHASES="unit integration" tests/run.sh
#   SKIFF_TEST_PHASES=builds tests/run.sh     only the build-type check
#   SKIFF_PYTEST_ARGS="-k 1001" SKIFF_TEST_PHASES=integration tests/run.sh
#   SKIFF_TEST_AGAINST=kafka SKIFF_TEST_PHASES=integration tests/run.sh
#
# Phases (SKIFF_TEST_PHASES, default "unit asan builds integration"):
#   unit         ctest in $SKIFF_BUILD (default build/); includes test_fuzz_replay, which
#                runs the fuzz corpus (tests/fuzz/corpus) through the request codec
#   asan         configure build-asan with -DSKIFF_SANITIZE=ON (ASan+UBSan), build, ctest
#   builds       configure and build (no test run) build-release, build-minsizerel and
#                build-debug: CMake's Release (-O3), MinSizeRel (-Os) and Debug (-O0) with
#                -Werror, whose warnings differ from the default -O2's (docs/DEVELOPING.md,
#                "Build checks"); every type is built, then the phase fails if one did
#   integration  /usr/bin/python3 -m pytest tests/integration, each test limited to
#                $SKIFF_TEST_TIMEOUT s (default 300, pytest-timeout); the Java client
#                programs and kafkajs are prepared first, outside that limit
#
# Other variables:
#   SKIFF_PYTEST_ARGS    extra pytest arguments (-k EXPR, -x, a file, ...)
#   SKIFF_TEST_EXTERNAL  host:port of a running broker the integration tests use instead
#                        of starting build/skiffd (tests that restart brokers are skipped)
#   SKIFF_TEST_AGAINST=kafka  start Apache Kafka 4.3.1 (tools/kafka-ref.sh) in
#                        tests/.work/kafka-ref on a free port for the integration phase,
#                        point the tests at it, and stop it (by its PID) at the end
#   SKIFF_RDK_DEBUG      librdkafka's `debug` for the crash tests' producer loads
#                        (crashcheck.ProduceLoad), e.g. eos,msg: each batch's sequence
#                        numbers and errors, to follow an idempotent producer's retries
#
# The integration phase also starts one NFS-Ganesha (tools/ganesha.sh, NFSv3 on
# 127.0.0.1, free ports, export in tests/.work/ganesha-PID/export) for the tests with
# the WAL on NFS (test_3*) and the cluster tests' shared volume (test_7*; a local
# directory without it), hands them its URL in SKIFF_TEST_NFS_URL, and stops it
# (by its PID) when the phase ends, whatever happened. Without Ganesha, rpcbind or
# root, the test_3* tests start none and skip.
#
# It also starts one S3 emulator (tools/s3rver.sh, 127.0.0.1, a free port, data in
# tests/.work/s3rver-PID) for the object store tests (test_5*) and the cluster tests'
# objects.url (test_7*; file:// without it), hands them
# SKIFF_TEST_S3_URL, SKIFF_TEST_S3_DIR and its credentials in AWS_ACCESS_KEY_ID /
# AWS_SECRET_ACCESS_KEY, and stops it (by its PID) when the phase ends, whatever
# happened. Without node/npm those tests skip with the reason in SKIFF_TEST_S3_SKIP.
#
# It also starts one 3-member etcd (tools/etcd.sh, 127.0.0.1, free ports, data in
# tests/.work/etcd-PID) for the cluster tests that leave etcd alone (test_7*), hands them
# SKIFF_TEST_ETCD_ENDPOINTS and SKIFF_TEST_ETCD_DIR, and stops it (by its PIDs) when the
# phase ends, whatever happened; tests that kill or stop etcd members start their own.
# Without etcd, those tests skip with the reason in SKIFF_TEST_ETCD_SKIP.
#
# The zone tests (test_71*) run nodes and clients in three network namespaces
# (tools/zones.sh; tests/integration/zones.py), which reach the services above through
# the region's address. The phase checks that this machine can have them (root,
# namespaces, nftables, which it installs when missing), hands pytest the prefix of
# their names in SKIFF_TEST_ZONES_PREFIX (skz-PID: the session makes them when a test
# first asks), and removes them when the phase ends, whatever happened. Where they
# cannot exist, those tests skip with the reason in SKIFF_TEST_ZONES_SKIP.
# Exit status: 0 only if every selected phase passed.
set -u

cd "$(dirname "$0")/.." || exit 2
ROOT=$(pwd)
BUILD=${SKIFF_BUILD:-build}
PHASES=${SKIFF_TEST_PHASES:-unit asan builds integration}
PYTHON=/usr/bin/python3
GENERATOR=Ninja
command -v ninja >/dev/null 2>&1 || GENERATOR="Unix Makefiles"

SUMMARY=""
FAILED=0
PASSED=0
KREF_DIR=""
NFS_DIR=""
S3_DIR=""
ETCD_DIR=""
ZONES_PREFIX=""

now() { date +%s.%N 2>/dev/null || date +%s; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
banner() { printf '\n==== %s ====\n' "$*"; }

record() { # phase status seconds [note]
  SUMMARY="$SUMMARY$(printf '  %-12s %-5s %8ss  %s' "$1" "$2" "$3" "${4:-}")
"
  case "$2" in
    FAIL) FAILED=$((FAILED + 1)) ;;
    PASS) PASSED=$((PASSED + 1)) ;;
  esac
}

stop_reference() {
  if [ -n "$KREF_DIR" ]; then
    tools/kafka-ref.sh stop "$KREF_DIR" || true
    KREF_DIR=""
  fi
}
stop_nfs() {
  if [ -n "$NFS_DIR" ]; then
    tools/ganesha.sh stop "$NFS_DIR" || true
    rm -rf "$NFS_DIR"
    NFS_DIR=""
  fi
  unset SKIFF_TEST_NFS_URL
}

start_nfs() {
  # One per run: several checkouts' runs may share the machine, even this tree.
  NFS_DIR=$ROOT/tests/.work/ganesha-$$
  rm -rf "$NFS_DIR"
  mkdir -p "$NFS_DIR"
  # Both sockets bound at once: two separate picks could return one port twice.
  read -r nport mport <<EOF
$($PYTHON -c 'import socket; a, b = socket.socket(), socket.socket()
a.bind(("127.0.0.1", 0)); b.bind(("127.0.0.1", 0)); print(a.getsockname()[1], b.getsockname()[1])')
EOF
  tools/ganesha.sh start "$NFS_DIR" "$nport" "$mport"
  rc=$?
  if [ $rc -ne 0 ]; then
    [ $rc -eq 77 ] || echo "warning: NFS-Ganesha did not start (exit $rc): the NFS tests will try on their own" >&2
    NFS_DIR=""
    return 0
  fi
  SKIFF_TEST_NFS_URL=$(tools/ganesha.sh url "$NFS_DIR")
  export SKIFF_TEST_NFS_URL
  echo "NFS server for the WAL tests: $SKIFF_TEST_NFS_URL"
}

stop_s3() {
  if [ -n "$S3_DIR" ]; then
    tools/s3rver.sh stop "$S3_DIR" || true
    rm -rf "$S3_DIR"
    S3_DIR=""
  fi
  unset SKIFF_TEST_S3_URL SKIFF_TEST_S3_DIR
}

start_s3() {
  S3_DIR=$ROOT/tests/.work/s3rver-$$
  rm -rf "$S3_DIR"
  mkdir -p "$S3_DIR"
  sport=$($PYTHON -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  # The emulator also stops by itself should this script die without its traps.
  SKIFF_S3RVER_OWNER_PID=$$ tools/s3rver.sh start "$S3_DIR" "$sport" test
  rc=$?
  if [ $rc -ne 0 ]; then
    SKIFF_TEST_S3_SKIP="tools/s3rver.sh start failed (exit $rc)"
    [ $rc -eq 77 ] && SKIFF_TEST_S3_SKIP="node and npm (Node >= 20) are needed for the S3 emulator"
    export SKIFF_TEST_S3_SKIP
    echo "warning: no S3 emulator: $SKIFF_TEST_S3_SKIP; the object store tests skip" >&2
    rm -rf "$S3_DIR"
    S3_DIR=""
    return 0
  fi
  SKIFF_TEST_S3_URL="s3://test?region=us-east-1&endpoint=http://127.0.0.1:$sport&path-style=true"
  SKIFF_TEST_S3_DIR=$S3_DIR/data
  AWS_ACCESS_KEY_ID=S3RVER
  AWS_SECRET_ACCESS_KEY=S3RVER
  export SKIFF_TEST_S3_URL SKIFF_TEST_S3_DIR AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
  echo "S3 emulator for the object store tests: $SKIFF_TEST_S3_URL"
}

stop_etcd() {
  if [ -n "$ETCD_DIR" ]; then
    tools/etcd.sh stop "$ETCD_DIR" || true
    rm -rf "$ETCD_DIR"
    ETCD_DIR=""
  fi
  unset SKIFF_TEST_ETCD_ENDPOINTS SKIFF_TEST_ETCD_DIR
}

start_etcd() {
  ETCD_DIR=$ROOT/tests/.work/etcd-$$
  rm -rf "$ETCD_DIR"
  mkdir -p "$ETCD_DIR"
  # The members also stop by themselves should this script die without its traps.
  SKIFF_ETCD_OWNER_PID=$$ tools/etcd.sh start "$ETCD_DIR"
  rc=$?
  if [ $rc -ne 0 ]; then
    if [ $rc -eq 77 ]; then
      SKIFF_TEST_ETCD_SKIP="etcd and curl are needed for the cluster tests (apt-get install etcd-server curl)"
      export SKIFF_TEST_ETCD_SKIP
      echo "warning: no etcd: the cluster tests skip" >&2
    else
      echo "warning: etcd did not start (exit $rc): the cluster tests will try on their own" >&2
    fi
    tools/etcd.sh stop "$ETCD_DIR" >/dev/null 2>&1 || true
    rm -rf "$ETCD_DIR"
    ETCD_DIR=""
    return 0
  fi
  SKIFF_TEST_ETCD_ENDPOINTS=$(tools/etcd.sh endpoints "$ETCD_DIR")
  SKIFF_TEST_ETCD_DIR=$ETCD_DIR
  export SKIFF_TEST_ETCD_ENDPOINTS SKIFF_TEST_ETCD_DIR
  echo "etcd for the cluster tests: $SKIFF_TEST_ETCD_ENDPOINTS"
}

stop_zones() {
  if [ -n "$ZONES_PREFIX" ]; then
    tools/zones.sh down "$ZONES_PREFIX" || true
    ZONES_PREFIX=""
  fi
  unset SKIFF_TEST_ZONES_PREFIX
}

prepare_zones() {
  # Sets left by runs that died are removed first (by their owner's PID).
  tools/zones.sh gc 2>/dev/null || true
  out=$(tools/zones.sh check 2>&1)
  rc=$?
  if [ $rc -ne 0 ]; then
    # the reason is the last line (after any apt-get output)
    SKIFF_TEST_ZONES_SKIP=$(printf '%s\n' "$out" | tail -n 1)
    [ $rc -eq 77 ] || SKIFF_TEST_ZONES_SKIP="tools/zones.sh check failed (exit $rc): $SKIFF_TEST_ZONES_SKIP"
    export SKIFF_TEST_ZONES_SKIP
    echo "warning: no zones: $SKIFF_TEST_ZONES_SKIP; the zone tests skip" >&2
    return 0
  fi
  printf '%s\n' "$out"
  ZONES_PREFIX=skz-$$
  SKIFF_TEST_ZONES_PREFIX=$ZONES_PREFIX
  export SKIFF_TEST_ZONES_PREFIX
}

trap 'stop_reference; stop_nfs; stop_s3; stop_etcd; stop_zones' EXIT
trap 'stop_reference; stop_nfs; stop_s3; stop_etcd; stop_zones; exit 130' INT TERM

phase_unit() {
  if [ ! -f "$BUILD/CTestTestfile.cmake" ]; then
    echo "no CTest files in $BUILD: run make build first" >&2
    return 1
  fi
  (cd "$BUILD" && ctest --output-on-failure --timeout 600)
}

phase_asan() {
  cmake -S . -B build-asan -G "$GENERATOR" -DSKIFF_SANITIZE=ON >/dev/null || return 1
  cmake --build build-asan || return 1
  (cd build-asan && \
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    ctest --output-on-failure --timeout 900)
}

phase_builds() {
  rc=0
  for type in Release MinSizeRel Debug; do
    dir=build-$(printf '%s' "$type" | tr '[:upper:]' '[:lower:]')
    echo "-- $type in $dir"
    if ! cmake -S . -B "$dir" -G "$GENERATOR" -DCMAKE_BUILD_TYPE="$type" >/dev/null ||
       ! cmake --build "$dir"; then
      echo "the $type build failed" >&2
      rc=1
    fi
  done
  return $rc
}

start_reference() {
  KREF_DIR=$ROOT/tests/.work/kafka-ref
  port=$($PYTHON -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  rm -rf "$KREF_DIR"
  mkdir -p "$KREF_DIR"
  tools/kafka-ref.sh start "$KREF_DIR" "$port" || { KREF_DIR=""; return 1; }
  SKIFF_TEST_EXTERNAL=127.0.0.1:$port
  export SKIFF_TEST_EXTERNAL
}

phase_integration() {
  case "${SKIFF_TEST_AGAINST:-skiffd}" in
    kafka) start_reference || return 1 ;;
    skiffd)
      if [ -z "${SKIFF_TEST_EXTERNAL:-}" ] && [ ! -x "$BUILD/skiffd" ]; then
        echo "$BUILD/skiffd is missing: run make build first" >&2
        return 1
      fi ;;
    *) echo "SKIFF_TEST_AGAINST must be skiffd or kafka" >&2; return 1 ;;
  esac
  [ -n "${SKIFF_TEST_EXTERNAL:-}" ] && echo "integration tests run against the external broker $SKIFF_TEST_EXTERNAL"
  # Client programs first: a first Maven/npm download must not count against a test's timeout.
  t=$(now)
  $PYTHON tests/integration/clients/ktest.py || return 1
  echo "client programs prepared in $(elapsed "$t")s"
  timeout_opt=""
  if $PYTHON -c 'import pytest_timeout' 2>/dev/null; then
    timeout_opt="--timeout=${SKIFF_TEST_TIMEOUT:-300}"
  else
    echo "warning: pytest-timeout is missing (tools/install-deps.sh test): no per-test timeout" >&2
  fi
  [ -z "${SKIFF_TEST_EXTERNAL:-}" ] && start_nfs
  [ -z "${SKIFF_TEST_EXTERNAL:-}" ] && start_s3
  [ -z "${SKIFF_TEST_EXTERNAL:-}" ] && start_etcd
  [ -z "${SKIFF_TEST_EXTERNAL:-}" ] && prepare_zones
  # shellcheck disable=SC2086
  SKIFF_BUILD=$BUILD $PYTHON -m pytest -v -rs -p no:cacheprovider --durations=15 $timeout_opt \
    tests/integration ${SKIFF_PYTEST_ARGS:-}
  rc=$?
  stop_nfs
  stop_s3
  stop_etcd
  stop_zones
  stop_reference
  if [ $rc -eq 5 ]; then
    echo "pytest selected no test"
    return 3
  fi
  return $rc
}

T0=$(now)
for phase in $PHASES; do
  case "$phase" in
    unit|asan|builds|integration) ;;
    *) echo "unknown phase '$phase' (known: unit asan builds integration)" >&2
       record "$phase" FAIL 0 "unknown phase"; continue ;;
  esac
  banner "$phase"
  t=$(now)
  "phase_$phase"
  rc=$?
  case $rc in
    0) record "$phase" PASS "$(elapsed "$t")" ;;
    3) record "$phase" SKIP "$(elapsed "$t")" "nothing to run" ;;
    *) record "$phase" FAIL "$(elapsed "$t")" "exit $rc" ;;
  esac
done

banner "summary ($(elapsed "$T0")s)"
printf '%s' "$SUMMARY"
echo "phases: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
