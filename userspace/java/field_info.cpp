#include "java/field_info.h"

namespace oomsnap {

std::optional<uint32_t> read_unsigned5(std::span<const uint8_t> data, size_t& pos) {
  // UNSIGNED5: bytes 1..191 are "low" (they end a number), 192..255 "high";
  // 0 is never written. Each byte's value less one counts 64^i.
  constexpr uint32_t kExcluded = 1, kLow = 191, kLgHigh = 6, kMaxBytes = 5;
  uint64_t sum = 0;
  for (uint32_t i = 0; i < kMaxBytes; ++i) {
    if (pos + i >= data.size() || data[pos + i] < kExcluded) return std::nullopt;
    const uint32_t b = data[pos + i] - kExcluded;
    sum += static_cast<uint64_t>(b) << (kLgHigh * i);
    if (b < kLow || i == kMaxBytes - 1) {
      pos += i + 1;
      // Five high bytes overflow 32 bits only in a crafted stream.
      if (sum > UINT32_MAX) return std::nullopt;
      return static_cast<uint32_t>(sum);
    }
  }
  return std::nullopt;
}

std::optional<std::vector<JavaFieldEntry>> decode_legacy_fields(std::span<const uint16_t> data, uint32_t java_fields,
                                                                const LegacyFieldLayout& L, std::string& error) {
  if (L.slots == 0 || L.slots > 16 || L.access_flags_slot >= L.slots || L.name_index_slot >= L.slots ||
      L.low_packed_slot >= L.slots || L.high_packed_slot >= L.slots || L.tag_size == 0 || L.tag_size > 8) {
    error = "implausible FieldInfo layout (" + std::to_string(L.slots) + " slots, tag of " +
            std::to_string(L.tag_size) + " bits)";
    return std::nullopt;
  }
  if (java_fields > kMaxJavaFields || static_cast<uint64_t>(java_fields) * L.slots > data.size()) {
    error = std::to_string(java_fields) + " fields do not fit the field array's " + std::to_string(data.size()) +
            " slots";
    return std::nullopt;
  }
  std::vector<JavaFieldEntry> out;
  out.reserve(java_fields);
  const uint32_t tag_mask = (1u << L.tag_size) - 1;
  for (uint32_t i = 0; i < java_fields; ++i) {
    const uint16_t* f = data.data() + static_cast<size_t>(i) * L.slots;
    if (L.internal_flag && (f[L.access_flags_slot] & L.internal_flag)) continue;
    const uint32_t packed = static_cast<uint32_t>(f[L.high_packed_slot]) << 16 | f[L.low_packed_slot];
    JavaFieldEntry e;
    e.name_index = f[L.name_index_slot];
    e.access_flags = f[L.access_flags_slot];
    e.offset_set = (packed & tag_mask) == L.tag_offset;
    e.offset = e.offset_set ? packed >> L.tag_size : 0;
    out.push_back(e);
  }
  return out;
}

std::optional<std::vector<JavaFieldEntry>> decode_field_stream(std::span<const uint8_t> data, const FieldFlagBits& bits,
                                                               std::string& error) {
  size_t pos = 0;
  auto java_fields = read_unsigned5(data, pos);
  auto injected = java_fields ? read_unsigned5(data, pos) : std::nullopt;
  if (!injected) {
    error = "the field stream's counts cannot be decoded";
    return std::nullopt;
  }
  // Every field takes at least five bytes.
  if (*java_fields > kMaxJavaFields || static_cast<uint64_t>(*java_fields) * 5 > data.size() - pos) {
    error = std::to_string(*java_fields) + " fields do not fit the field stream's " + std::to_string(data.size()) +
            " bytes";
    return std::nullopt;
  }
  for (uint32_t b : {bits.initialized, bits.injected, bits.generic, bits.stable, bits.contended})
    if (b > 31) {
      error = "implausible field flag bit " + std::to_string(b);
      return std::nullopt;
    }
  const uint32_t optional_bits = 1u << bits.initialized | 1u << bits.generic | 1u << bits.contended;
  const uint32_t known = optional_bits | 1u << bits.injected | 1u << bits.stable;
  std::vector<JavaFieldEntry> out;
  out.reserve(*java_fields);
  for (uint32_t i = 0; i < *java_fields; ++i) {
    uint32_t v[5];
    for (uint32_t& x : v) {
      auto n = read_unsigned5(data, pos);
      if (!n) {
        error = "field " + std::to_string(i) + " runs off the field stream's " + std::to_string(data.size()) + " bytes";
        return std::nullopt;
      }
      x = *n;
    }
    const uint32_t flags = v[4];
    if (flags & ~known) {
      error = "field " + std::to_string(i) + " has field flags " + std::to_string(flags) +
              " with bits this reader does not know (their optional numbers cannot be skipped)";
      return std::nullopt;
    }
    for (int k = __builtin_popcount(flags & optional_bits); k > 0; --k)
      if (!read_unsigned5(data, pos)) {
        error = "field " + std::to_string(i) + "'s optional numbers run off the field stream";
        return std::nullopt;
      }
    out.push_back({v[0], v[3], v[2], true});
  }
  return out;
}

}  // namespace oomsnap
