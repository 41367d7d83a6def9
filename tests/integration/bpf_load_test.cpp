// The BPF machinery end to end: the CO-RE object built by CMake, wrapped in the
// skeleton bpftool generated at build time, loads and attaches on this kernel.
#include <gtest/gtest.h>

#include <bpf/libbpf.h>

#include "agent.skel.h"

TEST(BpfMachinery, AgentSkeletonLoadsAndAttachesRawTracepoints) {
  agent_bpf* skel = agent_bpf__open();
  ASSERT_NE(skel, nullptr) << "open failed: the CO-RE object is unreadable";
  // Only the raw_tp variants: the tp/ fallbacks would need tracefs to attach.
  bpf_program__set_autoload(skel->progs.oom_kill_tp, false);
  bpf_program__set_autoload(skel->progs.pressure_tp, false);
  bpf_program__set_autoload(skel->progs.exit_tp, false);
  ASSERT_EQ(agent_bpf__load(skel), 0) << "load failed: the CO-RE object did not load (need root and BTF)";
  EXPECT_EQ(agent_bpf__attach(skel), 0) << "the raw tracepoints did not attach";
  EXPECT_NE(skel->links.oom_kill_raw, nullptr);
  EXPECT_NE(skel->links.pressure_raw, nullptr);
  EXPECT_NE(skel->links.exit_raw, nullptr);
  EXPECT_GE(bpf_map__fd(skel->maps.events), 0);
  EXPECT_EQ(skel->bss->dropped_events, 0u);
  agent_bpf__destroy(skel);
}

TEST(BpfMachinery, AgentSkeletonLoadsEveryProgramVariant) {
  // Both variants of every event pass the verifier (loaded, not attached).
  agent_bpf* skel = agent_bpf__open_and_load();
  ASSERT_NE(skel, nullptr) << "open_and_load failed: some program variant did not load";
  EXPECT_GE(bpf_program__fd(skel->progs.oom_kill_raw), 0);
  EXPECT_GE(bpf_program__fd(skel->progs.oom_kill_tp), 0);
  EXPECT_GE(bpf_program__fd(skel->progs.pressure_raw), 0);
  EXPECT_GE(bpf_program__fd(skel->progs.pressure_tp), 0);
  EXPECT_GE(bpf_program__fd(skel->progs.exit_raw), 0);
  EXPECT_GE(bpf_program__fd(skel->progs.exit_tp), 0);
  agent_bpf__destroy(skel);
}
