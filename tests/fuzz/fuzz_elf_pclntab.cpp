// libFuzzer: hostile bytes as an ELF image (ElfFile, Go build info, pclntab
// discovery) and as a raw pclntab (header + tables + inline trees).
//
// Input: byte 0 selects the mode, the rest is the payload.
//   mode & 3 == 0: payload is an ELF image.
//   mode & 3 == 1: payload is a raw pclntab, used as is.
//   mode & 3 == 2: payload is a raw pclntab whose header is "repaired" (magic,
//                  pad, minLC, ptrSize fixed; offsets reduced modulo the size),
//                  so the fuzzer spends its time in the tables, not the header.
//   mode & 3 == 3: like 2, and the second half of the payload is installed as
//                  the gofunc (inline tree) region.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "elf/elf_file.h"
#include "go/go_buildinfo.h"
#include "go/go_pclntab.h"

using namespace oomsnap;

namespace {

constexpr uint64_t kText = 0x401000;

uint64_t rd64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

void exercise(const GoPclntab& t, const uint8_t* data, size_t size) {
  uint64_t pcs[8];
  for (int i = 0; i < 8; ++i) {
    uint64_t r = 0;
    if (size >= 8) std::memcpy(&r, data + (i * 13) % (size - 7), 8);
    pcs[i] = t.text_start() + (r % 0x4000);
  }
  for (uint64_t pc : pcs) {
    (void)t.find_func(pc);
    (void)t.frames_for_pc(pc);
  }
  (void)t.symbolize_stack(pcs);
  (void)t.expand_final_inline_frame(pcs);
  (void)t.find_func_by_name("main.main");
}

void fuzz_elf(const uint8_t* data, size_t size) {
  std::unique_ptr<ElfFile> elf;
  try {
    elf = ElfFile::from_bytes(std::vector<uint8_t>(data, data + size), "fuzz");
  } catch (const ElfError&) {
    return;
  }
  (void)elf->first_load_vaddr();
  (void)elf->has_symtab();
  (void)elf->symbol("runtime.text");
  (void)elf->gnu_build_id();
  (void)elf->go_build_id();
  for (const auto& s : elf->sections()) {
    try {
      auto d = elf->section_data(s);
      if (!d.empty()) (void)*(volatile const uint8_t*)&d[d.size() - 1];
    } catch (const ElfError&) {
    }
  }
  for (const auto& p : elf->segments()) {
    auto b = elf->bytes_at_vaddr(p.vaddr, p.filesz);
    if (b && !b->empty()) (void)*(volatile const uint8_t*)&(*b)[b->size() - 1];
  }
  (void)read_go_buildinfo(*elf);
  try {
    auto t = GoPclntab::from_elf(*elf);
    exercise(t, data, size);
    (void)t.set_gofunc(*elf, t.text_start());
    exercise(t, data, size);
  } catch (const PclntabError&) {
  } catch (const ElfError&) {
  }
}

void fuzz_pclntab(const uint8_t* data, size_t size, int mode) {
  std::vector<uint8_t> b(data, data + size);
  if (mode >= 2 && b.size() >= 72) {
    uint32_t magic = (b[0] & 1) ? 0xfffffff1u : 0xfffffff0u;
    std::memcpy(b.data(), &magic, 4);
    b[4] = b[5] = 0;
    b[6] = 1;
    b[7] = 8;
    uint64_t n = b.size();
    uint64_t nfunc = rd64(&b[8]) % 16;
    std::memcpy(&b[8], &nfunc, 8);
    for (int k = 4; k < 9; ++k) {
      uint64_t v = 72 + rd64(&b[8 * k]) % (n - 71);
      std::memcpy(&b[8 * k], &v, 8);
    }
  }
  std::vector<uint8_t> gofunc;
  if (mode == 3) gofunc.assign(data + size / 2, data + size);
  try {
    GoPclntab t(std::move(b), kText, 0x500000);
    if (mode == 3) t.set_gofunc(0x4e0000, std::move(gofunc));
    exercise(t, data, size);
  } catch (const PclntabError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  int mode = data[0] & 3;
  if (mode == 0)
    fuzz_elf(data + 1, size - 1);
  else
    fuzz_pclntab(data + 1, size - 1, mode);
  return 0;
}
