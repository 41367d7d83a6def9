// What V8 does not describe in its v8dbg_ metadata, per V8 version: where a
// heap page keeps its size, heap, area and owner space, what the page flags
// and the space ids mean. One entry per V8 major.minor, each citing the V8
// source it was read from and checked against the official Node.js binary
// of that version (docs/readers/node-layouts.md); a version without an entry
// is not read (the snapshot says which versions are known).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace oomsnap {

struct V8SpaceName {
  uint32_t id;
  const char* name;  // as v8.getHeapSpaceStatistics() names it: "old_space", "new_space", ...
  bool is_new;       // the young generation (objects only up to the allocation top)
  bool is_large;     // one object per page
};

struct V8HeapLayout {
  uint32_t major = 0, minor = 0;
  const char* source = "";  // the V8 files (and Node commit) the offsets come from
  uint64_t page_size = 0;   // a regular page; large-object pages are bigger
  // The page's fields are in the page itself, or (13.6+) in a metadata
  // record outside it, whose address the page holds at metadata_at.
  std::optional<uint32_t> metadata_at;
  uint32_t flags_at = 0;  // in the page, always
  // In the page or its metadata: the page's own address (where recorded),
  // size, heap, area start and end, owner space.
  std::optional<uint32_t> self_at;
  uint32_t size_at = 0, heap_at = 0, area_start_at = 0, area_end_at = 0, owner_at = 0;
  uint32_t header_bytes = 0;  // how much to read to cover them all
  uint64_t from_page_flag = 0, to_page_flag = 0;
  // The owner space object (V8's BaseSpace): its heap, its id, its committed bytes.
  uint32_t space_heap_at = 0, space_id_at = 0, space_committed_at = 0;
  std::span<const V8SpaceName> spaces;

  // From the Heap every page names to the allocation areas (LABs) whose
  // [top, limit) holds no objects yet (node-layouts.md section 3).
  uint64_t heap_in_isolate = 0;  // Heap = Isolate + this
  uint32_t heap_isolate_at = 0;  // Heap + this holds the Isolate's address (a check)
  uint32_t space_array_at = 0;   // Heap + this: Space* by space id
  // A LAB's address: from a base (the Isolate, the Heap, or the space of an
  // id), each step adds its offset and, but for the last, reads the pointer
  // there. A LAB is three words: start, top, limit.
  struct LabPath {
    enum class Base : uint8_t { kNone, kIsolate, kHeap, kSpace } base = Base::kNone;
    uint32_t space_id = 0;
    uint32_t steps[3] = {0, 0, 0};
    uint8_t nsteps = 0;
  };
  LabPath labs[6];
  // The page list of a space (its front) and a page's next, in the page or
  // its metadata; a semispace's current page (a metadata pointer on 13.6).
  uint32_t list_front_at = 0, page_next_at = 0, semispace_current_at = 0;

  const V8SpaceName* space(uint32_t id) const;
  std::string version() const { return std::to_string(major) + "." + std::to_string(minor); }
};

// The entry for V8 major.minor; nullptr when there is none.
const V8HeapLayout* v8_heap_layout_for(uint32_t major, uint32_t minor);
// "10.2, 11.3, 12.4, 13.6": for the reason a version is not read.
std::string known_v8_heap_layouts();

}  // namespace oomsnap
