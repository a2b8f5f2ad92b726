#!/bin/sh
# The NFS server of Skiff's tests: NFS-Ganesha (VFS FSAL) on 127.0.0.1, NFSv3 over TCP.
#
#   tools/ganesha.sh start DIR [PORT [MNTPORT]]  serve DIR/export on 127.0.0.1:PORT
#                                               (default 2049) with mountd on MNTPORT
#                                               (default 20048); wait until it serves;
#                                               print the base of WAL URLs
#   tools/ganesha.sh stop DIR [-9]              stop the server started in DIR (by its PID;
#                                               SIGTERM, or SIGKILL with -9: a crash)
#   tools/ganesha.sh url DIR [SUBDIR]           print nfs://127.0.0.1/DIR/export/SUBDIR?...
#
# NFSv3 needs rpcbind only while Ganesha starts (it registers its programs through
# /run/rpcbind.sock). When no rpcbind answers there, this script starts one inside a
# private network namespace with only a loopback interface (unshare -n), so it never
# listens on a real interface, and stops it again as soon as Ganesha serves. Clients
# name both ports in the URL (nfsport, mountport) and never ask a portmapper.
# DIR keeps ganesha.conf, ganesha.log, ganesha.pid and the ports in ganesha.ports.
# Exit status: 0 done, 1 failure, 77 ganesha.nfsd, rpcbind or unshare missing (callers skip).
set -eu

die() { echo "ganesha.sh: $*" >&2; exit 1; }

need_tools() {
  for t in ganesha.nfsd rpcbind unshare ss flock; do
    if ! command -v "$t" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$t" ] && [ ! -x "/sbin/$t" ]; then
      echo "ganesha.sh: $t is missing (tools/install-deps.sh test installs nfs-ganesha," \
           "nfs-ganesha-vfs, rpcbind)" >&2
      exit 77
    fi
  done
  if [ "$(id -u)" -ne 0 ]; then
    echo "ganesha.sh: NFS-Ganesha and rpcbind need root here" >&2
    exit 77
  fi
}

# Waits up to $2 tenths of a second for PID $1 to exit; true when it did.
wait_exit() {
  i=0
  while kill -0 "$1" 2>/dev/null; do
    [ $i -lt "$2" ] || return 1
    sleep 0.1
    i=$((i + 1))
  done
  return 0
}

# kill -0 also succeeds on a zombie: the launcher of a daemon that failed.
alive() {
  [ -r "/proc/$1/stat" ] && ! awk '{ exit $3 == "Z" ? 0 : 1 }' "/proc/$1/stat" 2>/dev/null
}

rpcbind_alive() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect("/run/rpcbind.sock")' \
    2>/dev/null
}

stop_rpcbind() {
  [ -f "$1/rpcbind.pid" ] || return 0
  rpid=$(cat "$1/rpcbind.pid")
  kill "$rpid" 2>/dev/null || true
  wait_exit "$rpid" 50 || kill -9 "$rpid" 2>/dev/null || true
  rm -f "$1/rpcbind.pid"
}

url() {
  dir=$1 sub=${2:-}
  [ -f "$dir/ganesha.ports" ] || die "no server was started in $dir"
  read -r port mnt < "$dir/ganesha.ports"
  echo "nfs://127.0.0.1$dir/export${sub:+/$sub}?version=3&nfsport=$port&mountport=$mnt"
}

start() {
  [ $# -ge 1 ] || die "usage: $0 start DIR [PORT [MNTPORT]]"
  need_tools
  mkdir -p "$1"
  dir=$(cd "$1" && pwd)
  port=${2:-2049} mnt=${3:-20048}
  if [ -f "$dir/ganesha.pid" ] && kill -0 "$(cat "$dir/ganesha.pid")" 2>/dev/null; then
    die "a server started in $dir still runs (pid $(cat "$dir/ganesha.pid"))"
  fi
  mkdir -p "$dir/export" "$dir/recov"
  cat > "$dir/ganesha.conf" <<CONF
NFS_CORE_PARAM {
    Bind_Addr = 127.0.0.1;
    NFS_Port = $port;
    MNT_Port = $mnt;
    Protocols = 3;
    Enable_NLM = false;
    Enable_RQUOTA = false;
}
NFSV4 {
    Graceless = true;
    RecoveryBackend = fs;
    RecoveryRoot = $dir/recov;
}
NFS_KRB5 { Active_krb5 = false; }
EXPORT {
    Export_Id = 1;
    Path = $dir/export;
    Pseudo = /export;
    Access_Type = RW;
    Squash = No_Root_Squash;
    Protocols = 3;
    Transports = TCP;
    SecType = sys;
    FSAL { Name = VFS; }
}
LOG { Default_Log_Level = EVENT; }
CONF
  echo "$port $mnt" > "$dir/ganesha.ports"
  # Starts are serialized machine-wide: rpcbind's socket is one for all, and a
  # start must not remove another one's rpcbind while its Ganesha registers.
  # Children close the lock's descriptor, so it is released when this exits.
  exec 9>"${TMPDIR:-/tmp}/skiff-ganesha-start.lock"
  flock 9
  if ! rpcbind_alive; then
    # A stale socket left by a killed rpcbind would make the new one fail.
    rm -f /run/rpcbind.sock
    unshare -n sh -c 'ip link set lo up 2>/dev/null; exec rpcbind -f' > "$dir/rpcbind.log" 2>&1 9>&- &
    echo $! > "$dir/rpcbind.pid"
    i=0
    until rpcbind_alive; do
      i=$((i + 1))
      [ $i -lt 50 ] || { stop_rpcbind "$dir"; die "rpcbind did not start (log: $dir/rpcbind.log)"; }
      sleep 0.1
    done
  fi
  : > "$dir/ganesha.log"
  rm -f "$dir/ganesha.pidfile"
  ganesha.nfsd -F -f "$dir/ganesha.conf" -L "$dir/ganesha.log" -p "$dir/ganesha.pidfile" \
    > "$dir/ganesha.stdout" 2>&1 9>&- &
  # The daemon detaches from the process started here even with -F: its own PID
  # file names the process to stop later.
  pid=$!
  echo "$pid" > "$dir/ganesha.pid"
  i=0
  while :; do
    p=$(cat "$dir/ganesha.pidfile" 2>/dev/null || true)
    if [ -n "$p" ] && [ "$p" != "$pid" ] && alive "$p"; then
      pid=$p
      echo "$pid" > "$dir/ganesha.pid"
    fi
    if [ "$pid" = "$p" ] && grep -q 'NFS SERVER INITIALIZED' "$dir/ganesha.log" 2>/dev/null &&
       ss -ltn "sport = :$port" | grep -q LISTEN; then
      break
    fi
    if ! alive "$pid" && { [ -z "$p" ] || ! alive "$p"; }; then
      stop_rpcbind "$dir"
      rm -f "$dir/ganesha.pid"
      grep -E 'CRIT|MAJ|FATAL' "$dir/ganesha.log" | grep -vi dbus >&2 || true
      die "ganesha.nfsd exited during start-up (log: $dir/ganesha.log)"
    fi
    i=$((i + 1))
    if [ $i -ge 300 ]; then
      kill -9 "$pid" 2>/dev/null || true
      stop_rpcbind "$dir"
      rm -f "$dir/ganesha.pid"
      die "ganesha.nfsd does not serve on port $port after 30 s (log: $dir/ganesha.log)"
    fi
    sleep 0.1
  done
  # Registered: rpcbind has done its part.
  stop_rpcbind "$dir"
  echo "ganesha pid $pid serves $dir/export on 127.0.0.1:$port (mountd $mnt)"
  url "$dir"
}

stop() {
  [ $# -ge 1 ] || die "usage: $0 stop DIR [-9]"
  [ -d "$1" ] || return 0
  dir=$(cd "$1" && pwd)
  sig=TERM
  [ "${2:-}" = "-9" ] && sig=KILL
  if [ -f "$dir/ganesha.pid" ]; then
    pid=$(cat "$dir/ganesha.pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill -s "$sig" "$pid" 2>/dev/null || true
      if ! wait_exit "$pid" 150; then
        echo "ganesha.sh: ganesha.nfsd (pid $pid) ignored SIGTERM for 15 s: SIGKILL" >&2
        kill -9 "$pid" 2>/dev/null || true
        wait_exit "$pid" 50 || die "ganesha.nfsd (pid $pid) does not exit"
      fi
    fi
    rm -f "$dir/ganesha.pid"
  fi
  stop_rpcbind "$dir"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  start) start "$@" ;;
  stop) stop "$@" ;;
  url) [ $# -ge 1 ] || die "usage: $0 url DIR [SUBDIR]"; url "$(cd "$1" && pwd)" "${2:-}" ;;
  *) echo "usage: $0 start DIR [PORT [MNTPORT]] | stop DIR [-9] | url DIR [SUBDIR]" >&2; exit 2 ;;
esac
