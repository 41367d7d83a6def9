// The Java collector's decoders on byte images built in this process's own
// memory (read back through process_vm_readv on ourselves): HotSpot's
// VMStructs tables (well-formed, corrupted, unterminated) and G1 heaps
// (regions, humongous objects, TLAB tails, garbage, sampling, deadline).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/chunk_cache.h"
#include "java/g1_heap.h"
#include "java/hotspot_vmstructs.h"

using namespace oomsnap;

namespace {

// Page-aligned scratch memory that lives as long as the test.
class Arena {
 public:
  ~Arena() {
    for (auto& [p, n] : blocks_) munmap(p, n);
  }
  uint64_t alloc(size_t n, size_t align = 8) {
    n = (n + align + 4095) & ~size_t{4095};
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    blocks_.emplace_back(p, n);
    return (reinterpret_cast<uint64_t>(p) + align - 1) & ~uint64_t(align - 1);
  }
  uint64_t str(const std::string& s) {
    uint64_t a = alloc(s.size() + 1);
    std::memcpy(reinterpret_cast<void*>(a), s.c_str(), s.size() + 1);
    return a;
  }
  template <typename T>
  static void put(uint64_t addr, T v) {
    std::memcpy(reinterpret_cast<void*>(addr), &v, sizeof v);
  }

 private:
  std::vector<std::pair<void*, size_t>> blocks_;
};

ChunkCache cache_of_self(RemoteMemory& mem) { return ChunkCache(mem, read_maps(getpid()), 4096, 1 << 20); }

// --- VMStructs tables -------------------------------------------------------

struct FakeTables {
  Arena a;
  HotSpotSymbols syms;
  uint64_t structs_array = 0;
  // The real layouts (JDK 17-25): struct entry 48 bytes, type entry 40, constants 16.
  FakeTables(int nfields, int ntypes) {
    auto var = [&](uint64_t v) {
      uint64_t p = a.alloc(8);
      Arena::put(p, v);
      return p;
    };
    syms.struct_type_name = var(0), syms.struct_field_name = var(8), syms.struct_type_string = var(16);
    syms.struct_is_static = var(24), syms.struct_offset = var(32), syms.struct_address = var(40);
    syms.struct_stride = var(48);
    syms.type_type_name = var(0), syms.type_size = var(32), syms.type_stride = var(40);
    syms.int_name = var(0), syms.int_value = var(8), syms.int_stride = var(16);
    syms.long_name = var(0), syms.long_value = var(8), syms.long_stride = var(16);
    structs_array = a.alloc(48 * static_cast<size_t>(nfields + 1));
    for (int i = 0; i < nfields; ++i) {
      const uint64_t e = structs_array + 48 * static_cast<uint64_t>(i);
      Arena::put(e, a.str("Type" + std::to_string(i)));
      Arena::put(e + 8, a.str("_field"));
      Arena::put(e + 16, a.str("int"));
      Arena::put<int32_t>(e + 24, i % 2);
      Arena::put<uint64_t>(e + 32, static_cast<uint64_t>(i) * 8);
      Arena::put<uint64_t>(e + 40, 0x1000 + static_cast<uint64_t>(i));
    }
    const uint64_t types = a.alloc(40 * static_cast<size_t>(ntypes + 1));
    for (int i = 0; i < ntypes; ++i) {
      Arena::put(types + 40 * static_cast<uint64_t>(i), a.str("T" + std::to_string(i)));
      Arena::put<uint64_t>(types + 40 * static_cast<uint64_t>(i) + 32, static_cast<uint64_t>(i) + 1);
    }
    const uint64_t ints = a.alloc(32), longs = a.alloc(32);
    Arena::put(ints, a.str("Klass::_lh_array_tag_shift"));
    Arena::put<int32_t>(ints + 8, 30);
    Arena::put(longs, a.str("markWord::klass_shift"));
    Arena::put<uint64_t>(longs + 8, 42);
    syms.structs = var(structs_array);
    syms.types = var(types);
    syms.int_constants = var(ints);
    syms.long_constants = var(longs);
  }
};

}  // namespace

TEST(HotSpotVmStructs, ReadsTheTables) {
  FakeTables t(40, 30);
  RemoteMemory mem(getpid());
  auto c = cache_of_self(mem);
  std::string err;
  auto vm = HotSpotVm::read(c, t.syms, err);
  ASSERT_TRUE(vm) << err;
  EXPECT_EQ(vm->field_count(), 40u);
  const VmField* f = vm->field("Type3", "_field");
  ASSERT_TRUE(f);
  EXPECT_TRUE(f->is_static);
  EXPECT_EQ(f->address, 0x1003u);
  EXPECT_EQ(f->type, "int");
  EXPECT_FALSE(vm->field("Type2", "_field")->is_static);
  EXPECT_EQ(vm->field("Type2", "_field")->offset, 16u);
  EXPECT_EQ(vm->field_any({"Nope", "Type5"}, "_field"), vm->field("Type5", "_field"));
  EXPECT_EQ(vm->type_size("T4").value_or(0), 5u);
  EXPECT_EQ(vm->int_constant("Klass::_lh_array_tag_shift").value_or(0), 30);
  EXPECT_EQ(vm->long_constant("markWord::klass_shift").value_or(0), 42u);
  EXPECT_FALSE(vm->field("Type1", "_other"));
}

TEST(HotSpotVmStructs, CorruptTablesAreErrors) {
  RemoteMemory mem(getpid());
  std::string err;
  {
    FakeTables t(40, 30);
    Arena::put<uint64_t>(t.syms.struct_stride, 1 << 20);  // absurd stride
    auto c = cache_of_self(mem);
    EXPECT_FALSE(HotSpotVm::read(c, t.syms, err));
    EXPECT_NE(err.find("implausible"), std::string::npos) << err;
  }
  {
    FakeTables t(40, 30);
    Arena::put<uint64_t>(t.syms.structs, 0x10);  // table pointer into nowhere
    auto c = cache_of_self(mem);
    EXPECT_FALSE(HotSpotVm::read(c, t.syms, err));
    EXPECT_NE(err.find("gHotSpotVMStructs"), std::string::npos) << err;
  }
  {
    FakeTables t(40, 30);
    Arena::put<uint64_t>(t.syms.struct_type_name, 44);  // name field past the stride
    auto c = cache_of_self(mem);
    EXPECT_FALSE(HotSpotVm::read(c, t.syms, err));
    EXPECT_NE(err.find("stride"), std::string::npos) << err;
  }
  {
    // No terminating entry: a table of repeated records stops at the cap.
    FakeTables t(4, 30);
    Arena a;
    const uint64_t big = a.alloc(48 * (HotSpotVm::kMaxEntries + 8));
    const uint64_t name = a.str("X");
    for (size_t i = 0; i < HotSpotVm::kMaxEntries + 8; ++i) Arena::put(big + 48 * i, name), Arena::put(big + 48 * i + 8, name);
    Arena::put(t.syms.structs, big);
    auto c = cache_of_self(mem);
    EXPECT_FALSE(HotSpotVm::read(c, t.syms, err));
    EXPECT_NE(err.find("no end"), std::string::npos) << err;
  }
  {
    FakeTables t(3, 3);  // too few entries to be HotSpot's
    auto c = cache_of_self(mem);
    EXPECT_FALSE(HotSpotVm::read(c, t.syms, err));
    EXPECT_NE(err.find("nearly empty"), std::string::npos) << err;
  }
}

TEST(JavaNames, AsJavaPrintsThem) {
  EXPECT_EQ(java_class_name("java/lang/String"), "java.lang.String");
  EXPECT_EQ(java_class_name("[B"), "byte[]");
  EXPECT_EQ(java_class_name("[[I"), "int[][]");
  EXPECT_EQ(java_class_name("[Ljava/lang/Object;"), "java.lang.Object[]");
  EXPECT_EQ(java_class_name("[[LHeapFixture$Marker;"), "HeapFixture$Marker[][]");
  EXPECT_EQ(java_class_name("HeapFixture$Marker"), "HeapFixture$Marker");
  EXPECT_EQ(java_class_name("[Q"), "[Q");  // unknown descriptor kept as is
  EXPECT_EQ(java_class_name("[L;"), "[L;");
}

// --- G1 heap ----------------------------------------------------------------

namespace {

// A G1 heap image with compressed class pointers (narrow klass = offset from
// a klass area), legacy 16-byte headers and 1 MiB regions.
class FakeG1 {
 public:
  static constexpr uint64_t kGrain = 1 << 20;
  FakeG1() {
    klass_area_ = a_.alloc(1 << 16, 8);
    klass_next_ = klass_area_ + 8;  // narrow klass 0 means null
    L.narrow_klass_base = klass_area_;
    L.narrow_klass_shift = 0;
    L.compressed_klass = true;
    L.array_length_offset = 12;
    L.grain_bytes = kGrain;
    L.region_bottom = 0, L.region_end = 8, L.region_top = 16, L.region_tag = 24;
    L.tag_free = 0, L.tag_starts_humongous = 4, L.tag_continues_humongous = 5;
    L.mirror_size_offset = 16;
  }
  // An instance klass of `size` bytes, or an array klass (header 16, log2 element size).
  uint32_t klass(const std::string& name, int32_t lh) {
    const uint64_t k = klass_next_;
    klass_next_ += 64;
    const uint64_t sym = a_.alloc(8 + name.size());
    Arena::put<uint16_t>(sym + 4, static_cast<uint16_t>(name.size()));
    std::memcpy(reinterpret_cast<void*>(sym + 6), name.data(), name.size());
    Arena::put<int32_t>(k + 8, lh);
    Arena::put<uint64_t>(k + 24, sym);
    return static_cast<uint32_t>(k - klass_area_);
  }
  static int32_t array_lh(bool objects, int log2) {
    return static_cast<int32_t>((objects ? 0x80000000u : 0xC0000000u) | (16u << 16) | static_cast<uint32_t>(log2));
  }
  // A region with the given tag; objects are appended with obj()/array().
  uint64_t region(int64_t tag) {
    const uint64_t bottom = a_.alloc(kGrain, kGrain);
    const uint64_t hr = a_.alloc(64);
    Arena::put(hr, bottom), Arena::put(hr + 8, bottom + kGrain), Arena::put(hr + 16, bottom);
    Arena::put<int32_t>(hr + 24, static_cast<int32_t>(tag));
    regions_.push_back(hr);
    return hr;
  }
  static uint64_t top(uint64_t hr) {
    uint64_t t;
    std::memcpy(&t, reinterpret_cast<void*>(hr + 16), 8);
    return t;
  }
  uint64_t obj(uint64_t hr, uint32_t nk, uint64_t size) {
    const uint64_t at = top(hr);
    Arena::put<uint64_t>(at, 1);  // unlocked mark
    Arena::put<uint32_t>(at + 8, nk);
    Arena::put(hr + 16, at + size);
    return at;
  }
  uint64_t array(uint64_t hr, uint32_t nk, uint32_t len, int log2) {
    const uint64_t size = (16 + (uint64_t{len} << log2) + 7) & ~uint64_t{7};
    const uint64_t at = obj(hr, nk, size);
    Arena::put<uint32_t>(at + 12, len);
    return at;
  }
  G1WalkResult walk(uint64_t max_walk = 1ull << 30, int budget_ms = 5000) {
    const uint64_t table = a_.alloc(8 * (regions_.size() + 2));
    for (size_t i = 0; i < regions_.size(); ++i) Arena::put(table + 8 * (i + 1), regions_[i]);  // slot 0 uncommitted
    L.region_table = table;
    L.region_count = regions_.size() + 2;
    RemoteMemory mem(getpid());
    ChunkCache c(mem, read_maps(getpid()), 4096, 1 << 20);
    G1Limits lim;
    lim.max_walk_bytes = max_walk;
    Deadline d{std::chrono::milliseconds(budget_ms)};
    return walk_g1_heap(c, L, lim, d);
  }
  G1Layout L;
  Arena a_;

 private:
  uint64_t klass_area_ = 0, klass_next_ = 0;
  std::vector<uint64_t> regions_;
};

std::map<std::string, std::pair<uint64_t, uint64_t>> classes(const G1WalkResult& r) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> m;
  for (const auto& c : r.classes) m[c.name] = {c.objects, c.bytes};
  return m;
}

}  // namespace

TEST(G1Heap, CountsObjectsArraysAndHumongous) {
  FakeG1 h;
  const uint32_t marker = h.klass("Fixture$Marker", 24), bytes = h.klass("[B", FakeG1::array_lh(false, 0)),
                 objs = h.klass("[Ljava/lang/Object;", FakeG1::array_lh(true, 2));
  const uint64_t eden = h.region(2), old = h.region(8);
  for (int i = 0; i < 1000; ++i) h.obj(i % 2 ? eden : old, marker, 24);
  for (uint32_t len = 0; len < 50; ++len) h.array(old, bytes, len, 0), h.array(eden, objs, len, 2);
  const uint64_t hum = h.region(4);
  h.region(5);                              // continues humongous: skipped
  h.array(hum, bytes, 1500000, 0);          // spans into the next region
  Arena::put(hum + 16, hum == 0 ? 0 : FakeG1::top(hum) - 1500000 + (FakeG1::kGrain - 16));  // top at region end
  h.region(0);                              // free: skipped
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  auto m = classes(r);
  EXPECT_EQ(m["Fixture$Marker"], std::make_pair(uint64_t{1000}, uint64_t{24000}));
  uint64_t byte_bytes = (16 + 1500000 + 7) & ~7ull, obj_bytes = 0;
  for (uint64_t len = 0; len < 50; ++len) byte_bytes += (16 + len + 7) & ~7ull, obj_bytes += (16 + len * 4 + 7) & ~7ull;
  EXPECT_EQ(m["byte[]"], std::make_pair(uint64_t{51}, byte_bytes));
  EXPECT_EQ(m["java.lang.Object[]"], std::make_pair(uint64_t{50}, obj_bytes));
  EXPECT_EQ(r.unparsed_bytes, 0u);
  EXPECT_DOUBLE_EQ(r.coverage, 1.0);
}

// Unformatted memory inside a region: a live TLAB's tail is skipped as a
// hole; garbage elsewhere is skipped by resynchronising on the next object
// of a known class, and reported as unparsed.
TEST(G1Heap, TlabTailsAndGarbageAreSkipped) {
  FakeG1 h;
  const uint32_t marker = h.klass("Marker", 24), other = h.klass("Other", 32);
  const uint64_t r1 = h.region(2);
  for (int i = 0; i < 10; ++i) h.obj(r1, marker, 24);
  const uint64_t hole = FakeG1::top(r1);
  std::memset(reinterpret_cast<void*>(hole), 0xAB, 4096);  // unformatted TLAB tail
  Arena::put(r1 + 16, hole + 4096);
  h.L.holes = {{hole, hole + 4096}};
  for (int i = 0; i < 10; ++i) h.obj(r1, other, 32);
  const uint64_t junk = FakeG1::top(r1);
  std::memset(reinterpret_cast<void*>(junk), 0, 200);  // an object being published: zero klass
  Arena::put(r1 + 16, junk + 200);
  for (int i = 0; i < 10; ++i) h.obj(r1, marker, 24);
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  auto m = classes(r);
  EXPECT_EQ(m["Marker"].first, 20u);
  EXPECT_EQ(m["Other"].first, 10u);
  EXPECT_EQ(r.unparsed_bytes, 200u);
  EXPECT_LT(r.coverage, 1.0);
  EXPECT_GT(r.coverage, 0.9);
}

TEST(G1Heap, CorruptRegionEntriesAreSkippedNotFatal) {
  FakeG1 h;
  const uint32_t marker = h.klass("Marker", 24);
  const uint64_t good = h.region(2);
  for (int i = 0; i < 5; ++i) h.obj(good, marker, 24);
  const uint64_t bad = h.region(2);
  Arena::put<uint64_t>(bad + 16, 1);  // top below bottom
  const uint64_t wild = h.region(8);
  h.obj(wild, 0x7fffff00, 24);        // a klass that does not exist
  h.obj(wild, marker, 24);
  auto r = h.walk();
  EXPECT_EQ(classes(r)["Marker"].first, 6u) << r.reason;
  EXPECT_GT(r.unparsed_bytes, 0u);
}

TEST(G1Heap, SampledAboveTheBudgetAndDeadline) {
  FakeG1 h;
  const uint32_t marker = h.klass("Marker", 64);
  for (int i = 0; i < 8; ++i) {
    const uint64_t r = h.region(8);
    for (int j = 0; j < 1000; ++j) h.obj(r, marker, 64);
  }
  auto r = h.walk(2 * 64000);  // budget for two of the eight regions
  EXPECT_EQ(r.status, SnapshotStatus::kPartial);
  EXPECT_EQ(r.sample_stride, 4u);
  EXPECT_NE(r.reason.find("sampled walk: 1 of every 4 64 KiB windows"), std::string::npos) << r.reason;
  EXPECT_EQ(classes(r)["Marker"].first, 8000u);  // 2 regions read, scaled by 4
  EXPECT_NEAR(r.coverage, 0.25, 0.01);
  r = h.walk(1ull << 30, 0);
  EXPECT_EQ(r.status, SnapshotStatus::kPartial);
  EXPECT_NE(r.reason.find("deadline"), std::string::npos) << r.reason;
}

TEST(G1Heap, ImplausibleTableFails) {
  FakeG1 h;
  auto r = h.walk();  // no regions in use
  EXPECT_EQ(r.status, SnapshotStatus::kFailed);
  h.L.region_count = 0;
  G1Limits lim;
  RemoteMemory mem(getpid());
  ChunkCache c(mem, read_maps(getpid()));
  Deadline d{std::chrono::milliseconds(1000)};
  h.L.region_table = 0;
  r = walk_g1_heap(c, h.L, lim, d);
  EXPECT_EQ(r.status, SnapshotStatus::kFailed);
  EXPECT_NE(r.reason.find("implausible"), std::string::npos);
}
