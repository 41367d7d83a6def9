// The per-version runtime.g table (go_g_layout.cpp) against the DWARF of
// every toolchain's unstripped fixture: tests/fixtures/go/glayout, run with
// the toolchain itself, prints the offsets the compiler laid out. Stripped
// binaries have no DWARF and use the table, so every entry must agree.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "go/go_g_layout.h"
#include "go_fixture_util.h"

namespace oomsnap {
namespace {

std::string dwarf_layout(const std::string& v) {
  const std::string root = testutil::cache_root();
  const std::string cmd = "env GOROOT=" + testutil::shell_quote(root + "/go/" + v) +
                          " GOTOOLCHAIN=local GOPROXY=off GO111MODULE=off GOFLAGS= GOENV=off GOCACHE=" +
                          testutil::shell_quote(root + "/gocache-" + v) + " " +
                          testutil::shell_quote(testutil::go_tool(v)) + " run " +
                          testutil::shell_quote(std::string(OOMSNAP_SOURCE_DIR) +
                                                "/tests/fixtures/go/glayout/main.go") +
                          " " + testutil::shell_quote(testutil::fixture_path(v, "default")) + " 2>&1";
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    ::pclose(p);
  }
  return out;
}

class GoGLayoutTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoGLayoutTest, TableEqualsDwarf) {
  const std::string v = GetParam();
  OOMSNAP_REQUIRE_FIXTURE(testutil::fixture_path(v, "default"));
  const std::string out = dwarf_layout(v);
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

INSTANTIATE_TEST_SUITE_P(AllGo, GoGLayoutTest, ::testing::ValuesIn(testutil::go_versions()),
                         [](const auto& i) {
                           std::string s = "go" + i.param;
                           for (char& c : s)
                             if (c == '.') c = '_';
                           return s;
                         });

TEST(GoGLayout, UnknownVersionsHaveNoLayout) {
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
