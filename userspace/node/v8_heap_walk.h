// The walk of one V8 heap's pages, object by object (issue #26): each page
// from its area's start to its end, or to the allocation top of the LAB
// inside it; the new space's to-semispace up to its current page only (the
// from-semispace and the pages after the current one hold stale copies);
// a large-object page's one object from its header alone. Pages are read in
// batches (a few MiB per process_vm_readv), the maps through the chunk
// cache. Bounded by the deadline and the read budget; a page that does not
// walk to its end is kept up to where it stopped and named in `stops`.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/chunk_cache.h"
#include "core/collector.h"
#include "core/remote_memory.h"
#include "node/v8_heap_layout.h"
#include "node/v8_maps.h"
#include "node/v8_object_walk.h"
#include "node/v8_pages.h"

namespace oomsnap {

struct V8SpaceUse {
  uint64_t objects = 0, bytes = 0, free_bytes = 0;
};

struct V8HeapWalk {
  V8WalkTally tally;                          // every object walked, by name (V8MapReader::names())
  std::map<std::string, V8SpaceUse> by_space;  // by space name
  uint64_t pages = 0, pages_complete = 0, pages_skipped = 0;
  uint64_t area_bytes = 0, area_bytes_walked = 0;  // of the pages to walk: their objects' span, and how much was walked
  // Allocation areas the walk did not know of (a background thread's: a
  // compiler's, a sweeper's), stepped over: their bytes hold no object yet.
  uint64_t unlocated_areas = 0, unlocated_area_bytes = 0;
  // A collection ran while the heap was read: what was counted may miss or
  // double what it moved.
  bool collection_ran = false;
  bool labs_found = false;
  std::string labs_why;            // why the allocation areas are not known (the walk then stops at stale bytes)
  std::vector<std::string> stops;  // the first few pages that stopped early, and why
  std::string cut;                 // why the walk ended before its last page (deadline, read budget)
};

struct V8WalkLimits {
  uint64_t max_read_bytes = uint64_t{1} << 32;
  size_t batch_bytes = size_t{8} << 20;  // pages read per process_vm_readv round
  size_t max_stops = 8;
  uint64_t max_list_pages = uint64_t{1} << 18;  // a semispace's page list, followed from its front
};

V8HeapWalk walk_v8_heap(RemoteMemory& mem, ChunkCache& cache, const V8HeapPages& heap, const V8HeapLayout& layout,
                        V8MapReader& maps, const Deadline& deadline, const V8WalkLimits& limits = {});

// Whether the new space's pages are flagged otherwise than when they were
// found, or gone: every collection (a scavenge, and a full one, which
// evacuates the new space too) swaps the semispaces or moves pages whole
// between them, and marks the pages below the age mark.
bool v8_new_pages_reflagged(RemoteMemory& mem, const V8HeapPages& heap, const V8HeapLayout& layout);

}  // namespace oomsnap
