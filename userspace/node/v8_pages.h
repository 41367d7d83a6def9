// Finding V8's heap pages without the isolate: every page is aligned to the
// page size inside an anonymous mapping and its header names its own size,
// heap, object area and owner space (node/v8_heap_layout.h says where).
// Candidates are the aligned addresses of the target's anonymous read-write
// mappings; a header is kept only when it is consistent (its own address
// where V8 records it, an area inside the page) and its owner space names
// the same heap and a space id this version has, so that stray words in
// other memory are not taken for pages. A crafted process can still forge
// such headers: the walk checks every object it is led to.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/checked_bytes.h"
#include "base/mapping.h"
#include "core/collector.h"
#include "core/remote_memory.h"
#include "node/v8_heap_layout.h"

namespace oomsnap {

struct V8Page {
  uint64_t addr = 0, size = 0, area_start = 0, area_end = 0, heap = 0, owner = 0, flags = 0;
};

struct V8Space {
  uint64_t owner = 0;
  const V8SpaceName* name = nullptr;
  uint64_t committed = 0;            // as the space counts it
  std::vector<uint32_t> pages;       // indices into V8HeapPages::pages, by address
};

struct V8HeapPages {
  uint64_t heap = 0;              // the v8::internal::Heap the pages name
  std::vector<V8Page> pages;      // by address
  std::vector<V8Space> spaces;    // by space id, then owner
};

struct V8PageScan {
  std::vector<V8HeapPages> heaps;  // one per isolate (a worker thread has its own), largest first
  uint64_t candidates = 0;         // aligned addresses looked at
  std::string cut;                 // why the scan stopped early (a limit, the deadline); empty when it did not
};

// Decodes the page header read at `addr` (page_head: from the page's start;
// metadata: from the metadata record, empty unless the layout keeps one).
// nullopt when the words cannot be a page header of this layout.
std::optional<V8Page> decode_v8_page(const V8HeapLayout& layout, uint64_t addr, ByteView page_head,
                                     ByteView metadata);

// The owner's space, when the BaseSpace bytes read at the owner name the
// page's heap and a space id the layout knows.
std::optional<V8Space> decode_v8_space(const V8HeapLayout& layout, uint64_t owner, uint64_t heap, ByteView bytes);

struct V8PageScanLimits {
  uint64_t max_candidates = uint64_t{1} << 20;  // 256 GiB of anonymous memory at 256 KiB pages
  uint64_t max_pages = uint64_t{1} << 18;       // 64 GiB of heap
  size_t max_owners = 4096;
};

V8PageScan scan_v8_pages(RemoteMemory& mem, const std::vector<Mapping>& maps, const V8HeapLayout& layout,
                         const Deadline& deadline, const V8PageScanLimits& limits = {});

}  // namespace oomsnap
