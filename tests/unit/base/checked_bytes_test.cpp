// base/checked_bytes.h: bounds that cannot overflow, unaligned little-endian
// loads, and ByteView's accessors refusing anything outside the buffer.
#include "base/checked_bytes.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

using namespace oomsnap;

TEST(CheckedBytes, InBoundsNeverOverflows) {
  EXPECT_TRUE(in_bounds(0, 0, 0));
  EXPECT_TRUE(in_bounds(0, 16, 16));
  EXPECT_TRUE(in_bounds(16, 0, 16));
  EXPECT_TRUE(in_bounds(8, 8, 16));
  EXPECT_FALSE(in_bounds(8, 9, 16));
  EXPECT_FALSE(in_bounds(17, 0, 16));
  // off + len wraps to a small number: still out of bounds.
  EXPECT_FALSE(in_bounds(8, ~uint64_t{0} - 3, 16));
  EXPECT_FALSE(in_bounds(~uint64_t{0}, 2, 16));
  EXPECT_FALSE(in_bounds(~uint64_t{0} - 7, 8, ~uint64_t{0} - 8));
  EXPECT_TRUE(in_bounds(~uint64_t{0} - 8, 8, ~uint64_t{0}));
}

TEST(CheckedBytes, LoadsAreLittleEndianAndUnaligned) {
  const std::array<uint8_t, 11> b = {0xff, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x80, 0xff};
  EXPECT_EQ(load_le<uint64_t>(b.data() + 1), 0x0807060504030201u);  // odd address
  EXPECT_EQ(load_le<uint32_t>(b.data() + 1), 0x04030201u);
  EXPECT_EQ(load_le<uint16_t>(b.data() + 9), 0xff80u);
  EXPECT_EQ(load_le<int16_t>(b.data() + 9), -128);
  EXPECT_EQ(load_le<int32_t>(b.data() + 7), static_cast<int32_t>(0xff800807u));
}

TEST(CheckedBytes, ViewReadsInsideAndRefusesOutside) {
  std::vector<uint8_t> buf(24);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i);
  const ByteView v(buf);
  EXPECT_EQ(v.size(), 24u);
  uint64_t u64 = 7;
  ASSERT_TRUE(v.read_u64(16, u64));
  EXPECT_EQ(u64, 0x1716151413121110u);
  ASSERT_TRUE(v.read_u64(3, u64));  // unaligned
  EXPECT_EQ(u64, 0x0a09080706050403u);
  u64 = 7;
  EXPECT_FALSE(v.read_u64(17, u64));  // one byte past the end
  EXPECT_FALSE(v.read_u64(24, u64));
  EXPECT_FALSE(v.read_u64(~uint64_t{0} - 3, u64));  // wraps
  EXPECT_EQ(u64, 7u);  // untouched on failure
  uint32_t u32 = 0;
  EXPECT_TRUE(v.read_u32(20, u32));
  EXPECT_FALSE(v.read_u32(21, u32));
  uint16_t u16 = 0;
  EXPECT_TRUE(v.read_u16(22, u16));
  EXPECT_EQ(u16, 0x1716u);
  EXPECT_FALSE(v.read_u16(23, u16));
  uint8_t u8 = 0;
  EXPECT_TRUE(v.read_u8(23, u8));
  EXPECT_FALSE(v.read_u8(24, u8));
  int32_t i32 = 0;
  EXPECT_TRUE(v.read_i32(0, i32));
  int64_t i64 = 0;
  EXPECT_FALSE(v.read_i64(20, i64));
}

TEST(CheckedBytes, EmptyAndNullViewsHoldNothing) {
  const ByteView empty;
  uint8_t b = 0;
  EXPECT_TRUE(empty.empty());
  EXPECT_FALSE(empty.read_u8(0, b));
  EXPECT_TRUE(empty.contains(0, 0));
  const ByteView null_with_size(nullptr, 100);  // a failed view() stays empty
  EXPECT_EQ(null_with_size.size(), 0u);
  EXPECT_FALSE(null_with_size.read_u8(0, b));
}

TEST(CheckedBytes, CopySubAndElement) {
  std::vector<uint8_t> buf(32);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i);
  const ByteView v(buf);
  uint8_t out[8] = {};
  EXPECT_TRUE(v.copy(24, out, 8));
  EXPECT_EQ(out[7], 31);
  EXPECT_FALSE(v.copy(25, out, 8));
  EXPECT_TRUE(v.copy(32, out, 0));

  ByteView s;
  ASSERT_TRUE(v.sub(8, 16, s));
  EXPECT_EQ(s.size(), 16u);
  uint64_t x = 0;
  EXPECT_TRUE(s.read_u64(8, x));
  EXPECT_EQ(x & 0xff, 16u);
  EXPECT_FALSE(s.read_u64(9, x));  // the sub-view's own bound, not the parent's
  EXPECT_FALSE(v.sub(8, 25, s));
  EXPECT_FALSE(v.sub(~uint64_t{0}, 2, s));

  ByteView e;
  ASSERT_TRUE(v.element(3, 8, e));  // records of 8 bytes: 4 of them
  EXPECT_EQ(e.data(), buf.data() + 24);
  EXPECT_FALSE(v.element(4, 8, e));
  EXPECT_FALSE(v.element(0, 0, e));  // no stride
  EXPECT_FALSE(v.element(1, 33, e));
  EXPECT_FALSE(v.element(uint64_t{1} << 61, 16, e));  // index * stride wraps
  ASSERT_TRUE(v.element(1, 12, e));  // 2 whole records of 12; the 8 bytes left are none
  EXPECT_FALSE(v.element(2, 12, e));
}
