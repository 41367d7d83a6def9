#!/usr/bin/env bash
# Benchmark driver (not a test): how long `oomsnap snapshot` takes on a ~1 GiB
# G1, Serial or Parallel heap and how long the target stalls during it (safepoints), next to
# `jcmd PID GC.class_histogram -all` on the same JVM (its GC_HeapInspection
# safepoint pause), for several JDKs side by side. The target: our snapshot
# adds no safepoint at all (0 ms pause), and the full walk of 1 GiB is under 2 s.
#
# Usage: tools/bench-java-snapshot.sh [OOMSNAP_BINARY]     (default: build/oomsnap)
# Env:   BENCH_RUNS     snapshot runs and jcmd runs per JDK (median) (default 7)
#        BENCH_JDKS     JDKs to run (default "17"; supported: 8 11 17 21 25 26)
#        BENCH_GCS      collectors to run on each JDK (default "g1"; supported:
#                       g1 serial parallel)
#        BENCH_MARKERS  fixture --markers (default 16000000)
#        BENCH_ARRAYS   fixture --int-arrays, --long-arrays and --object-arrays
#                       each (default 1000000)
#        OOMSNAP_CACHE  fixture cache root (default /var/cache/oomsnap)
# 17 is the host's /usr/lib/jvm/java-17-openjdk-amd64; 21 and 25 run from
# $OOMSNAP_CACHE/rootfs/trixie-jdk (tools/fetch-python-rootfs.sh trixie-jdk), 8,
# 11 and 26 from $OOMSNAP_CACHE/rootfs/sid-jdk, in a private mount namespace
# under chroot, as tests/integration/java_snapshot_test.cpp does, and are read
# with that rootfs's jcmd (8's and 11's run inside the JVM's mount namespace,
# where their attach socket is). JDK 8 has no -Xlog and JDK 11's safepoint
# log has no per-safepoint "Safepoint \"...\", Total" lines: on both the
# safepoints are not logged, and the safepoint columns say n/a. The
# fixture ($OOMSNAP_CACHE/fixtures/java, tools/build-java-fixtures.sh) runs with
# -XX:+UseG1GC (or the collector of BENCH_GCS) -Xms2g -Xmx2g
# -Xlog:safepoint:stderr:uptime: with the G1 defaults
# its live heap is ~1006 MiB (19.1M objects, ~910 MiB of it in non-humongous
# regions, under the 1 GiB full-walk budget). It prints one JSON line when
# ready, then sleeps until killed. The JVM's stderr (the safepoint log) goes to
# a file; the safepoint lines that appear in it while a command runs are that
# command's window. Each snapshot is `oomsnap snapshot --pid PID
# --max-entries 20 --budget-ms 30000`; its status must be "complete". Prints a
# Markdown table on stdout; progress goes to stderr.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${OOMSNAP_CACHE:-/var/cache/oomsnap}
OOMSNAP=${1:-$ROOT/build/oomsnap}
RUNS=${BENCH_RUNS:-7}
JDKS=${BENCH_JDKS:-17}
GCS=${BENCH_GCS:-g1}
MARKERS=${BENCH_MARKERS:-16000000}
ARRAYS=${BENCH_ARRAYS:-1000000}
FIXTURES=$CACHE/fixtures/java
JDK_ROOTFS=$CACHE/rootfs/trixie-jdk
SID_JDK_ROOTFS=$CACHE/rootfs/sid-jdk
READY_TIMEOUT=${BENCH_READY_TIMEOUT:-300}
FIXTURE_ARGS=(--markers "$MARKERS" --int-arrays "$ARRAYS" --long-arrays "$ARRAYS" --object-arrays "$ARRAYS")
# The helpers below run the system interpreter: a python3 found first on PATH
# may be a slow version-manager shim (~0.5 s a call).
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3 || true)

die() { echo "bench-java-snapshot: error: $*" >&2; exit 1; }
log() { echo "bench-java-snapshot: $*" >&2; }

# rootfs_of VERSION: the chroot holding that JDK ("" = host).
rootfs_of() {
  case "$1" in
    17) echo "" ;;
    21|25) echo "$JDK_ROOTFS" ;;
    8|11|26) echo "$SID_JDK_ROOTFS" ;;
    *) return 1 ;;
  esac
}

# fixtures_of VERSION: the fixture's class files (--release 8 for 8 and 11).
fixtures_of() { if [ "$1" -lt 17 ]; then echo "$CACHE/fixtures/java8"; else echo "$FIXTURES"; fi; }

# jvm_opts VERSION GC: the JVM's options.
jvm_opts() {
  local flag
  case "$2" in
    g1) flag=-XX:+UseG1GC ;;
    serial) flag=-XX:+UseSerialGC ;;
    parallel) flag=-XX:+UseParallelGC ;;
  esac
  echo "$flag -Xms2g -Xmx2g -XX:-UsePerfData"
  [ "$1" -lt 17 ] || echo "-Xlog:safepoint:stderr:uptime"
}

# jdk_exec VERSION TOOL ARGS...: exec TOOL (java, jcmd) of that JDK, on the
# host or chroot'ed into its rootfs inside a private mount namespace (proc; for
# java also a private tmpfs /tmp for the attach socket and the fixture classes
# bound read-only on /mnt), whose mounts die with the process; the pid stays
# the tool's (exec all the way).
jdk_exec() {
  local v=$1 tool=$2 root bin fixtures=
  shift 2
  root=$(rootfs_of "$v")
  bin=/usr/lib/jvm/java-$v-openjdk-amd64/bin/$tool
  [ -n "$root" ] || exec "$bin" "$@"
  [ "$tool" != java ] || fixtures=$(fixtures_of "$v")
  # JDK 8's and 11's jcmd find the attach socket in their own /tmp: in the
  # JVM's mount namespace (FIXTURE_PID's).
  if [ "$tool" = jcmd ] && [ "$v" -lt 17 ]; then
    exec /usr/bin/nsenter --mount --target "$FIXTURE_PID" /usr/sbin/chroot "$root" "$bin" "$@"
  fi
  # shellcheck disable=SC2016  # $1, $R, $F, $@ expand in the inner sh
  exec /usr/bin/unshare -m --propagation private /bin/sh -c 'R=$1; F=$2; shift 2; mount -t proc proc "$R/proc" && if [ -n "$F" ]; then mount -t tmpfs tmpfs "$R/tmp" && mount -o bind,ro "$F" "$R/mnt"; fi && exec chroot "$R" /usr/bin/env -C /tmp "$@"' \
    sh "$root" "$fixtures" "$bin" "$@"
}

[ -x "$OOMSNAP" ] || die "oomsnap binary not found: $OOMSNAP (build it with tools/build.sh, or pass its path)"
[ -r "$FIXTURES/HeapFixture.class" ] || die "Java fixture not found in $FIXTURES (run tools/build-java-fixtures.sh)"
[ -n "$PY" ] || die "python3 is required"
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_RUNS must be a positive integer"
[[ "$MARKERS" =~ ^[0-9]+$ ]] || die "BENCH_MARKERS must be a non-negative integer"
[[ "$ARRAYS" =~ ^[0-9]+$ ]] || die "BENCH_ARRAYS must be a non-negative integer"
[ -n "${JDKS// /}" ] || die "BENCH_JDKS is empty"
for v in $JDKS; do
  root=$(rootfs_of "$v") || die "unsupported JDK in BENCH_JDKS: $v (supported: 8 11 17 21 25 26)"
  for tool in java jcmd; do
    [ -x "$root/usr/lib/jvm/java-$v-openjdk-amd64/bin/$tool" ] || {
      [ -z "$root" ] && die "JDK $v $tool not found on the host (apt-get install openjdk-$v-jdk-headless)"
      die "JDK $v $tool not found in $root (run tools/fetch-python-rootfs.sh $(basename "$root"))"
    }
  done
  [ -z "$root" ] || [ "$(id -u)" = 0 ] || die "JDK $v runs in a private mount namespace under chroot: run as root"
done

for gc in $GCS; do
  case "$gc" in g1|serial|parallel) ;; *) die "unsupported collector in BENCH_GCS: $gc (supported: g1 serial parallel)" ;; esac
done

# shellcheck source=tools/lib/bench-common.sh
source "$ROOT/tools/lib/bench-common.sh"
bench_init bench-java-snapshot
# shellcheck source=tools/lib/bench-record.sh
source "$ROOT/tools/lib/bench-record.sh"
bench_record_init java-snapshot

# med FILE: median() from bench-common.sh, with $PY's python3 first on PATH.
med() { PATH="$(dirname "$PY"):$PATH" median "$1"; }

# spread FILE: "min-max" of the numbers in FILE, one per line.
spread() {
  "$PY" -c 'import sys; v=[float(l) for l in open(sys.argv[1]) if l.strip()]; print("%.1f-%.1f" % (min(v), max(v)))' "$1"
}

# ms_since T0: milliseconds from $EPOCHREALTIME value T0 to now.
ms_since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f\n", (b - a) * 1000 }'; }

# sp_count LOG: how many safepoint lines LOG holds (it only grows).
sp_count() { grep -c 'Safepoint "' "$1" || true; }

# sp_lines LOG FROM TO: safepoint lines FROM+1..TO of LOG (a command's window).
sp_lines() { grep 'Safepoint "' "$1" | sed -n "$(($2 + 1)),$3p" || true; }

# sp_summary FILE [NAME]: "count total_ms at_safepoint_ms names" of the
# safepoint lines in FILE (only those of NAME if given); names is
# "name@uptime,..." or "none" ([7.4s] Safepoint "G1CollectFull", ...,
# At safepoint: N ns, ..., Total: N ns).
sp_summary() {
  "$PY" - "$1" "${2:-}" <<'PY'
import re, sys
n, total, at, names = 0, 0, 0, []
for line in open(sys.argv[1]):
    m = re.search(r'Safepoint "([^"]+)"', line)
    if not m or (sys.argv[2] and m.group(1) != sys.argv[2]):
        continue
    t = re.search(r"Total: (\d+) ns", line)
    a = re.search(r"At safepoint: (\d+) ns", line)
    up = re.match(r"\[([0-9.]+s)\]", line)
    n += 1
    total += int(t.group(1)) if t else 0
    at += int(a.group(1)) if a else 0
    names.append(m.group(1) + ("@" + up.group(1) if up else ""))
print(n, "%.3f" % (total / 1e6), "%.3f" % (at / 1e6), ",".join(names) or "none")
PY
}

rows=() notes=() targets=()
# One JVM per JDK and collector (k names its files).
for v in $JDKS; do
for gc in $GCS; do
  k=$v.$gc
  root=$(rootfs_of "$v")
  splog=$TMP/jvm.$k.err
  log "JDK $v $gc: starting HeapFixture ${FIXTURE_ARGS[*]}${root:+ (chroot $root)}"
  # The coprocess execs the JVM (via unshare, sh, chroot and env for a rootfs
  # JDK): its pid is the fixture's. Its stdout is our pipe (the ready line is
  # its first line); its stderr, the safepoint log, goes to $splog.
  if [ -z "$root" ]; then
    coproc FIX { exec 2>"$splog"; jdk_exec "$v" java $(jvm_opts "$v" "$gc") -cp "$(fixtures_of "$v")" HeapFixture "${FIXTURE_ARGS[@]}"; }
  else
    coproc FIX { exec 2>"$splog"; jdk_exec "$v" java $(jvm_opts "$v" "$gc") -cp /mnt HeapFixture "${FIXTURE_ARGS[@]}"; }
  fi
  FIXTURE_PID=$FIX_PID
  fd=${FIX[0]:-}
  [ -n "$fd" ] || { cat "$splog" >&2; die "JDK $v $gc fixture exited at once"; }
  line=
  if ! read -r -t "$READY_TIMEOUT" line <&"$fd"; then
    cat "$splog" >&2
    kill -0 "$FIXTURE_PID" 2>/dev/null || die "JDK $v $gc fixture exited before its ready line"
    die "JDK $v $gc fixture not ready after ${READY_TIMEOUT}s"
  fi
  read -r line_pid version <<<"$("$PY" -c '
import json, sys
d = json.loads(sys.argv[1])
print(d["pid"], d["java_version"])' "$line")"
  [ "$line_pid" = "$FIXTURE_PID" ] || die "ready line pid $line_pid != started pid $FIXTURE_PID"
  # Let the JIT compiler threads started by the set-up settle first.
  sleep 1
  log "JDK $v $gc: ready (Java $version, $(sp_count "$splog") safepoints so far); $RUNS snapshot runs"

  # (1) Our snapshots, each with the safepoint lines logged while it ran.
  : > "$TMP/snap_ms.$k"; : > "$TMP/wall_ms.$k"; : > "$TMP/syscalls.$k"; : > "$TMP/mib.$k"
  : > "$TMP/used.$k"; : > "$TMP/objects.$k"; : > "$TMP/snap_sp.$k"
  for ((i = 0; i < RUNS; i++)); do
    json=$TMP/snap.$k.$i.json
    before=$(sp_count "$splog")
    t0=$EPOCHREALTIME
    if ! "$OOMSNAP" snapshot --pid "$FIXTURE_PID" --max-entries 20 --budget-ms 30000 >"$json" 2>"$TMP/err"; then
      cat "$TMP/err" >&2
      die "oomsnap snapshot failed on JDK $v (pid $FIXTURE_PID)"
    fi
    ms_since "$t0" >> "$TMP/wall_ms.$k"
    after=$(sp_count "$splog")
    sp_lines "$splog" "$before" "$after" > "$TMP/sp_window"
    cat "$TMP/sp_window" >> "$TMP/snap_sp.$k"
    read -r status dur syscalls bytes used objects <<<"$("$PY" -c '
import json, sys
s = json.load(open(sys.argv[1]))["snapshot"]
t = s.get("totals", {})
print(s.get("status"), s.get("duration_ms"), s.get("read_syscalls"), s.get("bytes_read"),
      t.get("used_bytes", 0), t.get("objects", 0))' "$json")"
    if [ "$status" != complete ]; then
      cat "$json" >&2
      die "JDK $v $gc run $((i + 1)): snapshot status is $status, not complete (a \"sampled walk\" reason means the heap is over the 1 GiB walk budget: lower BENCH_MARKERS/BENCH_ARRAYS)"
    fi
    echo "$dur" >> "$TMP/snap_ms.$k"
    echo "$syscalls" >> "$TMP/syscalls.$k"
    awk -v b="$bytes" 'BEGIN { printf "%.3f\n", b / 1048576 }' >> "$TMP/mib.$k"
    awk -v b="$used" 'BEGIN { printf "%.3f\n", b / 1048576 }' >> "$TMP/used.$k"
    echo "$objects" >> "$TMP/objects.$k"
    read -r n _ _ names <<<"$(sp_summary "$TMP/sp_window")"
    log "JDK $v $gc: snapshot $((i + 1))/$RUNS: ${dur} ms (wall $(tail -n1 "$TMP/wall_ms.$k") ms), $syscalls read syscalls, $n safepoint(s) meanwhile$([ "$names" = none ] || echo " ($names)")"
  done
  used_mib=$(med "$TMP/used.$k")
  awk -v m="$used_mib" 'BEGIN { exit !(m >= 0.9 * 1024 && m <= 1.1 * 1024) }' \
    || log "warning: JDK $v heap in use is $used_mib MiB, not 0.9-1.1 GiB (tune BENCH_MARKERS/BENCH_ARRAYS)"

  # (2) jcmd GC.class_histogram -all (no full GC first): its wall time and the
  # GC_HeapInspection safepoint logged while it ran (written when the
  # safepoint ends, before jcmd gets its answer; waited for a little anyway).
  log "JDK $v $gc: $RUNS jcmd GC.class_histogram -all runs"
  : > "$TMP/jcmd_ms.$k"; : > "$TMP/jcmd_pause.$k"; : > "$TMP/jcmd_at.$k"; : > "$TMP/jcmd_sp.$k"
  for ((i = 0; i < RUNS; i++)); do
    out=$TMP/jcmd.$k.$i.txt
    before=$(sp_count "$splog")
    t0=$EPOCHREALTIME
    if ! (jdk_exec "$v" jcmd -J-XX:-UsePerfData "$FIXTURE_PID" GC.class_histogram -all) >"$out" 2>&1; then
      cat "$out" >&2
      die "jcmd GC.class_histogram failed on JDK $v (pid $FIXTURE_PID)"
    fi
    ms_since "$t0" >> "$TMP/jcmd_ms.$k"
    grep -qF "HeapFixture\$Marker" "$out" || { cat "$out" >&2; die "JDK $v: jcmd printed no histogram with HeapFixture\$Marker"; }
    if [ "$v" -lt 17 ]; then
      log "JDK $v $gc: jcmd $((i + 1))/$RUNS: wall $(tail -n1 "$TMP/jcmd_ms.$k") ms (no safepoint log before JDK 17)"
      continue
    fi
    deadline=$((SECONDS + 5))
    until sp_lines "$splog" "$before" "$(sp_count "$splog")" | grep -q '"GC_HeapInspection"'; do
      [ $SECONDS -lt $deadline ] || die "JDK $v: no GC_HeapInspection safepoint logged for jcmd run $((i + 1))"
      sleep 0.05
    done
    sp_lines "$splog" "$before" "$(sp_count "$splog")" > "$TMP/sp_window"
    cat "$TMP/sp_window" >> "$TMP/jcmd_sp.$k"
    read -r _ pause at _ <<<"$(sp_summary "$TMP/sp_window" GC_HeapInspection)"
    echo "$pause" >> "$TMP/jcmd_pause.$k"
    echo "$at" >> "$TMP/jcmd_at.$k"
    log "JDK $v $gc: jcmd $((i + 1))/$RUNS: wall $(tail -n1 "$TMP/jcmd_ms.$k") ms, GC_HeapInspection pause $pause ms (at safepoint $at ms)"
  done

  snap_ms=$(med "$TMP/snap_ms.$k")
  wall_ms=$(med "$TMP/wall_ms.$k")
  syscalls=$(med "$TMP/syscalls.$k")
  mib=$(med "$TMP/mib.$k")
  objects=$(med "$TMP/objects.$k")
  jcmd_ms=$(med "$TMP/jcmd_ms.$k")
  jcmd_pause=n/a jcmd_at=n/a
  if [ -s "$TMP/jcmd_pause.$k" ]; then jcmd_pause=$(med "$TMP/jcmd_pause.$k"); jcmd_at=$(med "$TMP/jcmd_at.$k"); fi
  read -r sp_n sp_ms _ sp_names <<<"$(sp_summary "$TMP/snap_sp.$k")"
  read -r jsp_n _ _ jsp_names <<<"$(sp_summary "$TMP/jcmd_sp.$k")"
  ratio=$(awk -v a="$snap_ms" -v b="$jcmd_pause" 'BEGIN { if (b ~ /^[0-9.]+$/ && b > 0) printf "%.2f", a / b; else print "n/a" }')
  bench_figure "JDK $v $gc: snapshot duration_ms" "$snap_ms" ms
  bench_figure "JDK $v $gc: CLI wall" "$wall_ms" ms
  bench_figure "JDK $v $gc: walk speed" "$(awk -v m="$used_mib" -v t="$snap_ms" 'BEGIN { if (t > 0) printf "%.3f", m / 1024 / (t / 1000); else print "n/a" }')" GiB/s higher
  bench_figure "JDK $v $gc: snapshot/jcmd pause" "$ratio" x
  sp_col="$sp_n, $sp_ms"
  [ "$v" -ge 17 ] || sp_col=n/a
  rows+=("| $version | $gc | $(printf '%.0f' "$used_mib") | ${objects%.000} | $snap_ms | $wall_ms | ${syscalls%.000} | $(printf '%.1f' "$mib") | $sp_col | $jcmd_ms | $jcmd_pause | $ratio |")
  notes+=("- $version $gc: snapshot ms min-max $(spread "$TMP/snap_ms.$k"), CLI wall ms min-max $(spread "$TMP/wall_ms.$k"); jcmd wall ms min-max $(spread "$TMP/jcmd_ms.$k"), GC_HeapInspection pause ms min-max $([ -s "$TMP/jcmd_pause.$k" ] && spread "$TMP/jcmd_pause.$k" || echo n/a) (\"At safepoint\" median $jcmd_at ms); heap in use $(sort -u "$TMP/used.$k" | wc -l | tr -d ' ') distinct value(s) over the runs")
  notes+=("  - safepoints logged during our $RUNS snapshots: $sp_n (${sp_names//,/, }); during the $RUNS jcmd runs: $jsp_n (${jsp_names//,/, })")
  max_ms=$(spread "$TMP/snap_ms.$k"); max_ms=${max_ms#*-}
  if [ "$v" -lt 17 ]; then stall="safepoints not logged on this JDK";
  elif [ "$sp_n" = 0 ]; then stall="no safepoint during our snapshots"; else stall="$sp_n safepoint(s) during our snapshots, $sp_ms ms in all (see above)"; fi
  if awk -v m="$snap_ms" 'BEGIN { exit !(m < 2000) }'; then walk="under 2 s"; else walk="NOT under 2 s"; fi
  targets+=("$version $gc: $stall; full walk of $(printf '%.0f' "$used_mib") MiB $walk (median $snap_ms ms, slowest $max_ms ms)")

  kill -KILL "$FIXTURE_PID" 2>/dev/null || true
  wait "$FIXTURE_PID" 2>/dev/null || true
  FIXTURE_PID=
done
done

echo "oomsnap snapshot vs jcmd GC.class_histogram -all — HotSpot ($GCS, -Xms2g -Xmx2g) heap fixture, ${FIXTURE_ARGS[*]}, --max-entries 20, median of $RUNS runs each"
echo
echo "| JDK | GC | heap used MiB | objects | snapshot median ms | CLI wall median ms | read syscalls | MiB read | safepoints during snapshots (count, total ms) | jcmd wall median ms | jcmd safepoint pause median ms | snapshot/jcmd pause ratio |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
echo
echo "Heap used and objects are the snapshot's totals (used_bytes of the G1 regions in use, humongous included, or of the Serial/Parallel spaces; objects walked); snapshot ms is its own duration_ms, CLI wall ms the whole \`oomsnap snapshot\` command (process start, attach, JSON output). Safepoints during snapshots: the safepoint lines (-Xlog:safepoint) the JVM logged while our $RUNS snapshots ran, all runs together, and the sum of their \"Total\". jcmd safepoint pause: \"Total\" of the GC_HeapInspection safepoint logged during each jcmd run; jcmd wall includes its own JVM's start and the attach."
printf '%s\n' "${notes[@]}"
echo
echo "Target (no safepoint added, full walk of 1 GiB under 2 s):"
printf -- '- %s\n' "${targets[@]}"
echo
echo "Machine: $(nproc) CPUs, Linux $(uname -r) ($(uname -m)); $(date -u '+%Y-%m-%d %H:%M UTC')."
bench_record_write
