#!/usr/bin/env bash
# Benchmark driver (not a test): how long `oomsnap snapshot` takes on a Node.js
# process with a large V8 heap (issue #26: 1 GiB in under 2 s), and what it
# costs the target, next to the runtime's own v8.writeHeapSnapshot() on the
# same process: its time, and how much the target's resident memory grows
# while it runs (the reason heap snapshots OOM-kill containers).
#
# Usage: tools/bench-node-snapshot.sh [OOMSNAP_BINARY]     (default: build/oomsnap)
# Env:   BENCH_ORDERS   the fixture's Order objects (half as many Customers)
#                       (default 7000000: a heap of about 1 GiB, within the
#                       default read budget of 1 GiB)
#        BENCH_RUNS     snapshot runs per Node version (median) (default 5)
#        BENCH_NODES    official Node builds to run (default "22"; fetched by
#                       tools/fetch-node.sh: 18 20 22 24)
#        OOMSNAP_CACHE  cache root (default /var/cache/oomsnap)
# The fixture (tests/fixtures/node/heapfixture.js, with --expose-gc
# --max-old-space-size=4096 and --snapshot-on-signal) prints one JSON line
# when it has settled, then idles; on SIGUSR2 it writes its own heap
# snapshot to /tmp and prints how long that took. The target's growth is its
# peak RSS (VmHWM, reset through /proc/PID/clear_refs first) less its RSS
# before. Each oomsnap run is `oomsnap snapshot --pid PID --max-entries 20
# --budget-ms 30000`; its status must be "complete". Prints a Markdown table
# on stdout; progress goes to stderr.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${OOMSNAP_CACHE:-/var/cache/oomsnap}
OOMSNAP=${1:-$ROOT/build/oomsnap}
ORDERS=${BENCH_ORDERS:-7000000}
RUNS=${BENCH_RUNS:-5}
NODES=${BENCH_NODES:-22}
FIXTURE_DIR=$ROOT/tests/fixtures/node
READY_TIMEOUT=${BENCH_READY_TIMEOUT:-600}

die() { echo "bench-node-snapshot: error: $*" >&2; exit 1; }
log() { echo "bench-node-snapshot: $*" >&2; }
# shellcheck source=tools/lib/bench-record.sh
. "$ROOT/tools/lib/bench-record.sh"
bench_record_init node-snapshot

[ -x "$OOMSNAP" ] || die "oomsnap binary not found: $OOMSNAP (build it with tools/build.sh, or pass its path)"
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_RUNS must be a positive integer"
[[ "$ORDERS" =~ ^[0-9]+$ ]] || die "BENCH_ORDERS must be a non-negative integer"
for v in $NODES; do
  [ -x "$CACHE/node/$v/bin/node" ] || die "Node $v not found in $CACHE/node/$v (run tools/fetch-node.sh)"
done
[ "$(id -u)" = 0 ] || die "resetting the target's peak RSS (/proc/PID/clear_refs) needs root"

# shellcheck source=tools/lib/bench-common.sh
source "$ROOT/tools/lib/bench-common.sh"
bench_init bench-node-snapshot

kib() { awk -v k="$2" '$1 == k":" { print $2 }' "/proc/$1/status"; }
# growth_mib PID CMD...: runs CMD; prints how far the target's RSS peaked
# above where it was before (MiB).
growth_mib() {
  local pid=$1 before peak
  shift
  echo 5 > "/proc/$pid/clear_refs"
  before=$(kib "$pid" VmRSS)
  "$@"
  peak=$(kib "$pid" VmHWM)
  awk -v a="$peak" -v b="$before" 'BEGIN { printf "%.1f\n", (a > b ? a - b : 0) / 1024 }'
}

# run_snapshot JSON: one oomsnap snapshot of the fixture into JSON.
run_snapshot() { "$OOMSNAP" snapshot --pid "$FIXTURE_PID" --max-entries 20 --budget-ms 30000 >"$1" 2>"$TMP/err"; }

rows=()
for v in $NODES; do
  node=$CACHE/node/$v/bin/node
  log "node $v: starting the fixture with $ORDERS orders"
  coproc FIX { exec "$node" --expose-gc --max-old-space-size=4096 -e "$(cat "$FIXTURE_DIR/census.js" "$FIXTURE_DIR/heapfixture.js")" \
    "$ORDERS" --snapshot-on-signal 2>"$TMP/fixture.$v.err"; }
  FIXTURE_PID=$FIX_PID
  fd=${FIX[0]:-}
  [ -n "$fd" ] || { cat "$TMP/fixture.$v.err" >&2; die "node $v fixture exited at once"; }
  line=
  if ! read -r -t "$READY_TIMEOUT" line <&"$fd"; then
    cat "$TMP/fixture.$v.err" >&2
    die "node $v fixture not ready after ${READY_TIMEOUT}s"
  fi
  read -r version used <<<"$(python3 -c '
import json, sys
d = json.loads(sys.argv[1])
print(d["version"], sum(s["used"] for s in d["spaces"].values()))' "$line")"
  heap_mib=$(awk -v b="$used" 'BEGIN { printf "%.0f", b / 1048576 }')
  log "node $v: ready ($version, heap used $heap_mib MiB); $RUNS snapshot runs"

  : > "$TMP/snap_ms.$v"; : > "$TMP/wall_ms.$v"; : > "$TMP/grow.$v"; : > "$TMP/gibs.$v"
  for ((i = 0; i < RUNS; i++)); do
    json=$TMP/snap.$v.$i.json
    t0=$EPOCHREALTIME
    grow=$(growth_mib "$FIXTURE_PID" run_snapshot "$json") || { cat "$TMP/err" >&2; die "oomsnap snapshot failed on node $v"; }
    t1=$EPOCHREALTIME
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", (b - a) * 1000 }' >> "$TMP/wall_ms.$v"
    echo "$grow" >> "$TMP/grow.$v"
    read -r status dur walked <<<"$(python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))["snapshot"]
t = s.get("totals", {})
print(s.get("status"), s.get("duration_ms"), t.get("bytes", 0))' "$json")"
    [ "$status" = complete ] || { cat "$json" >&2; die "node $v run $((i + 1)): status $status, not complete"; }
    echo "$dur" >> "$TMP/snap_ms.$v"
    awk -v b="$walked" -v ms="$dur" 'BEGIN { printf "%.3f\n", b / 1073741824 / (ms / 1000) }' >> "$TMP/gibs.$v"
    log "node $v: run $((i + 1))/$RUNS: $dur ms, objects of $(awk -v b="$walked" 'BEGIN { printf "%.0f", b / 1048576 }') MiB"
  done
  snap_ms=$(median "$TMP/snap_ms.$v")
  wall_ms=$(median "$TMP/wall_ms.$v")
  grow=$(median "$TMP/grow.$v")
  gibs=$(median "$TMP/gibs.$v")

  log "node $v: v8.writeHeapSnapshot() (SIGUSR2)"
  # In this shell: the coprocess's pipe is not a subshell's to read.
  echo 5 > "/proc/$FIXTURE_PID/clear_refs"
  before=$(kib "$FIXTURE_PID" VmRSS)
  kill -USR2 "$FIXTURE_PID"
  read -r -t 600 wline <&"$fd" || die "node $v: no answer to SIGUSR2"
  peak=$(kib "$FIXTURE_PID" VmHWM)
  wgrow=$(awk -v a="$peak" -v b="$before" 'BEGIN { printf "%.1f\n", (a > b ? a - b : 0) / 1024 }')
  read -r write_ms file <<<"$(python3 -c '
import json, sys
d = json.loads(sys.argv[1])
print("%.1f" % d["write_heap_snapshot_ms"], d["file"])' "$wline")"
  file_mib=$(awk -v b="$(stat -c %s "$file")" 'BEGIN { printf "%.0f", b / 1048576 }')
  rm -f "$file"

  ratio=$(awk -v a="$snap_ms" -v b="$write_ms" 'BEGIN { printf "%.3f", a / b }')
  bench_figure "node $v: snapshot duration_ms" "$snap_ms" ms
  bench_figure "node $v: CLI wall" "$wall_ms" ms
  bench_figure "node $v: walk speed" "$gibs" GiB/s higher
  bench_figure "node $v: snapshot/writeHeapSnapshot" "$ratio" x
  bench_figure "node $v: target growth, oomsnap" "$grow" MiB
  bench_figure "node $v: target growth, writeHeapSnapshot" "$wgrow" MiB
  rows+=("| $version | $heap_mib | $snap_ms | $wall_ms | $gibs | $grow | $write_ms | $wgrow | $file_mib | $ratio |")

  kill -KILL "$FIXTURE_PID" 2>/dev/null || true
  wait "$FIXTURE_PID" 2>/dev/null || true
  FIXTURE_PID=
done

echo "oomsnap snapshot vs v8.writeHeapSnapshot() on the same Node process — heapfixture.js with $ORDERS orders, median of $RUNS oomsnap runs, one heap snapshot"
echo
echo "| node | heap used MiB | snapshot ms | CLI wall ms | GiB/s | target growth MiB | writeHeapSnapshot ms | its target growth MiB | its file MiB | snapshot/write ratio |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
echo
echo "GiB/s: the bytes of the objects walked over the snapshot's own duration_ms. Target growth: the target's peak RSS while the command ran, above its RSS before."
echo
echo "Machine: $(nproc) CPUs, Linux $(uname -r) ($(uname -m)); $(date -u '+%Y-%m-%d %H:%M UTC')."
bench_record_write
