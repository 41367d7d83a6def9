#!/usr/bin/env bash
# Benchmark driver (not a test): peak memory of `oomsnap snapshot` (the CLI
# and its sandboxed capture process) on hostile targets, next to the idle
# figures (a snapshot of `sleep`, and the idle agent `oomsnap watch`), for
# issue #12 (target: under 64 MiB above idle).
#
# Usage: tools/bench-hostile-rss.sh [OOMSNAP_BINARY]     (default: build/oomsnap)
# Env:   BENCH_RUNS     snapshots per target (median)      (default 3)
#        BENCH_GO       Go toolchain for the targets       (default 1.26)
#        BENCH_CLASSES  classes of the Java target          (default 200000; 0 skips Java)
#        BENCH_IDLE_S   seconds the idle agent runs        (default 5)
#        OOMSNAP_CACHE  toolchain/fixture cache root        (default /var/cache/oomsnap)
# Targets, generated at run time in a scratch directory (removed on exit):
#   large-elf     the stripped Go $BENCH_GO heapfixture with ~61 MiB of section
#                 headers appended (999,424 headers, extended numbering: e_shnum
#                 0, the count in section 0's sh_size); it still runs
#   huge-symtab   the same binary with a .symtab and a .strtab each claiming
#                 128 MiB (past the end of the file) and the file padded to ~64 MiB
#   deep-names    tests/fixtures/hostile/gen_deepnames.py: 16 functions with
#                 4 KiB names recursing 3000 frames deep, 20,000 distinct
#                 stacks at MemProfileRate 1 (json, and pprof as its own row)
#   py-list/py-tuple/py-dict   tests/fixtures/hostile/claim_items.py under the
#                 host's /usr/bin/python3: a container claiming 10,000,000 items
#   java-classes  tests/fixtures/hostile/ManyClasses.java on the host JDK 17:
#                 200,000 classes defined at run time, one instance each
# Measures, per snapshot: /usr/bin/time -f %M (ru_maxrss of the CLI as waited
# for by time: the kernel folds in the max RSS of the children the CLI reaped,
# i.e. the capture process; it is max(CLI, capture process), NOT their sum),
# and, from a poller reading /proc/PID/status every ~1 ms, VmHWM of the CLI and
# of each capture process, whose sum is the concurrent worst case. Prints a
# Markdown table on stdout; progress goes to stderr. Run as root.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${OOMSNAP_CACHE:-/var/cache/oomsnap}
OOMSNAP=${1:-$ROOT/build/oomsnap}
RUNS=${BENCH_RUNS:-3}
GOVER=${BENCH_GO:-1.26}
CLASSES=${BENCH_CLASSES:-200000}
IDLE_S=${BENCH_IDLE_S:-5}
GO=$CACHE/go/$GOVER/bin/go
GOFIX=$CACHE/fixtures/go/$GOVER/stripped/heapfixture
HOSTILE=$ROOT/tests/fixtures/hostile
PY=/usr/bin/python3
READY_TIMEOUT=${BENCH_READY_TIMEOUT:-300}
MOUNT=/sys/fs/cgroup/memory

die() { echo "bench-hostile-rss: error: $*" >&2; exit 1; }
log() { echo "bench-hostile-rss: $*" >&2; }

[ "$(id -u)" = 0 ] || die "run as root"
[ -x "$OOMSNAP" ] || die "oomsnap binary not found: $OOMSNAP"
[ -x /usr/bin/time ] || die "GNU time (/usr/bin/time) is required (apt-get install time)"
[ -x "$PY" ] || die "$PY is required"
[ -x "$GO" ] || die "Go $GOVER not found: $GO (tools/fetch-go-toolchains.sh $GOVER)"
[ -x "$GOFIX" ] || die "fixture not found: $GOFIX (tools/build-go-fixtures.sh $GOVER)"
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_RUNS must be a positive integer"

# shellcheck source=tools/lib/bench-common.sh
source "$ROOT/tools/lib/bench-common.sh"
bench_init bench-hostile-rss
# shellcheck source=tools/lib/bench-record.sh
source "$ROOT/tools/lib/bench-record.sh"
bench_record_init hostile-rss
AGENT= SCOPE=
cleanup_all() {
  set +e
  [ -n "$AGENT" ] && kill -TERM "$AGENT" 2>/dev/null && wait "$AGENT" 2>/dev/null
  [ -n "$SCOPE" ] && rmdir "$SCOPE" 2>/dev/null
  bench_cleanup
}
trap cleanup_all EXIT

# start_target NAME CMD...: start_fixture (tools/lib/bench-common.sh) with the
# ready line in $TMP/NAME.ready, which must name the pid started.
start_target() {
  local name=$1 line pid
  shift
  start_fixture "$TMP/$name.ready" "$@"
  line=$(head -n1 "$TMP/$name.ready")
  pid=$("$PY" -c 'import json,sys; print(json.loads(sys.argv[1])["pid"])' "$line")
  [ "$pid" = "$FIXTURE_PID" ] || die "$name: ready line pid $pid != started pid $FIXTURE_PID"
}

# The poller: VmHWM of every descendant of PID (time -> oomsnap -> capture
# processes) until PID exits; prints "comm:pid:hwm_kib ...".
cat > "$TMP/poll.py" <<'PY'
import os, sys, time, subprocess
# argv: OUT ERR CMD...: starts CMD (stdout OUT, stderr ERR) itself, so no
# short-lived run ends before the poller is up.
proc = subprocess.Popen(sys.argv[3:], stdout=open(sys.argv[1], "wb"), stderr=open(sys.argv[2], "wb"))
root = proc.pid; hwm = {}
def kids(pid):
    out = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            out += [int(x) for x in open(f"/proc/{pid}/task/{t}/children").read().split()]
    except OSError:
        pass
    return out
while proc.poll() is None:
    todo, seen = kids(root), []
    while todo:
        q = todo.pop(); seen.append(q); todo += kids(q)
    for q in seen:
        try:
            st = dict(l.split(":", 1) for l in open(f"/proc/{q}/status") if ":" in l)
            if "VmHWM" in st:
                h = int(st["VmHWM"].split()[0])
                name = st["Name"].strip().replace(" ", "_")
                if h > hwm.get(q, ("", 0))[1]: hwm[q] = (name, h)
        except (OSError, ValueError):
            pass
    time.sleep(0.001)
print(" ".join(f"{n}:{p}:{h}" for p, (n, h) in sorted(hwm.items())))
PY

# measure NAME CLAIM [SNAPSHOT ARGS...]: RUNS snapshots of $FIXTURE_PID; one
# table row. Columns: status (+reason), %M median (min-max), CLI VmHWM,
# capture process VmHWM, their sum, wall median.
rows=() details=()
measure() {
  local name=$1 claim=$2 i out status reason pm wall rc polled; shift 2
  : > "$TMP/$name.maxrss"; : > "$TMP/$name.wall"; : > "$TMP/$name.parent"; : > "$TMP/$name.child"; : > "$TMP/$name.sum"
  for ((i = 0; i < RUNS; i++)); do
    out=$TMP/$name.$i.json
    polled=$("$PY" "$TMP/poll.py" "$out" "$TMP/$name.$i.err" \
      /usr/bin/time -f '%M %e %x' -o "$TMP/time.out" "$OOMSNAP" snapshot --pid "$FIXTURE_PID" "$@")
    read -r pm wall rc < <(grep -v '^Command' "$TMP/time.out" | tail -n1)
    echo "$pm" >> "$TMP/$name.maxrss"; echo "$wall" >> "$TMP/$name.wall"
    "$PY" - "$polled" "$TMP/$name" <<'PY'
import sys
par = child = 0
for item in sys.argv[1].split():
    n, p, h = item.rsplit(":", 2)
    if n == "oomsnap": par = max(par, int(h))
    elif n.startswith("oomsnap"): child = max(child, int(h))  # oomsnap-capture
open(sys.argv[2] + ".parent", "a").write(f"{par}\n")
open(sys.argv[2] + ".child", "a").write(f"{child}\n")
open(sys.argv[2] + ".sum", "a").write(f"{par + child}\n")
PY
    if [ "${1:-}" = --format ] && [ "${2:-}" = pprof ]; then
      if [ "$rc" = 0 ]; then status=complete reason=; else status=failed reason=$(tr '\n' ' ' < "$TMP/$name.$i.err"); fi
    else
      read -r status reason < <("$PY" -c '
import json, sys
try:
    s = json.load(open(sys.argv[1]))["snapshot"]
except Exception as e:
    print("no-output", open(sys.argv[2]).read().strip().replace("\n", " ")); sys.exit()
print(s.get("status"), (s.get("reason") or "").replace("\n", " "))' "$out" "$TMP/$name.$i.err")
    fi
    log "$name run $((i + 1))/$RUNS: %M ${pm} KiB, wall ${wall} s, $status${reason:+ ($reason)}; polled VmHWM: $polled"
  done
  local med par ch sum wmed
  med=$(median "$TMP/$name.maxrss"); par=$(median "$TMP/$name.parent"); ch=$(median "$TMP/$name.child")
  sum=$(median "$TMP/$name.sum"); wmed=$(median "$TMP/$name.wall")
  bench_figure "$name: CLI + capture VmHWM" "$(awk -v s="$sum" 'BEGIN { printf "%.1f", s / 1024 }')" MiB
  bench_figure "$name: wall" "$wmed" s
  rows+=("$(awk -v n="$name" -v c="$claim" -v s="$status${reason:+: $reason}" -v m="$med" -v p="$par" -v ch="$ch" -v su="$sum" -v w="$wmed" \
    -v lo="$(sort -n "$TMP/$name.maxrss" | head -n1)" -v hi="$(sort -n "$TMP/$name.maxrss" | tail -n1)" \
    'BEGIN { printf "| %s | %s | %s | %.1f (%.1f-%.1f) | %.1f | %.1f | %.1f | %.2f |", n, c, s, m/1024, lo/1024, hi/1024, p/1024, ch/1024, su/1024, w }')")
}

# --- build the targets --------------------------------------------------------
log "crafting the ELF targets from $GOFIX"
"$PY" - "$GOFIX" "$TMP/large-elf" "$TMP/huge-symtab" <<'PY'
import struct, sys
src = open(sys.argv[1], "rb").read()
SH = "<IIQQQQIIQQ"  # Elf64_Shdr
def base():
    img = bytearray(src)
    while len(img) % 8: img.append(0)
    return img
# 1) ~61 MiB of section headers, extended numbering.
img = base()
n = 61 * 1024 * 1024 // 64          # 999,424 headers
shoff = len(img); shstr_off = shoff + n * 64
names = b"\0.gopclntab\0"
sh = bytearray(struct.pack(SH, 0, 1, 2, 0x400000, 0, 64, 0, 0, 8, 0) * n)
struct.pack_into(SH, sh, 0, 0, 0, 0, 0, 0, n, 1, 0, 0, 0)           # sh_size = count, sh_link = shstrndx
struct.pack_into(SH, sh, 64, 0, 3, 0, 0, shstr_off, len(names), 0, 0, 1, 0)
img += sh + names
struct.pack_into("<Q", img, 0x28, shoff); struct.pack_into("<HHH", img, 0x3a, 64, 0, 0xffff)
open(sys.argv[2], "wb").write(img)
# 2) .symtab and .strtab claiming 128 MiB each, file padded to ~64 MiB.
img = base()
pad_to = 64 * 1024 * 1024 - 4096
img += bytes(range(256)) * ((pad_to - len(img)) // 256)
while len(img) % 8: img.append(0)
shstr = b"\0.symtab\0.strtab\0.shstrtab\0"
shstr_off = len(img); img += shstr
while len(img) % 8: img.append(0)
shoff = len(img)
claim = 128 * 1024 * 1024
hdrs = [struct.pack(SH, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        struct.pack(SH, 1, 2, 0, 0, 4096, claim, 2, 1, 8, 24),          # .symtab -> link .strtab
        struct.pack(SH, 9, 3, 0, 0, 4096, claim, 0, 0, 1, 0),           # .strtab
        struct.pack(SH, 17, 3, 0, 0, shstr_off, len(shstr), 0, 0, 1, 0)]
img += b"".join(hdrs)
struct.pack_into("<Q", img, 0x28, shoff); struct.pack_into("<HHH", img, 0x3a, 64, len(hdrs), 3)
open(sys.argv[3], "wb").write(img)
PY
chmod +x "$TMP/large-elf" "$TMP/huge-symtab"

log "building the deep-names Go target (Go $GOVER, offline)"
mkdir -p "$TMP/deepnames"
"$PY" "$HOSTILE/gen_deepnames.py" "$TMP/deepnames/main.go" 4096 3000 20000 16
(cd "$TMP/deepnames" && env -u GOFLAGS -u GOROOT -u GOPATH GOTOOLCHAIN=local GOPROXY=off GO111MODULE=off \
  CGO_ENABLED=0 GOCACHE="$TMP/gocache" "$GO" build -o deepnames main.go) || die "go build failed"

if [ "$CLASSES" != 0 ]; then
  command -v javac >/dev/null && command -v java >/dev/null || die "java/javac missing (openjdk-17-jdk-headless), or BENCH_CLASSES=0"
  log "compiling ManyClasses"
  mkdir -p "$TMP/java"
  javac -nowarn -encoding UTF-8 -d "$TMP/java" "$HOSTILE/ManyClasses.java" 2> "$TMP/javac.err" || { cat "$TMP/javac.err" >&2; die "javac failed"; }
fi

# --- idle -----------------------------------------------------------------------
log "idle: snapshot of sleep"
start_target idle sh -c 'echo "{\"pid\":$$,\"ready\":true}"; exec sleep 3600'
measure idle "trivial process (sleep)"
stop_fixture
idle_med=$(median "$TMP/idle.maxrss"); idle_sum=$(median "$TMP/idle.sum")

# --- targets ---------------------------------------------------------------------
start_target large-elf "$TMP/large-elf"
measure large-elf "Go exe, 63 MiB, 999,424 section headers"
stop_fixture
start_target huge-symtab "$TMP/huge-symtab"
measure huge-symtab "Go exe, .symtab + .strtab claiming 128 MiB each"
stop_fixture
start_target deep-names "$TMP/deepnames/deepnames"
measure deep-names "Go, 20k stacks 3000 deep, 4 KiB names (json)"
measure deep-names-pprof "same, --format pprof" --format pprof -o /dev/null
stop_fixture
for k in list tuple dict; do
  start_target "py-$k" "$PY" "$HOSTILE/claim_items.py" "$k" 10000000
  measure "py-$k" "CPython 3.11 $k claiming 10M items"
  stop_fixture
done
if [ "$CLASSES" != 0 ]; then
  log "java-classes: defining $CLASSES classes (takes a while)"
  start_target java-classes java -XX:+UseG1GC -Xmx1g -XX:-UsePerfData -cp "$TMP/java" ManyClasses "$CLASSES"
  measure java-classes "JDK 17 G1, $CLASSES classes defined at run time"
  stop_fixture
fi

# --- idle agent --------------------------------------------------------------------
agent_rss="n/a"
own=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
if [ -d "$MOUNT" ] && [ -n "$own" ]; then
  SCOPE_REL=${own%/}/oomsnap-hostile-rss-$$
  SCOPE=$MOUNT$SCOPE_REL
  mkdir "$SCOPE"
  printf '[storage]\nLocalFile = false\n[cgroup]\nScope = "%s"\n' "$SCOPE_REL" > "$TMP/agent.toml"
  "$OOMSNAP" watch --config "$TMP/agent.toml" > "$TMP/agent.jsonl" 2> "$TMP/agent.log" &
  AGENT=$!
  for _ in $(seq 200); do grep -q "ready:" "$TMP/agent.log" && break; sleep 0.05; done
  grep -q "ready:" "$TMP/agent.log" || { cat "$TMP/agent.log" >&2; die "agent did not start"; }
  sleep "$IDLE_S"
  a_rss=$(awk '/^VmRSS/ {print $2}' "/proc/$AGENT/status"); a_hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$AGENT/status")
  h_rss=0
  for c in $(cat /proc/"$AGENT"/task/*/children 2>/dev/null); do
    h_rss=$((h_rss + $(awk '/^VmRSS/ {print $2}' "/proc/$c/status" 2>/dev/null || echo 0)))
  done
  kill -TERM "$AGENT"; wait "$AGENT" 2>/dev/null || true; AGENT=
  rmdir "$SCOPE"; SCOPE=
  agent_rss=$(awk -v r="$a_rss" -v h="$a_hwm" -v c="$h_rss" 'BEGIN { printf "%.1f MiB (peak %.1f) + waiting capture process %.1f MiB = %.1f MiB", r/1024, h/1024, c/1024, (r+c)/1024 }')
  agent_sum_kib=$((a_rss + h_rss))
fi

echo "Peak memory of \`oomsnap snapshot --pid PID\` on hostile targets — median of $RUNS runs; $(nproc) CPUs, $(uname -r), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "| target | what it claims | snapshot status (reason) | peak RSS MiB, time %M (min-max) | CLI VmHWM MiB | capture process VmHWM MiB | CLI + capture MiB | wall s |"
echo "|---|---|---|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
echo
echo "- %M is ru_maxrss as GNU time sees it: the largest of the CLI and the capture processes it reaped, not their sum; CLI + capture is the sum of both VmHWMs (polled every ~1 ms, a lower bound of each peak), the worst case if both peaked together."
echo "- Idle: snapshot of sleep $(awk -v a="$idle_med" -v b="$idle_sum" 'BEGIN { printf "%.1f MiB (%%M), %.1f MiB (CLI + capture)", a/1024, b/1024 }'); idle agent \`oomsnap watch\` (empty scope, after ${IDLE_S}s): $agent_rss."
echo "- Above idle (CLI + capture minus the idle snapshot's CLI + capture; target < 64 MiB):"
for r in "${rows[@]}"; do
  n=$(echo "$r" | awk -F'|' '{gsub(/ /,"",$2); print $2}')
  [ "$n" = idle ] && continue
  s=$(median "$TMP/$n.sum")
  awk -v n="$n" -v s="$s" -v i="$idle_sum" 'BEGIN { d=(s-i)/1024; printf "  - %s: %+.1f MiB%s\n", n, d, (d >= 64 ? " — OVER the 64 MiB target" : "") }'
done
bench_record_write
