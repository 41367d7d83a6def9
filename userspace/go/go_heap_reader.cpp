#include "go/go_heap_reader.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <array>
#include <unordered_map>

#include "core/checked_bytes.h"

namespace oomsnap {
namespace {

constexpr size_t kHeaderSize = 48;  // next, allnext, typ, hash, size, nstk
constexpr uint64_t kMemProfileType = 1;

uint64_t load_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

size_t record_words(int go_minor) { return go_minor >= 27 ? 2 : 4; }

// A small read-through cache of windows of remote memory. A miss reads a window
// that reaches back kWindow bytes below the address (allnext links run from
// newer to older buckets, i.e. usually downwards in a persistentalloc chunk)
// clamped to the mapping that holds the address, in one syscall. The window
// buffers are allocated once and recycled: fresh pages cost a page fault each,
// which dominated the read time before.
class WindowCache {
 public:
  WindowCache(RemoteMemory& mem, const std::vector<Mapping>& maps, uint64_t max_bytes)
      : mem_(mem), maps_(maps), max_bytes_(max_bytes),
        arena_(static_cast<uint8_t*>(huge_page_alloc(kSlot * kSlots, arena_mapped_))) {}
  ~WindowCache() { huge_page_free(arena_, kSlot * kSlots); }
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
    w.buf = arena_ + (&w - slots_.data()) * kSlot;
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
  size_t arena_mapped_ = 0;
  uint8_t* arena_;  // kSlots windows in one huge-page mapping
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

size_t go_bucket_size(int go_minor, uint64_t nstk) {
  return kHeaderSize + nstk * 8 + 4 * record_words(go_minor) * 8;
}

uint64_t GoBucketView::pc(size_t i) const { return load_u64(pcs + i * 8); }

std::optional<GoBucketView> decode_go_bucket(std::span<const uint8_t> bytes, int go_minor,
                                             size_t max_stack_depth, std::string& error) {
  const ByteView v(bytes);
  GoBucketView b;
  if (!v.read_u64(8, b.allnext) || !v.read_u64(16, b.typ) || !v.read_u64(32, b.size) || !v.read_u64(40, b.nstk)) {
    error = "bucket header truncated";
    return std::nullopt;
  }
  if (b.typ != kMemProfileType) {
    error = "bucket type " + std::to_string(b.typ) + " is not a heap profile bucket";
    return std::nullopt;
  }
  if (b.nstk == 0 || b.nstk > max_stack_depth) {
    error = "implausible bucket stack depth " + std::to_string(b.nstk);
    return std::nullopt;
  }
  // The PCs and then the records must fit; nstk is the target's, so the size
  // is checked by division (nstk * 8 can wrap when the depth cap is large).
  const size_t words = record_words(go_minor);
  const uint64_t records = 4 * words * 8;
  ByteView pcs, rec;
  if (b.nstk > (v.size() - kHeaderSize) / 8 || !v.sub(kHeaderSize, b.nstk * 8, pcs) ||
      !v.sub(kHeaderSize + b.nstk * 8, records, rec)) {
    error = "bucket truncated";
    return std::nullopt;
  }
  b.pcs = pcs.data();
  for (size_t c = 0; c < 4; ++c)
    for (size_t w = 0; w < words; ++w) rec.read_u64((c * words + w) * 8, b.cycles[c][w]);
  if (go_minor >= 27) {
    for (auto& cyc : b.cycles) {
      cyc[2] = cyc[0] * b.size;
      cyc[3] = cyc[1] * b.size;
    }
  }
  return b;
}

void fold_go_cycles(const GoBucketView& b, std::optional<uint32_t> flush_index, uint64_t out[4],
                    uint64_t extra[4]) {
  for (int w = 0; w < 4; ++w) {
    out[w] = b.cycles[0][w];
    extra[w] = 0;
    for (uint32_t f = 0; f < 3; ++f) {
      if (flush_index && f == *flush_index) out[w] += b.cycles[1 + f][w];
      else extra[w] += b.cycles[1 + f][w];
    }
  }
}

void go_recent_cycles(const uint64_t extra[4], uint64_t& objects, uint64_t& bytes) {
  objects = extra[0] > extra[1] ? extra[0] - extra[1] : 0;
  bytes = extra[2] > extra[3] ? extra[2] - extra[3] : 0;
}

namespace {

// 64 bits: for 10^6 distinct stacks a collision is about 3·10^-8 likely.
uint64_t stack_hash(const GoBucketView& b) {
  uint64_t h = 0x243F6A8885A308D3ull ^ b.nstk;
  for (uint64_t i = 0; i < b.nstk; ++i) {
    h = (h ^ b.pc(i)) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  }
  return h;
}

std::string hex(uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace

GoHeapReadResult read_go_heap(RemoteMemory& mem, const std::vector<Mapping>& maps,
                              const GoHeapAddrs& addrs, int go_minor, const CaptureOptions& opts,
                              const Deadline& deadline, bool keep_stacks) {
  GoHeapReadResult res;
  res.profile.go_minor = go_minor;

  // The globals in one batched read.
  uint64_t head = 0;
  int64_t rate = 0;
  uint32_t cycle = 0;
  std::vector<RemoteMemory::Request> reqs = {{addrs.mbuckets, &head, 8},
                                             {addrs.mem_profile_rate, &rate, 8}};
  if (addrs.mprof_cycle) reqs.push_back({*addrs.mprof_cycle, &cycle, 4});
  mem.read_batch(reqs);
  if (!reqs[1].ok) {
    res.status = SnapshotStatus::kUnavailable;
    res.reason = "cannot read runtime.MemProfileRate: " + std::string(std::strerror(mem.last_errno()));
    return res;
  }
  res.profile.mem_profile_rate = rate;
  if (rate == 0) {
    res.status = SnapshotStatus::kUnavailable;
    res.reason = "sampling disabled (runtime.MemProfileRate = 0)";
    return res;
  }
  if (rate < 0) {
    res.status = SnapshotStatus::kUnavailable;
    res.reason = "implausible runtime.MemProfileRate " + std::to_string(rate);
    return res;
  }
  if (!reqs[0].ok) {
    res.status = SnapshotStatus::kFailed;
    res.reason = "cannot read runtime.mbuckets: " + std::string(std::strerror(mem.last_errno()));
    return res;
  }
  std::optional<uint32_t> flush_index;
  if (addrs.mprof_cycle && reqs.size() > 2 && reqs[2].ok) flush_index = (cycle >> 1) % 3;

  WindowCache cache(mem, maps, opts.max_read_bytes);
  CycleDetector cycle_check;
  // Untouched capacity costs no page faults; growing by copies would.
  res.summaries.reserve(std::min<size_t>(opts.max_records, 1u << 21));
  if (keep_stacks) {
    res.profile.buckets.reserve(std::min<size_t>(opts.max_records, 1u << 21));
    res.profile.pcs.reserve(std::min<size_t>(opts.max_records, 1u << 21) * 24);
  }
  // MemProfile adds the other futures only when no bucket has an active count;
  // keep them just until the first bucket that has one.
  bool any_active = false;
  struct Pending {
    uint64_t v[4], extra[4], size;
  };
  std::vector<Pending> pending;
  auto set_inuse = [&](GoBucketSummary& s, const uint64_t v[4], uint64_t size) {
    uint64_t objs = v[0] > v[1] ? v[0] - v[1] : 0;
    uint64_t bytes = v[2] > v[3] ? v[2] - v[3] : 0;
    s.sampled_objects = objs;
    s.sampled_bytes = bytes;
    auto [o, b] = scale_heap_sample(static_cast<int64_t>(objs), static_cast<int64_t>(bytes), rate, go_minor, size);
    s.inuse_objects = o > 0 ? static_cast<uint64_t>(o) : 0;
    s.inuse_bytes = b > 0 ? static_cast<uint64_t>(b) : 0;
  };
  const size_t max_depth = opts.max_stack_depth + 2;  // 1.26+ stores two allocator frames extra
  auto stop = [&](SnapshotStatus s, std::string why) {
    res.status = s;
    res.reason = std::move(why) + " after " + std::to_string(res.summaries.size()) + " buckets";
  };
  auto stop_broken = [&](std::string why) {
    stop(res.summaries.empty() ? SnapshotStatus::kFailed : SnapshotStatus::kPartial, std::move(why));
  };
  auto unreadable = [&] {
    return mem.last_errno() == ESRCH ? std::string("target exited during the read")
                                     : std::string("unreadable bucket");
  };
  for (uint64_t addr = head; addr != 0;) {
    const size_t n = res.summaries.size();
    if (n >= opts.max_records) {
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
      // Trim the laps walked twice: keep up to the first bucket seen again.
      std::unordered_map<uint64_t, size_t> first_seen;
      size_t keep = res.summaries.size();
      for (size_t i = 0; i < res.summaries.size(); ++i) {
        if (!first_seen.emplace(res.summaries[i].addr(), i).second) {
          keep = i;
          break;
        }
      }
      res.summaries.resize(keep);
      if (keep_stacks) res.profile.buckets.resize(keep);
      if (pending.size() > keep) pending.resize(keep);
      stop(SnapshotStatus::kPartial, "cycle in bucket list at " + hex(addr));
      break;
    }
    if (addr >> 48) {  // not a user-space pointer
      stop_broken("implausible bucket pointer " + hex(addr));
      break;
    }
    const uint8_t* hdr = cache.get(addr, kHeaderSize);
    if (!hdr) {
      stop_broken(unreadable());
      break;
    }
    uint64_t nstk = load_u64(hdr + 40);
    if (nstk == 0 || nstk > max_depth) {
      stop_broken("implausible bucket stack depth " + std::to_string(nstk) +
                  " (target changed or memory corrupt)");
      break;
    }
    size_t full = go_bucket_size(go_minor, nstk);
    const uint8_t* whole = cache.get(addr, full);
    if (!whole) {
      stop_broken(unreadable());
      break;
    }
    std::string err;
    auto b = decode_go_bucket({whole, full}, go_minor, max_depth, err);
    if (!b) {
      stop_broken(err);
      break;
    }
    GoBucketSummary s;
    s.where = addr | (nstk << 48);
    s.stack_hash = stack_hash(*b);
    uint64_t v[4], extra[4];
    fold_go_cycles(*b, flush_index, v, extra);
    set_inuse(s, v, b->size);
    go_recent_cycles(extra, s.recent_objects, s.recent_bytes);
    if (!any_active) {
      if (v[0] != 0 || v[1] != 0) {
        any_active = true;
        pending.clear();
        pending.shrink_to_fit();
      } else {
        pending.push_back({{v[0], v[1], v[2], v[3]}, {extra[0], extra[1], extra[2], extra[3]}, b->size});
      }
    }
    res.summaries.push_back(s);
    if (keep_stacks) {
      // The PCs are little-endian u64 in the window, as the pool wants them.
      GoHeapBucket& hb = res.profile.add_bucket(
          b->size, std::span<const uint64_t>(reinterpret_cast<const uint64_t*>(b->pcs), nstk));
      hb.allocs = v[0];
      hb.frees = v[1];
      hb.alloc_bytes = v[2];
      hb.free_bytes = v[3];
      hb.recent_objects = s.recent_objects;
      hb.recent_bytes = s.recent_bytes;
    }
    addr = b->allnext;
  }
  if (!any_active) {
    // No GC yet: MemProfile accumulates every future cycle into the in-use
    // view, so nothing is left to call recent (it would be counted twice).
    for (size_t i = 0; i < res.summaries.size() && i < pending.size(); ++i) {
      uint64_t v[4];
      for (int w = 0; w < 4; ++w) v[w] = pending[i].v[w] + pending[i].extra[w];
      set_inuse(res.summaries[i], v, pending[i].size);
      res.summaries[i].recent_objects = res.summaries[i].recent_bytes = 0;
      if (keep_stacks) {
        auto& hb = res.profile.buckets[i];
        hb.allocs = v[0];
        hb.frees = v[1];
        hb.alloc_bytes = v[2];
        hb.free_bytes = v[3];
        hb.recent_objects = hb.recent_bytes = 0;
      }
    }
  }
  return res;
}

std::vector<std::vector<uint64_t>> read_bucket_stacks(RemoteMemory& mem,
                                                      std::span<const GoBucketSummary* const> buckets) {
  std::vector<std::vector<uint64_t>> out(buckets.size());
  std::vector<RemoteMemory::Request> reqs;
  reqs.reserve(buckets.size());
  for (size_t i = 0; i < buckets.size(); ++i) {
    out[i].resize(buckets[i]->nstk());
    reqs.push_back({buckets[i]->addr() + kHeaderSize, out[i].data(), out[i].size() * 8});
  }
  mem.read_batch(reqs);
  for (size_t i = 0; i < reqs.size(); ++i)
    if (!reqs[i].ok) out[i].clear();
  return out;
}

}  // namespace oomsnap
