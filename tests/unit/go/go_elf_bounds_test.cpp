// Issue #12: the Go and ELF readers are bounded whatever a target's binary or
// memory holds. Each test crafts the input one guard is for and fails without
// that guard (noted per test).
#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "elf/elf_file.h"
#include "go/go_heap_reader.h"
#include "go/go_pclntab.h"
#include "elf_bytes.h"
#include "go_fixture_util.h"

using namespace oomsnap;
using namespace oomsnap::testutil;

namespace {

// put_phdr: a PT_LOAD of filesz bytes, as many in memory.
void put_phdr(std::vector<uint8_t>& b, size_t at, uint64_t off, uint64_t vaddr, uint64_t filesz) {
  put_load_phdr(b, at, off, vaddr, filesz, filesz);
}

// A temporary file holding `bytes`, optionally extended (sparse) to `size`.
struct TempFile {
  std::string path;
  int fd = -1;
  explicit TempFile(const std::vector<uint8_t>& bytes, uint64_t size = 0) {
    char tmpl[] = "/tmp/oomsnap-elf-XXXXXX";
    fd = mkstemp(tmpl);
    path = tmpl;
    if (fd < 0) return;
    EXPECT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    if (size > bytes.size()) {
      EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
    }
  }
  ~TempFile() {
    if (fd >= 0) close(fd);
    unlink(path.c_str());
  }
};

// A pclntab (Go 1.20+ layout) with one function [text, text+0x1000) named
// `name`, and a text start of 0x401000.
std::vector<uint8_t> one_function_pclntab(const std::string& name) {
  std::vector<uint8_t> b(72, 0);
  put<uint32_t>(b, 0, 0xfffffff1u);
  b[6] = 1;
  b[7] = 8;
  const uint64_t funcname = 72;
  std::vector<uint8_t> names(1, 0);
  names.insert(names.end(), name.begin(), name.end());
  names.push_back(0);
  const uint64_t cu = funcname + names.size(), filetab = cu + 4, pctab = filetab + 1, pcln = pctab + 1;
  put<uint64_t>(b, 8, 1);  // nfunc
  put<uint64_t>(b, 16, 1);
  put<uint64_t>(b, 32, funcname);
  put<uint64_t>(b, 40, cu);
  put<uint64_t>(b, 48, filetab);
  put<uint64_t>(b, 56, pctab);
  put<uint64_t>(b, 64, pcln);
  b.insert(b.end(), names.begin(), names.end());
  b.resize(pcln, 0);
  put<uint32_t>(b, pcln, 0);           // ftab[0].entryoff
  put<uint32_t>(b, pcln + 4, 16);      // ftab[0].funcoff
  put<uint32_t>(b, pcln + 8, 0x1000);  // ftab[1].entryoff: the end
  put<uint32_t>(b, pcln + 16 + 4, 1);  // _func.nameOff
  b.resize(pcln + 16 + 44, 0);         // the rest of the _func: no tables
  return b;
}

// --- ElfFile --------------------------------------------------------------

// The crafted 61 MiB ELF of the issue had ~1M section headers: libelf and the
// section list took 330 MiB. Without the cap this opens (70000 sections).
TEST(ElfBounds, SectionCountOverTheCapIsAnError) {
  const uint64_t n = ElfFile::kMaxSections + 4465;  // 70000
  auto b = elf_header(0, 0, sizeof(Elf64_Ehdr), 0, SHN_XINDEX);
  put<uint64_t>(b, sizeof(Elf64_Ehdr) + 32, n);  // extended numbering: shdr[0].sh_size
  b.resize(sizeof(Elf64_Ehdr) + n * sizeof(Elf64_Shdr), 0);
  try {
    ElfFile::from_bytes(b, "many-sections");
    FAIL() << "70000 section headers accepted";
  } catch (const ElfError& e) {
    EXPECT_NE(std::string(e.what()).find("70000 section headers"), std::string::npos) << e.what();
  }
}

// Headers are read, not the file: a 512 MiB (sparse) file costs its header
// chunk. Without the pread reader (a whole-file mmap) bytes_read() did not exist.
TEST(ElfBounds, OpeningReadsOnlyTheHeaders) {
  auto b = elf_header(64, 1, 0, 0, 0);
  put_phdr(b, 64, 0, 0x400000, 512u << 20);
  TempFile f(b, 512u << 20);
  ASSERT_GE(f.fd, 0);
  auto elf = ElfFile::open_fd(f.fd, f.path);
  EXPECT_EQ(elf->segments().size(), 1u);
  EXPECT_LE(elf->bytes_read(), ElfFile::kChunk);
}

// Reading more than the budget is refused up front, with context.
TEST(ElfBounds, ReadBudgetIsEnforced) {
  auto b = elf_header(64, 1, 0, 0, 0);
  put_phdr(b, 64, 0, 0x400000, 300u << 20);
  TempFile f(b, 300u << 20);
  ASSERT_GE(f.fd, 0);
  auto elf = ElfFile::open_fd(f.fd, f.path);
  EXPECT_FALSE(elf->bytes_at_vaddr(0x400000, 300u << 20));
  EXPECT_NE(elf->io_error().find("read budget"), std::string::npos) << elf->io_error();
  EXPECT_LE(elf->bytes_read(), ElfFile::kMaxReadBytes);
}

// A target's file that shrinks under the reader: an error, not SIGBUS (which
// the mmap reader took on the first touch past the new end: this test died).
// The data sits 8 MiB into the file, in a chunk opening does not read.
TEST(ElfBounds, FileThatShrinksGivesAnErrorNotSigbus) {
  const uint64_t at = 8u << 20, len = 1u << 20;
  auto b = elf_header(64, 1, 128, 1, 0);
  put_phdr(b, 64, at, 0x400000, len);
  put<uint32_t>(b, 128 + 4, SHT_PROGBITS);  // the one section: the same bytes
  put<uint64_t>(b, 128 + 16, 0x400000);
  put<uint64_t>(b, 128 + 24, at);
  put<uint64_t>(b, 128 + 32, len);
  TempFile f(b, at + len);
  ASSERT_GE(f.fd, 0);
  auto elf = ElfFile::open_fd(f.fd, f.path);
  ASSERT_EQ(elf->sections().size(), 1u);
  ASSERT_EQ(ftruncate(f.fd, 4096), 0);
  try {
    (void)elf->section_data(elf->sections()[0]);
    FAIL() << "read past the end of a shrunk file";
  } catch (const ElfError& e) {
    EXPECT_NE(std::string(e.what()).find("shrank"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(elf->bytes_at_vaddr(0x400000, 64));
  EXPECT_NE(elf->io_error().find("shrank"), std::string::npos) << elf->io_error();
  EXPECT_THROW(GoPclntab::from_elf(*elf), PclntabError);
}

// --- pclntab scan ---------------------------------------------------------

// A file without sections whose one load segment is full of plausible
// pcHeaders, all sharing one long functab that is sorted up to its last
// entry: each candidate's full check walked it all, so the scan was
// quadratic (14 s for 16 MiB before). Now the candidates after the first few
// are not checked in full: the work counted is bounded.
TEST(PclntabScanBounds, CandidateFloodIsCapped) {
  const uint64_t body = 4u << 20, nhdr = 4000, base = 0x401000;
  const uint64_t ftab = nhdr * 72;
  auto b = elf_header(64, 1, 0, 0, 0);
  put_phdr(b, 64, 0x1000, base, body);
  b.resize(0x1000 + body, 0);
  uint8_t* d = b.data() + 0x1000;
  for (uint64_t i = 0; (ftab + i * 8 + 4) <= body; ++i) {
    uint32_t v = static_cast<uint32_t>(i);
    std::memcpy(d + ftab + i * 8, &v, 4);
  }
  std::memset(d + body - 8, 0, 4);  // unsorted only at the very end
  for (uint64_t k = 0; k < nhdr; ++k) {
    std::vector<uint8_t> h(72, 0);
    const uint64_t o = k * 72, rest = body - o, pcln = ftab - o;
    put<uint32_t>(h, 0, 0xfffffff1u);
    h[6] = 1;
    h[7] = 8;
    put<uint64_t>(h, 8, (rest - pcln) / 8 - 1);
    put<uint64_t>(h, 16, 1);
    for (int f = 4; f < 8; ++f) put<uint64_t>(h, 8 * f, 72);
    put<uint64_t>(h, 64, pcln);
    std::memcpy(d + o, h.data(), 72);
  }
  auto elf = ElfFile::from_bytes(std::move(b), "candidates");
  PclntabScanStats st;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(GoPclntab::from_elf(*elf, std::nullopt, &st), PclntabError);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("scan of %llu candidates: %llu positions, %llu full checks, %.1f ms\n",
              static_cast<unsigned long long>(nhdr), static_cast<unsigned long long>(st.positions),
              static_cast<unsigned long long>(st.full_checks), ms);
  EXPECT_LT(st.positions, nhdr);   // stopped early: plausible headers are dense
  EXPECT_LE(st.full_checks, 9u);  // the cap (8) + the one that stopped the scan
}

// --- symbolization ------------------------------------------------------

// A 10 KiB function name is reported cut at 4 KiB, marked.
TEST(PclntabNameBounds, LongFunctionNameIsCutAndMarked) {
  GoPclntab t(one_function_pclntab(std::string(10000, 'x')), 0x401000);
  auto frames = t.frames_for_pc(0x401010);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].function, std::string(4096, 'x') + "...[truncated]");
  auto f = t.find_func(0x401010);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->name.size(), 4096u + 14);
  GoPclntab short_name(one_function_pclntab("main.main"), 0x401000);
  EXPECT_EQ(short_name.frames_for_pc(0x401010).at(0).function, "main.main");
}

// A stack longer than the frame cap stops there, with a marker frame.
TEST(PclntabNameBounds, StackFramesAreCapped) {
  GoPclntab t(one_function_pclntab("main.f"), 0x401000);
  std::vector<uint64_t> pcs(9000, 0x401010);
  auto frames = t.symbolize_stack(pcs);
  ASSERT_EQ(frames.size(), 8193u);
  EXPECT_EQ(frames[8191].function, "main.f");
  EXPECT_EQ(frames.back().function, "[frames truncated]");
}

// Offsets in the func table, the _func, its pcdata/funcdata arrays and the
// inline tree that point past the end of the buffer they index read as absent:
// no function, no name, no file/line, no inlined frame; never a read past the
// buffer (the ASan build catches one).
TEST(PclntabOffsetBounds, OffsetsPastTheEndReadAsAbsent) {
  const std::vector<uint8_t> base = one_function_pclntab("main.f");
  uint64_t pcln_abs = 0;  // the functab; the _func is 16 bytes after it
  std::memcpy(&pcln_abs, base.data() + 64, 8);
  const uint64_t pctab_abs = pcln_abs - 1;
  const uint64_t func = pcln_abs + 16;
  const uint64_t pc = 0x401010;
  {
    GoPclntab ok(base, 0x401000);
    ASSERT_TRUE(ok.find_func(pc));
    ASSERT_EQ(ok.frames_for_pc(pc).size(), 1u);
  }
  // ftab[0].funcoff past the end, and so that the _func straddles the end.
  for (uint32_t funcoff : {0x7fffffffu, 0xffffffffu, uint32_t(base.size() - pcln_abs - 10),
                           uint32_t(base.size() - pcln_abs)}) {
    auto b = base;
    put<uint32_t>(b, pcln_abs + 4, funcoff);
    GoPclntab t(b, 0x401000);
    EXPECT_FALSE(t.find_func(pc)) << funcoff;
    EXPECT_TRUE(t.frames_for_pc(pc).empty()) << funcoff;
    EXPECT_TRUE(t.symbolize_stack(std::vector<uint64_t>{pc, pc}).empty()) << funcoff;
    EXPECT_FALSE(t.find_func_by_name("main.f")) << funcoff;
  }
  // npcdata / nfuncdata counting arrays past the end: no function.
  for (uint32_t npcdata : {1u, 0x40000000u, 0xffffffffu}) {
    auto b = base;
    put<uint32_t>(b, func + 28, npcdata);
    GoPclntab t(b, 0x401000);
    EXPECT_FALSE(t.find_func(pc)) << npcdata;
    EXPECT_TRUE(t.frames_for_pc(pc).empty()) << npcdata;
  }
  {
    auto b = base;
    b[func + 43] = 0xff;  // nfuncdata
    GoPclntab t(b, 0x401000);
    EXPECT_FALSE(t.find_func(pc));
  }
  // nameOff, pcfile, pcln and cuOffset past the end: the function is found,
  // without a name, file or line.
  {
    auto b = base;
    put<uint32_t>(b, func + 4, 0xfffffff0u);   // nameOff
    put<uint32_t>(b, func + 20, 0x7ffffff0u);  // pcfile
    put<uint32_t>(b, func + 24, 0xfffffff0u);  // pcln
    put<uint32_t>(b, func + 32, 0xfffffff0u);  // cuOffset
    GoPclntab t(b, 0x401000);
    auto f = t.find_func(pc);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->name, "");
    auto frames = t.frames_for_pc(pc);
    ASSERT_EQ(frames.size(), 1u);
    EXPECT_EQ(frames[0].function, "");
    EXPECT_EQ(frames[0].file, "?");
    EXPECT_EQ(frames[0].line, 0);
  }
  // A pcvalue table that runs off the end mid-uvarint: no line.
  {
    auto b = base;
    const uint64_t tab = b.size() - pctab_abs;
    b.push_back(0x02);
    b.push_back(0x80);  // pcdelta uvarint continues past the end
    put<uint32_t>(b, func + 24, uint32_t(tab));
    GoPclntab t(b, 0x401000);
    auto frames = t.frames_for_pc(pc);
    ASSERT_EQ(frames.size(), 1u);
    EXPECT_EQ(frames[0].function, "main.f");
    EXPECT_EQ(frames[0].line, 0);
  }
  // The inline tree: pcdata[2] (inline index) and funcdata[3] (the tree) with
  // offsets past the end of the table / of the gofunc bytes, and a tree whose
  // entry runs past the end: the physical function only.
  auto with_inline = [&](uint32_t pcdata2, uint32_t funcdata3) {
    auto b = base;
    put<uint32_t>(b, func + 28, 3);  // npcdata
    b[func + 43] = 4;                // nfuncdata
    const uint64_t arrays = func + 44;
    b.resize(arrays + 7 * 4, 0);
    put<uint32_t>(b, arrays + 2 * 4, pcdata2);
    for (int k = 0; k < 4; ++k) put<uint32_t>(b, arrays + 12 + 4 * k, k == 3 ? funcdata3 : 0xffffffffu);
    return b;
  };
  auto inline_index_table = [&](std::vector<uint8_t>& b) {
    // value 0 (zigzag +1 from -1) for the whole function [0, 0x1000), then end.
    const uint64_t tab = b.size() - pctab_abs;
    for (uint8_t x : {0x02, 0x80, 0x20, 0x00}) b.push_back(x);
    return uint32_t(tab);
  };
  {
    auto b = with_inline(0, 0);
    const uint32_t tab = inline_index_table(b);
    put<uint32_t>(b, func + 44 + 8, tab);
    // A valid tree: entry 0 names main.f itself (nameOff 1), its call site
    // past the function's end (where the index table has no value).
    GoPclntab t(b, 0x401000);
    std::vector<uint8_t> tree(16, 0);
    put<uint32_t>(tree, 4, 1);
    put<int32_t>(tree, 8, 0x1000);
    put<int32_t>(tree, 12, 7);
    t.set_gofunc(0x4e0000, tree);
    auto frames = t.frames_for_pc(pc);
    ASSERT_EQ(frames.size(), 2u);  // sanity: the tree is used
    EXPECT_TRUE(frames[0].inlined);
    EXPECT_EQ(frames[0].function, "main.f");
    // The same tree, cut short of its entry: no inlined frame.
    GoPclntab cut(b, 0x401000);
    cut.set_gofunc(0x4e0000, std::vector<uint8_t>(tree.begin(), tree.begin() + 15));
    frames = cut.frames_for_pc(pc);
    ASSERT_EQ(frames.size(), 1u);
    EXPECT_FALSE(frames[0].inlined);
    EXPECT_EQ(cut.expand_final_inline_frame(std::vector<uint64_t>{pc}), std::vector<uint64_t>{pc});
    // funcdata[3] past the gofunc bytes.
    auto b2 = b;
    put<uint32_t>(b2, func + 44 + 12 + 12, 0x7ffffff0u);
    GoPclntab far(b2, 0x401000);
    far.set_gofunc(0x4e0000, tree);
    frames = far.frames_for_pc(pc);
    ASSERT_EQ(frames.size(), 1u);
    EXPECT_FALSE(frames[0].inlined);
    // An inline entry whose nameOff is past the end: an inlined frame without a name.
    auto tree2 = tree;
    put<uint32_t>(tree2, 4, 0xfffffff0u);
    GoPclntab noname(b, 0x401000);
    noname.set_gofunc(0x4e0000, tree2);
    frames = noname.frames_for_pc(pc);
    ASSERT_EQ(frames.size(), 2u);
    EXPECT_TRUE(frames[0].inlined);
    EXPECT_EQ(frames[0].function, "");
    EXPECT_EQ(frames[1].function, "main.f");
  }
  for (uint32_t pcdata2 : {0x7ffffff0u, 0xffffffffu}) {
    auto b = with_inline(pcdata2, 0);
    GoPclntab t(b, 0x401000);
    std::vector<uint8_t> tree(16, 0);
    put<uint32_t>(tree, 4, 1);
    t.set_gofunc(0x4e0000, tree);
    auto frames = t.frames_for_pc(pc);
    ASSERT_EQ(frames.size(), 1u) << pcdata2;
    EXPECT_FALSE(frames[0].inlined);
    EXPECT_EQ(frames[0].function, "main.f");
  }
}

// --- heap-profile buckets -----------------------------------------------

// nstk = 2^61 + 1 makes nstk * 8 wrap to 8: with a depth cap that lets it
// through, the size check passed and the PCs pointed far outside the image.
TEST(GoBucketBounds, StackDepthThatWrapsTheSizeIsRejected) {
  std::vector<uint8_t> img(48 + 8 + 4 * 4 * 8, 0);
  put<uint64_t>(img, 16, 1);                              // typ: memProfile
  put<uint64_t>(img, 40, (uint64_t{1} << 61) + 1);       // nstk
  std::string err;
  EXPECT_FALSE(decode_go_bucket(img, 26, SIZE_MAX, err));
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;
}

}  // namespace
