// The Go runtime's own accounting of its memory (runtime.memstats and the
// heap's arena list in runtime.mheap_), read out of process, for the process's
// memory breakdown: the RSS split the way runtime.ReadMemStats would split it.
//
//   heap       HeapInuse                      memstats.heapStats: inHeap
//   heap_free  HeapIdle - HeapReleased        committed - inStacks - inWorkBufs
//                                             [- inPtrScalarBits] - inHeap
//   runtime    MSpanSys + MCacheSys + GCSys   the sysMemStat counters beside it,
//              + BuckHashSys + OtherSys       + inWorkBufs [+ inPtrScalarBits]
//
// heapStats is the runtime's consistentHeapStats: three shards of deltas that
// readmemstats_m sums (unsafeRead); so do we. The heap is placed by address:
// every arena of mheap_.allArenas (heapArenas from 1.25) is 64 MiB at
// arenaIdx * 64 MiB + arenaBaseOffset on linux/amd64. Goroutine stacks lie in
// the arenas too; their claim (goroutine_stack_claim) comes first, so the
// heap's claims only take what it left.
//
// Everything read is the target's to choose: counts beyond the amd64 address
// space, an arena list in the billions or arenas outside user space yield a
// reason, never a huge read or allocation.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/mapping.h"
#include "core/memory_breakdown.h"
#include "core/remote_memory.h"

namespace oomsnap {

// Per-version offsets (amd64). Stripped binaries have no DWARF, so the table
// is what every binary uses; tests/unit/go/go_mem_accounting_test.cpp checks
// each entry against the DWARF of the toolchain's unstripped fixture.
struct GoMemStatsLayout {
  int minor = 0;
  uint32_t delta_size = 0;       // sizeof(runtime.heapStatsDelta); heapStats.stats[3] is at 0
  bool ptr_scalar_bits = false;  // heapStatsDelta.inPtrScalarBits (up to 1.24)
  uint32_t stacks_sys = 0;       // mstats.stacks_sys; mspan_sys, mcache_sys, buckhash_sys,
                                 // gcMiscSys, other_sys follow it, 8 bytes each
  uint32_t arenas = 0;           // mheap.allArenas / heapArenas ([]arenaIdx)
  uint32_t memstats_image_size() const { return stacks_sys + 6 * 8; }
};
std::optional<GoMemStatsLayout> go_memstats_layout_for(int go_minor);

inline constexpr uint64_t kGoHeapArenaBytes = uint64_t{64} << 20;  // linux/amd64
// The amd64 user address space: no count of bytes is larger.
inline constexpr uint64_t kGoMaxSaneBytes = uint64_t{1} << 47;
// 4 TiB of heap: the arena list read is at most 512 KiB.
inline constexpr uint64_t kGoMaxArenas = uint64_t{1} << 16;

// What ReadMemStats would say, in bytes.
struct GoMemAccounting {
  uint64_t heap_inuse = 0;     // HeapInuse
  uint64_t heap_free = 0;      // HeapIdle - HeapReleased
  uint64_t heap_released = 0;  // HeapReleased
  uint64_t stack_inuse = 0;    // StackInuse
  uint64_t runtime_sys = 0;    // MSpanSys + MCacheSys + GCSys + BuckHashSys + OtherSys
  std::vector<AddressRange> arenas;
};

// The counters from an image of runtime.memstats (at least
// layout.memstats_image_size() bytes); false, with why, for a short image or
// an implausible count. `arenas` is left empty.
bool decode_go_memstats(std::span<const uint8_t> image, const GoMemStatsLayout& layout, GoMemAccounting& out,
                        std::string& why);

// A Go slice header ([]arenaIdx): ptr, len, cap.
struct GoSliceHeader {
  uint64_t ptr = 0, len = 0, cap = 0;
};
// false, with why, for len > cap, len beyond kGoMaxArenas, or no backing array.
bool check_go_arena_slice(const GoSliceHeader& s, std::string& why);

// The arenas' address ranges from an image of the arenaIdx array; false,
// with why, for an index whose arena is outside the user address space.
bool decode_go_arenas(std::span<const uint8_t> indices, std::vector<AddressRange>& out, std::string& why);

// Reads and checks it all: memstats first, then the arena list (arenas are
// added before the heap uses them, so the counts never run ahead of them).
// The heap in use must fit in the arenas read. nullopt, with why, otherwise.
std::optional<GoMemAccounting> read_go_mem_accounting(RemoteMemory& mem, uint64_t memstats_addr,
                                                      uint64_t mheap_addr, const GoMemStatsLayout& layout,
                                                      std::string& why);

// The breakdown's claims, applied after the goroutine stacks': the arenas as
// "Go heap (in use)" up to HeapInuse, then as "Go heap (free, not returned
// to the OS)" up to HeapIdle - HeapReleased, then the runtime's metadata,
// "Go runtime metadata", up to its count, from the unnamed anonymous memory
// (a claim without ranges); on kernels with anonymous VMA names Go 1.25+
// names its mappings ("[anon:Go: heap]", ...), and the claim then names
// them and the unnamed anonymous mappings as its ranges.
std::vector<MemoryClaim> go_memory_claims(const GoMemAccounting& acc, const std::vector<Mapping>& maps);

}  // namespace oomsnap
