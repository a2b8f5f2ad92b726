#!/bin/sh
# Fuzzes the request decoder (`make fuzz`): builds build-fuzz with clang and
# libFuzzer, then runs fuzz_request for FUZZ_SECONDS (default 60) over a
# scratch copy of tests/fuzz/corpus, so the committed corpus only changes
# when someone copies inputs back on purpose. Inputs that break an
# invariant are written to build-fuzz/artifacts/ and fail the run.
#
# Environment: FUZZ_SECONDS, FUZZ_BUILD (default build-fuzz), FUZZ_ARGS
# (extra libFuzzer flags, e.g. "-jobs=2 -workers=2"), FUZZ_TARGET (default
# fuzz_request; fuzz_scram fuzzes the SCRAM parsing, from an empty corpus).
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${FUZZ_BUILD:-$root/build-fuzz}
seconds=${FUZZ_SECONDS:-60}

command -v clang >/dev/null 2>&1 || { echo "fuzz: clang not found (make test-deps)" >&2; exit 1; }
if command -v ninja >/dev/null 2>&1; then gen=Ninja; else gen="Unix Makefiles"; fi

cmake -S "$root" -B "$build" -G "$gen" -DCMAKE_C_COMPILER=clang -DSKIFF_FUZZ=ON \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
target=${FUZZ_TARGET:-fuzz_request}
cmake --build "$build" --target "$target"

work=$(mktemp -d "${TMPDIR:-/tmp}/skiff-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
mkdir -p "$work/corpus" "$build/artifacts"
if [ "$target" = fuzz_request ] && [ -d "$root/tests/fuzz/corpus" ]; then
  find "$root/tests/fuzz/corpus" -maxdepth 1 -type f -name '*.bin' -exec cp {} "$work/corpus/" \;
fi
echo "fuzz: $(ls "$work/corpus" | wc -l) seed inputs, ${seconds}s"

# shellcheck disable=SC2086
"$build/tests/fuzz/$target" -max_total_time="$seconds" -max_len=65536 \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/" ${FUZZ_ARGS:-} "$work/corpus"
