// Building ELF64 images byte by byte for the tests that craft binaries
// (the ELF reader's bounds, its symbol tables, the Go reader's).
#pragma once
#include <elf.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace oomsnap::testutil {

// Writes v at off, growing the image as needed.
template <typename T>
void put(std::vector<uint8_t>& b, size_t off, T v) {
  if (b.size() < off + sizeof v) b.resize(off + sizeof v);
  std::memcpy(b.data() + off, &v, sizeof v);
}

// An ELF64 little-endian x86-64 ET_EXEC header; the caller adds the tables.
inline std::vector<uint8_t> elf_header(uint64_t phoff, uint16_t phnum, uint64_t shoff, uint16_t shnum,
                                       uint16_t shstrndx) {
  std::vector<uint8_t> b(sizeof(Elf64_Ehdr), 0);
  std::memcpy(b.data(), ELFMAG, SELFMAG);
  b[EI_CLASS] = ELFCLASS64;
  b[EI_DATA] = ELFDATA2LSB;
  b[EI_VERSION] = EV_CURRENT;
  put<uint16_t>(b, 16, ET_EXEC);
  put<uint16_t>(b, 18, EM_X86_64);
  put<uint32_t>(b, 20, EV_CURRENT);
  put<uint64_t>(b, 32, phoff);
  put<uint64_t>(b, 40, shoff);
  put<uint16_t>(b, 52, sizeof(Elf64_Ehdr));
  put<uint16_t>(b, 54, sizeof(Elf64_Phdr));
  put<uint16_t>(b, 56, phnum);
  put<uint16_t>(b, 58, sizeof(Elf64_Shdr));
  put<uint16_t>(b, 60, shnum);
  put<uint16_t>(b, 62, shstrndx);
  return b;
}

// A PT_LOAD program header at `at`: file offset off mapped at vaddr, filesz
// bytes of file and memsz (at least filesz) in memory.
inline void put_load_phdr(std::vector<uint8_t>& b, size_t at, uint64_t off, uint64_t vaddr, uint64_t filesz,
                          uint64_t memsz, uint32_t flags = PF_R) {
  put<uint32_t>(b, at, PT_LOAD);
  put<uint32_t>(b, at + 4, flags);
  put<uint64_t>(b, at + 8, off);
  put<uint64_t>(b, at + 16, vaddr);
  put<uint64_t>(b, at + 24, vaddr);
  put<uint64_t>(b, at + 32, filesz);
  put<uint64_t>(b, at + 40, memsz);
  put<uint64_t>(b, at + 48, 0x1000);
}

}  // namespace oomsnap::testutil
