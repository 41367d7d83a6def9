// Finds the spaces of a Serial or Parallel heap from VMStructs: the young
// generation's eden, from and to spaces and the old generation's space,
// each a contiguous range [bottom, top) parsable from its bottom, walked by
// the same walk as G1's regions (walk_java_heap with HeapKind::kSerial or
// kParallel). The path from the heap to each space is followed through the
// type hierarchy and what VMStructs describes, never by JDK version:
//   Serial:   SerialHeap (23+) or GenCollectedHeap::_young_gen/_old_gen (9+),
//             or GenCollectedHeap::_gens[_n_gens] (8); DefNewGeneration's
//             _eden_space/_from_space/_to_space; TenuredGeneration::_the_space
//             (OneContigSpaceCardGeneration's on 8); ContiguousSpace's
//             _bottom/_end (Space's before 25) and _top.
//   Parallel: ParallelScavengeHeap::_young_gen/_old_gen (static or not);
//             PSYoungGen's three spaces; PSOldGen::_object_space;
//             MutableSpace's _bottom/_end (ImmutableSpace's before 17) and _top.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "core/chunk_cache.h"
#include "java/java_heap.h"
#include "java/hotspot_vmstructs.h"

namespace oomsnap {

// kind: kSerial or kParallel (as the JVM's flags say). Fills L's spaces and
// their record offsets, and everything resolve_object_layout resolves;
// heap_addr: the CollectedHeap. nullopt when resolved, else the error,
// naming the field that is missing, does not fit its type, or cannot be read.
std::optional<std::string> resolve_generational_layout(ChunkCache& mem, const HotSpotVm& vm,
                                                       const std::map<std::string, uint64_t>& flags, HeapKind kind,
                                                       JavaHeapLayout& L, uint64_t& heap_addr);

}  // namespace oomsnap
