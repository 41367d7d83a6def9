// Walks a CPython interpreter's GC generation lists from outside the process
// and builds a type histogram: every GC-tracked object, plus the untracked
// objects (str, bytes, int, float, bytearray, untracked tuples/dicts, ...)
// that tracked containers reference directly, each counted once by address.
// Reads go through a ChunkCache, so neighbouring objects cost one syscall.
// Bounded: object cap, deadline, read budget, prev/next consistency on every
// list step (a list that changes under the reader stops that list: partial).
// Every count and size in the target is its own to choose: container items
// are read in fixed batches when followed (depth first; what is pending never
// grows from a claimed count or with the heap), at most 16 Mi records per
// container; a size must fit the mapping it lies in; a word is marked seen
// only once it reads as an object; type names are cut at 1 KiB; the seen
// marks are bounded by the object cap.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/chunk_cache.h"
#include "core/collector.h"
#include "core/snapshot.h"
#include "python/python_layout.h"

namespace oomsnap {

struct PyHeapInput {
  uint64_t runtime_addr = 0;  // &_PyRuntime in the target
  // Target address ranges of the runtime's own module (static objects such as
  // None, small ints and static types live there and are not heap).
  std::vector<std::pair<uint64_t, uint64_t>> static_ranges;
  uint64_t max_objects = 2'000'000;  // tracked + referenced objects visited
  // A walk that finds a GC list changed under it (a collection, or the
  // program relinking objects between two of our reads: a leaking program
  // does so all the time) is run again on fresh bytes, up to max_walks in
  // all, while the time left is at least twice what the last walk took.
  // before_rewalk runs before each walk after the first (the collector waits
  // there for a collection in progress to end).
  unsigned max_walks = 3;
  std::function<void()> before_rewalk;
};

struct PyTypeTotal {
  std::string name;
  uint64_t objects = 0;
  uint64_t bytes = 0;
};

struct PyHeapResult {
  SnapshotStatus status = SnapshotStatus::kFailed;
  std::string reason;
  std::vector<PyTypeTotal> types;  // unsorted
  uint64_t interpreters = 0;
  uint64_t tracked_objects = 0;      // read from the GC lists
  uint64_t untracked_objects = 0;    // found through references
  uint64_t lists_complete = 0, lists_total = 0;
  // Share of the GC-tracked objects that was read (1 when complete): against
  // the runtime's own count of long-lived objects when the oldest list was
  // cut short, else the share of lists read to the end.
  double coverage = 0;
  std::string scope;
  // What the walk held, for checking its local bounds: the reference queue's
  // largest allocation, and how many addresses it marked seen.
  uint64_t ref_queue_peak_bytes = 0;  // pending references (pointers + container ranges)
  // GC-tracked objects whose size, from their own fields, does not fit the
  // mapping they (or their buffer) lie in: counted at their fixed size.
  uint64_t implausible_sizes = 0;
  // Objects larger than obmalloc's 512-byte small-request threshold, by the
  // sizes counted above: malloc'd outside the arenas.
  uint64_t large_objects = 0, large_object_bytes = 0;
  uint64_t addresses_marked = 0;
  unsigned walks = 0;  // 1, or more when a list changed under an earlier walk
};

PyHeapResult walk_python_heap(ChunkCache& mem, const PyLayout& layout, const PyHeapInput& in,
                              const Deadline& deadline);

}  // namespace oomsnap
