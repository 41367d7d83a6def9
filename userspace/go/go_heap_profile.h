// The Go heap profile as read out of a target: one record per runtime bucket,
// counters already folded the way runtime.MemProfile folds them.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/huge_page_allocator.h"

namespace oomsnap {

struct GoHeapBucket {
  uint64_t size = 0;             // bucket.size: the (size-class rounded) object size
  uint64_t stack_begin = 0;      // its PCs: GoHeapProfile::pcs[stack_begin, +stack_len)
  uint32_t stack_len = 0;
  uint64_t allocs = 0, frees = 0, alloc_bytes = 0, free_bytes = 0;
  uint64_t recent_objects = 0, recent_bytes = 0;  // sampled, net (go_recent_cycles)
  uint64_t inuse_objects() const { return allocs > frees ? allocs - frees : 0; }
  uint64_t inuse_bytes() const { return alloc_bytes > free_bytes ? alloc_bytes - free_bytes : 0; }
};

// Every bucket's PCs live in one pool: 100k small vectors cost more in malloc
// and page faults than reading the buckets did.
struct GoHeapProfile {
  int go_minor = 0;              // 19..27: scaling and byte counters differ by version
  int64_t mem_profile_rate = 0;
  std::vector<GoHeapBucket, HugePageAllocator<GoHeapBucket>> buckets;
  std::vector<uint64_t, HugePageAllocator<uint64_t>> pcs;  // RUNTIME addresses, leaf first per bucket

  // The stored PCs of b, leaf first.
  std::span<const uint64_t> stack(const GoHeapBucket& b) const { return {pcs.data() + b.stack_begin, b.stack_len}; }
  // Appends a bucket whose PCs are copied into the pool; returns it for the counters.
  GoHeapBucket& add_bucket(uint64_t size, std::span<const uint64_t> stack) {
    GoHeapBucket& b = buckets.emplace_back();
    b.size = size;
    b.stack_begin = pcs.size();
    b.stack_len = static_cast<uint32_t>(stack.size());
    pcs.insert(pcs.end(), stack.begin(), stack.end());
    return b;
  }
};

// Go's int64(float64) on amd64 (CVTTSD2SQ): out-of-range and NaN give the
// "integer indefinite" value 0x8000000000000000. Plain C++ casts are UB there.
int64_t go_f64_to_i64(double v);

// runtime/pprof's scaleHeapSample: the unsampling of one bucket's (count, size).
// go_minor >= 27 uses the integer object size as the average, as 1.27 does.
std::pair<int64_t, int64_t> scale_heap_sample(int64_t count, int64_t size, int64_t rate,
                                              int go_minor, uint64_t object_size);

}  // namespace oomsnap
