// HotSpot's field tables from hostile bytes (java/field_info.h): JDK 21+'s
// UNSIGNED5 stream with fuzzed flag bits, and JDK 8-20's u2 array with a
// fuzzed layout and count. Neither may read past its bytes, loop or
// allocate beyond what the bytes can hold.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "java/field_info.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 12) return 0;
  oomsnap::FieldFlagBits bits{data[0] % 40u, data[1] % 40u, data[2] % 40u, data[3] % 40u, data[4] % 40u};
  oomsnap::LegacyFieldLayout L;
  L.slots = data[5] % 20u, L.access_flags_slot = data[6] % 20u, L.name_index_slot = data[7] % 20u;
  L.low_packed_slot = data[8] % 20u, L.high_packed_slot = data[9] % 20u, L.tag_size = data[10] % 12u;
  L.tag_offset = data[11] % 4u, L.internal_flag = data[11] & 0x80 ? 0x400 : 0;
  const std::span<const uint8_t> rest(data + 12, size - 12);
  std::string err;
  auto s = oomsnap::decode_field_stream(rest, bits, err);
  if (s && s->size() * 5 > rest.size()) __builtin_trap();
  std::vector<uint16_t> slots(rest.size() / 2);
  if (!slots.empty()) std::memcpy(slots.data(), rest.data(), slots.size() * 2);
  const uint32_t count = rest.size() >= 2 ? (rest[0] | rest[1] << 8) : 0;
  auto l = oomsnap::decode_legacy_fields(slots, count, L, err);
  if (l && l->size() > count) __builtin_trap();
  return 0;
}
