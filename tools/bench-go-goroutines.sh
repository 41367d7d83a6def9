#!/usr/bin/env bash
# Benchmark driver (not a test): the goroutine census of `oomsnap snapshot` on
# a Go target with many parked goroutines — wall time of the whole command
# (process start and the heap read included) and its read syscalls.
#
# Usage: tools/bench-go-goroutines.sh [OOMSNAP_BINARY]   (default: build/oomsnap)
# Env:   BENCH_GOROUTINES goroutine counts to run     (default "10000 100000")
#        BENCH_RUNS       runs per count (median)     (default 9)
#        BENCH_GO         fixture toolchain           (default 1.26; default build)
#        OOMSNAP_CACHE    fixture cache root          (default /var/cache/oomsnap)
# The fixture runs with -goroutines -spinners 0 -park-chan N-6000: N goroutines
# in all (5,000 sleeping and 1,000 on a mutex among them), plus main.
# Prints a Markdown table on stdout; progress goes to stderr.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${OOMSNAP_CACHE:-/var/cache/oomsnap}
OOMSNAP=${1:-$ROOT/build/oomsnap}
COUNTS=${BENCH_GOROUTINES:-10000 100000}
RUNS=${BENCH_RUNS:-9}
GOVER=${BENCH_GO:-1.26}
FIXTURE=$CACHE/fixtures/go/$GOVER/default/heapfixture
READY_TIMEOUT=${BENCH_READY_TIMEOUT:-300}

die() { echo "bench-go-goroutines: error: $*" >&2; exit 1; }
log() { echo "bench-go-goroutines: $*" >&2; }

[ -x "$OOMSNAP" ] || die "oomsnap binary not found: $OOMSNAP"
[ -x "$FIXTURE" ] || die "fixture not found: $FIXTURE (run tools/build-go-fixtures.sh $GOVER)"
command -v python3 >/dev/null || die "python3 is required"
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_RUNS must be a positive integer"

# shellcheck source=tools/lib/bench-common.sh
source "$ROOT/tools/lib/bench-common.sh"
bench_init bench-go-goroutines
# shellcheck source=tools/lib/bench-record.sh
source "$ROOT/tools/lib/bench-record.sh"
bench_record_init go-goroutines

rows=()
for n in $COUNTS; do
  [ "$n" -ge 6000 ] || die "goroutine counts start at 6000 (5000 sleeping + 1000 on a mutex)"
  log "goroutines=$n: starting $FIXTURE -goroutines -spinners 0 -park-chan $((n - 6000))"
  start_fixture "$TMP/ready.$n" "$FIXTURE" -goroutines -spinners 0 -park-chan $((n - 6000))
  : > "$TMP/ms.$n"
  : > "$TMP/sys.$n"
  for ((i = 0; i < RUNS; i++)); do
    t0=$EPOCHREALTIME
    "$OOMSNAP" snapshot --pid "$FIXTURE_PID" --format json --max-entries 10 --budget-ms 20000 -o "$TMP/snap.json" \
      || die "oomsnap snapshot failed"
    t1=$EPOCHREALTIME
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", (b - a) * 1000 }' >> "$TMP/ms.$n"
    python3 - "$TMP/snap.json" "$TMP/sys.$n" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["snapshot"]
g = s["goroutines"]
if g["status"] != "complete":
    print("warning: census status %s: %s" % (g["status"], g.get("reason")), file=sys.stderr)
with open(sys.argv[2], "a") as f:
    f.write("%d %d %.3f\n" % (s["read_syscalls"], g["total"], s["duration_ms"]))
PY
  done
  read -r syscalls total _ < "$TMP/sys.$n"
  awk '{ print $3 }' "$TMP/sys.$n" > "$TMP/cap.$n"
  rows+=("| $total | $(median "$TMP/ms.$n") | $(median "$TMP/cap.$n") | $syscalls |")
  bench_figure "$n goroutines: command wall" "$(median "$TMP/ms.$n")" ms
  bench_figure "$n goroutines: capture duration_ms" "$(median "$TMP/cap.$n")" ms
  stop_fixture
done

echo "oomsnap snapshot (JSON, heap + goroutine census) — Go $GOVER fixture, median of $RUNS runs; $(nproc) CPUs"
echo
echo "| goroutines | command wall median ms | capture median ms | read syscalls |"
echo "|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
bench_record_write
