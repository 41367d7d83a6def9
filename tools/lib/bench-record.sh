# Shared by the benchmark drivers (source it): each figure a run measured is
# kept, and at the end appended as one JSON line to
# docs/benchmarks/BENCH.jsonl with the commit, the machine and the date, so
# that tools/bench-all.sh can print every figure beside the last recorded one
# (issue #30: keep the readers' speed from regressing unnoticed).
#
# bench_record_init BENCH: starts a record (call once, after bench_init).
# bench_figure NAME VALUE UNIT [BETTER]: one figure (a median); BETTER is
#   "lower" (default) or "higher".
# bench_record_write: appends the record (at the end of a run that finished);
#   BENCH_RECORD=0 writes nothing, BENCH_RECORD_DIR writes elsewhere.

bench_record_init() {
  BENCH_NAME=$1
  BENCH_FIGURES=$(mktemp "/tmp/bench-figures.$1.XXXXXX")
}

bench_figure() {
  [ -n "${BENCH_FIGURES:-}" ] || return 0
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-lower}" >> "$BENCH_FIGURES"
}

bench_record_write() {
  [ -n "${BENCH_FIGURES:-}" ] || return 0
  if [ "${BENCH_RECORD:-1}" = 0 ]; then rm -f "$BENCH_FIGURES"; return 0; fi
  local root dir
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  dir=${BENCH_RECORD_DIR:-$root/docs/benchmarks}
  mkdir -p "$dir"
  python3 - "$BENCH_NAME" "$BENCH_FIGURES" "$root" >> "$dir/$BENCH_NAME.jsonl" <<'PY'
import json, os, subprocess, sys, time
name, figures, root = sys.argv[1:4]
def git(*a):
    try:
        return subprocess.run(["git", "-C", root, *a], capture_output=True, text=True, check=True).stdout.strip()
    except Exception:
        return ""
model = ""
try:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
except OSError:
    pass
rec = {
    "bench": name,
    "commit": git("rev-parse", "--short", "HEAD"),
    "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "machine": {"cpus": os.cpu_count(), "cpu": model, "kernel": os.uname().release,
                "load1": round(os.getloadavg()[0], 2)},
    "figures": {},
}
for line in open(figures):
    f, v, unit, better = line.rstrip("\n").split("\t")
    try:
        value = float(v)
    except ValueError:
        continue  # "n/a": nothing measured
    rec["figures"][f] = {"value": value, "unit": unit, "better": better}
print(json.dumps(rec, sort_keys=True))
PY
  rm -f "$BENCH_FIGURES"
}
