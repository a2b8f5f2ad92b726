#!/bin/sh
# The S3 emulator of Skiff's tests: @20minutes/s3rver 4.0.4 (it verifies SigV4).
#
#   tools/s3rver.sh start DIR PORT [BUCKET...]   start on 127.0.0.1:PORT, data in DIR/data,
#                                               create the buckets (default: "test"),
#                                               wait until it accepts requests
#   tools/s3rver.sh stop DIR                    stop the server started in DIR (by its PID)
#   tools/s3rver.sh install                     only install the package into the cache
#
# Credentials: access key S3RVER, secret S3RVER; path-style URLs; region anything.
# The package is installed with npm once into $SKIFF_S3RVER_CACHE (default
# ~/.cache/skiff/s3rver-4.0.4); later runs need no network.
# DIR keeps s3rver.pid and s3rver.log. With SKIFF_S3RVER_OWNER_PID set, the
# server also stops once that process has exited.
# Exit status: 0 done, 1 failure, 77 node or npm unavailable (callers skip).
set -eu

VERSION=4.0.4
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${SKIFF_S3RVER_CACHE:-$HOME/.cache/skiff/s3rver-$VERSION}

die() { echo "s3rver.sh: $*" >&2; exit 1; }

need_node() {
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "s3rver.sh: node and npm are needed for the S3 emulator (apt-get install nodejs npm)" >&2
    exit 77
  fi
  major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  if [ "$major" -lt 20 ]; then
    echo "s3rver.sh: @20minutes/s3rver@$VERSION needs Node >= 20 (found $(node --version))" >&2
    exit 77
  fi
}

install() {
  need_node
  [ -f "$CACHE/node_modules/@20minutes/s3rver/package.json" ] && return 0
  mkdir -p "$CACHE"
  # Parallel test runs may install at once: one does it, the others wait.
  (
    flock 9
    if [ ! -f "$CACHE/node_modules/@20minutes/s3rver/package.json" ]; then
      cp "$HERE/s3rver/package.json" "$CACHE/package.json"
      echo "s3rver.sh: installing @20minutes/s3rver@$VERSION into $CACHE" >&2
      (cd "$CACHE" && npm install --omit=dev --no-audit --no-fund --no-package-lock \
        --prefer-offline --loglevel=error >"$CACHE/npm.log" 2>&1) ||
        { cat "$CACHE/npm.log" >&2; die "npm install failed (log: $CACHE/npm.log)"; }
    fi
  ) 9>"$CACHE/.install.lock"
}

# s3rver encrypts list continuation tokens with DES, which OpenSSL 3 keeps in its
# legacy provider: without it every truncated listing fails (500).
server() { # DATADIR PORT BUCKET...
  NODE_PATH="$CACHE/node_modules"
  export NODE_PATH
  exec node --openssl-legacy-provider "$HERE/s3rver/server.js" "$@"
}

# shellcheck disable=SC2034 # read by tools/svc.sh
SVC=s3rver
# shellcheck source=tools/svc.sh
. "$HERE/svc.sh"
svc_main "$@"
