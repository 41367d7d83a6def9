#!/usr/bin/env bash
# Configures and builds oomsnap into $OOMSNAP_BUILD (default ./build).
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/ccache-env.sh
BUILD=${OOMSNAP_BUILD:-build}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j"$(nproc)" "$@"
