// The Java heap walk's layout (JavaHeapLayout): checked for plausibility, and
// resolved from the JVM's own VMStructs, with the TLAB holes and threads.
#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "base/text.h"
#include "base/checked_bytes.h"
#include "java/java_heap.h"
#include "java/hotspot_vmstructs.h"

namespace oomsnap {
namespace {

constexpr uint64_t kMaxRegions = 1ull << 22;
// Serial and Parallel heaps have four spaces (eden, from, to, old).
constexpr size_t kMaxSpaces = 8;
// G1's regions are at most 512 MiB (JDK 18+; 32 MiB before).
constexpr uint64_t kMaxGrainBytes = 1ull << 30;
// No offset into a HotSpot struct is believed beyond this: the walk copies
// region and klass records up to their farthest field.
constexpr uint64_t kMaxRecordBytes = HotSpotVm::kMaxTypeBytes;
constexpr int kMaxFailedRecordReads = JavaHeapLimits::kMaxFailedRecordReads;

bool power_of_two(uint64_t v) { return v && !(v & (v - 1)); }

}  // namespace

std::optional<std::string> check_heap_layout(const JavaHeapLayout& L) {
  const std::tuple<const char*, uint64_t, uint64_t> fields[] = {
      {"(G1)HeapRegion::_bottom", L.region_bottom, 8},
      {"(G1)HeapRegion::_end", L.region_end, 8},
      {"(G1)HeapRegion::_top", L.region_top, 8},
      {"(G1)HeapRegionType::_tag", L.region_tag, 4},
      {"Klass::_layout_helper", L.klass_layout_helper, 4},
      {"Klass::_name", L.klass_name, 8},
      {"Symbol::_length", L.symbol_length, 2},
      {"Symbol::_body", L.symbol_body, 1},
      {"ObjArrayKlass::_bottom_klass", L.objarray_bottom_klass, 8},
      {"InstanceKlass::_misc_flags", L.instance_misc_flags, 2},
      {"the array length", L.array_length_offset, 4},
      {"java_lang_Class::_oop_size_offset", static_cast<uint64_t>(int64_t{L.mirror_size_offset}), 4},
  };
  for (auto [what, off, bytes] : fields)
    if (!in_bounds(off, bytes, kMaxRecordBytes))
      return "implausible heap layout: " + std::string(what) + " at offset " + std::to_string(off) + " (+" +
             std::to_string(bytes) + " bytes) is beyond " + std::to_string(kMaxRecordBytes) + " bytes";
  if (L.kind != HeapKind::kG1) {
    for (auto [what, off] : {std::pair<const char*, uint64_t>{"the space's _bottom", L.space_bottom},
                             {"the space's _end", L.space_end},
                             {"the space's _top", L.space_top}})
      if (!in_bounds(off, 8, kMaxRecordBytes))
        return "implausible heap layout: " + std::string(what) + " at offset " + std::to_string(off) +
               " is beyond " + std::to_string(kMaxRecordBytes) + " bytes";
  }
  if (L.narrow_klass_shift > 32)
    return "implausible heap layout: narrow klass shift " + std::to_string(L.narrow_klass_shift);
  if (L.compact_headers && L.mark_klass_shift >= 64)
    return "implausible heap layout: markWord::klass_shift " + std::to_string(L.mark_klass_shift);
  if (L.object_alignment < 8 || L.object_alignment > 256 || !power_of_two(L.object_alignment))
    return "implausible heap layout: ObjectAlignmentInBytes " + std::to_string(L.object_alignment);
  if (L.kind != HeapKind::kG1) {
    if (L.spaces.empty() || L.spaces.size() > kMaxSpaces)
      return "implausible heap layout: " + std::to_string(L.spaces.size()) + " spaces";
    for (const HeapSpaceRef& sp : L.spaces)
      if (!sp.addr || (sp.addr & 7))
        return "implausible heap layout: the " + sp.name + " space's record (" + sp.field + ") at " + hex(sp.addr);
    return std::nullopt;
  }
  if (!power_of_two(L.grain_bytes) || L.grain_bytes > kMaxGrainBytes)
    return "implausible G1 layout: GrainBytes " + std::to_string(L.grain_bytes);
  if (!L.region_table || L.region_count == 0 || L.region_count > kMaxRegions)
    return "implausible G1 region table (" + std::to_string(L.region_count) + " regions)";
  return std::nullopt;
}

// --- Resolution from VMStructs ------------------------------------------------

namespace {

const std::initializer_list<std::string_view> kRegionTypes = {"HeapRegion", "G1HeapRegion"};
const std::initializer_list<std::string_view> kRegionTypeTypes = {"HeapRegionType", "G1HeapRegionType"};
const std::initializer_list<std::string_view> kRegionManagerTypes = {"HeapRegionManager", "G1HeapRegionManager"};

// The statics the resolution reads (addresses in the target, not offsets).
struct G1Statics {
  const VmField *heap, *grain, *mirror;
};

std::optional<std::string> find_statics(const HotSpotVm& vm, G1Statics& s) {
  s.heap = vm.field("Universe", "_collectedHeap");
  s.grain = vm.field_any(kRegionTypes, "GrainBytes");
  s.mirror = vm.field("java_lang_Class", "_oop_size_offset");
  for (auto [f, what] : std::initializer_list<std::pair<const VmField*, const char*>>{
           {s.heap, "Universe::_collectedHeap"}, {s.grain, "(G1)HeapRegion::GrainBytes"},
           {s.mirror, "java_lang_Class::_oop_size_offset"}})
    if (!f) return std::string("VMStructs has no ") + what;
  return std::nullopt;
}

// The compressed class pointer base and shift, or the markWord's klass shift
// (compact headers), as the flags say the JVM encodes klass pointers.
std::optional<std::string> resolve_klass_encoding(ChunkCache& mem, const HotSpotVm& vm, JavaHeapLayout& L) {
  if (L.compressed_klass) {
    // Where each JDK keeps them, the first pair VMStructs describes:
    // Universe (8, 11), CompressedKlassPointers::_narrow_klass (17, 21),
    // CompressedKlassPointers' own statics (25).
    struct Names {
      const char *type, *base, *shift;
    };
    std::optional<uint64_t> kb;
    std::optional<int32_t> ks;
    for (const Names& n : {Names{"CompressedKlassPointers", "_narrow_klass._base", "_narrow_klass._shift"},
                           Names{"CompressedKlassPointers", "_base", "_shift"},
                           Names{"Universe", "_narrow_klass._base", "_narrow_klass._shift"}}) {
      const VmField *b = vm.field(n.type, n.base), *sh = vm.field(n.type, n.shift);
      if (!b || !sh) continue;
      kb = read_static<uint64_t>(mem, b);
      ks = read_static<int32_t>(mem, sh);
      break;
    }
    if (!kb || !ks || *ks < 0 || *ks > 32) return "cannot read the compressed class pointer base/shift";
    L.narrow_klass_base = *kb;
    L.narrow_klass_shift = static_cast<uint32_t>(*ks);
  }
  if (L.compact_headers) {
    auto s = vm.long_constant("markWord::klass_shift");
    if (!s || *s >= 64) return "compact object headers but no markWord::klass_shift";
    L.mark_klass_shift = static_cast<uint32_t>(*s);
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> resolve_object_layout(ChunkCache& mem, const HotSpotVm& vm,
                                                 const std::map<std::string, uint64_t>& flags, JavaHeapLayout& L) {
  auto flag_bool = [&](const char* n) {
    uint8_t v = 0;
    auto it = flags.find(n);
    return it != flags.end() && mem.get(it->second, v) && v != 0;
  };
  const VmField* mirror = vm.field("java_lang_Class", "_oop_size_offset");
  if (!mirror) return std::string("VMStructs has no java_lang_Class::_oop_size_offset");
  OffsetResolver o(vm);
  L.klass_layout_helper = o.field({"Klass"}, "_layout_helper", 4);
  L.klass_name = o.field({"Klass"}, "_name", 8);
  L.symbol_length = o.field({"Symbol"}, "_length", 2);
  L.symbol_body = o.field({"Symbol"}, "_body", 1);
  // Optional: without it, arrays of hidden classes keep HotSpot's '+'.
  if (vm.field("ObjArrayKlass", "_bottom_klass"))
    L.objarray_bottom_klass = o.field({"ObjArrayKlass"}, "_bottom_klass", 8);
  // Optional: without it, VM-anonymous classes are named without their address.
  if (auto bit = vm.int_constant("InstanceKlass::_misc_is_anonymous");
      bit && *bit > 0 && *bit <= 0x8000 && vm.field("InstanceKlass", "_misc_flags")) {
    L.instance_misc_flags = o.field({"InstanceKlass"}, "_misc_flags", 2);
    L.misc_is_anonymous = static_cast<uint32_t>(*bit);
  }
  if (o.error) return o.error;
  L.compact_headers = flag_bool("UseCompactObjectHeaders");
  L.compressed_klass = L.compact_headers || flag_bool("UseCompressedClassPointers");
  if (auto e = resolve_klass_encoding(mem, vm, L)) return e;
  // intx in JDK 17, int in 21+: the low 32 bits (little endian) serve both.
  int32_t align = 8;
  if (auto it = flags.find("ObjectAlignmentInBytes"); it != flags.end()) mem.get(it->second, align);
  if (align < 8 || align > 256 || (align & (align - 1))) return "implausible ObjectAlignmentInBytes";
  L.object_alignment = static_cast<uint64_t>(align);
  // Not in VMStructs (SA computes it): after the mark word with compact
  // headers, in the klass gap with compressed class pointers, else after Klass*.
  L.array_length_offset = L.compact_headers ? 8 : (L.compressed_klass ? 12 : 16);
  auto mo = read_static<int32_t>(mem, mirror);
  if (!mo || *mo <= 0 || *mo > 4096) return "cannot read java_lang_Class::_oop_size_offset";
  L.mirror_size_offset = *mo;
  return std::nullopt;
}

std::optional<std::string> resolve_g1_layout(ChunkCache& mem, const HotSpotVm& vm,
                                             const std::map<std::string, uint64_t>& flags, JavaHeapLayout& L,
                                             uint64_t& heap_addr) {
  G1Statics st{};
  if (auto e = find_statics(vm, st)) return e;
  L.kind = HeapKind::kG1;
  // Every offset, checked once here against the size of the struct it
  // indexes; the walk reads records no larger than these.
  OffsetResolver o(vm);
  const uint64_t hrm = o.embedded({"G1CollectedHeap"}, "_hrm", kRegionManagerTypes);
  const uint64_t regions = o.embedded(kRegionManagerTypes, "_regions", {"G1HeapRegionTable"});
  const uint64_t tbase = o.field({"G1HeapRegionTable"}, "_base", 8);
  const uint64_t tlen = o.field({"G1HeapRegionTable"}, "_length", 8);
  L.region_bottom = o.field(kRegionTypes, "_bottom", 8);
  L.region_end = o.field(kRegionTypes, "_end", 8);
  L.region_top = o.field(kRegionTypes, "_top", 8);
  // JDK 8 describes no region type: its regions are told apart by their objects.
  L.region_types = vm.field_any(kRegionTypes, "_type") != nullptr;
  if (L.region_types) {
    const uint32_t type = o.embedded(kRegionTypes, "_type", kRegionTypeTypes);
    L.region_tag = type + o.field(kRegionTypeTypes, "_tag", 4);  // both below 64 KiB: no overflow
  }
  if (o.error) return o.error;
  if (auto e = resolve_object_layout(mem, vm, flags, L)) return e;

  auto heap = read_static<uint64_t>(mem, st.heap);
  if (!heap || !*heap) return "cannot read Universe::_collectedHeap";
  heap_addr = *heap;
  const uint64_t table = *heap + hrm + regions;
  if (!mem.get(table + tbase, L.region_table) || !mem.get(table + tlen, L.region_count))
    return "cannot read the G1 region table";
  auto g = read_static<uint64_t>(mem, st.grain);
  if (!g) return "cannot read GrainBytes";
  L.grain_bytes = *g;
  auto tag_const = [&](const char* n) {
    auto v = vm.int_constant(std::string("HeapRegionType::") + n);
    if (!v) v = vm.int_constant(std::string("G1HeapRegionType::") + n);
    return v;
  };
  if (L.region_types) {
    auto free_t = tag_const("FreeTag"), sh = tag_const("StartsHumongousTag"), ch = tag_const("ContinuesHumongousTag");
    if (!free_t || !sh || !ch) return "VMStructs has no heap region type tags";
    L.tag_free = *free_t, L.tag_starts_humongous = *sh, L.tag_continues_humongous = *ch;
    auto eden = tag_const("EdenTag"), surv = tag_const("SurvTag"), old = tag_const("OldMask");
    L.region_spaces = eden && surv && old && *old > 0;
    if (L.region_spaces) L.tag_eden = *eden, L.tag_survivor = *surv, L.old_mask = *old;
  }
  return check_heap_layout(L);
}

const char* g1_region_space(const JavaHeapLayout& L, int64_t tag) {
  if (tag == L.tag_starts_humongous || tag == L.tag_continues_humongous) return "humongous";
  if (tag == L.tag_eden) return "eden";
  if (tag == L.tag_survivor) return "survivor";
  if (tag & L.old_mask) return "old";
  return "other";
}

namespace {

constexpr uint32_t kMaxThreads = 100000;

// The JavaThreads, from the first list VMStructs describes: the array
// ThreadsSMRSupport::_java_thread_list (JDK 10+ exports it from 17 on), or
// the linked list Threads::_thread_list -> JavaThread::_next (8, 11).
// Empty when neither is described or the list cannot be read; nullopt +
// error when one is described with offsets that do not fit their types.
std::optional<std::vector<uint64_t>> java_threads(ChunkCache& mem, const HotSpotVm& vm, const Deadline& deadline,
                                                  std::string& error) {
  std::vector<uint64_t> threads;
  OffsetResolver o(vm);
  if (vm.field("ThreadsSMRSupport", "_java_thread_list") && vm.field("ThreadsList", "_length") &&
      vm.field("ThreadsList", "_threads")) {
    const uint64_t len_off = o.field({"ThreadsList"}, "_length", 4);
    const uint64_t thr_off = o.field({"ThreadsList"}, "_threads", 8);
    if (o.error) {
      error = *o.error;
      return std::nullopt;
    }
    auto list = read_static<uint64_t>(mem, vm.field("ThreadsSMRSupport", "_java_thread_list"));
    uint32_t n = 0;
    uint64_t array = 0;
    if (!list || !*list || !mem.get(*list + len_off, n) || !mem.get(*list + thr_off, array) || n > kMaxThreads)
      return threads;
    threads.resize(n);
    if (n && !mem.read(array, threads.data(), uint64_t{n} * 8)) threads.clear();
    return threads;
  }
  if (!vm.field("Threads", "_thread_list") || !vm.field("JavaThread", "_next")) return threads;
  const uint64_t next_off = o.field({"JavaThread"}, "_next", 8);
  if (o.error) {
    error = *o.error;
    return std::nullopt;
  }
  auto head = read_static<uint64_t>(mem, vm.field("Threads", "_thread_list"));
  // A list the target made circular (or longer than any JVM's) ends at the
  // cap; a thread seen twice ends it at once.
  std::unordered_set<uint64_t> seen;
  for (uint64_t t = head.value_or(0); t && threads.size() < kMaxThreads; ) {
    if ((threads.size() & 255) == 255 && deadline.expired()) break;
    if (!seen.insert(t).second) break;
    threads.push_back(t);
    if (!mem.get(t + next_off, t)) break;
  }
  return threads;
}

}  // namespace

std::optional<std::vector<std::pair<uint64_t, uint64_t>>> read_tlab_holes(ChunkCache& mem, const HotSpotVm& vm,
                                                                          const Deadline& deadline,
                                                                          std::string& error) {
  constexpr int64_t kMaxReserveWords = 1 << 16;  // HotSpot's are a few hundred words at most
  std::vector<std::pair<uint64_t, uint64_t>> holes;
  for (auto [type, name] : std::initializer_list<std::pair<const char*, const char*>>{
           {"Thread", "_tlab"}, {"ThreadLocalAllocBuffer", "_top"}, {"ThreadLocalAllocBuffer", "_end"}})
    if (!vm.field(type, name)) return holes;  // TLABs not described: the walk resynchronises over their tails
  OffsetResolver o(vm);
  const uint64_t tlab = o.embedded({"Thread"}, "_tlab", {"ThreadLocalAllocBuffer"});
  const uint64_t t_top = o.field({"ThreadLocalAllocBuffer"}, "_top", 8);
  const uint64_t t_end = o.field({"ThreadLocalAllocBuffer"}, "_end", 8);
  if (o.error) {
    error = *o.error;
    return std::nullopt;
  }
  auto tp = java_threads(mem, vm, deadline, error);
  if (!tp) return std::nullopt;
  // The reserve past _end that a TLAB keeps for a filler / prefetch (the
  // prefetch reserve is VM_Version's in JDK 8).
  int64_t reserve_words = 2;  // an int[] header, as lab_alignment_reserve() before JDK 25 exported it
  for (auto [type, name] : std::initializer_list<std::pair<const char*, const char*>>{
           {"ThreadLocalAllocBuffer", "_reserve_for_allocation_prefetch"},
           {"Abstract_VM_Version", "_reserve_for_allocation_prefetch"}})
    if (auto p = read_static<int32_t>(mem, vm.field(type, name)))
      if (*p <= kMaxReserveWords) reserve_words = std::max<int64_t>(reserve_words, *p);
  if (auto r = read_static<uint64_t>(mem, vm.field("CollectedHeap", "_lab_alignment_reserve")))
    if (*r <= static_cast<uint64_t>(kMaxReserveWords)) reserve_words = std::max<int64_t>(reserve_words, *r);
  // JavaThreads are C-heap objects: one that cannot be read means the list
  // is not what it claims, and reading on would cost a failed read each.
  int failed = 0;
  for (size_t i = 0; i < tp->size() && failed < kMaxFailedRecordReads; ++i) {
    if ((i & 255) == 255 && deadline.expired()) break;
    const uint64_t t = (*tp)[i];
    uint64_t top = 0, end = 0;
    if (!t) continue;
    if (!mem.get(t + tlab + t_top, top) || !mem.get(t + tlab + t_end, end)) {
      ++failed;
      continue;
    }
    if (top && end && top <= end) holes.emplace_back(top, end + static_cast<uint64_t>(reserve_words) * 8);
  }
  std::sort(holes.begin(), holes.end());
  return holes;
}

}  // namespace oomsnap
