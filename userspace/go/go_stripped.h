// Recovering runtime.mbuckets and runtime.MemProfileRate from a stripped Go
// binary (-ldflags=-s -w) on amd64: find runtime functions that reference them
// through pclntab, disassemble them (capstone) and decode their RIP-relative
// operands. Any doubt becomes an error string, never a guessed address.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace oomsnap {
class ElfFile;
class GoPclntab;
struct GoVersion;

struct GoGlobalsRecovery {
  std::optional<uint64_t> mbuckets;          // link-time address of runtime.mbuckets
  std::optional<uint64_t> mem_profile_rate;  // link-time address of runtime.MemProfileRate
  std::string error;                          // why one is missing (ambiguous, not found)
  // runtime.mProfCycle (which future cycle the next flush publishes): only
  // sharpens snapshot.recent, so its absence is not an error of the heap.
  std::optional<uint64_t> mprof_cycle;
  std::string mprof_cycle_error;
};

// &runtime.allglen and &runtime.allgptr for the goroutine census, from
// runtime.forEachGRace, confirmed by runtime.allgadd.
struct GoAllgsRecovery {
  std::optional<uint64_t> allglen, allgptr;  // link-time addresses
  std::string error;
};
GoAllgsRecovery recover_go_allgs(const ElfFile& elf, const GoPclntab& pclntab, const GoVersion& version);

GoGlobalsRecovery recover_go_globals(const ElfFile& elf, const GoPclntab& pclntab,
                                     const GoVersion& version);

// The block/mutex profile globals (link-time addresses), each from the first
// qword RIP-relative load into .bss/.noptrbss of the runtime function that
// reads it: bbuckets/xbuckets from blockProfileInternal/mutexProfileInternal
// (1.23+; else BlockProfile/MutexProfile), blockprofilerate from blockevent,
// mutexprofilerate from mutexevent (named sync.event through its linkname in
// <= 1.26), and runtime.ticks from ticksPerSecond (tickspersecond <= 1.21),
// whose first load is ticks.val. A global that cannot be found is unset and
// `error` says why.
struct GoContentionGlobals {
  std::optional<uint64_t> bbuckets, xbuckets, block_rate, mutex_rate;
  std::optional<uint64_t> ticks;  // &runtime.ticks (the struct, not val)
  std::string error;
};
GoContentionGlobals recover_go_contention_globals(const ElfFile& elf, const GoPclntab& pclntab,
                                                  const GoVersion& version);

// &runtime.mheap_ and &runtime.memstats (link-time) for the memory
// breakdown's Go accounting, 1.19–1.27: mheap_ is the first .bss address
// (*mcentral).grow and (*mcache).allocLarge take (the receiver of
// mheap_.alloc); memstats the first newBucket takes (&memstats.buckhash_sys,
// for persistentalloc) and (*mheap).init takes (&memstats.mspan_sys, for
// spanalloc.init), less the field's offset (from stacks_sys, the version's
// GoMemStatsLayout). Each pair must agree; anything else is `error`.
struct GoMemGlobalsRecovery {
  std::optional<uint64_t> memstats, mheap;
  std::string error;
};
GoMemGlobalsRecovery recover_go_mem_globals(const ElfFile& elf, const GoPclntab& pclntab, const GoVersion& version,
                                            uint32_t stacks_sys);

}  // namespace oomsnap
