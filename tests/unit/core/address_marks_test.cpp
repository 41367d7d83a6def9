// AddressSet and AddressBitmap: each address counted once, zero never,
// neighbours distinct, and the bitmap's region cap falls back to the set.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "core/address_bitmap.h"
#include "core/address_set.h"

using namespace oomsnap;

TEST(AddressSet, InsertsOnceAndGrows) {
  AddressSet s(4);
  EXPECT_FALSE(s.insert(0));
  for (uint64_t i = 1; i <= 100000; ++i) ASSERT_TRUE(s.insert(0x7f0000000000ull + i * 32));
  for (uint64_t i = 1; i <= 100000; ++i) ASSERT_FALSE(s.insert(0x7f0000000000ull + i * 32));
  EXPECT_EQ(s.size(), 100000u);
  EXPECT_TRUE(s.contains(0x7f0000000000ull + 32));
  EXPECT_FALSE(s.contains(0x7f0000000000ull + 48));
}

TEST(AddressBitmap, MarksEachAddressOnceAndMatchesASet) {
  AddressBitmap b(8);  // few regions: the rest goes to the fallback set
  AddressSet truth;
  std::mt19937_64 rng(42);
  for (int i = 0; i < 200000; ++i) {
    // Clustered (same regions) and scattered addresses, 8-byte aligned.
    const uint64_t a = (i % 3 ? 0x55550000000ull + (rng() % (4 << 20)) : rng() & 0x7ffffffffff8ull) & ~7ull;
    ASSERT_EQ(b.insert(a), truth.insert(a)) << std::hex << a;
    ASSERT_TRUE(b.contains(a));
  }
  EXPECT_FALSE(b.insert(0));
  EXPECT_FALSE(b.contains(0));
  EXPECT_TRUE(b.insert(0x1000));
  EXPECT_FALSE(b.contains(0x1008));  // the neighbouring word is a different address
}

// A lookup is not a mark: the Python reader asks about every word a hostile
// container claims as an item, and each lookup of an address in a fresh
// 1 MiB region used to allocate that region's 16 KiB bitmap (a junk list
// drove the capture to ~60 MiB of bitmaps without marking anything).
TEST(AddressBitmap, LookupsAllocateNothing) {
  AddressBitmap b;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 100000; ++i) ASSERT_FALSE(b.contains((rng() & 0x7ffffffffff8ull) | 8));
  EXPECT_EQ(b.regions(), 0u);
  ASSERT_TRUE(b.insert(0x7f0000001000ull));
  EXPECT_EQ(b.regions(), 1u);
  EXPECT_TRUE(b.contains(0x7f0000001000ull));
  EXPECT_FALSE(b.contains(0x7f0000001008ull));
  EXPECT_FALSE(b.contains(0x7f0000401000ull));  // another region: still none allocated
  EXPECT_EQ(b.regions(), 1u);
}

// A region found missing is remembered as missing, yet a mark there still
// makes it: the negative entry must not stand in for the region (else the
// mark would go to the fallback set and the next lookup miss it).
TEST(AddressBitmap, ARegionFoundMissingIsMadeByTheNextMark) {
  AddressBitmap b;
  const uint64_t a = 0x7f0000201000ull;
  EXPECT_FALSE(b.contains(a));
  EXPECT_FALSE(b.contains(a + 8));
  ASSERT_TRUE(b.insert(a));
  EXPECT_EQ(b.regions(), 1u);
  EXPECT_TRUE(b.contains(a));
  EXPECT_FALSE(b.contains(a + 8));
  // A region whose cache entry another region took over in between.
  const uint64_t c = a + (uint64_t{1024} << AddressBitmap::kRegionShift);
  EXPECT_FALSE(b.contains(c));
  ASSERT_TRUE(b.insert(c));
  EXPECT_TRUE(b.contains(a));
  EXPECT_TRUE(b.contains(c));
  EXPECT_EQ(b.regions(), 2u);
}

// Marks that may be dropped (work put off for later) never go to the
// fallback set, which grows without bound; they are listed in address order.
TEST(AddressBitmap, MarksIfRoomStayInRegionsAndAreListedInOrder) {
  AddressBitmap b(2);
  const uint64_t r1 = 0x7f0000000000ull, r2 = 0x550000000000ull, r3 = 0x7f0000300000ull;
  EXPECT_TRUE(b.insert_if_room(r1 + 0x40));
  EXPECT_TRUE(b.insert_if_room(r2 + 0x18));
  EXPECT_TRUE(b.insert_if_room(r1 + 0x8));
  EXPECT_TRUE(b.insert_if_room(r1 + 0x8));  // again: still marked
  EXPECT_FALSE(b.insert_if_room(r3));       // a third region: no room, nothing marked
  EXPECT_FALSE(b.insert_if_room(0));
  EXPECT_FALSE(b.contains(r3));
  EXPECT_EQ(b.regions(), 2u);
  std::vector<uint64_t> seen;
  b.for_each_in_regions([&](uint64_t a) {
    seen.push_back(a);
    return true;
  });
  EXPECT_EQ(seen, (std::vector<uint64_t>{r2 + 0x18, r1 + 0x8, r1 + 0x40}));
  seen.clear();
  b.for_each_in_regions([&](uint64_t a) {
    seen.push_back(a);
    return seen.size() < 2;  // stops when asked
  });
  EXPECT_EQ(seen.size(), 2u);
}
