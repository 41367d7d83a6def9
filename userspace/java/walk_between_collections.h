// The heap walk of a running JVM, done again until no collection overlapped
// it (issue #25 item 1). A JVM near its limit collects every few tens of ms;
// a walk that one overlapped saw objects move. After young collections only,
// the walk is brought up to date (JavaHeapWalker::walk_young_again: the
// young regions and what was promoted, a few MiB); after a full one, or when
// the counters cannot tell, it is done whole again.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/chunk_cache.h"
#include "core/collector.h"
#include "core/remote_memory.h"
#include "java/hotspot_vmstructs.h"
#include "java/java_heap.h"

namespace oomsnap {

// Walks of the heap one capture may make when collections overlap them.
inline constexpr unsigned kMaxHeapWalks = 8;

// Where the JVM says that a collection runs or ran. Read past the cache:
// they change under it.
struct CollectionCounters {
  uint64_t heap = 0;                      // the CollectedHeap
  std::optional<uint64_t> active;         // its _is_gc_active (_is_stw_gc_active in 21+), a bool
  std::optional<uint64_t> collections;    // its _total_collections, a u32: every collection, counted as it starts
  // The address of the perf counter sun.gc.collector.1.invocations: the full
  // collections (Serial's, Parallel's and G1's alike; collector 0 counts the
  // young ones, G1's mixed pauses among them). Without it (-XX:-UsePerfData)
  // every re-walk is whole.
  std::optional<uint64_t> full_collections;
  // G1's sun.gc.collector.2.invocations: its remark and cleanup pauses,
  // which free old regions found empty without counting as collections
  // (_total_collections). Without it, G1 re-walks are whole.
  std::optional<uint64_t> g1_remark_pauses;
  HeapKind kind = HeapKind::kG1;
};

// The counters read once: every collection, and the full ones when known.
struct CollectionCounts {
  uint32_t all = 0;
  std::optional<int64_t> full;
  std::optional<int64_t> g1_remarks;
};

// Whether only young collections ran between the two reads, such that what
// lay below the old regions' tops at the first is still there at the
// second: the full collections are known and did not move. G1: exactly one
// pause, since over two, a region one mixed pause evacuated could be an old
// one again (the walker sees it gone only if it still is); and no remark or
// cleanup pause, whose empty old regions freed could be reused by that one.
bool only_young_collections_between(HeapKind kind, const CollectionCounts& before, const CollectionCounts& after);

struct HeapWalks {
  JavaHeapWalk walk;        // the last one
  unsigned walks = 0;       // whole and young ones
  unsigned young_walks = 0; // of those, the ones that only brought the last up to date
  bool moved = false;       // a collection overlapped the last walk
};

// Walks L's heap, again while a collection overlapped the last walk, the
// deadline leaves room (room_for_another_walk) and the read budget does:
// the first walk reads at most read_budget and the ones after it share one
// more, so that a JVM whose counter moves all the time (or is made to) costs
// one more whole walk at most. The TLABs are read afresh before each walk (into L.holes), and
// lim.name_read_limit is set. nullopt + error when the TLABs cannot be read.
std::optional<HeapWalks> walk_between_collections(RemoteMemory& live, ChunkCache& mem, const HotSpotVm& vm,
                                                  const CollectionCounters& counters, JavaHeapLayout& L,
                                                  JavaHeapLimits& lim, uint64_t read_budget,
                                                  const Deadline& deadline, std::string& error);

}  // namespace oomsnap
