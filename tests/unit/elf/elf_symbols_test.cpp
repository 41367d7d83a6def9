// ElfFile::symbols_with_prefix and symbol_u32 on a crafted image: a data
// constant, a zero one in .bss (no file bytes), an undefined one, and names
// that are too long or run off the end of the string table.
#include <elf.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "elf/elf_file.h"
#include "elf_bytes.h"

using namespace oomsnap;
using namespace oomsnap::testutil;

namespace {

struct Sym {
  std::string name;
  uint16_t shndx;
  uint64_t value;
};

// Sections: null, .shstrtab, .data (PROGBITS at 0x1000, loaded, holding 8
// then 0x12345678), .bss (NOBITS at 0x2000, 16 bytes), .symtab, .strtab.
// `strtab_tail` is appended to .strtab unterminated (a name cut by the end).
std::vector<uint8_t> image(const std::vector<Sym>& syms, const std::string& strtab_tail = "") {
  // One PT_LOAD for .data at file offset 0x100; the section headers go last.
  const uint64_t data_off = 0x100;
  std::vector<uint8_t> b = elf_header(0x40, 1, 0, 6, 1);
  put_load_phdr(b, 0x40, data_off, 0x1000, 8, 0x1010, PF_R | PF_W);
  put<uint32_t>(b, data_off, 8);
  put<uint32_t>(b, data_off + 4, 0x12345678);
  // Tables after the data.
  const std::string shstr = std::string("\0.shstrtab\0.data\0.bss\0.symtab\0.strtab\0", 39);
  std::string str(1, '\0');
  std::vector<uint32_t> name_at;
  for (const auto& s : syms) {
    name_at.push_back(static_cast<uint32_t>(str.size()));
    str += s.name;
    str += '\0';
  }
  const uint32_t tail_at = static_cast<uint32_t>(str.size());
  str += strtab_tail;
  const uint64_t shstr_off = 0x200, str_off = 0x300, sym_off = 0x1000;
  const uint64_t symtab_size = (syms.size() + 1 + (strtab_tail.empty() ? 0 : 1)) * sizeof(Elf64_Sym);
  b.resize(sym_off + symtab_size + 0x100, 0);
  std::memcpy(b.data() + shstr_off, shstr.data(), shstr.size());
  if (str.size() > sym_off - str_off) throw std::runtime_error("strtab too big for the test image");
  std::memcpy(b.data() + str_off, str.data(), str.size());
  size_t i = 1;
  auto put_sym = [&](uint32_t name, uint16_t shndx, uint64_t value) {
    const uint64_t at = sym_off + i++ * sizeof(Elf64_Sym);
    put<uint32_t>(b, at, name);
    b[at + 4] = (STB_GLOBAL << 4) | STT_OBJECT;
    put<uint16_t>(b, at + 6, shndx);
    put<uint64_t>(b, at + 8, value);
    put<uint64_t>(b, at + 16, 4);
  };
  for (size_t k = 0; k < syms.size(); ++k) put_sym(name_at[k], syms[k].shndx, syms[k].value);
  if (!strtab_tail.empty()) put_sym(tail_at, 2, 0x1000);
  const uint64_t shoff = b.size();
  put<uint64_t>(b, 40, shoff);
  auto put_sh = [&](int idx, uint32_t name, uint32_t type, uint64_t addr, uint64_t off, uint64_t size, uint32_t link,
                    uint64_t entsize) {
    const uint64_t at = shoff + idx * sizeof(Elf64_Shdr);
    put<uint32_t>(b, at, name);
    put<uint32_t>(b, at + 4, type);
    put<uint64_t>(b, at + 16, addr);
    put<uint64_t>(b, at + 24, off);
    put<uint64_t>(b, at + 32, size);
    put<uint32_t>(b, at + 40, link);
    put<uint64_t>(b, at + 56, entsize);
  };
  b.resize(shoff + 6 * sizeof(Elf64_Shdr), 0);
  put_sh(1, 1, SHT_STRTAB, 0, shstr_off, shstr.size(), 0, 0);
  put_sh(2, 11, SHT_PROGBITS, 0x1000, data_off, 8, 0, 0);
  put_sh(3, 17, SHT_NOBITS, 0x2000, 0, 16, 0, 0);
  put_sh(4, 22, SHT_SYMTAB, 0, sym_off, symtab_size, 5, sizeof(Elf64_Sym));
  put_sh(5, 30, SHT_STRTAB, 0, str_off, str.size(), 0, 0);
  return b;
}

TEST(ElfSymbols, PrefixListsEachNameOnceWithItsValue) {
  auto elf = ElfFile::from_bytes(image({{"v8dbg_TaggedSize", 2, 0x1000},
                                        {"v8dbg_Other", 2, 0x1004},
                                        {"other_symbol", 2, 0x1000},
                                        {"v8dbg_TaggedSize", 2, 0x1004}}),
                                 "crafted");
  auto syms = elf->symbols_with_prefix("v8dbg_", 100);
  ASSERT_EQ(syms.size(), 2u);
  EXPECT_EQ(syms[0].name, "v8dbg_TaggedSize");
  EXPECT_EQ(elf->symbol_u32(syms[0]), 8u) << "the first of a repeated name";
  EXPECT_EQ(elf->symbol_u32(syms[1]), 0x12345678u);
  EXPECT_EQ(elf->symbols_with_prefix("v8dbg_", 1).size(), 1u) << "max_count";
  EXPECT_TRUE(elf->symbols_with_prefix("", 100).empty());
}

TEST(ElfSymbols, AZeroInBssReadsAsZeroAndAnUndefinedOneAsAbsent) {
  auto elf = ElfFile::from_bytes(image({{"v8dbg_SmiTag", 3, 0x2008},
                                        {"v8dbg_BssEnd", 3, 0x200e},
                                        {"v8dbg_Undefined", SHN_UNDEF, 0},
                                        {"v8dbg_Absolute", SHN_ABS, 0x1000},
                                        {"v8dbg_Unmapped", 2, 0x5000}}),
                                 "crafted");
  auto syms = elf->symbols_with_prefix("v8dbg_", 100);
  ASSERT_EQ(syms.size(), 5u);
  EXPECT_EQ(elf->symbol_u32(syms[0]), 0u) << ".bss has no file bytes: zero-initialised";
  EXPECT_FALSE(elf->symbol_u32(syms[1])) << "four bytes from 0x200e run past .bss";
  EXPECT_FALSE(elf->symbol_u32(syms[2]));
  EXPECT_FALSE(elf->symbol_u32(syms[3]));
  EXPECT_FALSE(elf->symbol_u32(syms[4])) << "no file bytes at that address";
}

TEST(ElfSymbols, ALongOrUnterminatedNameIsSkipped) {
  const std::string long_name = "v8dbg_" + std::string(300, 'x');
  auto elf = ElfFile::from_bytes(image({{long_name, 2, 0x1000}, {"v8dbg_Fine", 2, 0x1000}}, "v8dbg_CutOff"),
                                 "crafted");
  auto syms = elf->symbols_with_prefix("v8dbg_", 100, 256);
  ASSERT_EQ(syms.size(), 1u);
  EXPECT_EQ(syms[0].name, "v8dbg_Fine");
  EXPECT_EQ(elf->symbols_with_prefix("v8dbg_", 100, 400).size(), 2u) << "within a larger max_name it is listed";
}

}  // namespace
