#include "python/python_arena_table.h"

#include <algorithm>

#include "base/checked_bytes.h"
#include "base/text.h"

namespace oomsnap {

PyArenaGeometry py_arena_geometry(int minor) {
  if (minor >= 10) return {uint64_t{1} << 20, uint64_t{16} << 10};
  return {uint64_t{256} << 10, uint64_t{4} << 10};
}

std::optional<std::string> check_py_arena_table_ref(const PyArenaTableRef& ref) {
  if (!ref.arenas) return "the arena table pointer is null";
  if (ref.arenas & 7) return "the arena table pointer " + hex(ref.arenas) + " is not aligned";
  if (ref.count > kMaxPyArenaObjects)
    return "the arena table has " + std::to_string(ref.count) + " entries, more than the " +
           std::to_string(kMaxPyArenaObjects) + " read";
  if (ref.arenas + ref.count * kPyArenaObjectSize < ref.arenas)
    return "the arena table at " + hex(ref.arenas) + " wraps the address space";
  return std::nullopt;
}

std::optional<PyArenaTableRef> parse_py_obmalloc_mgmt(std::span<const uint8_t> state, std::string& why) {
  const ByteView v(state.data(), state.size());
  uint64_t arenas = 0, now = 0;
  uint32_t max = 0;
  if (!v.read_u64(kPyObmallocArenas, arenas) || !v.read_u32(kPyObmallocMaxArenas, max) ||
      !v.read_u64(kPyObmallocArenasNow, now)) {
    why = "the obmalloc state is shorter than its arena fields";
    return std::nullopt;
  }
  PyArenaTableRef ref{arenas, max};
  if (!arenas && !max) return ref;  // an interpreter that uses the main one's allocator
  if (now > max) {
    why = "the obmalloc state has " + std::to_string(now) + " arenas allocated of a table of " + std::to_string(max);
    return std::nullopt;
  }
  if (auto bad = check_py_arena_table_ref(ref)) {
    why = *bad;
    return std::nullopt;
  }
  return ref;
}

namespace {

// True when [lo, hi) lies inside one mapping of `maps` (sorted by start).
bool inside_one_mapping(const std::vector<Mapping>& maps, uint64_t lo, uint64_t hi) {
  auto it = std::upper_bound(maps.begin(), maps.end(), lo, [](uint64_t a, const Mapping& m) { return a < m.start; });
  if (it == maps.begin()) return false;
  --it;
  return lo >= it->start && hi <= it->end;
}

}  // namespace

std::optional<PyArenaCensus> decode_py_arena_table(std::span<const uint8_t> table, const PyArenaGeometry& g,
                                                   const std::vector<Mapping>& maps, std::string& why) {
  PyArenaCensus c;
  const ByteView v(table.data(), table.size());
  const uint64_t pools = g.pool_size ? g.arena_size / g.pool_size : 0;
  if (!pools) {
    why = "no arena geometry";
    return std::nullopt;
  }
  for (uint64_t off = 0; off + kPyArenaObjectSize <= table.size(); off += kPyArenaObjectSize) {
    uint64_t address = 0;
    uint32_t nfree = 0, ntotal = 0;
    v.read_u64(off, address);
    v.read_u32(off + 16, nfree);
    v.read_u32(off + 20, ntotal);
    if (!address) continue;
    const std::string entry = "arena table entry " + std::to_string(off / kPyArenaObjectSize);
    if (ntotal != pools && ntotal + 1 != pools) {
      why = entry + " holds " + std::to_string(ntotal) + " pools, not the " + std::to_string(pools) + " of an arena";
      return std::nullopt;
    }
    if (nfree > ntotal) {
      why = entry + " has " + std::to_string(nfree) + " free pools of " + std::to_string(ntotal);
      return std::nullopt;
    }
    const uint64_t end = address + g.arena_size;
    if (end < address || !inside_one_mapping(maps, address, end)) {
      why = entry + " names an arena at " + hex(address) + " outside the process's mappings";
      return std::nullopt;
    }
    c.arenas.push_back({address, end});
    c.used_pool_bytes += uint64_t{ntotal - nfree} * g.pool_size;  // <= 2^17 * 1 MiB: no overflow
  }
  return c;
}

std::vector<MemoryClaim> py_arena_claims(const PyArenaCensus& census) {
  std::vector<MemoryClaim> out(2);
  const std::string what = "CPython obmalloc arenas (" + std::to_string(census.arenas.size()) + " arenas)";
  out[0].kind = MemoryKind::kHeap;
  out[0].what = what;
  out[0].ranges = census.arenas;
  out[0].max_bytes = census.used_pool_bytes;
  out[1].kind = MemoryKind::kHeapFree;
  out[1].what = what + ": free pools";
  out[1].ranges = census.arenas;
  return out;
}

MemoryClaim py_large_object_claim(uint64_t bytes, uint64_t objects) {
  MemoryClaim c;
  c.kind = MemoryKind::kHeap;
  c.what = "objects outside arenas (malloc): " + std::to_string(objects) + " objects over " +
           std::to_string(kPySmallRequestThreshold) + " bytes";
  c.max_bytes = bytes;
  return c;
}

}  // namespace oomsnap
