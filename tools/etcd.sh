#!/bin/bash
# The etcd of Skiff's tests: a 3-member etcd cluster (Debian's etcd-server 3.4) on
# 127.0.0.1, on free ports, with fast elections (heartbeat 100 ms, election 500 ms).
#
#   tools/etcd.sh start DIR             start members 1..3 with data in DIR, wait until
#                                       every member answers and the cluster has a leader
#   tools/etcd.sh stop DIR              stop the members started from DIR (by their PIDs)
#   tools/etcd.sh endpoints DIR         print http://127.0.0.1:PORT,... (members 1..3)
#   tools/etcd.sh endpoint DIR I        print member I's client URL
#   tools/etcd.sh leader DIR            print the index (1..3) of the current leader
#   tools/etcd.sh kill DIR I            SIGKILL member I (a crash)
#   tools/etcd.sh stop-member DIR I     SIGSTOP member I (a hung process)
#   tools/etcd.sh cont-member DIR I     SIGCONT member I
#   tools/etcd.sh start-member DIR I    start member I again on its data and ports, wait
#                                       until it answers
#
# DIR keeps ports (six numbers: client and peer port of each member), mI.pid, mI.log
# and mI.etcd (the data). Signals go only to PIDs recorded in DIR whose command line
# names DIR's data directory, so a recycled PID is never hit. With
# SKIFF_ETCD_OWNER_PID set at start, a watchdog stops the members once that process
# has exited (a test that crashed before stopping them).
# Exit status: 0 done, 1 failure, 2 usage, 77 etcd not installed (callers skip).
set -eu

ELECTION=(--heartbeat-interval 100 --election-timeout 500)

die() { echo "etcd.sh: $*" >&2; exit 1; }

need_etcd() {
  if ! command -v etcd >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then
    echo "etcd.sh: etcd and curl are needed (apt-get install etcd-server curl)" >&2
    exit 77
  fi
}

abs_dir() {
  [ -d "$1" ] || die "no such directory: $1"
  (cd "$1" && pwd)
}

check_index() {
  case "$1" in
    1 | 2 | 3) ;;
    *) die "member index must be 1, 2 or 3 (got '$1')" ;;
  esac
}

# Every local TCP port in any state, one a line, so that a new member never
# collides with a listener or with a connection's own port.
used_ports() {
  local hex
  for hex in $(awk 'FNR > 1 { split($2, a, ":"); print a[2] }' /proc/net/tcp /proc/net/tcp6 2>/dev/null); do
    echo $((16#$hex))
  done | sort -un
}

# Six distinct free ports below the usual ephemeral range (32768+), where
# outgoing connections would otherwise take them between our pick and etcd's bind.
pick_ports() {
  local used picked=() p n
  used=$(used_ports)
  while [ ${#picked[@]} -lt 6 ]; do
    p=$((20000 + RANDOM % 12000))
    if grep -qx "$p" <<<"$used"; then continue; fi
    n=0
    for q in "${picked[@]}"; do [ "$q" = "$p" ] && n=1; done
    [ $n = 0 ] && picked+=("$p")
  done
  echo "${picked[*]}"
}

load_ports() {
  [ -f "$1/ports" ] || die "no cluster was started in $1"
  read -r -a PORTS <"$1/ports"
}

client_port() { echo "${PORTS[$((($1 - 1) * 2))]}"; }
peer_port() { echo "${PORTS[$((($1 - 1) * 2 + 1))]}"; }

# The PID of member $2 of cluster $1, only if that process is alive and is the
# etcd we started on that data directory.
member_pid() {
  local pidf=$1/m$2.pid pid
  [ -f "$pidf" ] || return 1
  pid=$(cat "$pidf")
  [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "--data-dir $1/m$2.etcd " || return 1
  echo "$pid"
}

# Whether the process launched for member $2 still runs. Unlike member_pid it
# does not look at the command line, which is the shell's until exec.
launched_alive() {
  local pid
  pid=$(cat "$1/m$2.pid" 2>/dev/null) || return 1
  [ -r "/proc/$pid/stat" ] && ! awk '{ exit $3 == "Z" ? 0 : 1 }' "/proc/$pid/stat" 2>/dev/null
}

launch_member() {
  local dir=$1 i=$2 cluster="" j
  for j in 1 2 3; do
    cluster="${cluster:+$cluster,}m$j=http://127.0.0.1:$(peer_port "$j")"
  done
  # The initial-cluster flags only matter on the first start; a restart reads
  # the membership from the data directory.
  etcd --name "m$i" --data-dir "$dir/m$i.etcd" \
    --listen-client-urls "http://127.0.0.1:$(client_port "$i")" \
    --advertise-client-urls "http://127.0.0.1:$(client_port "$i")" \
    --listen-peer-urls "http://127.0.0.1:$(peer_port "$i")" \
    --initial-advertise-peer-urls "http://127.0.0.1:$(peer_port "$i")" \
    --initial-cluster "$cluster" --initial-cluster-state new \
    --initial-cluster-token "skiff-test-$$" "${ELECTION[@]}" \
    --log-level warn </dev/null >>"$dir/m$i.log" 2>&1 &
  echo $! >"$dir/m$i.pid"
}

healthy() {
  curl -s -m 1 "http://127.0.0.1:$(client_port "$1")/health" 2>/dev/null | grep -q '"health":"true"'
}

# Waits up to 20 s until members $2... answer /health (which needs a leader).
wait_healthy() {
  local dir=$1 n i ok
  shift
  for n in $(seq 200); do
    ok=1
    for i in "$@"; do
      if ! launched_alive "$dir" "$i"; then
        echo "etcd.sh: member $i exited during start-up:" >&2
        tail -n 20 "$dir/m$i.log" >&2
        return 1
      fi
      healthy "$i" || ok=0
    done
    [ $ok = 1 ] && return 0
    sleep 0.1
  done
  echo "etcd.sh: members $* not healthy after 20 s (logs in $dir)" >&2
  return 1
}

start_watchdog() {
  local dir=$1 owner=$2 self
  self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
  (
    while kill -0 "$owner" 2>/dev/null; do sleep 1; done
    SKIFF_ETCD_WATCHDOG=1 "$self" stop "$dir"
  ) </dev/null >/dev/null 2>&1 &
  echo $! >"$dir/watchdog.pid"
}

kill_members() {
  local dir=$1 sig=$2 i pid
  for i in 1 2 3; do
    if pid=$(member_pid "$dir" "$i"); then
      kill -CONT "$pid" 2>/dev/null || true
      kill "-$sig" "$pid" 2>/dev/null || true
    fi
  done
}

cmd_start() {
  [ $# -eq 1 ] || die "usage: $0 start DIR"
  need_etcd
  mkdir -p "$1"
  local dir attempt i
  dir=$(abs_dir "$1")
  for i in 1 2 3; do
    if member_pid "$dir" "$i" >/dev/null; then die "a cluster is already running from $dir"; fi
  done
  # A port taken between the pick and etcd's bind fails the start: pick again.
  for attempt in 1 2 3; do
    rm -rf "$dir"/m?.etcd "$dir"/m?.log
    pick_ports >"$dir/ports"
    load_ports "$dir"
    for i in 1 2 3; do launch_member "$dir" "$i"; done
    if wait_healthy "$dir" 1 2 3; then
      if [ -n "${SKIFF_ETCD_OWNER_PID:-}" ]; then start_watchdog "$dir" "$SKIFF_ETCD_OWNER_PID"; fi
      echo "etcd cluster in $dir: $(cmd_endpoints "$dir")"
      return 0
    fi
    kill_members "$dir" KILL
    echo "etcd.sh: start attempt $attempt failed" >&2
  done
  die "the cluster did not start (logs in $dir)"
}

cmd_stop() {
  [ $# -eq 1 ] || die "usage: $0 stop DIR"
  [ -d "$1" ] || return 0
  local dir i pid n wpid
  dir=$(abs_dir "$1")
  kill_members "$dir" TERM
  for n in $(seq 50); do
    pid=""
    for i in 1 2 3; do member_pid "$dir" "$i" >/dev/null && pid=1; done
    [ -z "$pid" ] && break
    sleep 0.1
  done
  kill_members "$dir" KILL
  rm -f "$dir"/m?.pid
  if [ -z "${SKIFF_ETCD_WATCHDOG:-}" ] && [ -f "$dir/watchdog.pid" ]; then
    wpid=$(cat "$dir/watchdog.pid")
    if [ -r "/proc/$wpid/cmdline" ] && tr '\0' ' ' <"/proc/$wpid/cmdline" | grep -q "etcd.sh start"; then
      kill "$wpid" 2>/dev/null || true
    fi
  fi
  rm -f "$dir/watchdog.pid"
}

cmd_endpoints() {
  load_ports "$1"
  echo "http://127.0.0.1:$(client_port 1),http://127.0.0.1:$(client_port 2),http://127.0.0.1:$(client_port 3)"
}

cmd_leader() {
  [ $# -eq 1 ] || die "usage: $0 leader DIR"
  local dir i out id lead
  dir=$(abs_dir "$1")
  load_ports "$dir"
  for i in 1 2 3; do
    member_pid "$dir" "$i" >/dev/null || continue
    out=$(curl -s -m 1 -X POST -d '{}' "http://127.0.0.1:$(client_port "$i")/v3/maintenance/status" 2>/dev/null) ||
      continue
    id=$(grep -o '"member_id":"[0-9]*"' <<<"$out" | grep -o '[0-9]*' || true)
    lead=$(grep -o '"leader":"[0-9]*"' <<<"$out" | grep -o '[0-9]*' || true)
    if [ -n "$id" ] && [ "$id" = "$lead" ]; then
      echo "$i"
      return 0
    fi
  done
  echo "etcd.sh: no member of $dir is the leader now" >&2
  return 1
}

signal_member() {
  local dir pid
  dir=$(abs_dir "$1")
  check_index "$2"
  pid=$(member_pid "$dir" "$2") || die "member $2 of $dir is not running"
  kill "-$3" "$pid"
}

cmd_start_member() {
  [ $# -eq 2 ] || die "usage: $0 start-member DIR I"
  local dir
  dir=$(abs_dir "$1")
  check_index "$2"
  load_ports "$dir"
  if member_pid "$dir" "$2" >/dev/null; then die "member $2 of $dir is running"; fi
  launch_member "$dir" "$2"
  wait_healthy "$dir" "$2" || exit 1
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  start) cmd_start "$@" ;;
  stop) cmd_stop "$@" ;;
  endpoints) [ $# -eq 1 ] || die "usage: $0 endpoints DIR"; cmd_endpoints "$(abs_dir "$1")" ;;
  endpoint)
    [ $# -eq 2 ] || die "usage: $0 endpoint DIR I"
    check_index "$2"; load_ports "$(abs_dir "$1")"; echo "http://127.0.0.1:$(client_port "$2")" ;;
  leader) cmd_leader "$@" ;;
  kill) [ $# -eq 2 ] || die "usage: $0 kill DIR I"; signal_member "$1" "$2" KILL ;;
  stop-member) [ $# -eq 2 ] || die "usage: $0 stop-member DIR I"; signal_member "$1" "$2" STOP ;;
  cont-member) [ $# -eq 2 ] || die "usage: $0 cont-member DIR I"; signal_member "$1" "$2" CONT ;;
  start-member) cmd_start_member "$@" ;;
  *)
    echo "usage: $0 start|stop|endpoints|leader DIR | endpoint|kill|stop-member|cont-member|start-member DIR I" >&2
    exit 2
    ;;
esac
