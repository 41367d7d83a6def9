#!/usr/bin/env bash
# The main job: the oomsnap agent (`oomsnap watch`) with its defaults —
# every memory cgroup on this machine watched, records as JSON lines on stdout
# and in /var/log/oomsnap/oomsnap.jsonl, logs on stderr. Ctrl-C stops it.
#
#   tools/run.sh [--demo] [oomsnap watch options, e.g. --config FILE]
#
# --demo also starts, once the agent is ready, a Go program leaking 20 MiB/s
# in a 256 MiB memory cgroup (created below this shell's own memcg and removed
# on exit), so a complete incident — snapshot, then the OOM kill — appears
# within about 15 s.
#
# stdout carries the agent's records and nothing else (a log pipeline reads it):
# every setup and build step below writes to stderr, whatever it prints.
set -euo pipefail
cd "$(dirname "$0")/.."
export OOMSNAP_CACHE=${OOMSNAP_CACHE:-/var/cache/oomsnap}
[ "$(id -u)" = 0 ] || { echo "tools/run.sh: run as root (BPF, cgroups, reading other processes)" >&2; exit 1; }
demo=0
if [ "${1:-}" = --demo ]; then demo=1; shift; fi
{
  tools/setup.sh
  tools/build.sh --target oomsnap >/dev/null
} >&2
BUILD=${OOMSNAP_BUILD:-build}
if [ $demo = 0 ]; then exec "$BUILD/oomsnap" watch "$@"; fi

{
  tools/fetch-go-toolchains.sh 1.26
  tools/build-go-fixtures.sh 1.26 >/dev/null
} >&2
FIX=$OOMSNAP_CACHE/fixtures/go/1.26/default/heapfixture
MOUNT=/sys/fs/cgroup/memory
[ -d "$MOUNT" ] || { echo "tools/run.sh --demo: needs the cgroup v1 memory controller at $MOUNT" >&2; exit 1; }
OWN=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
BOX=$MOUNT${OWN%/}/oomsnap-demo-$$
log=$(mktemp)
"$BUILD/oomsnap" watch "$@" 2> >(tee "$log" >&2) &
agent=$!
cleanup() {
  kill -TERM "$agent" 2>/dev/null || true
  wait "$agent" 2>/dev/null || true
  for p in $(cat "$BOX/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
  for _ in $(seq 50); do rmdir "$BOX" 2>/dev/null && break; sleep 0.1; done
  rm -f "$log"
}
trap cleanup EXIT
trap 'exit 0' INT TERM
for _ in $(seq 200); do grep -q "ready:" "$log" && break; sleep 0.05; done
mkdir "$BOX"
echo $((256 << 20)) > "$BOX/memory.limit_in_bytes"
echo "# demo: a Go program leaking 20 MiB/s in $BOX (limit 256 MiB)" >&2
sh -c 'echo 0 > "$0/cgroup.procs" && exec "$1" -leak-mb-per-s 20 > /dev/null' "$BOX" "$FIX" &
wait "$agent"
