#!/usr/bin/env bash
# Benchmark driver (not a test): how long `oomsnap snapshot` takes on a CPython
# target with many GC-tracked objects, next to the target's own in-process
# census (gc.get_objects() with sys.getsizeof), and how many read syscalls it
# needs, for several interpreter versions side by side.
#
# Usage: tools/bench-python-snapshot.sh [OOMSNAP_BINARY]     (default: build/oomsnap)
# Env:   BENCH_OBJECTS  extra tracked instances (--objects) (default 1000000)
#        BENCH_RUNS     snapshot runs per interpreter (median) (default 9)
#        BENCH_PYTHONS  interpreters to run (default "3.11 3.13 3.14"; also 3.8, 3.9,
#                       3.10 and 3.12, from pyenv's upstream builds)
#        OOMSNAP_CACHE  fixture cache root (default /var/cache/oomsnap)
# 3.11 is the host's /usr/bin/python3.11; 3.13 and 3.14 run under chroot in
# $OOMSNAP_CACHE/rootfs/{trixie,sid} (from tools/fetch-python-rootfs.sh);
# 3.8, 3.9, 3.10 and 3.12 are the pyenv build of each (the last by name) under
# ${PYENV_ROOT:-~/.pyenv}/versions (the machine image's).
# The fixture (tests/fixtures/python/heapfixture.py --objects N) prints one
# JSON line with its census when ready, then sleeps until killed. Each run is
# `oomsnap snapshot --pid PID --max-entries 10 --budget-ms 30000`; its status
# must be "complete". Prints a Markdown table on stdout; progress goes to stderr.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${OOMSNAP_CACHE:-/var/cache/oomsnap}
OOMSNAP=${1:-$ROOT/build/oomsnap}
OBJECTS=${BENCH_OBJECTS:-1000000}
RUNS=${BENCH_RUNS:-9}
PYTHONS=${BENCH_PYTHONS:-3.11 3.13 3.14}
FIXTURE=$ROOT/tests/fixtures/python/heapfixture.py
READY_TIMEOUT=${BENCH_READY_TIMEOUT:-300}

die() { echo "bench-python-snapshot: error: $*" >&2; exit 1; }
log() { echo "bench-python-snapshot: $*" >&2; }
# shellcheck source=tools/lib/bench-record.sh
. "$ROOT/tools/lib/bench-record.sh"
bench_record_init python-snapshot

# rootfs_of VERSION: the chroot holding python$VERSION ("" = host).
rootfs_of() {
  case "$1" in
    3.8 | 3.9 | 3.10 | 3.11 | 3.12) echo "" ;;
    3.13) echo "$CACHE/rootfs/trixie" ;;
    3.14) echo "$CACHE/rootfs/sid" ;;
    *) return 1 ;;
  esac
}

# python_of VERSION: the interpreter's path (inside its root file system).
python_of() {
  case "$1" in
    3.8 | 3.9 | 3.10 | 3.12)
      local found="" p
      for p in "${PYENV_ROOT:-$HOME/.pyenv}/versions/$1".*/bin/"python$1"; do
        [ -x "$p" ] && found=$p  # the last in name order
      done
      echo "${found:-pyenv python$1}" ;;
    *) echo "/usr/bin/python$1" ;;
  esac
}

[ -x "$OOMSNAP" ] || die "oomsnap binary not found: $OOMSNAP (build it with tools/build.sh, or pass its path)"
[ -r "$FIXTURE" ] || die "fixture not found: $FIXTURE"
command -v python3 >/dev/null || die "python3 is required"
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_RUNS must be a positive integer"
[[ "$OBJECTS" =~ ^[0-9]+$ ]] || die "BENCH_OBJECTS must be a non-negative integer"
[ -n "${PYTHONS// /}" ] || die "BENCH_PYTHONS is empty"
for v in $PYTHONS; do
  root=$(rootfs_of "$v") || die "unsupported interpreter in BENCH_PYTHONS: $v (supported: 3.8 to 3.14)"
  if [ -z "$root" ]; then
    [ -x "$(python_of "$v")" ] || die "$(python_of "$v") not found on the host"
  else
    [ -x "$root/usr/bin/python$v" ] \
      || die "python$v rootfs not found: $root (run tools/fetch-python-rootfs.sh $(basename "$root"))"
  fi
done

# shellcheck source=tools/lib/bench-common.sh
source "$ROOT/tools/lib/bench-common.sh"
bench_init bench-python-snapshot

# spread FILE: "min-max" of the numbers in FILE, one per line.
spread() {
  python3 -c 'import sys; v=[float(l) for l in open(sys.argv[1]) if l.strip()]; print("%.1f-%.1f" % (min(v), max(v)))' "$1"
}

rows=() notes=()
for v in $PYTHONS; do
  root=$(rootfs_of "$v")
  log "python $v: starting heapfixture.py --objects $OBJECTS${root:+ (chroot $root)}"
  # The coprocess execs the interpreter (chroot execs it in turn): its pid is
  # the fixture's. Its stdout is our pipe; the ready line is its first line.
  if [ -z "$root" ]; then
    py=$(python_of "$v")
    coproc FIX { exec "$py" "$FIXTURE" --objects "$OBJECTS" 2>"$TMP/fixture.$v.err"; }
  else
    coproc FIX { exec chroot "$root" "/usr/bin/python$v" -c "$(cat "$FIXTURE")" --objects "$OBJECTS" 2>"$TMP/fixture.$v.err"; }
  fi
  FIXTURE_PID=$FIX_PID
  fd=${FIX[0]:-}
  [ -n "$fd" ] || { cat "$TMP/fixture.$v.err" >&2; die "python $v fixture exited at once"; }
  line=
  if ! read -r -t "$READY_TIMEOUT" line <&"$fd"; then
    cat "$TMP/fixture.$v.err" >&2
    kill -0 "$FIXTURE_PID" 2>/dev/null || die "python $v fixture exited before its ready line"
    die "python $v fixture not ready after ${READY_TIMEOUT}s"
  fi
  read -r line_pid version census_ms tracked <<<"$(python3 -c '
import json, sys
d = json.loads(sys.argv[1])
print(d["pid"], d["version"], "%.3f" % d["census_ms"], d["tracked"])' "$line")"
  [ "$line_pid" = "$FIXTURE_PID" ] || die "ready line pid $line_pid != started pid $FIXTURE_PID"
  log "python $v: ready (CPython $version, $tracked tracked, census $census_ms ms); $RUNS snapshot runs"

  : > "$TMP/snap_ms.$v"; : > "$TMP/wall_ms.$v"; : > "$TMP/syscalls.$v"; : > "$TMP/mib.$v"; : > "$TMP/visited.$v"
  for ((i = 0; i < RUNS; i++)); do
    json=$TMP/snap.$v.$i.json
    t0=$EPOCHREALTIME
    if ! "$OOMSNAP" snapshot --pid "$FIXTURE_PID" --max-entries 10 --budget-ms 30000 >"$json" 2>"$TMP/err"; then
      cat "$TMP/err" >&2
      die "oomsnap snapshot failed on python $v (pid $FIXTURE_PID)"
    fi
    t1=$EPOCHREALTIME
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", (b - a) * 1000 }' >> "$TMP/wall_ms.$v"
    read -r status dur syscalls bytes visited <<<"$(python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))["snapshot"]
t = s.get("totals", {})
print(s.get("status"), s.get("duration_ms"), s.get("read_syscalls"), s.get("bytes_read"),
      t.get("gc_tracked_objects", 0) + t.get("referenced_untracked_objects", 0))' "$json")"
    if [ "$status" != complete ]; then
      cat "$json" >&2
      die "python $v run $((i + 1)): snapshot status is $status, not complete"
    fi
    echo "$dur" >> "$TMP/snap_ms.$v"
    echo "$syscalls" >> "$TMP/syscalls.$v"
    awk -v b="$bytes" 'BEGIN { printf "%.3f\n", b / 1048576 }' >> "$TMP/mib.$v"
    echo "$visited" >> "$TMP/visited.$v"
    log "python $v: run $((i + 1))/$RUNS: ${dur} ms (wall $(tail -n1 "$TMP/wall_ms.$v") ms), $syscalls read syscalls"
  done

  snap_ms=$(median "$TMP/snap_ms.$v")
  wall_ms=$(median "$TMP/wall_ms.$v")
  syscalls=$(median "$TMP/syscalls.$v")
  mib=$(median "$TMP/mib.$v")
  visited=$(median "$TMP/visited.$v")
  per_syscall=$(awk -v a="$visited" -v b="$syscalls" 'BEGIN { if (b > 0) printf "%.0f", a / b; else print "n/a" }')
  ratio=$(awk -v a="$census_ms" -v b="$snap_ms" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')
  bench_figure "python $v: snapshot duration_ms" "$snap_ms" ms
  bench_figure "python $v: CLI wall" "$wall_ms" ms
  bench_figure "python $v: MiB read" "$mib" MiB
  bench_figure "python $v: census/snapshot ratio" "$ratio" x higher
  rows+=("| $version | $tracked | ${visited%.000} | $snap_ms | $wall_ms | ${syscalls%.000} | $(printf '%.1f' "$mib") | $census_ms | $per_syscall | $ratio |")
  notes+=("- $version: snapshot ms min-max $(spread "$TMP/snap_ms.$v"), CLI wall ms min-max $(spread "$TMP/wall_ms.$v"), objects visited $(sort -u "$TMP/visited.$v" | wc -l | tr -d ' ') distinct value(s) over the runs")

  kill -KILL "$FIXTURE_PID" 2>/dev/null || true
  wait "$FIXTURE_PID" 2>/dev/null || true
  FIXTURE_PID=
done

echo "oomsnap snapshot vs the target's own census (gc.get_objects() + sys.getsizeof, in-process, once) — CPython heap fixture, --objects $OBJECTS, --max-entries 10, median of $RUNS runs"
echo
echo "| python | tracked objects (fixture) | objects visited | snapshot median ms | CLI wall median ms | read syscalls | MiB read | fixture census ms | objects/syscall | census/snapshot ratio |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
echo
echo "Objects visited = gc_tracked_objects + referenced_untracked_objects from the snapshot totals; snapshot ms is the snapshot's own duration_ms, CLI wall ms the whole \`oomsnap snapshot\` command (process start, attach, JSON output)."
printf '%s\n' "${notes[@]}"
echo
echo "Machine: $(nproc) CPUs, Linux $(uname -r) ($(uname -m)); $(date -u '+%Y-%m-%d %H:%M UTC')."
bench_record_write
