/* Print the x86_64 layout of the CPython internals that an out-of-process
 * heap reader needs, read from a CPython version's own headers (including
 * the Py_BUILD_CORE internal ones).  Output: one "name value" line each.
 *
 * Build (see tools/dump-cpython-offsets.sh, which does this):
 *   gcc -DPy_BUILD_CORE -I<include-dir> -I<arch-include-dir> \
 *       tools/cpython-offsets.c -o cpython-offsets
 * Supports CPython 3.8 .. 3.14 (default build, not free-threaded).
 */
#include <Python.h>
#include <structmember.h>          /* T_OBJECT, T_OBJECT_EX */
#if PY_VERSION_HEX < 0x03090000
#include "internal/pycore_pystate.h"   /* 3.8: _PyRuntimeState, PyInterpreterState, the GC state */
#else
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
#include "internal/pycore_gc.h"
#endif
#if PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_dict.h"
#endif
#include "internal/pycore_object.h"
#if PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"   /* _PyInterpreterFrame, PyFrameObject */
#include "internal/pycore_code.h"
#else
#include <frameobject.h>              /* PyFrameObject (a PyVarObject before 3.11) */
#endif

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if PY_VERSION_HEX < 0x03080000 || PY_VERSION_HEX >= 0x030F0000
#  error "cpython-offsets.c supports CPython 3.8 to 3.14"
#endif
#ifdef Py_GIL_DISABLED
#  error "free-threaded (Py_GIL_DISABLED) headers: layout differs, not supported"
#endif

#define V(name, expr) printf("%s %lld\n", (name), (long long)(expr))
#define OFF(T, f) V("offsetof(" #T ", " #f ")", offsetof(T, f))
#define SZ(T) V("sizeof(" #T ")", sizeof(T))
#define AL(T) V("alignof(" #T ")", _Alignof(T))
#define FLAG(f) printf("%s 0x%lx\n", #f, (unsigned long)(f))

/* Bit position and width of a bit-field member, found by setting it to all
 * ones in a zeroed object and looking which bits of the containing 32-bit
 * word changed (little endian: bit 0 is the least significant bit of the
 * first byte of `state`). */
static void bitfield(const char *name, const void *word) {
    uint32_t w;
    memcpy(&w, word, sizeof w);
    int lo = -1, width = 0;
    for (int i = 0; i < 32; i++)
        if (w >> i & 1) { if (lo < 0) lo = i; width++; }
    printf("PyASCIIObject.state.%s bit=%d width=%d mask=0x%x\n", name, lo, width, w);
}
#define STATE_BIT(field) do { \
        PyASCIIObject o; volatile unsigned int ones = ~0u; \
        memset(&o, 0, sizeof o); o.state.field = ones; \
        bitfield(#field, (const char *)&o + offsetof(PyASCIIObject, state)); \
    } while (0)

int main(void) {
    printf("PY_VERSION %s\n", PY_VERSION);
    printf("PY_VERSION_HEX 0x%08x\n", (unsigned)PY_VERSION_HEX);

    /* --- object headers, GC --- */
    SZ(PyObject);
    SZ(PyVarObject);
    SZ(PyGC_Head);
    AL(PyGC_Head);
    AL(PyObject);
    SZ(struct gc_generation);
    OFF(struct gc_generation, head);
    OFF(struct gc_generation, threshold);
    OFF(struct gc_generation, count);
#if defined(NUM_GENERATIONS)
    V("NUM_GENERATIONS", NUM_GENERATIONS);
#endif
    SZ(struct _gc_runtime_state);
    OFF(struct _gc_runtime_state, trash_delete_later);
    OFF(struct _gc_runtime_state, enabled);
    /* All supported versions, default build, have generations[3]; 3.14.0 to
     * some 3.14.x had young/old[2] in their place (incremental GC).  The
     * program fails to compile on such headers: a reader must then know. */
    OFF(struct _gc_runtime_state, generations);
    OFF(struct _gc_runtime_state, generations[1]);
    OFF(struct _gc_runtime_state, generations[2]);
    OFF(struct _gc_runtime_state, generation0);
    OFF(struct _gc_runtime_state, permanent_generation);
    OFF(struct _gc_runtime_state, generation_stats);
    OFF(struct _gc_runtime_state, collecting);
    OFF(struct _gc_runtime_state, garbage);
    OFF(struct _gc_runtime_state, callbacks);
#if PY_VERSION_HEX >= 0x030E0000
    OFF(struct _gc_runtime_state, heap_size);
#endif
    OFF(struct _gc_runtime_state, long_lived_total);
    OFF(struct _gc_runtime_state, long_lived_pending);

    /* --- interpreter / runtime --- */
    SZ(PyInterpreterState);
    OFF(PyInterpreterState, next);
    OFF(PyInterpreterState, id);
#if PY_VERSION_HEX >= 0x030B0000
    OFF(PyInterpreterState, threads.head);
#else
    OFF(PyInterpreterState, tstate_head);
#endif
#if PY_VERSION_HEX >= 0x03090000
    OFF(PyInterpreterState, gc);
#else
    OFF(_PyRuntimeState, gc);             /* 3.8: one GC state, in the runtime */
#endif
    SZ(_PyRuntimeState);
    OFF(_PyRuntimeState, interpreters.head);
    OFF(_PyRuntimeState, interpreters.main);
#if PY_VERSION_HEX >= 0x030D0000
    OFF(_PyRuntimeState, debug_offsets);
    SZ(_Py_DebugOffsets);
    OFF(_Py_DebugOffsets, cookie);
    OFF(_Py_DebugOffsets, version);
#endif

    /* --- PyTypeObject / PyHeapTypeObject --- */
    SZ(PyTypeObject);
    OFF(PyTypeObject, tp_name);
    OFF(PyTypeObject, tp_basicsize);
    OFF(PyTypeObject, tp_itemsize);
    OFF(PyTypeObject, tp_dealloc);
    OFF(PyTypeObject, tp_flags);
    OFF(PyTypeObject, tp_weaklistoffset);
    OFF(PyTypeObject, tp_members);
    OFF(PyTypeObject, tp_base);
    OFF(PyTypeObject, tp_dict);
    OFF(PyTypeObject, tp_dictoffset);
    OFF(PyTypeObject, tp_mro);
    SZ(PyHeapTypeObject);
    OFF(PyHeapTypeObject, ht_name);
    OFF(PyHeapTypeObject, ht_slots);
    OFF(PyHeapTypeObject, ht_qualname);
    OFF(PyHeapTypeObject, ht_cached_keys);
#if PY_VERSION_HEX >= 0x03090000
    OFF(PyHeapTypeObject, ht_module);
#endif

    /* --- PyMemberDef --- */
    SZ(PyMemberDef);
    OFF(PyMemberDef, name);
    OFF(PyMemberDef, type);
    OFF(PyMemberDef, offset);
    OFF(PyMemberDef, flags);
    OFF(PyMemberDef, doc);
    V("T_OBJECT", T_OBJECT);
    V("T_OBJECT_EX", T_OBJECT_EX);
#ifdef Py_T_OBJECT_EX
    V("Py_T_OBJECT_EX", Py_T_OBJECT_EX);
#endif
#ifdef _Py_T_OBJECT
    V("_Py_T_OBJECT", _Py_T_OBJECT);
#endif
#ifdef Py_READONLY
    V("Py_READONLY", Py_READONLY);
#endif
#ifdef READONLY
    V("READONLY", READONLY);
#endif

    /* --- dict --- */
    SZ(PyDictObject);
    OFF(PyDictObject, ma_used);
#if PY_VERSION_HEX >= 0x030E0000
    OFF(PyDictObject, _ma_watcher_tag);   /* was ma_version_tag */
#else
    OFF(PyDictObject, ma_version_tag);
#endif
    OFF(PyDictObject, ma_keys);
    OFF(PyDictObject, ma_values);
#if PY_VERSION_HEX >= 0x030B0000
    /* Before 3.11 PyDictKeysObject is private to Objects/dict-common.h:
     * {dk_refcnt, dk_size, dk_lookup, dk_usable, dk_nentries, dk_indices[]}. */
    SZ(PyDictKeysObject);
    OFF(PyDictKeysObject, dk_refcnt);
    OFF(PyDictKeysObject, dk_log2_size);
    OFF(PyDictKeysObject, dk_log2_index_bytes);
    OFF(PyDictKeysObject, dk_kind);
    OFF(PyDictKeysObject, dk_version);
    OFF(PyDictKeysObject, dk_usable);
    OFF(PyDictKeysObject, dk_nentries);
    OFF(PyDictKeysObject, dk_indices);
    SZ(PyDictKeyEntry);
    OFF(PyDictKeyEntry, me_hash);
    OFF(PyDictKeyEntry, me_key);
    OFF(PyDictKeyEntry, me_value);
    SZ(PyDictUnicodeEntry);
    OFF(PyDictUnicodeEntry, me_key);
    OFF(PyDictUnicodeEntry, me_value);
    V("DICT_KEYS_GENERAL", DICT_KEYS_GENERAL);
    V("DICT_KEYS_UNICODE", DICT_KEYS_UNICODE);
    V("DICT_KEYS_SPLIT", DICT_KEYS_SPLIT);
#endif
#ifdef SHARED_KEYS_MAX_SIZE
    V("SHARED_KEYS_MAX_SIZE", SHARED_KEYS_MAX_SIZE);
#endif
#if PY_VERSION_HEX >= 0x030B0000
    SZ(PyDictValues);
    OFF(PyDictValues, values);
#endif
#if PY_VERSION_HEX >= 0x030D0000
    OFF(PyDictValues, capacity);
    OFF(PyDictValues, size);
    OFF(PyDictValues, embedded);
    OFF(PyDictValues, valid);
#endif
#ifdef MANAGED_DICT_OFFSET
    V("MANAGED_DICT_OFFSET", MANAGED_DICT_OFFSET);
#endif
#ifdef MANAGED_WEAKREF_OFFSET
    V("MANAGED_WEAKREF_OFFSET", MANAGED_WEAKREF_OFFSET);
#endif

    /* --- list, tuple, set --- */
    SZ(PyListObject);
    OFF(PyListObject, ob_item);
    OFF(PyListObject, allocated);
    SZ(PyTupleObject);
    OFF(PyTupleObject, ob_item);
    SZ(PySetObject);
    OFF(PySetObject, fill);
    OFF(PySetObject, used);
    OFF(PySetObject, mask);
    OFF(PySetObject, table);
    OFF(PySetObject, hash);
    OFF(PySetObject, finger);
    OFF(PySetObject, smalltable);
    OFF(PySetObject, weakreflist);
    V("PySet_MINSIZE", PySet_MINSIZE);
    SZ(setentry);
    OFF(setentry, key);
    OFF(setentry, hash);

    /* --- bytes, bytearray, float, int --- */
    SZ(PyBytesObject);
    OFF(PyBytesObject, ob_shash);
    OFF(PyBytesObject, ob_sval);
    SZ(PyByteArrayObject);
    OFF(PyByteArrayObject, ob_alloc);
    OFF(PyByteArrayObject, ob_bytes);
    OFF(PyByteArrayObject, ob_start);
    OFF(PyByteArrayObject, ob_exports);
    SZ(PyFloatObject);
    OFF(PyFloatObject, ob_fval);
    SZ(PyLongObject);
#if PY_VERSION_HEX >= 0x030C0000
    OFF(PyLongObject, long_value);
    OFF(PyLongObject, long_value.lv_tag);
    OFF(PyLongObject, long_value.ob_digit);
#ifdef _PyLong_NON_SIZE_BITS
    V("_PyLong_NON_SIZE_BITS", _PyLong_NON_SIZE_BITS);
#endif
#else
    OFF(PyLongObject, ob_digit);
#endif
    V("sizeof(digit)", sizeof(digit));
    V("PyLong_SHIFT", PyLong_SHIFT);

    /* --- str --- */
    SZ(PyASCIIObject);
    OFF(PyASCIIObject, length);
    OFF(PyASCIIObject, hash);
    OFF(PyASCIIObject, state);
#if PY_VERSION_HEX < 0x030C0000
    OFF(PyASCIIObject, wstr);
#endif
    SZ(PyCompactUnicodeObject);
    OFF(PyCompactUnicodeObject, utf8_length);
    OFF(PyCompactUnicodeObject, utf8);
#if PY_VERSION_HEX < 0x030C0000
    OFF(PyCompactUnicodeObject, wstr_length);
#endif
    SZ(PyUnicodeObject);
    OFF(PyUnicodeObject, data);
    STATE_BIT(interned);
    STATE_BIT(kind);
    STATE_BIT(compact);
    STATE_BIT(ascii);
#if PY_VERSION_HEX < 0x030C0000
    STATE_BIT(ready);
#else
    STATE_BIT(statically_allocated);
#endif

#if PY_VERSION_HEX >= 0x030B0000
    /* --- frames inline in generators and frame objects (3.11+) --- */
    OFF(PyGenObject, gi_iframe);
#if PY_VERSION_HEX < 0x030C0000
    OFF(PyGenObject, gi_code);
    OFF(_PyInterpreterFrame, f_code);
#elif PY_VERSION_HEX < 0x030D0000
    OFF(_PyInterpreterFrame, f_code);
#else
    OFF(_PyInterpreterFrame, f_executable);
#endif
    OFF(_PyInterpreterFrame, localsplus);
    OFF(PyFrameObject, f_frame);
    OFF(PyCodeObject, co_stacksize);
    OFF(PyCodeObject, co_nlocalsplus);
#else
    /* --- frame objects sized from their code (3.8-3.10 frame_sizeof) --- */
    SZ(PyFrameObject);
    OFF(PyFrameObject, f_code);
    OFF(PyCodeObject, co_stacksize);
    OFF(PyCodeObject, co_nlocals);
    OFF(PyCodeObject, co_cellvars);
    OFF(PyCodeObject, co_freevars);
#endif

    /* --- type flags --- */
    FLAG(Py_TPFLAGS_HAVE_GC);
    FLAG(Py_TPFLAGS_HEAPTYPE);
#ifdef Py_TPFLAGS_MANAGED_DICT
    FLAG(Py_TPFLAGS_MANAGED_DICT);
#endif
#ifdef Py_TPFLAGS_MANAGED_WEAKREF
    FLAG(Py_TPFLAGS_MANAGED_WEAKREF);
#endif
#ifdef Py_TPFLAGS_INLINE_VALUES
    FLAG(Py_TPFLAGS_INLINE_VALUES);
#endif
#ifdef Py_TPFLAGS_PREHEADER
    FLAG(Py_TPFLAGS_PREHEADER);
#endif
    FLAG(Py_TPFLAGS_LONG_SUBCLASS);
    FLAG(Py_TPFLAGS_LIST_SUBCLASS);
    FLAG(Py_TPFLAGS_TUPLE_SUBCLASS);
    FLAG(Py_TPFLAGS_BYTES_SUBCLASS);
    FLAG(Py_TPFLAGS_UNICODE_SUBCLASS);
    FLAG(Py_TPFLAGS_DICT_SUBCLASS);
    FLAG(Py_TPFLAGS_BASE_EXC_SUBCLASS);
    FLAG(Py_TPFLAGS_TYPE_SUBCLASS);
    return 0;
}
