#!/usr/bin/env bash
# Benchmark driver (not a test): what process_memory.breakdown adds to a
# capture (issue #24: under 5 ms for a process with 10,000 mappings). Starts a
# C target holding N anonymous mappings of 2 pages, one page of each touched
# (alternate protections, so the kernel cannot merge them), runs
# `oomsnap snapshot --pid` on it RUNS times and prints the median and the
# range of breakdown.duration_ms (the capture process's time to read
# /proc/PID/smaps and mountinfo and build the breakdown), the mappings read,
# and, for scale, the time the kernel alone takes to write that smaps
# (`cat /proc/PID/smaps`), and the kinds' sum against VmRSS. Then the
# ways the breakdown can count resident bytes (smaps, maps + PAGEMAP_SCAN,
# the maps read before + the scan, and the same asking every page whether it
# is a file page) in turn on the same target (build/tests/breakdown_bench),
# medians side by side.
#
# Usage: tools/bench-breakdown.sh [OOMSNAP_BINARY]   (default: build/oomsnap)
# Env:   BENCH_MAPPINGS  mappings in the target (default 10000)
#        BENCH_RUNS      snapshots (default 15)
#        BREAKDOWN_BENCH the two-way benchmark (default: next to OOMSNAP, tests/breakdown_bench)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OOMSNAP=${1:-$ROOT/build/oomsnap}
BENCH=${BREAKDOWN_BENCH:-$(dirname "$OOMSNAP")/tests/breakdown_bench}
N=${BENCH_MAPPINGS:-10000}
RUNS=${BENCH_RUNS:-15}
SCRATCH=$(mktemp -d /tmp/oomsnap-bench-breakdown.XXXXXX)
TARGET_PID=
cleanup() {
  if [ -n "$TARGET_PID" ]; then kill "$TARGET_PID" 2>/dev/null || true; fi
  rm -rf "$SCRATCH"
}
trap cleanup EXIT
. "$ROOT/tools/lib/bench-record.sh"
bench_record_init breakdown

cat >"$SCRATCH/many.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
int main(int argc, char** argv) {
  int n = atoi(argv[1]);
  for (int i = 0; i < n; i++) {
    int prot = PROT_READ | PROT_WRITE | ((i & 1) ? 0 : PROT_EXEC);
    char* p = mmap(0, 8192, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    p[0] = 1;
  }
  printf("ready\n");
  fflush(stdout);
  pause();
  return 0;
}
EOF
cc -O2 -o "$SCRATCH/many" "$SCRATCH/many.c"
"$SCRATCH/many" "$N" >"$SCRATCH/out" &
TARGET_PID=$!
for _ in $(seq 100); do grep -q ready "$SCRATCH/out" 2>/dev/null && break; sleep 0.05; done
echo "target pid $TARGET_PID: $(wc -l </proc/$TARGET_PID/maps) mappings" >&2

for _ in $(seq "$RUNS"); do
  "$OOMSNAP" snapshot --pid "$TARGET_PID" 2>/dev/null >>"$SCRATCH/snaps.jsonl"
  # The kernel alone writing the same smaps, right after.
  s=$(date +%s%N); cat "/proc/$TARGET_PID/smaps" >/dev/null; e=$(date +%s%N)
  echo $(( (e - s) / 1000 )) >>"$SCRATCH/cat_us"
done

python3 - "$SCRATCH/snaps.jsonl" "$SCRATCH/cat_us" "${BENCH_FIGURES:-/dev/null}" <<'EOF'
import json, statistics, sys
snaps = [json.loads(l) for l in open(sys.argv[1])]
cat_ms = [int(l) / 1000 for l in open(sys.argv[2])]
bd = [s["process_memory"]["breakdown"] for s in snaps]
d = sorted(b["duration_ms"] for b in bd)
kinds = ["heap", "heap_free", "runtime", "stacks", "native", "file", "shmem"]
off = [100 * (sum(b[k] for k in kinds) - s["process_memory"]["rss_bytes"]) / s["process_memory"]["rss_bytes"]
       for s, b in zip(snaps, bd)]
print("| measure | median | min .. max |")
print("| --- | --- | --- |")
print(f"| breakdown.duration_ms (n={len(d)}, {bd[0]['mappings']} mappings, {bd[0]['status']}) "
      f"| {statistics.median(d):.2f} ms | {d[0]:.2f} .. {d[-1]:.2f} ms |")
print(f"| cat /proc/PID/smaps (the kernel writing it) | {statistics.median(cat_ms):.2f} ms "
      f"| {min(cat_ms):.2f} .. {max(cat_ms):.2f} ms |")
print(f"| kinds sum - VmRSS | {statistics.median(off):+.3f} % | {min(off):+.3f} .. {max(off):+.3f} % |")
with open(sys.argv[3], "a") as f:
    f.write(f"capture breakdown.duration_ms ({bd[0]['mappings']} mappings)\t{statistics.median(d):.3f}\tms\tlower\n")
    f.write(f"cat /proc/PID/smaps\t{statistics.median(cat_ms):.3f}\tms\tlower\n")
EOF

echo
echo "smaps and maps + PAGEMAP_SCAN in turn ($BENCH):"
"$BENCH" "$TARGET_PID" "$RUNS" | tee "$SCRATCH/ways.md"
# Each way's median: "| way (source) | mappings | median | ...".
while IFS='|' read -r _ way _ med _; do
  way=$(echo "$way" | sed 's/ *(.*) *$//; s/^ *//'); med=$(echo "$med" | sed 's/ ms//; s/ //g')
  case "$med" in ''|median|---*) continue ;; esac
  bench_figure "breakdown_bench: $way" "$med" ms
done < <(grep '^| ' "$SCRATCH/ways.md")
bench_record_write
