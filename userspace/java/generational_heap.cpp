#include "java/generational_heap.h"

#include <initializer_list>
#include <string_view>

#include "base/text.h"

namespace oomsnap {
namespace {

// Follows pointers from one HotSpot struct to the next, each field checked
// against its type (OffsetResolver); the first field that is missing, does
// not fit or cannot be read is the error, and the reads after it are not made.
class PointerChase {
 public:
  PointerChase(ChunkCache& mem, const HotSpotVm& vm) : mem_(mem), vm_(vm), o_(vm) {}
  // The pointer in field `name` of the object at obj (of the first of
  // `types` that has the field), or of the static variable when VMStructs
  // describes the field as static (ParallelScavengeHeap::_young_gen is one).
  uint64_t read(uint64_t obj, std::initializer_list<std::string_view> types, std::string_view name) {
    if (error) return 0;
    const VmField* f = vm_.field_any(types, name);
    const std::string what = std::string(*types.begin()) + "::" + std::string(name);
    uint64_t v = 0;
    if (f && f->is_static) {
      if (auto s = read_static<uint64_t>(mem_, f)) v = *s;
      else error = "cannot read " + what;
    } else {
      const uint64_t off = o_.field(types, name, 8);
      if (o_.error) error = o_.error;
      else if (!mem_.get(obj + off, v)) error = "cannot read " + what + " at " + hex(obj + off);
    }
    if (!error && (!v || (v & 7))) error = "implausible " + what + " (" + hex(v) + ")";
    return error ? 0 : v;
  }
  // An offset, checked against its type.
  uint32_t offset(std::initializer_list<std::string_view> types, std::string_view name, uint64_t bytes) {
    if (error) return 0;
    const uint32_t off = o_.field(types, name, bytes);
    if (o_.error) error = o_.error;
    return off;
  }
  // The space at field `name` of the generation at gen.
  void space(JavaHeapLayout& L, const char* space_name, uint64_t gen, std::initializer_list<std::string_view> types,
             std::string_view name) {
    const uint64_t sp = read(gen, types, name);
    if (!error) L.spaces.push_back({space_name, std::string(*types.begin()) + "::" + std::string(name), sp});
  }
  std::optional<std::string> error;

 private:
  ChunkCache& mem_;
  const HotSpotVm& vm_;
  OffsetResolver o_;
};

const std::initializer_list<std::string_view> kSerialHeapTypes = {"SerialHeap", "GenCollectedHeap"};

// The young and old generations of a Serial heap: SerialHeap's (or its
// base GenCollectedHeap's) _young_gen and _old_gen, or JDK 8's array
// GenCollectedHeap::_gens of _n_gens (young first).
void serial_generations(ChunkCache& mem, const HotSpotVm& vm, PointerChase& p, uint64_t heap, uint64_t& young,
                        uint64_t& old) {
  if (vm.field_any(kSerialHeapTypes, "_young_gen")) {
    young = p.read(heap, kSerialHeapTypes, "_young_gen");
    old = p.read(heap, kSerialHeapTypes, "_old_gen");
    return;
  }
  if (!vm.field("GenCollectedHeap", "_gens") || !vm.field("GenCollectedHeap", "_n_gens")) {
    p.error = "VMStructs describes no Serial generations (SerialHeap/GenCollectedHeap::_young_gen, or _gens)";
    return;
  }
  const uint64_t gens = p.offset({"GenCollectedHeap"}, "_gens", 16);
  const uint64_t n_off = p.offset({"GenCollectedHeap"}, "_n_gens", 4);
  if (p.error) return;
  int32_t n = 0;
  if (!mem.get(heap + n_off, n) || n != 2) {
    p.error = "implausible GenCollectedHeap::_n_gens (" + std::to_string(n) + "; a Serial heap has 2)";
    return;
  }
  if (!mem.get(heap + gens, young) || !mem.get(heap + gens + 8, old)) {
    p.error = "cannot read GenCollectedHeap::_gens";
    return;
  }
  if (!young || !old || ((young | old) & 7)) p.error = "implausible GenCollectedHeap::_gens";
}

}  // namespace

std::optional<std::string> resolve_generational_layout(ChunkCache& mem, const HotSpotVm& vm,
                                                       const std::map<std::string, uint64_t>& flags, HeapKind kind,
                                                       JavaHeapLayout& L, uint64_t& heap_addr) {
  if (kind == HeapKind::kG1) return "resolve_generational_layout: not a Serial or Parallel heap";
  L.kind = kind;
  L.spaces.clear();
  if (auto e = resolve_object_layout(mem, vm, flags, L)) return e;
  auto heap = read_static<uint64_t>(mem, vm.field("Universe", "_collectedHeap"));
  if (!heap || !*heap) return "cannot read Universe::_collectedHeap";
  heap_addr = *heap;
  PointerChase p(mem, vm);
  if (kind == HeapKind::kSerial) {
    // Every Serial space is a ContiguousSpace (EdenSpace and TenuredSpace
    // derive from it): one set of offsets serves all four.
    L.space_bottom = p.offset({"ContiguousSpace"}, "_bottom", 8);
    L.space_end = p.offset({"ContiguousSpace"}, "_end", 8);
    L.space_top = p.offset({"ContiguousSpace"}, "_top", 8);
    uint64_t young = 0, old = 0;
    if (!p.error) serial_generations(mem, vm, p, *heap, young, old);
    p.space(L, "eden", young, {"DefNewGeneration"}, "_eden_space");
    p.space(L, "from", young, {"DefNewGeneration"}, "_from_space");
    p.space(L, "to", young, {"DefNewGeneration"}, "_to_space");
    p.space(L, "old", old, {"TenuredGeneration"}, "_the_space");
  } else {
    L.space_bottom = p.offset({"MutableSpace"}, "_bottom", 8);
    L.space_end = p.offset({"MutableSpace"}, "_end", 8);
    L.space_top = p.offset({"MutableSpace"}, "_top", 8);
    const uint64_t young = p.read(*heap, {"ParallelScavengeHeap"}, "_young_gen");
    const uint64_t old = p.read(*heap, {"ParallelScavengeHeap"}, "_old_gen");
    p.space(L, "eden", young, {"PSYoungGen"}, "_eden_space");
    p.space(L, "from", young, {"PSYoungGen"}, "_from_space");
    p.space(L, "to", young, {"PSYoungGen"}, "_to_space");
    p.space(L, "old", old, {"PSOldGen"}, "_object_space");
  }
  if (p.error) return p.error;
  return check_heap_layout(L);
}

}  // namespace oomsnap
