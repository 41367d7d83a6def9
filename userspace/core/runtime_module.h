// Finding the module that holds a runtime (CPython's _PyRuntime, V8's
// v8dbg_ metadata): the executable first, then the shared libraries a
// collector names (libpython3.X, libnode), each file once, opened through
// the target's map_files like every file a collector reads.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "base/mapping.h"
#include "core/target.h"
#include "elf/elf_file.h"

namespace oomsnap {

// Calls inspect(elf, inode, path) for the executable (path as the maps name
// it, else /proc/PID/exe), then for each mapping `is_library` accepts whose
// file is not the executable's, until inspect returns true. Returns whether
// one did. A mapping that cannot be opened or is no ELF file is skipped.
bool find_runtime_module(
    Target& target, const std::function<bool(const Mapping&)>& is_library,
    const std::function<bool(const ElfFile& elf, uint64_t inode, const std::string& path)>& inspect);

}  // namespace oomsnap
