// The JVM's performance counters (perf_data.h) on byte images laid out as
// HotSpot's perfMemory.hpp lays them out (a PerfDataPrologue, then
// PerfDataEntry records with their names and values), read in place and out
// of this process's memory through a VMStructs image; and crafted buffers
// (magic, lengths, names, offsets, counts), which end the list or are
// refused, never read past.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "java/java_memory_claims.h"
#include "java/perf_data.h"
#include "java_heap_images.h"

namespace oomsnap {
namespace {

using java_test::Arena;
using java_test::cache_of_self;
using java_test::FakeVm;

// A PerfData buffer: 32-byte prologue, then entries (20-byte header, the
// NUL-terminated name, the value 8-aligned).
class PerfImage {
 public:
  PerfImage() : b_(32, 0) {
    const uint8_t magic[4] = {0xca, 0xfe, 0xc0, 0xc0};
    std::memcpy(b_.data(), magic, 4);
    b_[4] = 1, b_[5] = 2;  // little-endian, version 2.0
    put<int32_t>(24, 32);
  }
  // A scalar long (or, with vector_length, a vector of that type).
  size_t entry(const std::string& name, int64_t value, char type = 'J', int32_t vector_length = 0) {
    const size_t at = b_.size();
    const size_t name_off = 20, data_off = (name_off + name.size() + 1 + 7) & ~size_t{7};
    const size_t len = data_off + 8;
    b_.resize(at + len, 0);
    put<int32_t>(at, static_cast<int32_t>(len)), put<int32_t>(at + 4, name_off), put<int32_t>(at + 8, vector_length);
    b_[at + 12] = static_cast<uint8_t>(type);
    put<int32_t>(at + 16, static_cast<int32_t>(data_off));
    std::memcpy(b_.data() + at + name_off, name.c_str(), name.size() + 1);
    put<int64_t>(at + data_off, value);
    put<int32_t>(28, get<int32_t>(28) + 1);
    put<int32_t>(8, static_cast<int32_t>(b_.size()));  // used
    return at;
  }
  template <typename T>
  void put(size_t off, T v) {
    std::memcpy(b_.data() + off, &v, sizeof v);
  }
  template <typename T>
  T get(size_t off) const {
    T v;
    std::memcpy(&v, b_.data() + off, sizeof v);
    return v;
  }
  std::optional<std::map<std::string, int64_t>> parse(std::string& err,
                                                      std::vector<std::string_view> wanted = {"a.b", "c.d"}) const {
    return parse_perf_data(ByteView(b_.data(), b_.size()), PerfDataLayout{}, wanted, err);
  }
  std::vector<uint8_t>& bytes() { return b_; }

 private:
  std::vector<uint8_t> b_;
};

TEST(PerfData, FindsTheWantedScalarLongs) {
  PerfImage p;
  p.entry("java.property.x", 0x41, 'B', 16);  // a string: a byte vector
  p.entry("c.d.not", 7);
  p.entry("a.b", -5);
  p.entry("c.d", 123456789012345);
  p.entry("e.f", 1);
  std::string err;
  auto m = p.parse(err);
  ASSERT_TRUE(m) << err;
  EXPECT_EQ(m->size(), 2u);
  EXPECT_EQ(m->at("a.b"), -5);
  EXPECT_EQ(m->at("c.d"), 123456789012345);
}

TEST(PerfData, AWantedNameOfAnotherTypeOrAVectorIsNotALong) {
  PerfImage p;
  p.entry("a.b", 1, 'B', 8);
  p.entry("c.d", 1, 'I');
  std::string err;
  auto m = p.parse(err);
  ASSERT_TRUE(m) << err;
  EXPECT_TRUE(m->empty());
}

TEST(PerfData, ABufferWithoutTheMagicOrItsPrologueIsRefused) {
  PerfImage p;
  p.entry("a.b", 1);
  p.bytes()[0] = 0xcb;
  std::string err;
  EXPECT_FALSE(p.parse(err));
  EXPECT_NE(err.find("magic"), std::string::npos) << err;
  const uint8_t short_buf[12] = {0xca, 0xfe, 0xc0, 0xc0};
  EXPECT_FALSE(parse_perf_data(ByteView(short_buf, sizeof short_buf), PerfDataLayout{}, {"a.b"}, err));
  EXPECT_NE(err.find("prologue"), std::string::npos) << err;
}

// Crafted entries end the list where they are, keeping what came before:
// a length of zero, negative or past the used bytes; a name past the entry
// or without its NUL; a value past the entry.
TEST(PerfData, ACraftedEntryEndsTheListThere) {
  struct Craft {
    const char* what;
    void (*apply)(PerfImage&, size_t at);
  };
  const Craft crafts[] = {
      {"zero length", [](PerfImage& p, size_t at) { p.put<int32_t>(at, 0); }},
      {"negative length", [](PerfImage& p, size_t at) { p.put<int32_t>(at, -8); }},
      {"length past used", [](PerfImage& p, size_t at) { p.put<int32_t>(at, 1 << 20); }},
      {"name past the entry", [](PerfImage& p, size_t at) { p.put<int32_t>(at + 4, 4096); }},
      {"negative name", [](PerfImage& p, size_t at) { p.put<int32_t>(at + 4, -1); }},
      {"name without NUL",
       [](PerfImage& p, size_t at) {
         const int32_t len = p.get<int32_t>(at);
         for (int32_t i = 20; i < len; ++i) p.bytes()[at + i] = 'x';
       }},
      {"value past the entry", [](PerfImage& p, size_t at) { p.put<int32_t>(at + 16, p.get<int32_t>(at) - 4); }},
      {"negative value offset", [](PerfImage& p, size_t at) { p.put<int32_t>(at + 16, -16); }},
  };
  for (const Craft& c : crafts) {
    PerfImage p;
    p.entry("a.b", 1);
    const size_t bad = p.entry("c.d", 2);
    p.entry("e.f", 3);
    c.apply(p, bad);
    std::string err;
    auto m = p.parse(err, {"a.b", "c.d", "e.f"});
    ASSERT_TRUE(m) << c.what << ": " << err;
    EXPECT_EQ(m->size(), 1u) << c.what;
    EXPECT_EQ(m->count("a.b"), 1u) << c.what;
  }
}

// Entries past the prologue's used bytes are not ones yet (the JVM appends
// while it runs): not read, even when the buffer holds them.
TEST(PerfData, EntriesPastTheUsedBytesAreNotRead) {
  PerfImage p;
  p.entry("a.b", 1);
  const int32_t used = p.get<int32_t>(8);
  p.entry("c.d", 2);
  p.put<int32_t>(8, used);
  std::string err;
  auto m = p.parse(err);
  ASSERT_TRUE(m) << err;
  EXPECT_EQ(m->size(), 1u);
}

// A count of 2^31 entries over a buffer of a few: bounded by the buffer
// (and kMaxPerfDataEntries), at once.
TEST(PerfData, AHugeEntryCountIsBoundedByTheBuffer) {
  PerfImage p;
  for (int i = 0; i < 100; ++i) p.entry("n" + std::to_string(i), i);
  p.put<int32_t>(28, INT32_MAX);
  std::string err;
  const auto t0 = std::chrono::steady_clock::now();
  auto m = p.parse(err, {"n99", "zz"});
  ASSERT_TRUE(m) << err;
  EXPECT_EQ(m->at("n99"), 99);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
}

TEST(PerfData, MetaspaceIsTheUsedAndCommittedCounters) {
  std::string err;
  auto m = metaspace_use({{"sun.gc.metaspace.used", 10}, {"sun.gc.metaspace.capacity", 30}}, err);
  ASSERT_TRUE(m) << err;
  EXPECT_EQ(m->used, 10u);
  EXPECT_EQ(m->committed, 30u);
  EXPECT_FALSE(metaspace_use({{"sun.gc.metaspace.used", 10}}, err));
  EXPECT_NE(err.find("sun.gc.metaspace.capacity"), std::string::npos) << err;
  EXPECT_FALSE(metaspace_use({{"sun.gc.metaspace.used", -1}, {"sun.gc.metaspace.capacity", 30}}, err));
  EXPECT_NE(err.find("implausible"), std::string::npos) << err;
  EXPECT_FALSE(metaspace_use({{"sun.gc.metaspace.used", 1}, {"sun.gc.metaspace.capacity", int64_t{1} << 50}}, err));
  EXPECT_FALSE(metaspace_use({{"sun.gc.metaspace.used", 40}, {"sun.gc.metaspace.capacity", 30}}, err));
  EXPECT_NE(err.find("exceeds"), std::string::npos) << err;
}

// VMStructs' PerfMemory and the two record types, as JDK 8 to 26 describe
// them, pointing at `buffer` (0: -XX:-UsePerfData).
void describe_perf_memory(FakeVm& v, uint64_t buffer, uint64_t capacity) {
  const std::pair<const char*, uint64_t> prologue[] = {
      {"magic", 0}, {"used", 8}, {"entry_offset", 24}, {"num_entries", 28}};
  for (auto [name, off] : prologue) v.field("PerfDataPrologue", name, off);
  const std::pair<const char*, uint64_t> entry[] = {
      {"entry_length", 0}, {"name_offset", 4}, {"vector_length", 8}, {"data_type", 12}, {"data_offset", 16}};
  for (auto [name, off] : entry) v.field("PerfDataEntry", name, off);
  v.types["PerfDataPrologue"] = 32, v.types["PerfDataEntry"] = 20;
  v.global("PerfMemory", "_start", buffer);
  v.global("PerfMemory", "_capacity", capacity);
}

std::optional<std::map<std::string, int64_t>> read_through_vm(FakeVm& v, std::string& err) {
  v.build();
  RemoteMemory mem(getpid());
  auto cache = cache_of_self(mem);
  auto vm = HotSpotVm::read(cache, v.syms, java_test::no_deadline(), err);
  if (!vm) return std::nullopt;
  return read_perf_counters(cache, *vm, {kMetaspaceUsedCounter, kMetaspaceCommittedCounter}, err);
}

TEST(PerfData, ReadOutOfProcessThroughVMStructs) {
  PerfImage p;
  p.entry("sun.gc.metaspace.used", 5 << 20);
  p.entry("sun.gc.metaspace.capacity", 8 << 20);
  FakeVm v = java_test::generic_vm(20, 20);  // tables of a plausible size
  const uint64_t at = v.a.alloc(p.bytes().size() + 4096);
  std::memcpy(reinterpret_cast<void*>(at), p.bytes().data(), p.bytes().size());
  describe_perf_memory(v, at, p.bytes().size() + 4096);
  std::string err;
  auto m = read_through_vm(v, err);
  ASSERT_TRUE(m) << err;
  ASSERT_EQ(m->size(), 2u);
  std::string why;
  auto use = metaspace_use(*m, why);
  ASSERT_TRUE(use) << why;
  EXPECT_EQ(use->used, 5u << 20);
  EXPECT_EQ(use->committed, 8u << 20);
}

TEST(PerfData, AJvmWithoutPerfDataSaysSo) {
  FakeVm v = java_test::generic_vm(20, 20);
  describe_perf_memory(v, 0, 0);
  std::string err;
  EXPECT_FALSE(read_through_vm(v, err));
  EXPECT_NE(err.find("-XX:-UsePerfData"), std::string::npos) << err;
}

// A capacity beyond kMaxPerfDataBytes: only that much is read (this one is
// then past the arena's readable memory: refused, not read in pieces).
TEST(PerfData, AnImplausibleCapacityIsCut) {
  PerfImage p;
  p.entry("sun.gc.metaspace.used", 1);
  FakeVm v = java_test::generic_vm(20, 20);
  const uint64_t at = v.a.alloc(p.bytes().size());
  std::memcpy(reinterpret_cast<void*>(at), p.bytes().data(), p.bytes().size());
  describe_perf_memory(v, at, uint64_t{1} << 60);
  std::string err;
  auto m = read_through_vm(v, err);
  if (m) EXPECT_LE(m->size(), 1u);
  else EXPECT_NE(err.find(std::to_string(kMaxPerfDataBytes)), std::string::npos) << err;
}

// The claims: metaspace's used bytes, then its committed rest, both runtime
// by count; none when nothing is used.
TEST(PerfData, MetaspaceIsClaimedAsRuntimeByCount) {
  JavaMemoryAccount a;
  a.metaspace = MetaspaceUse{10 << 20, 30 << 20};
  JavaMemoryClaims c = java_memory_claims(a, {});
  ASSERT_EQ(c.claims.size(), 2u);
  EXPECT_EQ(c.claims[0].kind, MemoryKind::kRuntime);
  EXPECT_EQ(c.claims[0].what, "Metaspace (used, at the last GC)");
  EXPECT_EQ(c.claims[0].max_bytes, uint64_t{10} << 20);
  EXPECT_TRUE(c.claims[0].ranges.empty());
  EXPECT_EQ(c.claims[1].what, "Metaspace (committed, free, at the last GC)");
  EXPECT_EQ(c.claims[1].max_bytes, uint64_t{20} << 20);
  a.metaspace = MetaspaceUse{0, 0};
  EXPECT_TRUE(java_memory_claims(a, {}).claims.empty());
}

// A counter's address, to be read again as the JVM updates it in place
// (the full collections, read before and after each heap walk).
TEST(PerfData, ACountersAddressIsWhereItsValueChanges) {
  PerfImage p;
  p.entry("sun.gc.collector.0.invocations", 40);
  p.entry("sun.gc.collector.1.invocations", 2);
  FakeVm v = java_test::generic_vm(20, 20);
  const uint64_t at = v.a.alloc(p.bytes().size() + 4096);
  std::memcpy(reinterpret_cast<void*>(at), p.bytes().data(), p.bytes().size());
  describe_perf_memory(v, at, p.bytes().size() + 4096);
  v.build();
  RemoteMemory mem(getpid());
  auto cache = java_test::cache_of_self(mem);
  std::string err;
  auto vm = HotSpotVm::read(cache, v.syms, java_test::no_deadline(), err);
  ASSERT_TRUE(vm) << err;
  std::map<std::string, uint64_t> addresses;
  auto m = read_perf_counters(cache, *vm, {kFullCollectionsCounter}, err, &addresses);
  ASSERT_TRUE(m) << err;
  EXPECT_EQ(m->at(std::string(kFullCollectionsCounter)), 2);
  ASSERT_EQ(addresses.size(), 1u);
  const uint64_t full = addresses.at(std::string(kFullCollectionsCounter));
  ASSERT_GE(full, at);
  ASSERT_LE(full + 8, at + p.bytes().size());
  java_test::Arena::put<int64_t>(full, 3);  // a full collection starts
  int64_t now = 0;
  ASSERT_TRUE(mem.read(full, &now, 8));
  EXPECT_EQ(now, 3);
  // Parsed alone, the same offset in the buffer.
  std::map<std::string, uint64_t> offsets;
  ASSERT_TRUE(parse_perf_data(ByteView(p.bytes().data(), p.bytes().size()), PerfDataLayout{},
                              {kFullCollectionsCounter}, err, &offsets));
  EXPECT_EQ(offsets.at(std::string(kFullCollectionsCounter)), full - at);
}

}  // namespace
}  // namespace oomsnap
