#!/usr/bin/env bash
# Benchmark driver (not a test): how long `oomsnap snapshot` takes on a Go
# target with many allocation stacks, next to the target's own
# runtime/pprof.WriteHeapProfile, and how many read syscalls it needs.
#
# Usage: tools/bench-go-snapshot.sh [OOMSNAP_BINARY]     (default: build/oomsnap)
# Env:   BENCH_STACKS  stack counts to run      (default "10000 100000")
#        BENCH_RUNS    runs per format (median) (default 9)
#        BENCH_GO      fixture toolchain        (default 1.26; default build)
#        OOMSNAP_CACHE fixture cache root       (default /var/cache/oomsnap)
# The fixture ($OOMSNAP_CACHE/fixtures/go/$BENCH_GO/default/heapfixture, from
# tools/build-go-fixtures.sh) runs with -rate 1 -stacks N: every allocation is
# a bucket, N distinct stacks. Prints a Markdown table on stdout; progress
# goes to stderr.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${OOMSNAP_CACHE:-/var/cache/oomsnap}
OOMSNAP=${1:-$ROOT/build/oomsnap}
STACKS=${BENCH_STACKS:-10000 100000}
RUNS=${BENCH_RUNS:-9}
GOVER=${BENCH_GO:-1.26}
FIXTURE=$CACHE/fixtures/go/$GOVER/default/heapfixture
READY_TIMEOUT=${BENCH_READY_TIMEOUT:-300}

die() { echo "bench-go-snapshot: error: $*" >&2; exit 1; }
log() { echo "bench-go-snapshot: $*" >&2; }

[ -x "$OOMSNAP" ] || die "oomsnap binary not found: $OOMSNAP (build it with tools/build.sh, or pass its path)"
[ -x "$FIXTURE" ] || die "fixture not found: $FIXTURE (run tools/build-go-fixtures.sh $GOVER)"
command -v python3 >/dev/null || die "python3 is required"
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_RUNS must be a positive integer"

# shellcheck source=tools/lib/bench-common.sh
source "$ROOT/tools/lib/bench-common.sh"
bench_init bench-go-snapshot
# shellcheck source=tools/lib/bench-record.sh
source "$ROOT/tools/lib/bench-record.sh"
bench_record_init go-snapshot

# time_runs OUT_FILE CMD...: run CMD $RUNS times, append each wall time in ms.
time_runs() {
  local out=$1 i t0 t1; shift
  : > "$out"
  for ((i = 0; i < RUNS; i++)); do
    t0=$EPOCHREALTIME
    if ! "$@" >/dev/null 2>"$TMP/err"; then
      cat "$TMP/err" >&2
      die "failed: $*"
    fi
    t1=$EPOCHREALTIME
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", (b - a) * 1000 }' >> "$out"
  done
}

# count_samples FILE: number of Profile.sample (field 2) in a gzipped profile.proto.
count_samples() {
  python3 - "$1" <<'PY'
import gzip, sys
b = gzip.open(sys.argv[1]).read()
def varint(i):
    v = s = 0
    while True:
        c = b[i]; i += 1
        v |= (c & 0x7f) << s; s += 7
        if c < 0x80:
            return v, i
i = n = 0
while i < len(b):
    key, i = varint(i)
    wt = key & 7
    if wt == 0:
        _, i = varint(i)
    elif wt == 2:
        l, i = varint(i)
        i += l
    elif wt == 1:
        i += 8
    elif wt == 5:
        i += 4
    else:
        sys.exit("bad wire type %d" % wt)
    if key >> 3 == 2:
        n += 1
print(n)
PY
}

rows=() notes=()
for n in $STACKS; do
  log "stacks=$n: starting $FIXTURE -rate 1 -stacks $n -measure-runs 5"
  ready=$TMP/ready.$n
  start_fixture "$ready" "$FIXTURE" -rate 1 -stacks "$n" -measure-runs 5
  read -r line_pid whp_ms whpu_ms <<<"$(python3 -c '
import json, sys
d = json.loads(open(sys.argv[1]).readline())
print(d["pid"], "%.3f" % d["write_heap_profile_ms"], "%.3f" % d.get("write_heap_profile_unprofiled_ms", 0))' "$ready")"
  [ "$line_pid" = "$FIXTURE_PID" ] || die "ready line pid $line_pid != started pid $FIXTURE_PID"

  # One capture to a file: read syscalls and status.
  json=$TMP/snap.$n.json
  "$OOMSNAP" snapshot --pid "$FIXTURE_PID" --format json -o "$json" \
    || die "oomsnap snapshot --format json failed"
  read -r status syscalls <<<"$(python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))["snapshot"]
print(s.get("status"), s.get("read_syscalls"))' "$json")"
  [ "$status" = complete ] || log "warning: stacks=$n snapshot status is $status ($json)"

  log "stacks=$n: $RUNS json runs"
  time_runs "$TMP/json.$n.ms" "$OOMSNAP" snapshot --pid "$FIXTURE_PID" --format json -o /dev/null
  log "stacks=$n: $RUNS pprof runs"
  time_runs "$TMP/pprof.$n.ms" "$OOMSNAP" snapshot --pid "$FIXTURE_PID" --format pprof -o "$TMP/snap.$n.pb.gz"

  # buckets = samples in the pprof output (one per runtime bucket).
  buckets=$(count_samples "$TMP/snap.$n.pb.gz")
  json_ms=$(median "$TMP/json.$n.ms")
  pprof_ms=$(median "$TMP/pprof.$n.ms")
  ratio=$(awk -v a="$pprof_ms" -v b="$whp_ms" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')
  rows+=("| $n | $json_ms | $pprof_ms | $whp_ms | $ratio | $syscalls | $buckets |")
  bench_figure "$n stacks: json wall" "$json_ms" ms
  bench_figure "$n stacks: pprof wall" "$pprof_ms" ms
  bench_figure "$n stacks: pprof/WriteHeapProfile" "$ratio" x
  uratio=$(awk -v a="$pprof_ms" -v b="$whpu_ms" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')
  notes+=("- $n stacks: WriteHeapProfile with its own allocations unprofiled (MemProfileRate 0 while it runs): $whpu_ms ms, pprof/that = $uratio")

  stop_fixture
done

echo "oomsnap snapshot vs runtime/pprof.WriteHeapProfile — Go $GOVER fixture, -rate 1, median of $RUNS runs (WriteHeapProfile: median of 5, in-process, to io.Discard); $(nproc) CPUs"
echo
echo "| stacks | json median ms | pprof median ms | WriteHeapProfile median ms | pprof/WriteHeapProfile ratio | read syscalls | buckets |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
echo
echo "At -rate 1 the in-process writer also records every one of its own allocations (a stack unwind each, new buckets), which slows it down; without that:"
printf '%s\n' "${notes[@]}"
bench_record_write
