#include "elf/module_map.h"

#include <elf.h>

#include <algorithm>

namespace oomsnap {

std::optional<uint64_t> module_load_bias(const ElfFile& elf, const std::vector<Mapping>& maps, uint64_t inode) {
  if (elf.elf_type() == ET_EXEC) return 0;
  auto first = elf.first_load_vaddr();
  if (!first) return std::nullopt;
  for (const auto& m : maps)
    if (m.inode == inode && m.offset == 0) return m.start - (*first & ~uint64_t{0xfff});
  return std::nullopt;
}

std::pair<uint64_t, uint64_t> module_range(const ElfFile& elf, uint64_t bias) {
  uint64_t lo = ~uint64_t{0}, hi = 0;
  for (const auto& s : elf.segments()) {
    if (s.type != PT_LOAD) continue;
    lo = std::min(lo, s.vaddr);
    hi = std::max(hi, s.vaddr + s.memsz);
  }
  if (hi == 0) return {0, 0};
  return {lo + bias, hi + bias};
}

}  // namespace oomsnap
