// One mapping of a process's address space, as a line of /proc/PID/maps
// describes it (core/proc_info.h reads them; elf/module_map.h places modules).
#pragma once
#include <cstdint>
#include <string>

namespace oomsnap {

struct Mapping {
  uint64_t start = 0, end = 0, offset = 0;
  std::string perms;  // "r-xp"
  uint64_t inode = 0;
  std::string path;   // as /proc/PID/maps prints it (may be "[heap]" or empty)
};

}  // namespace oomsnap
