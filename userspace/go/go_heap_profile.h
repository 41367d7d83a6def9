// The Go heap profile as read out of a target: one record per runtime bucket,
// counters already folded the way runtime.MemProfile folds them.
#pragma once
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "base/huge_page_allocator.h"

namespace oomsnap {

struct GoHeapBucket {
  uint64_t size = 0;             // bucket.size: the (size-class rounded) object size
  uint32_t stack_begin = 0;      // its PCs: GoHeapProfile::stack_codes[stack_begin, +stack_len)
  uint32_t stack_len = 0;
  uint64_t allocs = 0, frees = 0, alloc_bytes = 0, free_bytes = 0;
  uint64_t recent_objects = 0, recent_bytes = 0;  // sampled, net (go_recent_cycles)
  uint64_t inuse_objects() const { return allocs > frees ? allocs - frees : 0; }
  uint64_t inuse_bytes() const { return alloc_bytes > free_bytes ? alloc_bytes - free_bytes : 0; }
};
static_assert(sizeof(GoHeapBucket) == 64, "one cache line per bucket");

// Every bucket's PCs live in one pool: 100k small vectors cost more in malloc
// and page faults than reading the buckets did. A PC is kept in 4 bytes, as
// its distance from a base 1 GiB below an address of the executable (the
// reader names one; else the first PC stored): a Go program's text is far
// smaller than the 2 GiB that reaches. A PC outside that reach (a cgo frame,
// or a hostile bucket) goes to a side table and the pool keeps its index
// there, flagged. Fresh pages were most of a 100,000-bucket pprof capture's
// read time on a VM, and the PCs were the largest part of them.
class GoHeapProfile {
 public:
  int go_minor = 0;              // 19..27: scaling and byte counters differ by version
  int64_t mem_profile_rate = 0;
  std::vector<GoHeapBucket, HugePageAllocator<GoHeapBucket>> buckets;

  // Room for this many buckets and stored PCs without growing (untouched
  // capacity costs no page faults; growing by copies would).
  void reserve(size_t buckets_n, size_t pcs_n) {
    buckets.reserve(buckets_n);
    codes_.reserve(pcs_n);
  }
  // PCs are kept relative to a base 1 GiB below `addr` (an address inside
  // the executable, such as runtime.mbuckets): call before the first bucket.
  void set_base_near(uint64_t addr) {
    base_ = addr > kBelow ? addr - kBelow : 0;
    based_ = true;
  }
  // Appends a bucket whose PCs are copied into the pool; returns it for the
  // counters. Throws std::length_error past 2^32 stored PCs (the walk's caps
  // keep a real profile far below).
  GoHeapBucket& add_bucket(uint64_t size, std::span<const uint64_t> stack);
  // The stored PCs of b, leaf first, as codes (see pc_of).
  std::span<const uint32_t> stack_codes(const GoHeapBucket& b) const {
    return {codes_.data() + b.stack_begin, b.stack_len};
  }
  // The RUNTIME address a stored code stands for.
  uint64_t pc_of(uint32_t code) const { return code < kForeign ? base_ + code : foreign_[code - kForeign]; }
  // The stored PCs of b, leaf first (a copy).
  std::vector<uint64_t> stack(const GoHeapBucket& b) const;
  size_t stored_pcs() const { return codes_.size(); }
  size_t foreign_pcs() const { return foreign_.size(); }

 private:
  static constexpr uint32_t kForeign = 0x80000000u;  // codes from here index foreign_
  static constexpr uint64_t kBelow = uint64_t{1} << 30;  // the base lies this far below the address named
  uint32_t code_of(uint64_t pc);

  std::vector<uint32_t, HugePageAllocator<uint32_t>> codes_;
  std::vector<uint64_t> foreign_;
  uint64_t base_ = 0;
  bool based_ = false;
};

// Go's int64(float64) on amd64 (CVTTSD2SQ): out-of-range and NaN give the
// "integer indefinite" value 0x8000000000000000. Plain C++ casts are UB there.
int64_t go_f64_to_i64(double v);

// runtime/pprof's scaleHeapSample: the unsampling of one bucket's (count, size).
// go_minor >= 27 uses the integer object size as the average, as 1.27 does.
std::pair<int64_t, int64_t> scale_heap_sample(int64_t count, int64_t size, int64_t rate,
                                              int go_minor, uint64_t object_size);

}  // namespace oomsnap
