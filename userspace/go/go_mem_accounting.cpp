#include "go/go_mem_accounting.h"

#include <cstdio>

#include "base/checked_bytes.h"

namespace oomsnap {
namespace {

// heapStatsDelta's byte deltas (the first fields, the same in 1.19-1.27).
constexpr uint32_t kCommitted = 0, kReleased = 8, kInHeap = 16, kInStacks = 24, kInWorkBufs = 32,
                   kInPtrScalarBits = 40;
constexpr int kShards = 3;  // consistentHeapStats.stats [3]heapStatsDelta

// arenaBaseOffset on linux/amd64: arenaIdx 0 is at -2^47, modulo 2^64.
constexpr uint64_t kArenaBaseOffset = 0xffff800000000000ull;

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "%#llx", static_cast<unsigned long long>(v));
  return b;
}

// One byte delta summed over the shards, as unsafeRead does: false, with
// why, when a shard or the sum is outside [-2^47, 2^47] or the sum below 0
// (each shard is a delta; only their sum is a count).
bool shard_sum(ByteView v, const GoMemStatsLayout& l, uint32_t field, const char* name, uint64_t& out,
               std::string& why) {
  int64_t sum = 0;
  constexpr int64_t kMax = static_cast<int64_t>(kGoMaxSaneBytes);
  for (int i = 0; i < kShards; ++i) {
    int64_t d = 0;
    if (!v.read_i64(uint64_t{l.delta_size} * i + field, d)) {
      why = std::string("runtime.memstats image too short for heapStats.") + name;
      return false;
    }
    if (d < -kMax || d > kMax) {
      why = std::string("runtime.memstats heapStats.") + name + " shard " + std::to_string(i) + " is implausible (" +
            std::to_string(d) + ")";
      return false;
    }
    sum += d;
  }
  if (sum < 0 || sum > kMax) {
    why = std::string("runtime.memstats heapStats.") + name + " sums to an implausible " + std::to_string(sum);
    return false;
  }
  out = static_cast<uint64_t>(sum);
  return true;
}

bool sys_stat(ByteView v, uint32_t off, const char* name, uint64_t& out, std::string& why) {
  if (!v.read_u64(off, out)) {
    why = std::string("runtime.memstats image too short for ") + name;
    return false;
  }
  if (out > kGoMaxSaneBytes) {
    why = std::string("runtime.memstats.") + name + " is implausible (" + std::to_string(out) + ")";
    return false;
  }
  return true;
}

bool runtime_named(const Mapping& m) { return m.path.rfind("[anon:Go:", 0) == 0; }

}  // namespace

std::optional<GoMemStatsLayout> go_memstats_layout_for(int minor) {
  // Offsets from the DWARF of each toolchain's fixture (see the header).
  switch (minor) {
    case 19: return GoMemStatsLayout{19, 1176, true, 3544, 66016};
    case 21: return GoMemStatsLayout{21, 1176, true, 3544, 66032};
    case 22:
    case 23:
    case 24: return GoMemStatsLayout{minor, 1176, true, 3544, 66096};
    case 25:  // inPtrScalarBits gone with the GC programs; allArenas renamed heapArenas
    case 26:
    case 27: return GoMemStatsLayout{minor, 1168, false, 3520, 66096};
    default: return std::nullopt;
  }
}

bool decode_go_memstats(std::span<const uint8_t> image, const GoMemStatsLayout& l, GoMemAccounting& out,
                        std::string& why) {
  const ByteView v(image);
  if (!v.contains(0, l.memstats_image_size())) {
    why = "runtime.memstats image too short (" + std::to_string(image.size()) + " bytes)";
    return false;
  }
  uint64_t committed = 0, released = 0, in_heap = 0, in_stacks = 0, in_workbufs = 0, in_ptr_bits = 0;
  if (!shard_sum(v, l, kCommitted, "committed", committed, why) ||
      !shard_sum(v, l, kReleased, "released", released, why) || !shard_sum(v, l, kInHeap, "inHeap", in_heap, why) ||
      !shard_sum(v, l, kInStacks, "inStacks", in_stacks, why) ||
      !shard_sum(v, l, kInWorkBufs, "inWorkBufs", in_workbufs, why) ||
      (l.ptr_scalar_bits && !shard_sum(v, l, kInPtrScalarBits, "inPtrScalarBits", in_ptr_bits, why)))
    return false;
  uint64_t mspan = 0, mcache = 0, buckhash = 0, gc_misc = 0, other = 0;
  const uint32_t s = l.stacks_sys;
  if (!sys_stat(v, s + 8, "mspan_sys", mspan, why) || !sys_stat(v, s + 16, "mcache_sys", mcache, why) ||
      !sys_stat(v, s + 24, "buckhash_sys", buckhash, why) || !sys_stat(v, s + 32, "gcMiscSys", gc_misc, why) ||
      !sys_stat(v, s + 40, "other_sys", other, why))
    return false;
  out.heap_inuse = in_heap;
  out.heap_released = released;
  out.stack_inuse = in_stacks;
  // heapInUse + heapFree == committed - inStacks - inWorkBufs - inPtrScalarBits
  // (readmemstats_m). Read while the program runs, the shards may disagree
  // by a delta in flight: a negative free heap is none.
  const uint64_t not_heap = in_stacks + in_workbufs + in_ptr_bits + in_heap;  // each < 2^47: no overflow
  out.heap_free = committed > not_heap ? committed - not_heap : 0;
  // MSpanSys + MCacheSys + BuckHashSys + GCSys (gcMiscSys + work bufs + GC
  // program bits) + OtherSys: 8 counts < 2^47 each, no overflow.
  out.runtime_sys = mspan + mcache + buckhash + gc_misc + in_workbufs + in_ptr_bits + other;
  // Each count is plausible; together they must be too (found by
  // fuzz_memory_accounting: two near the bound summed past it).
  if (out.runtime_sys > kGoMaxSaneBytes) {
    why = "runtime.memstats: the runtime's metadata counters sum to " + std::to_string(out.runtime_sys) +
          " bytes, more than the address space";
    return false;
  }
  return true;
}

bool check_go_arena_slice(const GoSliceHeader& s, std::string& why) {
  if (s.len > s.cap) {
    why = "mheap_ arena list has len " + std::to_string(s.len) + " > cap " + std::to_string(s.cap);
    return false;
  }
  if (s.len > kGoMaxArenas) {
    why = "mheap_ arena list has " + std::to_string(s.len) + " arenas (more than " + std::to_string(kGoMaxArenas) +
          ", 4 TiB of heap)";
    return false;
  }
  if (s.len && !s.ptr) {
    why = "mheap_ arena list has " + std::to_string(s.len) + " arenas and no array";
    return false;
  }
  return true;
}

bool decode_go_arenas(std::span<const uint8_t> indices, std::vector<AddressRange>& out, std::string& why) {
  const ByteView v(indices);
  const size_t n = indices.size() / 8;
  if (n > kGoMaxArenas) {
    why = "mheap_ arena list image of " + std::to_string(n) + " arenas";
    return false;
  }
  out.clear();
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    uint64_t idx = 0;
    v.read_u64(i * 8, idx);
    // arenaBase(i) = i * heapArenaBytes + arenaBaseOffset, in uintptr arithmetic.
    const uint64_t base = idx * kGoHeapArenaBytes + kArenaBaseOffset;
    if (idx >= (uint64_t{1} << 48) / kGoHeapArenaBytes || base >= kGoMaxSaneBytes ||
        kGoMaxSaneBytes - base < kGoHeapArenaBytes) {
      why = "mheap_ arena " + std::to_string(i) + " (index " + hex(idx) + ") is outside the user address space";
      out.clear();
      return false;
    }
    out.push_back({base, base + kGoHeapArenaBytes});
  }
  return true;
}

std::optional<GoMemAccounting> read_go_mem_accounting(RemoteMemory& mem, uint64_t memstats_addr,
                                                      uint64_t mheap_addr, const GoMemStatsLayout& l,
                                                      std::string& why) {
  GoMemAccounting acc;
  std::vector<uint8_t> image(l.memstats_image_size());
  if (!mem.read(memstats_addr, image.data(), image.size())) {
    why = "cannot read runtime.memstats at " + hex(memstats_addr) + " (errno " + std::to_string(mem.last_errno()) + ")";
    return std::nullopt;
  }
  if (!decode_go_memstats(image, l, acc, why)) return std::nullopt;
  uint64_t words[3] = {};
  if (!mem.read(mheap_addr + l.arenas, words, sizeof words)) {
    why = "cannot read the arena list of runtime.mheap_ at " + hex(mheap_addr + l.arenas) + " (errno " +
          std::to_string(mem.last_errno()) + ")";
    return std::nullopt;
  }
  ByteView hv(reinterpret_cast<const uint8_t*>(words), sizeof words);
  GoSliceHeader h;
  hv.read_u64(0, h.ptr);
  hv.read_u64(8, h.len);
  hv.read_u64(16, h.cap);
  if (!check_go_arena_slice(h, why)) return std::nullopt;
  std::vector<uint8_t> indices(h.len * 8);  // at most 512 KiB (checked above)
  if (h.len && !mem.read(h.ptr, indices.data(), indices.size())) {
    why = "cannot read the " + std::to_string(h.len) + " arena indices at " + hex(h.ptr) + " (errno " +
          std::to_string(mem.last_errno()) + ")";
    return std::nullopt;
  }
  if (!decode_go_arenas(indices, acc.arenas, why)) return std::nullopt;
  // The heap's spans (in use, free, stacks) all lie in the arenas.
  const uint64_t arena_bytes = acc.arenas.size() * kGoHeapArenaBytes;
  if (acc.heap_inuse + acc.heap_free > arena_bytes) {
    why = "runtime.memstats counts " + std::to_string(acc.heap_inuse + acc.heap_free) + " bytes of heap, more than its " +
          std::to_string(acc.arenas.size()) + " arenas hold";
    return std::nullopt;
  }
  return acc;
}

std::vector<MemoryClaim> go_memory_claims(const GoMemAccounting& acc, const std::vector<Mapping>& maps) {
  std::vector<MemoryClaim> out;
  MemoryClaim heap;
  heap.kind = MemoryKind::kHeap;
  heap.what = "Go heap (in use)";
  heap.ranges = acc.arenas;
  heap.max_bytes = acc.heap_inuse;
  MemoryClaim free = heap;
  free.kind = MemoryKind::kHeapFree;
  free.what = "Go heap (free, not returned to the OS)";
  free.max_bytes = acc.heap_free;
  MemoryClaim meta;
  meta.kind = MemoryKind::kRuntime;
  meta.what = "Go runtime metadata";
  meta.max_bytes = acc.runtime_sys;
  bool named = false;
  for (const Mapping& m : maps) named = named || runtime_named(m);
  if (named)
    for (const Mapping& m : maps)
      if (m.path.empty() || runtime_named(m)) meta.ranges.push_back({m.start, m.end});
  out.push_back(std::move(heap));
  out.push_back(std::move(free));
  out.push_back(std::move(meta));
  return out;
}

}  // namespace oomsnap
