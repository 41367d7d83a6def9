#include "go/go_bucket_walk.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "base/text.h"
#include "base/huge_page_allocator.h"

namespace oomsnap {
namespace {

uint64_t load_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// A small read-through cache of windows of remote memory. A miss reads a window
// that reaches back kWindow bytes below the address (allnext links run from
// newer to older buckets, i.e. usually downwards in a persistentalloc chunk)
// clamped to the mapping that holds the address, in one syscall. The window
// buffers are allocated once and recycled: fresh pages cost a page fault each,
// which dominated the read time before.
class WindowCache {
 public:
  WindowCache(RemoteMemory& mem, const std::vector<Mapping>& maps, uint64_t max_bytes)
      : mem_(mem), maps_(maps), max_bytes_(max_bytes), arena_(kSlot * kSlots) {}
  WindowCache(const WindowCache&) = delete;
  WindowCache& operator=(const WindowCache&) = delete;

  // Pointer to len readable bytes at addr, or nullptr (errno in mem_.last_errno()).
  // Valid until the next call.
  const uint8_t* get(uint64_t addr, size_t len) {
    for (auto& w : slots_)
      if (w.len && addr >= w.start && addr + len <= w.start + w.len) return w.buf + (addr - w.start);
    uint64_t lo = addr > kWindow - 4096 ? addr - (kWindow - 4096) : 0;
    lo &= ~uint64_t{4095};
    uint64_t hi = std::max<uint64_t>(lo + kWindow, addr + len);
    if (const Mapping* m = mapping_of(addr)) {
      lo = std::max(lo, m->start);
      hi = std::min(hi, m->end);
    } else {
      lo = addr;  // unknown mapping: read exactly what is asked
      hi = addr + len;
    }
    if (hi < addr + len) hi = addr + len;  // straddles the mapping end: let the read fail
    Window& w = slots_[next_++ % slots_.size()];
    w.len = 0;
    w.buf = arena_.data() + (&w - slots_.data()) * kSlot;
    if (hi - lo > kSlot) hi = lo + kSlot;  // cannot happen: buckets are < 9 KiB
    if (hi < addr + len) return nullptr;
    if (!mem_.read(lo, w.buf, hi - lo)) {
      // The window may cross an unreadable page: fall back to the exact range.
      if (mem_.last_errno() == ESRCH) return nullptr;
      lo = addr;
      hi = addr + len;
      if (!mem_.read(lo, w.buf, len)) return nullptr;
    }
    w.start = lo;
    w.len = hi - lo;
    total_ += w.len;
    if (total_ > max_bytes_) over_budget_ = true;
    return w.buf + (addr - lo);
  }
  bool over_budget() const { return over_budget_; }

 private:
  static constexpr uint64_t kWindow = 256 * 1024;  // persistentChunkSize
  static constexpr uint64_t kSlot = kWindow + 16 * 1024;  // a window plus the largest bucket
  static constexpr size_t kSlots = 4;
  struct Window {
    uint64_t start = 0, len = 0;
    uint8_t* buf = nullptr;
  };

  const Mapping* mapping_of(uint64_t addr) {
    if (last_map_ && addr >= last_map_->start && addr < last_map_->end) return last_map_;
    for (const auto& m : maps_)
      if (addr >= m.start && addr < m.end) return last_map_ = &m;
    return nullptr;
  }

  RemoteMemory& mem_;
  const std::vector<Mapping>& maps_;
  const Mapping* last_map_ = nullptr;
  uint64_t max_bytes_;
  uint64_t total_ = 0;
  bool over_budget_ = false;
  UntouchedBuffer arena_;  // kSlots windows in one huge-page mapping
  std::array<Window, kSlots> slots_;
  size_t next_ = 0;
};

// Brent's cycle detection: O(1) memory (a visited set cost more fresh pages
// than the reads themselves). It reports a repeat within two laps of the
// cycle; the caller then trims the duplicated laps off exactly.
class CycleDetector {
 public:
  bool repeats(uint64_t addr) {
    if (addr == saved_) return true;
    if (++steps_ == power_) {
      saved_ = addr;
      power_ *= 2;
      steps_ = 0;
    }
    return false;
  }
 private:
  uint64_t saved_ = 0, power_ = 1, steps_ = 0;
};

}  // namespace

size_t first_repeated_bucket(size_t n, const std::function<uint64_t(size_t)>& addr_at) {
  std::unordered_map<uint64_t, size_t> first_seen;
  for (size_t i = 0; i < n; ++i)
    if (!first_seen.emplace(addr_at(i), i).second) return i;
  return n;
}

GoBucketWalkEnd walk_go_buckets(RemoteMemory& mem, const std::vector<Mapping>& maps, uint64_t head,
                                const GoBucketWalkLimits& limits, const Deadline& deadline,
                                const GoBucketVisitor& visit, const GoBucketCycleTrim& trim) {
  GoBucketWalkEnd end;
  WindowCache cache(mem, maps, limits.max_read_bytes);
  CycleDetector cycle_check;
  size_t n = 0;
  auto stop = [&](SnapshotStatus s, std::string why) {
    end.status = s;
    end.reason = std::move(why) + " after " + std::to_string(n) + " buckets";
  };
  auto stop_broken = [&](std::string why) {
    stop(n == 0 ? SnapshotStatus::kFailed : SnapshotStatus::kPartial, std::move(why));
  };
  auto unreadable = [&] {
    return mem.last_errno() == ESRCH ? std::string("target exited during the read")
                                     : std::string("unreadable bucket");
  };
  for (uint64_t addr = head; addr != 0;) {
    if (n >= limits.max_buckets) {
      stop(SnapshotStatus::kPartial, "bucket cap reached");
      break;
    }
    if ((n & 255) == 0 && deadline.expired()) {
      stop(SnapshotStatus::kPartial, "budget exhausted");
      break;
    }
    if (cache.over_budget()) {
      stop(SnapshotStatus::kPartial, "read byte cap reached");
      break;
    }
    if (cycle_check.repeats(addr)) {
      end.visited = n;
      n = trim ? trim() : n;
      stop(SnapshotStatus::kPartial, "cycle in bucket list at " + hex(addr));
      return end;
    }
    if (addr >> 48) {  // not a user-space pointer
      stop_broken("implausible bucket pointer " + hex(addr));
      break;
    }
    const uint8_t* hdr = cache.get(addr, kGoBucketHeaderSize);
    if (!hdr) {
      stop_broken(unreadable());
      break;
    }
    const uint64_t nstk = load_u64(hdr + 40);
    if (nstk == 0 || nstk > limits.max_depth) {
      stop_broken("implausible bucket stack depth " + std::to_string(nstk) +
                  " (target changed or memory corrupt)");
      break;
    }
    const size_t full = kGoBucketHeaderSize + nstk * 8 + limits.record_bytes;
    const uint8_t* whole = cache.get(addr, full);
    if (!whole) {
      stop_broken(unreadable());
      break;
    }
    std::string why;
    auto next = visit(addr, {whole, full}, why);
    if (!next) {
      stop_broken(why);
      break;
    }
    ++n;
    addr = *next;
  }
  end.visited = n;
  return end;
}

}  // namespace oomsnap
