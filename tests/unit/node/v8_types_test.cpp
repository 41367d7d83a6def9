// The size rules each version's instance types get, on byte images (their
// live check: tests/integration/node_snapshot_test.cpp walks every page of
// six builds' heaps to its end).
#include "node/v8_types.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

using namespace oomsnap;

namespace {

// What the official V8 12.4 build exports, in part.
V8Metadata metadata_12_4() {
  std::string why;
  auto md = parse_v8_metadata({{"v8dbg_TaggedSize", 8},
                               {"v8dbg_class_HeapObject__map__Map", 0},
                               {"v8dbg_class_Map__instance_type__uint16_t", 12},
                               {"v8dbg_class_String__length__int32_t", 12},
                               {"v8dbg_class_SeqOneByteString__chars__char", 16},
                               {"v8dbg_FirstNonstringType", 128},
                               {"v8dbg_StringRepresentationMask", 7},
                               {"v8dbg_SeqStringTag", 0},
                               {"v8dbg_StringEncodingMask", 8},
                               {"v8dbg_OneByteStringTag", 8},
                               {"v8dbg_type_Map__MAP_TYPE", 264},
                               {"v8dbg_type_FixedArray__FIXED_ARRAY_TYPE", 174},
                               {"v8dbg_type_ByteArray__BYTE_ARRAY_TYPE", 186},
                               {"v8dbg_type_ScopeInfo__SCOPE_INFO_TYPE", 272},
                               {"v8dbg_type_FreeSpace__FREE_SPACE_TYPE", 260}},
                              why);
  EXPECT_TRUE(md) << why;
  return *md;
}

struct Object {
  std::vector<uint8_t> b = std::vector<uint8_t>(256, 0);
  Object& u64(uint32_t at, uint64_t v) {
    std::memcpy(b.data() + at, &v, 8);
    return *this;
  }
  Object& i32(uint32_t at, int32_t v) {
    std::memcpy(b.data() + at, &v, 4);
    return *this;
  }
  Object& u16(uint32_t at, uint16_t v) {
    std::memcpy(b.data() + at, &v, 2);
    return *this;
  }
  Object& smi(uint32_t at, int64_t v) { return u64(at, static_cast<uint64_t>(v) << 32); }
};

std::optional<uint64_t> size_of(uint16_t type, const Object& o, const V8TypeIds& ids, const V8Metadata& md) {
  V8MapInfo m;
  m.instance_type = type;
  m.rule = v8_size_rule(type, ids, md);
  return v8_object_size(m, ByteView(o.b.data(), o.b.size()));
}

TEST(V8Types, EveryShapeOf12_4) {
  const V8TypeIds& ids = *v8_type_ids_for(12, 4);
  const V8Metadata md = metadata_12_4();
  EXPECT_EQ(size_of(8, Object().i32(12, 5), ids, md), 24u) << "one-byte sequential string: 16 + 5, to 8";
  EXPECT_EQ(size_of(0, Object().i32(12, 5), ids, md), 32u) << "two-byte: 16 + 10, to 8";
  EXPECT_FALSE(size_of(1, Object().i32(12, 5), ids, md)) << "a cons string has a fixed size, never a length rule";
  EXPECT_EQ(size_of(ids.fixed_array_first, Object().smi(8, 3), ids, md), 40u);
  EXPECT_EQ(size_of(ids.native_context, Object().smi(8, 3), ids, md), 48u) << "one raw word after the slots";
  EXPECT_EQ(size_of(ids.object_boilerplate, Object().smi(8, 2), ids, md), 48u);
  EXPECT_EQ(size_of(ids.regexp_match_info, Object().smi(8, 2), ids, md), 56u);
  EXPECT_EQ(size_of(ids.weak_array_list, Object().smi(8, 4).smi(16, 1), ids, md), 56u) << "capacity, not length";
  EXPECT_EQ(size_of(ids.byte_array, Object().smi(8, 9), ids, md), 32u);
  EXPECT_EQ(size_of(ids.bytecode_array, Object().smi(8, 9), ids, md), 80u) << "64-byte header in 12.4";
  EXPECT_EQ(size_of(ids.free_space, Object().smi(8, 48), ids, md), 48u) << "bytes before 13.6";
  EXPECT_EQ(size_of(ids.descriptor_array, Object().u16(8, 2), ids, md), 72u);
  EXPECT_EQ(size_of(ids.property_array, Object().smi(8, (77 << 10) | 3), ids, md), 40u);
  EXPECT_EQ(size_of(ids.feedback_vector, Object().i32(8, 2), ids, md), 72u);
  EXPECT_EQ(size_of(ids.feedback_metadata, Object().i32(8, 7), ids, md), 24u) << "16 + 4 x ceil(7 / 6)";
  EXPECT_EQ(size_of(ids.preparse_data, Object().i32(8, 3).i32(12, 2), ids, md), 40u);
  EXPECT_EQ(size_of(ids.big_int, Object().i32(8, 2 << 1), ids, md), 32u);
  EXPECT_EQ(size_of(ids.instruction_stream, Object().i32(24, 100), ids, md), 192u) << "32 + 100, to 64";
  // A function's ScopeInfo: no locals, a function variable and an inferred
  // name (the fixture's `class Order`): 4 + position 2 + 2 + 1 words.
  EXPECT_EQ(size_of(ids.scope_info, Object().smi(8, 0x770e2).smi(24, 0), ids, md), 72u);
  // Two context locals inline (names and infos), no function variable.
  EXPECT_EQ(size_of(ids.scope_info, Object().smi(8, 0x2).smi(24, 2), ids, md), 80u);
  // Past 75 locals the names are one hash table.
  EXPECT_EQ(size_of(ids.scope_info, Object().smi(8, 0x2).smi(24, 80), ids, md), 8u * (6 + 1 + 80));
  EXPECT_TRUE(v8_is_free(ids.free_space, ids) && v8_is_free(ids.filler, ids));
  EXPECT_FALSE(v8_is_free(ids.map, ids));
}

TEST(V8Types, WhatChangedBetweenVersions) {
  const V8Metadata md = metadata_12_4();
  const V8TypeIds& v13 = *v8_type_ids_for(13, 6);
  EXPECT_EQ(size_of(v13.free_space, Object().smi(8, 6), v13, md), 48u) << "13.6 counts tagged words";
  EXPECT_EQ(size_of(v13.feedback_vector, Object().i32(8, 2), v13, md), 64u) << "48-byte header";
  EXPECT_EQ(size_of(v13.feedback_metadata, Object().i32(8, 7).i32(12, 3), v13, md), 32u) << "+ 2 per closure";
  // 13.6 ScopeInfo: flags a u32, position info always (function type 4).
  Object scope;
  scope.i32(8, 0x770e4).smi(24, 0);
  EXPECT_EQ(size_of(v13.scope_info, scope, v13, md), 72u);
  const V8TypeIds& v10 = *v8_type_ids_for(10, 2);
  EXPECT_EQ(size_of(v10.code, Object().i32(40, 100).i32(44, 8), v10, md), 256u) << "128 + 108, to 64";
  EXPECT_EQ(size_of(v10.bytecode_array, Object().smi(8, 1), v10, md), 64u) << "56-byte header in 10.2";
  const V8TypeIds& v11 = *v8_type_ids_for(11, 3);
  V8MapInfo stream;
  stream.rule = v8_size_rule(v11.instruction_stream, v11, md);
  EXPECT_EQ(stream.rule.kind, V8SizeRule::Kind::kInstructionStreamV11) << "sized through its Code object";
  EXPECT_EQ(v8_type_ids_for(9, 9), nullptr);
}

TEST(V8Types, ABuildNumberingTypesOtherwiseIsNotWalked) {
  const V8TypeIds& ids = *v8_type_ids_for(12, 4);
  V8Metadata md = metadata_12_4();
  EXPECT_FALSE(v8_types_mismatch(ids, md));
  md.types["MAP_TYPE"] = 263;
  auto why = v8_types_mismatch(ids, md);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("MAP_TYPE is 263"), std::string::npos) << *why;
  md = metadata_12_4();
  md.types.erase("SCOPE_INFO_TYPE");
  EXPECT_TRUE(v8_types_mismatch(ids, md)) << "an id it cannot check is not assumed";
  md = metadata_12_4();
  md.types.erase("FREE_SPACE_TYPE");
  EXPECT_FALSE(v8_types_mismatch(ids, md)) << "13.6 exports no FREE_SPACE_TYPE: not required";
}

TEST(V8Types, ScopeInfoCountsPastTheObjectAreRefused) {
  const V8TypeIds& ids = *v8_type_ids_for(12, 4);
  const V8Metadata md = metadata_12_4();
  EXPECT_FALSE(size_of(ids.scope_info, Object().smi(8, 0x2).smi(24, 1 << 30), ids, md));
  // A module scope: 12.4 keeps its variable count at 0x20; 10.2's place for
  // it is not known, so such a ScopeInfo is not sized rather than guessed.
  EXPECT_EQ(size_of(ids.scope_info, Object().smi(8, 0x3).smi(24, 0).smi(0x20, 5), ids, md), 8u * (4 + 2 + 2 + 15));
  const V8TypeIds& v10 = *v8_type_ids_for(10, 2);
  EXPECT_FALSE(size_of(v10.scope_info, Object().smi(8, 0x3).smi(24, 0).smi(0x20, 5), v10, md));
}

}  // namespace
