// The BPF machinery end to end: the CO-RE object built by CMake, wrapped in the
// skeleton bpftool generated at build time, loads and attaches on this kernel.
#include <gtest/gtest.h>

#include <bpf/libbpf.h>

#include "oom.skel.h"

TEST(BpfMachinery, OomSkeletonLoadsAndAttachesRawTracepoint) {
  oom_bpf* skel = oom_bpf__open_and_load();
  ASSERT_NE(skel, nullptr) << "open_and_load failed: the CO-RE object did not load (need root and BTF)";
  EXPECT_EQ(oom_bpf__attach(skel), 0) << "raw_tp/mark_victim did not attach";
  EXPECT_GE(bpf_map__fd(skel->maps.events), 0);
  EXPECT_EQ(skel->bss->dropped_events, 0u);
  oom_bpf__destroy(skel);
}
