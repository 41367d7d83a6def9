// Reads runtime.mbuckets (the heap profile bucket list) out of a live Go
// process: bounded (bucket cap, stack depth cap, byte cap), budgeted
// (cooperative deadline), cycle-safe, and batched — buckets come from
// persistentalloc chunks, so the reader pulls whole windows around each bucket
// with one process_vm_readv and resolves neighbouring buckets locally.
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/collector.h"
#include "base/huge_page_allocator.h"
#include "go/go_heap_profile.h"

namespace oomsnap {

struct GoHeapAddrs {                          // RUNTIME addresses in the target
  uint64_t mbuckets = 0;                      // &runtime.mbuckets
  uint64_t mem_profile_rate = 0;              // &runtime.MemProfileRate
  std::optional<uint64_t> mprof_cycle;        // &runtime.mProfCycle, when known
};

// Compact per-bucket result, enough to aggregate and rank without keeping the
// PCs (fresh memory is costly: one page fault per 4 KiB). Buckets are
// immutable and never freed, so the PCs of the few that are printed can be
// re-read from addr later (read_bucket_stacks).
struct GoBucketSummary {
  uint64_t stack_hash = 0;  // 64-bit hash of the PCs: the aggregation key
  uint64_t where = 0;       // bucket address | nstk << 48
  uint64_t inuse_objects = 0, inuse_bytes = 0;  // folded, clamped at 0, unsampled like runtime/pprof
  uint64_t sampled_objects = 0, sampled_bytes = 0;  // the same before unsampling: exact averages
  // Recent: the futures MemProfile does not fold in (go_recent_cycles), net
  // of their frees and clamped at 0, still sampled: unsampled when ranked
  // (each bucket by itself, as pprof does), so the summary stays 64 bytes.
  uint64_t recent_objects = 0, recent_bytes = 0;
  uint64_t addr() const { return where & ((uint64_t{1} << 48) - 1); }
  uint32_t nstk() const { return static_cast<uint32_t>(where >> 48); }
};
static_assert(sizeof(GoBucketSummary) == 64, "one cache line per bucket: 2M buckets are 128 MiB");

struct GoHeapReadResult {
  GoHeapProfile profile;  // rate and version always; buckets (with PCs) only when keep_stacks
  // One per bucket, list order; huge-page backed (see huge_page_allocator.h).
  std::vector<GoBucketSummary, HugePageAllocator<GoBucketSummary>> summaries;
  SnapshotStatus status = SnapshotStatus::kComplete;
  std::string reason;
};

// One bucket decoded in place from bytes that start at its header (no copy).
struct GoBucketView {
  uint64_t allnext = 0, typ = 0, size = 0, nstk = 0;
  const uint8_t* pcs = nullptr;  // nstk little-endian u64 PCs inside the decoded bytes
  // active, future[0..2]: {allocs, frees, alloc_bytes, free_bytes}. Go 1.27
  // keeps counts only: its byte counters are count × size.
  uint64_t cycles[4][4] = {};
  // Inline: the stack hash calls it for every frame of every bucket.
  uint64_t pc(size_t i) const {
    uint64_t v;
    std::memcpy(&v, pcs + i * 8, 8);
    return v;
  }
};
// Size in bytes of a bucket with nstk PCs for this Go version.
size_t go_bucket_size(int go_minor, uint64_t nstk);
// nullopt + error when the bytes are too short or the header is implausible.
std::optional<GoBucketView> decode_go_bucket(std::span<const uint8_t> bytes, int go_minor,
                                             size_t max_stack_depth, std::string& error);

// runtime.MemProfile's view of one bucket: active + future[C%3] (the flush it
// would do; plain active when the cycle is unknown). `extra` receives the
// futures not included, which MemProfile adds when no bucket has any active
// count yet (no GC has happened).
void fold_go_cycles(const GoBucketView& b, std::optional<uint32_t> flush_index, uint64_t out[4],
                    uint64_t extra[4]);

// The recent part of a bucket, from fold_go_cycles' `extra`: what was
// allocated since the last published GC cycle minus what the sweep in those
// cycles freed ("net"), objects and bytes each clamped at 0 — a site that
// shrank since the last GC shows nothing. Mallocs go to future[(C+2)%3];
// future[(C+1)%3] holds the previous cycle's mallocs and this sweep's frees
// until mProf_PostSweep publishes it. With no GC yet MemProfile shows every
// future as in use, so the caller must zero recent then (never counted twice).
void go_recent_cycles(const uint64_t extra[4], uint64_t& objects, uint64_t& bytes);

GoHeapReadResult read_go_heap(RemoteMemory& mem, const std::vector<Mapping>& maps,
                              const GoHeapAddrs& addrs, int go_minor, const CaptureOptions& opts,
                              const Deadline& deadline, bool keep_stacks);

// Re-reads the PCs of the given buckets in one batched read. An empty vector
// for a bucket that could not be read.
std::vector<std::vector<uint64_t>> read_bucket_stacks(RemoteMemory& mem,
                                                      std::span<const GoBucketSummary* const> buckets);

}  // namespace oomsnap
