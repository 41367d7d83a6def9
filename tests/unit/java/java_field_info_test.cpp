// HotSpot's field tables decoded from byte images (field_info.h): JDK 21+'s
// UNSIGNED5 stream and JDK 8-20's u2 array, and what crafted bytes get.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "java/field_info.h"
#include "java_field_images.h"

namespace oomsnap {
namespace {

using java_test::put_unsigned5;
using java_test::StreamField;
using java_test::field_stream;

TEST(Unsigned5, ValuesOfEveryLengthDecodeToWhatWasWritten) {
  const std::vector<uint32_t> values = {0, 1, 190, 191, 192, 0x307E, 0x307F, 0xC207E, 0xC207F, 1u << 24, UINT32_MAX};
  std::vector<uint8_t> bytes;
  for (uint32_t v : values) put_unsigned5(bytes, v);
  size_t pos = 0;
  for (uint32_t v : values) {
    auto got = read_unsigned5(bytes, pos);
    ASSERT_TRUE(got) << v;
    EXPECT_EQ(*got, v);
  }
  EXPECT_EQ(pos, bytes.size());
  // One byte up to 190, two up to 0x307E (HotSpot's own figures).
  std::vector<uint8_t> one, two;
  put_unsigned5(one, 190), put_unsigned5(two, 0x307E);
  EXPECT_EQ(one.size(), 1u);
  EXPECT_EQ(two.size(), 2u);
}

TEST(Unsigned5, ANumberRunningOffTheEndOrHoldingAZeroByteIsNone) {
  std::vector<uint8_t> bytes;
  put_unsigned5(bytes, 0xC207F);  // three bytes
  size_t pos = 0;
  EXPECT_FALSE(read_unsigned5(std::span<const uint8_t>(bytes.data(), 2), pos));
  EXPECT_EQ(pos, 0u);
  bytes[1] = 0;
  EXPECT_FALSE(read_unsigned5(bytes, pos));
  // Five high bytes: the fifth ends the number whatever it is, but a sum
  // past 32 bits is a crafted stream.
  const std::vector<uint8_t> big = {255, 255, 255, 255, 255};
  EXPECT_FALSE(read_unsigned5(big, pos));
}

TEST(FieldStream, DecodesNamesOffsetsAndFlagsSkippingTheOptionalNumbers) {
  const FieldFlagBits bits;
  // initialized (an initial value index) and generic (a signature index)
  // each add one number; stable adds none.
  const std::vector<StreamField> fields = {
      {7, 9, 112, 0x001a, 1u << bits.initialized | 1u << bits.generic, {33, 34}},
      {11, 12, 116, 0x0008, 1u << bits.stable, {}},
      {300, 301, 70000, 0x0012, 1u << bits.contended, {2}},
  };
  auto bytes = field_stream(fields, 1);
  std::string err;
  auto got = decode_field_stream(bytes, bits, err);
  ASSERT_TRUE(got) << err;
  ASSERT_EQ(got->size(), 3u);
  EXPECT_EQ((*got)[0].name_index, 7u);
  EXPECT_EQ((*got)[0].offset, 112u);
  EXPECT_EQ((*got)[0].access_flags, 0x001au);
  EXPECT_TRUE((*got)[0].offset_set);
  EXPECT_EQ((*got)[1].name_index, 11u);
  EXPECT_EQ((*got)[1].offset, 116u);
  EXPECT_EQ((*got)[2].name_index, 300u);
  EXPECT_EQ((*got)[2].offset, 70000u);
}

TEST(FieldStream, CraftedStreamsAreErrors) {
  const FieldFlagBits bits;
  std::string err;
  // A flag bit HotSpot did not describe: its optional numbers are unknown.
  auto unknown = field_stream({{7, 9, 112, 8, 1u << 7, {}}}, 0);
  EXPECT_FALSE(decode_field_stream(unknown, bits, err));
  EXPECT_NE(err.find("field flags 128"), std::string::npos) << err;
  // A count the bytes cannot hold (each field takes five bytes at least).
  std::vector<uint8_t> counts;
  put_unsigned5(counts, 60000), put_unsigned5(counts, 0);
  EXPECT_FALSE(decode_field_stream(counts, bits, err));
  EXPECT_NE(err.find("do not fit"), std::string::npos) << err;
  // Cut in the middle of a field, or of its optional numbers.
  auto whole = field_stream({{7, 9, 112, 8, 1u << bits.initialized, {33}}}, 0);
  for (size_t n = 0; n < whole.size(); ++n)
    EXPECT_FALSE(decode_field_stream(std::span<const uint8_t>(whole.data(), n), bits, err)) << n;
  EXPECT_TRUE(decode_field_stream(whole, bits, err)) << err;
  // Flag bits past 31 cannot be HotSpot's.
  FieldFlagBits wild = bits;
  wild.generic = 40;
  EXPECT_FALSE(decode_field_stream(whole, wild, err));
}

// JDK 8-20: six u2s per field, the offset packed with a 2-bit tag.
std::vector<uint16_t> legacy(std::initializer_list<std::array<uint32_t, 3>> fields) {  // flags, name, offset<<2|tag
  std::vector<uint16_t> out;
  for (const auto& f : fields) {
    out.insert(out.end(), {static_cast<uint16_t>(f[0]), static_cast<uint16_t>(f[1]), 0, 0,
                           static_cast<uint16_t>(f[2] & 0xffff), static_cast<uint16_t>(f[2] >> 16)});
  }
  return out;
}

TEST(LegacyFields, DecodesTheJavaFieldsAndTheirTaggedOffsets) {
  LegacyFieldLayout L;
  L.internal_flag = 0x400;
  auto slots = legacy({{0x18, 5, 112u << 2 | 1}, {0x400, 6, 120u << 2 | 1}, {0x8, 7, 70000u << 2 | 1}, {0x8, 8, 2}});
  std::string err;
  auto got = decode_legacy_fields(slots, 4, L, err);
  ASSERT_TRUE(got) << err;
  ASSERT_EQ(got->size(), 3u);  // the internal (injected) one skipped
  EXPECT_EQ((*got)[0].name_index, 5u);
  EXPECT_EQ((*got)[0].offset, 112u);
  EXPECT_EQ((*got)[1].name_index, 7u);
  EXPECT_EQ((*got)[1].offset, 70000u);  // the high slot counts
  EXPECT_FALSE((*got)[2].offset_set);   // tagged as a type, not laid out yet
}

TEST(LegacyFields, CraftedCountsAndLayoutsAreErrors) {
  auto slots = legacy({{0x8, 5, 112u << 2 | 1}});
  std::string err;
  EXPECT_FALSE(decode_legacy_fields(slots, 2, LegacyFieldLayout{}, err));
  EXPECT_NE(err.find("do not fit"), std::string::npos) << err;
  LegacyFieldLayout bad;
  bad.name_index_slot = 6;  // past the field's slots
  EXPECT_FALSE(decode_legacy_fields(slots, 1, bad, err));
  bad = LegacyFieldLayout{};
  bad.tag_size = 40;
  EXPECT_FALSE(decode_legacy_fields(slots, 1, bad, err));
}

}  // namespace
}  // namespace oomsnap
