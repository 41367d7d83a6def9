// Where CPython keeps what the heap reader needs, per minor version (x86_64,
// 3.8 to 3.14).
// The version decides the layout; on 3.13+ the runtime's own _Py_DebugOffsets
// (the first member of _PyRuntime) supplies the interpreter/GC offsets and is
// cross-checked against the table. Facts and their sources:
// ../shared/reference/runtime-layouts.md section B, re-verifiable with
// tools/dump-cpython-offsets.sh against each version's headers.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace oomsnap {

// How an instance's attribute values hang off it when its type manages the dict.
enum class PyManagedDict {
  kNone,              // 3.8-3.10: a dict* at tp_dictoffset, no managed dict
  kValuesBeforeDict,  // 3.11: values* at obj-32, dict* at obj-24
  kTaggedDictOrValues,  // 3.12: obj-24 holds values|1 or a dict*
  kInlineValues,      // 3.13+: dict* at obj-24, values inline at obj+tp_basicsize
};

struct PyLayout {
  int minor = 0;  // 8 to 14
  bool from_debug_offsets = false;

  // _PyRuntimeState and PyInterpreterState
  uint32_t interpreters_head = 0;
  uint32_t interp_next = 0;
  uint32_t interp_gc = 0;
  // 3.8: one GC state for the process, in _PyRuntimeState (3.9 moved it into
  // each interpreter). Nonzero: _PyRuntime + runtime_gc, interp_gc unused.
  uint32_t runtime_gc = 0;
  // struct _gc_runtime_state: candidate sets of list-head offsets (the
  // generations, then the permanent generation); the first whose heads are
  // all well-formed circular lists wins. Several sets only where a build
  // detail moves them (Debian's 3.13 packs PyGC_Head to 4-byte alignment).
  std::vector<std::vector<uint32_t>> gc_head_sets;
  uint32_t gc_collecting = 0;
  // Offset of `PyGC_Head *generation0` (== &generations[0].head), which
  // names the right head set without racing the target's list updates; 0
  // where the layout has none (3.14's incremental GC).
  uint32_t gc_generation0 = 0;
  // long_lived_total, then long_lived_pending: the objects the oldest
  // generation held after the last full collection plus those promoted since;
  // the estimate behind `coverage` when that list is cut short. 0 = unknown.
  uint32_t gc_long_lived_total = 0;
  // sizeof(struct _gc_runtime_state): the bytes read for it, which every GC
  // offset above (plus its field's width) must fit in (validate_py_layout).
  uint32_t gc_state_size = 240;
  // The interpreter's obmalloc state (struct _obmalloc_state, whose `mgmt`
  // holds the arena table): 3.12 has it inline in PyInterpreterState, 3.13+
  // a pointer to it there (the main interpreter's is a static). 0 before
  // 3.12, where the table is a static of Objects/obmalloc.c (PythonRuntime).
  uint32_t interp_obmalloc = 0;
  bool interp_obmalloc_is_pointer = false;

  // PyTypeObject / PyHeapTypeObject
  uint32_t tp_name = 24, tp_basicsize = 32, tp_itemsize = 40, tp_flags = 168, tp_members = 0,
           tp_base = 256, tp_dict = 264, tp_dictoffset = 288;
  uint32_t ht_qualname = 0, ht_cached_keys = 0;
  uint32_t type_read_size = 0;  // bytes read per type object (covers every field above)

  // Objects
  uint32_t tuple_items = 24;           // PyTupleObject.ob_item
  uint32_t ascii_size = 40, compact_size = 56;  // sizeof(PyASCIIObject), sizeof(PyCompactUnicodeObject)
  bool long_has_lv_tag = true;         // 3.12+: ndigits = lv_tag >> 3; 3.11: |ob_size|
  bool long_zero_has_digit = true;     // 3.11+: int.__sizeof__ counts at least one digit (0 is 28, 24 before)
  // PyDictKeysObject: 3.11+ {refcnt, log2_size u8, log2_index_bytes u8, kind u8,
  // version u32, usable, nentries, indices} (32-byte header); 3.8-3.10
  // {refcnt, dk_size, dk_lookup, usable, nentries, indices} (40 bytes), index
  // width from dk_size, entries always {hash, key, value}.
  bool dict_keys_v1 = false;
  uint32_t bytearray_alloc = 24;       // PyByteArrayObject.ob_alloc
  PyManagedDict managed_dict = PyManagedDict::kInlineValues;
  uint32_t dict_values_items = 0;      // offsetof(PyDictValues, values); 3.13+: u8 capacity at 0, valid at 3
  // 3.11+: generators, coroutines, async generators and frame objects hold an
  // interpreter frame inline. Their types have tp_itemsize 8 but they are no
  // PyVarObject (offset 16 is gi_code / f_back): sys.getsizeof is basicsize +
  // (co_nlocalsplus + co_stacksize) * 8 of their code object. 0 where the
  // default rule holds (a frame is a PyVarObject before 3.11).
  uint32_t gen_code = 0;          // the code object pointer in a generator (3.11 gi_code; 3.12+ gi_iframe.f_code/f_executable)
  uint32_t frame_iframe = 0;      // PyFrameObject.f_frame
  uint32_t iframe_code = 0;       // _PyInterpreterFrame.f_code (3.11) / f_code, f_executable (3.12+)
  uint32_t code_stacksize = 0, code_nlocalsplus = 0;  // PyCodeObject int fields
  // 3.8-3.10: a frame object is a PyVarObject whose ob_size can exceed what
  // frame_sizeof counts (frames are reused): sizeof(PyFrameObject) +
  // (co_stacksize + co_nlocals + len(co_cellvars) + len(co_freevars) - 1) * 8.
  // 0 from 3.11.
  uint32_t frame_f_code = 0;       // PyFrameObject.f_code
  uint32_t code_nlocals = 0, code_cellvars = 0, code_freevars = 0;
};

// The built-in layout for a PY_VERSION_HEX; nullopt for unsupported versions.
std::optional<PyLayout> python_layout_for(uint32_t version_hex);

// What _Py_DebugOffsets says (3.13+). Parsed from its bytes; validated (cookie,
// version, sane ranges). free_threaded is reported, not rejected here.
struct PyDebugOffsets {
  uint64_t version = 0;
  bool free_threaded = false;
  uint64_t interpreters_head = 0, interp_next = 0, interp_gc = 0;
  uint64_t gc_size = 0, gc_collecting = 0;
  uint64_t tp_name = 0, tp_flags = 0, tuple_items = 0;
  // The sizes the runtime gives for the structs those offsets index; every
  // offset is checked against its struct's size, every size against a local
  // bound (kMaxPyStructBytes, kMaxPyGcStateBytes).
  uint64_t runtime_size = 0, interp_size = 0, type_size = 0, tuple_size = 0;
};
constexpr size_t kPyDebugOffsetsReadSize = 768;
constexpr uint64_t kMaxPyStructBytes = uint64_t{1} << 22;  // _PyRuntimeState is ~300 KiB in 3.14
constexpr uint64_t kMaxPyGcStateBytes = 4096;             // 240-264 bytes in 3.11-3.14
std::optional<PyDebugOffsets> parse_py_debug_offsets(std::span<const uint8_t> bytes, int minor, std::string& error);

// Applies debug offsets to a table layout: takes the interpreter/GC offsets
// from the runtime, and picks 3.14's GC list layout by gc_size. Returns an
// error text when the two disagree on a field both know.
std::optional<std::string> apply_py_debug_offsets(PyLayout& layout, const PyDebugOffsets& dbg);

// The address of the GC state of interpreter `interp` (3.8: the runtime's).
uint64_t py_gc_state(const PyLayout& layout, uint64_t runtime, uint64_t interp);

// Checks that every offset of a layout fits the struct it indexes (GC state
// fields within gc_state_size, type fields within type_read_size, both sizes
// within local bounds); the walker refuses a layout that fails. nullopt = OK.
std::optional<std::string> validate_py_layout(const PyLayout& layout);

}  // namespace oomsnap
