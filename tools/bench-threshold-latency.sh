#!/usr/bin/env bash
# Crossing -> trigger latency of the usage threshold (issue #25 item 3): the
# in-kernel check (BPF on kmem:rss_stat) beside cgroup v1's eventfd or
# cgroup v2's poll, with the real agent and leakers at several rates
# (tools/bench-threshold-latency.py says how it is measured). Prints a
# Markdown table; appends the medians to docs/benchmarks/threshold-latency.jsonl.
# Usage: tools/bench-threshold-latency.sh [OOMSNAP]
#   env: BENCH_RATES (MB/s, default 50,200,1000), BENCH_RUNS (default 5)
# cgroup v2: run it in the guest, e.g.
#   ../shared/v2vm/run-in-v2vm.sh -c 1 -t 900 -w /tmp/out -- \
#       env BENCH_RECORD_DIR=/tmp/out tools/bench-threshold-latency.sh build/oomsnap
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tools/lib/bench-record.sh
. tools/lib/bench-record.sh
BIN=${1:-build/oomsnap}
[ "$(id -u)" = 0 ] || { echo "bench-threshold-latency: run as root" >&2; exit 1; }
[ -x "$BIN" ] || { echo "bench-threshold-latency: $BIN missing (tools/build.sh)" >&2; exit 1; }
bench_record_init threshold-latency
figures=$(mktemp)
python3 tools/bench-threshold-latency.py --binary "$BIN" --rates "${BENCH_RATES:-50,200,1000}" \
  --runs "${BENCH_RUNS:-5}" 2> "$figures"
while read -r tag name value unit; do
  [ "$tag" = FIGURE ] && bench_figure "$name" "$value" "$unit"
done < "$figures"
grep -v '^FIGURE ' "$figures" >&2 || true
rm -f "$figures"
bench_record_write
