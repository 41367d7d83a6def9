#include "python/python_layout.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "base/checked_bytes.h"

namespace oomsnap {
namespace {

// Word `index` of the debug offsets; 0 when outside them (parse checks the
// length first, so that only happens if the field indexes below are wrong).
uint64_t field(ByteView b, size_t index) {
  uint64_t v = 0;
  b.read_u64(uint64_t{index} * 8, v);
  return v;
}

// Does a field of `width` bytes at `off` fit a struct of `size` bytes?
bool fits(uint64_t off, uint64_t width, uint64_t size) { return in_bounds(off, width, size); }

std::string field_error(const char* what, uint64_t off, uint64_t width, const char* in, uint64_t size) {
  return std::string(what) + " at " + std::to_string(off) + " (" + std::to_string(width) + " bytes) is outside " + in +
         " (" + std::to_string(size) + " bytes)";
}

// Every offset the reader takes from _Py_DebugOffsets against the size the
// same record gives for its struct, and every size against a local bound.
std::optional<std::string> check_debug_offsets(const PyDebugOffsets& d) {
  if (d.runtime_size > kMaxPyStructBytes || d.interp_size > kMaxPyStructBytes)
    return "struct sizes over " + std::to_string(kMaxPyStructBytes) + " bytes (runtime " +
           std::to_string(d.runtime_size) + ", interpreter " + std::to_string(d.interp_size) + ")";
  if (d.gc_size == 0 || d.gc_size > kMaxPyGcStateBytes)
    return "GC state size " + std::to_string(d.gc_size) + " is not in 1.." + std::to_string(kMaxPyGcStateBytes);
  if (d.type_size > kMaxPyStructBytes || d.tuple_size > kMaxPyStructBytes)
    return "object sizes over " + std::to_string(kMaxPyStructBytes) + " bytes";
  if (!fits(d.interpreters_head, 8, d.runtime_size))
    return field_error("interpreters.head", d.interpreters_head, 8, "_PyRuntimeState", d.runtime_size);
  if (!fits(d.interp_next, 8, d.interp_size))
    return field_error("PyInterpreterState.next", d.interp_next, 8, "PyInterpreterState", d.interp_size);
  if (!fits(d.interp_gc, d.gc_size, d.interp_size))
    return field_error("PyInterpreterState.gc", d.interp_gc, d.gc_size, "PyInterpreterState", d.interp_size);
  if (!fits(d.gc_collecting, 4, d.gc_size))
    return field_error("gc.collecting", d.gc_collecting, 4, "the GC state", d.gc_size);
  if (!fits(d.tp_name, 8, d.type_size) || !fits(d.tp_flags, 8, d.type_size))
    return field_error("tp_name/tp_flags", std::max(d.tp_name, d.tp_flags), 8, "PyTypeObject", d.type_size);
  if (!fits(d.tuple_items, 0, d.tuple_size))
    return field_error("PyTupleObject.ob_item", d.tuple_items, 0, "PyTupleObject", d.tuple_size);
  return std::nullopt;
}

}  // namespace

std::optional<PyLayout> python_layout_for(uint32_t version_hex) {
  const int major = static_cast<int>(version_hex >> 24), minor = static_cast<int>((version_hex >> 16) & 0xff);
  if (major != 3 || minor < 8 || minor > 14) return std::nullopt;
  PyLayout L;
  L.minor = minor;
  switch (minor) {
    // 3.8-3.10: offsetof from each version's headers (pyenv 3.8.18, 3.9.18,
    // 3.10.13; tools/dump-cpython-offsets.sh), the GC state as 3.11's.
    case 8:
    case 9:
    case 10:
      L.interpreters_head = 32, L.interp_next = 0, L.interp_gc = minor == 8 ? 0 : 616;
      L.runtime_gc = minor == 8 ? 344 : 0;
      L.gc_head_sets = {{24, 48, 72, 104}};
      L.gc_collecting = 200, L.gc_generation0 = 96, L.gc_long_lived_total = 224;
      L.ht_qualname = minor == 9 ? 856 : 864, L.ht_cached_keys = minor == 9 ? 864 : 872;
      L.ascii_size = 48, L.compact_size = 72;
      L.long_has_lv_tag = false, L.long_zero_has_digit = false;
      L.managed_dict = PyManagedDict::kNone;
      L.dict_keys_v1 = true;
      L.dict_values_items = 0;
      break;
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
      L.interp_obmalloc = 3960;  // offsetof, pyenv 3.12.1 headers
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
      // offsetof, pyenv 3.13.0 headers; live in Debian's 3.13.5 too.
      L.interp_obmalloc = 10800, L.interp_obmalloc_is_pointer = true;
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
      L.gc_state_size = 264;
      // Found live in Debian's 3.14.10: the pointer to the main interpreter's
      // state (a static holding a valid arena table) is at this offset.
      L.interp_obmalloc = 10904, L.interp_obmalloc_is_pointer = true;
      break;
  }
  // Frames inline in generators and frame objects (offsetof from each
  // version's headers; 3.14 read live: code at gen+72, same code fields).
  if (minor >= 11) L.frame_iframe = 24;
  if (minor <= 10) {
    // Generators hold a frame pointer (the default rule); frames are sized
    // from their code (frame_sizeof). offsetof from the 3.8-3.10 headers.
    L.frame_f_code = 32, L.code_nlocals = 28, L.code_stacksize = 32, L.code_freevars = 80, L.code_cellvars = 88;
  } else if (minor == 11) L.gen_code = 16, L.iframe_code = 32, L.code_stacksize = 68, L.code_nlocalsplus = 76;
  else L.gen_code = 72, L.iframe_code = 0, L.code_stacksize = 64, L.code_nlocalsplus = 72;
  L.tp_members = 240;
  L.type_read_size = L.ht_cached_keys + 8;
  return L;
}

std::optional<PyDebugOffsets> parse_py_debug_offsets(std::span<const uint8_t> bytes, int minor, std::string& error) {
  // _Py_DebugOffsets: cookie[8], version, free_threaded, then sub-structs of
  // uint64 fields in declaration order (pycore_runtime.h 3.13,
  // pycore_debug_offsets.h 3.14), each starting with its struct's size.
  // Field indexes below count 8-byte words.
  if (minor != 13 && minor != 14) {
    error = "no debug offsets before 3.13";
    return std::nullopt;
  }
  const size_t words = minor == 13 ? 73 : 95;  // 584 / 760 bytes
  const ByteView b(bytes);
  if (!b.contains(0, words * 8)) {
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
  d.runtime_size = field(b, 3);        // runtime_state: size, finalizing, interpreters_head
  d.interpreters_head = field(b, 5);
  const size_t interp = 6;             // interpreter_state: size, id, next, threads_head, [threads_main,] gc
  d.interp_size = field(b, interp);
  d.interp_next = field(b, interp + 2);
  d.interp_gc = field(b, interp + (minor == 13 ? 4 : 5));
  const size_t interp_fields = minor == 13 ? 13 : 16, thread_fields = 9, frame_fields = minor == 13 ? 6 : 8,
               code_fields = minor == 13 ? 10 : 11;
  const size_t pyobject = interp + interp_fields + thread_fields + frame_fields + code_fields;
  const size_t type_object = pyobject + 2;  // size, tp_name, tp_repr, tp_flags
  d.type_size = field(b, type_object);
  d.tp_name = field(b, type_object + 1);
  d.tp_flags = field(b, type_object + 3);
  const size_t tuple_object = type_object + 4;  // size, ob_item, ob_size
  d.tuple_size = field(b, tuple_object);
  d.tuple_items = field(b, tuple_object + 1);
  // list 3, [set 4 on 3.14], dict 3, float 2, long 3, bytes 3, unicode 4, then gc: size, collecting
  const size_t gc = tuple_object + 3 + 3 + (minor == 14 ? 4 : 0) + 3 + 2 + 3 + 3 + 4;
  d.gc_size = field(b, gc);
  d.gc_collecting = field(b, gc + 1);
  if (auto bad = check_debug_offsets(d)) {
    error = "implausible values in _Py_DebugOffsets: " + *bad;
    return std::nullopt;
  }
  // The version is the runtime's own word for which layout these bytes have:
  // read as 3.X they must say 3.X.
  const uint64_t want = (uint64_t{3} << 8) | static_cast<uint64_t>(minor);  // PY_VERSION_HEX >> 16
  if ((d.version >> 16) != want) {
    char hex[24];
    std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(d.version));
    error = std::string("_Py_DebugOffsets version ") + hex + " is not 3." + std::to_string(minor);
    return std::nullopt;
  }
  return d;
}

std::optional<std::string> apply_py_debug_offsets(PyLayout& L, const PyDebugOffsets& d) {
  if (d.tp_name != L.tp_name || d.tp_flags != L.tp_flags || d.tuple_items != L.tuple_items)
    return "the runtime's debug offsets disagree with the 3." + std::to_string(L.minor) +
           " object layout (tp_name " + std::to_string(d.tp_name) + ", tp_flags " + std::to_string(d.tp_flags) +
           ", tuple items " + std::to_string(d.tuple_items) + ")";
  // The obmalloc pointer lies after the GC state: it moves with its end.
  if (L.interp_obmalloc) {
    const int64_t moved = static_cast<int64_t>(d.interp_gc + d.gc_size) - (L.interp_gc + L.gc_state_size);
    L.interp_obmalloc = static_cast<uint32_t>(L.interp_obmalloc + moved);
  }
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
  L.gc_state_size = static_cast<uint32_t>(d.gc_size);
  L.from_debug_offsets = true;
  if (auto bad = validate_py_layout(L)) return "the runtime's debug offsets give an unusable layout: " + *bad;
  return std::nullopt;
}

uint64_t py_gc_state(const PyLayout& L, uint64_t runtime, uint64_t interp) {
  return L.runtime_gc ? runtime + L.runtime_gc : interp + L.interp_gc;
}

std::optional<std::string> validate_py_layout(const PyLayout& L) {
  const uint64_t gc = L.gc_state_size;
  if (gc == 0 || gc > kMaxPyGcStateBytes)
    return "GC state size " + std::to_string(gc) + " is not in 1.." + std::to_string(kMaxPyGcStateBytes);
  if (L.gc_head_sets.empty()) return "no GC list heads";
  for (const auto& set : L.gc_head_sets) {
    if (set.empty()) return "an empty GC list head set";
    for (uint32_t off : set)
      if (!fits(off, 16, gc)) return field_error("GC list head", off, 16, "the GC state", gc);
    // gc_generation {head, threshold, count}: the youngest list's count.
    if (!fits(uint64_t{set[0]} + 20, 4, gc)) return field_error("generation count", set[0] + 20ull, 4, "the GC state", gc);
  }
  if (!fits(L.gc_collecting, 4, gc)) return field_error("gc.collecting", L.gc_collecting, 4, "the GC state", gc);
  if (L.gc_generation0 && !fits(L.gc_generation0, 8, gc))
    return field_error("gc.generation0", L.gc_generation0, 8, "the GC state", gc);
  if (L.gc_long_lived_total && !fits(L.gc_long_lived_total, 16, gc))
    return field_error("gc.long_lived_total/pending", L.gc_long_lived_total, 16, "the GC state", gc);
  const uint64_t t = L.type_read_size;
  if (t == 0 || t > kMaxPyStructBytes) return "type read size " + std::to_string(t) + " out of range";
  for (uint32_t off : {L.tp_name, L.tp_basicsize, L.tp_itemsize, L.tp_flags, L.tp_members, L.tp_base, L.tp_dict,
                       L.tp_dictoffset, L.ht_qualname, L.ht_cached_keys})
    if (!fits(off, 8, t)) return field_error("type field", off, 8, "the type bytes read", t);
  return std::nullopt;
}

}  // namespace oomsnap
