#!/usr/bin/env bash
# The main job. Until the agent lands: a one-shot demo that builds a small Go
# program, starts it, and snapshots its heap from outside with oomsnap.
set -euo pipefail
cd "$(dirname "$0")/.."
export OOMSNAP_CACHE=${OOMSNAP_CACHE:-/var/cache/oomsnap}
[ "$(id -u)" = 0 ] || { echo "tools/run.sh: run as root (oomsnap reads another process's memory)" >&2; exit 1; }
tools/setup.sh
tools/fetch-go-toolchains.sh 1.26
tools/build-go-fixtures.sh 1.26
tools/build.sh --target oomsnap
BUILD=${OOMSNAP_BUILD:-build}
FIX=$OOMSNAP_CACHE/fixtures/go/1.26/default/heapfixture
out=$(mktemp -d)
"$FIX" > "$out/ready" &
fixture=$!
trap 'kill $fixture 2>/dev/null || true; rm -rf "$out"' EXIT
for _ in $(seq 100); do [ -s "$out/ready" ] && break; sleep 0.1; done
[ -s "$out/ready" ] || { echo "demo fixture did not start" >&2; exit 1; }
echo "# oomsnap snapshot --pid $fixture   (a Go 1.26 program holding known allocations)"
"$BUILD/oomsnap" snapshot --pid "$fixture" --max-entries 5
