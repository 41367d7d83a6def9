#include "java/java_collector.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>

#include "core/chunk_cache.h"
#include "java/g1_heap.h"
#include "java/hotspot_vmstructs.h"

namespace oomsnap {
namespace {

// The JVM's command-line flags by name: JVMFlag::flags[numFlags], each with
// its name and the address of its value.
std::map<std::string, uint64_t> read_flags(ChunkCache& mem, const HotSpotVm& vm,
                                           std::initializer_list<const char*> wanted) {
  std::map<std::string, uint64_t> out;
  const VmField* flags = vm.field("JVMFlag", "flags");
  const VmField* num = vm.field("JVMFlag", "numFlags");
  const VmField* name = vm.field("JVMFlag", "_name");
  const VmField* addr = vm.field("JVMFlag", "_addr");
  auto size = vm.type_size("JVMFlag");
  uint64_t base = 0, n = 0;
  if (!flags || !num || !name || !addr || !size || *size < 16 || *size > 256 || !mem.get(flags->address, base) ||
      !mem.get(num->address, n) || n > 10000)
    return out;
  std::vector<uint8_t> all(n * *size);
  if (!mem.read(base, all.data(), all.size())) return out;
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t np = 0, vp = 0;
    std::memcpy(&np, all.data() + i * *size + name->offset, 8);
    std::memcpy(&vp, all.data() + i * *size + addr->offset, 8);
    const std::string s = read_remote_c_string(mem, np, 64);
    for (const char* w : wanted)
      if (s == w) out[s] = vp;
  }
  return out;
}

template <typename T>
std::optional<T> read_static(ChunkCache& mem, const VmField* f) {
  T v{};
  if (!f || !f->is_static || !mem.get(f->address, v)) return std::nullopt;
  return v;
}

// Every offset and constant the walk needs; an error names what is missing.
std::optional<std::string> resolve_layout(ChunkCache& mem, const HotSpotVm& vm,
                                          const std::map<std::string, uint64_t>& flags, G1Layout& L,
                                          uint64_t& heap_addr) {
  auto flag_bool = [&](const char* n) {
    uint8_t v = 0;
    auto it = flags.find(n);
    return it != flags.end() && mem.get(it->second, v) && v != 0;
  };
  auto need = [&](const VmField* f, const char* what) -> std::optional<std::string> {
    if (!f) return std::string("VMStructs has no ") + what;
    return std::nullopt;
  };
  const VmField* heap_f = vm.field("Universe", "_collectedHeap");
  const VmField* hrm = vm.field("G1CollectedHeap", "_hrm");
  const VmField* regions = vm.field_any({"HeapRegionManager", "G1HeapRegionManager"}, "_regions");
  const VmField* tbase = vm.field("G1HeapRegionTable", "_base");
  const VmField* tlen = vm.field("G1HeapRegionTable", "_length");
  const VmField* bottom = vm.field_any({"HeapRegion", "G1HeapRegion"}, "_bottom");
  const VmField* end = vm.field_any({"HeapRegion", "G1HeapRegion"}, "_end");
  const VmField* top = vm.field_any({"HeapRegion", "G1HeapRegion"}, "_top");
  const VmField* type = vm.field_any({"HeapRegion", "G1HeapRegion"}, "_type");
  const VmField* tag = vm.field_any({"HeapRegionType", "G1HeapRegionType"}, "_tag");
  const VmField* grain = vm.field_any({"HeapRegion", "G1HeapRegion"}, "GrainBytes");
  const VmField* lh = vm.field("Klass", "_layout_helper");
  const VmField* kname = vm.field("Klass", "_name");
  const VmField* slen = vm.field("Symbol", "_length");
  const VmField* sbody = vm.field("Symbol", "_body");
  const VmField* mirror = vm.field("java_lang_Class", "_oop_size_offset");
  for (auto [f, what] : std::initializer_list<std::pair<const VmField*, const char*>>{
           {heap_f, "Universe::_collectedHeap"}, {hrm, "G1CollectedHeap::_hrm"},
           {regions, "(G1)HeapRegionManager::_regions"}, {tbase, "G1HeapRegionTable::_base"},
           {tlen, "G1HeapRegionTable::_length"}, {bottom, "(G1)HeapRegion::_bottom"}, {end, "(G1)HeapRegion::_end"},
           {top, "(G1)HeapRegion::_top"}, {type, "(G1)HeapRegion::_type"}, {tag, "(G1)HeapRegionType::_tag"},
           {grain, "(G1)HeapRegion::GrainBytes"}, {lh, "Klass::_layout_helper"}, {kname, "Klass::_name"},
           {slen, "Symbol::_length"}, {sbody, "Symbol::_body"}, {mirror, "java_lang_Class::_oop_size_offset"}})
    if (auto e = need(f, what)) return e;
  auto heap = read_static<uint64_t>(mem, heap_f);
  if (!heap || !*heap) return "cannot read Universe::_collectedHeap";
  heap_addr = *heap;
  const uint64_t table = *heap + hrm->offset + regions->offset;
  if (!mem.get(table + tbase->offset, L.region_table) || !mem.get(table + tlen->offset, L.region_count))
    return "cannot read the G1 region table";
  auto g = read_static<uint64_t>(mem, grain);
  if (!g) return "cannot read GrainBytes";
  L.grain_bytes = *g;
  L.region_bottom = static_cast<uint32_t>(bottom->offset);
  L.region_end = static_cast<uint32_t>(end->offset);
  L.region_top = static_cast<uint32_t>(top->offset);
  L.region_tag = static_cast<uint32_t>(type->offset + tag->offset);
  auto tag_const = [&](const char* n) {
    auto v = vm.int_constant(std::string("HeapRegionType::") + n);
    if (!v) v = vm.int_constant(std::string("G1HeapRegionType::") + n);
    return v;
  };
  auto free_t = tag_const("FreeTag"), sh = tag_const("StartsHumongousTag"), ch = tag_const("ContinuesHumongousTag");
  if (!free_t || !sh || !ch) return "VMStructs has no heap region type tags";
  L.tag_free = *free_t, L.tag_starts_humongous = *sh, L.tag_continues_humongous = *ch;

  L.compact_headers = flag_bool("UseCompactObjectHeaders");
  L.compressed_klass = L.compact_headers || flag_bool("UseCompressedClassPointers");
  if (L.compressed_klass) {
    auto kb = read_static<uint64_t>(mem, vm.field_any({"CompressedKlassPointers"}, "_narrow_klass._base"));
    if (!kb) kb = read_static<uint64_t>(mem, vm.field("CompressedKlassPointers", "_base"));
    auto ks = read_static<int32_t>(mem, vm.field("CompressedKlassPointers", "_narrow_klass._shift"));
    if (!ks) ks = read_static<int32_t>(mem, vm.field("CompressedKlassPointers", "_shift"));
    if (!kb || !ks || *ks < 0 || *ks > 32) return "cannot read the compressed class pointer base/shift";
    L.narrow_klass_base = *kb;
    L.narrow_klass_shift = static_cast<uint32_t>(*ks);
  }
  if (L.compact_headers) {
    auto s = vm.long_constant("markWord::klass_shift");
    if (!s || *s >= 64) return "compact object headers but no markWord::klass_shift";
    L.mark_klass_shift = static_cast<uint32_t>(*s);
  }
  // intx in JDK 17, int in 21+: the low 32 bits (little endian) serve both.
  int32_t align = 8;
  if (auto it = flags.find("ObjectAlignmentInBytes"); it != flags.end()) mem.get(it->second, align);
  if (align < 8 || align > 256 || (align & (align - 1))) return "implausible ObjectAlignmentInBytes";
  L.object_alignment = static_cast<uint64_t>(align);
  // Not in VMStructs (SA computes it): after the mark word with compact
  // headers, in the klass gap with compressed class pointers, else after Klass*.
  L.array_length_offset = L.compact_headers ? 8 : (L.compressed_klass ? 12 : 16);
  L.klass_layout_helper = static_cast<uint32_t>(lh->offset);
  L.klass_name = static_cast<uint32_t>(kname->offset);
  L.symbol_length = static_cast<uint32_t>(slen->offset);
  L.symbol_body = static_cast<uint32_t>(sbody->offset);
  auto mo = read_static<int32_t>(mem, mirror);
  if (!mo || *mo <= 0 || *mo > 4096) return "cannot read java_lang_Class::_oop_size_offset";
  L.mirror_size_offset = *mo;
  return std::nullopt;
}

// The unused tails [top, hard end) of every Java thread's TLAB: unformatted
// memory inside regions, skipped by the walk.
std::vector<std::pair<uint64_t, uint64_t>> tlab_holes(ChunkCache& mem, const HotSpotVm& vm) {
  std::vector<std::pair<uint64_t, uint64_t>> holes;
  auto list = read_static<uint64_t>(mem, vm.field("ThreadsSMRSupport", "_java_thread_list"));
  const VmField* len_f = vm.field("ThreadsList", "_length");
  const VmField* thr_f = vm.field("ThreadsList", "_threads");
  const VmField* tlab = vm.field("Thread", "_tlab");
  const VmField* t_top = vm.field("ThreadLocalAllocBuffer", "_top");
  const VmField* t_end = vm.field("ThreadLocalAllocBuffer", "_end");
  if (!list || !*list || !len_f || !thr_f || !tlab || !t_top || !t_end) return holes;
  // The reserve past _end that a TLAB keeps for a filler / prefetch.
  int64_t reserve_words = 2;  // an int[] header, as lab_alignment_reserve() before JDK 25 exported it
  if (auto p = read_static<int32_t>(mem, vm.field("ThreadLocalAllocBuffer", "_reserve_for_allocation_prefetch")))
    reserve_words = std::max<int64_t>(reserve_words, *p);
  if (auto r = read_static<uint64_t>(mem, vm.field("CollectedHeap", "_lab_alignment_reserve")))
    reserve_words = std::max<int64_t>(reserve_words, static_cast<int64_t>(*r));
  uint32_t n = 0;
  uint64_t threads = 0;
  if (!mem.get(*list + len_f->offset, n) || !mem.get(*list + thr_f->offset, threads) || n > 100000) return holes;
  std::vector<uint64_t> tp(n);
  if (n && !mem.read(threads, tp.data(), n * 8)) return holes;
  for (uint64_t t : tp) {
    uint64_t top = 0, end = 0;
    if (!t || !mem.get(t + tlab->offset + t_top->offset, top) || !mem.get(t + tlab->offset + t_end->offset, end))
      continue;
    if (top && end && top <= end) holes.emplace_back(top, end + static_cast<uint64_t>(reserve_words) * 8);
  }
  std::sort(holes.begin(), holes.end());
  return holes;
}

const char* other_collector(ChunkCache& mem, const std::map<std::string, uint64_t>& flags) {
  for (const char* gc : {"UseParallelGC", "UseSerialGC", "UseZGC", "UseShenandoahGC", "UseEpsilonGC"}) {
    uint8_t v = 0;
    auto it = flags.find(gc);
    if (it != flags.end() && mem.get(it->second, v) && v) return gc;
  }
  return nullptr;
}

}  // namespace

bool JavaCollector::detect(Target& target) {
  jvm_ = find_libjvm(target);
  return jvm_.has_value();
}

CaptureResult JavaCollector::collect(Target& target, const CaptureOptions& opts) {
  CaptureRun run(target, "java", opts);
  Snapshot& snap = run.out.snapshot;
  const Deadline& deadline = run.deadline;
  auto finish = [&run] { return run.finish(); };
  if (!jvm_ && !detect(target)) {
    snap.set_status(SnapshotStatus::kFailed, "not a HotSpot JVM (no libjvm.so with gHotSpotVMStructs mapped)");
    return finish();
  }
  ChunkCache mem(target.memory(), target.maps());
  mem.set_read_limit(target.memory().bytes_read() + opts.max_read_bytes + (64u << 20));
  std::string err;
  auto vm = HotSpotVm::read(mem, jvm_->symbols, err);
  if (!vm) {
    snap.set_status(SnapshotStatus::kFailed, "cannot read HotSpot's VMStructs: " + err);
    return finish();
  }
  auto flags = read_flags(mem, *vm,
                          {"UseG1GC", "UseParallelGC", "UseSerialGC", "UseZGC", "UseShenandoahGC", "UseEpsilonGC",
                           "UseCompressedClassPointers", "UseCompactObjectHeaders", "ObjectAlignmentInBytes"});
  if (auto vsym = read_static<uint64_t>(mem, vm->field("Abstract_VM_Version", "_s_vm_release")))
    snap.runtime_version = read_remote_c_string(mem, *vsym, 64);
  uint8_t g1 = 0;
  if (!flags.count("UseG1GC") || !mem.get(flags["UseG1GC"], g1) || !g1) {
    const char* gc = other_collector(mem, flags);
    snap.set_status(SnapshotStatus::kUnavailable,
                    std::string("the JVM does not use G1 (") + (gc ? gc : "collector unknown") +
                        "); only G1 heaps are walked");
    return finish();
  }
  G1Layout L;
  uint64_t heap = 0;  // the G1CollectedHeap
  if (auto bad = resolve_layout(mem, *vm, flags, L, heap)) {
    snap.set_status(SnapshotStatus::kFailed, *bad);
    return finish();
  }
  // A stop-the-world pause moves objects: wait it out briefly, and notice one
  // that starts during the walk by the collection counter.
  const VmField* active = vm->field_any({"CollectedHeap"}, "_is_gc_active");
  if (!active) active = vm->field("CollectedHeap", "_is_stw_gc_active");
  const VmField* collections = vm->field("CollectedHeap", "_total_collections");
  for (int i = 0; active && i < 100 && !deadline.expired(); ++i) {
    uint8_t busy = 0;
    if (!target.memory().read(heap + active->offset, &busy, 1) || !busy) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  uint32_t gc_before = 0, gc_after = 0;
  if (collections) target.memory().read(heap + collections->offset, &gc_before, 4);
  L.holes = tlab_holes(mem, *vm);
  G1Limits lim;
  lim.max_walk_bytes = opts.max_read_bytes;
  G1WalkResult r = walk_g1_heap(mem, L, lim, deadline);
  snap.set_status(r.status, r.reason);
  if (collections && target.memory().read(heap + collections->offset, &gc_after, 4) && gc_after != gc_before &&
      r.status == SnapshotStatus::kComplete)
    snap.set_status(SnapshotStatus::kPartial, "a garbage collection ran during the walk: objects may have moved");
  snap.scope = r.sample_stride > 1 ? "g1_heap_sampled" : "g1_heap";
  snap.coverage = r.coverage;
  snap.totals = {{"regions", r.regions},         {"regions_walked", r.regions_walked},
                 {"used_bytes", r.used_bytes},   {"parsed_bytes", r.parsed_bytes},
                 {"unparsed_bytes", r.unparsed_bytes}, {"filler_bytes", r.filler_bytes},
                 {"objects", r.objects},         {"sample_stride", r.sample_stride},
                 {"humongous_objects", r.humongous_objects}, {"humongous_bytes", r.humongous_bytes},
                 {"region_bytes", L.grain_bytes}};
  for (auto& c : r.classes) {
    SnapshotEntry e;
    e.kind = "object_type";
    e.name = std::move(c.name);
    e.bytes = c.bytes;
    e.objects = c.objects;
    snap.entries.push_back(std::move(e));
  }
  snap.sort_and_truncate(opts.max_entries);
  if (!target.still_same() && snap.status != SnapshotStatus::kFailed)
    snap.set_status(SnapshotStatus::kPartial, (snap.reason.empty() ? std::string() : snap.reason + "; ") +
                                                  "the target exited during the walk");
  return finish();
}

}  // namespace oomsnap
