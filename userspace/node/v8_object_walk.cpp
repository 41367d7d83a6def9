#include "node/v8_object_walk.h"

namespace oomsnap {

std::optional<uint64_t> v8_object_size(const V8MapInfo& map, ByteView object) {
  if (map.instance_size != 0) return map.instance_size;
  const V8SizeRule& r = map.rule;
  if (r.kind != V8SizeRule::Kind::kLengthTimes || r.element == 0) return std::nullopt;
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
  if (r.length_bits != 0 && r.length_bits < 64) length &= (uint64_t{1} << r.length_bits) - 1;
  // Lengths past the bytes left cannot be real: refused before they multiply.
  if (length > object.size()) return std::nullopt;
  const uint64_t size = r.header + length * r.element;
  return (size + 7) & ~uint64_t{7};
}

}  // namespace oomsnap
