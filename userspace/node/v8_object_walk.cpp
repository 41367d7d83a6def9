#include "node/v8_object_walk.h"

namespace oomsnap {

namespace {

// The length field of a kLengthTimes rule, or nullopt when it cannot be one.
std::optional<uint64_t> length_of(const V8SizeRule& r, ByteView object) {
  uint64_t length = 0;
  switch (r.length_bytes) {
    case 8: {
      int64_t word = 0;
      if (!object.read_i64(r.length_at, word) || (word & 0xffffffff) != 0 || word < 0) return std::nullopt;
      length = static_cast<uint64_t>(word >> 32);
      break;
    }
    case 4: {
      int32_t v = 0;
      if (!object.read_i32(r.length_at, v) || v < 0) return std::nullopt;
      length = static_cast<uint64_t>(v);
      break;
    }
    case 2: {
      uint16_t v = 0;
      if (!object.read_u16(r.length_at, v)) return std::nullopt;
      length = v;
      break;
    }
    default:
      return std::nullopt;
  }
  length >>= r.length_shift;
  if (r.length_bits != 0 && r.length_bits < 64) length &= (uint64_t{1} << r.length_bits) - 1;
  return length;
}

uint64_t round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

// A Smi or int32 count no larger than the bytes left (a real object's
// counts never are).
std::optional<uint64_t> smi_at(ByteView object, uint32_t at, uint64_t room) {
  int64_t word = 0;
  if (!object.read_i64(at, word) || (word & 0xffffffff) != 0 || word < 0) return std::nullopt;
  const uint64_t v = static_cast<uint64_t>(word >> 32);
  if (v > room) return std::nullopt;
  return v;
}
std::optional<uint64_t> i32_at(ByteView object, uint32_t at, uint64_t room) {
  int32_t v = 0;
  if (!object.read_i32(at, v) || v < 0 || static_cast<uint64_t>(v) > room) return std::nullopt;
  return static_cast<uint64_t>(v);
}

std::optional<uint64_t> scope_info_size(const V8SizeRule& r, ByteView object, uint64_t room) {
  uint32_t flags = 0;
  if (r.scope_flags_u32) {
    if (!object.read_u32(8, flags)) return std::nullopt;
  } else {  // a Smi: the value is the upper half
    uint64_t word = 0;
    if (!object.read_u64(8, word) || (word & 0xffffffff) != 0) return std::nullopt;
    flags = static_cast<uint32_t>(word >> 32);
  }
  const auto n = smi_at(object, 24, room);  // context_local_count
  if (!n) return std::nullopt;
  const uint32_t type = flags & 0xf;
  const bool module = type == r.scope_module_type;
  uint64_t words = 4;
  if (r.scope_position_always || type <= 4) words += 2;
  uint64_t module_vars = 0;
  if (module) {
    if (r.scope_module_count_at == 0) return std::nullopt;  // where the count is is not known for this version
    auto m = smi_at(object, r.scope_module_count_at, room);
    if (!m) return std::nullopt;
    module_vars = *m;
    words += 1 + 1 + 3 * module_vars;
  }
  words += (*n < 75 ? *n : 1) + *n;
  if (flags & (1u << 10)) words += 1;         // saved class variable
  if (flags & (3u << 12)) words += 2;         // function variable: name and slot
  if (flags & (1u << 14)) words += 1;         // inferred function name
  if (flags & (1u << 22)) words += 1;         // outer scope info
  return words * 8;
}

}  // namespace

std::optional<uint64_t> v8_object_size(const V8MapInfo& map, ByteView object, uint64_t room) {
  if (map.instance_size != 0) return map.instance_size;
  const V8SizeRule& r = map.rule;
  switch (r.kind) {
    case V8SizeRule::Kind::kLengthTimes: {
      if (r.element == 0 || r.align == 0) return std::nullopt;
      const auto length = length_of(r, object);
      // Lengths past the bytes left cannot be real: refused before they multiply.
      if (!length || *length > room) return std::nullopt;
      return round_up(r.header + *length * r.element, r.align);
    }
    case V8SizeRule::Kind::kScopeInfo:
      return scope_info_size(r, object, room);
    case V8SizeRule::Kind::kFeedbackMetadata: {
      const auto slots = i32_at(object, 8, room);
      if (!slots) return std::nullopt;
      uint64_t size = 16 + 4 * ((*slots + 5) / 6);
      if (r.feedback_closure_slots) {
        const auto closures = i32_at(object, 12, room);
        if (!closures) return std::nullopt;
        size += 2 * *closures;
      }
      return round_up(size, 8);
    }
    case V8SizeRule::Kind::kPreparseData: {
      const auto data = i32_at(object, 8, room), children = i32_at(object, 12, room);
      if (!data || !children) return std::nullopt;
      return round_up(16 + *data, 8) + 8 * *children;
    }
    case V8SizeRule::Kind::kCodeV10: {
      const auto instructions = i32_at(object, 40, room), metadata = i32_at(object, 44, room);
      if (!instructions || !metadata) return std::nullopt;
      return round_up(128 + *instructions + *metadata, 64);
    }
    case V8SizeRule::Kind::kFixed:
    case V8SizeRule::Kind::kInstructionStreamV11:  // needs a read: walk_v8_run's `remote`
    case V8SizeRule::Kind::kUnknown:
      break;
  }
  return std::nullopt;
}

}  // namespace oomsnap
