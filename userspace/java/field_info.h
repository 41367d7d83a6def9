// A HotSpot class's field table, decoded from the bytes the JVM keeps it in
// (pure: no target, no reads), so that a field is found by its name the way
// the JVM itself finds it, not at an offset guessed per JDK version.
//
// Two encodings, both described by the JVM's own VMStructs constants:
// - JDK 8-20, InstanceKlass::_fields: an Array<u2> of FieldInfo::field_slots
//   u2s per field (access flags, name index, ..., the offset packed in the
//   low and high slots with a FIELDINFO_TAG_SIZE-bit tag that says whether
//   the offset is set yet);
// - JDK 21+, InstanceKlass::_fieldinfo_stream: an Array<u1> of UNSIGNED5
//   numbers (Pack200's variable-length coding: a byte below 192 ends a
//   number, each byte adds its value less one times 64 to the power of its
//   place, at most five bytes): the Java and injected field counts, then per
//   field its name index, signature index, offset, access flags and field
//   flags, and the optional numbers its field flags announce.
// Bytes from the target are untrusted: counts are bounded by the bytes there
// are, a number may not run off the end, and unknown field flags (whose
// optional numbers cannot be skipped) end the decoding with an error.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace oomsnap {

struct JavaFieldEntry {
  uint32_t name_index = 0;  // into the class's constant pool
  uint32_t access_flags = 0;  // JVM_ACC_* as in the class file (ACC_STATIC = 0x0008)
  uint32_t offset = 0;  // in the object, or for a static field in the class's mirror
  bool offset_set = false;  // false: not laid out yet (JDK 8-20's tag)
};

inline constexpr uint32_t kJavaAccStatic = 0x0008;

// JDK 8-20's FieldInfo layout, from VMStructs' int constants.
struct LegacyFieldLayout {
  uint32_t slots = 6;  // FieldInfo::field_slots
  uint32_t access_flags_slot = 0, name_index_slot = 1, low_packed_slot = 4, high_packed_slot = 5;
  uint32_t tag_size = 2;    // FIELDINFO_TAG_SIZE
  uint32_t tag_offset = 1;  // FIELDINFO_TAG_OFFSET
  // JVM_ACC_FIELD_INTERNAL (an injected field, named by a VM symbol, not
  // the constant pool); 0 when the JVM exports none (JDK 8: its injected
  // fields come after the Java ones).
  uint32_t internal_flag = 0;
};

// JDK 21+'s field flag bits (FieldInfo::FieldFlags::_ff_*): the optional
// numbers follow a field in this order when their bits are set.
struct FieldFlagBits {
  uint32_t initialized = 0, injected = 1, generic = 2, stable = 3, contended = 4;
};

// At most this many fields decoded (a class has at most 65535).
inline constexpr size_t kMaxJavaFields = 65535;

// The first `java_fields` fields of JDK 8-20's u2 array (the Java ones;
// injected fields and generic signatures follow them). nullopt + error when
// the array is shorter than they need or the layout does not fit its slots.
std::optional<std::vector<JavaFieldEntry>> decode_legacy_fields(std::span<const uint16_t> data, uint32_t java_fields,
                                                                const LegacyFieldLayout& layout, std::string& error);

// The Java fields of JDK 21+'s stream (the injected ones after them are not
// decoded). nullopt + error when a number runs off the end, a count exceeds
// what the bytes can hold, or a field has a flag bit not in `bits`.
std::optional<std::vector<JavaFieldEntry>> decode_field_stream(std::span<const uint8_t> data, const FieldFlagBits& bits,
                                                               std::string& error);

// One UNSIGNED5 number at data[pos], pos moved past it; nullopt when it runs
// off the end or holds the excluded byte 0.
std::optional<uint32_t> read_unsigned5(std::span<const uint8_t> data, size_t& pos);

}  // namespace oomsnap
