#!/bin/bash
# Runs INSIDE the cgroup-v2 guest of ../shared/v2vm/run-in-v2vm.sh: which BPF attach
# modes work on the guest's kernel.
#
#   bpf_attach.sh OUTDIR OOMSNAP_BINARY [INTEGRATION_TESTS_BINARY]
#
# For each mode (raw_tp, tracepoint, auto) starts `oomsnap watch --bpf-mode MODE`
# (scoped to an empty cgroup), waits for its "BPF attached: ..." log line or its exit,
# and stops it. Writes OUTDIR/bpf_attach.env (KEY=VALUE; judged by the host test,
# tests/integration/agent_v2vm_test.cpp):
#   kernel=UNAME_R
#   <mode>=attached|failed   <mode>_desc="the BPF attached line, or the agent's error"
#   loader_rc=N (the BpfMachinery.* gtests of the integration test binary, when given)
# and OUTDIR/<mode>.log, OUTDIR/loader.log. Exit status 0 when every step ran (not
# when every mode attached: that is the host test's call).
set -u
OUT=${1:?usage: $0 OUTDIR OOMSNAP_BINARY [INTEGRATION_TESTS]}
BIN=${2:?usage: $0 OUTDIR OOMSNAP_BINARY [INTEGRATION_TESTS]}
TESTS=${3:-}
CG=/sys/fs/cgroup/oomsnap-bpfattach
T_ATTACH=90  # guest CPU is ~7x slower than the host; loading verifies 3 programs

now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }
# env_line KEY VALUE: KEY="VALUE" on one line (newlines -> spaces, " -> ').
env_line() { printf '%s="%s"\n' "$1" "$(printf '%s' "$2" | tr '\n"' " '")" >> "$OUT/bpf_attach.env"; }

: > "$OUT/bpf_attach.env"
env_line kernel "$(uname -r)"
[ -e /sys/kernel/btf/vmlinux ] && env_line btf yes || env_line btf no
mkdir -p "$CG"
cat "$BIN" > /dev/null  # page the binary in once (9p)

for mode in raw_tp tracepoint auto; do
  d=$OUT/$mode; mkdir -p "$d"
  printf '[storage]\nPath = "%s/store"\n[cgroup]\nScope = "/oomsnap-bpfattach"\n' "$d" > "$d/agent.toml"
  t0=$(now_ms)
  "$BIN" watch --config "$d/agent.toml" --bpf-mode "$mode" --log-level debug > /dev/null 2> "$OUT/$mode.log" &
  pid=$!
  end=$(( t0 + T_ATTACH * 1000 ))
  while kill -0 "$pid" 2>/dev/null && ! grep -q 'BPF attached:' "$OUT/$mode.log" && [ "$(now_ms)" -lt "$end" ]; do
    sleep 0.2
  done
  if grep -q 'BPF attached:' "$OUT/$mode.log"; then
    env_line "$mode" attached
    env_line "${mode}_desc" "$(grep -o 'BPF attached:.*' "$OUT/$mode.log" | head -1)"
  else
    env_line "$mode" failed
    env_line "${mode}_desc" "$(tail -c 1500 "$OUT/$mode.log")"
  fi
  env_line "${mode}_ms" "$(( $(now_ms) - t0 ))"
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  echo "$mode: $(grep "^$mode=" "$OUT/bpf_attach.env") $(grep "^${mode}_desc=" "$OUT/bpf_attach.env" | head -c 400)"
done
rmdir "$CG" 2>/dev/null

if [ -n "$TESTS" ]; then
  "$TESTS" --gtest_filter='BpfMachinery.*' > "$OUT/loader.log" 2>&1
  rc=$?
  env_line loader_rc "$rc"
  echo "loader (BpfMachinery.*): rc $rc"; grep -E '^\[ +(OK|FAILED|SKIPPED) ' "$OUT/loader.log"
fi
exit 0
