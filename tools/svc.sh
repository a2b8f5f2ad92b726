# shellcheck shell=sh
# tools/svc.sh: what the S3 emulator scripts (tools/s3rver.sh, tools/s3emu.sh) share,
# sourced last. The script sets SVC (its name: DIR/$SVC.pid, DIR/$SVC.log) and defines
# die, install (makes the server runnable, or exits 77) and server DATADIR PORT
# BUCKET... (execs the server in the foreground; it prints a line starting with
# "ready" once it accepts requests); svc_main "$@" then serves
#
#   start DIR PORT [BUCKET...]   start on 127.0.0.1:PORT, data in DIR/data, buckets
#                                (default "test"); wait until it is ready, at most 20 s
#   stop DIR                     stop the server started in DIR (TERM by its PID, KILL
#                                after 5 s)
#   install                      only install

svc_start() {
  [ $# -ge 2 ] || die "usage: $0 start DIR PORT [BUCKET...]"
  dir=$1 port=$2
  shift 2
  [ $# -gt 0 ] || set -- test
  install
  mkdir -p "$dir/data"
  dir=$(cd "$dir" && pwd)
  pidf=$dir/$SVC.pid log=$dir/$SVC.log
  if [ -f "$pidf" ] && kill -0 "$(cat "$pidf")" 2>/dev/null; then
    die "a server is already running from $dir (PID $(cat "$pidf"))"
  fi
  server "$dir/data" "$port" "$@" >"$log" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$pidf"
  i=0
  while [ $i -lt 200 ]; do
    grep -q "^ready" "$log" 2>/dev/null && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      cat "$log" >&2
      rm -f "$pidf"
      die "the server exited during start-up"
    fi
    sleep 0.1
    i=$((i + 1))
  done
  kill "$pid" 2>/dev/null || true
  rm -f "$pidf"
  cat "$log" >&2
  die "the server did not become ready on port $port within 20 s"
}

svc_stop() {
  [ $# -eq 1 ] || die "usage: $0 stop DIR"
  pidf=$1/$SVC.pid
  [ -f "$pidf" ] || return 0
  pid=$(cat "$pidf")
  if kill "$pid" 2>/dev/null; then
    i=0
    while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do
      sleep 0.1
      i=$((i + 1))
    done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidf"
}

svc_main() {
  cmd=${1:-}
  [ $# -gt 0 ] && shift
  case "$cmd" in
    start) svc_start "$@" ;;
    stop) svc_stop "$@" ;;
    install) install ;;
    *) echo "usage: $0 start DIR PORT [BUCKET...] | stop DIR | install" >&2; exit 2 ;;
  esac
}
