// CPython's small-object allocator (obmalloc) as its arena table describes
// it: which address ranges are arenas and how many of their pools are in use,
// decoded from bytes read out of the target (so every field is checked), and
// the memory claims that make those ranges `heap` and `heap_free` of the
// process's breakdown (issue #24 item 2).
//
// struct arena_object (Objects/obmalloc.c, unchanged 3.6-3.14, x86_64):
//   0 uintptr_t address  (0: the entry has no arena)
//   8 block *pool_address, 16 uint nfreepools, 20 uint ntotalpools,
//   24 freepools, 32 nextarena, 40 prevarena   -- 48 bytes
// nfreepools counts the arena's pools not in use (never carved or emptied
// again), so (ntotalpools - nfreepools) pools hold objects.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/mapping.h"
#include "core/memory_breakdown.h"

namespace oomsnap {

struct PyArenaGeometry {
  uint64_t arena_size = 0, pool_size = 0;
};
// 3.6-3.9: 256 KiB arenas of 4 KiB pools; 3.10+: 1 MiB arenas of 16 KiB
// pools (USE_LARGE_ARENAS/USE_LARGE_POOLS, on with the radix tree, the
// default for x86_64).
PyArenaGeometry py_arena_geometry(int minor);

inline constexpr uint64_t kPyArenaObjectSize = 48;
// maxarenas doubles from 16; 2^17 entries (6 MiB to read) describe 32 GiB of
// 256 KiB arenas, 128 GiB of 1 MiB ones. A larger table is refused.
inline constexpr uint64_t kMaxPyArenaObjects = uint64_t{1} << 17;

// Where the table is: `arenas` (struct arena_object *) and `maxarenas`, its
// length, as the target holds them.
struct PyArenaTableRef {
  uint64_t arenas = 0;
  uint64_t count = 0;
};
// Checks a table reference (nonzero, 8-byte aligned, count within
// kMaxPyArenaObjects, no wrap): nullopt when usable, else why not.
std::optional<std::string> check_py_arena_table_ref(const PyArenaTableRef& ref);

// 3.12+: struct _obmalloc_state keeps the table in its `mgmt` member:
// arenas at 512, maxarenas (uint) at 520, narenas_currently_allocated at
// 1064 (after usedpools[64] and nfp2lasta[65]), the same in 3.12-3.14
// (offsetof against pyenv 3.12.1 and 3.13.0 headers; live on Debian 3.13, 3.14).
inline constexpr uint32_t kPyObmallocArenas = 512, kPyObmallocMaxArenas = 520, kPyObmallocArenasNow = 1064;
inline constexpr size_t kPyObmallocMgmtReadSize = kPyObmallocArenasNow + 8;
// The table named by an _obmalloc_state's first kPyObmallocMgmtReadSize
// bytes; nullopt with `why` when they are not one (arenas allocated more than
// maxarenas, a bad reference). An interpreter sharing the main one's state
// has an empty table: count 0 and no error.
std::optional<PyArenaTableRef> parse_py_obmalloc_mgmt(std::span<const uint8_t> state, std::string& why);

struct PyArenaCensus {
  std::vector<AddressRange> arenas;  // one per allocated arena
  uint64_t used_pool_bytes = 0;      // pools holding objects
};

// Decodes the table's bytes (count * kPyArenaObjectSize of them). Every entry
// with an arena must hold what one of this geometry holds (ntotalpools the
// arena's pools, one fewer when it is not pool aligned; nfreepools at most
// that) and lie inside one of `maps` (sorted by address, as /proc/PID/maps
// lists them). One entry that does not refuses the table: nullopt with `why`.
std::optional<PyArenaCensus> decode_py_arena_table(std::span<const uint8_t> table, const PyArenaGeometry& geometry,
                                                   const std::vector<Mapping>& maps, std::string& why);

// The arenas as claims, in the order they apply: `heap` up to the used
// pools' bytes, then the rest of the same ranges as `heap_free`.
std::vector<MemoryClaim> py_arena_claims(const PyArenaCensus& census);

// GC-walked objects larger than obmalloc's small-request threshold (512
// bytes) came from malloc: their bytes as a range-less `heap` claim.
inline constexpr uint64_t kPySmallRequestThreshold = 512;
MemoryClaim py_large_object_claim(uint64_t bytes, uint64_t objects);

}  // namespace oomsnap
