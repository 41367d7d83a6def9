#!/bin/bash
# Runs INSIDE the cgroup-v2 guest of ../shared/v2vm/run-in-v2vm.sh: the trigger-timing
# evaluation (tools/evaluate.py) on cgroup v2 — memory.max, memory.high, memory.events, PSI.
#
#   evaluate_v2.sh OUTDIR [OOMSNAP_BINARY] [HEAPFIXTURE] [-- EVALUATE_ARGS...]
#
# OUTDIR must be writable from the guest (run-in-v2vm.sh -w OUTDIR). Results land in
# OUTDIR/eval/ (runs.jsonl, summary.json, summary.md, plots/, raw/), evaluate.py's progress
# and report in OUTDIR/evaluate.log, its exit status in OUTDIR/evaluate.rc. The default
# matrix is the small one of the test (EvaluateCgroupV2.SmallMatrixInGuest): memory.max
# 64 MiB, memory.high 80 % and 95 %, ThresholdPercent 75, one Go leaker at 10 MB/s, one
# repeat, each run bounded to 45 s (a leaker held at memory.high without swap can be
# throttled for minutes: that run is reported as throttled_without_kill). Arguments after
# `--` are passed on to evaluate.py and override these (argparse keeps the last value).
set -u
OUT=${1:?usage: $0 OUTDIR [OOMSNAP_BINARY] [HEAPFIXTURE] [-- EVALUATE_ARGS...]}
shift
HERE=$(dirname "$(realpath "$0")")
BIN=${OOMSNAP_BINARY:-$HERE/../../build/oomsnap}
FX=/var/cache/oomsnap/fixtures/go/1.26/default/heapfixture
if [ $# -gt 0 ] && [ "$1" != "--" ]; then BIN=$1; shift; fi
if [ $# -gt 0 ] && [ "$1" != "--" ]; then FX=$1; shift; fi
[ $# -gt 0 ] && [ "$1" = "--" ] && shift

up() { awk '{printf "%.1f", $1}' /proc/uptime; }
echo "[evaluate_v2 $(up)s] kernel $(uname -r); agent $BIN; fixture $FX; python $(/usr/bin/python3 --version 2>&1)"
[ -x "$BIN" ] || { echo "evaluate_v2: agent binary missing: $BIN"; echo 1 > "$OUT/evaluate.rc"; exit 1; }
[ -x "$FX" ] || { echo "evaluate_v2: fixture missing: $FX"; echo 1 > "$OUT/evaluate.rc"; exit 1; }
grep -qw memory /sys/fs/cgroup/cgroup.controllers || { echo "evaluate_v2: no memory controller"; exit 1; }
# evaluate.py reads the binaries once itself (from its own cgroup, the root here) before any
# run, so their page cache is never charged to a box and refaulted over 9p under reclaim.
/usr/bin/python3 "$HERE/../../tools/evaluate.py" --binary "$BIN" --fixture "$FX" --out "$OUT/eval" \
  --limit-mb 64 --high-percents 80,95 --thresholds 75 --rates 10 --repeat 1 --run-timeout 45 \
  --agent-ready-timeout 90 --label "cgroup v2 guest (QEMU TCG, 2 vCPUs)" "$@" > "$OUT/evaluate.log" 2>&1
rc=$?
echo "$rc" > "$OUT/evaluate.rc"
cat "$OUT/evaluate.log"
echo "[evaluate_v2 $(up)s] evaluate.py exit $rc"
exit "$rc"
