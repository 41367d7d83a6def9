// libFuzzer: hostile bytes as an ELF image (ElfFile, Go build info, pclntab
// discovery) and as a raw pclntab (header + tables + inline trees).
//
// Input: byte 0 selects the mode, the rest is the payload.
//   mode & 3 == 0: payload is an ELF image; bit 2 of byte 0 set: read through
//                  a file (memfd, ElfFile::open_fd: the pread path), else
//                  from memory.
//   mode & 3 == 1: payload is a raw pclntab, used as is.
//   mode & 3 == 2: payload is a raw pclntab whose magic, pad, minLC and
//                  ptrSize are fixed; nfunc, nfiles and every table offset
//                  are the input's, unconstrained.
//   mode & 3 == 3: offsets reduced modulo the size (so the fuzzer spends its
//                  time in the tables), and the second half of the payload is
//                  installed as the gofunc (inline tree) region.
// Stacks to symbolize take their PCs (and how many: up to 255) from the input,
// half of them unconstrained, half near the text start.
#include <cstddef>
#include <cstdint>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "elf/elf_file.h"
#include "go/go_buildinfo.h"
#include "go/go_goroutines.h"
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
  size_t n = size ? 1 + data[size - 1] : 1;
  std::vector<uint64_t> pcs(n);
  for (size_t i = 0; i < n; ++i) {
    uint64_t r = 0;
    if (size >= 8) std::memcpy(&r, data + (i * 13) % (size - 7), 8);
    pcs[i] = (r & 1) ? r : t.text_start() + (r % 0x4000);
  }
  for (size_t i = 0; i < std::min<size_t>(n, 8); ++i) {
    (void)t.find_func(pcs[i]);
    (void)t.frames_for_pc(pcs[i]);
    // The goroutine unwinder's view (pcsp delta, TOPFRAME): a found frame
    // lies inside its function, a delta is never negative.
    if (auto fi = t.frame_info(pcs[i]))
      if (fi->sp_delta < 0 || pcs[i] < fi->entry || pcs[i] >= fi->end) __builtin_trap();
  }
  auto frames = t.symbolize_stack(pcs);
  if (frames.size() > 8193) __builtin_trap();  // the frame cap
  for (const auto& f : frames)
    if (f.function.size() > 4096 + 16 || f.file.size() > 4096 + 16) __builtin_trap();  // the name cap
  (void)t.expand_final_inline_frame(pcs);
  // The goroutine unwinder over the input as stack memory: bounded by the
  // depth cap and the bytes, whatever the return addresses say.
  std::vector<uint8_t> stack(data, data + std::min<size_t>(size, 4096));
  // The frame-pointer cross-check reads saved BPs from it too.
  const uint64_t bp = size ? 0x10000 - 64 + 8 * uint64_t{data[0]} : 0;
  // Any funcID may be taken for the wrapper's: elided frames take no depth
  // slot, and the walk stays bounded all the same.
  const uint8_t wrapper_id = size > 1 ? data[1] : 0;
  auto u = unwind_go_stack(t, 0, pcs[0], 0x10000, bp, 0x10000, stack, 64, nullptr, wrapper_id);
  if (u.pcs.size() > 64) __builtin_trap();
  (void)t.find_func_by_name("main.main");
}

// The image as a file: exercises the pread path (chunks, short reads).
std::unique_ptr<ElfFile> open_as_file(const uint8_t* data, size_t size) {
  int fd = memfd_create("fuzz-elf", MFD_CLOEXEC);
  if (fd < 0) return nullptr;
  size_t done = 0;
  while (done < size) {
    ssize_t w = write(fd, data + done, size - done);
    if (w <= 0) break;
    done += static_cast<size_t>(w);
  }
  std::unique_ptr<ElfFile> elf;
  try {
    elf = ElfFile::open_fd(fd, "fuzz-file");
  } catch (const ElfError&) {
  }
  close(fd);
  return elf;
}

void fuzz_elf(const uint8_t* data, size_t size, bool as_file) {
  std::unique_ptr<ElfFile> elf;
  if (as_file) {
    elf = open_as_file(data, size);
    if (!elf) return;
  } else {
    try {
      elf = ElfFile::from_bytes(std::vector<uint8_t>(data, data + size), "fuzz");
    } catch (const ElfError&) {
      return;
    }
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
  if (mode == 2 && b.size() >= 72) {
    uint32_t magic = (b[0] & 1) ? 0xfffffff1u : 0xfffffff0u;
    std::memcpy(b.data(), &magic, 4);
    b[4] = b[5] = 0;
    b[6] = 1;
    b[7] = 8;
  }
  if (mode == 3 && b.size() >= 72) {
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
    fuzz_elf(data + 1, size - 1, (data[0] & 4) != 0);
  else
    fuzz_pclntab(data + 1, size - 1, mode);
  return 0;
}
