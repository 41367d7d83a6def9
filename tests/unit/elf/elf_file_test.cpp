// ElfFile against the Go fixtures (oracles: go tool nm / buildid) and against
// garbage, truncated and corrupted images.
#include "elf/elf_file.h"

#include <elf.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

#include "go_fixture_util.h"

using namespace oomsnap;
using namespace oomsnap::testutil;

namespace {

class ElfFixtureTest : public testing::TestWithParam<GoFixture> {};

TEST_P(ElfFixtureTest, HeadersSegmentsAndNotes) {
  const auto& [v, mode] = GetParam();
  std::string path = fixture_path(v, mode);
  OOMSNAP_REQUIRE_FIXTURE(path);
  auto elf = open_elf(path);
  bool pie = mode.find("pie") != std::string::npos;
  EXPECT_EQ(elf->elf_type(), pie ? ET_DYN : ET_EXEC);
  ASSERT_TRUE(elf->first_load_vaddr());
  if (mode != "cgo") {
    EXPECT_EQ(*elf->first_load_vaddr(), 0x400000u) << "Go's internal linker puts PIE at 0x400000 too";
  }
  EXPECT_EQ(elf->has_symtab(), mode.find("stripped") == std::string::npos);

  const auto* text = elf->section(".text");
  ASSERT_NE(text, nullptr);
  auto data = elf->section_data(*text);
  ASSERT_EQ(data.size(), text->size);
  auto via_vaddr = elf->bytes_at_vaddr(text->addr, 64);
  ASSERT_TRUE(via_vaddr);
  EXPECT_EQ(0, std::memcmp(via_vaddr->data(), data.data(), 64));
  // A range past the end of every file-backed segment is not readable.
  EXPECT_FALSE(elf->bytes_at_vaddr(~uint64_t(0) - 8, 16));
  EXPECT_FALSE(elf->bytes_at_vaddr(text->addr, size_t(1) << 40));
  // .bss is NOBITS: no file bytes.
  if (const auto* bss = elf->section(".bss")) {
    EXPECT_TRUE(elf->section_data(*bss).empty());
    EXPECT_FALSE(elf->bytes_at_vaddr(bss->addr + bss->size - 8, 8));
  }

  auto gid = elf->go_build_id();
  ASSERT_TRUE(gid);
  std::string want = run_go(v, "tool buildid " + shell_quote(path));
  while (!want.empty() && (want.back() == '\n' || want.back() == '\r')) want.pop_back();
  ASSERT_FALSE(want.empty()) << "go tool buildid failed for " << path;
  EXPECT_EQ(*gid, want);
  (void)elf->gnu_build_id();  // present only when an external linker added it
}

TEST_P(ElfFixtureTest, SymbolsMatchGoToolNm) {
  const auto& [v, mode] = GetParam();
  std::string path = fixture_path(v, mode);
  OOMSNAP_REQUIRE_FIXTURE(path);
  auto elf = open_elf(path);
  if (!elf->has_symtab()) {
    EXPECT_FALSE(elf->symbol("runtime.mbuckets"));
    return;
  }
  auto lines = split_lines(run_go(v, "tool nm " + shell_quote(path)));
  ASSERT_GT(lines.size(), 100u) << "go tool nm failed for " << path;
  std::map<std::string, uint64_t> nm;
  for (const auto& l : lines) {
    std::istringstream in(l);
    std::string addr, type, name;
    if (!(in >> addr >> type) || type == "U" || addr.find_first_not_of("0123456789abcdef") != std::string::npos)
      continue;
    std::getline(in, name);
    if (!name.empty() && name[0] == ' ') name.erase(0, 1);
    nm.emplace(name, std::stoull(addr, nullptr, 16));
  }
  for (const char* name : {"runtime.mbuckets", "runtime.MemProfileRate", "runtime.firstmoduledata",
                           "runtime.text", "main.main"}) {
    auto s = elf->symbol(name);
    ASSERT_TRUE(s) << name;
    ASSERT_TRUE(nm.count(name)) << name;
    EXPECT_EQ(s->value, nm[name]) << name;
    EXPECT_EQ(s->name, name);
  }
  EXPECT_EQ(elf->symbol("runtime.mbuckets")->size, 8u);
  EXPECT_FALSE(elf->symbol("no.such.symbol"));
  EXPECT_FALSE(elf->symbol(""));
}

INSTANTIATE_TEST_SUITE_P(GoFixtures, ElfFixtureTest, testing::ValuesIn(all_go_fixtures()),
                         fixture_name);

// Exercises every accessor; must never crash on any image that parsed.
void poke(const ElfFile& e) {
  (void)e.first_load_vaddr();
  (void)e.has_symtab();
  (void)e.symbol("runtime.mbuckets");
  (void)e.gnu_build_id();
  (void)e.go_build_id();
  for (const auto& s : e.sections()) {
    try {
      auto d = e.section_data(s);
      if (!d.empty()) (void)d[d.size() - 1];
    } catch (const ElfError&) {
    }
    (void)e.bytes_at_vaddr(s.addr, 16);
  }
  for (const auto& p : e.segments()) {
    auto b = e.bytes_at_vaddr(p.vaddr, p.filesz);
    if (b && !b->empty()) (void)(*b)[b->size() - 1];
  }
}

TEST(ElfFileGarbage, RejectsNonElf) {
  EXPECT_THROW(ElfFile::from_bytes({}, "empty"), ElfError);
  EXPECT_THROW(ElfFile::from_bytes({0x7f, 'E', 'L', 'F'}, "tiny"), ElfError);
  std::vector<uint8_t> text(4096, 'A');
  EXPECT_THROW(ElfFile::from_bytes(text, "text"), ElfError);
  std::vector<uint8_t> elf32(128, 0);
  std::memcpy(elf32.data(), ELFMAG, SELFMAG);
  elf32[EI_CLASS] = ELFCLASS32;
  elf32[EI_DATA] = ELFDATA2LSB;
  EXPECT_THROW(ElfFile::from_bytes(elf32, "elf32"), ElfError);
  try {
    ElfFile::from_bytes(text, "my-label");
    FAIL();
  } catch (const ElfError& e) {
    EXPECT_NE(std::string(e.what()).find("my-label"), std::string::npos) << "errors carry context";
  }
  EXPECT_THROW(ElfFile::open_fd(-1, "badfd"), ElfError);
}

TEST(ElfFileGarbage, RandomBytesWithElfHeaderPrefix) {
  std::mt19937_64 rng(42);
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<uint8_t> b(64 + rng() % 4096);
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    std::memcpy(b.data(), ELFMAG, SELFMAG);
    b[EI_CLASS] = ELFCLASS64;
    b[EI_DATA] = ELFDATA2LSB;
    b[EI_VERSION] = EV_CURRENT;
    try {
      auto e = ElfFile::from_bytes(b, "random");
      poke(*e);
    } catch (const ElfError&) {
    }
  }
}

TEST(ElfFileGarbage, TruncatedAndCorruptedFixture) {
  std::string path = fixture_path("1.22", "default");
  OOMSNAP_REQUIRE_FIXTURE(path);
  auto full = read_file(path);
  ASSERT_GT(full.size(), 4096u);
  // Truncations: headers cut, section table cut, data cut.
  for (size_t len : {size_t(16), size_t(63), size_t(64), size_t(100), size_t(4096), full.size() / 3,
                     full.size() / 2, full.size() - 1}) {
    std::vector<uint8_t> b(full.begin(), full.begin() + len);
    try {
      auto e = ElfFile::from_bytes(b, "truncated");
      poke(*e);
    } catch (const ElfError&) {
    }
  }
  // Corrupt header fields.
  auto mutate = [&](auto fn) {
    std::vector<uint8_t> b = full;
    fn(b);
    try {
      auto e = ElfFile::from_bytes(std::move(b), "corrupt");
      poke(*e);
    } catch (const ElfError&) {
    }
  };
  auto* eh = reinterpret_cast<const Elf64_Ehdr*>(full.data());
  mutate([](auto& b) { reinterpret_cast<Elf64_Ehdr*>(b.data())->e_shoff = ~0ull - 10; });
  mutate([](auto& b) { reinterpret_cast<Elf64_Ehdr*>(b.data())->e_phoff = ~0ull - 10; });
  mutate([](auto& b) { reinterpret_cast<Elf64_Ehdr*>(b.data())->e_shnum = 0xffff; });
  mutate([](auto& b) { reinterpret_cast<Elf64_Ehdr*>(b.data())->e_phnum = 0xffff; });
  mutate([](auto& b) { reinterpret_cast<Elf64_Ehdr*>(b.data())->e_shstrndx = 0xfff0; });
  mutate([](auto& b) { reinterpret_cast<Elf64_Ehdr*>(b.data())->e_shentsize = 3; });
  // Every section header pointing out of the file / with huge sizes.
  mutate([&](auto& b) {
    for (size_t i = 0; i < eh->e_shnum; ++i) {
      auto* sh = reinterpret_cast<Elf64_Shdr*>(b.data() + eh->e_shoff + i * sizeof(Elf64_Shdr));
      sh->sh_offset = ~0ull - 100;
      sh->sh_size = ~0ull / 2;
      sh->sh_name = 0x7fffffff;
    }
  });
  mutate([&](auto& b) {
    for (size_t i = 0; i < eh->e_phnum; ++i) {
      auto* ph = reinterpret_cast<Elf64_Phdr*>(b.data() + eh->e_phoff + i * sizeof(Elf64_Phdr));
      ph->p_offset = ~0ull - 100;
      ph->p_filesz = ~0ull / 2;
    }
  });
  // Random byte flips across the headers and tables.
  std::mt19937_64 rng(7);
  for (int iter = 0; iter < 300; ++iter) {
    mutate([&](auto& b) {
      for (int k = 0; k < 16; ++k) {
        size_t at = rng() % 2 ? rng() % 4096 : eh->e_shoff + rng() % (b.size() - eh->e_shoff);
        if (at < b.size()) b[at] = static_cast<uint8_t>(rng());
      }
    });
  }
}

TEST(ElfFileGarbage, SectionlessImageStillHasSegments) {
  std::string path = fixture_path("1.22", "default");
  OOMSNAP_REQUIRE_FIXTURE(path);
  auto b = read_file(path);
  auto* eh = reinterpret_cast<Elf64_Ehdr*>(b.data());
  eh->e_shoff = 0;
  eh->e_shnum = 0;
  eh->e_shstrndx = 0;
  auto e = ElfFile::from_bytes(std::move(b), "no-sections");
  EXPECT_TRUE(e->sections().empty());
  EXPECT_FALSE(e->segments().empty());
  EXPECT_EQ(*e->first_load_vaddr(), 0x400000u);
  EXPECT_TRUE(e->go_build_id()) << "found through PT_NOTE";
  EXPECT_FALSE(e->symbol("runtime.mbuckets"));
}

}  // namespace
