#!/usr/bin/env bash
# The long fuzzing run (not in CI, which keeps tools/run-fuzzers.sh's 20 s per
# target): tools/fuzz-long.sh [SECONDS_PER_TARGET] (default 600) builds the
# fuzzers like the short run (same build dir, $OOMSNAP_FUZZ_BUILD, and the same
# corpora, which keep growing) and runs every target for that long, each to the
# end even when an earlier one failed. It ends with one summary line per target
# (execs, seconds, corpus size, crashes/leaks/timeouts/ooms) for docs/benchmarks.md and docs/testing.md, and
# exits 1 if any target found something.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/lib/fuzz-common.sh
SECONDS_EACH=${1:-600}
shift || true
fuzz_build
rc=0
out="$FUZZ_BUILD/fuzz-long${1:+-$1}.out"
fuzz_run_all "$SECONDS_EACH" "$@" | tee "$out" || rc=$?
echo "fuzz-long: summary, $(date -u +%Y-%m-%d), ${SECONDS_EACH} s per target, $(nproc) CPUs:"
grep -E '^fuzz: fuzz_[a-z0-9_]+: ' "$out"
[ "$rc" = 0 ] || { echo "fuzz-long: FAILED (reproducers in $FUZZ_BUILD)" >&2; exit 1; }
