// The Go heap profile as read out of a target: one record per runtime bucket,
// counters already folded the way runtime.MemProfile folds them.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace oomsnap {

struct GoHeapBucket {
  uint64_t size = 0;             // bucket.size: the (size-class rounded) object size
  std::vector<uint64_t> stack;   // stored PCs as RUNTIME addresses, leaf first
  uint64_t allocs = 0, frees = 0, alloc_bytes = 0, free_bytes = 0;
  uint64_t inuse_objects() const { return allocs > frees ? allocs - frees : 0; }
  uint64_t inuse_bytes() const { return alloc_bytes > free_bytes ? alloc_bytes - free_bytes : 0; }
};

struct GoHeapProfile {
  int go_minor = 0;              // 19..27: scaling and byte counters differ by version
  int64_t mem_profile_rate = 0;
  std::vector<GoHeapBucket> buckets;
};

// runtime/pprof's scaleHeapSample: the unsampling of one bucket's (count, size).
// go_minor >= 27 uses the integer object size as the average, as 1.27 does.
std::pair<int64_t, int64_t> scale_heap_sample(int64_t count, int64_t size, int64_t rate,
                                              int go_minor, uint64_t object_size);

}  // namespace oomsnap
