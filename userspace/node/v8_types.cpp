#include "node/v8_types.h"

namespace oomsnap {
namespace {

// docs/readers/node-layouts.md, tables 4.1 and 4.2: read from each official
// binary's InstanceType printer, every size rule walked on a live heap.
constexpr V8TypeIds k10_2 = [] {
  V8TypeIds t;
  t.fixed_array_first = 179, t.fixed_array_last = 193;
  t.context_first = 207, t.context_last = 216, t.native_context = 214;
  t.byte_array = 194, t.bytecode_array = 195, t.fixed_double_array = 196, t.sloppy_arguments = 198;
  t.descriptor_array = 233, t.strong_descriptor_array = 234, t.weak_fixed_array = 237, t.transition_array = 238;
  t.code = 240, t.instruction_stream = 0;
  t.feedback_metadata = 244, t.feedback_vector = 245, t.preparse_data = 253, t.property_array = 254;
  t.scope_info = 256, t.weak_array_list = 264, t.big_int = 129;
  t.filler = 246, t.free_space = 247, t.map = 250;
  t.bytecode_header = 56, t.feedback_vector_header = 48;
  t.code_v10 = true;
  return t;
}();
constexpr V8TypeIds k11_3 = [] {
  V8TypeIds t;
  t.fixed_array_first = 175, t.fixed_array_last = 189;
  t.context_first = 205, t.context_last = 214, t.native_context = 212;
  t.byte_array = 190, t.bytecode_array = 191, t.fixed_double_array = 192, t.sloppy_arguments = 194;
  t.descriptor_array = 236, t.strong_descriptor_array = 237, t.weak_fixed_array = 240, t.transition_array = 241;
  t.code = 245, t.instruction_stream = 252;  // sized by its Code object (v8_heap_walk.cpp)
  t.feedback_metadata = 248, t.feedback_vector = 249, t.preparse_data = 258, t.property_array = 259;
  t.scope_info = 261, t.weak_array_list = 274, t.big_int = 129;
  t.filler = 250, t.free_space = 251, t.map = 255;
  t.bytecode_header = 54, t.feedback_vector_header = 56;
  return t;
}();
constexpr V8TypeIds k12_4 = [] {
  V8TypeIds t;
  t.fixed_array_first = 174, t.fixed_array_last = 185;
  t.context_first = 190, t.context_last = 199, t.native_context = 197;
  t.byte_array = 186, t.bytecode_array = 205, t.fixed_double_array = 188, t.sloppy_arguments = 189;
  t.descriptor_array = 241, t.strong_descriptor_array = 242, t.weak_fixed_array = 247, t.transition_array = 248;
  t.code = 206, t.instruction_stream = 210, t.instruction_stream_sized = true;
  t.feedback_metadata = 257, t.feedback_vector = 258, t.preparse_data = 268, t.property_array = 269;
  t.scope_info = 272, t.weak_array_list = 287, t.big_int = 129;
  t.filler = 259, t.free_space = 260, t.map = 264;
  t.closure_feedback_cell_array = 252, t.object_boilerplate = 266, t.script_context_table = 273;
  t.array_list = 250, t.regexp_match_info = 271;
  t.trusted_fixed_array = 213, t.trusted_byte_array = 212, t.protected_fixed_array = 211;
  t.bytecode_header = 64, t.feedback_vector_header = 56;
  t.scope_module_count_at = 0x20;
  return t;
}();
constexpr V8TypeIds k13_6 = [] {
  V8TypeIds t;
  t.fixed_array_first = 205, t.fixed_array_last = 216;
  t.context_first = 220, t.context_last = 229, t.native_context = 227;
  t.byte_array = 217, t.bytecode_array = 186, t.fixed_double_array = 218, t.sloppy_arguments = 219;
  t.descriptor_array = 252, t.strong_descriptor_array = 253, t.weak_fixed_array = 256, t.transition_array = 257;
  t.code = 187, t.instruction_stream = 192, t.instruction_stream_sized = true;
  t.feedback_metadata = 265, t.feedback_vector = 266, t.preparse_data = 276, t.property_array = 277;
  t.scope_info = 280, t.weak_array_list = 295, t.big_int = 129;
  t.filler = 267, t.free_space = 268, t.map = 272;
  t.closure_feedback_cell_array = 261, t.object_boilerplate = 274, t.script_context_table = 281;
  t.array_list = 259, t.regexp_match_info = 279;
  t.trusted_fixed_array = 197, t.trusted_byte_array = 196, t.protected_fixed_array = 193;
  t.bytecode_header = 64, t.feedback_vector_header = 48;
  t.free_space_in_words = true;
  t.scope_flags_u32 = true, t.scope_position_always = true, t.scope_module_type = 5, t.scope_module_count_at = 0x30;
  t.feedback_closure_slots = true;
  return t;
}();

struct Entry {
  uint32_t major, minor;
  const V8TypeIds* ids;
};
constexpr Entry kEntries[] = {{10, 2, &k10_2}, {11, 3, &k11_3}, {12, 4, &k12_4}, {13, 6, &k13_6}};

V8SizeRule array_rule(uint32_t header, uint32_t element, uint8_t length_bytes = 8, uint32_t length_at = 8) {
  V8SizeRule r;
  r.kind = V8SizeRule::Kind::kLengthTimes;
  r.header = header;
  r.element = element;
  r.length_bytes = length_bytes;
  r.length_at = length_at;
  return r;
}

}  // namespace

const V8TypeIds* v8_type_ids_for(uint32_t major, uint32_t minor) {
  for (const auto& e : kEntries)
    if (e.major == major && e.minor == minor) return e.ids;
  return nullptr;
}

std::optional<std::string> v8_types_mismatch(const V8TypeIds& ids, const V8Metadata& md) {
  struct Check {
    const char* name;
    uint16_t want;
  };
  const Check checks[] = {{"MAP_TYPE", ids.map},
                          {"FIXED_ARRAY_TYPE", ids.fixed_array_first},
                          {"BYTE_ARRAY_TYPE", ids.byte_array},
                          {"SCOPE_INFO_TYPE", ids.scope_info},
                          {"FREE_SPACE_TYPE", ids.free_space}};
  for (const auto& c : checks) {
    const auto have = md.type(c.name);
    if (c.want == 0 || (!have && std::string(c.name) == "FREE_SPACE_TYPE")) continue;  // 13.6 does not export it
    if (!have) return std::string("the binary does not export v8dbg_type_ for ") + c.name;
    if (*have != c.want)
      return std::string(c.name) + " is " + std::to_string(*have) + " in this build, " + std::to_string(c.want) +
             " in the official build of this V8 version";
  }
  return std::nullopt;
}

bool v8_is_free(uint16_t t, const V8TypeIds& ids) { return t == ids.free_space || t == ids.filler; }

V8SizeRule v8_size_rule(uint16_t t, const V8TypeIds& ids, const V8Metadata& md) {
  // Strings: a sequential one's characters follow its 16-byte header.
  const auto first_nonstring = md.constant("FirstNonstringType");
  if (first_nonstring && t < *first_nonstring) {
    const auto rep_mask = md.constant("StringRepresentationMask"), seq = md.constant("SeqStringTag");
    const auto enc_mask = md.constant("StringEncodingMask"), one_byte = md.constant("OneByteStringTag");
    const auto chars = md.field("SeqOneByteString", "chars"), length = md.field("String", "length");
    if (!rep_mask || !seq || !enc_mask || !one_byte || !chars || !length || (t & *rep_mask) != *seq) return {};
    return array_rule(static_cast<uint32_t>(*chars), (t & *enc_mask) == *one_byte ? 1 : 2, 4,
                      static_cast<uint32_t>(*length));
  }
  if ((t >= ids.fixed_array_first && t <= ids.fixed_array_last) || (t >= ids.context_first && t <= ids.context_last)) {
    // A native context keeps one raw word after its slots.
    return array_rule(t == ids.native_context ? 24 : 16, 8);
  }
  auto is = [t](uint16_t id) { return id != 0 && t == id; };
  if (is(ids.fixed_double_array) || is(ids.weak_fixed_array) || is(ids.transition_array) ||
      is(ids.closure_feedback_cell_array) || is(ids.trusted_fixed_array) || is(ids.protected_fixed_array))
    return array_rule(16, 8);
  for (const char* name : {"EMBEDDER_DATA_ARRAY_TYPE", "TRUSTED_WEAK_FIXED_ARRAY_TYPE", "PROTECTED_WEAK_FIXED_ARRAY_TYPE"})
    if (auto id = md.type(name); id && *id == t) return array_rule(16, 8);
  if (is(ids.sloppy_arguments)) return array_rule(32, 8);
  if (is(ids.object_boilerplate) || is(ids.script_context_table)) return array_rule(32, 8);
  if (is(ids.array_list) || is(ids.weak_array_list)) return array_rule(24, 8);
  if (is(ids.regexp_match_info)) return array_rule(40, 8);
  if (is(ids.byte_array) || is(ids.trusted_byte_array)) return array_rule(16, 1);
  if (is(ids.bytecode_array)) return array_rule(ids.bytecode_header, 1);
  if (is(ids.free_space)) return array_rule(0, ids.free_space_in_words ? 8 : 1);
  if (is(ids.descriptor_array) || is(ids.strong_descriptor_array)) return array_rule(24, 24, 2);
  if (is(ids.property_array)) {
    V8SizeRule r = array_rule(16, 8);
    r.length_bits = 10;
    return r;
  }
  if (is(ids.feedback_vector)) return array_rule(ids.feedback_vector_header, 8, 4);
  if (is(ids.big_int)) {
    V8SizeRule r = array_rule(16, 8, 4);
    r.length_shift = 1;
    r.length_bits = 30;
    return r;
  }
  if (is(ids.instruction_stream) && ids.instruction_stream_sized) {
    // 12.4, 13.6: a 32-byte header and the body size at 24, in 64-byte units.
    V8SizeRule r = array_rule(32, 1, 4, 24);
    r.align = 64;
    return r;
  }
  V8SizeRule r;
  if (is(ids.scope_info)) {
    r.kind = V8SizeRule::Kind::kScopeInfo;
    r.scope_flags_u32 = ids.scope_flags_u32;
    r.scope_position_always = ids.scope_position_always;
    r.scope_module_type = ids.scope_module_type;
    r.scope_module_count_at = ids.scope_module_count_at;
  } else if (is(ids.feedback_metadata)) {
    r.kind = V8SizeRule::Kind::kFeedbackMetadata;
    r.feedback_closure_slots = ids.feedback_closure_slots;
  } else if (is(ids.preparse_data)) {
    r.kind = V8SizeRule::Kind::kPreparseData;
  } else if (is(ids.code) && ids.code_v10) {
    r.kind = V8SizeRule::Kind::kCodeV10;
  } else if (is(ids.instruction_stream)) {
    r.kind = V8SizeRule::Kind::kInstructionStreamV11;
  }
  return r;
}

}  // namespace oomsnap
