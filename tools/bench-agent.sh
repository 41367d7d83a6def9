#!/usr/bin/env bash
# Agent benchmark (issue #3), one run, figures side by side:
#   1. event-to-collection-start latency (kernel timestamp of the BPF
#      memcg-pressure event -> collection start), p50/p99 over many incidents,
#      and the capture's own duration (collection start -> snapshot complete),
#      with the capture process (the shipped build/oomsnap) and without it
#      (build/oomsnap-test-hooks with OOMSNAP_TEST_CAPTURE_IN_PROCESS=1: the
#      shipped agent has no such switch), side by side: what the sandbox costs;
#   2. the idle agent's CPU and RSS over IDLE_S seconds (default 60);
#   3. ring-buffer drops under a storm of STORM_N memcgs (default 100)
#      reclaiming at once.
# Every cgroup is created below this shell's own memory cgroup and removed.
# Usage: tools/bench-agent.sh   (env: OOMSNAP_BUILD, OOMSNAP_CACHE, IDLE_S, STORM_N, LAT_S)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tools/lib/bench-record.sh
. tools/lib/bench-record.sh
bench_record_init agent
BUILD=${OOMSNAP_BUILD:-build}
CACHE=${OOMSNAP_CACHE:-/var/cache/oomsnap}
BIN=$BUILD/oomsnap
HOOKS_BIN=$BUILD/oomsnap-test-hooks  # the same sources with the test hooks (userspace/cli/test_hooks.h)
FIX=$CACHE/fixtures/go/1.26/default/heapfixture
IDLE_S=${IDLE_S:-60}
STORM_N=${STORM_N:-100}
LAT_S=${LAT_S:-40}
[ "$(id -u)" = 0 ] || { echo "bench-agent: run as root" >&2; exit 1; }
[ -x "$BIN" ] || { echo "bench-agent: $BIN missing (tools/build.sh)" >&2; exit 1; }
[ -x "$HOOKS_BIN" ] || { echo "bench-agent: $HOOKS_BIN missing (tools/build.sh)" >&2; exit 1; }
[ -x "$FIX" ] || { echo "bench-agent: $FIX missing (tools/build-go-fixtures.sh 1.26)" >&2; exit 1; }

MOUNT=/sys/fs/cgroup/memory
[ -d "$MOUNT" ] || { echo "bench-agent: needs the cgroup v1 memory controller at $MOUNT" >&2; exit 1; }
OWN_REL=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
SCOPE_REL=${OWN_REL%/}/oomsnap-bench-$$
SCOPE=$MOUNT$SCOPE_REL
WORK=$(mktemp -d /var/tmp/oomsnap-bench.XXXXXX)  # disk-backed: page cache must be reclaimable
AGENT=
PIDS=()

cleanup() {
  set +e
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  [ -n "$AGENT" ] && kill -TERM "$AGENT" 2>/dev/null && wait "$AGENT" 2>/dev/null
  for d in $(find "$SCOPE" -mindepth 1 -type d 2>/dev/null | sort -r) "$SCOPE"; do
    for _ in $(seq 50); do
      for p in $(cat "$d/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
      rmdir "$d" 2>/dev/null && break
      sleep 0.1
    done
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir "$SCOPE"

# start_agent NAME CONFIG_TEXT [ARGS...]: the agent with records to $WORK/NAME.jsonl,
# run as "${AGENT_CMD[@]}" (the shipped binary unless a phase says otherwise).
AGENT_CMD=("$BIN")
start_agent() {
  local name=$1 config=$2; shift 2
  printf '%s\n[storage]\nLocalFile = false\n[cgroup]\nScope = "%s"\n' "$config" "$SCOPE_REL" > "$WORK/$name.toml"
  # Any free port: the HTTP endpoint runs as in production, never colliding
  # with another agent on this machine (tools/run.sh has the default port).
  "${AGENT_CMD[@]}" watch --config "$WORK/$name.toml" --http-listen=127.0.0.1:0 "$@" > "$WORK/$name.jsonl" 2> "$WORK/$name.log" &
  AGENT=$!
  for _ in $(seq 200); do grep -q "ready:" "$WORK/$name.log" && return 0; sleep 0.05; done
  echo "bench-agent: agent did not start:" >&2; cat "$WORK/$name.log" >&2; exit 1
}
stop_agent() {
  kill -TERM "$AGENT"; wait "$AGENT" || true; AGENT=
}
# in_cgroup DIR CMD...: runs CMD in the background inside the cgroup.
in_cgroup() {
  local dir=$1; shift
  sh -c 'echo 0 > "$0/cgroup.procs" && exec "$@"' "$dir" "$@" &
  PIDS+=($!)
}
# A page-cache reader: re-reads a file larger than its memcg's limit, so the
# memcg reclaims all the time. The file is written with O_DIRECT (not cached
# by whoever creates it) and its pages are clean: reclaim never stalls on
# writeback and never ends in an OOM kill.
CHURN='while :; do cat "$0" > /dev/null; done'
make_file() { dd if=/dev/zero of="$1" bs=1M count="$2" oflag=direct status=none; }
# Total CPU time (ns) of all the agent's threads.
cpu_ns() { cat /proc/"$AGENT"/task/*/schedstat | awk '{s += $1} END {printf "%d", s}'; }

echo "== 1. latency: BPF memcg-pressure event -> collection start (${LAT_S}s of incidents each, cooldown 0),"
echo "      with the capture process and in-process"
mkdir "$SCOPE/lat"
echo $((48 << 20)) > "$SCOPE/lat/memory.limit_in_bytes"
make_file "$WORK/lat.data" 96
in_cgroup "$SCOPE/lat" "$FIX"            # the victim: a Go program with a small known heap
in_cgroup "$SCOPE/lat" bash -c "$CHURN" "$WORK/lat.data"
LAT_CONFIG=$'IntervalTracing = 0\nNodeMaxCapturesPerMinute = 10000\nOomKillWindow = 0.05\n[triggers]\nBlacklist = ["threshold", "process_exit"]'
# Alternating halves, so both modes see the same machine load.
for half in 1 2; do
  start_agent "lat-sandbox-$half" "$LAT_CONFIG"; sleep $((LAT_S / 2)); stop_agent
  # env execs the agent, so $! is still the agent's pid.
  AGENT_CMD=(env OOMSNAP_TEST_CAPTURE_IN_PROCESS=1 "$HOOKS_BIN")
  start_agent "lat-inproc-$half" "$LAT_CONFIG"
  grep -q "captures IN THE AGENT" "$WORK/lat-inproc-$half.log" ||
    { echo "bench-agent: $HOOKS_BIN did not capture in-process:" >&2; cat "$WORK/lat-inproc-$half.log" >&2; exit 1; }
  sleep $((LAT_S / 2)); stop_agent
  AGENT_CMD=("$BIN")
done
for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; PIDS=()

echo "== 2. idle agent: CPU and RSS over ${IDLE_S}s (whole machine scope)"
printf '[storage]\nLocalFile = false\n' > "$WORK/idle.toml"
"$BIN" watch --config "$WORK/idle.toml" --http-listen=127.0.0.1:0 > "$WORK/idle.jsonl" 2> "$WORK/idle.log" &
AGENT=$!
for _ in $(seq 200); do grep -q "ready:" "$WORK/idle.log" && break; sleep 0.05; done
t0=$(cpu_ns); s0=$(date +%s.%N)
sleep "$IDLE_S"
t1=$(cpu_ns); s1=$(date +%s.%N)
rss_kib=$(awk '/^VmRSS/ {print $2}' "/proc/$AGENT/status")
hwm_kib=$(awk '/^VmHWM/ {print $2}' "/proc/$AGENT/status")
stop_agent
echo "$t0 $t1 $s0 $s1 $rss_kib $hwm_kib" > "$WORK/idle.txt"

echo "== 3. storm: $STORM_N memcgs (8 MiB limit each, 16 MiB file each) reclaiming at once for 10s"
start_agent storm $'IntervalTracing = 300\n[triggers]\nBlacklist = ["process_exit"]'
for i in $(seq "$STORM_N"); do
  make_file "$WORK/s$i.data" 16
  mkdir "$SCOPE/s$i"
  echo $((8 << 20)) > "$SCOPE/s$i/memory.limit_in_bytes"
done
sleep 2.5  # the agent's rescan picks the new cgroups up
for i in $(seq "$STORM_N"); do in_cgroup "$SCOPE/s$i" bash -c "$CHURN" "$WORK/s$i.data"; done
sleep 10
for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; PIDS=()
stop_agent

python3 - "$WORK" "$STORM_N" "${BENCH_FIGURES:-/dev/null}" <<'EOF'
import json, re, sys, statistics
work, storm_n = sys.argv[1], int(sys.argv[2])
figures = open(sys.argv[3], "a")
def figure(name, value, unit, better="lower"):
    figures.write(f"{name}\t{value:.3f}\t{unit}\t{better}\n")
def pct(v, p):
    v = sorted(v); k = (len(v) - 1) * p / 100; f = int(k); c = min(f + 1, len(v) - 1)
    return v[f] + (v[c] - v[f]) * (k - f)
def latencies(mode):
    lat, wake, queue, capture = [], [], [], []
    for half in (1, 2):
        for line in open(f"{work}/lat-{mode}-{half}.jsonl"):
            r = json.loads(line); tl = r["timeline"]
            if r["trigger"]["type"] != "memcg_pressure" or "collection_start_ns" not in tl: continue
            lat.append((tl["collection_start_ns"] - tl["trigger_ns"]) / 1e6)
            wake.append((tl["received_ns"] - tl["trigger_ns"]) / 1e6)
            queue.append((tl["collection_start_ns"] - tl["decided_ns"]) / 1e6)
            if "snapshot_complete_ns" in tl and r["collection"]["status"] == "collected":
                capture.append((tl["snapshot_complete_ns"] - tl["collection_start_ns"]) / 1e6)
    return lat, wake, queue, capture
lat, wake, queue, capture = latencies("sandbox")
lat_ip, _, _, capture_ip = latencies("inproc")
t0, t1, s0, s1, rss, hwm = open(f"{work}/idle.txt").read().split()
cpu = (int(t1) - int(t0)) / 1e9 / (float(s1) - float(s0)) * 100
stopped = [l for l in open(f"{work}/storm.log") if "stopped:" in l][-1]
counters = json.loads(stopped[stopped.index("{"):])
print()
print("| measure | result | target |")
print("| --- | --- | --- |")
if lat:
    print(f"| event -> collection start, p50 / p99 (n={len(lat)}) | {pct(lat,50):.2f} / {pct(lat,99):.2f} ms | p99 < 10 ms |")
    print(f"| of which event -> agent wakeup, p50 / p99 | {pct(wake,50):.3f} / {pct(wake,99):.3f} ms | |")
    print(f"| of which decision -> collection start (queue, victim choice), p50 / p99 | {pct(queue,50):.3f} / {pct(queue,99):.3f} ms | |")
else:
    print("| event -> collection start | no incidents recorded | p99 < 10 ms |")
if lat_ip:
    print(f"| event -> collection start, in-process capture, p50 / p99 (n={len(lat_ip)}) | {pct(lat_ip,50):.2f} / {pct(lat_ip,99):.2f} ms | |")
if capture and capture_ip:
    c, ci = statistics.median(capture), statistics.median(capture_ip)
    print(f"| capture (collection start -> snapshot complete), median: capture process / in-process (n={len(capture)} / {len(capture_ip)}) | {c:.2f} / {ci:.2f} ms | |")
    print(f"| added cost per capture of the capture process, median | {c - ci:.2f} ms | < 5 ms |")
print(f"| idle agent CPU over {float(s1)-float(s0):.0f} s | {cpu:.3f} % of a core | < 0.1 % |")
if lat:
    figure("event -> collection start p50", pct(lat, 50), "ms")
    figure("event -> collection start p99", pct(lat, 99), "ms")
if capture and capture_ip:
    figure("capture, capture process", statistics.median(capture), "ms")
    figure("capture, in-process", statistics.median(capture_ip), "ms")
figure("idle agent CPU", cpu, "% of a core")
figure("idle agent RSS", int(rss) / 1024, "MiB")
figure("ring-buffer drops", counters["bpf_ring_drops"], "events")
print(f"| idle agent RSS (peak) | {int(rss)/1024:.1f} MiB ({int(hwm)/1024:.1f} MiB) | < 30 MiB |")
print(f"| ring-buffer drops, {storm_n} memcgs reclaiming | {counters['bpf_ring_drops']} "
      f"(events {counters['events']}, suppressed in BPF {counters['pressure_events_suppressed']}) | 0 |")
EOF
bench_record_write
