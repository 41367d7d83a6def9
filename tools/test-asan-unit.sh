#!/usr/bin/env bash
# The unit tests built and run under ASan + UBSan (-DOOMSNAP_SANITIZE=ON, gcc):
# liboomsnap and the tests instrumented, any report fails the run (UBSan does
# not recover). Build dir: $OOMSNAP_ASAN_BUILD (default build-asan). Extra
# arguments go to the test binary (e.g. --gtest_filter=...). The integration
# tests (root, BPF, fixtures under real load) are not built here.
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/ccache-env.sh
BUILD=${OOMSNAP_ASAN_BUILD:-build-asan}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOOMSNAP_SANITIZE=ON >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target unit_tests
# LeakSanitizer at exit; UBSan halts on its first report, ASan always does.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
"$BUILD/tests/unit_tests" "$@"
echo "asan-unit: unit tests passed under ASan + UBSan"
