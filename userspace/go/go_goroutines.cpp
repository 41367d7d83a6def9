// The goroutine census reader (go_goroutines.h).
//
// Consistency without stopping the target: allglen only grows and a g is
// never freed (exited goroutines go to a free list as _Gdead and are reused),
// so every pointer below allglen stays a g. Each g is read twice — before
// its stack is unwound and after — and a goroutine whose status, goid or
// saved pc/sp changed in between has no stack in the census: expected for
// running and runnable goroutines (they are counted with their creation
// site), a `partial` census for the others (the census decides, as only it
// knows which goroutines are the runtime's own). A grown allglen is partial.
//
// Things change under a parked goroutine without it changing state, and a
// quiet program shows them whenever a GC cycle overlaps the census:
// - the GC copies (shrinks) the stacks of parked goroutines: the same
//   goroutine, status and saved pc, a new sp; or, caught mid-copy, new
//   bounds with the old sp, or the new stack before copystack fixed its
//   frame pointers (a chain that disagrees);
// - a goroutine that wakes, runs and parks again at the same pc and sp
//   between the two reads (a GC worker, a worker loop) leaves a stack read
//   while it ran: a chain that disagrees, at an unchanged place.
// Such a goroutine is read again (the whole g, then its stack), a few rounds
// at most, within the deadline; one that never holds still has no stack and
// says why. And the GC stops a running goroutine to scan it (suspendG:
// _Gwaiting, waitReasonPreempted), and a goroutine on the system stack sits
// in _Gwaiting so the GC can own its stack (waitReason.isWaitingForGC):
// those are running goroutines, expected to move like any running one.
#include "go/go_goroutines.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <unordered_set>

#include "base/huge_page_allocator.h"
#include "go/go_pclntab.h"

namespace oomsnap {
namespace {

constexpr uint64_t kMaxStackSize = 1ull << 30;     // runtime maxstacksize on 64-bit
constexpr uint64_t kStackWindow = 64 * 1024;       // first read per stack: most parked stacks are smaller
constexpr uint64_t kStackWindowRetry = 1ull << 20;  // a deeper stack gets one more read of this much
constexpr uint64_t kGWindowMax = 1ull << 20;       // one iovec of g structs at most this long
// The census's read buffers, each larger than any single read. The stack
// buffer is the smaller one so that one buffer of g structs (~9,000
// goroutines) needs two or more of stacks: the live tests' 16,000 parked
// goroutines cross both kinds of batch boundary.
constexpr uint64_t kGScratchBytes = 4ull << 20;
constexpr uint64_t kStackScratchBytes = 2ull << 20;
static_assert(kStackScratchBytes >= kStackWindow && kGScratchBytes >= kGWindowMax);
constexpr uint64_t kMaxFrameSize = 1ull << 30;
// Re-reads of a goroutine whose stack did not hold still. The GC halves a
// stack per cycle, and one round follows the last by milliseconds, so a
// stack that fails this many is a target doing something else: said so.
constexpr int kMaxStackRereads = 4;

uint64_t u64_at(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Where a goroutine is: what the re-check compares.
struct GPlace {
  uint64_t sched_sp = 0, sched_pc = 0, syscallsp = 0, syscallpc = 0, goid = 0;
  uint32_t status = 0;
  bool operator==(const GPlace&) const = default;
  // Where the runtime's unwinder starts for a goroutine that is not running
  // (unwinder.initAt with pc = sp = ^0): the syscall pair when syscallsp is
  // set, else the saved scheduler state.
  bool in_syscall() const { return syscallsp != 0; }
  uint64_t pc() const { return in_syscall() ? syscallpc : sched_pc; }
  uint64_t sp() const { return in_syscall() ? syscallsp : sched_sp; }
};

// The fields of one g the census uses, decoded from its bytes.
struct GFields {
  GPlace place;
  bool scanning = false;  // _Gscan set: the GC holds the g (and may be copying its stack)
  uint64_t stack_lo = 0, stack_hi = 0, sched_bp = 0;
  uint64_t syscallbp = 0;  // 0 before 1.23 (no such field)
  uint64_t gopc = 0, startpc = 0;
  uint8_t wait_reason = 0;
  // The frame pointer saved with pc/sp (0: none, the unwind is not
  // cross-checked).
  uint64_t bp() const { return place.in_syscall() ? syscallbp : sched_bp; }
};

GFields decode_g(const uint8_t* g, const GoGLayout& l) {
  GFields f;
  f.stack_lo = u64_at(g + l.stack_lo);
  f.stack_hi = u64_at(g + l.stack_hi);
  f.place.sched_sp = u64_at(g + l.sched_sp);
  f.place.sched_pc = u64_at(g + l.sched_pc);
  f.sched_bp = u64_at(g + l.sched_bp);
  if (l.syscallbp) f.syscallbp = u64_at(g + *l.syscallbp);
  f.place.syscallsp = u64_at(g + l.syscallsp);
  f.place.syscallpc = u64_at(g + l.syscallpc);
  f.place.goid = u64_at(g + l.goid);
  f.gopc = u64_at(g + l.gopc);
  f.startpc = u64_at(g + l.startpc);
  const uint32_t status = u32_at(g + l.atomicstatus);
  f.place.status = status & ~kGoGScanBit;
  f.scanning = (status & kGoGScanBit) != 0;
  f.wait_reason = g[l.waitreason];
  return f;
}

// g structs sorted by address, grouped into windows read with one iovec each
// (they come from the same spans, so neighbours share a window).
struct GWindow {
  uint64_t start = 0, len = 0;
};

std::vector<GWindow> plan_windows(const std::vector<uint64_t>& sorted, uint64_t gsize) {
  std::vector<GWindow> out;
  for (uint64_t a : sorted) {
    if (!out.empty()) {
      GWindow& w = out.back();
      const uint64_t end = w.start + w.len;
      if (a >= end && a - end <= 2 * gsize && a + gsize - w.start <= kGWindowMax) {
        w.len = a + gsize - w.start;
        continue;
      }
    }
    out.push_back({a, gsize});
  }
  return out;
}

// All reads of the census go through scratch buffers, reused batch after
// batch: fresh memory costs a page fault and the kernel's zeroing per page,
// and on this kind of VM that, not the copy, dominated a 100k-goroutine
// census (~85 MB of g structs and stacks, read once each).
using Scratch = std::span<uint8_t>;

struct PcsHash {
  size_t operator()(const std::vector<uint64_t>& pcs) const {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t pc : pcs) h = (h ^ pc) * 0x100000001b3ull;
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

// Reads count items (item(i) -> {addr, len}, len at most the scratch size)
// in batches that fit the scratch, in order; use(i, bytes, ok) sees each one
// while its batch is in the scratch and returns false to stop.
// done() runs after each batch's uses and returns false to stop.
template <class Item, class Use, class Done>
void read_in_batches(RemoteMemory& mem, Scratch scratch, size_t count, Item item, Use use, Done done) {
  std::vector<RemoteMemory::Request> reqs;
  for (size_t i = 0; i < count;) {
    reqs.clear();
    uint64_t used = 0;
    size_t first = i;
    for (; i < count; ++i) {
      const auto [addr, len] = item(i);
      if (len > scratch.size() && reqs.empty()) {  // never read: larger than any batch
        if (!use(i, nullptr, false)) return;
        first = i + 1;
        continue;
      }
      if (used + len > scratch.size()) break;
      reqs.push_back({addr, scratch.data() + used, len, false});
      used += len;
    }
    mem.read_batch(reqs);
    for (size_t k = 0; k < reqs.size(); ++k)
      if (!use(first + k, static_cast<const uint8_t*>(reqs[k].buf), reqs[k].ok)) return;
    if (!done()) return;
  }
}
template <class Item, class Use>
void read_in_batches(RemoteMemory& mem, Scratch scratch, size_t count, Item item, Use use) {
  read_in_batches(mem, scratch, count, item, use, [] { return true; });
}

// A saved sp inside a plausible [lo, hi), validated before any read.
bool plausible_stack(const GFields& f) {
  const uint64_t sp = f.place.sp();
  return f.place.pc() != 0 && f.stack_lo < f.stack_hi && f.stack_hi - f.stack_lo <= kMaxStackSize &&
         sp >= f.stack_lo && sp < f.stack_hi && sp % 8 == 0;
}

// A stack is worth reading unless the goroutine is on a CPU (its saved
// state is stale) or its stack is being moved.
bool has_saved_stack(uint32_t status) {
  switch (static_cast<GoGStatus>(status)) {
    case GoGStatus::kRunnable:
    case GoGStatus::kSyscall:
    case GoGStatus::kWaiting:
    case GoGStatus::kPreempted:
    case GoGStatus::kLeaked:
      return true;
    default:
      return false;
  }
}

// Running, about to run, or stopped for the GC on its way back to running:
// its saved state may change at any moment, and that is no inconsistency.
bool expected_to_move(uint32_t status, bool transient_wait) {
  return status == static_cast<uint32_t>(GoGStatus::kRunnable) ||
         status == static_cast<uint32_t>(GoGStatus::kRunning) ||
         status == static_cast<uint32_t>(GoGStatus::kPreempted) ||
         (status == static_cast<uint32_t>(GoGStatus::kWaiting) && transient_wait);
}

// The same goroutine, parked at the same pc, on a stack that moved.
bool only_stack_moved(const GPlace& first, const GPlace& now) {
  return now.goid == first.goid && now.status == first.status && now.in_syscall() == first.in_syscall() &&
         now.pc() == first.pc() && now.sp() != first.sp();
}

// runtime.elideWrapperCalling, and the inline rule: a wrapper frame is left
// out unless it called a panic (then the wrapper is where it happened) or its
// pc lies in a body inlined into it (whose frames that pc carries). A callee
// with an ordinary funcID is no panic function: only special ones are looked
// up by name.
bool elide_wrapper(const GoPclntab& tab, const GoPclntab::FrameInfo& wrapper, uint8_t callee_func_id,
                   uint64_t callee_entry) {
  if (wrapper.in_inlined_body) return false;
  if (callee_func_id != 0)
    if (auto callee = tab.find_func(callee_entry))
      if (callee->name == "runtime.gopanic" || callee->name == "runtime.sigpanic" ||
          callee->name == "runtime.panicwrap")
        return false;
  return true;
}

bool is_gone(uint32_t status) {
  return status == static_cast<uint32_t>(GoGStatus::kDead) || status == static_cast<uint32_t>(GoGStatus::kIdle) ||
         status == static_cast<uint32_t>(GoGStatus::kDeadExtra) ||
         status == static_cast<uint32_t>(GoGStatus::kMoribund);
}

}  // namespace

GoUnwindResult unwind_go_stack(const GoPclntab& tab, uint64_t load_bias, uint64_t pc, uint64_t sp, uint64_t bp,
                               uint64_t stack_base, std::span<const uint8_t> stack, size_t max_depth,
                               GoFrameCache* frames, uint8_t wrapper_func_id) {
  GoUnwindResult r;
  unwind_go_stack(tab, load_bias, pc, sp, bp, stack_base, stack, max_depth, frames, r, wrapper_func_id);
  return r;
}

void unwind_go_stack(const GoPclntab& tab, uint64_t load_bias, uint64_t pc, uint64_t sp, uint64_t bp,
                     uint64_t stack_base, std::span<const uint8_t> stack, size_t max_depth, GoFrameCache* frames,
                     GoUnwindResult& r, uint8_t wrapper_func_id) {
  r.pcs.clear();
  r.ok = true;
  r.truncated = r.fp_mismatch = false;
  r.fp_checked = 0;
  const uint64_t stack_end = stack_base + stack.size();
  bool check_fp = bp != 0;
  uint8_t callee_func_id = 0;  // of the frame below (the leaf has none: ordinary)
  uint64_t callee_entry = 0;
  // The depth counts recorded frames, as the runtime's does (an elided
  // wrapper takes no slot); the walk itself is bounded apart, since every
  // frame moves sp up and a window holds only so many.
  for (size_t walked = 0;; ++walked) {
    if (r.pcs.size() >= max_depth || walked >= 2 * max_depth + 64) {
      r.truncated = true;
      break;
    }
    if (pc < load_bias) {
      r.ok = false;
      break;
    }
    std::optional<GoPclntab::FrameInfo> fi;
    if (frames) {
      auto [it, fresh] = frames->try_emplace(pc - load_bias);
      if (fresh) it->second = tab.frame_info(pc - load_bias);
      fi = it->second;
    } else {
      fi = tab.frame_info(pc - load_bias);
    }
    if (!fi) {
      r.ok = false;
      break;
    }
    // tracebackPCs stores symPC + 1: the return pc itself, or entry + 1 for
    // a frame that has not run yet (sched.pc at the function's entry).
    const uint64_t stored = pc - load_bias == fi->entry ? pc + 1 : pc;
    if (!(wrapper_func_id != 0 && fi->func_id == wrapper_func_id &&
          elide_wrapper(tab, *fi, callee_func_id, callee_entry)))
      r.pcs.push_back(stored);
    callee_func_id = fi->func_id;
    callee_entry = fi->entry;
    if (fi->top_frame) break;  // runtime.goexit (and mstart etc.): the unwind ends
    if (static_cast<uint64_t>(fi->sp_delta) > kMaxFrameSize) {
      r.ok = false;
      break;
    }
    // amd64: the frame is sp_delta bytes, then the return address.
    const uint64_t fp = sp + static_cast<uint64_t>(fi->sp_delta) + 8;
    if (fp < sp || fp - 8 < stack_base) {
      r.ok = false;
      break;
    }
    if (fp > stack_end) {
      r.truncated = true;  // beyond the bytes we have
      break;
    }
    if (check_fp && fi->assembly) {
      check_fp = false;
    } else if (check_fp && fi->sp_delta > 0) {
      // The runtime's varp: this frame's BP slot, just below the return address.
      const uint64_t slot = fp - 16;
      if (slot < sp || slot < stack_base || bp != slot) {
        r.ok = false;
        r.fp_mismatch = true;
        break;
      }
      ++r.fp_checked;
      bp = u64_at(stack.data() + (slot - stack_base));  // the caller's BP, saved by the prologue
    }
    const uint64_t lr = u64_at(stack.data() + (fp - 8 - stack_base));
    if (lr == 0) break;
    pc = lr;
    sp = fp;
  }
}

GoGoroutineRead read_go_goroutines(RemoteMemory& mem, const GoGoroutineAddrs& addrs, const GoGLayout& l,
                                   const GoPclntab& tab, uint64_t load_bias, const CaptureOptions& opts,
                                   const Deadline& deadline) {
  GoGoroutineRead out;
  auto fail = [&out](SnapshotStatus s, std::string why) {
    out.status = s;
    out.reason = std::move(why);
    return std::move(out);
  };
  auto partial = [&out](const std::string& why) {
    if (out.status == SnapshotStatus::kComplete) out.status = SnapshotStatus::kPartial;
    out.reason += (out.reason.empty() ? "" : "; ") + why;
  };

  // 1. allglen, then allgptr, in that order and as two reads: allgadd stores
  // the new pointer before the new length, so the array behind the pointer
  // read second has at least the length read first.
  uint64_t len = 0, ptr = 0;
  if (!mem.read_value(addrs.allglen, len) || !mem.read_value(addrs.allgptr, ptr))
    return fail(SnapshotStatus::kFailed, "cannot read runtime.allglen/allgptr");
  out.allglen = len;
  if (len == 0) return fail(SnapshotStatus::kFailed, "runtime.allglen is 0 (runtime not initialised?)");
  if (len > opts.max_goroutines)
    return fail(SnapshotStatus::kFailed, "runtime.allglen " + std::to_string(len) + " exceeds the cap " +
                                             std::to_string(opts.max_goroutines));
  if (ptr == 0 || ptr % 8) return fail(SnapshotStatus::kFailed, "runtime.allgptr is not a pointer");
  std::vector<uint64_t> gptrs(len);
  if (!mem.read(ptr, gptrs.data(), len * 8)) return fail(SnapshotStatus::kFailed, "cannot read runtime.allgs");

  // 2. The g structs, in windows. A g listed twice would be counted twice:
  // a hostile or torn list, said so.
  std::vector<uint64_t> sorted;
  sorted.reserve(len);
  for (uint64_t p : gptrs)
    if (p != 0 && p % 8 == 0 && p + l.size > p) sorted.push_back(p);
  std::sort(sorted.begin(), sorted.end());
  const size_t before = sorted.size();
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  if (sorted.size() != len) {
    partial(std::to_string(len - sorted.size()) + " allgs entries are null, misaligned or duplicated (" +
            std::to_string(before - sorted.size()) + " duplicates)");
  }
  const std::vector<GWindow> windows = plan_windows(sorted, l.size);

  // 3.-6. A pipeline, one scratch-full of g structs at a time: decode them,
  // read and unwind the stacks of those not running, then re-read where each
  // of them is, and read again those that did not hold still. Memory stays
  // two scratch buffers whatever the goroutine count, and a goroutine's
  // re-check follows its first read by milliseconds.
  struct Pending {
    GPlace first;  // as first read
    uint64_t g;    // address
    uint64_t bp, stack_hi;
    uint32_t index;  // into out.goroutines (allglen is capped far below 2^32)
    uint32_t len;    // the first stack window (at most kStackWindow)
    bool unwound = false, fp_mismatch = false;
  };
  std::vector<Pending> pending;  // this batch's goroutines with a stack
  // One mapping: the g structs' part sized to what the windows hold (a few
  // KiB for most programs), then the stacks'. Only the pages read into are
  // faulted in, so a small census touches one huge page, not six MiB.
  uint64_t g_bytes = 0;
  for (const GWindow& w : windows) g_bytes = std::min(g_bytes + w.len, kGScratchBytes);
  g_bytes = (g_bytes + 4095) & ~uint64_t{4095};
  UntouchedBuffer scratch(g_bytes + kStackScratchBytes);
  const Scratch g_scratch(scratch.data(), g_bytes), stack_scratch(scratch.data() + g_bytes, kStackScratchBytes);
  out.goroutines.reserve(sorted.size());
  uint64_t stack_bytes = 0;
  bool g_unreadable = false, exited = false, out_of_time = false;
  size_t next_g = 0;  // into sorted: windows cover it in order
  const size_t depth = std::min<size_t>(l.profile_depth, opts.max_stack_depth);
  GoFrameCache frames;
  std::vector<uint8_t> deeper;
  GoUnwindResult u;
  std::unordered_map<std::vector<uint64_t>, uint32_t, PcsHash> interned;

  const uint8_t wrapper = go_func_id_wrapper(l.minor);
  // A waiting goroutine whose wait reason only hands its stack to the GC.
  std::array<bool, 256> transient_wait{};
  for (size_t r = 0; r < transient_wait.size(); ++r)
    transient_wait[r] = go_wait_is_transient(l.minor, static_cast<uint8_t>(r));
  auto moves_anyway = [&](const GoGoroutine& g) { return expected_to_move(g.status, transient_wait[g.wait_reason]); };

  // Goroutines to read again after this batch's re-check, and what they
  // have (no stack, and why) if no round gives them a consistent one.
  struct Again {
    uint64_t g;
    uint32_t index;
    GoStackMissing why;
  };
  std::vector<Again> again, rereading;

  // 3. Which goroutines get a stack, and where it starts.
  auto plan_stack = [&](uint64_t a, const GFields& f, uint32_t index) {
    const uint64_t n = std::min(f.stack_hi - f.place.sp(), kStackWindow);
    if (stack_bytes + n > opts.max_read_bytes) {
      partial("stack bytes cap reached: some goroutines have no stack");
      return;
    }
    stack_bytes += n;
    pending.push_back({f.place, a, f.bp(), f.stack_hi, index, static_cast<uint32_t>(n)});
  };
  auto decode_window = [&](size_t i, const uint8_t* bytes, bool ok) {
    if (!ok) return !(g_unreadable = true);
    const GWindow& w = windows[i];
    for (; next_g < sorted.size() && sorted[next_g] + l.size <= w.start + w.len; ++next_g) {
      const uint64_t a = sorted[next_g];
      if (a < w.start) continue;
      const GFields f = decode_g(bytes + (a - w.start), l);
      if (is_gone(f.place.status)) continue;
      GoGoroutine g;
      g.goid = f.place.goid;
      g.status = f.place.status;
      g.wait_reason = f.wait_reason;
      g.gopc = f.gopc;
      g.startpc = f.startpc;
      if (f.stack_lo < f.stack_hi && f.stack_hi - f.stack_lo <= kMaxStackSize) {
        g.stack_lo = f.stack_lo;
        g.stack_hi = f.stack_hi;
      }
      out.goroutines.push_back(std::move(g));
      const auto index = static_cast<uint32_t>(out.goroutines.size() - 1);
      if (out_of_time || !has_saved_stack(f.place.status)) continue;
      if (plausible_stack(f))
        plan_stack(a, f, index);
      else if (f.scanning)  // caught mid-copystack (new bounds, old sp)
        again.push_back({a, index, GoStackMissing::kStackKeptMoving});
    }
    return true;
  };

  // 4. Their stacks, each unwound while in the scratch.
  auto unwind_stack = [&](size_t i, const uint8_t* bytes, bool ok) {
    Pending& p = pending[i];
    if (!ok) {
      out.goroutines[p.index].missing = GoStackMissing::kUnreadable;
      return true;
    }
    if (frames.size() > (1u << 16)) frames.clear();  // bounded: a hostile target has many PCs
    const uint64_t pc = p.first.pc(), sp = p.first.sp();
    unwind_go_stack(tab, load_bias, pc, sp, p.bp, sp, {bytes, p.len}, depth, &frames, u, wrapper);
    if (u.truncated && u.pcs.size() < depth && p.stack_hi - sp > p.len) {
      // Deeper than the first window: one more read of this stack.
      const uint64_t n = std::min(p.stack_hi - sp, kStackWindowRetry);
      if (stack_bytes + n <= opts.max_read_bytes) {
        stack_bytes += n;
        deeper.resize(n);
        if (mem.read(sp, deeper.data(), n))
          unwind_go_stack(tab, load_bias, pc, sp, p.bp, sp, deeper, depth, &frames, u, wrapper);
      }
    }
    // A goroutine that moved under us fails here too (!u.ok); the re-check
    // decides whether that was expected.
    p.unwound = u.ok;
    p.fp_mismatch = u.fp_mismatch;
    if (u.ok && !u.pcs.empty()) {
      auto [it, fresh] = interned.try_emplace(u.pcs, static_cast<uint32_t>(out.stacks.size()));
      if (fresh) out.stacks.push_back(u.pcs);
      out.goroutines[p.index].stack = it->second;
    }
    return true;
  };

  // 5. The re-check: the fields that say where a goroutine is (saved sp/pc,
  // syscall sp/pc, status, goid: one span of each g) read again.
  const uint32_t lo = std::min({l.sched_sp, l.sched_pc, l.syscallsp, l.syscallpc, l.atomicstatus, l.goid});
  const uint32_t hi = std::max({l.sched_sp, l.sched_pc, l.syscallsp, l.syscallpc, l.atomicstatus, l.goid}) + 8;
  auto recheck = [&](size_t i, const uint8_t* span, bool ok) {
    if (!ok) return !(exited = true);
    const Pending& p = pending[i];
    auto at = [&](uint32_t field) { return span + (field - lo); };
    GPlace now;
    now.sched_sp = u64_at(at(l.sched_sp));
    now.sched_pc = u64_at(at(l.sched_pc));
    now.syscallsp = u64_at(at(l.syscallsp));
    now.syscallpc = u64_at(at(l.syscallpc));
    now.goid = u64_at(at(l.goid));
    now.status = u32_at(at(l.atomicstatus)) & ~kGoGScanBit;
    GoGoroutine& g = out.goroutines[p.index];
    if (now != p.first) {
      g.stack = kNoStack;
      if (only_stack_moved(p.first, now) && !moves_anyway(g))
        again.push_back({p.g, p.index, GoStackMissing::kStackKeptMoving});
      else
        g.missing = moves_anyway(g) ? GoStackMissing::kNone : GoStackMissing::kChangedState;
    } else if (!p.unwound && g.missing == GoStackMissing::kNone && !moves_anyway(g)) {
      // Parked where it was, yet its stack does not unwind: read mid-copy,
      // or while it ran between two parks at the same place. Another read
      // decides. (A runnable or GC-stopped goroutine has no stack the census
      // vouches for: one preempted twice at the same instruction of a tight
      // loop looks unmoved while its stack was written in between. It counts
      // without a stack, like any running goroutine.)
      again.push_back({p.g, p.index, p.fp_mismatch ? GoStackMissing::kFramePointers : GoStackMissing::kUnwindFailed});
    }
    return true;
  };
  auto unwind_and_recheck = [&] {
    read_in_batches(
        mem, stack_scratch, pending.size(),
        [&](size_t i) { return std::pair{pending[i].first.sp(), uint64_t{pending[i].len}}; }, unwind_stack);
    read_in_batches(
        mem, stack_scratch, pending.size(), [&](size_t i) { return std::pair{pending[i].g + lo, uint64_t{hi - lo}}; },
        recheck);
    pending.clear();
  };

  // 6. Those that did not hold still: the whole g read again (its new stack
  // bounds and saved state), then steps 4 and 5 for them alone.
  auto reread = [&](size_t i, const uint8_t* bytes, bool ok) {
    if (!ok) return !(exited = true);
    const Again& r = rereading[i];
    const GFields f = decode_g(bytes, l);
    GoGoroutine& g = out.goroutines[r.index];
    if (f.place.goid != g.goid || f.place.status != g.status || !has_saved_stack(f.place.status)) {
      g.missing = moves_anyway(g) ? GoStackMissing::kNone : GoStackMissing::kChangedState;  // it ran after all
    } else if (plausible_stack(f)) {
      ++out.stacks_reread;
      plan_stack(r.g, f, r.index);
    } else {
      again.push_back(r);  // mid-copy again (or bounds that make no sense): the next round decides
    }
    return true;
  };
  auto read_again = [&] {
    for (int round = 0; round < kMaxStackRereads && !again.empty() && !exited; ++round) {
      if (deadline.expired()) break;
      rereading.swap(again);
      again.clear();
      read_in_batches(
          mem, stack_scratch, rereading.size(), [&](size_t i) { return std::pair{rereading[i].g, uint64_t{l.size}}; },
          reread);
      if (!exited) unwind_and_recheck();
    }
    for (const Again& r : again) out.goroutines[r.index].missing = r.why;
    again.clear();
  };

  auto stacks_of_batch = [&] {
    if (!out_of_time && deadline.expired()) {
      out_of_time = true;  // the g structs are still counted; no more stacks
      partial("budget exhausted while unwinding stacks: later goroutines have no stack");
    }
    if (!out_of_time) {
      unwind_and_recheck();
      read_again();
    }
    pending.clear();
    again.clear();
    return !exited;
  };
  read_in_batches(
      mem, g_scratch, windows.size(), [&](size_t i) { return std::pair{windows[i].start, windows[i].len}; },
      decode_window, stacks_of_batch);
  if (g_unreadable) return fail(SnapshotStatus::kFailed, "cannot read the g structs (target exited?)");
  if (exited) return fail(SnapshotStatus::kFailed, "target exited during the census");
  uint64_t len2 = 0;
  if (!mem.read_value(addrs.allglen, len2)) return fail(SnapshotStatus::kFailed, "target exited during the census");
  if (len2 != len)
    partial("goroutines were created during the read (allglen " + std::to_string(len) + " -> " +
            std::to_string(len2) + ")");
  return out;
}

}  // namespace oomsnap
