// The Node reader on hostile bytes: V8 page headers and owner spaces under
// every layout, the v8dbg_ metadata parser, and the object walk over a run
// whose maps, lengths and size rules the input chooses. Nothing may read
// past its bytes, loop, or count more than the run holds.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "node/v8_heap_layout.h"
#include "node/v8_metadata.h"
#include "node/v8_object_walk.h"
#include "node/v8_pages.h"
#include "node/v8_types.h"

using namespace oomsnap;

namespace {

const std::pair<uint32_t, uint32_t> kVersions[] = {{10, 2}, {11, 3}, {12, 4}, {13, 6}};
const char* const kNames[] = {"v8dbg_TaggedSize", "v8dbg_SystemPointerSize", "v8dbg_HeapObjectTag",
                              "v8dbg_SmiShiftSize", "v8dbg_class_HeapObject__map__Map",
                              "v8dbg_class_Map__instance_type__uint16_t", "v8dbg_type_Map__MAP_TYPE",
                              "v8dbg_class___x", "v8dbg_type_X__", "v8dbg_"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 16) return 0;
  const ByteView in(data, size);

  // Page headers and owner spaces, every layout.
  for (const auto& [major, minor] : kVersions) {
    const V8HeapLayout* l = v8_heap_layout_for(major, minor);
    if (!l) __builtin_trap();
    uint64_t addr = 0;
    in.read_u64(0, addr);
    const ByteView half(data, size / 2), rest(data + size / 2, size - size / 2);
    if (auto p = decode_v8_page(*l, addr, half, rest)) {
      if (p->area_start > p->area_end || p->area_end - p->addr > p->size) __builtin_trap();
    }
    (void)decode_v8_space(*l, addr, addr ^ 8, rest);
  }

  // The metadata parser on names the input picks and suffixes.
  std::vector<std::pair<std::string, uint32_t>> pairs;
  for (size_t at = 0; at + 6 <= size && pairs.size() < 64; at += 6) {
    std::string name = kNames[data[at] % (sizeof kNames / sizeof *kNames)];
    name.append(reinterpret_cast<const char*>(data + at + 1), data[at + 1] % 3);
    uint32_t v = 0;
    std::memcpy(&v, data + at + 2, 4);
    pairs.emplace_back(std::move(name), v);
  }
  std::string why;
  if (auto md = parse_v8_metadata(pairs, why)) (void)unsupported_tagging(*md);

  // The walk: four maps whose sizes and rules come from the first 16 bytes;
  // map words are 1..4 (tagged ids), the run is the rest of the input.
  V8MapInfo maps[4];
  for (int i = 0; i < 4; ++i) {
    const uint8_t* m = data + 4 * i;
    maps[i].instance_size = (m[0] % 8) * 8;
    maps[i].rule.kind = static_cast<V8SizeRule::Kind>(m[1] % 8);  // every kind, kUnknown last
    maps[i].rule.header = m[1] >> 1;
    maps[i].rule.length_at = m[2] % 32;
    maps[i].rule.length_bytes = static_cast<uint8_t>(2u << (m[2] >> 6));  // 2, 4, 8, 16
    maps[i].rule.element = m[3] % 9;
    maps[i].rule.length_bits = m[3] >> 4;
    maps[i].name = static_cast<uint32_t>(i);
    maps[i].is_free = m[3] & 0x80;
    maps[i].rule.length_shift = m[0] >> 6;
    maps[i].rule.align = (m[0] & 0x20) ? 64 : 8;
    maps[i].rule.scope_flags_u32 = m[0] & 0x10;
    maps[i].rule.scope_position_always = m[0] & 0x08;
    maps[i].rule.scope_module_count_at = (m[2] & 0x20) ? 0x20 : 0;
    maps[i].rule.feedback_closure_slots = m[2] & 0x10;
    if (m[2] & 0x08) {  // an ArrayBuffer's length and store, where the input says (the walk must bound both)
      maps[i].buffer_length_at = static_cast<uint16_t>(8 + 8 * (m[1] % 8));
      maps[i].buffer_store_at = static_cast<uint16_t>(8 + 8 * (m[3] % 8));
    }
  }
  const size_t run = (size - 16) & ~size_t{7};
  const uint64_t base = 0x100000;
  V8WalkTally tally;
  const auto lookup = [&maps](uint64_t w) -> const V8MapInfo* { return w >= 1 && w <= 4 ? &maps[w - 1] : nullptr; };
  const auto remote = [](const V8MapInfo&, uint64_t, ByteView o) -> std::optional<uint64_t> {
    uint64_t v = 0;  // a remote size the input chooses, as a forged Code object would
    if (!o.read_u64(8, v)) return std::nullopt;
    return v;
  };
  const ByteView bytes(data + 16, run);
  auto r = walk_v8_run(bytes, base, base, base + run, lookup, tally, remote);
  if (tally.bytes + tally.free_bytes > run) __builtin_trap();
  if (r.complete && tally.bytes + tally.free_bytes != run) __builtin_trap();
  if (tally.by_name.size() > 4) __builtin_trap();
  if (tally.buffers > tally.objects || tally.buffer_bytes > tally.buffers * V8WalkTally::kMaxBufferBytes)
    __builtin_trap();
  // Where the walk stopped, the resume it finds must walk to the end.
  if (!r.complete && r.stopped_at >= base && r.stopped_at < base + run) {
    if (auto at = find_v8_resume(bytes, base, r.stopped_at, base + run, lookup, remote)) {
      if (*at <= r.stopped_at || *at >= base + run || (*at - base) % 8 != 0) __builtin_trap();
      V8WalkTally rest;
      if (!walk_v8_run(bytes, base, *at, base + run, lookup, rest, remote).complete) __builtin_trap();
    }
  }
  return 0;
}
