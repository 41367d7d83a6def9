#include "node/v8_heap_layout.h"

#include <array>

namespace oomsnap {
namespace {

constexpr uint64_t k256K = uint64_t{256} << 10;

// The space ids are V8's AllocationSpace (src/common/globals.h) of each
// version; v8.getHeapSpaceStatistics() lists the spaces in that order, which
// the live tests check. Read-only space has no pages of its own here.
constexpr std::array<V8SpaceName, 7> kSpaces10_2{{
    {1, "old_space", false, false},
    {2, "code_space", false, false},
    {3, "map_space", false, false},
    {4, "large_object_space", false, true},
    {5, "code_large_object_space", false, true},
    {6, "new_large_object_space", true, true},
    {7, "new_space", true, false},
}};
constexpr std::array<V8SpaceName, 8> kSpaces11_3{{
    {1, "new_space", true, false},
    {2, "old_space", false, false},
    {3, "code_space", false, false},
    {4, "shared_space", false, false},
    {5, "new_large_object_space", true, true},
    {6, "large_object_space", false, true},
    {7, "code_large_object_space", false, true},
    {8, "shared_large_object_space", false, true},
}};
constexpr std::array<V8SpaceName, 10> kSpaces12_4{{
    {1, "new_space", true, false},
    {2, "old_space", false, false},
    {3, "code_space", false, false},
    {4, "shared_space", false, false},
    {5, "trusted_space", false, false},
    {6, "new_large_object_space", true, true},
    {7, "large_object_space", false, true},
    {8, "code_large_object_space", false, true},
    {9, "shared_large_object_space", false, true},
    {10, "trusted_large_object_space", false, true},
}};
constexpr std::array<V8SpaceName, 12> kSpaces13_6{{
    {1, "new_space", true, false},
    {2, "old_space", false, false},
    {3, "code_space", false, false},
    {4, "shared_space", false, false},
    {5, "trusted_space", false, false},
    {6, "shared_trusted_space", false, false},
    {7, "new_large_object_space", true, true},
    {8, "large_object_space", false, true},
    {9, "code_large_object_space", false, true},
    {10, "shared_large_object_space", false, true},
    {11, "shared_trusted_large_object_space", false, true},
    {12, "trusted_large_object_space", false, true},
}};

// Page flags (MemoryChunk::Flag): FROM_PAGE 1 << 3 and TO_PAGE 1 << 4 on
// every version here (a semispace's pages carry one or the other).
constexpr uint64_t kFromPage = uint64_t{1} << 3, kToPage = uint64_t{1} << 4;

// 10.2 and 11.3: BasicMemoryChunk starts size_, flags, heap_, area_start_,
// area_end_, allocated_bytes_, wasted_memory_, high_water_mark_, owner_
// (src/heap/basic-memory-chunk.h); no word holds the page's own address.
constexpr V8HeapLayout k10_2_pages{
    .major = 10,
    .minor = 2,
    .source = "V8 10.2: src/heap/basic-memory-chunk.h (BasicMemoryChunk fields), src/heap/base-space.h, "
              "src/common/globals.h (AllocationSpace)",
    .page_size = k256K,
    .metadata_at = std::nullopt,
    .flags_at = 0x8,
    .self_at = std::nullopt,
    .size_at = 0x0,
    .heap_at = 0x10,
    .area_start_at = 0x18,
    .area_end_at = 0x20,
    .owner_at = 0x40,
    .header_bytes = 0x48,
    .from_page_flag = kFromPage,
    .to_page_flag = kToPage,
    .space_heap_at = 0x8,
    .space_id_at = 0x10,
    .space_committed_at = 0x18,
    .spaces = kSpaces10_2,
};
constexpr V8HeapLayout k11_3_pages = [] {
  V8HeapLayout l = k10_2_pages;
  l.major = 11;
  l.minor = 3;
  l.source = "V8 11.3: src/heap/basic-memory-chunk.h (BasicMemoryChunk fields), src/heap/base-space.h, "
             "src/common/globals.h (AllocationSpace)";
  l.spaces = kSpaces11_3;
  return l;
}();

// 12.4: BasicMemoryChunk starts main_thread_flags_, then the page's own
// address (kChunkStart) before size_, heap_, area_start_, area_end_, ...
constexpr V8HeapLayout k12_4_pages{
    .major = 12,
    .minor = 4,
    .source = "V8 12.4: src/heap/basic-memory-chunk.h, src/heap/base-space.h, src/common/globals.h",
    .page_size = k256K,
    .metadata_at = std::nullopt,
    .flags_at = 0x0,
    .self_at = 0x8,
    .size_at = 0x10,
    .heap_at = 0x18,
    .area_start_at = 0x20,
    .area_end_at = 0x28,
    .owner_at = 0x48,
    .header_bytes = 0x50,
    .from_page_flag = kFromPage,
    .to_page_flag = kToPage,
    .space_heap_at = 0x8,
    .space_id_at = 0x10,
    .space_committed_at = 0x18,
    .spaces = kSpaces12_4,
};

// 13.6: the page (MemoryChunk) keeps only its flags and a pointer to its
// MemoryChunkMetadata, allocated outside the heap: vtable, the chunk's
// address, size, ..., area_end, heap, area_start, owner
// (src/heap/memory-chunk.h, src/heap/memory-chunk-metadata.h).
constexpr V8HeapLayout k13_6_pages{
    .major = 13,
    .minor = 6,
    .source = "V8 13.6: src/heap/memory-chunk.h, src/heap/memory-chunk-metadata.h, src/heap/base-space.h, "
              "src/common/globals.h",
    .page_size = k256K,
    .metadata_at = 0x8,
    .flags_at = 0x0,
    .self_at = 0x8,
    .size_at = 0x10,
    .heap_at = 0x40,
    .area_start_at = 0x48,
    .area_end_at = 0x38,
    .owner_at = 0x50,
    .header_bytes = 0x58,
    .from_page_flag = kFromPage,
    .to_page_flag = kToPage,
    .space_heap_at = 0x8,
    .space_id_at = 0x10,
    .space_committed_at = 0x18,
    .spaces = kSpaces13_6,
};


// From the Heap to the allocation areas (node-layouts.md section 3, each
// offset read off the binary and checked by walking every page to its top).
using Lab = V8HeapLayout::LabPath;
using Base = Lab::Base;
constexpr Lab space_lab(uint32_t id, uint32_t at) { return Lab{Base::kSpace, id, {at, 0, 0}, 2}; }
constexpr Lab isolate_lab(uint32_t at) { return Lab{Base::kIsolate, 0, {at, 0, 0}, 1}; }
constexpr Lab heap_lab(uint32_t a, uint32_t b, uint32_t c) { return Lab{Base::kHeap, 0, {a, b, c}, 3}; }

constexpr V8HeapLayout k10_2 = [] {
  V8HeapLayout l = k10_2_pages;
  l.heap_in_isolate = 0xc638, l.heap_isolate_at = 0x50, l.space_array_at = 0x1d0;
  // new, old, code, map space; the main thread's concurrent old and code allocators
  l.labs[0] = space_lab(7, 0xc8), l.labs[1] = space_lab(1, 0xc8), l.labs[2] = space_lab(2, 0xc8);
  l.labs[3] = space_lab(3, 0xc8), l.labs[4] = heap_lab(0x210, 0x50, 0x18), l.labs[5] = heap_lab(0x210, 0x58, 0x18);
  l.list_front_at = 0xa8, l.page_next_at = 0xe8, l.semispace_current_at = 0x100;
  return l;
}();
constexpr V8HeapLayout k11_3 = [] {
  V8HeapLayout l = k11_3_pages;
  l.heap_in_isolate = 0xd2c0, l.heap_isolate_at = 0x50, l.space_array_at = 0x1c8;
  l.labs[0] = space_lab(1, 0x50), l.labs[1] = space_lab(2, 0x50), l.labs[2] = space_lab(3, 0x50);
  l.labs[3] = heap_lab(0x210, 0x90, 0x18), l.labs[4] = heap_lab(0x210, 0x98, 0x18);
  l.list_front_at = 0x28, l.page_next_at = 0x108, l.semispace_current_at = 0x88;
  return l;
}();
// 12.4, 13.6: the new and old LABs in the Isolate's own data; trusted and
// code space in the HeapAllocator (*(Heap + 0x20)), slots 2 and 3.
constexpr V8HeapLayout k12_4 = [] {
  V8HeapLayout l = k12_4_pages;
  l.heap_in_isolate = 0xdea0, l.heap_isolate_at = 0x18, l.space_array_at = 0x138;
  l.labs[0] = isolate_lab(0xc0), l.labs[1] = isolate_lab(0xd8);
  l.labs[2] = heap_lab(0x20, 0x70 + 2 * 0x128 + 0xa0, 0), l.labs[3] = heap_lab(0x20, 0x70 + 3 * 0x128 + 0xa0, 0);
  l.list_front_at = 0x28, l.page_next_at = 0x108, l.semispace_current_at = 0x88;
  return l;
}();
constexpr V8HeapLayout k13_6 = [] {
  V8HeapLayout l = k13_6_pages;
  l.heap_in_isolate = 0xeff8, l.heap_isolate_at = 0x18, l.space_array_at = 0x160;
  l.labs[0] = isolate_lab(0xc8), l.labs[1] = isolate_lab(0xe0);
  l.labs[2] = heap_lab(0x20, 0x80 + 2 * 0xf8 + 0xa0, 0), l.labs[3] = heap_lab(0x20, 0x80 + 3 * 0xf8 + 0xa0, 0);
  l.list_front_at = 0x28, l.page_next_at = 0x108, l.semispace_current_at = 0x70;
  return l;
}();

constexpr const V8HeapLayout* kLayouts[] = {&k10_2, &k11_3, &k12_4, &k13_6};

}  // namespace

const V8SpaceName* V8HeapLayout::space(uint32_t id) const {
  for (const auto& s : spaces)
    if (s.id == id) return &s;
  return nullptr;
}

const V8HeapLayout* v8_heap_layout_for(uint32_t major, uint32_t minor) {
  for (const V8HeapLayout* l : kLayouts)
    if (l->major == major && l->minor == minor) return l;
  return nullptr;
}

std::string known_v8_heap_layouts() {
  std::string s;
  for (const V8HeapLayout* l : kLayouts) s += (s.empty() ? "" : ", ") + l->version();
  return s;
}

}  // namespace oomsnap
