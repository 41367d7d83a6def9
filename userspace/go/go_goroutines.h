// The goroutine census: reads runtime.allgs out of a live Go process without
// stopping it (allglen first, then allgptr: the runtime's own rule for
// lock-free readers, see forEachGRace in proc.go), every g's status, wait
// reason and creation site, and the stack of every goroutine that is not
// running, unwound from its saved sched (or syscall) pc/sp with the pclntab's
// SP deltas. g structs are read in address windows and stacks in one
// scatter-gather batch, so read syscalls grow with memory, not goroutines.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/collector.h"
#include "go/go_g_layout.h"
#include "go/go_pclntab.h"

namespace oomsnap {

struct GoGoroutineAddrs {  // RUNTIME addresses in the target
  uint64_t allglen = 0;    // &runtime.allglen (uintptr)
  uint64_t allgptr = 0;    // &runtime.allgptr (**g, &allgs[0])
};

// One goroutine as read. pcs are runtime return PCs, leaf first, in the
// convention of the runtime's tracebackPCs (a frame at its function's entry
// is stored as entry + 1), not inline-expanded; empty when no stack was read.
struct GoGoroutine {
  uint64_t goid = 0;
  uint32_t status = 0;      // atomicstatus with the scan bit cleared
  uint8_t wait_reason = 0;
  uint64_t gopc = 0, startpc = 0;
  std::vector<uint64_t> pcs;
  bool stack_read = false;  // pcs is the goroutine's stack (as consistent as the re-check could tell)
  // Parked when first read, changed (status, goid or saved pc/sp) by the
  // re-check: its stack was dropped and the census cannot be consistent.
  bool moved = false;
};

struct GoGoroutineRead {
  std::vector<GoGoroutine> goroutines;  // every g that is not dead or idle
  uint64_t allglen = 0;
  SnapshotStatus status = SnapshotStatus::kComplete;
  std::string reason;
};

// load_bias: runtime PC − link-time PC (the pclntab's addresses are link-time).
GoGoroutineRead read_go_goroutines(RemoteMemory& mem, const GoGoroutineAddrs& addrs, const GoGLayout& layout,
                                   const GoPclntab& tab, uint64_t load_bias, const CaptureOptions& opts,
                                   const Deadline& deadline);

// Unwinds one stack from (pc, sp) inside stack memory `stack` that starts at
// runtime address stack_base (a window of [lo, hi)); frames whose return
// address lies outside the window end the unwind with truncated = true.
// Exposed for unit tests that feed byte images.
struct GoUnwindResult {
  std::vector<uint64_t> pcs;
  bool ok = true;          // false: an unknown PC or an SP outside the stack
  bool truncated = false;  // ran past the window or the depth cap
};
// frames: optional cache of frame_info by link-time PC (thousands of parked
// goroutines share a handful of PCs; a pcsp lookup decodes a table each time).
using GoFrameCache = std::unordered_map<uint64_t, std::optional<GoPclntab::FrameInfo>>;
GoUnwindResult unwind_go_stack(const GoPclntab& tab, uint64_t load_bias, uint64_t pc, uint64_t sp,
                               uint64_t stack_base, std::span<const uint8_t> stack, size_t max_depth,
                               GoFrameCache* frames = nullptr);

}  // namespace oomsnap
