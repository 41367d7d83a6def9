#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) into $OOMSNAP_FUZZ_BUILD and runs
# each one briefly: tools/run-fuzzers.sh [SECONDS_PER_TARGET] (CI's short run;
# tools/fuzz-long.sh is the long one). A crash, a leak or a slow input fails the
# run and leaves the reproducer in the build dir. An input is slow when it runs
# longer than $OOMSNAP_FUZZ_TIMEOUT seconds (default 10): every loop over target
# data must end on its deadline or on a local bound, and the harnesses give the
# readers deadlines of a fraction of a second. Build and run: tools/lib/fuzz-common.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/lib/fuzz-common.sh
fuzz_build
fuzz_run_all "${1:-20}" || { echo "fuzz: FAILED" >&2; exit 1; }
echo "fuzz: all targets ran without crashes, leaks or slow inputs"
