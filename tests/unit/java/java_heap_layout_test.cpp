// Serial and Parallel spaces walked whole, and the G1, Serial and Parallel
// layouts resolved from VMStructs descriptions of JDK 8 to 26 (java_heap_images.h),
// hostile ones failing with the field named.

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "java_heap_images.h"

using namespace oomsnap;
using namespace oomsnap::java_test;

// --- The G1 layout resolved from VMStructs ----------------------------------

namespace {


TEST(GenerationalHeap, SerialSpacesAreWalkedWhole) {
  FakeG1 h;
  const uint32_t marker = h.klass("Fixture$Marker", 24), bytes = h.klass("[B", FakeG1::array_lh(false, 0));
  const uint64_t eden = h.region(2), from = h.region(2), to = h.region(2), old = h.region(2);
  for (int i = 0; i < 300; ++i) h.obj(i % 3 == 0 ? eden : i % 3 == 1 ? from : old, marker, 24);
  // A large array: a normal object in a Serial heap (no humongous regions).
  h.array(old, bytes, 600000, 0);
  const uint64_t hole = h.top(eden);  // a live TLAB's unformatted tail
  std::memset(reinterpret_cast<void*>(hole), 0xAB, 4096);
  h.set_top(eden, hole + 4096);
  h.L.holes = {{hole, hole + 4096}};
  use_spaces(h, HeapKind::kSerial, {{"eden", eden}, {"from", from}, {"to", to}, {"old", old}});
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  auto m = classes(r);
  EXPECT_EQ(m["Fixture$Marker"], std::make_pair(uint64_t{300}, uint64_t{7200}));
  EXPECT_EQ(m["byte[]"], std::make_pair(uint64_t{1}, uint64_t{(16 + 600000 + 7) & ~7ull}));
  EXPECT_EQ(r.regions, 4u);         // eden, from, to, old
  EXPECT_EQ(r.regions_walked, 3u);  // to is empty
  EXPECT_EQ(r.humongous_objects, 0u);
  EXPECT_EQ(r.unparsed_bytes, 0u);
  EXPECT_EQ(r.used_bytes, r.parsed_bytes);
  EXPECT_DOUBLE_EQ(r.coverage, 1.0);
  // Sampled above the budget like G1's regions, in 64 KiB windows.
  auto s = h.walk(64 << 10);
  EXPECT_EQ(s.status, SnapshotStatus::kPartial);
  EXPECT_GT(s.sample_stride, 1u);
}

// Every space's bounds come from the target: one that is not plausible
// refuses the whole walk, naming the space and the field it came from.
TEST(GenerationalHeap, ImplausibleSpacesAreRefusedNamingTheField) {
  auto walk_with_space = [](const std::function<void(FakeG1&, uint64_t eden, uint64_t old)>& spoil) {
    FakeG1 h;
    const uint32_t marker = h.klass("Marker", 24);
    const uint64_t eden = h.region(2), old = h.region(2);
    for (int i = 0; i < 10; ++i) h.obj(eden, marker, 24), h.obj(old, marker, 24);
    use_spaces(h, HeapKind::kParallel, {{"eden", eden}, {"old", old}});
    spoil(h, eden, old);
    return h.walk();
  };
  auto benign = walk_with_space([](FakeG1&, uint64_t, uint64_t) {});
  ASSERT_EQ(benign.status, SnapshotStatus::kComplete) << benign.reason;
  EXPECT_EQ(classes(benign)["Marker"].first, 20u);
  const std::pair<const char*, std::function<void(FakeG1&, uint64_t, uint64_t)>> cases[] = {
      {"_top beyond _end", [](FakeG1& h, uint64_t eden, uint64_t) { h.set_end(eden, h.top(eden) - 8); }},
      {"_top below _bottom", [](FakeG1& h, uint64_t eden, uint64_t) { h.set_top(eden, h.bottom(eden) - 8); }},
      {"unaligned bounds", [](FakeG1& h, uint64_t eden, uint64_t) { h.set_top(eden, h.top(eden) + 4); }},
      {"a size beyond 32 TiB",
       [](FakeG1& h, uint64_t eden, uint64_t) { h.set_end(eden, h.bottom(eden) + (1ull << 46)); }},
      {"overlap",
       [](FakeG1& h, uint64_t eden, uint64_t old) {
         Arena::put(old + h.L.region_bottom, h.bottom(eden) + 64);
         Arena::put(old + h.L.region_top, h.bottom(eden) + 128);
         Arena::put(old + h.L.region_end, h.bottom(eden) + 4096);
       }},
      {"cannot read the eden space (DefNewGeneration::_eden_space",
       [](FakeG1& h, uint64_t, uint64_t) { h.L.spaces[0].addr = 0x1000; }},
      {"the eden space's record", [](FakeG1& h, uint64_t, uint64_t) { h.L.spaces[0].addr = 0; }},
      {"9 spaces",
       [](FakeG1& h, uint64_t, uint64_t) {
         while (h.L.spaces.size() < 9) h.L.spaces.push_back(h.L.spaces.back());
       }},
  };
  for (const auto& [want, spoil] : cases) {
    auto r = walk_with_space(spoil);
    EXPECT_EQ(r.status, SnapshotStatus::kFailed) << want;
    EXPECT_NE(r.reason.find(want), std::string::npos) << want << ": " << r.reason;
    EXPECT_EQ(r.objects, 0u) << want << ": nothing is walked";
  }
}

// A JVM as the collector sees it once libjvm is found: VMStructs (JDK 17's
// names) describing a G1 heap (a FakeG1), its flags, and one Java thread
// whose TLAB has an unformatted tail. Tests change the description, then
// resolve().
class FakeJvm {
 public:
  static constexpr uint64_t kHrm = 0x100, kRegions = 0x10, kTlab = 0x40;
  FakeJvm() : vm(generic_vm(0, 0)), flags(vm) {
    vm.types.insert({{"G1CollectedHeap", 1024}, {"HeapRegionManager", 128}, {"G1HeapRegionTable", 48},
                     {"HeapRegion", FakeG1::kRegionBytes}, {"HeapRegionType", 4}, {"Klass", FakeG1::kKlassBytes},
                     {"Symbol", 8}, {"ThreadsList", 32}, {"Thread", 512}, {"ThreadLocalAllocBuffer", 96},
                     {"CollectedHeap", 512}, {"Universe", 1}, {"java_lang_Class", 1},
                     {"CompressedKlassPointers", 1}, {"ThreadsSMRSupport", 1}, {"intx", 8}});
    heap = vm.a.alloc(1024);
    vm.global("Universe", "_collectedHeap", heap);
    vm.field("G1CollectedHeap", "_hrm", kHrm);
    vm.field("HeapRegionManager", "_regions", kRegions);
    vm.field("G1HeapRegionTable", "_base", 0);
    vm.field("G1HeapRegionTable", "_length", 8);
    vm.field("HeapRegion", "_bottom", 0), vm.field("HeapRegion", "_end", 8), vm.field("HeapRegion", "_top", 16);
    vm.field("HeapRegion", "_type", 24);
    vm.field("HeapRegionType", "_tag", 0);
    grain = vm.global("HeapRegion", "GrainBytes", FakeG1::kGrain);
    vm.ints["HeapRegionType::FreeTag"] = 0;
    vm.ints["HeapRegionType::StartsHumongousTag"] = 4;
    vm.ints["HeapRegionType::ContinuesHumongousTag"] = 5;
    vm.field("Klass", "_layout_helper", 8), vm.field("Klass", "_name", 24);
    vm.field("Symbol", "_length", 4), vm.field("Symbol", "_body", 6);
    vm.global("java_lang_Class", "_oop_size_offset", 16);
    vm.global("CompressedKlassPointers", "_narrow_klass._base", g.klass_area());
    vm.global("CompressedKlassPointers", "_narrow_klass._shift", 0);
    // One Java thread: ThreadsList {_length at 8, _threads at 16}, its TLAB at kTlab.
    const uint64_t list = vm.a.alloc(32);
    threads = vm.a.alloc(8);
    thread = vm.a.alloc(512);
    Arena::put<uint32_t>(list + 8, 1), Arena::put(list + 16, threads), Arena::put(threads, thread);
    vm.global("ThreadsSMRSupport", "_java_thread_list", list);
    vm.field("ThreadsList", "_length", 8), vm.field("ThreadsList", "_threads", 16);
    vm.field("Thread", "_tlab", kTlab);
    vm.field("ThreadLocalAllocBuffer", "_top", 8), vm.field("ThreadLocalAllocBuffer", "_end", 16);
  }
  void set_tlab(uint64_t top, uint64_t end) {
    Arena::put(thread + kTlab + 8, top);
    Arena::put(thread + kTlab + 16, end);
  }
  static constexpr uint64_t kNext = 480;  // JavaThread::_next (JDK 8, 11)
  // JDK 11's description of the same JVM: HeapRegion's bottom and end are
  // Space's, its top G1ContiguousSpace's; the narrow klass base and shift
  // Universe's; the Java threads a linked list from Threads::_thread_list
  // through JavaThread::_next.
  void as_jdk11() {
    vm.types.insert({{"G1ContiguousSpace", 200}, {"CompactibleSpace", 80}, {"Space", 48}, {"JavaThread", 512}});
    vm.supers.insert({{"HeapRegion", "G1ContiguousSpace"}, {"G1ContiguousSpace", "CompactibleSpace"},
                      {"CompactibleSpace", "Space"}, {"JavaThread", "Thread"}});
    vm.move("HeapRegion", "_bottom", "Space"), vm.move("HeapRegion", "_end", "Space");
    vm.move("HeapRegion", "_top", "G1ContiguousSpace");
    vm.move("CompressedKlassPointers", "_narrow_klass._base", "Universe");
    vm.move("CompressedKlassPointers", "_narrow_klass._shift", "Universe");
    vm.drop("ThreadsSMRSupport", "_java_thread_list");
    vm.drop("ThreadsList", "_length"), vm.drop("ThreadsList", "_threads");
    vm.global("Threads", "_thread_list", thread);
    vm.field("JavaThread", "_next", kNext);
    vm.types["Threads"] = 1;
  }
  // JDK 8's: as 11's, with G1OffsetTableContigSpace for G1ContiguousSpace,
  // no region type (nor its tags), and the flags as Flag.
  void as_jdk8() {
    as_jdk11();
    vm.types["G1OffsetTableContigSpace"] = vm.types["G1ContiguousSpace"];
    vm.types.erase("G1ContiguousSpace");
    vm.supers["HeapRegion"] = "G1OffsetTableContigSpace";
    vm.supers.erase("G1ContiguousSpace");
    vm.supers["G1OffsetTableContigSpace"] = "CompactibleSpace";
    vm.move("G1ContiguousSpace", "_top", "G1OffsetTableContigSpace");
    vm.drop("HeapRegion", "_type"), vm.drop("HeapRegionType", "_tag");
    vm.ints.clear();
    for (const char* f : {"flags", "numFlags", "_addr", "_name"}) vm.move("JVMFlag", f, "Flag");
    vm.types["Flag"] = vm.types["JVMFlag"];
    vm.types.erase("JVMFlag");
  }
  // The linked list of as_jdk11() made longer: n more threads after the
  // first, the last pointing back at `loop_to` (0: none).
  std::vector<uint64_t> chain_threads(size_t n, size_t loop_to_index = SIZE_MAX) {
    std::vector<uint64_t> t{thread};
    for (size_t i = 0; i < n; ++i) t.push_back(vm.a.alloc(512));
    for (size_t i = 0; i + 1 < t.size(); ++i) Arena::put(t[i] + kNext, t[i + 1]);
    Arena::put<uint64_t>(t.back() + kNext, loop_to_index < t.size() ? t[loop_to_index] : 0);
    return t;
  }
  struct Resolved {
    std::optional<std::string> error;  // from any step
    JavaHeapLayout L;
    uint64_t heap = 0;
    uint64_t syscalls = 0;
  };
  // A Serial heap (kSerial) or a Parallel one (kParallel) of the given
  // spaces (FakeG1 region records, bottom/end/top at 0/8/16), described as
  // JDK 8 describes it (jdk8: GenCollectedHeap::_gens, ImmutableSpace's
  // bounds) or as later JDKs do (SerialHeap < GenCollectedHeap::_young_gen,
  // MutableSpace's own bounds). Static generation pointers for Parallel.
  void as_generational(HeapKind kind, bool jdk8, uint64_t eden, uint64_t from, uint64_t to, uint64_t old) {
    const uint64_t young = vm.a.alloc(256), tenured = vm.a.alloc(256);
    if (kind == HeapKind::kSerial) {
      vm.types.insert({{"GenCollectedHeap", 512}, {"DefNewGeneration", 256}, {"TenuredGeneration", 256},
                       {"ContiguousSpace", FakeG1::kRegionBytes}, {"Space", 24}});
      vm.supers.insert({{"ContiguousSpace", "Space"}});
      vm.field("Space", "_bottom", 0), vm.field("Space", "_end", 8), vm.field("ContiguousSpace", "_top", 16);
      if (jdk8) {
        vm.field("GenCollectedHeap", "_gens", 128), vm.field("GenCollectedHeap", "_n_gens", 124);
        Arena::put<int32_t>(heap + 124, 2), Arena::put(heap + 128, young), Arena::put(heap + 136, tenured);
        vm.types["OneContigSpaceCardGeneration"] = 256;
        vm.supers["TenuredGeneration"] = "OneContigSpaceCardGeneration";
        vm.field("OneContigSpaceCardGeneration", "_the_space", 40);
      } else {
        vm.types["SerialHeap"] = 512;
        vm.supers["SerialHeap"] = "GenCollectedHeap";
        vm.field("GenCollectedHeap", "_young_gen", 96), vm.field("GenCollectedHeap", "_old_gen", 104);
        Arena::put(heap + 96, young), Arena::put(heap + 104, tenured);
        vm.field("TenuredGeneration", "_the_space", 40);
      }
      vm.field("DefNewGeneration", "_eden_space", 8), vm.field("DefNewGeneration", "_from_space", 16);
      vm.field("DefNewGeneration", "_to_space", 24);
      Arena::put(young + 8, eden), Arena::put(young + 16, from), Arena::put(young + 24, to);
      Arena::put(tenured + 40, old);
    } else {
      vm.types.insert({{"ParallelScavengeHeap", 512}, {"PSYoungGen", 256}, {"PSOldGen", 256},
                       {"MutableSpace", FakeG1::kRegionBytes}});
      if (jdk8) {
        vm.types["ImmutableSpace"] = 16;
        vm.supers["MutableSpace"] = "ImmutableSpace";
        vm.field("ImmutableSpace", "_bottom", 0), vm.field("ImmutableSpace", "_end", 8);
      } else {
        vm.field("MutableSpace", "_bottom", 0), vm.field("MutableSpace", "_end", 8);
      }
      vm.field("MutableSpace", "_top", 16);
      vm.global("ParallelScavengeHeap", "_young_gen", young);
      vm.global("ParallelScavengeHeap", "_old_gen", tenured);
      vm.field("PSYoungGen", "_eden_space", 32), vm.field("PSYoungGen", "_from_space", 40);
      vm.field("PSYoungGen", "_to_space", 48), vm.field("PSOldGen", "_object_space", 160);
      Arena::put(young + 32, eden), Arena::put(young + 40, from), Arena::put(young + 48, to);
      Arena::put(tenured + 160, old);
    }
  }
  Resolved resolve(HeapKind kind = HeapKind::kG1) {
    g.table();
    Arena::put(heap + kHrm + kRegions, g.L.region_table), Arena::put(heap + kHrm + kRegions + 8, g.L.region_count);
    vm.build();
    RemoteMemory mem(getpid());
    auto c = cache_of_self(mem);
    Resolved r;
    std::string err;
    auto hv = HotSpotVm::read(c, vm.syms, no_deadline(), err);
    auto fl = hv ? read_jvm_flags(c, *hv, {"UseG1GC", "UseCompressedClassPointers", "ObjectAlignmentInBytes"},
                                  no_deadline(), err)
                 : std::nullopt;
    if (!fl) {
      r.error = err;
      return r;
    }
    r.error = kind == HeapKind::kG1 ? resolve_g1_layout(c, *hv, *fl, r.L, r.heap)
                                    : resolve_generational_layout(c, *hv, *fl, kind, r.L, r.heap);
    if (!r.error) {
      auto holes = read_tlab_holes(c, *hv, no_deadline(), err);
      if (holes) r.L.holes = std::move(*holes);
      else r.error = err;
    }
    r.syscalls = mem.syscalls();
    return r;
  }

  FakeG1 g;
  FakeVm vm;
  FakeFlags flags;
  uint64_t heap = 0, grain = 0, threads = 0, thread = 0;
};

}  // namespace

// The fake heap walked with a resolved layout: complete, its markers all
// found, nothing left unparsed.
void expect_walks_whole(FakeJvm& j, const decltype(FakeJvm().resolve().L)& layout, uint64_t markers) {
  j.g.L = layout;
  auto w = j.g.walk();
  ASSERT_EQ(w.status, SnapshotStatus::kComplete) << w.reason;
  EXPECT_EQ(classes(w)["Marker"].first, markers);
  EXPECT_EQ(w.unparsed_bytes, 0u);
}

TEST(G1LayoutResolution, ResolvesAConsistentLayoutAndWalksWithIt) {
  FakeJvm j;
  const uint32_t marker = j.g.klass("Marker", 24);
  const uint64_t r1 = j.g.region(2);
  for (int i = 0; i < 10; ++i) j.g.obj(r1, marker, 24);
  const uint64_t tail = j.g.top(r1);
  std::memset(reinterpret_cast<void*>(tail), 0xAB, 4096);
  j.g.set_top(r1, tail + 4096);
  j.set_tlab(tail, tail + 4096 - 16);  // the reserve (2 words) past _end is part of the hole
  for (int i = 0; i < 5; ++i) j.g.obj(r1, marker, 24);
  auto r = j.resolve();
  ASSERT_FALSE(r.error) << *r.error;
  EXPECT_EQ(r.heap, j.heap);
  EXPECT_EQ(r.L.region_table, j.g.L.region_table);
  EXPECT_EQ(r.L.region_count, j.g.L.region_count);
  EXPECT_EQ(r.L.grain_bytes, FakeG1::kGrain);
  EXPECT_EQ(r.L.region_tag, 24u);
  EXPECT_EQ(r.L.klass_name, 24u);
  EXPECT_EQ(r.L.symbol_body, 6u);
  EXPECT_TRUE(r.L.compressed_klass);
  EXPECT_FALSE(r.L.compact_headers);
  EXPECT_EQ(r.L.narrow_klass_base, j.g.klass_area());
  EXPECT_EQ(r.L.object_alignment, 8u);
  EXPECT_EQ(r.L.mirror_size_offset, 16);
  EXPECT_EQ(r.L.holes, (std::vector<std::pair<uint64_t, uint64_t>>{{tail, tail + 4096}}));
  expect_walks_whole(j, r.L, 15);
}

// Every offset the target gives is checked, once, against the size of the
// struct it indexes (and every size against a cap); the snapshot fails
// naming the field instead of using it.
TEST(G1LayoutResolution, OffsetsOutsideTheirTypeFailWithTheFieldNamed) {
  const std::tuple<const char*, const char*, uint64_t> offsets[] = {
      {"Klass", "_name", FakeG1::kKlassBytes - 4},  // 8 bytes read there
      {"Klass", "_layout_helper", FakeG1::kKlassBytes - 2},
      {"HeapRegion", "_bottom", 4000},
      {"HeapRegion", "_end", FakeG1::kRegionBytes - 4},
      {"HeapRegion", "_top", 1ull << 40},
      {"HeapRegion", "_type", FakeG1::kRegionBytes - 2},  // HeapRegionType is 4 bytes
      {"HeapRegionType", "_tag", 2},
      {"Symbol", "_length", 7},
      {"Symbol", "_body", 8},
      {"G1CollectedHeap", "_hrm", 1000},  // HeapRegionManager is 128 bytes
      {"HeapRegionManager", "_regions", 100},
      {"G1HeapRegionTable", "_length", 44},
      {"ThreadLocalAllocBuffer", "_top", 96},
      {"Thread", "_tlab", 500},
      {"ThreadsList", "_length", ~uint64_t{0} - 1},
  };
  for (auto [type, field, offset] : offsets) {
    FakeJvm j;
    j.vm.find(type, field).offset = offset;
    auto r = j.resolve();
    ASSERT_TRUE(r.error) << type << "::" << field << " at " << offset;
    EXPECT_NE(r.error->find(std::string(type) + "::" + field), std::string::npos) << *r.error;
  }
  const std::tuple<const char*, uint64_t, const char*> sizes[] = {
      {"Klass", 1ull << 30, "implausible size"},
      {"HeapRegion", 0, "implausible size"},
      {"G1CollectedHeap", ~uint64_t{0}, "implausible size"},
  };
  for (auto [type, size, what] : sizes) {
    FakeJvm j;
    j.vm.types[type] = size;
    auto r = j.resolve();
    ASSERT_TRUE(r.error) << type << " of " << size;
    EXPECT_NE(r.error->find(what), std::string::npos) << *r.error;
    EXPECT_NE(r.error->find(type), std::string::npos) << *r.error;
  }
  {
    FakeJvm j;
    j.vm.types.erase("Symbol");
    auto r = j.resolve();
    ASSERT_TRUE(r.error);
    EXPECT_NE(r.error->find("no type Symbol"), std::string::npos) << *r.error;
  }
  {
    FakeJvm j;
    Arena::put<uint64_t>(j.grain, 3 << 20);  // not a power of two
    auto r = j.resolve();
    ASSERT_TRUE(r.error);
    EXPECT_NE(r.error->find("GrainBytes"), std::string::npos) << *r.error;
  }
}

// A thread list of 100,000 threads that cannot be read: the TLAB scan stops
// after a few failed reads.
TEST(G1LayoutResolution, UnreadableThreadsEndTheTlabScan) {
  FakeJvm j;
  const uint64_t n = 100000;
  const uint64_t list = j.vm.find("ThreadsSMRSupport", "_java_thread_list").address;
  const uint64_t threads = j.vm.a.alloc(8 * n);
  for (uint64_t i = 0; i < n; ++i) Arena::put<uint64_t>(threads + 8 * i, 0x1000 + 64 * i);
  uint64_t l = 0;
  std::memcpy(&l, reinterpret_cast<void*>(list), 8);
  Arena::put<uint32_t>(l + 8, n), Arena::put(l + 16, threads);
  auto r = j.resolve();
  ASSERT_FALSE(r.error) << *r.error;
  EXPECT_TRUE(r.L.holes.empty());
  EXPECT_LT(r.syscalls, 1000u);
}

// JDK 11 describes HeapRegion's bottom, end and top on its base classes, the
// narrow klass under Universe and the threads as a linked list: the same
// layout resolves, and the walk with it skips the TLAB tail.
TEST(G1LayoutResolution, Jdk11sDescriptionResolvesTheSameLayout) {
  FakeJvm j;
  j.as_jdk11();
  const uint32_t marker = j.g.klass("Marker", 24);
  const uint64_t r1 = j.g.region(2);
  for (int i = 0; i < 10; ++i) j.g.obj(r1, marker, 24);
  const uint64_t tail = j.g.top(r1);
  std::memset(reinterpret_cast<void*>(tail), 0xAB, 4096);
  j.g.set_top(r1, tail + 4096);
  j.set_tlab(tail, tail + 4096 - 16);
  for (int i = 0; i < 5; ++i) j.g.obj(r1, marker, 24);
  auto r = j.resolve();
  ASSERT_FALSE(r.error) << *r.error;
  EXPECT_EQ(r.L.region_bottom, 0u);
  EXPECT_EQ(r.L.region_end, 8u);
  EXPECT_EQ(r.L.region_top, 16u);
  EXPECT_TRUE(r.L.region_types);
  EXPECT_EQ(r.L.narrow_klass_base, j.g.klass_area());
  EXPECT_EQ(r.L.holes, (std::vector<std::pair<uint64_t, uint64_t>>{{tail, tail + 4096}}));
  expect_walks_whole(j, r.L, 15);
}

// A base class's field is checked against the base class: Space::_end 44
// bytes into a 48-byte Space fits HeapRegion but not Space.
TEST(G1LayoutResolution, BaseClassFieldsAreCheckedAgainstTheBaseClass) {
  FakeJvm j;
  j.as_jdk11();
  j.vm.find("Space", "_end").offset = 44;
  auto r = j.resolve();
  ASSERT_TRUE(r.error);
  EXPECT_NE(r.error->find("HeapRegion::_end (declared in Space)"), std::string::npos) << *r.error;
}

// JDK 8 describes no region type, its flags as Flag, G1OffsetTableContigSpace.
TEST(G1LayoutResolution, Jdk8sDescriptionResolvesWithoutRegionTypes) {
  FakeJvm j;
  j.as_jdk8();
  const uint32_t marker = j.g.klass("Marker", 24);
  const uint64_t r1 = j.g.region(0);  // no tag: 0 is what the record holds
  for (int i = 0; i < 10; ++i) j.g.obj(r1, marker, 24);
  auto r = j.resolve();
  ASSERT_FALSE(r.error) << *r.error;
  EXPECT_FALSE(r.L.region_types);
  EXPECT_EQ(r.L.region_top, 16u);
  EXPECT_TRUE(r.L.compressed_klass);  // from Flag::flags
  expect_walks_whole(j, r.L, 10);
}

// The linked list of threads comes from the target: one that loops back, or
// runs on past any JVM's thread count, ends (at the thread seen twice, or at
// the cap) instead of looping; every thread before is read.
TEST(G1LayoutResolution, ALinkedThreadListThatLoopsOrNeverEndsIsCut) {
  {
    FakeJvm j;
    j.as_jdk11();
    auto t = j.chain_threads(5, 2);  // the last points back at the third
    for (size_t i = 0; i < t.size(); ++i)
      Arena::put(t[i] + FakeJvm::kTlab + 8, 0x100000 * (i + 1)), Arena::put(t[i] + FakeJvm::kTlab + 16, 0x100000 * (i + 1) + 64);
    auto r = j.resolve();
    ASSERT_FALSE(r.error) << *r.error;
    EXPECT_EQ(r.L.holes.size(), t.size());
  }
  {
    FakeJvm j;
    j.as_jdk11();
    auto t = j.chain_threads(0, 0);  // the only thread is its own next
    auto r = j.resolve();
    ASSERT_FALSE(r.error) << *r.error;
  }
  {
    // More threads than any JVM has: the list is followed for 100,000, no further.
    FakeJvm j;
    j.as_jdk11();
    const size_t n = 100010;
    const uint64_t block = j.vm.a.alloc(n * 512);
    Arena::put(j.thread + FakeJvm::kNext, block);
    j.set_tlab(0x800, 0x808);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t t = block + i * 512;
      Arena::put<uint64_t>(t + FakeJvm::kNext, i + 1 < n ? t + 512 : 0);
      Arena::put<uint64_t>(t + FakeJvm::kTlab + 8, 0x1000 + 16 * i), Arena::put<uint64_t>(t + FakeJvm::kTlab + 16, 0x1008 + 16 * i);
    }
    auto r = j.resolve();
    ASSERT_FALSE(r.error) << *r.error;
    EXPECT_EQ(r.L.holes.size(), 100000u);
  }
  {
    FakeJvm j;
    j.as_jdk11();
    j.vm.find("JavaThread", "_next").offset = 510;  // 8 bytes at 510 of 512
    auto r = j.resolve();
    ASSERT_TRUE(r.error);
    EXPECT_NE(r.error->find("JavaThread::_next"), std::string::npos) << *r.error;
  }
}

// Serial and Parallel heaps as JDK 8 and later JDKs describe them resolve
// to their four spaces (through base classes and static fields), and the
// walk with that layout reads every object.
TEST(GenerationalLayoutResolution, SerialAndParallelResolveToTheirSpacesOnEveryShape) {
  for (HeapKind kind : {HeapKind::kSerial, HeapKind::kParallel}) {
    for (bool jdk8 : {true, false}) {
      SCOPED_TRACE(std::string(kind == HeapKind::kSerial ? "serial" : "parallel") + (jdk8 ? " jdk8" : " jdk9+"));
      FakeJvm j;
      const uint32_t marker = j.g.klass("Marker", 24);
      const uint64_t eden = j.g.region(2), from = j.g.region(2), to = j.g.region(2), old = j.g.region(2);
      for (int i = 0; i < 40; ++i) j.g.obj(i % 2 ? eden : old, marker, 24);
      j.g.obj(from, marker, 24);
      j.as_generational(kind, jdk8, eden, from, to, old);
      auto r = j.resolve(kind);
      ASSERT_FALSE(r.error) << *r.error;
      EXPECT_EQ(r.L.kind, kind);
      ASSERT_EQ(r.L.spaces.size(), 4u);
      EXPECT_EQ(r.L.spaces[0].addr, eden);
      EXPECT_EQ(r.L.spaces[3].addr, old);
      EXPECT_EQ(r.L.space_top, 16u);
      expect_walks_whole(j, r.L, 41);
    }
  }
}

// What the resolution follows comes from the target: a generation count
// that is not 2, a null generation or space pointer, a field outside its
// type are errors naming the field.
TEST(GenerationalLayoutResolution, HostileDescriptionsFailNamingTheField) {
  auto resolve_spoiled = [](HeapKind kind, bool jdk8, const std::function<void(FakeJvm&)>& spoil) {
    FakeJvm j;
    const uint64_t eden = j.g.region(2), from = j.g.region(2), to = j.g.region(2), old = j.g.region(2);
    j.as_generational(kind, jdk8, eden, from, to, old);
    spoil(j);
    return j.resolve(kind).error.value_or("");
  };
  EXPECT_NE(resolve_spoiled(HeapKind::kSerial, true, [](FakeJvm& j) { Arena::put<int32_t>(j.heap + 124, 3); })
                .find("GenCollectedHeap::_n_gens"),
            std::string::npos);
  EXPECT_NE(resolve_spoiled(HeapKind::kSerial, false, [](FakeJvm& j) { Arena::put<uint64_t>(j.heap + 96, 0); })
                .find("SerialHeap::_young_gen"),
            std::string::npos);
  auto unaligned_old_gen = [](FakeJvm& j) {
    Arena::put<uint64_t>(j.vm.find("ParallelScavengeHeap", "_old_gen").address, 0x1003);
  };
  EXPECT_NE(resolve_spoiled(HeapKind::kParallel, false, unaligned_old_gen).find("ParallelScavengeHeap::_old_gen"),
            std::string::npos);
  EXPECT_NE(resolve_spoiled(HeapKind::kParallel, false,
                            [](FakeJvm& j) { j.vm.find("PSYoungGen", "_eden_space").offset = 300; })
                .find("_eden_space"),
            std::string::npos);
  EXPECT_NE(resolve_spoiled(HeapKind::kSerial, false, [](FakeJvm& j) { j.vm.drop("DefNewGeneration", "_to_space"); })
                .find("_to_space"),
            std::string::npos);
}
