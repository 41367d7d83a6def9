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
#include "go/go_goroutines.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "core/huge_page_allocator.h"
#include "go/go_pclntab.h"

namespace oomsnap {
namespace {

constexpr uint64_t kMaxStackSize = 1ull << 30;     // runtime maxstacksize on 64-bit
constexpr uint64_t kStackWindow = 64 * 1024;       // first read per stack: most parked stacks are smaller
constexpr uint64_t kStackWindowRetry = 1ull << 20;  // a deeper stack gets one more read of this much
constexpr uint64_t kGWindowMax = 1ull << 20;       // one iovec of g structs at most this long
constexpr uint64_t kMaxFrameSize = 1ull << 30;

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

// The fields of one g the census uses, decoded from its bytes.
struct GFields {
  uint64_t stack_lo = 0, stack_hi = 0, sched_sp = 0, sched_pc = 0, syscallsp = 0, syscallpc = 0;
  uint64_t goid = 0, gopc = 0, startpc = 0;
  uint32_t status = 0;
  uint8_t wait_reason = 0;
  bool same_place(const GFields& o) const {
    return status == o.status && goid == o.goid && sched_sp == o.sched_sp && sched_pc == o.sched_pc &&
           syscallsp == o.syscallsp && syscallpc == o.syscallpc;
  }
};

GFields decode_g(const uint8_t* g, const GoGLayout& l) {
  GFields f;
  f.stack_lo = u64_at(g + l.stack_lo);
  f.stack_hi = u64_at(g + l.stack_hi);
  f.sched_sp = u64_at(g + l.sched_sp);
  f.sched_pc = u64_at(g + l.sched_pc);
  f.syscallsp = u64_at(g + l.syscallsp);
  f.syscallpc = u64_at(g + l.syscallpc);
  f.goid = u64_at(g + l.goid);
  f.gopc = u64_at(g + l.gopc);
  f.startpc = u64_at(g + l.startpc);
  f.status = u32_at(g + l.atomicstatus);
  f.wait_reason = g[l.waitreason];
  return f;
}

// g structs sorted by address, grouped into windows read with one iovec each
// (they come from the same spans, so neighbours share a window). All windows
// live in one huge-page buffer: fresh memory costs a page fault per 4 KiB,
// which dominated 100k-goroutine reads on this kind of VM.
struct GWindow {
  uint64_t start = 0, len = 0, off = 0;  // off: into GWindows::buf
};
struct GWindows {
  std::vector<GWindow> list;
  std::vector<uint8_t, HugePageAllocator<uint8_t>> buf;
};

GWindows plan_windows(const std::vector<uint64_t>& sorted, uint64_t gsize) {
  GWindows out;
  uint64_t total = 0;
  for (uint64_t a : sorted) {
    if (!out.list.empty()) {
      GWindow& w = out.list.back();
      const uint64_t end = w.start + w.len;
      if (a >= end && a - end <= 2 * gsize && a + gsize - w.start <= kGWindowMax) {
        total += a + gsize - end;
        w.len = a + gsize - w.start;
        continue;
      }
    }
    out.list.push_back({a, gsize, total});
    total += gsize;
  }
  out.buf.resize(total);
  return out;
}

// Reads every window; false when any could not be read (the target exited or
// unmapped a span: g memory is never unmapped while the process lives).
bool read_windows(RemoteMemory& mem, GWindows& windows) {
  std::vector<RemoteMemory::Request> reqs;
  reqs.reserve(windows.list.size());
  for (auto& w : windows.list) reqs.push_back({w.start, windows.buf.data() + w.off, w.len, false});
  return mem.read_batch(reqs) == reqs.size();
}

// The bytes of the g at addr inside the windows (binary search).
const uint8_t* g_bytes(const GWindows& windows, uint64_t addr, uint64_t gsize) {
  const auto& l = windows.list;
  auto it = std::upper_bound(l.begin(), l.end(), addr, [](uint64_t a, const GWindow& w) { return a < w.start; });
  if (it == l.begin()) return nullptr;
  --it;
  if (addr - it->start + gsize > it->len) return nullptr;
  return windows.buf.data() + it->off + (addr - it->start);
}

// Where the runtime's unwinder starts for a goroutine that is not running
// (unwinder.initAt with pc = sp = ^0): the syscall pair when syscallsp is
// set, else the saved scheduler state.
bool stack_start(const GFields& f, uint64_t& pc, uint64_t& sp) {
  if (f.syscallsp != 0) {
    pc = f.syscallpc;
    sp = f.syscallsp;
  } else {
    pc = f.sched_pc;
    sp = f.sched_sp;
  }
  // Validated before any read: sp inside a plausible [lo, hi).
  return pc != 0 && f.stack_lo < f.stack_hi && f.stack_hi - f.stack_lo <= kMaxStackSize && sp >= f.stack_lo &&
         sp < f.stack_hi && sp % 8 == 0;
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

bool expected_to_move(uint32_t status) {
  return status == static_cast<uint32_t>(GoGStatus::kRunnable) ||
         status == static_cast<uint32_t>(GoGStatus::kRunning) ||
         status == static_cast<uint32_t>(GoGStatus::kPreempted);
}

bool is_gone(uint32_t status) {
  return status == static_cast<uint32_t>(GoGStatus::kDead) || status == static_cast<uint32_t>(GoGStatus::kIdle) ||
         status == static_cast<uint32_t>(GoGStatus::kDeadExtra) ||
         status == static_cast<uint32_t>(GoGStatus::kMoribund);
}

}  // namespace

GoUnwindResult unwind_go_stack(const GoPclntab& tab, uint64_t load_bias, uint64_t pc, uint64_t sp,
                               uint64_t stack_base, std::span<const uint8_t> stack, size_t max_depth,
                               GoFrameCache* frames) {
  GoUnwindResult r;
  const uint64_t stack_end = stack_base + stack.size();
  for (size_t depth = 0;; ++depth) {
    if (depth >= max_depth) {
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
    r.pcs.push_back(pc - load_bias == fi->entry ? pc + 1 : pc);
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
    const uint64_t lr = u64_at(stack.data() + (fp - 8 - stack_base));
    if (lr == 0) break;
    pc = lr;
    sp = fp;
  }
  return r;
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
  GWindows windows = plan_windows(sorted, l.size);
  if (!read_windows(mem, windows)) return fail(SnapshotStatus::kFailed, "cannot read the g structs (target exited?)");
  if (deadline.expired()) return fail(SnapshotStatus::kPartial, "budget exhausted after reading the g structs");

  // 3. Which goroutines get a stack, and where it starts.
  struct Pending {
    size_t index;     // into out.goroutines
    uint64_t g;       // address
    GFields first;
    uint64_t pc, sp;
    uint64_t off, len;  // the stack window in stack_buf
  };
  std::vector<Pending> pending;
  pending.reserve(sorted.size());
  out.goroutines.reserve(sorted.size());
  uint64_t stack_bytes = 0;
  const size_t depth = std::min<size_t>(l.profile_depth, opts.max_stack_depth);
  for (uint64_t a : sorted) {
    const uint8_t* gb = g_bytes(windows, a, l.size);
    if (!gb) continue;
    GFields f = decode_g(gb, l);
    f.status &= ~kGoGScanBit;
    if (is_gone(f.status)) continue;
    GoGoroutine g;
    g.goid = f.goid;
    g.status = f.status;
    g.wait_reason = f.wait_reason;
    g.gopc = f.gopc;
    g.startpc = f.startpc;
    out.goroutines.push_back(std::move(g));
    uint64_t pc = 0, sp = 0;
    if (!has_saved_stack(f.status) || !stack_start(f, pc, sp)) continue;
    const uint64_t n = std::min(f.stack_hi - sp, kStackWindow);
    if (stack_bytes + n > opts.max_read_bytes) {
      partial("stack bytes cap reached: some goroutines have no stack");
      continue;
    }
    stack_bytes += n;
    pending.push_back({out.goroutines.size() - 1, a, f, pc, sp, stack_bytes - n, n});
  }
  std::vector<uint8_t, HugePageAllocator<uint8_t>> stack_buf(stack_bytes);

  // 4. Every stack window in one scatter-gather batch, then the unwinds.
  {
    std::vector<RemoteMemory::Request> reqs;
    reqs.reserve(pending.size());
    for (auto& p : pending) reqs.push_back({p.sp, stack_buf.data() + p.off, p.len, false});
    mem.read_batch(reqs);
    size_t unreadable = 0, bad = 0;
    GoFrameCache frames;
    for (size_t i = 0; i < pending.size(); ++i) {
      auto& p = pending[i];
      if (!reqs[i].ok) {
        ++unreadable;
        continue;
      }
      if (deadline.expired()) {
        partial("budget exhausted while unwinding stacks");
        break;
      }
      if (frames.size() > (1u << 16)) frames.clear();  // bounded: a hostile target has many PCs
      GoUnwindResult u = unwind_go_stack(tab, load_bias, p.pc, p.sp, p.sp, {stack_buf.data() + p.off, p.len},
                                         depth, &frames);
      if (u.truncated && u.pcs.size() < depth && p.first.stack_hi - p.sp > p.len) {
        // Deeper than the first window: one more read of this stack.
        const uint64_t n = std::min(p.first.stack_hi - p.sp, kStackWindowRetry);
        if (stack_bytes + n <= opts.max_read_bytes) {
          stack_bytes += n;
          std::vector<uint8_t> deeper(n);
          if (mem.read(p.sp, deeper.data(), n))
            u = unwind_go_stack(tab, load_bias, p.pc, p.sp, p.sp, deeper, depth, &frames);
        }
      }
      if (!u.ok) {
        // A goroutine that moved under us fails here too; the re-check
        // below decides whether that was expected.
        ++bad;
      }
      GoGoroutine& g = out.goroutines[p.index];
      g.pcs = std::move(u.pcs);
      g.stack_read = u.ok;
    }
    if (unreadable) partial(std::to_string(unreadable) + " goroutine stacks could not be read");
    (void)bad;
  }

  // 5. The re-check: the fields that say where a goroutine is (saved sp/pc,
  // syscall sp/pc, status, goid: one span of each g) read again, and allglen.
  if (!pending.empty() && !deadline.expired()) {
    const uint32_t lo = std::min({l.sched_sp, l.sched_pc, l.syscallsp, l.syscallpc, l.atomicstatus, l.goid});
    const uint32_t hi = std::max({l.sched_sp, l.sched_pc, l.syscallsp, l.syscallpc, l.atomicstatus, l.goid}) + 8;
    std::vector<uint8_t, HugePageAllocator<uint8_t>> again(pending.size() * (hi - lo));
    std::vector<RemoteMemory::Request> reqs;
    reqs.reserve(pending.size());
    for (size_t i = 0; i < pending.size(); ++i)
      reqs.push_back({pending[i].g + lo, again.data() + i * (hi - lo), hi - lo, false});
    if (mem.read_batch(reqs) != reqs.size()) return fail(SnapshotStatus::kFailed, "target exited during the census");
    size_t bad_stacks = 0;
    for (size_t i = 0; i < pending.size(); ++i) {
      const Pending& p = pending[i];
      // Only the span's fields are compared; the rest stay as first read.
      GFields now = p.first;
      const uint8_t* span = again.data() + i * (hi - lo);
      auto at = [&](uint32_t field) { return span + (field - lo); };
      now.sched_sp = u64_at(at(l.sched_sp));
      now.sched_pc = u64_at(at(l.sched_pc));
      now.syscallsp = u64_at(at(l.syscallsp));
      now.syscallpc = u64_at(at(l.syscallpc));
      now.goid = u64_at(at(l.goid));
      now.status = u32_at(at(l.atomicstatus)) & ~kGoGScanBit;
      GoGoroutine& g = out.goroutines[p.index];
      if (!now.same_place(p.first)) {
        g.pcs.clear();
        g.stack_read = false;
        g.moved = !expected_to_move(p.first.status);
      } else if (!g.stack_read) {
        ++bad_stacks;  // still where it was, yet not unwindable: say so
      }
    }
    if (bad_stacks)
      partial(std::to_string(bad_stacks) + " goroutine stacks could not be unwound (unknown pc or sp out of range)");
  }
  uint64_t len2 = 0;
  if (!mem.read_value(addrs.allglen, len2)) return fail(SnapshotStatus::kFailed, "target exited during the census");
  if (len2 != len)
    partial("goroutines were created during the read (allglen " + std::to_string(len) + " -> " +
            std::to_string(len2) + ")");
  return out;
}

}  // namespace oomsnap
