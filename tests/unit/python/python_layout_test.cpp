// CPython layouts: _Py_DebugOffsets parsed from the real interpreters'
// .PyRuntime bytes (trixie 3.13, sid 3.14, from tools/fetch-python-rootfs.sh),
// cross-checked against the built-in tables; garbage is refused; versions
// from Py_Version values and file names.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "elf/elf_file.h"
#include "python/python_layout.h"
#include "python/python_runtime.h"

using namespace oomsnap;

namespace {

std::vector<uint8_t> runtime_bytes(const std::string& exe) {
  int fd = ::open(exe.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  auto elf = ElfFile::open_fd(fd, exe);
  ::close(fd);
  const auto* sec = elf->section(".PyRuntime");
  if (!sec) return {};
  auto d = elf->section_data(*sec);
  return {d.begin(), d.end()};
}

struct Expect {
  const char* rootfs;
  const char* exe;
  int minor;
  uint64_t heads, next, gc, gc_size, collecting, tuple_items;
};

}  // namespace

TEST(PythonLayout, DebugOffsetsOfTheRealInterpretersAgreeWithTheTables) {
  const Expect cases[] = {{"trixie", "/usr/bin/python3.13", 13, 632, 7264, 7400, 240, 200, 24},
                          {"sid", "/usr/bin/python3.14", 14, 808, 7272, 7408, 264, 192, 32}};
  for (const auto& c : cases) {
    const std::string exe = std::string(OOMSNAP_ROOTFS) + "/" + c.rootfs + c.exe;
    auto bytes = runtime_bytes(exe);
    ASSERT_FALSE(bytes.empty()) << exe << " missing or without .PyRuntime (run tools/fetch-python-rootfs.sh)";
    std::string err;
    auto d = parse_py_debug_offsets(bytes, c.minor, err);
    ASSERT_TRUE(d) << exe << ": " << err;
    EXPECT_EQ(d->version >> 16, 0x0300u | static_cast<uint64_t>(c.minor)) << exe;
    EXPECT_FALSE(d->free_threaded);
    EXPECT_EQ(d->interpreters_head, c.heads);
    EXPECT_EQ(d->interp_next, c.next);
    EXPECT_EQ(d->interp_gc, c.gc);
    EXPECT_EQ(d->gc_size, c.gc_size);
    EXPECT_EQ(d->gc_collecting, c.collecting);
    EXPECT_EQ(d->tuple_items, c.tuple_items);
    auto L = python_layout_for(static_cast<uint32_t>(d->version));
    ASSERT_TRUE(L);
    EXPECT_FALSE(apply_py_debug_offsets(*L, *d).has_value());
    EXPECT_EQ(L->interpreters_head, c.heads);
    EXPECT_EQ(L->interp_gc, c.gc);
    EXPECT_TRUE(L->from_debug_offsets);
  }
}

// The free-threading flag of a real 3.13 runtime's debug offsets, set by hand
// (no free-threaded build is packaged here): parsed and reported.
TEST(PythonLayout, FreeThreadedFlagIsReported) {
  auto bytes = runtime_bytes(std::string(OOMSNAP_ROOTFS) + "/trixie/usr/bin/python3.13");
  ASSERT_GE(bytes.size(), 24u) << "run tools/fetch-python-rootfs.sh";
  bytes[16] = 1;  // _Py_DebugOffsets.free_threaded
  std::string err;
  auto d = parse_py_debug_offsets(bytes, 13, err);
  ASSERT_TRUE(d) << err;
  EXPECT_TRUE(d->free_threaded);
}

TEST(PythonLayout, GarbageDebugOffsetsAreRefused) {
  std::string err;
  std::vector<uint8_t> zeros(kPyDebugOffsetsReadSize, 0);
  EXPECT_FALSE(parse_py_debug_offsets(zeros, 13, err));
  EXPECT_NE(err.find("cookie"), std::string::npos) << err;

  std::vector<uint8_t> shortbuf(100, 0);
  std::memcpy(shortbuf.data(), "xdebugpy", 8);
  EXPECT_FALSE(parse_py_debug_offsets(shortbuf, 13, err));
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;

  std::vector<uint8_t> wild(kPyDebugOffsetsReadSize, 0xff);
  std::memcpy(wild.data(), "xdebugpy", 8);
  EXPECT_FALSE(parse_py_debug_offsets(wild, 14, err));
  EXPECT_NE(err.find("implausible"), std::string::npos) << err;

  EXPECT_FALSE(parse_py_debug_offsets(zeros, 11, err));  // 3.11 has none
}

TEST(PythonLayout, DisagreeingDebugOffsetsAreAnError) {
  auto L = python_layout_for(0x030e0af0);
  ASSERT_TRUE(L);
  PyDebugOffsets d;
  d.interpreters_head = 808, d.interp_next = 7272, d.interp_gc = 7408, d.gc_size = 264, d.gc_collecting = 192;
  d.tp_name = 24, d.tp_flags = 168, d.tuple_items = 24;  // 3.13's tuple in a 3.14 runtime
  auto err = apply_py_debug_offsets(*L, d);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("tuple items 24"), std::string::npos) << *err;

  d.tuple_items = 32, d.gc_size = 300;
  err = apply_py_debug_offsets(*L, d);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("unknown 3.14 GC state layout"), std::string::npos) << *err;

  // 3.14.0-3.14.4: the incremental GC's 240-byte state has no generation0 pointer.
  d.gc_size = 240;
  EXPECT_FALSE(apply_py_debug_offsets(*L, d));
  EXPECT_EQ(L->gc_generation0, 0u);
}

TEST(PythonLayout, SupportedVersions) {
  EXPECT_FALSE(python_layout_for(0x030710f0));  // 3.7
  EXPECT_FALSE(python_layout_for(0x030f00a1));  // 3.15
  EXPECT_FALSE(python_layout_for(0x020712f0));  // 2.7
  for (uint32_t v : {0x030812f0u, 0x030912f0u, 0x030a0df0u, 0x030b02f0u, 0x030c01f0u, 0x030d05f0u, 0x030e0af0u}) {
    auto L = python_layout_for(v);
    ASSERT_TRUE(L) << std::hex << v;
    EXPECT_GE(L->type_read_size, L->ht_cached_keys + 8);
    EXPECT_FALSE(L->gc_head_sets.empty());
  }
  // Debian's 3.13 packs PyGC_Head to 4 bytes: both head sets are candidates.
  EXPECT_EQ(python_layout_for(0x030d05f0)->gc_head_sets.size(), 2u);
}

TEST(PythonRuntime, VersionFromNameAndHex) {
  auto v = python_version_from_name("/usr/bin/python3.13t");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->first, 0x030d0000u);
  EXPECT_TRUE(v->second);
  v = python_version_from_name("/opt/lib/libpython3.11.so.1.0 (deleted)");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->first, 0x030b0000u);
  EXPECT_FALSE(v->second);
  EXPECT_FALSE(python_version_from_name("/usr/bin/python3"));
  EXPECT_FALSE(python_version_from_name("/usr/bin/perl"));
  EXPECT_FALSE(python_version_from_name("python3.x"));
  EXPECT_EQ(python_version_text(0x030e0af0, true), "3.14.10");
  EXPECT_EQ(python_version_text(0x030d00c1, true), "3.13.0rc1");
  EXPECT_EQ(python_version_text(0x030f00a2, true), "3.15.0a2");
  EXPECT_EQ(python_version_text(0x030d0000, false), "3.13");
}

// Every offset taken from _Py_DebugOffsets is checked against the size the
// same record gives for its struct, every size against a local bound, and
// the version against the one the bytes are read as: a hostile interpreter
// chooses them all. Each case edits one word of the real 3.13 record.
TEST(PythonLayout, DebugOffsetsOutsideTheirStructsAreRefused) {
  const auto real = runtime_bytes(std::string(OOMSNAP_ROOTFS) + "/trixie/usr/bin/python3.13");
  ASSERT_GE(real.size(), kPyDebugOffsetsReadSize) << "run tools/fetch-python-rootfs.sh";
  auto word = [](std::vector<uint8_t>& b, size_t i) -> uint64_t {
    uint64_t v;
    std::memcpy(&v, b.data() + i * 8, 8);
    return v;
  };
  auto set = [](std::vector<uint8_t>& b, size_t i, uint64_t v) { std::memcpy(b.data() + i * 8, &v, 8); };
  // 3.13 word indexes: 1 version, 3 runtime size, 5 interpreters_head,
  // 6 interpreter size, 8 next, 10 gc; 46 type size; 50 tuple size; 71 gc size, 72 collecting.
  std::string err;
  {
    std::vector<uint8_t> b = real;
    ASSERT_TRUE(parse_py_debug_offsets(b, 13, err)) << err;
    set(b, 5, word(b, 3));  // interpreters_head at the end of _PyRuntimeState
    EXPECT_FALSE(parse_py_debug_offsets(b, 13, err));
    EXPECT_NE(err.find("interpreters.head"), std::string::npos) << err;
  }
  {
    std::vector<uint8_t> b = real;
    set(b, 10, word(b, 6) - 8);  // the GC state running past PyInterpreterState
    EXPECT_FALSE(parse_py_debug_offsets(b, 13, err));
    EXPECT_NE(err.find("PyInterpreterState.gc"), std::string::npos) << err;
  }
  {
    std::vector<uint8_t> b = real;
    set(b, 8, word(b, 6));  // next at the end of PyInterpreterState
    EXPECT_FALSE(parse_py_debug_offsets(b, 13, err));
    EXPECT_NE(err.find("PyInterpreterState.next"), std::string::npos) << err;
  }
  {
    std::vector<uint8_t> b = real;
    set(b, 72, word(b, 71) - 2);  // a 4-byte collecting flag across the end of the GC state
    EXPECT_FALSE(parse_py_debug_offsets(b, 13, err));
    EXPECT_NE(err.find("gc.collecting"), std::string::npos) << err;
  }
  {
    std::vector<uint8_t> b = real;
    set(b, 3, uint64_t{1} << 40), set(b, 6, uint64_t{1} << 40);  // sizes beyond any real struct
    EXPECT_FALSE(parse_py_debug_offsets(b, 13, err));
    EXPECT_NE(err.find("struct sizes"), std::string::npos) << err;
  }
  {
    std::vector<uint8_t> b = real;
    set(b, 46, 16);  // tp_name / tp_flags past a 16-byte PyTypeObject
    EXPECT_FALSE(parse_py_debug_offsets(b, 13, err));
    EXPECT_NE(err.find("PyTypeObject"), std::string::npos) << err;
  }
  {
    std::vector<uint8_t> b = real;
    set(b, 1, 0x030e00f0);  // a 3.14 version in bytes read as 3.13
    EXPECT_FALSE(parse_py_debug_offsets(b, 13, err));
    EXPECT_NE(err.find("is not 3.13"), std::string::npos) << err;
  }
}

// Each built-in layout fits its structs; one that does not is named.
TEST(PythonLayout, TableLayoutsPassTheirOwnChecks) {
  for (uint32_t v : {0x030812f0u, 0x030912f0u, 0x030a0df0u, 0x030b02f0u, 0x030c01f0u, 0x030d05f0u, 0x030e0af0u}) {
    auto L = python_layout_for(v);
    ASSERT_TRUE(L);
    EXPECT_FALSE(validate_py_layout(*L)) << std::hex << v << ": " << *validate_py_layout(*L);
  }
  auto L = python_layout_for(0x030d05f0);
  L->gc_long_lived_total = L->gc_state_size - 8;  // total + pending: 16 bytes
  auto bad = validate_py_layout(*L);
  ASSERT_TRUE(bad);
  EXPECT_NE(bad->find("long_lived"), std::string::npos) << *bad;
}

namespace {

// "name value" lines of tools/dump-cpython-offsets.sh (offsetof/sizeof
// compiled against a CPython version's own headers); empty when it fails.
std::map<std::string, int64_t> header_offsets(const std::string& include_dir, const std::string& arch_dir) {
  std::map<std::string, int64_t> out;
  const std::string cmd = std::string(OOMSNAP_SOURCE_DIR) + "/tools/dump-cpython-offsets.sh " + include_dir + " " +
                          arch_dir + " 2>/dev/null";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return out;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    std::string s(line);
    const auto sp = s.rfind(' ');
    if (sp == std::string::npos) continue;
    try {
      out[s.substr(0, sp)] = std::stoll(s.substr(sp + 1), nullptr, 0);
    } catch (const std::exception&) {
      // a line that is no "name number" pair (PY_VERSION text)
    }
  }
  pclose(f);
  return out;
}

struct HeaderSet {
  std::string v;           // label in messages
  std::string inc, arch;   // include dir, dir of its pyconfig.h
  bool required;           // the suite installs it (tools/fetch-python-rootfs.sh)
};

std::vector<HeaderSet> header_sets() {
  std::vector<HeaderSet> out;
  for (const char* v : {"3.8.18", "3.9.18", "3.10.13", "3.11.7", "3.12.1", "3.13.0"}) {
    const std::string ver(v), minor_text = ver.substr(0, ver.rfind('.'));
    const std::string inc = "/root/.pyenv/versions/" + ver + "/include/python" + minor_text;
    out.push_back({"pyenv " + ver, inc, inc, false});
  }
  // A distribution's build: Debian puts pyconfig.h in a per-architecture dir
  // (and its 3.9.2 has a smaller PyInterpreterState than 3.9.18: the table's
  // fields must not move with that).
  const std::string deb = std::string(OOMSNAP_ROOTFS) + "/bullseye/usr/include";
  out.push_back({"bullseye 3.9", deb + "/python3.9", deb + "/x86_64-linux-gnu/python3.9", true});
  return out;
}

}  // namespace

// The tables against each interpreter's own headers, where pyenv has them
// (upstream builds 3.8-3.13), and against Debian bullseye's 3.9: every offset
// and size the walker takes from the table is the compiler's offsetof/sizeof
// for that version. 3.13+ are also checked against their _Py_DebugOffsets
// above; 3.14's headers are not on this machine.
TEST(PythonLayout, TablesMatchEachVersionsOwnHeaders) {
  int checked = 0;
  for (const auto& hs : header_sets()) {
    const char* v = hs.v.c_str();
    const std::string& inc = hs.inc;
    if (!std::filesystem::exists(inc + "/Python.h")) {
      if (hs.required) ADD_FAILURE() << inc << "/Python.h missing (run tools/fetch-python-rootfs.sh bullseye)";
      continue;
    }
    auto h = header_offsets(inc, hs.arch);
    ASSERT_TRUE(h.count("PY_VERSION_HEX")) << v << ": tools/dump-cpython-offsets.sh failed on " << inc;
    auto L = python_layout_for(static_cast<uint32_t>(h["PY_VERSION_HEX"]));
    ASSERT_TRUE(L) << v;
    auto at = [&](const char* name) {
      EXPECT_TRUE(h.count(name)) << v << ": " << name << " not printed";
      return h.count(name) ? h[name] : -1;
    };
    const char* gc = "offsetof(struct _gc_runtime_state, ";
    auto gcf = [&](const char* f) { return at((std::string(gc) + f + ")").c_str()); };
    EXPECT_EQ(L->interpreters_head, at("offsetof(_PyRuntimeState, interpreters.head)")) << v;
    EXPECT_EQ(L->interp_next, at("offsetof(PyInterpreterState, next)")) << v;
    if (L->runtime_gc) EXPECT_EQ(L->runtime_gc, at("offsetof(_PyRuntimeState, gc)")) << v;
    else EXPECT_EQ(L->interp_gc, at("offsetof(PyInterpreterState, gc)")) << v;
    EXPECT_EQ(L->gc_state_size, at("sizeof(struct _gc_runtime_state)")) << v;
    const std::vector<uint32_t> heads = {
        static_cast<uint32_t>(gcf("generations")), static_cast<uint32_t>(gcf("generations[1]")),
        static_cast<uint32_t>(gcf("generations[2]")), static_cast<uint32_t>(gcf("permanent_generation"))};
    EXPECT_EQ(L->gc_head_sets.front(), heads) << v;
    EXPECT_EQ(L->gc_generation0, gcf("generation0")) << v;
    EXPECT_EQ(L->gc_collecting, gcf("collecting")) << v;
    EXPECT_EQ(L->gc_long_lived_total, gcf("long_lived_total")) << v;
    EXPECT_EQ(L->gc_long_lived_total + 8, gcf("long_lived_pending")) << v;
    EXPECT_EQ(L->tp_name, at("offsetof(PyTypeObject, tp_name)")) << v;
    EXPECT_EQ(L->tp_basicsize, at("offsetof(PyTypeObject, tp_basicsize)")) << v;
    EXPECT_EQ(L->tp_itemsize, at("offsetof(PyTypeObject, tp_itemsize)")) << v;
    EXPECT_EQ(L->tp_flags, at("offsetof(PyTypeObject, tp_flags)")) << v;
    EXPECT_EQ(L->tp_members, at("offsetof(PyTypeObject, tp_members)")) << v;
    EXPECT_EQ(L->tp_base, at("offsetof(PyTypeObject, tp_base)")) << v;
    EXPECT_EQ(L->tp_dict, at("offsetof(PyTypeObject, tp_dict)")) << v;
    EXPECT_EQ(L->tp_dictoffset, at("offsetof(PyTypeObject, tp_dictoffset)")) << v;
    EXPECT_EQ(L->ht_qualname, at("offsetof(PyHeapTypeObject, ht_qualname)")) << v;
    EXPECT_EQ(L->ht_cached_keys, at("offsetof(PyHeapTypeObject, ht_cached_keys)")) << v;
    EXPECT_EQ(L->tuple_items, at("offsetof(PyTupleObject, ob_item)")) << v;
    EXPECT_EQ(L->bytearray_alloc, at("offsetof(PyByteArrayObject, ob_alloc)")) << v;
    EXPECT_EQ(L->bytearray_alloc + 8, at("offsetof(PyByteArrayObject, ob_bytes)")) << v;
    EXPECT_EQ(L->ascii_size, at("sizeof(PyASCIIObject)")) << v;
    EXPECT_EQ(L->compact_size, at("sizeof(PyCompactUnicodeObject)")) << v;
    if (L->minor >= 11) {  // generators and frame objects sized from their code
      const int64_t code_in_frame = L->minor >= 13 ? at("offsetof(_PyInterpreterFrame, f_executable)")
                                                   : at("offsetof(_PyInterpreterFrame, f_code)");
      EXPECT_EQ(L->iframe_code, code_in_frame) << v;
      EXPECT_EQ(L->gen_code, L->minor == 11 ? at("offsetof(PyGenObject, gi_code)")
                                            : at("offsetof(PyGenObject, gi_iframe)") + code_in_frame)
          << v;
      EXPECT_EQ(L->frame_iframe, at("offsetof(PyFrameObject, f_frame)")) << v;
      EXPECT_EQ(L->code_stacksize, at("offsetof(PyCodeObject, co_stacksize)")) << v;
      EXPECT_EQ(L->code_nlocalsplus, at("offsetof(PyCodeObject, co_nlocalsplus)")) << v;
    } else {  // frame objects sized from their code; generators by the default rule
      EXPECT_EQ(L->code_nlocalsplus, 0u) << v;
      EXPECT_EQ(L->frame_f_code, at("offsetof(PyFrameObject, f_code)")) << v;
      EXPECT_EQ(L->code_stacksize, at("offsetof(PyCodeObject, co_stacksize)")) << v;
      EXPECT_EQ(L->code_nlocals, at("offsetof(PyCodeObject, co_nlocals)")) << v;
      EXPECT_EQ(L->code_cellvars, at("offsetof(PyCodeObject, co_cellvars)")) << v;
      EXPECT_EQ(L->code_freevars, at("offsetof(PyCodeObject, co_freevars)")) << v;
    }
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no CPython headers (pyenv's or bullseye's)";
}
