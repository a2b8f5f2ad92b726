#!/bin/sh
# test_generated: the generated code in proto/ must be exactly what tools/kgen.py
# makes of its inputs, so that a spec or generator change that was not regenerated
# and committed fails CI.
#
#   tests/check_generated.sh PYTHON SOURCE_DIR KAFKA_SPECS_DIR
#
# Regenerates proto/krpc.{h,c} from proto/rpc, and proto/kmsg.{h,c} from
# KAFKA_SPECS_DIR (at the Kafka version kmsg.h's banner names; skipped when the
# directory is absent), into a temporary directory, then compares each file with
# the copy in SOURCE_DIR and, in a git checkout, with the copy in git's index (the
# build regenerates the working copy by itself, so only the index tells whether the
# regenerated file was committed). Exit 0 when all agree, 1 on any difference.
set -u
PYTHON=$1
SRC=$2
SPECS=$3

TMP=$(mktemp -d "${TMPDIR:-/tmp}/skiff-gen.XXXXXX") || exit 2
trap 'rm -rf "$TMP"' EXIT INT TERM
FAILED=0

# compare NAME: proto/NAME against $TMP/NAME
compare() {
  if ! cmp -s "$TMP/$1" "$SRC/proto/$1"; then
    echo "proto/$1 differs from what tools/kgen.py generates:"
    diff -u "$SRC/proto/$1" "$TMP/$1" | head -40
    FAILED=1
  fi
  if git -C "$SRC" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    if ! git -C "$SRC" show ":proto/$1" 2>/dev/null | cmp -s "$TMP/$1" -; then
      echo "proto/$1 in git's index is not what tools/kgen.py generates:" \
           "commit the regenerated file"
      FAILED=1
    fi
  fi
}

if ! "$PYTHON" "$SRC/tools/kgen.py" --rpc "$SRC/proto/rpc" --out "$TMP"; then
  echo "kgen --rpc failed"
  exit 1
fi
compare krpc.h
compare krpc.c

if [ -d "$SPECS" ]; then
  VERSION=$(sed -n 's/.*Apache Kafka \([0-9][0-9.]*\) message specs.*/\1/p' \
              "$SRC/proto/kmsg.h" | head -1)
  if [ -z "$VERSION" ]; then
    echo "proto/kmsg.h does not name the Kafka version of its specs"
    exit 1
  fi
  if ! "$PYTHON" "$SRC/tools/kgen.py" --specs "$SPECS" --spec-version "$VERSION" \
       --out "$TMP"; then
    echo "kgen --specs failed"
    exit 1
  fi
  compare kmsg.h
  compare kmsg.c
else
  echo "kmsg not checked: no Kafka specs in $SPECS"
fi

[ "$FAILED" = 0 ] && echo "generated code up to date"
exit "$FAILED"
