// java.nio.Bits's totals read out of a class graph image (direct_buffers.h,
// hotspot_classes.h): through JDK 21+'s boot loader list and field streams and
// JDK 8's system dictionary and u2 field arrays; and what crafted graphs get
// (cycles, implausible values, names outside the constant pool).
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "java/direct_buffers.h"
#include "java/java_memory_claims.h"
#include "java_field_images.h"

namespace oomsnap {
namespace {

using java_test::cache_of_self;
using java_test::FakeClasses;
using java_test::no_deadline;
using Jdk = FakeClasses::Jdk;

constexpr uint32_t kStatic = 0x0008, kPrivateStaticFinal = 0x001a;

// java.lang.Object, AtomicLong (value at 16) and Bits with its three static
// AtomicLongs (and a static long before them), by the JDK's names; the
// AtomicLongs hold reserved, capacity and count.
struct BitsImage {
  FakeClasses c;
  uint64_t bits = 0, atomic_long = 0;
  uint64_t counters[3] = {};
  BitsImage(Jdk jdk, int64_t reserved, int64_t capacity, int64_t count, bool initialized = true) : c(jdk) {
    const bool modern = jdk == Jdk::k21;
    c.klass("java/lang/Object", {});
    atomic_long = c.klass("java/util/concurrent/atomic/AtomicLong", {{"serialVersionUID", kPrivateStaticFinal, 112},
                                                                     {"value", 0x0042, 16}});
    bits = c.klass("java/nio/Bits", {{modern ? "MAX_MEMORY" : "maxMemory", kStatic, 120},
                                     {modern ? "RESERVED_MEMORY" : "reservedMemory", kPrivateStaticFinal, 128},
                                     {modern ? "TOTAL_CAPACITY" : "totalCapacity", kPrivateStaticFinal, 132},
                                     {modern ? "COUNT" : "count", kPrivateStaticFinal, 136}},
                   initialized);
    const uint64_t mirror = c.mirrors.back();
    const int64_t values[3] = {reserved, capacity, count};
    for (int i = 0; i < 3; ++i) {
      counters[i] = c.object(24);
      java_test::Arena::put<int64_t>(counters[i] + 16, values[i]);
      c.put_reference(mirror + 128 + 4 * i, counters[i]);
    }
    c.link();
  }
  std::optional<DirectBufferTotals> read(std::string& err) {
    RemoteMemory mem(getpid());
    auto cache = cache_of_self(mem);
    auto vm = HotSpotVm::read(cache, c.v.syms, no_deadline(), err);
    if (!vm) return std::nullopt;
    auto classes = HotSpotClasses::resolve(cache, *vm, c.L, true, err);
    if (!classes) return std::nullopt;
    return read_direct_buffers(cache, *classes, no_deadline(), err);
  }
};

TEST(DirectBuffers, BitsTotalsThroughTheBootLoadersListAndTheFieldStream) {
  BitsImage img(Jdk::k21, 300 << 20, (300 << 20) - 5, 300);
  std::string err;
  auto t = img.read(err);
  ASSERT_TRUE(t) << err;
  EXPECT_EQ(t->reserved, 300u << 20);
  EXPECT_EQ(t->capacity, (300u << 20) - 5);
  EXPECT_EQ(t->count, 300u);
}

TEST(DirectBuffers, Jdk8sBitsThroughTheSystemDictionaryAndTheU2Fields) {
  BitsImage img(Jdk::k8, 7 << 20, 7 << 20, 7);
  std::string err;
  auto t = img.read(err);
  ASSERT_TRUE(t) << err;
  EXPECT_EQ(t->reserved, 7u << 20);
  EXPECT_EQ(t->count, 7u);
}

TEST(DirectBuffers, NoneWhileBitsIsNotLoadedOrNotInitialized) {
  std::string err;
  BitsImage uninitialized(Jdk::k21, 1 << 20, 1 << 20, 1, false);
  auto t = uninitialized.read(err);
  ASSERT_TRUE(t) << err;
  EXPECT_EQ(t->reserved, 0u);
  FakeClasses only_object(Jdk::k21);
  only_object.klass("java/lang/Object", {});
  only_object.link();
  RemoteMemory mem(getpid());
  auto cache = cache_of_self(mem);
  auto vm = HotSpotVm::read(cache, only_object.v.syms, no_deadline(), err);
  ASSERT_TRUE(vm) << err;
  auto classes = HotSpotClasses::resolve(cache, *vm, only_object.L, true, err);
  ASSERT_TRUE(classes) << err;
  auto none = read_direct_buffers(cache, *classes, no_deadline(), err);
  ASSERT_TRUE(none) << err;
  EXPECT_EQ(none->reserved, 0u);
  EXPECT_EQ(none->count, 0u);
}

TEST(DirectBuffers, ACycleInTheBootLoadersListEndsWithAnError) {
  BitsImage img(Jdk::k21, 1, 1, 1);
  // Object's next klass is Object again: Bits is never reached.
  java_test::Arena::put(img.c.klasses[0] + FakeClasses::kNextLink, img.c.klasses[0]);
  std::string err;
  EXPECT_FALSE(img.read(err));
  EXPECT_NE(err.find("a cycle?"), std::string::npos) << err;
}

TEST(DirectBuffers, ACycleInTheDictionaryEndsWithAnError) {
  BitsImage img(Jdk::k8, 1, 1, 1);
  java_test::Arena::put(img.c.entries[0] + 8, img.c.entries[0]);
  std::string err;
  EXPECT_FALSE(img.read(err));
  EXPECT_NE(err.find("a cycle?"), std::string::npos) << err;
}

TEST(DirectBuffers, NegativeOrImplausibleTotalsAreErrors) {
  for (int64_t bad : {int64_t{-1}, int64_t{1} << 50}) {
    BitsImage img(Jdk::k21, bad, 1, 1);
    std::string err;
    EXPECT_FALSE(img.read(err)) << bad;
    EXPECT_NE(err.find("RESERVED_MEMORY"), std::string::npos) << err;
  }
}

TEST(DirectBuffers, ANameIndexOutsideTheConstantPoolNamesNoField) {
  BitsImage img(Jdk::k21, 1, 1, 1);
  // The pool holds five entries (0 and four names): AtomicLong's pool is
  // shrunk so that "value" (index 2) lies past its end.
  uint64_t cp = 0;
  std::memcpy(&cp, reinterpret_cast<void*>(img.atomic_long + FakeClasses::kConstants), 8);
  java_test::Arena::put<int32_t>(cp + FakeClasses::kCpLength, 2);
  std::string err;
  EXPECT_FALSE(img.read(err));
  EXPECT_NE(err.find("declares no field value"), std::string::npos) << err;
}

TEST(DirectBuffers, AFieldTableLongerThanItsCapIsNotRead) {
  BitsImage img(Jdk::k21, 1, 1, 1);
  uint64_t arr = 0;
  std::memcpy(&arr, reinterpret_cast<void*>(img.atomic_long + FakeClasses::kStream), 8);
  java_test::Arena::put<int32_t>(arr, static_cast<int32_t>(HotSpotClasses::kMaxFieldTableBytes + 1));
  std::string err;
  EXPECT_FALSE(img.read(err));
  EXPECT_NE(err.find("implausible field table length"), std::string::npos) << err;
}

TEST(DirectBuffers, TheClaimNamesTheBuffersAsNativeByCount) {
  JavaMemoryAccount a;
  a.collector = "G1";
  a.direct_buffers = DirectBufferTotals{300u << 20, 300u << 20, 300};
  JavaMemoryClaims c = java_memory_claims(a, {});
  ASSERT_EQ(c.claims.size(), 1u);
  EXPECT_EQ(c.claims[0].kind, MemoryKind::kNative);
  EXPECT_EQ(c.claims[0].what, "java.nio direct buffers (300 buffers)");
  EXPECT_TRUE(c.claims[0].ranges.empty());
  EXPECT_EQ(c.claims[0].max_bytes, uint64_t{300} << 20);
  a.direct_buffers = DirectBufferTotals{};
  EXPECT_TRUE(java_memory_claims(a, {}).claims.empty());
}

}  // namespace
}  // namespace oomsnap
