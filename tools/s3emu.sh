#!/bin/sh
# The S3 emulator of the production-shaped benchmark target: tools/s3emu (Go, standard
# library only; it verifies SigV4 signatures and takes requests concurrently).
#
#   tools/s3emu.sh start DIR PORT [BUCKET...]   start on 127.0.0.1:PORT, data in DIR/data,
#                                              create the buckets (default: "test"),
#                                              wait until it accepts requests
#   tools/s3emu.sh stop DIR                    stop the server started in DIR (by its PID)
#   tools/s3emu.sh install                     only build the binary into the cache
#
# The same interface and credentials as tools/s3rver.sh (access key S3RVER, secret
# S3RVER; SKIFF_S3EMU_SECRET overrides the secret the server accepts, for tests);
# path-style URLs; region anything. Built with `go build` once into $SKIFF_S3EMU_CACHE
# (default ~/.cache/skiff/s3emu-<hash of the source>); later runs need no network.
# DIR keeps s3emu.pid and s3emu.log. With SKIFF_S3RVER_OWNER_PID set, the server also
# stops once that process has exited.
# Exit status: 0 done, 1 failure, 77 no Go toolchain (callers skip).
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$HERE/s3emu

die() { echo "s3emu.sh: $*" >&2; exit 1; }

binary() {
  sum=$(cat "$SRC/go.mod" "$SRC/main.go" | sha256sum | cut -c1-16)
  echo "${SKIFF_S3EMU_CACHE:-$HOME/.cache/skiff/s3emu-$sum}/s3emu"
}

install() {
  bin=$(binary)
  [ -x "$bin" ] && return 0
  # Debian's golang-go, or a Go toolchain in its usual place outside PATH.
  command -v go >/dev/null 2>&1 || PATH=$PATH:/usr/local/go/bin
  if ! command -v go >/dev/null 2>&1; then
    echo "s3emu.sh: go is needed to build the S3 emulator (apt-get install golang-go)" >&2
    exit 77
  fi
  mkdir -p "$(dirname "$bin")"
  # Parallel runs may build at once: one does it, the others wait.
  (
    flock 9
    if [ ! -x "$bin" ]; then
      echo "s3emu.sh: building $bin" >&2
      (cd "$SRC" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -o "$bin.tmp" .) ||
        die "go build failed"
      mv "$bin.tmp" "$bin"
    fi
  ) 9>"$(dirname "$bin")/.build.lock"
}

server() { # DATADIR PORT BUCKET...
  d=$1 port=$2
  shift 2
  exec "$(binary)" -dir "$d" -addr "127.0.0.1:$port" -secret "${SKIFF_S3EMU_SECRET:-S3RVER}" "$@"
}

# shellcheck disable=SC2034 # read by tools/svc.sh
SVC=s3emu
# shellcheck source=tools/svc.sh
. "$HERE/svc.sh"
svc_main "$@"
