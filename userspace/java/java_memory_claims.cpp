#include "java/java_memory_claims.h"

#include <algorithm>

#include "base/reason.h"
#include "base/text.h"

namespace oomsnap {
namespace {

constexpr uint64_t kPage = 4096;

std::string range_text(const AddressRange& r) { return hex(r.start) + "-" + hex(r.end); }

bool plausible(const AddressRange& r, uint64_t max_bytes) {
  return r.start && r.end > r.start && r.end - r.start <= max_bytes && !((r.start | r.end) & (kPage - 1));
}

}  // namespace

std::vector<AddressRange> committed_parts(const AddressRange& r, const std::vector<Mapping>& maps, uint64_t& bytes) {
  std::vector<AddressRange> out;
  bytes = 0;
  for (const Mapping& m : maps) {
    if (m.perms.size() < 2 || m.perms[1] != 'w') continue;
    const uint64_t lo = std::max(r.start, m.start), hi = std::min(r.end, m.end);
    if (lo < hi) out.push_back({lo, hi});
  }
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.start < y.start; });
  // /proc/PID/maps never lists a byte twice; a crafted list might.
  std::vector<AddressRange> merged;
  for (const AddressRange& p : out) {
    if (!merged.empty() && p.start <= merged.back().end) merged.back().end = std::max(merged.back().end, p.end);
    else merged.push_back(p);
  }
  for (const AddressRange& p : merged) bytes += p.end - p.start;
  return merged;
}

JavaMemoryClaims java_memory_claims(const JavaMemoryAccount& a, const std::vector<Mapping>& maps) {
  JavaMemoryClaims out;
  std::optional<AddressRange> heap = a.heap, code = a.code_cache;
  // Two reservations never share an address: which one would be believed?
  if (heap && code && heap->start < code->end && code->start < heap->end) {
    append_reason(out.reason, "the Java heap (" + range_text(*heap) + ") and the code cache (" + range_text(*code) +
                               ") overlap: neither is claimed");
    heap.reset(), code.reset();
  }
  if (heap) {
    uint64_t committed = 0;
    std::vector<AddressRange> parts = committed_parts(*heap, maps, committed);
    if (parts.empty()) {
      append_reason(out.reason, "the Java heap's reserved range " + range_text(*heap) + " lies in no writable mapping");
    } else if (a.heap_used > committed) {
      // A crafted count, or a heap that grew after the mappings were read:
      // either way the split between used and free is not known.
      append_reason(out.reason, "the Java heap's used bytes (" + std::to_string(a.heap_used) +
                                 ") exceed its committed bytes (" + std::to_string(committed) + "): not claimed");
    } else {
      // Each part by what its objects use, when every one lies in the
      // heap's reservation (a crafted range must not claim other memory)
      // and they are few enough to read.
      const bool inside = std::all_of(a.spaces.begin(), a.spaces.end(), [&](const HeapSpaceUse& s) {
        return s.used.start >= heap->start && s.used.end <= heap->end && s.used.start <= s.used.end &&
               s.end <= heap->end;
      });
      const bool by_space = !a.spaces.empty() && inside && a.spaces.size() <= kMaxNamedHeapRuns;
      if (!inside)
        append_reason(out.reason, "a heap space's used range lies outside the heap's reservation " +
                                      range_text(*heap) + ": the spaces are not named");
      else if (a.spaces.size() > kMaxNamedHeapRuns)
        append_reason(out.reason, "the heap's parts are in " + std::to_string(a.spaces.size()) +
                                      " runs (at most " + std::to_string(kMaxNamedHeapRuns) + " are named): not named");
      if (by_space) {
        // One claim per name, in the order the names first appear.
        std::vector<MemoryClaim> named;
        for (const HeapSpaceUse& s : a.spaces) {
          if (s.used.end == s.used.start) continue;
          const std::string what = "Java heap (" + a.collector + " " + s.name + ", used)";
          auto it = std::find_if(named.begin(), named.end(), [&](const MemoryClaim& c) { return c.what == what; });
          if (it == named.end()) named.push_back({MemoryKind::kHeap, what, {}, std::nullopt}), it = named.end() - 1;
          it->ranges.push_back(s.used);
        }
        for (MemoryClaim& c : named) out.claims.push_back(std::move(c));
        // Then each Serial / Parallel space's committed free part, by name.
        for (const HeapSpaceUse& s : a.spaces)
          if (s.end > s.used.end)
            out.claims.push_back({MemoryKind::kHeapFree, "Java heap (" + a.collector + " " + s.name + ", committed, free)",
                                  {AddressRange{s.used.end, s.end}}, std::nullopt});
      } else {
        out.claims.push_back({MemoryKind::kHeap, "Java heap (" + a.collector + ", used)", parts, a.heap_used});
      }
      out.claims.push_back({MemoryKind::kHeapFree, "Java heap (committed, free)", std::move(parts), std::nullopt});
    }
  }
  if (code) {
    uint64_t committed = 0;
    std::vector<AddressRange> parts = committed_parts(*code, maps, committed);
    if (parts.empty())
      append_reason(out.reason, "the code cache's reserved range " + range_text(*code) + " lies in no writable mapping");
    else
      out.claims.push_back({MemoryKind::kRuntime, "Code cache", std::move(parts), std::nullopt});
  }
  // Metaspace: its used bytes, then its committed rest (chunks handed to
  // class loaders and not filled: a JVM of 20,000 class loaders had 100 MiB
  // used of 320 MiB committed, and its RSS held all of it). Each only as far
  // as unnamed anonymous memory holds it.
  if (a.metaspace && a.metaspace->used)
    out.claims.push_back({MemoryKind::kRuntime, "Metaspace (used, at the last GC)", {}, a.metaspace->used});
  if (a.metaspace && a.metaspace->committed > a.metaspace->used)
    out.claims.push_back({MemoryKind::kRuntime, "Metaspace (committed, free, at the last GC)", {},
                          a.metaspace->committed - a.metaspace->used});
  if (a.direct_buffers && a.direct_buffers->reserved)
    out.claims.push_back({MemoryKind::kNative,
                          "java.nio direct buffers (" + std::to_string(a.direct_buffers->count) +
                              (a.direct_buffers->count == 1 ? " buffer)" : " buffers)"),
                          {},
                          a.direct_buffers->reserved});
  return out;
}

std::optional<AddressRange> read_heap_reserved(ChunkCache& mem, const HotSpotVm& vm, uint64_t heap_addr,
                                               std::string& error) {
  if (!vm.field("CollectedHeap", "_reserved")) {
    error = "VMStructs has no CollectedHeap::_reserved";
    return std::nullopt;
  }
  OffsetResolver o(vm);
  const uint64_t reserved = o.embedded({"CollectedHeap"}, "_reserved", {"MemRegion"});
  const uint64_t start_off = o.field({"MemRegion"}, "_start", 8);
  const uint64_t words_off = o.field({"MemRegion"}, "_word_size", 8);
  if (o.error) {
    error = *o.error;
    return std::nullopt;
  }
  uint64_t start = 0, words = 0;
  if (!mem.get(heap_addr + reserved + start_off, start) || !mem.get(heap_addr + reserved + words_off, words)) {
    error = "cannot read CollectedHeap::_reserved at " + hex(heap_addr + reserved);
    return std::nullopt;
  }
  // words * 8 checked before it is computed: a crafted size must not wrap.
  const AddressRange r{start, words <= kMaxJavaHeapReserved / 8 && start <= UINT64_MAX - words * 8 ? start + words * 8 : 0};
  if (!plausible(r, kMaxJavaHeapReserved)) {
    error = "implausible CollectedHeap::_reserved (start " + hex(start) + ", " + std::to_string(words) + " words)";
    return std::nullopt;
  }
  return r;
}

namespace {

// JDK 8's one code heap: CodeCache::_heap -> CodeHeap::_memory, a
// VirtualSpace whose _low_boundary .. _high_boundary is the reservation.
std::optional<AddressRange> read_jdk8_code_heap(ChunkCache& mem, const HotSpotVm& vm, std::string& error) {
  auto heap = read_static<uint64_t>(mem, vm.field("CodeCache", "_heap"));
  OffsetResolver o(vm);
  const uint64_t memory = o.embedded({"CodeHeap"}, "_memory", {"VirtualSpace"});
  const uint64_t lo_off = o.field({"VirtualSpace"}, "_low_boundary", 8);
  const uint64_t hi_off = o.field({"VirtualSpace"}, "_high_boundary", 8);
  if (o.error) {
    error = *o.error;
    return std::nullopt;
  }
  uint64_t lo = 0, hi = 0;
  if (!heap || !*heap || !mem.get(*heap + memory + lo_off, lo) || !mem.get(*heap + memory + hi_off, hi)) {
    error = "cannot read CodeCache::_heap's CodeHeap::_memory";
    return std::nullopt;
  }
  return AddressRange{lo, hi};
}

}  // namespace

std::optional<AddressRange> read_code_cache_bounds(ChunkCache& mem, const HotSpotVm& vm, std::string& error) {
  const VmField *lo = vm.field("CodeCache", "_low_bound"), *hi = vm.field("CodeCache", "_high_bound");
  std::optional<AddressRange> r;
  if (lo && hi) {
    auto l = read_static<uint64_t>(mem, lo), h = read_static<uint64_t>(mem, hi);
    if (!l || !h) {
      error = "cannot read CodeCache::_low_bound/_high_bound";
      return std::nullopt;
    }
    r = AddressRange{*l, *h};
  } else if (vm.field("CodeCache", "_heap") && vm.field("CodeHeap", "_memory")) {
    r = read_jdk8_code_heap(mem, vm, error);
    if (!r) return std::nullopt;
  } else {
    error = "VMStructs describes no code cache bounds (CodeCache::_low_bound/_high_bound, or CodeCache::_heap)";
    return std::nullopt;
  }
  if (!plausible(*r, kMaxCodeCacheReserved)) {
    error = "implausible code cache bounds " + range_text(*r);
    return std::nullopt;
  }
  return r;
}

}  // namespace oomsnap
