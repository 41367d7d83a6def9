// The kernel's OOM report read from /dev/kmsg records: a real report (6.18,
// cgroup v1, taken from this machine's /dev/kmsg), and the hostile cases: a
// user's forged lines, a report that never ends, huge task lists, names and
// paths with commas and spaces, lines past the bound.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "agent/cgroup/kernel_oom_report.h"

using namespace oomsnap;

namespace {

std::vector<std::string> fixture_lines(const std::string& name) {
  std::ifstream f(std::string(OOMSNAP_SOURCE_DIR) + "/tests/fixtures/kmsg/" + name);
  std::vector<std::string> out;
  for (std::string l; std::getline(f, l);) out.push_back(l);
  return out;
}

std::string rec(int prio, uint64_t seq, const std::string& text) {
  return std::to_string(prio) + "," + std::to_string(seq) + ",1000,-;" + text;
}

// The line that starts a report (the kernel facility, warning level).
void open_report(KernelOomReports& r, uint64_t& seq) {
  r.feed(rec(4, seq++, "x invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0"));
}

// A minimal report with the given victim and task lines.
void feed_report(KernelOomReports& r, uint64_t& seq, pid_t victim, const std::vector<std::string>& tasks,
                 int prio = 6, const std::string& oom_line_tail = "") {
  open_report(r, seq);
  r.feed(rec(prio, seq++, "memory: usage 1024kB, limit 1024kB, failcnt 1"));
  r.feed(rec(prio, seq++, "Memory cgroup stats for /box:"));
  r.feed(rec(prio, seq++, "anon 1048576"));
  r.feed(rec(prio, seq++, "Tasks state (memory values in pages):"));
  r.feed(rec(prio, seq++, "[  pid  ]   uid  tgid total_vm      rss rss_anon rss_file rss_shmem pgtables_bytes swapents oom_score_adj name"));
  for (const auto& t : tasks) r.feed(rec(prio, seq++, t));
  r.feed(rec(prio, seq++, "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/box,"
                          "task_memcg=/box,task=x,pid=" + std::to_string(victim) + ",uid=0" + oom_line_tail));
}

std::string task(pid_t pid, uint64_t rss, const std::string& name = "t") {
  char b[200];
  std::snprintf(b, sizeof b, "[%7d]     0 %5d     1090 %8llu %8llu        0         0    45056        0             0 %s", pid,
                pid, static_cast<unsigned long long>(rss), static_cast<unsigned long long>(rss), name.c_str());
  return b;
}

}  // namespace

TEST(KernelOomReport, ARealV1ReportReadsWhole) {
  KernelOomReports r;
  for (const auto& l : fixture_lines("memcg_v1_oom_6.18.txt")) r.feed(l);
  ASSERT_EQ(r.finished(), 1u);
  const KernelOomReport* rep = r.find(21308, 72560933808, 1'000'000);
  ASSERT_NE(rep, nullptr);
  EXPECT_EQ(rep->invoker, "python3");
  EXPECT_EQ(rep->first_seq, 161578u);
  EXPECT_EQ(rep->usage_bytes, 32768u << 10);
  EXPECT_EQ(rep->limit_bytes, 32768u << 10);
  EXPECT_EQ(rep->memsw_usage_bytes, 32768u << 10);
  EXPECT_EQ(rep->kmem_usage_bytes, 204u << 10);
  EXPECT_FALSE(rep->swap_usage_bytes);
  EXPECT_EQ(rep->stat_memcg, "/process_api/4ecdfe954059a6c42db93e58336f925d/kmsgprobe");
  EXPECT_NE(rep->stat_text.find("\ntotal_rss 33345536\n"), std::string::npos);
  EXPECT_EQ(rep->stat_text.rfind("cache 0\nrss 33345536\n", 0), 0u);
  EXPECT_FALSE(rep->stat_cut);
  ASSERT_EQ(rep->tasks.size(), 2u);
  EXPECT_EQ(rep->tasks_total, 2u);
  const KernelOomTask& py = rep->tasks[0];  // largest first
  EXPECT_EQ(py.pid, 21308);
  EXPECT_EQ(py.name, "python3");
  EXPECT_EQ(py.rss_pages, 9782u);
  EXPECT_EQ(py.rss_anon_pages, 8064u);
  EXPECT_EQ(py.rss_file_pages, 1718u);
  EXPECT_EQ(py.rss_shmem_pages, 0u);
  EXPECT_EQ(py.pgtables_bytes, 135168u);
  EXPECT_EQ(rep->tasks[1].name, "bash");
  EXPECT_EQ(rep->constraint, "CONSTRAINT_MEMCG");
  EXPECT_EQ(rep->oom_memcg, rep->stat_memcg);
  EXPECT_EQ(rep->task_memcg, rep->stat_memcg);
  EXPECT_EQ(rep->victim_comm, "python3");
  // Another pid, or the same pid long after: not this report.
  EXPECT_EQ(r.find(21306, 72560933808, 1'000'000), nullptr);
  EXPECT_EQ(r.find(21308, 72560933808 + 60'000'000, 1'000'000), nullptr);
}

// Older kernels print no rss_anon/rss_file/rss_shmem columns: found by name.
TEST(KernelOomReport, TaskColumnsAreFoundByTheirNames) {
  KernelOomReports r;
  uint64_t seq = 1;
  open_report(r, seq);
  r.feed(rec(6, seq++, "Tasks state (memory values in pages):"));
  r.feed(rec(6, seq++, "[  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name"));
  r.feed(rec(6, seq++, "[    675]     0   675   300000    5000   200704        7          -500 my worker"));
  r.feed(rec(6, seq++, "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/a,"
                       "task_memcg=/a,task=my worker,pid=675,uid=0"));
  const KernelOomReport* rep = r.find(675, 1000, 0);
  ASSERT_NE(rep, nullptr);
  ASSERT_EQ(rep->tasks.size(), 1u);
  EXPECT_EQ(rep->tasks[0].rss_pages, 5000u);
  EXPECT_FALSE(rep->tasks[0].rss_anon_pages);
  EXPECT_EQ(rep->tasks[0].swap_entries, 7u);
  EXPECT_EQ(rep->tasks[0].oom_score_adj, -500);
  EXPECT_EQ(rep->tasks[0].name, "my worker");
  EXPECT_EQ(rep->victim_comm, "my worker");
}

// A local user may write to /dev/kmsg; the kernel files it under the user
// facility (prio >= 8). Such lines neither start, fill nor end a report.
TEST(KernelOomReport, LinesOfAnotherFacilityAreNotTheKernels) {
  KernelOomReports r;
  uint64_t seq = 1;
  feed_report(r, seq, 4242, {task(4242, 10)}, 14);  // user.info: everything after the kernel's first line forged
  EXPECT_EQ(r.finished(), 0u);
  r.feed(rec(12, seq++, "evil invoked oom-killer: gfp_mask=0x0, order=0, oom_score_adj=0"));
  r.feed(rec(14, seq++, "oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/a,task_memcg=/a,task=evil,pid=1,uid=0"));
  EXPECT_EQ(r.finished(), 0u);
  // Forged lines inside a real report are skipped.
  open_report(r, seq);
  r.feed(rec(14, seq++, "memory: usage 1kB, limit 1kB, failcnt 0"));
  r.feed(rec(6, seq++, "memory: usage 2048kB, limit 4096kB, failcnt 0"));
  r.feed(rec(14, seq++, "oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/a,task_memcg=/a,task=evil,pid=1,uid=0"));
  r.feed(rec(6, seq++, "oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/a,task_memcg=/a,task=x,pid=99,uid=0"));
  ASSERT_EQ(r.finished(), 1u);
  EXPECT_EQ(r.find(1, 1000, 0), nullptr);
  ASSERT_NE(r.find(99, 1000, 0), nullptr);
  EXPECT_EQ(r.find(99, 1000, 0)->usage_bytes, 2048u << 10);
}

// Paths and names may hold commas and "key=" text: the fields are taken
// from the right, so a cgroup named "x,pid=1" cannot name another victim.
TEST(KernelOomReport, CommasInPathsAndNamesDoNotMoveTheFields) {
  KernelOomReports r;
  uint64_t seq = 1;
  open_report(r, seq);
  r.feed(rec(6, seq++, "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=0-1,3,cpuset=/,mems_allowed=0-1,"
                       "oom_memcg=/a,pid=1,b,task_memcg=/a,pid=1,b/c,task=we,ird,pid=777,uid=1000"));
  const KernelOomReport* rep = r.find(777, 1000, 0);
  ASSERT_NE(rep, nullptr);
  EXPECT_EQ(rep->oom_memcg, "/a,pid=1,b");
  EXPECT_EQ(rep->task_memcg, "/a,pid=1,b/c");
  EXPECT_EQ(rep->victim_comm, "we,ird");
  EXPECT_EQ(r.find(1, 1000, 0), nullptr);
}

// Thousands of tasks: the 64 largest are kept, largest first, the rest summed.
TEST(KernelOomReport, TheLargestTasksAreKeptAndTheRestSummed) {
  KernelOomReports r;
  uint64_t seq = 1;
  std::vector<std::string> tasks;
  uint64_t all = 0;
  for (int i = 1; i <= 5000; ++i) {
    const uint64_t rss = static_cast<uint64_t>((i * 7919) % 5000 + 1);
    all += rss;
    tasks.push_back(task(i, rss));
  }
  feed_report(r, seq, 3, tasks);
  const KernelOomReport* rep = r.find(3, 1000, 0);
  ASSERT_NE(rep, nullptr);
  EXPECT_EQ(rep->tasks_total, 5000u);
  ASSERT_EQ(rep->tasks.size(), KernelOomReports::kMaxTasks);
  EXPECT_EQ(rep->tasks[0].rss_pages, 5000u);
  EXPECT_EQ(rep->tasks.back().rss_pages, 5000u - KernelOomReports::kMaxTasks + 1);
  uint64_t kept = 0;
  for (const auto& t : rep->tasks) kept += t.rss_pages;
  EXPECT_EQ(kept + rep->tasks_rest.rss_pages, all);
  EXPECT_EQ(*rep->tasks_rest.rss_anon_pages, rep->tasks_rest.rss_pages);
}

// A report whose oom-kill line never comes is dropped after kMaxReportLines;
// memory.stat is cut at kMaxStatLines; lines past kMaxLine are cut; at most
// kMaxReports finished reports are kept.
TEST(KernelOomReport, EverythingIsBounded) {
  KernelOomReports r;
  uint64_t seq = 1;
  open_report(r, seq);
  r.feed(rec(6, seq++, "Memory cgroup stats for /box:"));
  for (size_t i = 0; i < KernelOomReports::kMaxReportLines + 10; ++i) r.feed(rec(6, seq++, "anon 4096"));
  r.feed(rec(6, seq++, "oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/a,task_memcg=/a,task=x,pid=5,uid=0"));
  EXPECT_EQ(r.finished(), 0u);

  open_report(r, seq);
  r.feed(rec(6, seq++, "Memory cgroup stats for /box:"));
  for (size_t i = 0; i < 1000; ++i) r.feed(rec(6, seq++, "k" + std::to_string(i) + " 1"));
  r.feed(rec(6, seq++, "Tasks state (memory values in pages):"));
  r.feed(rec(6, seq++, "[  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name"));
  r.feed(rec(6, seq++, "[    9]     0     9     1     1     1     0     0 " + std::string(100000, 'n')));
  r.feed(rec(6, seq++, "oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/a,task_memcg=/a,task=x,pid=6,uid=0" +
                           std::string(100000, 'z')));
  const KernelOomReport* rep = r.find(6, 1000, 0);
  ASSERT_NE(rep, nullptr) << "a line past kMaxLine is cut, not refused";
  EXPECT_TRUE(rep->stat_cut);
  EXPECT_LE(rep->stat_text.size(), KernelOomReports::kMaxStatLines * 12);
  ASSERT_EQ(rep->tasks.size(), 1u);
  EXPECT_LE(rep->tasks[0].name.size(), 16u);

  for (int i = 0; i < 40; ++i) feed_report(r, seq, 100 + i, {task(100 + i, 1)});
  EXPECT_EQ(r.finished(), KernelOomReports::kMaxReports);
  EXPECT_NE(r.find(139, 1000, 0), nullptr);
  EXPECT_EQ(r.find(100, 1000, 0), nullptr);
}

// Records that are not kmsg records at all are ignored.
TEST(KernelOomReport, MalformedRecordsAreIgnored) {
  KernelOomReports r;
  for (const char* s : {"", ";", "6;x", "a,b,c,d;x invoked oom-killer: ", "6,1,2;", "-1,1,1,-;x invoked oom-killer: ",
                        "6,1,99999999999999999999999,-;oom-kill:pid=1"})
    r.feed(s);
  EXPECT_EQ(r.finished(), 0u);
}

// Kernels before 6.3 (5.10, 6.1) print memory.stat as one record, its lines
// joined by newlines, escaped "\x0a" in /dev/kmsg; a record cut at kMaxLine
// loses its last, perhaps partial, line rather than keep a wrong number.
TEST(KernelOomReport, MemoryStatAsOneRecordReadsAsLines) {
  KernelOomReports r;
  uint64_t seq = 1;
  open_report(r, seq);
  r.feed(rec(6, seq++, "Memory cgroup stats for /oomsnap-v2test/box:"));
  r.feed(rec(6, seq++, "anon 66551808\\x0afile 0\\x0akernel_stack 114688\\x0ashmem 0\\x0a"));
  r.feed(rec(6, seq++, "oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/a,task_memcg=/a,task=x,pid=5,uid=0"));
  const KernelOomReport* rep = r.find(5, 1000, 0);
  ASSERT_NE(rep, nullptr);
  EXPECT_EQ(rep->stat_text, "anon 66551808\nfile 0\nkernel_stack 114688\nshmem 0\n");
  EXPECT_EQ(report_memory_stat(*rep).bytes.at("anon"), 66551808u);

  std::string huge;
  while (huge.size() < KernelOomReports::kMaxLine - 5) huge += "k 1\\x0a";
  huge += "anon 123456789";  // past kMaxLine: cut inside the number
  open_report(r, seq);
  r.feed(rec(6, seq++, "Memory cgroup stats for /b:"));
  r.feed(rec(6, seq++, huge));
  r.feed(rec(6, seq++, "oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/b,task_memcg=/b,task=x,pid=6,uid=0"));
  rep = r.find(6, 1000, 0);
  ASSERT_NE(rep, nullptr);
  EXPECT_EQ(rep->stat_text.find("anon"), std::string::npos);
}
