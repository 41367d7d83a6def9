// Where an ELF module (the executable or a shared library) sits in a target's
// address space, from /proc/PID/maps.
#pragma once
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "base/mapping.h"
#include "elf/elf_file.h"

namespace oomsnap {

// Load bias (runtime address − link-time address) of the module whose file
// has this inode; 0 for ET_EXEC; nullopt when it is not mapped.
std::optional<uint64_t> module_load_bias(const ElfFile& elf, const std::vector<Mapping>& maps, uint64_t inode);

// The module's address range in the target: [lowest PT_LOAD, end of the
// highest PT_LOAD incl. .bss) + bias.
std::pair<uint64_t, uint64_t> module_range(const ElfFile& elf, uint64_t bias);

}  // namespace oomsnap
