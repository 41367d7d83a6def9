// Go build info: version and modinfo against `go version [-m]`, with and without
// section headers, and never throwing on garbage.
#include "go/go_buildinfo.h"

#include <elf.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "elf/elf_file.h"
#include "go_fixture_util.h"

using namespace oomsnap;
using namespace oomsnap::testutil;

namespace {

TEST(GoVersionParse, Forms) {
  auto v = GoVersion::parse("go1.26.10");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->major, 1);
  EXPECT_EQ(v->minor, 26);
  EXPECT_EQ(v->patch, 10);
  EXPECT_EQ(v->text, "go1.26.10");
  v = GoVersion::parse("go1.22");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->minor, 22);
  EXPECT_EQ(v->patch, 0);
  v = GoVersion::parse("go1.21rc2");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->minor, 21);
  v = GoVersion::parse("go1.23.4-bigcorp");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->patch, 4);
  EXPECT_EQ(v->text, "go1.23.4-bigcorp");
  v = GoVersion::parse("go1.25.1 X:boringcrypto");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->minor, 25);
  for (const char* bad : {"", "go", "go1", "go1.", "gox.1", "1.22", "go1.x", "go1.22.", "go1.22.x",
                          "golang1.2", "go1.2y", "go99999999999.1"})
    EXPECT_FALSE(GoVersion::parse(bad)) << bad;
  EXPECT_TRUE(GoVersion::parse("go1.20")->at_least(1, 20));
  EXPECT_FALSE(GoVersion::parse("go1.19.8")->at_least(1, 20));
  EXPECT_TRUE(GoVersion::parse("go1.27.3")->at_least(1, 26));
}

class BuildInfoFixtureTest : public testing::TestWithParam<GoFixture> {};

TEST_P(BuildInfoFixtureTest, MatchesGoVersion) {
  const auto& [v, mode] = GetParam();
  std::string path = fixture_path(v, mode);
  OOMSNAP_REQUIRE_FIXTURE(path);
  auto elf = open_elf(path);
  auto bi = read_go_buildinfo(*elf);
  ASSERT_TRUE(bi) << path;

  auto lines = split_lines(run_go(v, "version -m " + shell_quote(path)));
  ASSERT_FALSE(lines.empty()) << "go version -m failed for " << path;
  std::string prefix = path + ": ";
  ASSERT_EQ(lines[0].rfind(prefix, 0), 0u) << lines[0];
  std::string want_version = lines[0].substr(prefix.size());
  EXPECT_EQ(bi->version.text, want_version);
  EXPECT_EQ(bi->version.major, 1);
  EXPECT_EQ("1." + std::to_string(bi->version.minor), v);

  // Every `go version -m` line (tab-indented) is a modinfo line.
  std::vector<std::string> want_mod;
  for (size_t i = 1; i < lines.size(); ++i)
    if (!lines[i].empty() && lines[i][0] == '\t') want_mod.push_back(lines[i].substr(1));
  auto got_mod = split_lines(bi->modinfo);
  EXPECT_EQ(got_mod, want_mod);
  EXPECT_NE(bi->modinfo.find("build\t"), std::string::npos);
}

TEST_P(BuildInfoFixtureTest, FoundByMagicScanWithoutSections) {
  const auto& [v, mode] = GetParam();
  std::string path = fixture_path(v, mode);
  OOMSNAP_REQUIRE_FIXTURE(path);
  auto want = read_go_buildinfo(*open_elf(path));
  ASSERT_TRUE(want);
  auto b = read_file(path);
  auto* eh = reinterpret_cast<Elf64_Ehdr*>(b.data());
  eh->e_shoff = 0;
  eh->e_shnum = 0;
  eh->e_shstrndx = 0;
  auto elf = ElfFile::from_bytes(std::move(b), "no-sections");
  auto bi = read_go_buildinfo(*elf);
  ASSERT_TRUE(bi);
  EXPECT_EQ(bi->version.text, want->version.text);
  EXPECT_EQ(bi->modinfo, want->modinfo);
}

INSTANTIATE_TEST_SUITE_P(GoFixtures, BuildInfoFixtureTest, testing::ValuesIn(all_go_fixtures()),
                         fixture_name);

TEST(GoBuildInfo, NotAGoBinary) {
  // The test binary itself is a C++ ELF; it holds the magic several times (the
  // reader's own constant, these tests' images), one of them at a 16-byte
  // aligned address on some link layouts: no copy of it makes it Go.
  auto self = open_elf("/proc/self/exe");
  EXPECT_FALSE(read_go_buildinfo(*self));
}

// A program that is not Go costs the scan of its writable data, not of the
// whole of it: every capture asks first whether its target is Go, and the
// scan of all a CPython's 7 MB was a tenth of its snapshot's time.
TEST(GoBuildInfo, AProgramThatIsNotGoCostsOnlyItsDataScan) {
  auto self = open_elf("/proc/self/exe");
  uint64_t data = 0, loaded = 0;
  for (const auto& seg : self->segments()) {
    if (seg.type != PT_LOAD) continue;
    loaded += seg.filesz;
    if ((seg.flags & (PF_W | PF_X)) == PF_W) data += seg.filesz;
  }
  // At most the data and a read piece at each end of it.
  const uint64_t bound = data + 2 * ElfFile::kChunk;
  ASSERT_GT(loaded, bound) << "this test needs a program whose code outweighs its data";
  const uint64_t before = self->bytes_read();
  EXPECT_FALSE(read_go_buildinfo(*self));
  EXPECT_LE(self->bytes_read() - before, bound);
}

// A minimal ELF with one PT_LOAD covering the whole image; payload at 0x100.
std::vector<uint8_t> tiny_elf(const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> b(0x100 + payload.size(), 0);
  auto* eh = reinterpret_cast<Elf64_Ehdr*>(b.data());
  std::memcpy(eh->e_ident, ELFMAG, SELFMAG);
  eh->e_ident[EI_CLASS] = ELFCLASS64;
  eh->e_ident[EI_DATA] = ELFDATA2LSB;
  eh->e_ident[EI_VERSION] = EV_CURRENT;
  eh->e_type = ET_EXEC;
  eh->e_machine = EM_X86_64;
  eh->e_version = EV_CURRENT;
  eh->e_phoff = sizeof(Elf64_Ehdr);
  eh->e_ehsize = sizeof(Elf64_Ehdr);
  eh->e_phentsize = sizeof(Elf64_Phdr);
  eh->e_phnum = 1;
  auto* ph = reinterpret_cast<Elf64_Phdr*>(b.data() + sizeof(Elf64_Ehdr));
  ph->p_type = PT_LOAD;
  ph->p_flags = PF_R | PF_W;
  ph->p_offset = 0;
  ph->p_vaddr = 0x400000;
  ph->p_filesz = ph->p_memsz = b.size();
  std::memcpy(b.data() + 0x100, payload.data(), payload.size());
  return b;
}

std::vector<uint8_t> blob_header(uint8_t flags) {
  std::vector<uint8_t> h(32, 0);
  std::memcpy(h.data(), "\xff Go buildinf:", 14);
  h[14] = 8;
  h[15] = flags;
  return h;
}

// Without section headers only writable data is searched, as Go's own
// debug/buildinfo does: the linker puts the blob there.
TEST(GoBuildInfo, WithoutSectionsOnlyWritableDataIsSearched) {
  auto p = blob_header(2);
  const std::string vers = "go1.22.1";
  p.push_back(static_cast<uint8_t>(vers.size()));
  p.insert(p.end(), vers.begin(), vers.end());
  p.push_back(0);
  auto with_flags = [&](uint32_t flags) {
    auto b = tiny_elf(p);
    reinterpret_cast<Elf64_Phdr*>(b.data() + sizeof(Elf64_Ehdr))->p_flags = flags;
    return read_go_buildinfo(*ElfFile::from_bytes(std::move(b), "flags"));
  };
  EXPECT_TRUE(with_flags(PF_R | PF_W));
  EXPECT_FALSE(with_flags(PF_R | PF_X));
  EXPECT_FALSE(with_flags(PF_R));
  EXPECT_FALSE(with_flags(PF_R | PF_W | PF_X));
}

TEST(GoBuildInfo, SyntheticInlineAndPointerFormats) {
  // 1.18+ inline format.
  auto p = blob_header(2);
  std::string vers = "go1.21.3";
  std::string mod = std::string(16, 'S') + "path\tx\n" + std::string(16, 'E');
  p.push_back(static_cast<uint8_t>(vers.size()));
  p.insert(p.end(), vers.begin(), vers.end());
  p.push_back(static_cast<uint8_t>(mod.size()));
  p.insert(p.end(), mod.begin(), mod.end());
  auto bi = read_go_buildinfo(*ElfFile::from_bytes(tiny_elf(p), "inline"));
  ASSERT_TRUE(bi);
  EXPECT_EQ(bi->version.text, "go1.21.3");
  EXPECT_EQ(bi->version.minor, 21);
  EXPECT_EQ(bi->modinfo, "path\tx\n");

  // Pre-1.18 pointer format: header pointers -> Go string headers -> bytes.
  // Layout (file offset = vaddr - 0x400000): blob @0x100, strhdrs @0x140, bytes @0x160.
  auto q = blob_header(0);
  q.resize(0x80, 0);
  auto put64 = [&](size_t off, uint64_t v) { std::memcpy(q.data() + off, &v, 8); };
  put64(16, 0x400140);  // version string header
  put64(24, 0x400150);  // modinfo string header (empty modinfo)
  put64(0x40, 0x400160);
  put64(0x48, 8);
  put64(0x50, 0);
  put64(0x58, 0);
  std::memcpy(q.data() + 0x60, "go1.16.5", 8);
  bi = read_go_buildinfo(*ElfFile::from_bytes(tiny_elf(q), "ptr"));
  ASSERT_TRUE(bi);
  EXPECT_EQ(bi->version.text, "go1.16.5");
  EXPECT_EQ(bi->version.minor, 16);
  EXPECT_EQ(bi->modinfo, "");
}

// A copy of the magic that is not a header: the bare string (its NUL where
// the pointer size goes) followed by whatever the linker put after it, and
// headers whose inline "version" is not one. Each made one ELF "Go" before.
TEST(GoBuildInfo, TheMagicAloneOrANonVersionIsNotGo) {
  auto with_inline = [](uint8_t ptr_size, const std::string& vers) {
    auto p = blob_header(2);
    p[14] = ptr_size;
    p.push_back(static_cast<uint8_t>(vers.size()));
    p.insert(p.end(), vers.begin(), vers.end());
    p.push_back(0);
    return read_go_buildinfo(*ElfFile::from_bytes(tiny_elf(p), "inline"));
  };
  EXPECT_TRUE(with_inline(8, "go1.21.3"));
  EXPECT_TRUE(with_inline(4, "devel go1.24-abcdef Tue Jan 1"));
  EXPECT_FALSE(with_inline(0, "go1.21.3"));  // the magic's own NUL as pointer size
  EXPECT_FALSE(with_inline(8, "ntime.SetBlockProfileRate"));
  EXPECT_FALSE(with_inline(8, "1.21.3"));
  // The bytes oomsnap's own .rodata held: "\xff Go buildinf:\0runtime.SetBlockProfileRate\0 ...".
  static constexpr char kAfter[] = "\0runtime.SetBlockProfileRate\0 is 0 or";
  std::string rodata = std::string("\xff Go buildinf:", 14) + std::string(kAfter, sizeof kAfter - 1);
  rodata.resize(64, '\0');
  const std::vector<uint8_t> bare(rodata.begin(), rodata.end());
  EXPECT_FALSE(read_go_buildinfo(*ElfFile::from_bytes(tiny_elf(bare), "bare magic")));
}

TEST(GoBuildInfo, GarbageNeverThrows) {
  std::mt19937_64 rng(1);
  for (int iter = 0; iter < 3000; ++iter) {
    auto p = blob_header(static_cast<uint8_t>(rng()));
    p[14] = static_cast<uint8_t>(rng() % 3 ? 8 : rng());
    size_t extra = rng() % 64;
    for (size_t i = 0; i < extra; ++i) p.push_back(static_cast<uint8_t>(rng()));
    // Lengths that run past the end (only when there is a byte after the
    // 32-byte header to hold one: with extra == 0, p[32] was written out of
    // bounds, found by ASan; rng() is still drawn first, so the inputs are unchanged).
    if (rng() % 2 && p.size() > 32) {
      p[32] = 0xff;
      if (p.size() > 33) p[33] = 0x7f;
    }
    auto img = tiny_elf(p);
    img.resize(img.size() - rng() % (p.size() + 1));
    try {
      auto elf = ElfFile::from_bytes(img, "garbage");
      EXPECT_NO_THROW((void)read_go_buildinfo(*elf));
    } catch (const ElfError&) {
    }
  }
}

}  // namespace
