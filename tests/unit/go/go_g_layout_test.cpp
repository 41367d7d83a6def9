// The per-version runtime.g table (go_g_layout.cpp) against the DWARF of
// every toolchain's unstripped fixture: tests/fixtures/go/glayout, run with
// the toolchain itself, prints the offsets the compiler laid out
// (testutil::go_dwarf_layout). Stripped binaries have no DWARF and use the
// table, so every entry must agree.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>

#include "go/go_g_layout.h"
#include "go/go_pclntab.h"
#include "go_fixture_util.h"

namespace oomsnap {
namespace {

class GoGLayoutTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoGLayoutTest, TableEqualsDwarf) {
  const std::string v = GetParam();
  OOMSNAP_REQUIRE_FIXTURE(testutil::fixture_path(v, "default"));
  const std::string out = testutil::go_dwarf_layout(v);
  auto j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  auto l = go_g_layout_for(std::stoi(v.substr(2)));
  ASSERT_TRUE(l);
  EXPECT_EQ(l->size, j["g_size"].get<uint32_t>());
  EXPECT_EQ(l->stack_lo, j["stack_lo"].get<uint32_t>());
  EXPECT_EQ(l->stack_hi, j["stack_hi"].get<uint32_t>());
  EXPECT_EQ(l->sched_sp, j["sched_sp"].get<uint32_t>());
  EXPECT_EQ(l->sched_pc, j["sched_pc"].get<uint32_t>());
  EXPECT_EQ(l->sched_bp, j["sched_bp"].get<uint32_t>());
  EXPECT_EQ(l->syscallsp, j["syscallsp"].get<uint32_t>());
  EXPECT_EQ(l->syscallpc, j["syscallpc"].get<uint32_t>());
  EXPECT_EQ(l->syscallbp.has_value(), j.contains("syscallbp"));
  if (l->syscallbp && j.contains("syscallbp")) {
    EXPECT_EQ(*l->syscallbp, j["syscallbp"].get<uint32_t>());
  }
  EXPECT_EQ(l->atomicstatus, j["atomicstatus"].get<uint32_t>());
  EXPECT_EQ(l->goid, j["goid"].get<uint32_t>());
  EXPECT_EQ(l->waitsince, j["waitsince"].get<uint32_t>());
  EXPECT_EQ(l->waitreason, j["waitreason"].get<uint32_t>());
  EXPECT_EQ(l->gopc, j["gopc"].get<uint32_t>());
  EXPECT_EQ(l->startpc, j["startpc"].get<uint32_t>());
}

// FuncIDWrapper's place in the toolchain's own FuncID list (iota from
// FuncIDNormal; runtime/symtab.go's funcID_* on 1.19), and the funcID the
// compiler gave a real wrapper: the closure of `go parkArg(i)` in the fixture.
TEST_P(GoGLayoutTest, FuncIdWrapperIsTheToolchainsOwn) {
  const std::string v = GetParam();
  const int minor = std::stoi(v.substr(2));
  const std::string root = testutil::cache_root() + "/go/" + v + "/src/";
  std::ifstream f(root + (minor == 19 ? "runtime/symtab.go" : "internal/abi/symtab.go"));
  ASSERT_TRUE(f) << root;
  std::stringstream text;
  text << f.rdbuf();
  const std::string src = text.str();
  const std::string first = minor == 19 ? "funcID_normal funcID = iota" : "FuncIDNormal FuncID = iota";
  const std::string last = minor == 19 ? "funcID_wrapper" : "FuncIDWrapper";
  const size_t a = src.find(first), b = src.find(last, a);
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  // One constant per line after FuncIDNormal (0): FuncIDWrapper is one past the last.
  const std::string list = src.substr(a, b - a);
  const std::regex constant(minor == 19 ? R"(\n\s*funcID_\w+)" : R"(\n\s*FuncID\w*)");
  const auto n = std::distance(std::sregex_iterator(list.begin(), list.end(), constant), std::sregex_iterator());
  EXPECT_EQ(go_func_id_wrapper(minor), n + 1) << list;

  OOMSNAP_REQUIRE_FIXTURE(testutil::fixture_path(v, "default"));
  auto elf = testutil::open_elf(testutil::fixture_path(v, "default"));
  ASSERT_TRUE(elf);
  const GoPclntab tab = GoPclntab::from_elf(*elf);
  const auto wrapper = tab.find_func_by_name(minor >= 22 ? "main.runGoroutines.gowrap1" : "main.runGoroutines.func1");
  ASSERT_TRUE(wrapper);
  auto fi = tab.frame_info(wrapper->entry + 1);
  ASSERT_TRUE(fi);
  EXPECT_EQ(fi->func_id, go_func_id_wrapper(minor));
  auto normal = tab.frame_info(tab.find_func_by_name("main.parkArg")->entry + 1);
  ASSERT_TRUE(normal);
  EXPECT_EQ(normal->func_id, 0);
}

INSTANTIATE_TEST_SUITE_P(AllGo, GoGLayoutTest, ::testing::ValuesIn(testutil::go_versions()),
                         [](const auto& i) {
                           std::string s = "go" + i.param;
                           for (char& c : s)
                             if (c == '.') c = '_';
                           return s;
                         });

TEST(GoGLayout, UnknownVersionsHaveNoLayout) {
  EXPECT_EQ(go_func_id_wrapper(20), 0);
  EXPECT_EQ(go_func_id_wrapper(28), 0);
  EXPECT_FALSE(go_g_layout_for(18));
  EXPECT_FALSE(go_g_layout_for(20));
  EXPECT_FALSE(go_g_layout_for(28));
}

TEST(GoGLayout, WaitReasonsFollowEachVersionsOrder) {
  // The constants moved: waitReasonChanReceive is 14 in 1.19 and 1.21 ...
  EXPECT_EQ(go_wait_reason_name(19, 14), "chan receive");
  EXPECT_EQ(go_wait_reason_name(19, 19), "sleep");
  EXPECT_EQ(go_wait_reason_name(21, 21), "sync.Mutex.Lock");
  EXPECT_EQ(go_wait_reason_name(26, 0), "");
  EXPECT_EQ(go_wait_reason_name(26, 255), "");  // beyond the table: empty, no crash
  EXPECT_EQ(go_g_status_name(26, 0x1004), "waiting");  // the scan bit is not a state
  EXPECT_EQ(go_g_status_name(22, 10), "unknown");
  EXPECT_EQ(go_g_status_name(26, 10), "leaked");
}

}  // namespace
}  // namespace oomsnap
