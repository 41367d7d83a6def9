// The BPF machinery end to end: the CO-RE object built by CMake, wrapped in the
// skeleton bpftool generated at build time, loads and attaches on this kernel.
// The guest kernel matrix (agent_v2vm_test.cpp) runs these on 5.10, 6.1 and 6.12
// too: on a kernel without the BPF cmpxchg/xchg instructions (before 5.12) the
// rate-limited programs are the *_old variants (bpf/core_fixes.bpf.h).
#include <gtest/gtest.h>

#include <bpf/libbpf.h>

#include <string>

#include "agent.skel.h"
#include "agent/events/bpf_events.h"

namespace {

// Switches off the variants this kernel cannot load (see above).
void skip_unloadable(agent_bpf* skel) {
  const bool atomics = oomsnap::kernel_has_bpf_atomics();
  for (bpf_program* p : {skel->progs.pressure_raw, skel->progs.pressure_tp, skel->progs.exit_raw, skel->progs.exit_tp})
    bpf_program__set_autoload(p, atomics);
  for (bpf_program* p :
       {skel->progs.pressure_raw_old, skel->progs.pressure_tp_old, skel->progs.exit_raw_old, skel->progs.exit_tp_old})
    bpf_program__set_autoload(p, !atomics);
}

}  // namespace

TEST(BpfMachinery, AgentSkeletonLoadsAndAttachesRawTracepoints) {
  agent_bpf* skel = agent_bpf__open();
  ASSERT_NE(skel, nullptr) << "open failed: the CO-RE object is unreadable";
  skip_unloadable(skel);
  // Only the raw_tp variants: the tp/ fallbacks would need tracefs to attach.
  bpf_program* prog;
  bpf_object__for_each_program(prog, skel->obj) {
    if (std::string(bpf_program__section_name(prog)).rfind("raw_tp/", 0) != 0) bpf_program__set_autoload(prog, false);
  }
  ASSERT_EQ(agent_bpf__load(skel), 0) << "load failed: the CO-RE object did not load (need root and BTF)";
  EXPECT_EQ(agent_bpf__attach(skel), 0) << "the raw tracepoints did not attach";
  const bool atomics = oomsnap::kernel_has_bpf_atomics();
  EXPECT_NE(skel->links.oom_kill_raw, nullptr);
  EXPECT_NE(atomics ? skel->links.pressure_raw : skel->links.pressure_raw_old, nullptr);
  EXPECT_NE(atomics ? skel->links.exit_raw : skel->links.exit_raw_old, nullptr);
  EXPECT_NE(skel->links.usage_raw, nullptr);
  EXPECT_GE(bpf_map__fd(skel->maps.events), 0);
  EXPECT_EQ(skel->bss->dropped_events, 0u);
  agent_bpf__destroy(skel);
}

TEST(BpfMachinery, AgentSkeletonLoadsEveryProgramVariant) {
  // Both variants of every event pass the verifier (loaded, not attached); on
  // kernels with BPF atomics the *_old variants too.
  agent_bpf* skel = agent_bpf__open();
  ASSERT_NE(skel, nullptr);
  const bool atomics = oomsnap::kernel_has_bpf_atomics();
  if (!atomics) skip_unloadable(skel);
  ASSERT_EQ(agent_bpf__load(skel), 0) << "some program variant did not load";
  bpf_program* prog;
  bpf_object__for_each_program(prog, skel->obj) {
    if (bpf_program__autoload(prog)) {
      EXPECT_GE(bpf_program__fd(prog), 0) << bpf_program__name(prog);
    }
  }
  EXPECT_GE(bpf_program__fd(skel->progs.oom_kill_raw), 0);
  EXPECT_GE(bpf_program__fd(skel->progs.oom_kill_tp), 0);
  EXPECT_GE(bpf_program__fd(atomics ? skel->progs.pressure_raw : skel->progs.pressure_raw_old), 0);
  EXPECT_GE(bpf_program__fd(atomics ? skel->progs.pressure_tp : skel->progs.pressure_tp_old), 0);
  EXPECT_GE(bpf_program__fd(atomics ? skel->progs.exit_raw : skel->progs.exit_raw_old), 0);
  EXPECT_GE(bpf_program__fd(atomics ? skel->progs.exit_tp : skel->progs.exit_tp_old), 0);
  if (atomics) {
    EXPECT_GE(bpf_program__fd(skel->progs.exit_tp_old), 0);
  }
  EXPECT_GE(bpf_program__fd(skel->progs.usage_raw), 0);
  EXPECT_GE(bpf_program__fd(skel->progs.usage_tp), 0);
  agent_bpf__destroy(skel);
}
