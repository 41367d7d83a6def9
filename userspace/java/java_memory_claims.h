// What a HotSpot JVM says it owns of its process's memory, as claims for the
// process's RSS by kind (memory_breakdown.h, issue #24): the Java heap's
// used bytes (`heap`) and the rest of its committed range (`heap_free`), and
// the code cache (`runtime`). HotSpot reserves each of them as one range and
// commits parts of it read-write, so what is committed is where the target's
// writable mappings meet the reserved range, and pagemap (in the capture
// process) says what of it is resident.
//
// The ranges and counts come from the target (VMStructs): a range that lies
// in no writable mapping, a used count beyond the committed bytes, or ranges
// that overlap are not claimed, and the reason says which.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/mapping.h"
#include "core/chunk_cache.h"
#include "core/memory_breakdown.h"
#include "java/direct_buffers.h"
#include "java/hotspot_vmstructs.h"
#include "java/java_heap.h"
#include "java/perf_data.h"

namespace oomsnap {

// What the JVM says, read out of process (read_heap_reserved,
// read_code_cache_bounds) or crafted by a test.
struct JavaMemoryAccount {
  std::string collector;                   // "G1", "Serial", "Parallel": named in the detail
  std::optional<AddressRange> heap;        // CollectedHeap::_reserved
  uint64_t heap_used = 0;                  // top - bottom over the regions (spaces) in use, as the walk counted
  // The range each part of the heap's objects use (the walk's
  // JavaHeapWalk::spaces: Serial / Parallel spaces, runs of G1 regions of
  // one type), claimed by name; empty when the walk could not name them
  // (JDK 8's G1): the used bytes are then claimed as one count.
  std::vector<HeapSpaceUse> spaces;
  std::optional<AddressRange> code_cache;  // CodeCache::_low_bound .. _high_bound
  // java.nio.Bits's totals (read_direct_buffers); unset when not read.
  std::optional<DirectBufferTotals> direct_buffers;
  // The performance counters' metaspace (read_perf_counters); unset when
  // not read.
  std::optional<MetaspaceUse> metaspace;
};

struct JavaMemoryClaims {
  // In the order they apply: heap, heap_free, runtime (code cache), then
  // by count, after the ranges: runtime (metaspace: the counters give no
  // addresses) and native (direct buffers: malloc'd).
  std::vector<MemoryClaim> claims;
  std::string reason;               // what was not claimed and why; empty when all was
};

// Bounds of what is believed: HotSpot's heap reservation is at most 32 TiB
// (compressed oops off; the walk's own space cap), its code cache 2 GiB
// (ReservedCodeCacheSize's maximum; 4 GiB leaves room).
inline constexpr uint64_t kMaxJavaHeapReserved = uint64_t{1} << 45;
inline constexpr uint64_t kMaxCodeCacheReserved = uint64_t{4} << 30;
// Runs of named heap parts claimed by range: each is a pagemap read in the
// capture. A G1 heap of 2,048 regions (G1's own target) whose types
// alternate has at most that many; a heap with more is claimed as one count.
inline constexpr size_t kMaxNamedHeapRuns = 8192;

// The parts of `r` that lie in writable mappings of `maps` (sorted or not),
// in address order, and their total in `bytes`.
std::vector<AddressRange> committed_parts(const AddressRange& r, const std::vector<Mapping>& maps, uint64_t& bytes);

// The claims for what `a` holds, checked against the target's mappings.
JavaMemoryClaims java_memory_claims(const JavaMemoryAccount& a, const std::vector<Mapping>& maps);

// CollectedHeap::_reserved (a MemRegion: _start, _word_size) of the heap at
// heap_addr. nullopt + error naming the field when VMStructs does not
// describe it, an offset does not fit its type, it cannot be read, or the
// range is implausible (unaligned, empty, beyond kMaxJavaHeapReserved).
std::optional<AddressRange> read_heap_reserved(ChunkCache& mem, const HotSpotVm& vm, uint64_t heap_addr,
                                               std::string& error);

// [CodeCache::_low_bound, _high_bound) (JDK 9+), or JDK 8's one code heap's
// reservation (CodeCache::_heap -> CodeHeap::_memory, a VirtualSpace's
// _low_boundary .. _high_boundary): nullopt + error when neither is
// described, an offset does not fit its type, or the range is unreadable or
// implausible.
std::optional<AddressRange> read_code_cache_bounds(ChunkCache& mem, const HotSpotVm& vm, std::string& error);

}  // namespace oomsnap
