// V8's v8dbg_* metadata as pairs (the byte-image side; the live binaries are
// checked in tests/integration/node_snapshot_test.cpp).
#include "node/v8_metadata.h"

#include <gtest/gtest.h>

using namespace oomsnap;

namespace {

using Pairs = std::vector<std::pair<std::string, uint32_t>>;

// What an official Node 22 (V8 12.4) build exports, in part.
Pairs node22() {
  return {{"v8dbg_TaggedSize", 8},
          {"v8dbg_SystemPointerSize", 8},
          {"v8dbg_HeapObjectTag", 1},
          {"v8dbg_HeapObjectTagMask", 3},
          {"v8dbg_SmiTag", 0},
          {"v8dbg_SmiTagMask", 1},
          {"v8dbg_SmiShiftSize", 31},
          {"v8dbg_class_HeapObject__map__Map", 0},
          {"v8dbg_class_Map__instance_type__uint16_t", 12},
          {"v8dbg_class_Map__constructor_or_back_pointer__Tagged_Object_", 32},
          {"v8dbg_class_JSFunction__shared__Tagged_SharedFunctionInfo_", 32},
          {"v8dbg_class_FixedArrayBase__length__SMI", 8},
          {"v8dbg_type_JSObject__JS_OBJECT_TYPE", 1057},
          {"v8dbg_type_Map__MAP_TYPE", 180},
          {"v8dbg_frametype_JavaScriptFrame", 5},
          {"not_v8dbg_TaggedSize", 4}};
}

TEST(V8Metadata, ConstantsFieldsAndTypesAreReadByName) {
  std::string why;
  auto md = parse_v8_metadata(node22(), why);
  ASSERT_TRUE(md) << why;
  EXPECT_EQ(md->constant("TaggedSize"), 8);
  EXPECT_EQ(md->constant("frametype_JavaScriptFrame"), 5);
  EXPECT_EQ(md->field("Map", "instance_type"), 12);
  // The type suffix is dropped: 12.4 spells it Tagged_Object_, 11.3 Object.
  EXPECT_EQ(md->field("Map", "constructor_or_back_pointer"), 32);
  EXPECT_EQ(md->field("JSFunction", "shared"), 32);
  EXPECT_EQ(md->field("HeapObject", "map"), 0);
  EXPECT_EQ(md->type("JS_OBJECT_TYPE"), 1057);
  EXPECT_EQ(md->class_of_type.at(180), "Map");
  EXPECT_FALSE(md->field("Map", "no_such_field"));
  EXPECT_FALSE(md->constant("not_v8dbg_TaggedSize")) << "names without the prefix are not V8's";
  EXPECT_FALSE(unsupported_tagging(*md));
}

TEST(V8Metadata, OlderSpellingOfTheFieldTypeReadsTheSame) {
  Pairs p = node22();
  p.emplace_back("v8dbg_class_SharedFunctionInfo__name_or_scope_info__Object", 16);
  std::string why;
  auto md = parse_v8_metadata(p, why);
  ASSERT_TRUE(md) << why;
  EXPECT_EQ(md->field("SharedFunctionInfo", "name_or_scope_info"), 16);
}

TEST(V8Metadata, ASetThatIsNotV8sIsRefusedWithWhy) {
  std::string why;
  EXPECT_FALSE(parse_v8_metadata({{"v8dbg_TaggedSize", 8}}, why));
  EXPECT_NE(why.find("HeapObject.map"), std::string::npos) << why;
  Pairs flood(kMaxV8dbgSymbols + 1, {"v8dbg_x", 1});
  why.clear();
  EXPECT_FALSE(parse_v8_metadata(flood, why));
  EXPECT_NE(why.find("more than"), std::string::npos) << why;
}

TEST(V8Metadata, MalformedNamesAreSkippedNotMisread) {
  Pairs p = node22();
  p.emplace_back("v8dbg_class___map__Map", 99);         // no class
  p.emplace_back("v8dbg_class_Map", 99);                // no field
  p.emplace_back("v8dbg_type_Big__BIG_TYPE", 0x10000);  // not a 16-bit instance type
  p.emplace_back("v8dbg_class_Map__instance_type__uint8_t", 99);  // a duplicate keeps the first
  p.emplace_back("v8dbg_" + std::string(kMaxV8dbgName, 'x'), 1);  // too long
  std::string why;
  auto md = parse_v8_metadata(p, why);
  ASSERT_TRUE(md) << why;
  EXPECT_EQ(md->field("Map", "instance_type"), 12);
  EXPECT_FALSE(md->type("BIG_TYPE"));
  EXPECT_EQ(md->fields.count(".map"), 0u);
  EXPECT_EQ(md->constants.size(), 8u) << "the seven tagging constants and the frame type only";
}

TEST(V8Metadata, PointerCompressionAndUnknownTaggingAreNamed) {
  std::string why;
  Pairs compressed = node22();
  compressed[0].second = 4;  // TaggedSize 4 with 8-byte system pointers
  auto md = parse_v8_metadata(compressed, why);
  ASSERT_TRUE(md) << why;
  auto reason = unsupported_tagging(*md);
  ASSERT_TRUE(reason);
  EXPECT_NE(reason->find("pointer-compressed"), std::string::npos) << *reason;

  Pairs shifted = node22();
  shifted[6].second = 0;  // 31-bit Smis in the low half
  md = parse_v8_metadata(shifted, why);
  ASSERT_TRUE(md);
  reason = unsupported_tagging(*md);
  ASSERT_TRUE(reason);
  EXPECT_NE(reason->find("unknown V8 tagging"), std::string::npos) << *reason;

  Pairs no_pointer_size = node22();
  no_pointer_size.erase(no_pointer_size.begin() + 1);
  md = parse_v8_metadata(no_pointer_size, why);
  ASSERT_TRUE(md);
  EXPECT_TRUE(unsupported_tagging(*md)) << "a constant it needs is missing: not guessed";
}

}  // namespace
