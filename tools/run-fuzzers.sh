#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) into $OOMSNAP_FUZZ_BUILD and runs
# each one briefly: tools/run-fuzzers.sh [SECONDS_PER_TARGET]. A crash fails the run
# and leaves the reproducer in the build dir.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-20}
BUILD=${OOMSNAP_FUZZ_BUILD:-build-fuzz}
CC=clang CXX=clang++ cmake -S . -B "$BUILD" -DOOMSNAP_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target fuzzers
mkdir -p "$BUILD/fuzz-corpus"
for f in "$BUILD"/tests/fuzz/fuzz_*; do
  [ -x "$f" ] || continue
  name=$(basename "$f")
  corpus="$BUILD/fuzz-corpus/$name"
  mkdir -p "$corpus"
  seeds=tests/fuzz/seeds/$name
  echo "fuzz: $name for ${SECONDS_EACH}s"
  (cd "$BUILD" && "$f" -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -print_final_stats=1 \
      "$corpus" $( [ -d "$OLDPWD/$seeds" ] && echo "$OLDPWD/$seeds" ) 2>&1 | tail -3)
done
echo "fuzz: all targets ran without crashes"
