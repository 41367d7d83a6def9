// The Java collector's claims on the process's memory (java_memory_claims.h):
// the heap's used and free committed bytes and the code cache, from ranges
// and counts the target gives, checked against its mappings; and the ranges
// read from VMStructs byte images (java_heap_images.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "core/smaps_breakdown.h"
#include "java/java_memory_claims.h"
#include "java_heap_images.h"

namespace oomsnap {
namespace {

using java_test::Arena;
using java_test::cache_of_self;
using java_test::FakeVm;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kHeap = 0x700000000, kCode = 0x7f0000000000;

Mapping mapping(uint64_t start, uint64_t end, const char* perms) { return Mapping{start, end, 0, perms, 0, ""}; }

// A 64 MiB heap reservation whose first 16 MiB are committed (rw) and the
// rest reserved (PROT_NONE), a 48 MiB code cache with 8 MiB committed.
std::vector<Mapping> jvm_maps() {
  return {mapping(kHeap, kHeap + 16 * kMiB, "rw-p"), mapping(kHeap + 16 * kMiB, kHeap + 64 * kMiB, "---p"),
          mapping(kCode, kCode + 8 * kMiB, "rwxp"), mapping(kCode + 8 * kMiB, kCode + 48 * kMiB, "---p")};
}

JavaMemoryAccount account(uint64_t used) {
  JavaMemoryAccount a;
  a.collector = "G1";
  a.heap = AddressRange{kHeap, kHeap + 64 * kMiB};
  a.heap_used = used;
  a.code_cache = AddressRange{kCode, kCode + 48 * kMiB};
  return a;
}

TEST(JavaMemoryClaims, TheHeapsUsedBytesThenItsCommittedRestThenTheCodeCache) {
  JavaMemoryClaims c = java_memory_claims(account(10 * kMiB), jvm_maps());
  EXPECT_EQ(c.reason, "");
  ASSERT_EQ(c.claims.size(), 3u);
  EXPECT_EQ(c.claims[0].kind, MemoryKind::kHeap);
  EXPECT_EQ(c.claims[0].what, "Java heap (G1, used)");
  EXPECT_EQ(c.claims[0].max_bytes, 10 * kMiB);
  // Only the committed (writable) part: the reserved rest is never resident.
  ASSERT_EQ(c.claims[0].ranges.size(), 1u);
  EXPECT_EQ(c.claims[0].ranges[0].start, kHeap);
  EXPECT_EQ(c.claims[0].ranges[0].end, kHeap + 16 * kMiB);
  EXPECT_EQ(c.claims[1].kind, MemoryKind::kHeapFree);
  EXPECT_EQ(c.claims[1].what, "Java heap (committed, free)");
  EXPECT_FALSE(c.claims[1].max_bytes);
  EXPECT_EQ(c.claims[1].ranges.size(), 1u);
  EXPECT_EQ(c.claims[2].kind, MemoryKind::kRuntime);
  EXPECT_EQ(c.claims[2].what, "Code cache");
  ASSERT_EQ(c.claims[2].ranges.size(), 1u);
  EXPECT_EQ(c.claims[2].ranges[0].end, kCode + 8 * kMiB);
}

// Applied to the process's mappings as smaps read them: the heap's used
// bytes are heap, the rest of its resident committed bytes heap_free, the
// code cache runtime, and what no claim names stays native.
TEST(JavaMemoryClaims, AppliedTheKindsStillSumToTheResidentBytes) {
  auto line = [](uint64_t s, uint64_t e, const char* perms, uint64_t kib) {
    char head[128];
    std::snprintf(head, sizeof head, "%lx-%lx %s 00000000 00:00 0\n", static_cast<unsigned long>(s),
                  static_cast<unsigned long>(e), perms);
    return std::string(head) + "Rss: " + std::to_string(kib) + " kB\nAnonymous: " + std::to_string(kib) + " kB\nVmFlags: rd wr\n";
  };
  const std::string text = line(kHeap, kHeap + 16 * kMiB, "rw-p", 12 * 1024) +
                           line(kHeap + 16 * kMiB, kHeap + 64 * kMiB, "---p", 0) +
                           line(0x7e0000000000, 0x7e0000000000 + 32 * kMiB, "rw-p", 32 * 1024) +
                           line(kCode, kCode + 8 * kMiB, "rwxp", 6 * 1024);
  SmapsRead read = parse_smaps(text, SmapsLimits{}, TmpfsDevices{});
  ASSERT_TRUE(read.error.empty()) << read.error;
  MemoryBreakdown b = build_breakdown(read, java_memory_claims(account(10 * kMiB), jvm_maps()).claims, {},
                                      [](uint64_t s, uint64_t e) -> std::optional<uint64_t> {
                                        // What the smaps lines above say is resident.
                                        if (s >= kCode) return 6 * kMiB;
                                        return s == kHeap ? std::optional<uint64_t>(12 * kMiB) : std::nullopt;
                                      });
  EXPECT_EQ(b.at(MemoryKind::kHeap), 10 * kMiB);
  EXPECT_EQ(b.at(MemoryKind::kHeapFree), 2 * kMiB);
  EXPECT_EQ(b.at(MemoryKind::kRuntime), 6 * kMiB);
  EXPECT_EQ(b.at(MemoryKind::kNative), 32 * kMiB);
  EXPECT_EQ(b.total(), 50 * kMiB);
}

// A Serial or Parallel heap: each space's used range claimed by its name
// (an empty space claims nothing), then the committed rest as free.
TEST(JavaMemoryClaims, SerialAndParallelSpacesAreNamedByWhatTheirObjectsUse) {
  JavaMemoryAccount a = account(6 * kMiB);
  a.collector = "Serial";
  a.spaces = {{"eden", {kHeap, kHeap + 2 * kMiB}}, {"from", {kHeap + 4 * kMiB, kHeap + 4 * kMiB}},
              {"old", {kHeap + 8 * kMiB, kHeap + 12 * kMiB}}};
  JavaMemoryClaims c = java_memory_claims(a, jvm_maps());
  EXPECT_EQ(c.reason, "");
  ASSERT_EQ(c.claims.size(), 4u);
  EXPECT_EQ(c.claims[0].what, "Java heap (Serial eden, used)");
  EXPECT_EQ(c.claims[0].kind, MemoryKind::kHeap);
  ASSERT_EQ(c.claims[0].ranges.size(), 1u);
  EXPECT_EQ(c.claims[0].ranges[0].end, kHeap + 2 * kMiB);
  EXPECT_FALSE(c.claims[0].max_bytes);
  EXPECT_EQ(c.claims[1].what, "Java heap (Serial old, used)");
  EXPECT_EQ(c.claims[2].kind, MemoryKind::kHeapFree);
  EXPECT_EQ(c.claims[3].what, "Code cache");
}

// A space's committed end beyond its top: that part is the space's
// committed free memory, named after the used claims; the heap's committed
// rest comes last. An end beyond the reservation (crafted) names nothing.
TEST(JavaMemoryClaims, SerialAndParallelSpacesNameTheirCommittedFreePart) {
  JavaMemoryAccount a = account(3 * kMiB);
  a.collector = "Serial";
  a.spaces = {{"eden", {kHeap, kHeap + kMiB}, kHeap + 4 * kMiB},
              {"old", {kHeap + 8 * kMiB, kHeap + 10 * kMiB}, kHeap + 10 * kMiB}};
  JavaMemoryClaims c = java_memory_claims(a, jvm_maps());
  EXPECT_EQ(c.reason, "");
  ASSERT_EQ(c.claims.size(), 5u);
  EXPECT_EQ(c.claims[0].what, "Java heap (Serial eden, used)");
  EXPECT_EQ(c.claims[1].what, "Java heap (Serial old, used)");
  EXPECT_EQ(c.claims[2].what, "Java heap (Serial eden, committed, free)");
  EXPECT_EQ(c.claims[2].kind, MemoryKind::kHeapFree);
  ASSERT_EQ(c.claims[2].ranges.size(), 1u);
  EXPECT_EQ(c.claims[2].ranges[0].start, kHeap + kMiB);
  EXPECT_EQ(c.claims[2].ranges[0].end, kHeap + 4 * kMiB);
  EXPECT_EQ(c.claims[3].what, "Java heap (committed, free)");
  a.spaces[1].end = kHeap + 65 * kMiB;
  c = java_memory_claims(a, jvm_maps());
  EXPECT_NE(c.reason.find("outside the heap's reservation"), std::string::npos) << c.reason;
  EXPECT_EQ(c.claims[0].what, "Java heap (Serial, used)");
}

// G1's regions named by type: one claim per type in the order the types
// first appear, with every run of that type; then the committed rest.
TEST(JavaMemoryClaims, G1RegionRunsAreClaimedOncePerType) {
  JavaMemoryAccount a = account(5 * kMiB);
  a.spaces = {{"eden", {kHeap, kHeap + kMiB}},
              {"old", {kHeap + kMiB, kHeap + 3 * kMiB}},
              {"eden", {kHeap + 3 * kMiB, kHeap + 4 * kMiB}},
              {"humongous", {kHeap + 8 * kMiB, kHeap + 9 * kMiB}}};
  JavaMemoryClaims c = java_memory_claims(a, jvm_maps());
  EXPECT_EQ(c.reason, "");
  ASSERT_EQ(c.claims.size(), 5u);
  EXPECT_EQ(c.claims[0].what, "Java heap (G1 eden, used)");
  ASSERT_EQ(c.claims[0].ranges.size(), 2u);
  EXPECT_EQ(c.claims[0].ranges[1].start, kHeap + 3 * kMiB);
  EXPECT_EQ(c.claims[1].what, "Java heap (G1 old, used)");
  EXPECT_EQ(c.claims[2].what, "Java heap (G1 humongous, used)");
  EXPECT_EQ(c.claims[3].kind, MemoryKind::kHeapFree);
  EXPECT_EQ(c.claims[4].what, "Code cache");
}

// More runs than a capture reads pagemap for (a crafted table, or a huge
// heap of alternating types): one count, and the reason says why.
TEST(JavaMemoryClaims, TooManyRunsAreClaimedAsOneCount) {
  JavaMemoryAccount a = account(kMiB);
  for (size_t i = 0; i <= kMaxNamedHeapRuns; ++i)
    a.spaces.push_back({i % 2 ? "old" : "eden", {kHeap + i * 1024, kHeap + i * 1024 + 512}});
  JavaMemoryClaims c = java_memory_claims(a, jvm_maps());
  EXPECT_NE(c.reason.find("runs"), std::string::npos) << c.reason;
  ASSERT_EQ(c.claims.size(), 3u);
  EXPECT_EQ(c.claims[0].what, "Java heap (G1, used)");
  a.spaces.pop_back();
  c = java_memory_claims(a, jvm_maps());
  EXPECT_EQ(c.reason, "");
  EXPECT_EQ(c.claims[0].what, "Java heap (G1 eden, used)");
  EXPECT_EQ(c.claims[0].ranges.size(), kMaxNamedHeapRuns / 2);
}

// A space whose used range lies outside the heap's reservation (crafted)
// would claim other memory as heap: the spaces are not named, the used
// bytes are claimed as one count, and the reason says why.
TEST(JavaMemoryClaims, ASpaceOutsideTheHeapsReservationIsNotNamed) {
  JavaMemoryAccount a = account(6 * kMiB);
  a.collector = "Parallel";
  a.spaces = {{"eden", {kHeap, kHeap + 2 * kMiB}}, {"old", {kCode, kCode + 4 * kMiB}}};
  JavaMemoryClaims c = java_memory_claims(a, jvm_maps());
  EXPECT_NE(c.reason.find("outside the heap's reservation"), std::string::npos) << c.reason;
  ASSERT_EQ(c.claims.size(), 3u);
  EXPECT_EQ(c.claims[0].what, "Java heap (Parallel, used)");
  EXPECT_EQ(c.claims[0].max_bytes, 6 * kMiB);
}

// A used count beyond the committed bytes (crafted, or a heap that grew
// after the mappings were read) splits nothing: the heap is not claimed, the
// reason says why, the code cache still is. Committed is the writable part,
// not the reservation: 20 MiB is within the 64 MiB reserved.
TEST(JavaMemoryClaims, AUsedCountBeyondTheCommittedBytesIsNotClaimed) {
  for (uint64_t used : {20 * kMiB, UINT64_MAX}) {
    JavaMemoryClaims c = java_memory_claims(account(used), jvm_maps());
    ASSERT_EQ(c.claims.size(), 1u) << used;
    EXPECT_EQ(c.claims[0].what, "Code cache");
    EXPECT_NE(c.reason.find("the Java heap's used bytes (" + std::to_string(used) +
                            ") exceed its committed bytes (16777216): not claimed"),
              std::string::npos)
        << c.reason;
  }
  // Exactly the committed bytes is a full heap, not a lie.
  EXPECT_EQ(java_memory_claims(account(16 * kMiB), jvm_maps()).claims.size(), 3u);
}

TEST(JavaMemoryClaims, RangesInNoWritableMappingAreNotClaimed) {
  JavaMemoryAccount a = account(kMiB);
  a.heap = AddressRange{0x100000000000, 0x100004000000};  // nothing mapped there
  a.code_cache = AddressRange{kHeap + 16 * kMiB, kHeap + 32 * kMiB};  // reserved, not committed
  JavaMemoryClaims c = java_memory_claims(a, jvm_maps());
  EXPECT_TRUE(c.claims.empty());
  EXPECT_EQ(c.reason,
            "the Java heap's reserved range 0x100000000000-0x100004000000 lies in no writable mapping; the code "
            "cache's reserved range 0x701000000-0x702000000 lies in no writable mapping");
}

TEST(JavaMemoryClaims, OverlappingHeapAndCodeCacheAreNeitherClaimed) {
  JavaMemoryAccount a = account(kMiB);
  a.code_cache = AddressRange{kHeap + 8 * kMiB, kHeap + 24 * kMiB};
  JavaMemoryClaims c = java_memory_claims(a, jvm_maps());
  EXPECT_TRUE(c.claims.empty());
  EXPECT_NE(c.reason.find("overlap: neither is claimed"), std::string::npos) << c.reason;
}

TEST(JavaMemoryClaims, CommittedPartsMergeMappingsListedTwice) {
  uint64_t bytes = 0;
  auto parts = committed_parts({kHeap, kHeap + 64 * kMiB},
                               {mapping(kHeap + 4 * kMiB, kHeap + 8 * kMiB, "rw-p"),
                                mapping(kHeap, kHeap + 6 * kMiB, "rw-p"), mapping(kHeap, kHeap + 2 * kMiB, "r--p")},
                               bytes);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].end, kHeap + 8 * kMiB);
  EXPECT_EQ(bytes, 8 * kMiB);
}

// --- Read from VMStructs byte images ------------------------------------------

// HotSpotVm refuses nearly empty tables: generic entries beside the ones a
// test describes.
FakeVm padded_vm() { return java_test::generic_vm(20, 20); }

// A CollectedHeap (64 bytes) whose _reserved MemRegion (16 bytes) lies at 24.
struct FakeHeap {
  FakeVm v = padded_vm();
  uint64_t heap = 0;
  FakeHeap(uint64_t start, uint64_t words) {
    v.types["CollectedHeap"] = 64;
    v.types["MemRegion"] = 16;
    v.field("CollectedHeap", "_reserved", 24);
    v.field("MemRegion", "_start", 0);
    v.field("MemRegion", "_word_size", 8);
    heap = v.a.alloc(64);
    Arena::put(heap + 24, start), Arena::put(heap + 32, words);
  }
  std::optional<AddressRange> read(std::string& err) {
    auto vm = java_test::read_fake_vm(v, err);
    if (!vm) return std::nullopt;
    RemoteMemory mem(getpid());
    auto c = cache_of_self(mem);
    return read_heap_reserved(c, *vm, heap, err);
  }
};

TEST(JavaMemoryClaimsRead, TheHeapsReservedRangeFromItsMemRegion) {
  FakeHeap f(kHeap, 64 * kMiB / 8);
  std::string err;
  auto r = f.read(err);
  ASSERT_TRUE(r) << err;
  EXPECT_EQ(r->start, kHeap);
  EXPECT_EQ(r->end, kHeap + 64 * kMiB);
}

TEST(JavaMemoryClaimsRead, AnImplausibleReservedRangeIsAnErrorNamingIt) {
  for (auto [start, words] : std::initializer_list<std::pair<uint64_t, uint64_t>>{
           {kHeap, UINT64_MAX / 4},                 // wraps when counted in bytes
           {kHeap, (kMaxJavaHeapReserved / 8) + 512},  // beyond 32 TiB
           {kHeap + 8, 512},                        // not page aligned
           {0, 512},
           {kHeap, 0}}) {
    FakeHeap f(start, words);
    std::string err;
    EXPECT_FALSE(f.read(err)) << start << " " << words;
    EXPECT_NE(err.find("implausible CollectedHeap::_reserved"), std::string::npos) << err;
  }
}

TEST(JavaMemoryClaimsRead, AMemRegionOutsideItsTypeIsAnErrorNamingTheField) {
  FakeHeap f(kHeap, 512);
  f.v.find("CollectedHeap", "_reserved").offset = 56;  // 16 bytes from 56 do not fit in 64
  std::string err;
  EXPECT_FALSE(f.read(err));
  EXPECT_NE(err.find("CollectedHeap::_reserved"), std::string::npos) << err;
  FakeHeap g(kHeap, 512);
  g.v.drop("CollectedHeap", "_reserved");
  EXPECT_FALSE(g.read(err));
  EXPECT_EQ(err, "VMStructs has no CollectedHeap::_reserved");
}

TEST(JavaMemoryClaimsRead, TheCodeCacheBoundsAndImplausibleOnes) {
  auto read = [](uint64_t lo, uint64_t hi, std::string& err) -> std::optional<AddressRange> {
    FakeVm v = padded_vm();
    v.global("CodeCache", "_low_bound", lo);
    v.global("CodeCache", "_high_bound", hi);
    auto vm = java_test::read_fake_vm(v, err);
    if (!vm) return std::nullopt;
    RemoteMemory mem(getpid());
    auto c = cache_of_self(mem);
    return read_code_cache_bounds(c, *vm, err);
  };
  std::string err;
  auto r = read(kCode, kCode + 48 * kMiB, err);
  ASSERT_TRUE(r) << err;
  EXPECT_EQ(r->end - r->start, 48 * kMiB);
  for (auto [lo, hi] : std::initializer_list<std::pair<uint64_t, uint64_t>>{
           {kCode + 48 * kMiB, kCode}, {kCode, kCode}, {kCode, kCode + (8ull << 30)}, {kCode + 1, kCode + kMiB}}) {
    EXPECT_FALSE(read(lo, hi, err)) << lo << " " << hi;
    EXPECT_NE(err.find("implausible code cache bounds"), std::string::npos) << err;
  }
}

// JDK 8 describes no bounds: its one CodeHeap's VirtualSpace is read.
TEST(JavaMemoryClaimsRead, Jdk8sCodeHeapReservation) {
  FakeVm v = padded_vm();
  v.types["CodeHeap"] = 128;
  v.types["VirtualSpace"] = 64;
  v.field("CodeHeap", "_memory", 16);
  v.field("VirtualSpace", "_low_boundary", 16);
  v.field("VirtualSpace", "_high_boundary", 24);
  const uint64_t code_heap = v.a.alloc(128);
  Arena::put(code_heap + 32, kCode), Arena::put(code_heap + 40, kCode + 48 * kMiB);
  v.global("CodeCache", "_heap", code_heap);
  std::string err;
  auto read = [&]() -> std::optional<AddressRange> {
    auto vm = java_test::read_fake_vm(v, err);
    if (!vm) return std::nullopt;
    RemoteMemory mem(getpid());
    auto c = cache_of_self(mem);
    return read_code_cache_bounds(c, *vm, err);
  };
  auto r = read();
  ASSERT_TRUE(r) << err;
  EXPECT_EQ(r->start, kCode);
  EXPECT_EQ(r->end, kCode + 48 * kMiB);
  // The VirtualSpace must fit in the CodeHeap.
  v.find("CodeHeap", "_memory").offset = 100;
  EXPECT_FALSE(read());
  EXPECT_NE(err.find("CodeHeap::_memory"), std::string::npos) << err;
  v.drop("CodeCache", "_heap");
  EXPECT_FALSE(read());
  EXPECT_NE(err.find("describes no code cache bounds"), std::string::npos) << err;
}

}  // namespace
}  // namespace oomsnap
