// The goroutine census: reads runtime.allgs out of a live Go process without
// stopping it (allglen first, then allgptr: the runtime's own rule for
// lock-free readers, see forEachGRace in proc.go), every g's status, wait
// reason and creation site, and the stack of every goroutine that is not
// running, unwound from its saved sched (or syscall) pc/sp with the pclntab's
// SP deltas, cross-checked against the frame-pointer chain. g structs are
// read in address windows and stacks in scatter-gather batches through two
// fixed buffers (a few MiB whatever the goroutine count), so read syscalls
// grow with bytes, not goroutines.
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

// One goroutine as read. Its stack is an index into GoGoroutineRead::stacks
// (thousands of parked goroutines share a handful of stacks, each stored
// once), kNoStack when none was read.
constexpr uint32_t kNoStack = UINT32_MAX;
// Why a goroutine whose stack the census read has none in the end. The
// census turns these into its `partial` reasons, for the user's goroutines
// only (only it knows which are the runtime's own).
enum class GoStackMissing : uint8_t {
  kNone,          // it has one, or it was running (nothing to read)
  kChangedState,  // parked when first read; its status, goid or saved pc changed: it ran
  // Still parked at the same pc, but its stack moved (the GC shrinks the
  // stacks of parked goroutines, copystack) under every re-read.
  kStackKeptMoving,
  kUnreadable,     // the stack could not be read
  kUnwindFailed,   // through every re-read: an unknown pc or an sp out of range
  kFramePointers,  // through every re-read: the frame-pointer chain disagrees with the SP deltas
};

struct GoGoroutine {
  uint64_t goid = 0;
  uint64_t gopc = 0, startpc = 0;
  uint32_t status = 0;         // atomicstatus with the scan bit cleared
  uint32_t stack = kNoStack;   // as consistent as the re-check could tell
  uint8_t wait_reason = 0;
  // g.stack [lo, hi) when plausible (lo < hi, at most the runtime's maximum
  // stack), else both 0: the process's memory breakdown counts them as stacks.
  uint64_t stack_lo = 0, stack_hi = 0;
  GoStackMissing missing = GoStackMissing::kNone;  // why stack is kNoStack, when the census cares
};

struct GoGoroutineRead {
  std::vector<GoGoroutine> goroutines;  // every g that is not dead or idle
  // The distinct stacks: runtime return PCs, leaf first, in the convention
  // of the runtime's tracebackPCs (a frame at its function's entry is stored
  // as entry + 1), not inline-expanded, never empty.
  std::vector<std::vector<uint64_t>> stacks;
  uint64_t allglen = 0;
  // Stacks that moved between their first read and the re-check and were
  // read again (a stack the GC copied mid-census).
  uint64_t stacks_reread = 0;
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
// bp: the frame pointer saved with pc/sp (gobuf.bp, g.syscallbp), 0 when
// there is none. The pclntab's SP deltas drive the unwind; the frame-pointer
// chain cross-checks it: on amd64 every Go frame with a frame saves the
// caller's BP just below its return address, and BP points at that slot. A
// chain that disagrees (a torn or crafted stack, a wrong SP delta) makes the
// stack not ok. Checking stops, without judging, after an assembly frame
// (asyncPreempt interrupts its caller anywhere, even mid-prologue) and where
// the chain leaves the window.
// wrapper_func_id (go_func_id_wrapper, 0: none): frames of compiler-made
// wrappers (the closure that runs `go f(x)`: main.main.func1 on 1.19,
// main.main.gowrap1 from 1.22) are unwound through but not recorded, as the
// runtime's tracebackPCs leaves them out of every profile's stacks (unless
// the wrapper called a panic, and unless the pc is in a body inlined into the
// wrapper, which that body's frames need).
// Exposed for unit tests that feed byte images.
struct GoUnwindResult {
  std::vector<uint64_t> pcs;
  bool ok = true;            // false: an unknown PC, an SP outside the stack, or fp_mismatch
  bool truncated = false;    // ran past the window or the depth cap
  bool fp_mismatch = false;  // the frame-pointer chain disagrees with the SP deltas
  size_t fp_checked = 0;     // frames whose frame pointer agreed
};
// frames: optional cache of frame_info by link-time PC (thousands of parked
// goroutines share a handful of PCs; a pcsp lookup decodes a table each time).
using GoFrameCache = std::unordered_map<uint64_t, std::optional<GoPclntab::FrameInfo>>;
GoUnwindResult unwind_go_stack(const GoPclntab& tab, uint64_t load_bias, uint64_t pc, uint64_t sp, uint64_t bp,
                               uint64_t stack_base, std::span<const uint8_t> stack, size_t max_depth,
                               GoFrameCache* frames = nullptr, uint8_t wrapper_func_id = 0);
// The same into r (its pcs vector reused: no allocation per stack).
void unwind_go_stack(const GoPclntab& tab, uint64_t load_bias, uint64_t pc, uint64_t sp, uint64_t bp,
                     uint64_t stack_base, std::span<const uint8_t> stack, size_t max_depth, GoFrameCache* frames,
                     GoUnwindResult& r, uint8_t wrapper_func_id = 0);

}  // namespace oomsnap
