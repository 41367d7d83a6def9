// Finds the CPython runtime in a target: the module (executable or mapped
// libpython3.X) that defines _PyRuntime, where it is loaded, and the exact
// version (Py_Version, else the module's name). Files are opened as the
// target sees them (/proc/PID/exe, /proc/PID/map_files, /proc/PID/root), so
// interpreters in containers work.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <utility>

#include "core/collector.h"
#include "elf/elf_file.h"

namespace oomsnap {

struct PythonRuntime {
  std::string module;          // the module's path as the target maps it
  uint64_t bias = 0;
  uint64_t runtime_addr = 0;   // &_PyRuntime in the target
  uint32_t version_hex = 0;    // PY_VERSION_HEX; only major.minor when read from a name
  bool exact_version = false;  // from Py_Version
  bool free_threaded_name = false;  // python3.13t / libpython3.13t
  std::pair<uint64_t, uint64_t> static_range{0, 0};
  // Up to 3.11: &arenas and &maxarenas, obmalloc.c's arena table, in the
  // target. They are file-local statics, named only in .symtab: 0 when the
  // module is stripped (Debian's and most distributions' interpreters).
  uint64_t arenas_var = 0, maxarenas_var = 0;
  // When stripped: the globals that _Py_GetAllocatedBlocks (3.10, 3.11) and
  // _PyObject_DebugMallocStats (3.8-3.11), exported both, load first: the
  // 8-byte and the 4-byte ones, in the target. `arenas` and `maxarenas` are
  // among them (python_arena_reader.cpp tries them against the table).
  std::vector<uint64_t> arenas_candidates, maxarenas_candidates;
};

// The first mapping (offset 0) of a shared libpython3.X, the file
// find_python_runtime opens when the executable is not the runtime.
bool is_libpython_mapping(const Mapping& m);

std::optional<PythonRuntime> find_python_runtime(Target& target);

// "3.11.2", "3.14.0rc1"; "3.13" when only major.minor is known.
std::string python_version_text(uint32_t version_hex, bool exact);

// major/minor and the free-threading "t" from a file name such as
// "python3.13t" or "libpython3.11.so.1.0"; nullopt when it is not one.
std::optional<std::pair<uint32_t, bool>> python_version_from_name(const std::string& path);

}  // namespace oomsnap
