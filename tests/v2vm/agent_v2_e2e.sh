#!/bin/bash
# Runs INSIDE the cgroup-v2 guest of ../shared/v2vm/run-in-v2vm.sh (see README.md here):
# `oomsnap watch` end to end on cgroup v2 with real Go leakers.
#
#   agent_v2_e2e.sh OUTDIR [OOMSNAP_BINARY] [HEAPFIXTURE]
#
# Environment: V2E2E_PHASES (default "1 2 3") picks phases (older kernels in the
# ctest matrix run phase 3 only); V2E2E_BPF_MODE (auto|raw_tp|tracepoint) is passed
# to the agent as --bpf-mode.
#
# OUTDIR must be writable from the guest (run-in-v2vm.sh -w OUTDIR). The script only
# runs the scenarios and saves what happened; the JSON records are checked on the host
# (tests/integration/agent_v2vm_test.cpp). Per phase it writes OUTDIR/phaseN/:
#   agent.toml  records.jsonl (the agent's stdout: one record per line)  agent.log
#   holder.out leaker.out (the fixtures' ready lines)  facts.env (pids, inode, exit
#   statuses, memory.events, timings: KEY=VALUE lines)
# and prints scenario-level PASS/FAIL lines plus every record; exit status 0 only when
# every scenario step worked (the record contents are judged by the host test).
#
# Phase 1 (memory.events + the -1000 rule): box memory.max 64M, memory.high 58M, no swap.
#   A "holder" (oom_score_adj -1000) takes 30 MiB, then a leaker grows at 4 MiB/s. The
#   agent (triggers: memory.events only; memcg_pressure and psi blacklisted) must be
#   triggered by the "high" counter and snapshot the leaker, not the bigger holder. The
#   throttled leaker keeps growing (the throttling above memory.high only slows it: ~8 s
#   from 58M to 64M here) until the kernel OOM-kills it at memory.max (the holder is
#   exempt), which the record must report as the kill of its victim, with the real lead.
#   Bounded: if the leaker still lives T_NATURAL s after the collection, memory.high is
#   lifted (noted as high_lifted=1 in facts.env) so it runs into memory.max at once.
# Phase 2 (PSI): fresh box with memory.high 52M (long throttling, no kill within the
#   phase), same pair; memory.events, threshold and memcg_pressure blacklisted. The
#   leaker is throttled above memory.high (memory "some" stall) and the agent's PSI
#   trigger on the box's memory.pressure must fire.
# Phase 3 (group kill, as Kubernetes sets up every container on cgroup v2): box
#   memory.max 96M, no memory.high, memory.oom.group 1; a Go holder (20 MiB), a
#   `sleep`, a CPython process (the Python heap fixture, small) and a Go leaker
#   (2 MiB/s); the agent at its defaults. One OOM event kills all four: exactly one
#   record must carry it, with every killed pid once, the leaker's snapshot and the
#   holder's and the Python process's in other_processes (MaxProcessesPerIncident 3).
# Phase 4 (the last gasp of a group kill; 5.17+ kernels): box memory.max 128M, no
#   memory.high, memory.oom.group 1; two Go fixtures at MemProfileRate 1 (a holder,
#   and a burster that allocates 512 MiB in one go on SIGUSR1); every trigger but the
#   kill blacklisted, so no snapshot comes before it. Both are armed; the burst's
#   group kill must give one record with both heap profiles read at the kill.
set -u

OUT=${1:?usage: $0 OUTDIR [OOMSNAP_BINARY] [HEAPFIXTURE]}
BIN=${2:-${OOMSNAP_BINARY:-$(dirname "$(realpath "$0")")/../../build/oomsnap}}
FX=${3:-/var/cache/oomsnap/fixtures/go/1.26/default/heapfixture}
PY=/usr/bin/python3.11
PYFX=$(dirname "$(realpath "$0")")/../fixtures/python/heapfixture.py
CG=/sys/fs/cgroup/oomsnap-v2test
BOX=$CG/box
# Guest-side step bounds, in seconds (the guest CPU is ~7x slower than the host).
T_READY=60 T_FIXTURE=30 T_COLLECT=45 T_NATURAL=40 T_KILL=30 T_RECORD=20 T_STOP=20

FAILS=0
up() { awk '{printf "%.1fs", $1}' /proc/uptime; }
pass() { echo "PASS [$(up)]: $*"; }
fail() { echo "FAIL [$(up)]: $*"; FAILS=$((FAILS + 1)); }
now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }
log() { printf '[v2e2e %6.1fs] %s\n' "$(awk '{print $1}' /proc/uptime)" "$*"; }

# Polls `cmd...` every 0.2 s for up to $1 seconds; 0 when it succeeded.
wait_for() {
  local secs=$1; shift
  local end=$(( $(now_ms) + secs * 1000 ))
  while [ "$(now_ms)" -lt "$end" ]; do
    "$@" && return 0
    sleep 0.2
  done
  "$@"
}
alive() { kill -0 "$1" 2>/dev/null; }
dead() { ! kill -0 "$1" 2>/dev/null; }
has_line() { grep -Eq -- "$2" "$1" 2>/dev/null; }
rss_mb_at_least() { local kb; kb=$(awk '/^VmRSS:/{print $2}' "/proc/$1/status" 2>/dev/null); [ -n "$kb" ] && [ "$kb" -ge $(( $2 * 1024 )) ]; }
procs_empty() { [ ! -s "$1/cgroup.procs" ]; }

AGENT= HOLDER= LEAKER= SLEEPER= PYTHON= BURSTER=
# Kills what this script started (by pid) and removes the cgroups; safe to call twice.
cleanup() {
  local p
  [ -n "$AGENT" ] && alive "$AGENT" && { kill -TERM "$AGENT"; wait_for 10 dead "$AGENT" || kill -KILL "$AGENT"; }
  for p in $LEAKER $HOLDER $SLEEPER $PYTHON $BURSTER; do alive "$p" && kill -KILL "$p"; done
  for p in $AGENT $LEAKER $HOLDER $SLEEPER $PYTHON $BURSTER; do wait "$p" 2>/dev/null; done
  AGENT= HOLDER= LEAKER= SLEEPER= PYTHON= BURSTER=
  if [ -d "$BOX" ]; then
    for p in $(cat "$BOX/cgroup.procs" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    wait_for 10 procs_empty "$BOX"
    rmdir "$BOX" || echo "v2e2e: cannot remove $BOX"
  fi
  return 0
}
trap 'cleanup; [ -d "$CG" ] && rmdir "$CG"' EXIT
trap 'exit 130' INT TERM

new_box() {  # new_box HIGH [MAX]: fresh box with memory.max MAX (64M), memory.high HIGH, no swap
  cleanup
  mkdir -p "$CG" && echo +memory > "$CG/cgroup.subtree_control" && mkdir "$BOX" || return 1
  echo "${2:-64M}" > "$BOX/memory.max" && echo "$1" > "$BOX/memory.high" || return 1
  [ -e "$BOX/memory.swap.max" ] && echo 0 > "$BOX/memory.swap.max"
  return 0
}

# new_group_box MAX: fresh box with memory.max MAX, no memory.high, memory.oom.group 1
# (as Kubernetes sets up every container on cgroup v2).
new_group_box() {
  new_box max "$1" || { fail "cannot create $BOX"; return 1; }
  echo 1 > "$BOX/memory.oom.group" || { fail "cannot set memory.oom.group"; return 1; }
}

# expect_sigkilled DIR NAME...: each process (the variable named NAME, upper case)
# died of SIGKILL; its wait status goes to DIR/facts.env as name_wait_status.
expect_sigkilled() {
  local d=$1 p st; shift
  for p in "$@"; do
    wait_for $T_KILL dead "${!p}"
    if dead "${!p}"; then wait "${!p}"; st=$?; else st=alive; fi
    echo "${p,,}_wait_status=$st" >> "$d/facts.env"
    [ "$st" = 137 ] && pass "${p,,} died of SIGKILL" || fail "${p,,} exit status $st (expected 137: SIGKILL)"
  done
}

# start_agent DIR EXTRA_TOML: the agent with records on stdout (DIR/records.jsonl)
# and its log on stderr (DIR/agent.log); sets AGENT.
start_agent() {
  local d=$1
  { printf '%s\n' "$2"
    printf '[storage]\nPath = "%s/store"\n[cgroup]\nScope = "/oomsnap-v2test"\n' "$d"; } > "$d/agent.toml"
  "$BIN" watch --config "$d/agent.toml" --log-level debug ${V2E2E_BPF_MODE:+--bpf-mode "$V2E2E_BPF_MODE"} \
    > "$d/records.jsonl" 2> "$d/agent.log" &
  AGENT=$!
  local t0; t0=$(now_ms)
  if wait_for $T_READY has_line "$d/agent.log" 'ready:'; then
    t0=$(( $(now_ms) - t0 ))
    echo "agent_ready_ms=$t0" >> "$d/facts.env"
    echo "bpf_attached=\"$(grep -o 'BPF attached: [^(]*' "$d/agent.log" | head -1 | tr -d '"')\"" >> "$d/facts.env"
    echo "last_gasp=\"$(grep -o 'last gasp: o[nf]f\? ([^:]*' "$d/agent.log" | head -1 | tr -d '"')\"" >> "$d/facts.env"
    pass "agent ready in $t0 ms: $(grep -o 'cgroup v2 at [^;]*;[^;]*' "$d/agent.log" | head -1)"
    return 0
  fi
  fail "agent not ready within ${T_READY}s (alive: $(alive "$AGENT" && echo yes || echo no))"
  return 1
}

# start_fixture DIR NAME OOM_SCORE_ADJ ARGS...: a heapfixture in the box with its own
# oom_score_adj set before exec; sets the variable named NAME (upper case) to its pid.
start_fixture() {
  local d=$1 name=$2 adj=$3; shift 3
  bash -c 'echo $$ > "$1/cgroup.procs" && echo "$2" > /proc/self/oom_score_adj && shift 2 && exec "$@"' \
    _ "$BOX" "$adj" "$FX" "$@" > "$d/$name.out" 2>&1 &
  local pid=$!
  printf -v "${name^^}" '%s' "$pid"
  echo "${name}_pid=$pid" >> "$d/facts.env"
  if ! wait_for $T_FIXTURE has_line "$d/$name.out" '"ready":true'; then
    fail "$name did not start: $(head -c 300 "$d/$name.out")"
    return 1
  fi
  echo "${name}_oom_score_adj=$(cat /proc/$pid/oom_score_adj)" >> "$d/facts.env"
  return 0
}

events() { tr '\n' ' ' < "$BOX/memory.events"; }
event_count() { awk -v k="$1" '$1 == k {print $2}' "$BOX/memory.events"; }
records() { cat "$1/records.jsonl" 2>/dev/null | grep -c .; }

# stop_agent DIR: SIGTERM, bounded; its exit status into facts.
stop_agent() {
  local d=$1 st
  kill -TERM "$AGENT"
  if wait_for $T_STOP dead "$AGENT"; then
    wait "$AGENT"; st=$?
  else
    kill -KILL "$AGENT"; wait "$AGENT"; st=killed
  fi
  AGENT=
  echo "agent_exit=$st" >> "$d/facts.env"
  [ "$st" = 0 ] && pass "agent stopped cleanly" || fail "agent exit status on SIGTERM: $st"
}

show_records() {
  echo "--- $1 records ($(records "$1")):"
  cat "$1/records.jsonl"
  echo "--- end of records"
}

phase1() {
  local d=$OUT/phase1 t0 tc st
  mkdir -p "$d"; : > "$d/facts.env"
  echo "== phase 1: memory.events trigger, oom_score_adj -1000 holder, OOM kill of the leaker"
  new_box 58M || { fail "cannot create $BOX"; return; }
  echo "box_inode=$(stat -c %i "$BOX")" >> "$d/facts.env"
  start_agent "$d" 'ThresholdPercent = 80
BatchWindow = 0.2
OomKillWindow = 30
RunTracingToolTimeout = 10
[triggers]
Blacklist = ["memcg_pressure", "psi", "threshold", "forecast"]' || return
  start_fixture "$d" holder -1000 -leak-mb-per-s 50 -leak-limit-mb 30 || return
  wait_for $T_FIXTURE rss_mb_at_least "$HOLDER" 30 || fail "holder RSS below 30 MiB: $(grep VmRSS /proc/$HOLDER/status)"
  log "holder $HOLDER holds its 30 MiB (adj $(cat /proc/$HOLDER/oom_score_adj)); box at $(( $(cat $BOX/memory.current) >> 20 )) MiB"
  t0=$(now_ms)
  start_fixture "$d" leaker 0 -leak-mb-per-s 4 || return
  log "leaker $LEAKER started (4 MiB/s)"
  if wait_for $T_COLLECT has_line "$d/agent.log" 'incident [0-9]+: (collected|no_victim|victim_gone|discarded|queue_full)'; then
    tc=$(now_ms)
    pass "agent finished a collection $(( tc - t0 )) ms after the leaker started: $(grep -Eo 'incident [0-9]+: (collected|no_victim|victim_gone).*' "$d/agent.log" | head -1)"
    echo "collect_after_leaker_ms=$(( tc - t0 ))" >> "$d/facts.env"
  else
    fail "no collection within ${T_COLLECT}s; box at $(( $(cat $BOX/memory.current) >> 20 )) MiB, events: $(events)"
  fi
  echo "events_before_kill=\"$(events)\"" >> "$d/facts.env"
  if wait_for $T_NATURAL dead "$LEAKER"; then
    echo "high_lifted=0" >> "$d/facts.env"
  else
    # Bound the run: lift memory.high so the leaker runs into memory.max now.
    echo max > "$BOX/memory.high"
    echo "high_lifted=1" >> "$d/facts.env"
    log "NOTE: leaker still throttled ${T_NATURAL}s after the collection; memory.high lifted at $(( $(cat $BOX/memory.current) >> 20 )) MiB"
    wait_for $T_KILL dead "$LEAKER"
  fi
  if dead "$LEAKER"; then
    wait "$LEAKER"; st=$?
    echo "leaker_wait_status=$st" >> "$d/facts.env"
    [ "$st" = 137 ] && pass "leaker died of SIGKILL $(( $(now_ms) - t0 )) ms after its start" \
                    || fail "leaker exit status $st (expected 137: SIGKILL)"
  else
    fail "leaker still alive; events: $(events)"
  fi
  LEAKER=
  echo "events_after_kill=\"$(events)\"" >> "$d/facts.env"
  [ "$(event_count oom_kill)" -ge 1 ] && pass "memory.events counts the OOM kill: $(events)" \
                                       || fail "no oom_kill in memory.events: $(events)"
  if alive "$HOLDER"; then echo "holder_survived=1" >> "$d/facts.env"; pass "holder (oom_score_adj -1000) survived"
  else echo "holder_survived=0" >> "$d/facts.env"; fail "holder was killed"; fi
  # The record closes when the victim's exit arrives (at the latest 1 s after the kill).
  wait_for $T_RECORD has_line "$d/agent.log" 'incident [0-9]+ recorded: trigger memory_events' \
    && pass "record written: $(grep -Eo 'incident [0-9]+ recorded: trigger memory_events.*' "$d/agent.log" | head -1)" \
    || fail "no memory_events record within ${T_RECORD}s"
  stop_agent "$d"
  has_line "$d/records.jsonl" '"type":"memory_events"' && pass "phase 1 record with trigger memory_events" \
                                                       || fail "phase 1: no record with trigger memory_events"
  echo "phase_ms=$(( $(now_ms) - t0 ))" >> "$d/facts.env"
  show_records "$d"
  cleanup
}

phase2() {
  local d=$OUT/phase2 t0
  mkdir -p "$d"; : > "$d/facts.env"
  echo "== phase 2: PSI trigger (memory.events, threshold, memcg_pressure blacklisted)"
  new_box 52M || { fail "cannot create $BOX"; return; }
  echo "box_inode=$(stat -c %i "$BOX")" >> "$d/facts.env"
  start_agent "$d" 'ThresholdPercent = 70
BatchWindow = 0.2
OomKillWindow = 2
RunTracingToolTimeout = 10
[triggers]
Blacklist = ["memcg_pressure", "memory_events", "threshold", "forecast"]' || return
  grep -q ', 1 PSI triggers' "$d/agent.log" && pass "PSI trigger registered on the box" \
    || fail "PSI trigger not registered: $(grep -E 'PSI|ready:' "$d/agent.log")"
  start_fixture "$d" holder -1000 -leak-mb-per-s 50 -leak-limit-mb 30 || return
  wait_for $T_FIXTURE rss_mb_at_least "$HOLDER" 30 || fail "holder RSS below 30 MiB"
  t0=$(now_ms)
  start_fixture "$d" leaker 0 -leak-mb-per-s 4 || return
  log "leaker $LEAKER started (4 MiB/s); box at $(( $(cat $BOX/memory.current) >> 20 )) MiB"
  if wait_for $T_COLLECT has_line "$d/agent.log" 'incident [0-9]+ recorded: trigger psi'; then
    pass "PSI record $(( $(now_ms) - t0 )) ms after the leaker started: $(grep -Eo 'incident [0-9]+ recorded: trigger psi.*' "$d/agent.log" | head -1)"
    echo "record_after_leaker_ms=$(( $(now_ms) - t0 ))" >> "$d/facts.env"
  else
    fail "no PSI record within ${T_COLLECT}s; box at $(( $(cat $BOX/memory.current) >> 20 )) MiB; $(head -1 $BOX/memory.pressure); events: $(events)"
  fi
  echo "pressure=\"$(head -1 "$BOX/memory.pressure")\"" >> "$d/facts.env"
  echo "events=\"$(events)\"" >> "$d/facts.env"
  stop_agent "$d"
  has_line "$d/records.jsonl" '"type":"psi"' && pass "phase 2 record with trigger psi" \
                                             || fail "phase 2: no record with trigger psi"
  echo "phase_ms=$(( $(now_ms) - t0 ))" >> "$d/facts.env"
  show_records "$d"
  cleanup
}

phase3() {
  local d=$OUT/phase3 t0
  mkdir -p "$d"; : > "$d/facts.env"
  echo "== phase 3: memory.oom.group=1, three processes, the agent at its defaults"
  new_group_box 96M || return
  echo "box_inode=$(stat -c %i "$BOX")" >> "$d/facts.env"
  # Defaults, but for the guest's slow CPU (the capture budget) and a short
  # wait for the kill after the snapshot.
  start_agent "$d" 'RunTracingToolTimeout = 10
OomKillWindow = 40' || return
  start_fixture "$d" holder 0 -leak-mb-per-s 50 -leak-limit-mb 20 || return
  wait_for $T_FIXTURE rss_mb_at_least "$HOLDER" 20 || fail "holder RSS below 20 MiB"
  bash -c 'echo $$ > "$1/cgroup.procs" && exec sleep 1000' _ "$BOX" &
  SLEEPER=$!
  echo "sleeper_pid=$SLEEPER" >> "$d/facts.env"
  bash -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' _ "$BOX" "$PY" "$PYFX" --with-dict 2000 \
    --with-slots 2000 --inner 500 --dicts 400 --lists 300 --blobs 1 --dict-blobs 1 --attr-blobs 1 \
    --blob-size 1048576 > "$d/python.out" 2>&1 &
  PYTHON=$!
  echo "python_pid=$PYTHON" >> "$d/facts.env"
  wait_for $T_FIXTURE has_line "$d/python.out" '"pid":' || { fail "python fixture did not start: $(head -c 300 "$d/python.out")"; return; }
  t0=$(now_ms)
  start_fixture "$d" leaker 0 -leak-mb-per-s 2 || return
  log "leaker $LEAKER, holder $HOLDER, sleep $SLEEPER, python $PYTHON in the box (oom.group $(cat $BOX/memory.oom.group))"
  wait_for $T_COLLECT has_line "$d/agent.log" 'incident [0-9]+: collected' \
    && pass "snapshot $(( $(now_ms) - t0 )) ms after the leaker started" \
    || fail "no collection within ${T_COLLECT}s; box at $(( $(cat $BOX/memory.current) >> 20 )) MiB"
  wait_for $((T_NATURAL + T_KILL)) dead "$LEAKER" || fail "leaker not killed; events: $(events)"
  expect_sigkilled "$d" LEAKER HOLDER SLEEPER PYTHON
  LEAKER= HOLDER= SLEEPER= PYTHON=
  echo "events_after_kill=\"$(events)\"" >> "$d/facts.env"
  if grep -q '^oom_group_kill ' "$BOX/memory.events"; then
    [ "$(event_count oom_group_kill)" -ge 1 ] && pass "memory.events counts the group kill: $(events)" \
                                               || fail "no oom_group_kill in memory.events: $(events)"
  else  # the counter is newer than this kernel (5.10 has none): four processes killed
    [ "$(event_count oom_kill)" -ge 4 ] && pass "memory.events (no oom_group_kill counter) counts the kills: $(events)" \
                                        || fail "fewer than 4 oom_kill in memory.events: $(events)"
  fi
  wait_for $T_RECORD has_line "$d/agent.log" 'incident [0-9]+ recorded: .*OOM kill' \
    && pass "record written: $(grep -Eo 'incident [0-9]+ recorded: .*' "$d/agent.log" | head -1)" \
    || fail "no record with the OOM kill within ${T_RECORD}s"
  sleep 2  # late marks or exits would make more records: give them time to show
  stop_agent "$d"
  echo "phase_ms=$(( $(now_ms) - t0 ))" >> "$d/facts.env"
  show_records "$d"
  cleanup
}

phase4() {
  local d=$OUT/phase4 t0 p
  mkdir -p "$d"; : > "$d/facts.env"
  echo "== phase 4: the last gasp of a group kill no trigger came before"
  new_group_box 128M || return
  start_agent "$d" 'RunTracingToolTimeout = 10
MaxMemoryObjectEntries = 1000
[triggers]
Blacklist = ["memcg_pressure", "memory_events", "psi", "threshold", "forecast", "process_exit"]' || return
  start_fixture "$d" holder 0 -rate 1 || return
  start_fixture "$d" burster 0 -rate 1 -burst-mb 512 || return
  for p in HOLDER BURSTER; do
    wait_for $T_COLLECT has_line "$d/agent.log" "last gasp: armed ${!p} " \
      && pass "${p,,} armed" || { fail "${p,,} not armed within ${T_COLLECT}s"; return; }
  done
  t0=$(now_ms)
  kill -USR1 "$BURSTER"
  expect_sigkilled "$d" HOLDER BURSTER
  HOLDER= BURSTER=
  wait_for $((T_RECORD + 30)) has_line "$d/agent.log" 'incident [0-9]+ recorded: .*OOM kill' \
    && pass "record written $(( $(now_ms) - t0 )) ms after the burst" \
    || fail "no record with the OOM kill within $((T_RECORD + 30))s"
  stop_agent "$d"
  show_records "$d"
  cleanup
}

log "guest up; kernel $(uname -r); agent $BIN; fixture $FX"
echo "script_start_uptime_s=$(awk '{print $1}' /proc/uptime)" > "$OUT/guest.env"
[ -x "$BIN" ] || { fail "agent binary missing: $BIN"; exit 1; }
[ -x "$FX" ] || { fail "fixture missing: $FX"; exit 1; }
grep -qw memory /sys/fs/cgroup/cgroup.controllers || { fail "no memory controller in the cgroup2 root"; exit 1; }
# Page cache is charged to the cgroup that first reads it in. Read the fixture's binary
# from here (the root cgroup) so its text pages are not charged to the box: otherwise
# reclaim above memory.high evicts them, the fixtures' threads refault them over 9p
# all the time and the thrashing saturates the emulated CPUs (the guest crawls).
cat "$FX" "$BIN" > /dev/null
# The same for CPython and the standard library modules the Python fixture imports.
"$PY" -c 'import argparse, gc, json, sys, threading, time' || { fail "no $PY in the guest"; exit 1; }
for ph in ${V2E2E_PHASES:-1 2 3}; do
  s=$(now_ms); "phase$ph"; echo "phase${ph}_total_ms=$(( $(now_ms) - s ))" >> "$OUT/guest.env"
done
echo "fails=$FAILS" >> "$OUT/guest.env"
if [ "$FAILS" = 0 ]; then log "ALL PASS"; else log "$FAILS FAILURE(S)"; fi
[ "$FAILS" = 0 ]
