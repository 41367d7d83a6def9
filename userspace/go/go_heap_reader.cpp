#include "go/go_heap_reader.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/checked_bytes.h"
#include "go/go_bucket_walk.h"

namespace oomsnap {
namespace {

constexpr size_t kHeaderSize = kGoBucketHeaderSize;
constexpr uint64_t kMemProfileType = 1;

size_t record_words(int go_minor) { return go_minor >= 27 ? 2 : 4; }

}  // namespace

size_t go_bucket_size(int go_minor, uint64_t nstk) {
  return kHeaderSize + nstk * 8 + 4 * record_words(go_minor) * 8;
}

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
  // rec holds exactly 4 × words u64 (checked above): copied a cycle at a time.
  for (size_t c = 0; c < 4; ++c) std::memcpy(b.cycles[c], rec.data() + c * words * 8, words * 8);
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
// Four independent multiply chains (PCs i, i+4, ...) folded at the end: one
// chain's latency (multiply, shift, xor per PC) bounded the walk on 100,000
// buckets of ~24 PCs. Scalar on purpose: vectorized, x86-64's baseline has no
// 64-bit multiply and emulates it in three.
inline uint64_t hash_step(uint64_t h, uint64_t pc) {
  h = (h ^ pc) * 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 29);
}

#if defined(__GNUC__) && !defined(__clang__)
#define OOMSNAP_SCALAR __attribute__((optimize("no-tree-vectorize")))
#else
#define OOMSNAP_SCALAR  // clang (the fuzzers): the same hash; its speed was measured with GCC only
#endif
OOMSNAP_SCALAR uint64_t stack_hash(const GoBucketView& b) {
  uint64_t h0 = 0x243F6A8885A308D3ull ^ b.nstk, h1 = 0x13198A2E03707344ull, h2 = 0xA4093822299F31D0ull,
           h3 = 0x082EFA98EC4E6C89ull;
  uint64_t i = 0;
  for (; i + 4 <= b.nstk; i += 4) {
    h0 = hash_step(h0, b.pc(i));
    h1 = hash_step(h1, b.pc(i + 1));
    h2 = hash_step(h2, b.pc(i + 2));
    h3 = hash_step(h3, b.pc(i + 3));
  }
  if (i < b.nstk) h0 = hash_step(h0, b.pc(i++));
  if (i < b.nstk) h1 = hash_step(h1, b.pc(i++));
  if (i < b.nstk) h2 = hash_step(h2, b.pc(i++));
  return hash_step(hash_step(hash_step(h0, h1), h2), h3);
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

  // Untouched capacity costs no page faults; growing by copies would.
  res.summaries.reserve(std::min<size_t>(opts.max_records, 1u << 21));
  if (keep_stacks) {
    res.profile.reserve(std::min<size_t>(opts.max_records, 1u << 21), std::min<size_t>(opts.max_records, 1u << 21) * 24);
    res.profile.set_base_near(addrs.mbuckets);  // a global of the executable, near its text
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
  GoBucketWalkLimits limits;
  limits.max_buckets = opts.max_records;
  limits.max_depth = opts.max_stack_depth + 2;  // 1.26+ stores two allocator frames extra
  limits.max_read_bytes = opts.max_read_bytes;
  limits.record_bytes = go_bucket_size(go_minor, 0) - kHeaderSize;
  auto visit = [&](uint64_t addr, std::span<const uint8_t> bytes, std::string& why) -> std::optional<uint64_t> {
    auto b = decode_go_bucket(bytes, go_minor, limits.max_depth, why);
    if (!b) return std::nullopt;
    GoBucketSummary s;
    s.where = addr | (b->nstk << 48);
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
          b->size, std::span<const uint64_t>(reinterpret_cast<const uint64_t*>(b->pcs), b->nstk));
      hb.allocs = v[0];
      hb.frees = v[1];
      hb.alloc_bytes = v[2];
      hb.free_bytes = v[3];
      hb.recent_objects = s.recent_objects;
      hb.recent_bytes = s.recent_bytes;
    }
    return b->allnext;
  };
  auto trim = [&]() -> size_t {
    // Keep up to the first bucket seen again.
    size_t keep = first_repeated_bucket(res.summaries.size(), [&](size_t i) { return res.summaries[i].addr(); });
    res.summaries.resize(keep);
    if (keep_stacks) res.profile.buckets.resize(keep);
    if (pending.size() > keep) pending.resize(keep);
    return keep;
  };
  GoBucketWalkEnd end = walk_go_buckets(mem, maps, head, limits, deadline, visit, trim);
  res.status = end.status;
  res.reason = end.reason;
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
