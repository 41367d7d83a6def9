// GoPclntab against the Go fixtures (oracles: go tool nm / addr2line and the
// fixture's source), stack symbolization rules, and hostile tables.
#include "go/go_pclntab.h"

#include <elf.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "elf/elf_file.h"
#include "go_fixture_util.h"

using namespace oomsnap;
using namespace oomsnap::testutil;

namespace {

int minor_of(const std::string& v) { return std::stoi(v.substr(2)); }
bool is_pie(const std::string& mode) { return mode.find("pie") != std::string::npos; }

// Line number (1-based) of the first line of the fixture's main.go containing s.
int source_line(const std::string& s) {
  std::string path = std::string(OOMSNAP_SOURCE_DIR) + "/tests/fixtures/go/heapfixture/main.go";
  auto bytes = read_file(path);
  auto lines = split_lines(std::string(bytes.begin(), bytes.end()));
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i].find(s) != std::string::npos) return static_cast<int>(i + 1);
  return -1;
}

// A deterministic sample of PCs: a few offsets in every k-th function, plus
// every byte of the given functions.
std::vector<uint64_t> sample_pcs(const GoPclntab& t, std::initializer_list<const char*> all_of,
                                 size_t target = 4000) {
  std::vector<uint64_t> pcs;
  std::set<uint64_t> seen;
  // Walk functions by address from text_start.
  std::vector<GoPclntab::Func> funcs;
  uint64_t pc = t.text_start();
  for (size_t i = 0; i < t.nfunc() + 1; ++i) {
    auto f = t.find_func(pc);
    if (!f) break;
    funcs.push_back(*f);
    pc = f->end;
  }
  size_t per = 4;
  size_t step = std::max<size_t>(1, funcs.size() * per / target);
  for (size_t i = 0; i < funcs.size(); i += step) {
    const auto& f = funcs[i];
    uint64_t len = f.end - f.entry;
    for (uint64_t k = 0; k < per && len > 2; ++k) {
      uint64_t p = f.entry + 1 + (len - 2) * k / per;
      if (seen.insert(p).second) pcs.push_back(p);
    }
  }
  for (const char* name : all_of)
    if (auto f = t.find_func_by_name(name))
      for (uint64_t p = f->entry + 1; p < f->end; ++p)
        if (seen.insert(p).second) pcs.push_back(p);
  return pcs;
}

class PclntabFixtureTest : public testing::TestWithParam<GoFixture> {
 protected:
  void SetUp() override {
    const auto& [v, mode] = GetParam();
    path_ = fixture_path(v, mode);
    if (!file_exists(path_)) return;
    elf_ = open_elf(path_);
  }
  std::string path_;
  std::unique_ptr<ElfFile> elf_;
};

TEST_P(PclntabFixtureTest, HeaderAndTextStart) {
  const auto& [v, mode] = GetParam();
  OOMSNAP_REQUIRE_FIXTURE(path_);
  auto t = GoPclntab::from_elf(*elf_);
  EXPECT_EQ(t.magic(), minor_of(v) >= 20 ? 0xfffffff1u : 0xfffffff0u);
  EXPECT_EQ(t.go120_plus(), minor_of(v) >= 20);
  EXPECT_GT(t.nfunc(), 1000u);
  EXPECT_NE(t.pcheader_vaddr(), 0u);
  if (minor_of(v) >= 26) {
    EXPECT_EQ(t.header_text_start(), 0u);
  }
  if (elf_->has_symtab()) {
    EXPECT_EQ(t.text_start(), elf_->symbol("runtime.text")->value);
    EXPECT_EQ(t.gofunc(), elf_->symbol(minor_of(v) >= 20 ? "go:func.*" : "go.func.*")->value);
  } else {
    // Same code layout as the unstripped sibling.
    std::string sib = fixture_path(v, symbolized_sibling_mode(mode));
    OOMSNAP_REQUIRE_FIXTURE(sib);
    auto se = open_elf(sib);
    EXPECT_EQ(t.text_start(), se->symbol("runtime.text")->value);
  }
  EXPECT_TRUE(t.gofunc()) << "inline tree base (moduledata.gofunc) not found";
  ASSERT_TRUE(t.find_func_by_name("main.main"));
  ASSERT_TRUE(t.find_func_by_name("runtime.mallocgc"));
  EXPECT_FALSE(t.find_func_by_name("no.such.func"));
  auto m = t.find_func_by_name("runtime.mProf_Malloc");
  ASSERT_TRUE(m);
  auto f = t.find_func(m->entry + 3);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->name, "runtime.mProf_Malloc");
  EXPECT_EQ(f->entry, m->entry);
  EXPECT_EQ(f->end, m->end);
  EXPECT_FALSE(t.find_func(t.text_start() - 1));
  EXPECT_FALSE(t.find_func(0));
  EXPECT_FALSE(t.find_func(~uint64_t(0)));
  EXPECT_TRUE(t.frames_for_pc(0).empty());
}

TEST_P(PclntabFixtureTest, FunctionsMatchGoToolNm) {
  const auto& [v, mode] = GetParam();
  OOMSNAP_REQUIRE_FIXTURE(path_);
  std::string sib = fixture_path(v, symbolized_sibling_mode(mode));
  OOMSNAP_REQUIRE_FIXTURE(sib);
  auto t = GoPclntab::from_elf(*elf_);
  auto lines = split_lines(run_go(v, "tool nm " + shell_quote(sib)));
  ASSERT_GT(lines.size(), 100u) << "go tool nm failed for " << sib;
  size_t checked = 0, matched = 0, main_funcs = 0;
  for (const auto& l : lines) {
    std::istringstream in(l);
    std::string addr, type, name;
    if (!(in >> addr >> type) || (type != "T" && type != "t")) continue;
    std::getline(in, name);
    if (!name.empty() && name[0] == ' ') name.erase(0, 1);
    // Assembly functions carry an ABI suffix in the symbol table only.
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".abi0") == 0) name.resize(name.size() - 5);
    uint64_t a = std::stoull(addr, nullptr, 16);
    auto f = t.find_func(a);
    if (!f || f->entry != a) continue;  // e.g. go:textfipsstart
    // Markers sharing an entry, and compiler-generated equality functions whose
    // symtab name differs from the funcnametab one ("[5]T" vs "[...]T", "." vs "·").
    if (name == "runtime.text" || name.rfind("type:", 0) == 0 || name.rfind("type..", 0) == 0) continue;
    ++checked;
    if (f->name != name && checked - matched <= 5) ADD_FAILURE() << "nm " << name << " vs " << f->name;
    if (f->name == name) ++matched;
    if (name.rfind("main.", 0) == 0) {
      ++main_funcs;
      EXPECT_EQ(f->name, name);
    }
  }
  EXPECT_GT(checked, t.nfunc() * 9 / 10);
  EXPECT_EQ(matched, checked);
  EXPECT_GT(main_funcs, 5u);
}

TEST_P(PclntabFixtureTest, FramesMatchGoToolAddr2line) {
  const auto& [v, mode] = GetParam();
  OOMSNAP_REQUIRE_FIXTURE(path_);
  auto t = GoPclntab::from_elf(*elf_);
  auto pcs = sample_pcs(t, {"main.viaInline", "main.main"});
  ASSERT_GT(pcs.size(), 1000u);
  std::string input;
  char buf[32];
  for (uint64_t pc : pcs) {
    snprintf(buf, sizeof buf, "0x%llx\n", static_cast<unsigned long long>(pc));
    input += buf;
  }
  auto out = split_lines(run_go(v, "tool addr2line " + shell_quote(path_), input));
  ASSERT_EQ(out.size(), 2 * pcs.size()) << "go tool addr2line failed for " << path_;
  size_t compared = 0, inlined = 0, mismatches = 0;
  for (size_t i = 0; i < pcs.size(); ++i) {
    const std::string& name = out[2 * i];
    const std::string& fileline = out[2 * i + 1];
    if (name == "?") continue;  // go1.19's addr2line cannot read PIE pclntab
    if (name.rfind("go:", 0) == 0) continue;  // linker markers (go:textfipsstart)
    // pc+1 at a function entry resolves to that next function (as in
    // runtime.CallersFrames); not comparable with addr2line(pc).
    if (auto nf = t.find_func(pcs[i] + 1); nf && nf->entry == pcs[i] + 1) continue;
    // frames_for_pc takes the stored (return) pc: pc+1 resolves at pc.
    auto frames = t.frames_for_pc(pcs[i] + 1);
    ASSERT_FALSE(frames.empty()) << std::hex << pcs[i];
    ++compared;
    if (frames.size() > 1) ++inlined;
    std::string got_fl = frames.front().file + ":" + std::to_string(frames.front().line);
    if (got_fl == "?:0") got_fl = ":-1";  // addr2line's spelling of "no line info"
    if (frames.back().function != name || got_fl != fileline) {
      if (++mismatches <= 10)
        ADD_FAILURE() << std::hex << "pc 0x" << pcs[i] << ": addr2line " << name << " " << fileline
                      << ", got " << frames.back().function << " " << got_fl;
    }
    EXPECT_EQ(frames.back().inlined, false);
    EXPECT_EQ(frames.front().pc, pcs[i]);
    for (const auto& f : frames) EXPECT_EQ(f.entry, frames.back().entry);
  }
  if (!(v == "1.19" && is_pie(mode))) {
    EXPECT_GT(compared, pcs.size() * 95 / 100);
    EXPECT_GT(inlined, 10u) << "inline expansion never happened";
  }
  EXPECT_EQ(mismatches, 0u);
}

TEST_P(PclntabFixtureTest, InlinedHelperFrames) {
  OOMSNAP_REQUIRE_FIXTURE(path_);
  auto t = GoPclntab::from_elf(*elf_);
  auto via = t.find_func_by_name("main.viaInline");
  ASSERT_TRUE(via);
  EXPECT_FALSE(t.find_func_by_name("main.inlinedHelper")) << "helper should be inlined";
  int helper_start = source_line("func inlinedHelper(");
  int via_start = source_line("func viaInline(");
  ASSERT_GT(helper_start, 0);
  size_t hits = 0;
  for (uint64_t pc = via->entry + 1; pc + 1 < via->end; ++pc) {
    auto fr = t.frames_for_pc(pc + 1);
    ASSERT_FALSE(fr.empty());
    EXPECT_EQ(fr.back().function, "main.viaInline");
    EXPECT_FALSE(fr.back().inlined);
    if (fr.size() != 2 || fr[0].function != "main.inlinedHelper") continue;
    ++hits;
    EXPECT_TRUE(fr[0].inlined);
    EXPECT_EQ(fr[0].entry, via->entry);
    EXPECT_NE(fr[0].file.find("heapfixture/main.go"), std::string::npos) << fr[0].file;
    EXPECT_GE(fr[0].line, helper_start);
    EXPECT_LT(fr[0].line, via_start);
    EXPECT_GT(fr[1].line, via_start);
    if (t.go120_plus()) {
      EXPECT_EQ(fr[0].start_line, helper_start);
      EXPECT_EQ(fr[1].start_line, via_start);
    } else {
      EXPECT_EQ(fr[0].start_line, 0);
    }
    // The caller frame sits at the inline mark in viaInline.
    EXPECT_GE(fr[1].pc, via->entry);
    EXPECT_LT(fr[1].pc, via->end);
  }
  EXPECT_GT(hits, 0u);
}

TEST_P(PclntabFixtureTest, StackRulesAndFinalInlineExpansion) {
  OOMSNAP_REQUIRE_FIXTURE(path_);
  auto t = GoPclntab::from_elf(*elf_);
  auto via = t.find_func_by_name("main.viaInline");
  auto mainf = t.find_func_by_name("main.main");
  ASSERT_TRUE(via && mainf);
  uint64_t inl_pc = 0;
  std::vector<GoFrame> chain;
  for (uint64_t pc = via->entry + 1; pc + 1 < via->end && !inl_pc; ++pc) {
    auto fr = t.frames_for_pc(pc + 1);
    if (fr.size() >= 2) {
      inl_pc = pc + 1;
      chain = fr;
    }
  }
  ASSERT_NE(inl_pc, 0u);
  uint64_t caller_pc = mainf->entry + (mainf->end - mainf->entry) / 2;  // some pc in main.main
  auto caller_frames = t.frames_for_pc(caller_pc);
  ASSERT_FALSE(caller_frames.empty());

  auto same = [](const std::vector<GoFrame>& a, const std::vector<GoFrame>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].function != b[i].function || a[i].line != b[i].line || a[i].pc != b[i].pc ||
          a[i].inlined != b[i].inlined)
        return false;
    return true;
  };

  // Physical stack: [inl_pc, caller] expands the inline chain.
  std::vector<uint64_t> phys = {inl_pc, caller_pc};
  auto s1 = t.symbolize_stack(phys);
  std::vector<GoFrame> want = chain;
  want.insert(want.end(), caller_frames.begin(), caller_frames.end());
  EXPECT_TRUE(same(s1, want));

  // Logical stack (what callers() stores): the implied caller pc+1 follows;
  // it must not be emitted twice.
  std::vector<uint64_t> logical = {inl_pc};
  for (size_t i = 1; i < chain.size(); ++i) logical.push_back(chain[i].pc + 1);
  logical.push_back(caller_pc);
  auto s2 = t.symbolize_stack(logical);
  EXPECT_TRUE(same(s2, want)) << s2.size() << " vs " << want.size();

  // A single pc expands like frames_for_pc.
  EXPECT_TRUE(same(t.symbolize_stack(std::span<const uint64_t>(&inl_pc, 1)), chain));

  // Unknown pcs are skipped.
  std::vector<uint64_t> with_junk = {1, inl_pc, 2, caller_pc};
  EXPECT_TRUE(same(t.symbolize_stack(with_junk), want));

  // expand_final_inline_frame: a stack cut right after the inlined pc gets the
  // implied callers appended, as runtime_expandFinalInlineFrame does.
  std::vector<uint64_t> cut = {caller_pc, inl_pc};
  auto ex = t.expand_final_inline_frame(cut);
  ASSERT_EQ(ex.size(), 1 + chain.size());
  EXPECT_EQ(ex[0], caller_pc);
  EXPECT_EQ(ex[1], inl_pc);
  for (size_t i = 1; i < chain.size(); ++i) EXPECT_EQ(ex[1 + i], chain[i].pc + 1);
  // Already-physical final pc / empty input are unchanged.
  std::vector<uint64_t> plain = {inl_pc, caller_pc};
  if (caller_frames.size() == 1) {
    EXPECT_EQ(t.expand_final_inline_frame(plain), plain);
  }
  EXPECT_TRUE(t.expand_final_inline_frame({}).empty());
  std::vector<uint64_t> junk = {5};
  EXPECT_EQ(t.expand_final_inline_frame(junk), junk);
}

TEST_P(PclntabFixtureTest, MagicScanWithoutSectionsGivesSameAnswers) {
  OOMSNAP_REQUIRE_FIXTURE(path_);
  auto t = GoPclntab::from_elf(*elf_);
  auto b = read_file(path_);
  auto* eh = reinterpret_cast<Elf64_Ehdr*>(b.data());
  eh->e_shoff = 0;
  eh->e_shnum = 0;
  eh->e_shstrndx = 0;
  auto bare = ElfFile::from_bytes(std::move(b), "no-sections");
  // Without sections or symbols the text start must come from the header or the
  // moduledata; pass the known one when neither is in the file (1.26+ PIE/cgo).
  auto t2 = GoPclntab::from_elf(*bare, t.text_start());
  EXPECT_EQ(t2.pcheader_vaddr(), t.pcheader_vaddr());
  EXPECT_EQ(t2.nfunc(), t.nfunc());
  auto pcs = sample_pcs(t, {"main.viaInline"}, 500);
  size_t inl = 0;
  for (uint64_t pc : pcs) {
    auto a = t.frames_for_pc(pc + 1), c = t2.frames_for_pc(pc + 1);
    ASSERT_EQ(a.size(), c.size()) << std::hex << pc;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].function, c[i].function);
      EXPECT_EQ(a[i].line, c[i].line);
    }
    inl += a.size() > 1;
  }
  EXPECT_GT(inl, 0u);
}

INSTANTIATE_TEST_SUITE_P(GoFixtures, PclntabFixtureTest, testing::ValuesIn(all_go_fixtures()),
                         fixture_name);

TEST(GoPclntab, HundredThousandPcsAllResolve) {
  std::string path = fixture_path("1.26", "default");
  OOMSNAP_REQUIRE_FIXTURE(path);
  auto elf = open_elf(path);
  auto t = GoPclntab::from_elf(*elf);
  auto base = sample_pcs(t, {"main.viaInline"}, 20000);
  std::vector<uint64_t> pcs;
  for (size_t i = 0; pcs.size() < 100000; ++i) pcs.push_back(base[(i * 7919) % base.size()] + 1);
  size_t frames = 0;
  for (uint64_t pc : pcs) frames += t.frames_for_pc(pc).size();
  // Speed is measured by tools/bench-go-snapshot.sh, not asserted here.
  EXPECT_GE(frames, pcs.size());
}

// --- hostile tables -------------------------------------------------------

std::vector<uint8_t> real_pclntab_bytes(uint64_t* text_start, uint64_t* vaddr) {
  auto elf = open_elf(fixture_path("1.22", "default"));
  const auto* s = elf->section(".gopclntab");
  auto d = elf->section_data(*s);
  *text_start = elf->symbol("runtime.text")->value;
  *vaddr = s->addr;
  return {d.begin(), d.end()};
}

void exercise(const GoPclntab& t, uint64_t text_start, std::mt19937_64& rng) {
  for (int i = 0; i < 200; ++i) {
    uint64_t pc = text_start + rng() % 0x200000;
    (void)t.find_func(pc);
    (void)t.frames_for_pc(pc);
    uint64_t stk[3] = {pc, pc + 17, text_start + rng() % 0x100000};
    (void)t.symbolize_stack(stk);
    (void)t.expand_final_inline_frame(stk);
  }
  (void)t.find_func_by_name("main.main");
}

TEST(GoPclntabGarbage, HeaderChecks) {
  EXPECT_THROW(GoPclntab({}, 0), PclntabError);
  EXPECT_THROW(GoPclntab(std::vector<uint8_t>(72, 0), 0), PclntabError);
  std::vector<uint8_t> h(72, 0);
  uint32_t m = 0xfffffffb;  // Go 1.2–1.15: unsupported
  std::memcpy(h.data(), &m, 4);
  h[6] = 1;
  h[7] = 8;
  EXPECT_THROW(GoPclntab(h, 0), PclntabError);
  m = 0xfffffff1;
  std::memcpy(h.data(), &m, 4);
  EXPECT_THROW(GoPclntab(h, 0), PclntabError);  // table offsets 0 < header size
  std::mt19937_64 rng(3);
  for (int iter = 0; iter < 5000; ++iter) {
    std::vector<uint8_t> b(72 + rng() % 512);
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    std::memcpy(b.data(), &m, 4);
    b[4] = b[5] = 0;
    b[6] = 1;
    b[7] = 8;
    if (rng() % 2) {
      // Plausible small offsets/counts.
      for (int k = 0; k < 8; ++k) {
        uint64_t v = k < 2 ? rng() % 8 : 72 + rng() % (b.size() - 71);
        std::memcpy(b.data() + 8 + 8 * k, &v, 8);
      }
    }
    try {
      GoPclntab t(b, 0x401000);
      exercise(t, 0x401000, rng);
    } catch (const PclntabError&) {
    }
  }
  // ElfFile-level: a file with no pclntab at all.
  EXPECT_THROW(GoPclntab::from_elf(*open_elf("/proc/self/exe")), PclntabError);
}

TEST(GoPclntabGarbage, TruncatedAndCorruptedRealTable) {
  OOMSNAP_REQUIRE_FIXTURE(fixture_path("1.22", "default"));
  uint64_t text = 0, vaddr = 0;
  auto full = real_pclntab_bytes(&text, &vaddr);
  std::mt19937_64 rng(11);
  // Truncations: anything short of the functab throws; longer prefixes must
  // answer lookups (possibly emptily) without crashing.
  for (size_t len : {size_t(8), size_t(71), size_t(72), size_t(200), full.size() / 10, full.size() / 2,
                     full.size() * 9 / 10, full.size() - 1}) {
    try {
      GoPclntab t(std::vector<uint8_t>(full.begin(), full.begin() + len), text, vaddr);
      exercise(t, text, rng);
    } catch (const PclntabError&) {
    }
  }
  // Random corruption of the tables (header intact), with an inline-tree base.
  for (int iter = 0; iter < 200; ++iter) {
    auto b = full;
    int flips = 1 + rng() % 64;
    for (int k = 0; k < flips; ++k) b[72 + rng() % (b.size() - 72)] = static_cast<uint8_t>(rng());
    try {
      GoPclntab t(std::move(b), text, vaddr);
      std::vector<uint8_t> gofunc(4096 + rng() % 65536);
      for (auto& x : gofunc) x = static_cast<uint8_t>(rng());
      t.set_gofunc(0x4e0000, std::move(gofunc));
      exercise(t, text, rng);
    } catch (const PclntabError&) {
    }
  }
  // Header fields pointing out of range.
  for (int field = 1; field < 9; ++field) {
    if (field == 3) continue;  // textStart is informational
    auto b = full;
    uint64_t v = ~uint64_t(0) - rng() % 1000;
    std::memcpy(b.data() + 8 * field, &v, 8);
    EXPECT_THROW(GoPclntab(std::move(b), text, vaddr), PclntabError) << field;
  }
}

}  // namespace
