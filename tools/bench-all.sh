#!/usr/bin/env bash
# Runs the benchmark drivers (not tests) and prints every figure beside the
# last one recorded before this run (issue #30): each driver appends its
# figures, with the commit, the machine and the date, to
# docs/benchmarks/BENCH.jsonl (tools/lib/bench-record.sh); this prints, per
# figure, this run's median, the last recorded one (its commit and date) and
# their ratio, marked when it is more than 10 % worse. Compare rows of one
# machine: a record says which machine and load it came from.
#
# Usage: tools/bench-all.sh [--compare] [BENCH ...]
#   BENCH: breakdown, python-snapshot, go-snapshot, go-goroutines,
#          java-snapshot, node-snapshot, hostile-rss, agent, threshold-latency (default: all, in that order)
#   --compare: run nothing; print each bench's newest record beside the one
#          before it.
# Env: passed on to the drivers (BENCH_RUNS, BENCH_PYTHONS, ...); OOMSNAP
#      (default build/oomsnap) is given to each as its binary.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OOMSNAP=${OOMSNAP:-$ROOT/build/oomsnap}
DIR=${BENCH_RECORD_DIR:-$ROOT/docs/benchmarks}
ALL=(breakdown python-snapshot go-snapshot go-goroutines java-snapshot node-snapshot hostile-rss agent threshold-latency)

run=1
if [ "${1:-}" = --compare ]; then run=0; shift; fi
benches=("$@")
[ ${#benches[@]} -gt 0 ] || benches=("${ALL[@]}")
for b in "${benches[@]}"; do
  [ -x "$ROOT/tools/bench-$b.sh" ] || { echo "bench-all: no tools/bench-$b.sh" >&2; exit 2; }
done

failed=()
if [ $run = 1 ]; then
  for b in "${benches[@]}"; do
    echo "bench-all: $b" >&2
    if ! "$ROOT/tools/bench-$b.sh" "$OOMSNAP" > "/tmp/bench-all.$b.md"; then
      failed+=("$b")
      echo "bench-all: $b failed (its table, if any: /tmp/bench-all.$b.md)" >&2
    fi
  done
fi

python3 - "$DIR" "${benches[@]}" <<'PY'
import json, os, sys
d, benches = sys.argv[1], sys.argv[2:]
print("| bench | figure | newest | before it | ratio |")
print("| --- | --- | ---: | ---: | ---: |")
for b in benches:
    path = os.path.join(d, b + ".jsonl")
    recs = []
    if os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line:
                try:
                    recs.append(json.loads(line))
                except ValueError:
                    pass
    if not recs:
        print(f"| {b} | (no record) | | | |")
        continue
    new = recs[-1]
    old = recs[-2] if len(recs) > 1 else None
    tag = lambda r: f"{r['commit']}{'+' if r.get('dirty') else ''} {r['date'][:16]}"
    print(f"| {b} | *records* | {tag(new)}, load {new['machine'].get('load1')} | "
          f"{tag(old) + ', load ' + str(old['machine'].get('load1')) if old else '-'} | |")
    for name, f in new["figures"].items():
        prev = old["figures"].get(name) if old else None
        ratio = mark = ""
        if prev and prev["value"]:
            r = f["value"] / prev["value"]
            worse = r > 1.1 if f["better"] == "lower" else r < 1 / 1.1
            ratio, mark = f"{r:.2f}", " **worse**" if worse else ""
        before = f"{prev['value']:g} {prev['unit']}" if prev else "-"
        print(f"| {b} | {name} | {f['value']:g} {f['unit']} | {before} | {ratio}{mark} |")
PY
if [ ${#failed[@]} -gt 0 ]; then
  echo "bench-all: failed: ${failed[*]}" >&2
  exit 1
fi
