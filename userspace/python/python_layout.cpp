#include "python/python_layout.h"

#include <cstring>

namespace oomsnap {
namespace {

uint64_t field(std::span<const uint8_t> b, size_t index) {
  uint64_t v = 0;
  std::memcpy(&v, b.data() + index * 8, 8);
  return v;
}

}  // namespace

std::optional<PyLayout> python_layout_for(uint32_t version_hex) {
  const int major = static_cast<int>(version_hex >> 24), minor = static_cast<int>((version_hex >> 16) & 0xff);
  if (major != 3 || minor < 11 || minor > 14) return std::nullopt;
  PyLayout L;
  L.minor = minor;
  switch (minor) {
    case 11:
      L.interpreters_head = 40, L.interp_next = 0, L.interp_gc = 648;
      L.gc_head_sets = {{24, 48, 72, 104}};
      L.gc_collecting = 200, L.gc_generation0 = 96, L.gc_long_lived_total = 224;
      L.ht_qualname = 864, L.ht_cached_keys = 872;
      L.ascii_size = 48, L.compact_size = 72;
      L.long_has_lv_tag = false;
      L.managed_dict = PyManagedDict::kValuesBeforeDict;
      L.dict_values_items = 0;
      break;
    case 12:
      L.interpreters_head = 40, L.interp_next = 0, L.interp_gc = 112;
      L.gc_head_sets = {{24, 48, 72, 104}};
      L.gc_collecting = 200, L.gc_generation0 = 96, L.gc_long_lived_total = 224;
      L.ht_qualname = 872, L.ht_cached_keys = 880;
      L.managed_dict = PyManagedDict::kTaggedDictOrValues;
      L.dict_values_items = 0;
      break;
    case 13:
      L.interpreters_head = 632, L.interp_next = 7264, L.interp_gc = 7400;
      // Upstream: generations at +24. Debian (3.13.5-1 on) aligns PyGC_Head to
      // 4 bytes, which moves them to +20; the permanent generation follows the
      // generation0 pointer either way.
      L.gc_head_sets = {{24, 48, 72, 104}, {20, 44, 68, 104}};
      L.gc_collecting = 200, L.gc_generation0 = 96, L.gc_long_lived_total = 224;
      L.ht_qualname = 872, L.ht_cached_keys = 880;
      L.dict_values_items = 8;
      break;
    case 14:
      L.interpreters_head = 808, L.interp_next = 7272, L.interp_gc = 7408;
      // 3.14.5+ (generational again): generations[3] at +24, permanent at +96.
      // 3.14.0-3.14.4 (incremental): young, old[0], old[1], permanent at the
      // same places; apply_py_debug_offsets tells them apart by gc_size.
      L.gc_head_sets = {{24, 48, 72, 96}};
      L.gc_collecting = 192, L.gc_generation0 = 256, L.gc_long_lived_total = 240;
      L.ht_qualname = 872, L.ht_cached_keys = 880;
      L.tuple_items = 32;
      L.dict_values_items = 8;
      break;
  }
  L.tp_members = 240;
  L.type_read_size = L.ht_cached_keys + 8;
  return L;
}

std::optional<PyDebugOffsets> parse_py_debug_offsets(std::span<const uint8_t> b, int minor, std::string& error) {
  // _Py_DebugOffsets: cookie[8], version, free_threaded, then sub-structs of
  // uint64 fields in declaration order (pycore_runtime.h 3.13,
  // pycore_debug_offsets.h 3.14). Field indexes below count 8-byte words.
  const size_t words = minor == 13 ? 73 : 95;  // 584 / 760 bytes
  if (minor != 13 && minor != 14) {
    error = "no debug offsets before 3.13";
    return std::nullopt;
  }
  if (b.size() < words * 8) {
    error = "debug offsets truncated";
    return std::nullopt;
  }
  if (std::memcmp(b.data(), "xdebugpy", 8) != 0) {
    error = "no _Py_DebugOffsets cookie at _PyRuntime";
    return std::nullopt;
  }
  PyDebugOffsets d;
  d.version = field(b, 1);
  d.free_threaded = field(b, 2) != 0;
  d.interpreters_head = field(b, 5);  // runtime_state: size, finalizing, interpreters_head
  const size_t interp = 6;             // interpreter_state: size, id, next, threads_head, [threads_main,] gc
  d.interp_next = field(b, interp + 2);
  d.interp_gc = field(b, interp + (minor == 13 ? 4 : 5));
  const size_t interp_fields = minor == 13 ? 13 : 16, thread_fields = 9, frame_fields = minor == 13 ? 6 : 8,
               code_fields = minor == 13 ? 10 : 11;
  const size_t pyobject = interp + interp_fields + thread_fields + frame_fields + code_fields;
  const size_t type_object = pyobject + 2;  // size, tp_name, tp_repr, tp_flags
  d.tp_name = field(b, type_object + 1);
  d.tp_flags = field(b, type_object + 3);
  const size_t tuple_object = type_object + 4;  // size, ob_item, ob_size
  d.tuple_items = field(b, tuple_object + 1);
  // list 3, [set 4 on 3.14], dict 3, float 2, long 3, bytes 3, unicode 4, then gc: size, collecting
  const size_t gc = tuple_object + 3 + 3 + (minor == 14 ? 4 : 0) + 3 + 2 + 3 + 3 + 4;
  d.gc_size = field(b, gc);
  d.gc_collecting = field(b, gc + 1);
  if (d.interpreters_head >= (1u << 20) || d.interp_gc >= (1u << 20) || d.interp_next >= (1u << 20) ||
      d.gc_size == 0 || d.gc_size > 4096 || d.gc_collecting >= d.gc_size) {
    error = "implausible values in _Py_DebugOffsets";
    return std::nullopt;
  }
  return d;
}

std::optional<std::string> apply_py_debug_offsets(PyLayout& L, const PyDebugOffsets& d) {
  if (d.tp_name != L.tp_name || d.tp_flags != L.tp_flags || d.tuple_items != L.tuple_items)
    return "the runtime's debug offsets disagree with the 3." + std::to_string(L.minor) +
           " object layout (tp_name " + std::to_string(d.tp_name) + ", tp_flags " + std::to_string(d.tp_flags) +
           ", tuple items " + std::to_string(d.tuple_items) + ")";
  L.interpreters_head = static_cast<uint32_t>(d.interpreters_head);
  L.interp_next = static_cast<uint32_t>(d.interp_next);
  L.interp_gc = static_cast<uint32_t>(d.interp_gc);
  L.gc_collecting = static_cast<uint32_t>(d.gc_collecting);
  if (L.minor == 14 && d.gc_size != 240 && d.gc_size != 264)
    return "unknown 3.14 GC state layout (size " + std::to_string(d.gc_size) + ")";
  // 3.14.0-3.14.4 (incremental GC, 240 bytes): young/old[0]/old[1] where the
  // generations are now, and no generation0 pointer.
  if (L.minor == 14 && d.gc_size == 240) L.gc_generation0 = 0, L.gc_long_lived_total = 0;
  if (L.minor == 13 && d.gc_size != 240) return "unknown 3.13 GC state layout (size " + std::to_string(d.gc_size) + ")";
  L.from_debug_offsets = true;
  return std::nullopt;
}

}  // namespace oomsnap
