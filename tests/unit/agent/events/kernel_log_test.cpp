// syslog(2)'s lines fed to the OOM-report reader as kmsg records: the real
// report (tests/fixtures/kmsg) as syslog prints it, read in passes over a
// buffer that grows, each line fed once, a user's lines still not the
// kernel's, and a buffer without printk times refused.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "agent/events/kernel_log.h"

using namespace oomsnap;

namespace {

// "6,161606,72560933749,-;text" as syslog(2) prints it: "<6>[72560.933749] text".
std::string syslog_line(const std::string& kmsg) {
  const size_t c1 = kmsg.find(','), c2 = kmsg.find(',', c1 + 1), c3 = kmsg.find(',', c2 + 1), semi = kmsg.find(';');
  const uint64_t us = std::stoull(kmsg.substr(c2 + 1, c3 - c2 - 1));
  char t[64];
  std::snprintf(t, sizeof t, "[%5llu.%06llu] ", static_cast<unsigned long long>(us / 1'000'000),
                static_cast<unsigned long long>(us % 1'000'000));
  return "<" + kmsg.substr(0, c1) + ">" + t + kmsg.substr(semi + 1);
}

std::vector<std::string> fixture_as_syslog() {
  std::ifstream f(std::string(OOMSNAP_SOURCE_DIR) + "/tests/fixtures/kmsg/memcg_v1_oom_6.18.txt");
  std::vector<std::string> out;
  for (std::string l; std::getline(f, l);) out.push_back(syslog_line(l));
  return out;
}

std::string join(const std::vector<std::string>& v, size_t n) {
  std::string s;
  for (size_t i = 0; i < n && i < v.size(); ++i) s += v[i] + "\n";
  return s;
}

}  // namespace

TEST(KernelLogSyslog, AReportReadInPassesIsFedOnce) {
  const auto lines = fixture_as_syslog();
  ASSERT_GT(lines.size(), 60u);
  KernelOomReports reports;
  uint64_t after_us = 0, after_count = 0;
  // The buffer as it was at three moments: each pass reads it whole.
  for (size_t n : {size_t{30}, size_t{31}, lines.size() - 1, lines.size(), lines.size()})
    ASSERT_TRUE(feed_syslog_lines(join(lines, n), reports, after_us, after_count));
  EXPECT_EQ(reports.finished(), 1u);
  const KernelOomReport* r = reports.find(21308, 72560933808, 1'000'000);
  ASSERT_NE(r, nullptr);
  // Each line once: the stat lines twice would double memory.stat's keys.
  EXPECT_EQ(r->stat_text.find("\ncache 0\n"), std::string::npos);
  EXPECT_EQ(r->stat_text.find("total_cache 0\n"), r->stat_text.rfind("total_cache 0\n"));
  EXPECT_EQ(r->tasks_total, 2u);
  EXPECT_EQ(r->usage_bytes, 32768u << 10);
}

// Lines with one timestamp, split across passes: those fed already are
// skipped, the new ones are not.
TEST(KernelLogSyslog, LinesSharingATimestampAreToldApartByTheirCount) {
  KernelOomReports reports;
  uint64_t after_us = 0, after_count = 0;
  const std::string head = "<4>[  10.000001] a invoked oom-killer: gfp_mask=0x0, order=0, oom_score_adj=0\n"
                           "<6>[  10.000002] Tasks state (memory values in pages):\n"
                           "<6>[  10.000002] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name\n";
  const std::string t1 = "<6>[  10.000002] [    7]     0     7     1     5     0     0     0 a\n";
  const std::string t2 = "<6>[  10.000002] [    8]     0     8     1     3     0     0     0 b\n";
  const std::string end = "<6>[  10.000003] oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/a,task_memcg=/a,task=a,pid=7,uid=0\n";
  ASSERT_TRUE(feed_syslog_lines(head + t1, reports, after_us, after_count));
  EXPECT_EQ(after_us, 10000002u);
  EXPECT_EQ(after_count, 3u);  // "Tasks state", the header and t1
  ASSERT_TRUE(feed_syslog_lines(head + t1 + t2 + end, reports, after_us, after_count));
  const KernelOomReport* r = reports.find(7, 10000001, 0);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->tasks_total, 2u);
}

TEST(KernelLogSyslog, AUsersLinesAndLinesWithoutATimeAreNotTheKernels) {
  KernelOomReports reports;
  uint64_t after_us = 0, after_count = 0;
  const std::string forged = "<4>[  10.000001] a invoked oom-killer: gfp_mask=0x0, order=0, oom_score_adj=0\n"
                             "<14>[  10.000003] oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/a,task_memcg=/a,task=a,pid=7,uid=0\n";
  ASSERT_TRUE(feed_syslog_lines(forged, reports, after_us, after_count));
  EXPECT_EQ(reports.finished(), 0u);
  uint64_t u = 0, c = 0;
  EXPECT_FALSE(feed_syslog_lines("<6>no time here\n<6>[bad] x\n<6>[1.5] short fraction\n", reports, u, c));
  EXPECT_FALSE(feed_syslog_lines("", reports, u, c));
}
