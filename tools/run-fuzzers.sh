#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) into $OOMSNAP_FUZZ_BUILD and runs
# each one briefly: tools/run-fuzzers.sh [SECONDS_PER_TARGET]. A crash, a leak or a
# slow input fails the run and leaves the reproducer in the build dir. An input is
# slow when it runs longer than $OOMSNAP_FUZZ_TIMEOUT seconds (default 10): every
# loop over target data must end on its deadline or on a local bound, and the
# harnesses give the readers deadlines of a fraction of a second.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-20}
TIMEOUT_EACH=${OOMSNAP_FUZZ_TIMEOUT:-10}
BUILD=$(realpath -m "${OOMSNAP_FUZZ_BUILD:-build-fuzz}")
CC=clang CXX=clang++ cmake -S . -B "$BUILD" -DOOMSNAP_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target fuzzers
mkdir -p "$BUILD/fuzz-corpus"
for f in "$BUILD"/tests/fuzz/fuzz_*; do
  [ -x "$f" ] || continue
  name=$(basename "$f")
  corpus="$BUILD/fuzz-corpus/$name"
  mkdir -p "$corpus"
  echo "fuzz: $name for ${SECONDS_EACH}s (${TIMEOUT_EACH}s per input)"
  # Crash and timeout reproducers land in the build dir (-artifact_prefix); either exits non-zero.
  "$f" -max_total_time="$SECONDS_EACH" -timeout="$TIMEOUT_EACH" -rss_limit_mb=2048 -artifact_prefix="$BUILD/" "$corpus" \
      > "$BUILD/$name.log" 2>&1 || { tail -40 "$BUILD/$name.log"; echo "fuzz: $name FAILED" >&2; exit 1; }
  grep -E "^(Done|#[0-9]+ +DONE)" "$BUILD/$name.log" | tail -1
done
echo "fuzz: all targets ran without crashes, leaks or slow inputs"
