// libFuzzer: the decoders behind a process's memory breakdown (issue #24),
// each fed what a hostile target chooses, and the breakdown built from
// crafted smaps text and crafted claims. Besides crashes, sanitizer findings
// and slow inputs, each mode checks what its decoder promises:
//  0  Go: runtime.memstats image and the heap arena list (go_mem_accounting.h):
//     a decoded count is never beyond the amd64 address space, an arena never
//     outside user space.
//  1  CPython: an _obmalloc_state image and the arena table
//     (python_arena_table.h) against crafted mappings: every arena decoded
//     lies inside one of them, and the used pools fit the arenas.
//  2  HotSpot: the heap and code cache ranges and the used count
//     (java_memory_claims.h) against crafted mappings: each claim's ranges lie
//     in writable mappings, and the heap claim is at most the committed bytes.
//  3  smaps text and claims (smaps_breakdown.h): a read that is neither
//     refused nor cut gives kinds that sum to the mappings' Rss, whatever the
//     claims say, and a mount table gives sorted devices. With flag bit 1,
//     the text read as maps (a kept Target::maps_text) with crafted
//     PAGEMAP_SCAN regions: no mapping gets more resident bytes than its
//     size, and the bytes outside every mapping never exceed the regions'.
// The first byte picks the mode; the rest is the input.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/pagemap_scan.h"
#include "core/smaps_breakdown.h"
#include "go/go_mem_accounting.h"
#include "java/java_memory_claims.h"
#include "python/python_arena_table.h"

namespace {

using oomsnap::AddressRange;
using oomsnap::Mapping;

// Reads words off the front of the input, zeros when it runs out.
struct Words {
  std::span<const uint8_t> in;
  uint64_t next() {
    uint64_t w = 0;
    const size_t n = std::min<size_t>(8, in.size());
    std::memcpy(&w, in.data(), n);
    in = in.subspan(n);
    return w;
  }
  uint8_t byte() {
    if (in.empty()) return 0;
    const uint8_t b = in[0];
    in = in.subspan(1);
    return b;
  }
};

// An invariant broken: say which, then fail the input.
#define check(ok)                                                                  \
  do {                                                                             \
    if (!(ok)) {                                                                   \
      std::fprintf(stderr, "fuzz_memory_accounting.cpp:%d: %s\n", __LINE__, #ok); \
      std::abort();                                                                \
    }                                                                              \
  } while (0)

// Up to 8 mappings from the input, in address order as /proc/PID/maps lists
// them; small words, so that fuzzed ranges meet them. Even ones writable.
std::vector<Mapping> mappings(Words& w) {
  std::vector<Mapping> maps;
  const size_t n = w.byte() % 9;
  uint64_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    Mapping m;
    m.start = at + (w.next() % (1 << 24)) * 4096;
    m.end = m.start + (1 + w.next() % (1 << 16)) * 4096;
    m.perms = i % 2 ? "r--p" : "rw-p";
    at = m.end;
    maps.push_back(m);
  }
  return maps;
}

void go_accounting(Words w) {
  const auto layout = oomsnap::go_memstats_layout_for(19 + w.byte() % 9);
  if (!layout) return;
  std::vector<uint8_t> image(w.in.begin(), w.in.begin() + std::min<size_t>(w.in.size(), layout->memstats_image_size()));
  oomsnap::GoMemAccounting a;
  std::string why;
  if (oomsnap::decode_go_memstats(image, *layout, a, why)) {
    for (uint64_t v : {a.heap_inuse, a.heap_free, a.heap_released, a.stack_inuse, a.runtime_sys})
      check(v <= oomsnap::kGoMaxSaneBytes);
  }
  w.in = w.in.subspan(image.size());
  oomsnap::GoSliceHeader s{w.next(), w.next(), w.next()};
  why.clear();
  oomsnap::check_go_arena_slice(s, why);
  std::vector<AddressRange> arenas;
  if (oomsnap::decode_go_arenas(w.in, arenas, why)) {
    for (const AddressRange& r : arenas) check(r.start < r.end && r.end <= (uint64_t{1} << 47));
  }
}

bool inside_one(const AddressRange& r, const std::vector<Mapping>& maps, bool writable_only) {
  return std::any_of(maps.begin(), maps.end(), [&](const Mapping& m) {
    return m.start <= r.start && r.end <= m.end && (!writable_only || m.perms[1] == 'w');
  });
}

void python_arenas(Words w) {
  const auto geometry = oomsnap::py_arena_geometry(6 + w.byte() % 9);
  const std::vector<Mapping> maps = mappings(w);
  std::string why;
  oomsnap::parse_py_obmalloc_mgmt(w.in, why);
  // Arena addresses as small page numbers, so that they meet the mappings.
  std::vector<uint8_t> table(w.in.begin(), w.in.end());
  for (size_t off = 0; off + oomsnap::kPyArenaObjectSize <= table.size(); off += oomsnap::kPyArenaObjectSize) {
    uint64_t addr;
    std::memcpy(&addr, table.data() + off, 8);
    if (addr & 1) addr = (addr >> 1) % (uint64_t{1} << 40);
    std::memcpy(table.data() + off, &addr, 8);
  }
  why.clear();
  const auto census = oomsnap::decode_py_arena_table(table, geometry, maps, why);
  if (!census) return;
  uint64_t arena_bytes = 0;
  for (const AddressRange& r : census->arenas) {
    check(r.start < r.end && inside_one(r, maps, false));
    arena_bytes += r.end - r.start;
  }
  check(census->used_pool_bytes <= arena_bytes);
  for (const auto& c : oomsnap::py_arena_claims(*census))
    for (const AddressRange& r : c.ranges) check(inside_one(r, maps, false));
}

void java_claims(Words w) {
  oomsnap::JavaMemoryAccount a;
  a.collector = "G1";
  const uint8_t which = w.byte();
  const std::vector<Mapping> maps = mappings(w);
  auto range = [&w]() {
    const uint64_t s = w.next(), e = w.next();
    return AddressRange{s % (uint64_t{1} << 42), e % (uint64_t{1} << 42)};
  };
  if (which & 1) a.heap = range();
  a.heap_used = w.next();
  if (which & 2) a.code_cache = range();
  if (which & 4) a.heap_used %= uint64_t{1} << 32;
  const oomsnap::JavaMemoryClaims out = oomsnap::java_memory_claims(a, maps);
  uint64_t committed = 0;
  if (a.heap && a.heap->start < a.heap->end) oomsnap::committed_parts(*a.heap, maps, committed);
  for (const auto& c : out.claims) {
    for (const AddressRange& r : c.ranges) check(r.start < r.end && inside_one(r, maps, true));
    if (c.kind == oomsnap::MemoryKind::kHeap) check(c.max_bytes && *c.max_bytes <= committed);
  }
}

// The same text as a maps text (as Target::open keeps it), with up to 8
// PAGEMAP_SCAN regions of the input's choosing: regions not the kernel's are
// refused; accepted ones never give a mapping more resident bytes than its
// size, and what lands in no mapping is counted apart, never more than the
// regions hold.
void page_regions(std::string_view text, const oomsnap::SmapsLimits& limits, const oomsnap::TmpfsDevices& tmpfs,
                  Words& w) {
  oomsnap::SmapsRead read = oomsnap::parse_maps(text, limits, tmpfs);
  if (!read.error.empty()) return;
  std::vector<oomsnap::PageRegion> regions(w.byte() % 9);
  for (auto& g : regions) g = {w.next(), w.next(), w.next()};
  const uint64_t from = w.next(), walk_end = w.next();
  size_t cursor = 0;
  std::string why;
  if (!oomsnap::add_page_regions(read, cursor, regions.data(), regions.size(), from, walk_end, why)) return;
  uint64_t present = 0;
  for (const auto& g : regions)
    if (g.start < walk_end && (g.categories & oomsnap::kPageIsPresent) && !(g.categories & oomsnap::kPageIsPfnZero))
      present += std::min(g.end, walk_end) - g.start;
  uint64_t rss = 0;
  for (const auto& m : read.mappings) {
    check(m.anonymous <= m.rss && m.rss <= m.end - m.start && (!m.not_rss || m.rss == 0));
    rss += m.rss;
  }
  check(read.resident_outside_mappings <= present && rss + read.resident_outside_mappings <= present);
  check(cursor <= read.mappings.size());
}

void breakdown(Words w) {
  const uint8_t flags = w.byte();
  // The text, then up to 4 claims of up to 4 ranges each after a NUL.
  const auto* text_begin = reinterpret_cast<const char*>(w.in.data());
  const auto nul = std::find(w.in.begin(), w.in.end(), uint8_t{0});
  const std::string_view text(text_begin, static_cast<size_t>(nul - w.in.begin()));
  w.in = w.in.subspan(std::min(w.in.size(), text.size() + 1));

  const oomsnap::TmpfsDevices tmpfs = oomsnap::parse_tmpfs_devices(text);
  check(std::is_sorted(tmpfs.devices.begin(), tmpfs.devices.end()));
  oomsnap::SmapsLimits limits;
  limits.max_mappings = 64;
  limits.max_bytes = 1 << 16;
  const oomsnap::SmapsRead read = oomsnap::parse_smaps(text, limits, tmpfs);
  if (flags & 2) page_regions(text, limits, tmpfs, w);

  std::vector<oomsnap::MemoryClaim> claims(w.byte() % 5);
  for (auto& c : claims) {
    c.kind = static_cast<oomsnap::MemoryKind>(w.byte() % oomsnap::kMemoryKinds);
    c.what = "claim";
    const size_t n = w.byte() % 5;
    for (size_t i = 0; i < n; ++i) c.ranges.push_back({w.next(), w.next()});
    if (w.byte() & 1) c.max_bytes = w.next();
  }
  oomsnap::ProcessMemory status;
  status.rss_anon_bytes = w.next() >> 20;
  status.rss_file_bytes = w.next() >> 20;
  status.rss_shmem_bytes = w.next() >> 20;
  const uint64_t resident = w.next();
  oomsnap::ResidentAnonFn fn;
  if (flags & 1) fn = [resident](uint64_t, uint64_t) { return std::optional<uint64_t>(resident); };
  const oomsnap::MemoryBreakdown b = oomsnap::build_breakdown(read, claims, status, fn);
  if (!read.error.empty() || read.cut) return;
  uint64_t rss = 0;
  for (const auto& m : read.mappings) {
    check(m.anonymous <= m.rss && m.start < m.end);
    rss += m.rss;
  }
  check(b.total() == rss);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  Words w{std::span<const uint8_t>(data + 1, size - 1)};
  switch (data[0] % 4) {
    case 0: go_accounting(w); break;
    case 1: python_arenas(w); break;
    case 2: java_claims(w); break;
    case 3: breakdown(w); break;
  }
  return 0;
}
