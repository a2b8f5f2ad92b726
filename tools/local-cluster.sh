#!/bin/bash
# A Skiff cluster on one machine, for trying it out: a 3-member etcd
# (tools/etcd.sh) and N skiffd nodes in N zones, sharing a WAL directory and
# an object directory under DIR.
#
#   tools/local-cluster.sh start DIR [N]   start etcd and nodes 1..N (default 3) on
#                                          localhost:9092.. (zones z1..zN), wait until
#                                          they serve, print the bootstrap servers
#   tools/local-cluster.sh stop DIR        SIGTERM every node (they hand their
#                                          partitions over), then stop etcd
#   tools/local-cluster.sh kill DIR I      SIGKILL node I (a crash)
#   tools/local-cluster.sh restart DIR I   start node I again (a new incarnation)
#   tools/local-cluster.sh status DIR      which nodes run, and the etcd endpoints
#
# SKIFFD (default build/skiffd) is the binary; SKIFF_BASE_PORT (default 9092) the
# first node's port. Node I logs to DIR/nI/skiffd.log. Signals go only to the PIDs
# this script recorded in DIR.
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SKIFFD=${SKIFFD:-$ROOT/build/skiffd}
BASE_PORT=${SKIFF_BASE_PORT:-9092}

die() { echo "local-cluster.sh: $*" >&2; exit 1; }
usage() { sed -n '2,18p' "$0" >&2; exit 2; }

[ $# -ge 2 ] || usage
cmd=$1
mkdir -p "$2"
DIR=$(cd "$2" && pwd)

node_pid() { cat "$DIR/n$1/pid" 2>/dev/null || true; }
alive() { local p; p=$(node_pid "$1"); [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }
count() { cat "$DIR/nodes" 2>/dev/null || echo 0; }

start_node() {
  local i=$1 port=$((BASE_PORT + $1 - 1))
  alive "$i" && return 0
  mkdir -p "$DIR/n$i"
  "$SKIFFD" --override node.id="$i" --override broker.rack="z$i" \
    --override listeners="PLAINTEXT://127.0.0.1:$port" \
    --override data.dir="$DIR/n$i" \
    --override etcd.endpoints="$("$ROOT/tools/etcd.sh" endpoints "$DIR/etcd")" \
    --override wal.url="file://$DIR/shared/wal" \
    --override objects.url="file://$DIR/shared/objects" \
    >>"$DIR/n$i/skiffd.log" 2>&1 &
  echo $! >"$DIR/n$i/pid"
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    kill -0 "$(node_pid "$i")" 2>/dev/null || die "node $i exited; see $DIR/n$i/skiffd.log"
    sleep 0.1
  done
  die "node $i does not listen on $port; see $DIR/n$i/skiffd.log"
}

bootstrap() {
  local n i out=""
  n=$(count)
  for i in $(seq "$n"); do out="$out${out:+,}127.0.0.1:$((BASE_PORT + i - 1))"; done
  echo "$out"
}

case "$cmd" in
  start)
    n=${3:-3}
    [ -x "$SKIFFD" ] || die "$SKIFFD is missing: run make first"
    mkdir -p "$DIR/etcd" "$DIR/shared"
    [ -f "$DIR/etcd/ports" ] && "$ROOT/tools/etcd.sh" stop "$DIR/etcd" >/dev/null 2>&1 || true
    "$ROOT/tools/etcd.sh" start "$DIR/etcd" >/dev/null
    echo "$n" >"$DIR/nodes"
    for i in $(seq "$n"); do start_node "$i"; done
    echo "$(bootstrap)"
    ;;
  stop)
    for i in $(seq "$(count)"); do
      alive "$i" && kill -TERM "$(node_pid "$i")"
    done
    for i in $(seq "$(count)"); do
      for _ in $(seq 400); do alive "$i" || break; sleep 0.1; done
    done
    "$ROOT/tools/etcd.sh" stop "$DIR/etcd" >/dev/null 2>&1 || true
    ;;
  kill)
    [ $# -eq 3 ] || usage
    alive "$3" && kill -KILL "$(node_pid "$3")"
    ;;
  restart)
    [ $# -eq 3 ] || usage
    start_node "$3"
    ;;
  status)
    for i in $(seq "$(count)"); do
      if alive "$i"; then echo "node $i: pid $(node_pid "$i"), 127.0.0.1:$((BASE_PORT + i - 1))"
      else echo "node $i: down"; fi
    done
    echo "etcd: $("$ROOT/tools/etcd.sh" endpoints "$DIR/etcd" 2>/dev/null || echo down)"
    ;;
  *) usage ;;
esac
