// recover_go_globals on the Go fixtures of every toolchain:
//  * unstripped default/pie builds: the recovered addresses equal the symbols;
//  * stripped / pie-stripped builds: recovery succeeds and lands in the right
//    sections (-s -w moves .data/.bss, so no comparison with unstripped values);
//  * mutated code (disagreeing readers, garbage text) gives an error, no crash.
// Fixtures come from tools/build-go-fixtures.sh; a missing one is a failure.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "elf/elf_file.h"
#include "go/go_buildinfo.h"
#include "go/go_mem_accounting.h"
#include "go/go_pclntab.h"
#include "go/go_stripped.h"

namespace oomsnap {
namespace {

const int kVersions[] = {19, 21, 22, 23, 24, 25, 26, 27};

std::string fixture_path(int minor, const std::string& mode) {
  return std::string(OOMSNAP_FIXTURES) + "/go/1." + std::to_string(minor) + "/" + mode + "/heapfixture";
}

struct Loaded {
  std::unique_ptr<ElfFile> elf;
  std::optional<GoPclntab> pcln;
  GoVersion version;
};

// Loads a fixture; on failure records a gtest failure and returns nullopt.
std::optional<Loaded> load_fixture(int minor, const std::string& mode) {
  const std::string path = fixture_path(minor, mode);
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << "missing Go fixture " << path
                  << " — build it with tools/build-go-fixtures.sh 1." << minor;
    return std::nullopt;
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    ADD_FAILURE() << "cannot open " << path << ": " << std::strerror(errno);
    return std::nullopt;
  }
  Loaded l;
  l.elf = ElfFile::open_fd(fd, path);
  ::close(fd);
  l.pcln.emplace(GoPclntab::from_elf(*l.elf));
  auto bi = read_go_buildinfo(*l.elf);
  if (!bi) {
    ADD_FAILURE() << path << ": no Go build info";
    return std::nullopt;
  }
  l.version = bi->version;
  EXPECT_EQ(l.version.major, 1) << path;
  EXPECT_EQ(l.version.minor, minor) << path << " says " << l.version.text;
  return l;
}

std::optional<Loaded> load_bytes(std::vector<uint8_t> bytes, const GoVersion& v) {
  Loaded l;
  l.elf = ElfFile::from_bytes(std::move(bytes), "mutated");
  l.pcln.emplace(GoPclntab::from_elf(*l.elf));
  l.version = v;
  return l;
}

const ElfFile::Section* section_of(const ElfFile& elf, uint64_t addr) {
  for (const auto& s : elf.sections())
    if (s.addr != 0 && addr >= s.addr && addr + 8 <= s.addr + s.size) return &s;
  return nullptr;
}

// File offset of the code of a function, or nullopt.
struct FuncBytes {
  uint64_t entry = 0;
  size_t offset = 0, size = 0;
};
std::optional<FuncBytes> func_bytes(const Loaded& l, const char* name) {
  auto f = l.pcln->find_func_by_name(name);
  if (!f) return std::nullopt;
  auto b = l.elf->bytes_at_vaddr(f->entry, f->end - f->entry);
  if (!b) return std::nullopt;
  return FuncBytes{f->entry, static_cast<size_t>(b->data() - l.elf->image().data()), b->size()};
}

// Rewrites every `mov r64, [rip+disp32]` (REX.W 8B, mod=00 rm=101; with
// opcode 0x8D, `lea r64, [rip+disp32]`) in the function whose target is
// `target` to name target+delta instead. Returns the number of patched
// instructions.
int retarget_rip_loads(std::vector<uint8_t>& img, const FuncBytes& fb, uint64_t target, int32_t delta,
                       uint8_t opcode = 0x8B) {
  int n = 0;
  for (size_t i = 0; i + 7 <= fb.size; ++i) {
    uint8_t* p = img.data() + fb.offset + i;
    if ((p[0] & 0xF8) != 0x48 || p[1] != opcode || (p[2] & 0xC7) != 0x05) continue;
    int32_t disp;
    std::memcpy(&disp, p + 3, 4);
    uint64_t t = fb.entry + i + 7 + static_cast<int64_t>(disp);
    if (t != target) continue;
    disp += delta;
    std::memcpy(p + 3, &disp, 4);
    ++n;
  }
  return n;
}

class GoStrippedTest : public ::testing::TestWithParam<int> {};

TEST_P(GoStrippedTest, UnstrippedRecoveryEqualsSymbols) {
  const int minor = GetParam();
  for (const std::string mode : {"default", "pie"}) {
    SCOPED_TRACE("go1." + std::to_string(minor) + " " + mode);
    auto l = load_fixture(minor, mode);
    if (!l) continue;
    auto mb = l->elf->symbol("runtime.mbuckets");
    auto rate = l->elf->symbol("runtime.MemProfileRate");
    ASSERT_TRUE(mb && rate) << "unstripped fixture lacks symbols";
    auto r = recover_go_globals(*l->elf, *l->pcln, l->version);
    EXPECT_EQ(r.error, "");
    ASSERT_TRUE(r.mbuckets.has_value()) << r.error;
    ASSERT_TRUE(r.mem_profile_rate.has_value()) << r.error;
    EXPECT_EQ(*r.mbuckets, mb->value) << std::hex << *r.mbuckets << " vs " << mb->value;
    EXPECT_EQ(*r.mem_profile_rate, rate->value) << std::hex << *r.mem_profile_rate << " vs " << rate->value;
    auto cycle = l->elf->symbol("runtime.mProfCycle");
    ASSERT_TRUE(cycle);
    ASSERT_TRUE(r.mprof_cycle.has_value()) << r.mprof_cycle_error;
    EXPECT_EQ(*r.mprof_cycle, cycle->value) << std::hex << *r.mprof_cycle << " vs " << cycle->value;
  }
}

// Rewrites every `mov r32, [rip+disp32]` (8B, mod=00 rm=101, optionally after
// a REX prefix without W) in the function whose target is `target`.
int retarget_rip_loads32(std::vector<uint8_t>& img, const FuncBytes& fb, uint64_t target, int32_t delta) {
  int n = 0;
  for (size_t i = 0; i + 6 <= fb.size; ++i) {
    uint8_t* p = img.data() + fb.offset + i;
    const size_t rex = (p[0] >= 0x40 && p[0] <= 0x47) ? 1 : 0;
    if (i + 6 + rex > fb.size || p[rex] != 0x8B || (p[rex + 1] & 0xC7) != 0x05) continue;
    int32_t disp;
    std::memcpy(&disp, p + rex + 2, 4);
    const uint64_t t = fb.entry + i + rex + 6 + static_cast<int64_t>(disp);
    if (t != target) continue;
    disp += delta;
    std::memcpy(p + rex + 2, &disp, 4);
    ++n;
  }
  return n;
}

// mProfCycle needs two witnesses: mProf_PostSweep reading another dword
// first leaves it unknown (and the heap globals unaffected).
TEST_P(GoStrippedTest, MProfCycleRecoveryRefusesARetargetedWitness) {
  const int minor = GetParam();
  auto l = load_fixture(minor, "default");
  if (!l) return;
  auto cycle = l->elf->symbol("runtime.mProfCycle");
  auto fb = func_bytes(*l, "runtime.mProf_PostSweep");
  ASSERT_TRUE(cycle && fb);
  std::vector<uint8_t> img(l->elf->image().begin(), l->elf->image().end());
  ASSERT_GE(retarget_rip_loads32(img, *fb, cycle->value, 64), 1);
  auto m = load_bytes(std::move(img), l->version);
  auto r = recover_go_globals(*m->elf, *m->pcln, m->version);
  EXPECT_FALSE(r.mprof_cycle.has_value());
  EXPECT_NE(r.mprof_cycle_error.find("mProf_PostSweep"), std::string::npos) << r.mprof_cycle_error;
  EXPECT_TRUE(r.mbuckets && r.mem_profile_rate) << r.error;
}

// The goroutine census's globals: equal to the symbols where there are
// symbols; found, distinct and in .bss in the stripped builds.
TEST_P(GoStrippedTest, AllgsRecoveryEqualsSymbols) {
  const int minor = GetParam();
  for (const std::string mode : {"default", "pie", "stripped", "pie-stripped"}) {
    SCOPED_TRACE("go1." + std::to_string(minor) + " " + mode);
    auto l = load_fixture(minor, mode);
    if (!l) continue;
    auto r = recover_go_allgs(*l->elf, *l->pcln, l->version);
    ASSERT_TRUE(r.allglen && r.allgptr) << r.error;
    EXPECT_NE(*r.allglen, *r.allgptr);
    if (mode == "default" || mode == "pie") {
      auto len = l->elf->symbol("runtime.allglen");
      auto ptr = l->elf->symbol("runtime.allgptr");
      ASSERT_TRUE(len && ptr);
      EXPECT_EQ(*r.allglen, len->value);
      EXPECT_EQ(*r.allgptr, ptr->value);
    } else {
      const auto* len_s = section_of(*l->elf, *r.allglen);
      const auto* ptr_s = section_of(*l->elf, *r.allgptr);
      ASSERT_TRUE(len_s && ptr_s);
      EXPECT_EQ(len_s->name, ".noptrbss");  // a uintptr
      EXPECT_EQ(ptr_s->name, ".bss");       // a pointer
    }
  }
}

// Code that loads something else first is refused, never guessed.
TEST_P(GoStrippedTest, AllgsRecoveryRefusesRetargetedLoads) {
  const int minor = GetParam();
  auto l = load_fixture(minor, "default");
  if (!l) return;
  auto len = l->elf->symbol("runtime.allglen");
  auto fb = func_bytes(*l, "runtime.forEachGRace");
  ASSERT_TRUE(len && fb);
  std::vector<uint8_t> img(l->elf->image().begin(), l->elf->image().end());
  ASSERT_GE(retarget_rip_loads(img, *fb, len->value, 64), 1);
  auto m = load_bytes(std::move(img), l->version);
  auto r = recover_go_allgs(*m->elf, *m->pcln, m->version);
  EXPECT_FALSE(r.allglen.has_value());
  EXPECT_FALSE(r.error.empty());
}

TEST_P(GoStrippedTest, StrippedRecoveryLandsInTheRightSections) {
  const int minor = GetParam();
  for (const std::string mode : {"stripped", "pie-stripped"}) {
    SCOPED_TRACE("go1." + std::to_string(minor) + " " + mode);
    auto l = load_fixture(minor, mode);
    if (!l) continue;
    EXPECT_FALSE(l->elf->symbol("runtime.mbuckets").has_value()) << "fixture is not stripped";
    auto r = recover_go_globals(*l->elf, *l->pcln, l->version);
    EXPECT_EQ(r.error, "");
    ASSERT_TRUE(r.mbuckets.has_value()) << r.error;
    ASSERT_TRUE(r.mem_profile_rate.has_value()) << r.error;

    const auto* mbs = section_of(*l->elf, *r.mbuckets);
    ASSERT_NE(mbs, nullptr);
    EXPECT_EQ(mbs->name, ".bss");
    EXPECT_EQ(*r.mbuckets % 8, 0u);

    const auto* rs = section_of(*l->elf, *r.mem_profile_rate);
    ASSERT_NE(rs, nullptr);
    EXPECT_EQ(*r.mem_profile_rate % 8, 0u);
    if (minor >= 21) {
      // Statically initialized to 512*1024 since 1.21.
      EXPECT_EQ(rs->name, ".noptrdata");
      auto b = l->elf->bytes_at_vaddr(*r.mem_profile_rate, 8);
      ASSERT_TRUE(b.has_value());
      int64_t v;
      std::memcpy(&v, b->data(), 8);
      EXPECT_EQ(v, 512 * 1024);
    } else {
      EXPECT_EQ(rs->name, ".noptrbss");  // defaultMemProfileRate() at init
    }

    // mProfCycle: in .noptrbss at the offset the same build with symbols has
    // it at (stripping moves the section, not what is in it).
    ASSERT_TRUE(r.mprof_cycle.has_value()) << r.mprof_cycle_error;
    const auto* cs = section_of(*l->elf, *r.mprof_cycle);
    ASSERT_NE(cs, nullptr);
    EXPECT_EQ(cs->name, ".noptrbss");
    EXPECT_EQ(*r.mprof_cycle % 4, 0u);
    auto ref = load_fixture(minor, mode == "stripped" ? "default" : "pie");
    if (!ref) continue;
    auto sym = ref->elf->symbol("runtime.mProfCycle");
    const auto* ref_sec = sym ? section_of(*ref->elf, sym->value) : nullptr;
    ASSERT_TRUE(sym && ref_sec);
    EXPECT_EQ(*r.mprof_cycle - cs->addr, sym->value - ref_sec->addr);
  }
}

// Each global has two independent readers; make one of them load a different
// word and the recovery must refuse rather than pick one.
TEST_P(GoStrippedTest, DisagreeingReadersGiveAnError) {
  const int minor = GetParam();
  auto l = load_fixture(minor, "stripped");
  if (!l) return;
  auto good = recover_go_globals(*l->elf, *l->pcln, l->version);
  ASSERT_TRUE(good.mbuckets && good.mem_profile_rate) << good.error;

  const auto img0 = std::vector<uint8_t>(l->elf->image().begin(), l->elf->image().end());
  {
    auto second = func_bytes(*l, minor >= 23 ? "runtime.memProfileInternal" : "runtime.MemProfile");
    ASSERT_TRUE(second.has_value());
    auto img = img0;
    ASSERT_GE(retarget_rip_loads(img, *second, *good.mbuckets, 8), 1);
    auto m = load_bytes(std::move(img), l->version);
    auto r = recover_go_globals(*m->elf, *m->pcln, m->version);
    EXPECT_FALSE(r.mbuckets.has_value());
    EXPECT_NE(r.error.find("mbuckets"), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("disagree"), std::string::npos) << r.error;
    ASSERT_TRUE(r.mem_profile_rate.has_value()) << r.error;  // the other global is unaffected
    EXPECT_EQ(*r.mem_profile_rate, *good.mem_profile_rate);
  }
  {
    auto pa = func_bytes(*l, "runtime.profilealloc");
    ASSERT_TRUE(pa.has_value());
    auto img = img0;
    ASSERT_GE(retarget_rip_loads(img, *pa, *good.mem_profile_rate, 8), 1);
    auto m = load_bytes(std::move(img), l->version);
    auto r = recover_go_globals(*m->elf, *m->pcln, m->version);
    EXPECT_FALSE(r.mem_profile_rate.has_value());
    EXPECT_NE(r.error.find("MemProfileRate"), std::string::npos) << r.error;
    ASSERT_TRUE(r.mbuckets.has_value()) << r.error;
    EXPECT_EQ(*r.mbuckets, *good.mbuckets);
  }
  {
    // A reader whose load now points outside the data sections.
    auto fl = func_bytes(*l, "runtime.mProf_FlushLocked");
    ASSERT_TRUE(fl.has_value());
    auto img = img0;
    ASSERT_GE(retarget_rip_loads(img, *fl, *good.mbuckets, -0x100000), 1);
    auto m = load_bytes(std::move(img), l->version);
    auto r = recover_go_globals(*m->elf, *m->pcln, m->version);
    EXPECT_FALSE(r.mbuckets.has_value()) << std::hex << r.mbuckets.value_or(0);
    EXPECT_FALSE(r.error.empty());
  }
}

// Garbage in the code of the reader functions (and in all of .text): an error,
// never a crash or an address.
TEST_P(GoStrippedTest, GarbageCodeGivesAnError) {
  const int minor = GetParam();
  auto l = load_fixture(minor, "pie-stripped");
  if (!l) return;
  const auto img0 = std::vector<uint8_t>(l->elf->image().begin(), l->elf->image().end());
  std::mt19937_64 rng(minor);

  {
    auto img = img0;
    for (const char* fn : {"runtime.mProf_FlushLocked", "runtime.memProfileInternal", "runtime.MemProfile",
                           "runtime.allocmcache", "runtime.profilealloc"}) {
      auto fb = func_bytes(*l, fn);
      if (!fb) continue;
      for (size_t i = 0; i < fb->size; ++i) img[fb->offset + i] = static_cast<uint8_t>(rng());
    }
    auto m = load_bytes(std::move(img), l->version);
    auto r = recover_go_globals(*m->elf, *m->pcln, m->version);
    EXPECT_FALSE(r.mbuckets.has_value()) << std::hex << r.mbuckets.value_or(0);
    EXPECT_FALSE(r.mem_profile_rate.has_value()) << std::hex << r.mem_profile_rate.value_or(0);
    EXPECT_FALSE(r.error.empty());
  }
  {
    auto img = img0;
    const auto* text = l->elf->section(".text");
    ASSERT_NE(text, nullptr);
    for (uint64_t i = 0; i < text->size && text->offset + i < img.size(); ++i)
      img[text->offset + i] = static_cast<uint8_t>(rng());
    auto m = load_bytes(std::move(img), l->version);
    auto r = recover_go_globals(*m->elf, *m->pcln, m->version);
    EXPECT_FALSE(r.mbuckets.has_value());
    EXPECT_FALSE(r.mem_profile_rate.has_value());
    EXPECT_FALSE(r.error.empty());
  }
  {
    // All int3: decodes, but there is nothing to find.
    auto img = img0;
    const auto* text = l->elf->section(".text");
    ASSERT_NE(text, nullptr);
    for (uint64_t i = 0; i < text->size && text->offset + i < img.size(); ++i) img[text->offset + i] = 0xCC;
    auto m = load_bytes(std::move(img), l->version);
    auto r = recover_go_globals(*m->elf, *m->pcln, m->version);
    EXPECT_FALSE(r.mbuckets.has_value());
    EXPECT_FALSE(r.mem_profile_rate.has_value());
    EXPECT_FALSE(r.error.empty());
  }
}

// A pclntab read with the wrong text start (e.g. a stripped external-link
// binary where .text is not runtime.text) shifts every function: the call
// anchors ((*bucket).mp, fastexprand) no longer match and recovery refuses.
TEST_P(GoStrippedTest, WrongTextStartGivesAnError) {
  const int minor = GetParam();
  auto l = load_fixture(minor, "pie-stripped");
  if (!l) return;
  for (int64_t delta : {int64_t{0x20}, int64_t{-0x40}, int64_t{0x100}}) {
    SCOPED_TRACE(delta);
    auto shifted = GoPclntab::from_elf(*l->elf, l->pcln->text_start() + delta);
    auto r = recover_go_globals(*l->elf, shifted, l->version);
    EXPECT_FALSE(r.mbuckets.has_value()) << std::hex << r.mbuckets.value_or(0);
    EXPECT_FALSE(r.mem_profile_rate.has_value()) << std::hex << r.mem_profile_rate.value_or(0);
    EXPECT_FALSE(r.error.empty());
  }
}

// External linking (cgo, 1.26 only): the C linker lays out the sections.
TEST(GoStrippedCgo, ExternalLinkRecoveryEqualsSymbols) {
  auto l = load_fixture(26, "cgo");
  if (!l) return;
  auto mb = l->elf->symbol("runtime.mbuckets");
  auto rate = l->elf->symbol("runtime.MemProfileRate");
  ASSERT_TRUE(mb && rate) << "cgo fixture lacks symbols";
  auto r = recover_go_globals(*l->elf, *l->pcln, l->version);
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.mbuckets, std::optional<uint64_t>(mb->value));
  EXPECT_EQ(r.mem_profile_rate, std::optional<uint64_t>(rate->value));
}

// The block/mutex profile globals: on unstripped builds the code-derived
// addresses equal the symbols (runtime.ticks: the struct, its val at the
// per-version offset); on stripped builds they are found and land in the
// zero-initialized sections, the two lists apart.
TEST_P(GoStrippedTest, ContentionGlobalsEqualSymbols) {
  const int minor = GetParam();
  for (const std::string mode : {"default", "pie"}) {
    SCOPED_TRACE("go1." + std::to_string(minor) + " " + mode);
    auto l = load_fixture(minor, mode);
    if (!l) continue;
    auto r = recover_go_contention_globals(*l->elf, *l->pcln, l->version);
    EXPECT_EQ(r.error, "");
    auto expect_sym = [&](const std::optional<uint64_t>& got, const char* name) {
      auto sym = l->elf->symbol(name);
      ASSERT_TRUE(sym) << name << " missing from the unstripped fixture";
      ASSERT_TRUE(got) << name << ": " << r.error;
      EXPECT_EQ(*got, sym->value) << name << std::hex << " got 0x" << *got << " want 0x" << sym->value;
    };
    expect_sym(r.bbuckets, "runtime.bbuckets");
    expect_sym(r.xbuckets, "runtime.xbuckets");
    expect_sym(r.block_rate, "runtime.blockprofilerate");
    expect_sym(r.mutex_rate, "runtime.mutexprofilerate");
    expect_sym(r.ticks, "runtime.ticks");
  }
  for (const std::string mode : {"stripped", "pie-stripped"}) {
    SCOPED_TRACE("go1." + std::to_string(minor) + " " + mode);
    auto l = load_fixture(minor, mode);
    if (!l) continue;
    auto r = recover_go_contention_globals(*l->elf, *l->pcln, l->version);
    EXPECT_EQ(r.error, "");
    for (const auto* a : {&r.bbuckets, &r.xbuckets, &r.block_rate, &r.mutex_rate, &r.ticks}) {
      ASSERT_TRUE(a->has_value()) << r.error;
      const auto* sec = section_of(*l->elf, **a);
      ASSERT_NE(sec, nullptr);
      EXPECT_TRUE(sec->name == ".bss" || sec->name == ".noptrbss") << sec->name;
    }
    EXPECT_EQ(section_of(*l->elf, *r.bbuckets)->name, ".bss");
    EXPECT_NE(*r.bbuckets, *r.xbuckets);
  }
}

TEST_P(GoStrippedTest, MemGlobalsRecoveryEqualsSymbols) {
  const int minor = GetParam();
  const auto layout = go_memstats_layout_for(minor);
  ASSERT_TRUE(layout);
  for (const std::string mode : {"default", "pie", "stripped", "pie-stripped"}) {
    SCOPED_TRACE("go1." + std::to_string(minor) + " " + mode);
    auto l = load_fixture(minor, mode);
    if (!l) continue;
    auto r = recover_go_mem_globals(*l->elf, *l->pcln, l->version, layout->stacks_sys);
    ASSERT_TRUE(r.memstats && r.mheap) << r.error;
    if (mode == "default" || mode == "pie") {
      EXPECT_EQ(*r.memstats, l->elf->symbol("runtime.memstats")->value);
      EXPECT_EQ(*r.mheap, l->elf->symbol("runtime.mheap_")->value);
    } else {
      const auto* ms = section_of(*l->elf, *r.memstats);
      const auto* mh = section_of(*l->elf, *r.mheap);
      ASSERT_TRUE(ms && mh);
      EXPECT_EQ(ms->name, ".noptrbss");  // no pointers in mstats
      EXPECT_EQ(mh->name, ".bss");
    }
  }
}

// A witness that takes another address first is refused, never guessed.
TEST_P(GoStrippedTest, MemGlobalsRecoveryRefusesARetargetedWitness) {
  const int minor = GetParam();
  auto l = load_fixture(minor, "default");
  if (!l) return;
  const auto layout = go_memstats_layout_for(minor);
  auto memstats = l->elf->symbol("runtime.memstats");
  auto mheap = l->elf->symbol("runtime.mheap_");
  auto bucket = func_bytes(*l, "runtime.newBucket");
  auto grow = func_bytes(*l, "runtime.(*mcentral).grow");
  ASSERT_TRUE(layout && memstats && mheap && bucket && grow);
  std::vector<uint8_t> img(l->elf->image().begin(), l->elf->image().end());
  ASSERT_GE(retarget_rip_loads(img, *bucket, memstats->value + layout->stacks_sys + 24, 8, 0x8D), 1);
  ASSERT_GE(retarget_rip_loads(img, *grow, mheap->value, 64, 0x8D), 1);
  auto m = load_bytes(std::move(img), l->version);
  auto r = recover_go_mem_globals(*m->elf, *m->pcln, m->version, layout->stacks_sys);
  EXPECT_FALSE(r.memstats.has_value());
  EXPECT_FALSE(r.mheap.has_value());
  EXPECT_NE(r.error.find("memstats: candidates disagree"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("mheap_: candidates disagree"), std::string::npos) << r.error;
}

INSTANTIATE_TEST_SUITE_P(AllGo, GoStrippedTest, ::testing::ValuesIn(kVersions),
                         [](const ::testing::TestParamInfo<int>& i) { return "go1_" + std::to_string(i.param); });

}  // namespace
}  // namespace oomsnap
