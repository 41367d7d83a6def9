#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine (root): installs packages,
# fetches the Go toolchains, the CPython root file systems and the Node.js
# binaries and builds the
# fixtures into a cache outside the checkout ($OOMSNAP_CACHE, default
# /var/cache/oomsnap), builds, runs ctest, the unit tests under ASan + UBSan
# (tools/test-asan-unit.sh), then runs each fuzz target briefly.
# tools/test.sh --quick [BASE]: the unit tests and the tests of what the change
# touched, with the build and caches as they are (tools/lib/quick-tests.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --quick ]; then
  shift
  exec tools/lib/quick-tests.sh "$@"
fi
export OOMSNAP_CACHE=${OOMSNAP_CACHE:-/var/cache/oomsnap}
[ "$(id -u)" = 0 ] || { echo "tools/test.sh: run as root (tests read other processes, load BPF, create cgroups)" >&2; exit 1; }
tools/setup.sh
tools/fetch-go-toolchains.sh
tools/fetch-python-rootfs.sh
tools/fetch-node.sh
tools/build-go-fixtures.sh
tools/build-java-fixtures.sh
tools/build.sh
BUILD=${OOMSNAP_BUILD:-build}
(cd "$BUILD" && ctest --output-on-failure -j2 --timeout 900)
# The unit tests again under ASan + UBSan (own build dir; OOMSNAP_ASAN_UNIT=0 skips).
if [ "${OOMSNAP_ASAN_UNIT:-1}" != 0 ]; then
  tools/test-asan-unit.sh
fi
tools/run-fuzzers.sh "${OOMSNAP_FUZZ_SECONDS:-20}"
