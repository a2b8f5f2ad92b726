# bench/lib.sh: the shell the bench scripts share (sourced, never run): where the
# build is, messages, free ports, /proc readings, building the tools, and starting
# and stopping skiffd, the S3 emulator and NFS-Ganesha by their PIDs.
#
# Contract: the sourcing script sets ROOT (the repository) and BENCH_TAG (the prefix
# of its messages) first. Sourcing sets BUILD (SKIFF_BUILD, absolute), PY (the
# python with the Kafka clients), SMOKE (BENCH_SMOKE, 0 or 1) and defines the
# functions below; it starts nothing. Every start function records the PID it
# started in one variable (SKIFFD_PID, S3_DIR, NFS_DIR), and the matching stop
# function stops exactly that process and clears the variable, so that a script's
# EXIT trap can call every stop function whatever happened (bench_stop_all).
# fail() exits 1; the start functions of the emulator and of Ganesha return 77
# when they cannot run here (callers skip their section).

BUILD=${SKIFF_BUILD:-$ROOT/build}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
SMOKE=${BENCH_SMOKE:-0}
SKIFFD_PID=""
S3_DIR=""
NFS_DIR=""

say() { echo "$BENCH_TAG: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }

free_port() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

port_open() {
  "$PY" -c 'import socket,sys; socket.create_connection(("127.0.0.1",int(sys.argv[1])),timeout=0.5).close()' "$1" 2>/dev/null
}

cpu_mark() { # PID -> "wall_ns cpu_ticks" (utime + stime of every thread of that process)
  echo "$(date +%s%N) $(awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0)"
}

machine_ticks() { # -> "busy total": the machine's CPU ticks (/proc/stat; idle and iowait not busy)
  awk '$1 == "cpu" { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t; exit }' /proc/stat
}

status_kib() { # PID FIELD -> kB value of FIELD in /proc/PID/status, or empty
  awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status" 2>/dev/null || true
}

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

dirty_kib() { awk '/^(Dirty|Writeback):/ { s += $2 } END { print s + 0 }' /proc/meminfo; }

# The value of metric NAME (an unlabelled series) on the metrics listener of a
# skiffd at 127.0.0.1:PORT, as an integer; 0 when absent.
skiffd_metric() { # PORT NAME
  "$PY" - "$1" "$2" <<'EOF'
import sys, urllib.request
port, name = sys.argv[1:3]
v = 0
for ln in urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=10).read().decode().splitlines():
    if ln.startswith(name + " "):
        v = float(ln.split()[1])
print("%d" % v)
EOF
}

bench_build() { # LOG TARGET... : configure when needed, build TARGETs (unless BENCH_NOBUILD)
  [ -z "${BENCH_NOBUILD:-}" ] || return 0
  log=$1
  shift
  if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    gen=$(command -v ninja >/dev/null 2>&1 && echo Ninja || echo "Unix Makefiles")
    cmake -S "$ROOT" -B "$BUILD" -G "$gen" > "$log" 2>&1 \
      || { tail -30 "$log" >&2; fail "cmake configure"; }
  fi
  cmake --build "$BUILD" --target "$@" >> "$log" 2>&1 \
    || { tail -30 "$log" >&2; fail "build of $*"; }
}

stop_pid() { # PID NAME: SIGTERM, SIGKILL after 10 s, reap
  [ -n "$1" ] || return 0
  if kill -0 "$1" 2>/dev/null; then
    kill -TERM "$1" 2>/dev/null || true
    i=0
    while kill -0 "$1" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    if kill -0 "$1" 2>/dev/null; then
      say "$2 (pid $1) ignored SIGTERM for 10 s: SIGKILL"
      kill -KILL "$1" 2>/dev/null || true
    fi
  fi
  wait "$1" 2>/dev/null || true
}

# Starts skiffd as node 1 listening on 127.0.0.1:PORT (PLAINTEXT) with the given
# extra arguments (data.dir among them), output appended to LOG; returns once it
# accepts connections. Sets SKIFFD_PID and BOOT.
skiffd_start() { # LOG PORT ARG...
  log=$1
  BOOT=127.0.0.1:$2
  shift 2
  "$BUILD/skiffd" --override node.id=1 --override "listeners=PLAINTEXT://$BOOT" \
      --override "advertised.listeners=PLAINTEXT://$BOOT" "$@" >> "$log" 2>&1 &
  SKIFFD_PID=$!
  port=${BOOT##*:}
  i=0
  until port_open "$port"; do
    kill -0 "$SKIFFD_PID" 2>/dev/null \
      || { tail -20 "$log" >&2; SKIFFD_PID=""; fail "skiffd exited during start-up (log: $log)"; }
    i=$((i + 1))
    [ $i -lt 300 ] || fail "skiffd does not listen on $BOOT after 30 s"
    sleep 0.1
  done
}

skiffd_stop() { stop_pid "$SKIFFD_PID" skiffd; SKIFFD_PID=""; }

skiffd_alive() { [ -n "$SKIFFD_PID" ] && kill -0 "$SKIFFD_PID" 2>/dev/null; }

# The S3 emulator on a free loopback port, data in DIR/data, buckets BUCKET...:
# tools/$S3_EMULATOR.sh, s3rver (the tests') unless the caller chose s3emu (the
# production-shaped target's, bench/README.md); sets S3_DIR, S3_PORT, S3_ENDPOINT and
# the credentials (both take the same). Returns 77 (after saying why) when it cannot
# run here; fails otherwise.
S3_EMULATOR=${S3_EMULATOR:-s3rver}
s3_start() { # DIR LOG BUCKET...
  dir=$1 log=$2
  shift 2
  S3_PORT=$(free_port)
  set +e
  SKIFF_S3RVER_OWNER_PID=$$ "$ROOT/tools/$S3_EMULATOR.sh" start "$dir" "$S3_PORT" "$@" > "$log" 2>&1
  rc=$?
  set -e
  if [ $rc -eq 77 ]; then
    say "the S3 emulator cannot run here: $(cat "$log")"
    return 77
  fi
  [ $rc -eq 0 ] || { cat "$log" >&2; fail "tools/$S3_EMULATOR.sh start (exit $rc)"; }
  S3_DIR=$dir
  S3_ENDPOINT=http://127.0.0.1:$S3_PORT
  export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
}

s3_url() { # BUCKET PREFIX -> objects.url of that prefix on the emulator
  echo "s3://$1/$2?region=us-east-1&endpoint=$S3_ENDPOINT&path-style=true"
}

s3_stop() {
  [ -z "$S3_DIR" ] || "$ROOT/tools/$S3_EMULATOR.sh" stop "$S3_DIR" > /dev/null 2>&1 || true
  S3_DIR=""
}

# NFS-Ganesha (tools/ganesha.sh) serving DIR/export on free loopback ports; sets
# NFS_DIR and NFS_BASE (the base of WAL URLs). Returns 77 when no NFS server can
# run here.
nfs_start() { # DIR LOG
  "$ROOT/tools/ganesha.sh" stop "$1" > /dev/null 2>&1 || true
  mkdir -p "$1"
  set +e
  "$ROOT/tools/ganesha.sh" start "$1" "$(free_port)" "$(free_port)" > "$2" 2>&1
  rc=$?
  set -e
  if [ $rc -eq 77 ]; then
    cat "$2" >&2
    return 77
  fi
  [ $rc -eq 0 ] || { cat "$2" >&2; fail "tools/ganesha.sh start"; }
  NFS_DIR=$1
  NFS_BASE=$("$ROOT/tools/ganesha.sh" url "$1")
}

nfs_url() { # SUBDIR -> nfs:// URL of DIR/export/SUBDIR
  echo "${NFS_BASE%%\?*}/$1?${NFS_BASE#*\?}"
}

nfs_stop() {
  [ -z "$NFS_DIR" ] || "$ROOT/tools/ganesha.sh" stop "$NFS_DIR" > /dev/null 2>&1 || true
  NFS_DIR=""
}

bench_stop_all() { skiffd_stop; s3_stop; nfs_stop; }

# Runs another bench script as a section of this one; SECTION_RC is 0 when it
# measured, 77 when it cannot run here (said so); any other exit fails this script.
run_section() { # NAME COMMAND...
  name=$1
  shift
  set +e
  "$@"
  SECTION_RC=$?
  set -e
  case $SECTION_RC in
    0) ;;
    77) say "$name section skipped: it cannot run here" ;;
    *) fail "$name section ($* exit $SECTION_RC)" ;;
  esac
}
