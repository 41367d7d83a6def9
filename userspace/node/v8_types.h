// The instance types a heap walk must size or tell apart, per V8 version,
// and the size rule of each (docs/readers/node-layouts.md, section 4). Most
// of these ids are not in the binary's v8dbg_type_ list (Torque numbers them
// at build time); they were read from each official binary's own
// InstanceType printer and checked by walking every page of a live heap.
// A build whose v8dbg_ ids disagree with the entry (another configuration of
// the same V8) is not walked: v8_types_match says why.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "node/v8_metadata.h"
#include "node/v8_object_walk.h"

namespace oomsnap {

struct V8TypeIds {
  uint16_t fixed_array_first = 0, fixed_array_last = 0;  // FixedArray-shaped: 16 + 8 x Smi length
  uint16_t context_first = 0, context_last = 0, native_context = 0;
  uint16_t byte_array = 0, bytecode_array = 0, fixed_double_array = 0, sloppy_arguments = 0;
  uint16_t descriptor_array = 0, strong_descriptor_array = 0, weak_fixed_array = 0, transition_array = 0;
  uint16_t code = 0, instruction_stream = 0;  // 0: the version has none
  // 12.4+: an InstructionStream's body size is its own (11.3 keeps it in its Code).
  bool instruction_stream_sized = false;
  uint16_t feedback_metadata = 0, feedback_vector = 0, preparse_data = 0, property_array = 0;
  uint16_t scope_info = 0, weak_array_list = 0, big_int = 0;
  uint16_t filler = 0, free_space = 0, map = 0;
  // Outside the FixedArray range from 12.4 on (0 before): 16 + 8n, or with
  // a larger header.
  uint16_t closure_feedback_cell_array = 0, object_boilerplate = 0, script_context_table = 0;
  uint16_t array_list = 0, regexp_match_info = 0;
  uint16_t trusted_fixed_array = 0, trusted_byte_array = 0, protected_fixed_array = 0;
  uint32_t bytecode_header = 0, feedback_vector_header = 0;
  bool free_space_in_words = false;      // 13.6: FreeSpace counts tagged words
  bool code_v10 = false;                 // 10.2: Code objects carry their instructions
  bool scope_flags_u32 = false, scope_position_always = false;
  uint8_t scope_module_type = 3, scope_module_count_at = 0;  // 0: module scopes not sized
  bool feedback_closure_slots = false;
};

// The entry for V8 major.minor, nullptr when there is none.
const V8TypeIds* v8_type_ids_for(uint32_t major, uint32_t minor);

// Whether this build numbers its types as the entry does: the ids the
// binary exports (MAP_TYPE, FIXED_ARRAY_TYPE, BYTE_ARRAY_TYPE, SCOPE_INFO_TYPE,
// FREE_SPACE_TYPE where exported) must equal the entry's. nullopt when they
// do; the first difference otherwise.
std::optional<std::string> v8_types_mismatch(const V8TypeIds& ids, const V8Metadata& md);

// How an object of this instance type is sized when its map says "variable".
V8SizeRule v8_size_rule(uint16_t instance_type, const V8TypeIds& ids, const V8Metadata& md);

// Free space or a filler: memory V8 keeps, not an object.
bool v8_is_free(uint16_t instance_type, const V8TypeIds& ids);

}  // namespace oomsnap
