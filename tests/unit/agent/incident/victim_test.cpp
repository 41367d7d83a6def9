#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "agent/incident/victim.h"

using namespace oomsnap;

namespace {

const uint64_t kPage = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
const uint64_t kLimit = 1000 * kPage;  // adj N then adds exactly N pages

VictimCandidate cand(pid_t pid, uint64_t rss_pages, int adj = 0, uint64_t swap_pages = 0,
                     uint64_t pte_pages = 0) {
  VictimCandidate c;
  c.pid = pid;
  c.comm = "p" + std::to_string(pid);
  c.oom_score_adj = adj;
  c.memory.rss_bytes = rss_pages * kPage;
  c.memory.swap_bytes = swap_pages * kPage;
  c.memory.page_table_bytes = pte_pages * kPage;
  c.memory.status = "ok";
  return c;
}

}  // namespace

TEST(Victim, ScoreIsRssSwapPageTablesPlusAdj) {
  EXPECT_EQ(badness_pages(cand(1, 100, 0, 20, 3), kLimit).value(), 123);
  EXPECT_EQ(badness_pages(cand(1, 100, 500), kLimit).value(), 600);
  EXPECT_EQ(badness_pages(cand(1, 100, -50), kLimit).value(), 50);
  EXPECT_FALSE(badness_pages(cand(1, 100, -1000), kLimit));
  VictimCandidate kthread = cand(2, 0);
  kthread.memory = ProcessMemory{};  // no Vm* lines at all
  EXPECT_FALSE(badness_pages(kthread, kLimit));
}

TEST(Victim, AdjMinusThousandNeverChosen) {
  auto v = pick_victim({cand(10, 1'000'000, -1000), cand(11, 5)}, kLimit);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->pid, 11);
  EXPECT_EQ(v->score_pages, 5);
  EXPECT_FALSE(pick_victim({cand(10, 1'000'000, -1000)}, kLimit));
  EXPECT_FALSE(pick_victim({}, kLimit));
}

TEST(Victim, KernelThreadsSkipped) {
  VictimCandidate kthread = cand(2, 0);
  kthread.memory = ProcessMemory{};
  kthread.memory.status = "no memory fields (kernel thread or exited process)";
  auto v = pick_victim({kthread, cand(12, 1)}, kLimit);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->pid, 12);
}

// The kernel's order over the whole container, for MaxProcessesPerIncident:
// highest badness first, the same tie rules, the unkillable left out; its
// first is pick_victim's choice.
TEST(Victim, RankIsTheKernelsOrderWithoutTheUnkillable) {
  std::vector<VictimCandidate> cands = {cand(60, 100),         cand(61, 300, -1000), cand(62, 50, 200),
                                        cand(63, 60, 0, 40),   cand(64, 90, 0, 10),  cand(65, 400)};
  auto ranked = rank_victims(cands, kLimit);
  std::vector<pid_t> order;
  for (const auto& c : ranked) order.push_back(c.pid);
  EXPECT_EQ(order, (std::vector<pid_t>{65, 62, 60, 64, 63}));  // 60, 64, 63 tie at 100: by RSS
  EXPECT_EQ(ranked[1].score_pages, 250);
  EXPECT_EQ(pick_victim(cands, kLimit)->pid, ranked.front().pid);
  EXPECT_TRUE(rank_victims({cand(1, 10, -1000)}, kLimit).empty());
}

TEST(Victim, PositiveAdjBoosts) {
  // 100 pages + 500/1000 of a 1000-page limit beats 400 pages.
  auto v = pick_victim({cand(20, 400), cand(21, 100, 500)}, kLimit);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->pid, 21);
  EXPECT_EQ(v->score_pages, 600);
}

TEST(Victim, NegativeAdjLowers) {
  auto v = pick_victim({cand(30, 400, -300), cand(31, 200)}, kLimit);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->pid, 31);
}

TEST(Victim, AdjScalesWithLimit) {
  // Same adj, bigger limit: the boost grows with the container limit.
  auto small = pick_victim({cand(40, 100, 100)}, 1000 * kPage);
  auto big = pick_victim({cand(40, 100, 100)}, 10000 * kPage);
  EXPECT_EQ(small->score_pages, 200);
  EXPECT_EQ(big->score_pages, 1100);
}

TEST(Victim, TiesBreakOnRssThenLowerPid) {
  // Equal score (100): pid 51 has more RSS (its swap is smaller).
  auto v = pick_victim({cand(50, 60, 0, 40), cand(51, 90, 0, 10)}, kLimit);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->pid, 51);
  // Equal score and RSS: lower pid, regardless of order.
  EXPECT_EQ(pick_victim({cand(61, 100), cand(60, 100)}, kLimit)->pid, 60);
  EXPECT_EQ(pick_victim({cand(60, 100), cand(61, 100)}, kLimit)->pid, 60);
}

TEST(Victim, ParseOomScoreAdj) {
  EXPECT_EQ(parse_oom_score_adj("0\n").value(), 0);
  EXPECT_EQ(parse_oom_score_adj("-1000\n").value(), -1000);
  EXPECT_EQ(parse_oom_score_adj("1000").value(), 1000);
  EXPECT_FALSE(parse_oom_score_adj("1001"));
  EXPECT_FALSE(parse_oom_score_adj(""));
  EXPECT_FALSE(parse_oom_score_adj("x"));
}

TEST(Victim, ReadCandidatesToleratesMissingPid) {
  // pid_max is at most 4194304; this one cannot exist.
  EXPECT_TRUE(read_candidates({99999999}).candidates.empty());
  auto self = read_candidates({getpid()}).candidates;
  ASSERT_EQ(self.size(), 1u);
  EXPECT_EQ(self[0].pid, getpid());
  EXPECT_GT(self[0].start_time_ticks, 0u);
  EXPECT_TRUE(self[0].memory.rss_bytes);
}

// A container with more processes than the scan may read: it stops at the
// count, says how many of how many it read, and keeps what it read.
TEST(Victim, ScanStopsAtItsProcessLimitAndSaysSo) {
  const std::vector<pid_t> pids = {getpid(), getppid(), getpid(), getppid(), getpid()};
  ScanLimits limits;
  limits.max_processes = 2;
  auto scan = read_candidates(pids, limits);
  EXPECT_EQ(scan.pids_read, 2u);
  EXPECT_EQ(scan.candidates.size(), 2u);
  EXPECT_NE(scan.cut.find("read 2 of 5 processes"), std::string::npos) << scan.cut;
  EXPECT_NE(scan.cut.find("limit of 2 processes"), std::string::npos) << scan.cut;
  // Within the limits: every pid read, nothing said.
  auto whole = read_candidates(pids);
  EXPECT_EQ(whole.pids_read, pids.size());
  EXPECT_EQ(whole.candidates.size(), pids.size());
  EXPECT_EQ(whole.cut, "");
}

// ... and at its time limit, however many are left.
TEST(Victim, ScanStopsAtItsTimeLimitAndSaysSo) {
  const std::vector<pid_t> pids(100000, getpid());
  ScanLimits limits;
  limits.max_processes = pids.size();
  limits.max_time = std::chrono::milliseconds(20);
  auto scan = read_candidates(pids, limits);
  EXPECT_LT(scan.pids_read, pids.size());  // 100,000 rounds of four /proc reads take seconds
  EXPECT_EQ(scan.candidates.size(), scan.pids_read);
  EXPECT_NE(scan.cut.find("of 100000 processes (the scan's time limit of 20 ms)"), std::string::npos) << scan.cut;
}

namespace {

// A forked child that touches `bytes` of memory, reports readiness over a pipe
// and sleeps until killed. The destructor kills and reaps it so a failing
// assertion leaves no stray process.
class Child {
 public:
  explicit Child(size_t bytes) {
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(fds[0]);
      if (bytes) {
        // volatile: the compiler may otherwise drop a malloc+memset whose
        // result is never read, and the pages would never become resident.
        auto* p = static_cast<volatile char*>(std::malloc(bytes));
        if (!p) _exit(1);
        for (size_t i = 0; i < bytes; i += 512) p[i] = 0x5a;
      }
      char ok = 1;
      if (write(fds[1], &ok, 1) != 1) _exit(1);
      for (;;) pause();
    }
    close(fds[1]);
    char ok = 0;
    ready_ = pid_ > 0 && read(fds[0], &ok, 1) == 1 && ok == 1;
    close(fds[0]);
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  pid_t pid() const { return pid_; }
  bool ready() const { return ready_; }

 private:
  pid_t pid_ = -1;
  bool ready_ = false;
};

}  // namespace

namespace {

// Writes /proc/PID/oom_score_adj; returns 0 or the errno.
int set_oom_score_adj(pid_t pid, int adj) {
  std::string path = "/proc/" + std::to_string(pid) + "/oom_score_adj";
  int fd = open(path.c_str(), O_WRONLY);
  if (fd < 0) return errno;
  std::string text = std::to_string(adj) + "\n";
  int err = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) ? 0 : errno;
  close(fd);
  return err;
}

}  // namespace

// Both children share the parent's oom_score_adj, so only RSS differs.
constexpr uint64_t kLiveLimit = 8ull << 30;

TEST(Victim, LivePicksBigChild) {
  Child big(64u << 20);
  Child idle(0);
  ASSERT_TRUE(big.ready());
  ASSERT_TRUE(idle.ready());
  auto cands = read_candidates({big.pid(), idle.pid()}).candidates;
  ASSERT_EQ(cands.size(), 2u);
  auto v = pick_victim(cands, kLiveLimit);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->pid, big.pid());
  EXPECT_GE(v->memory.rss_bytes.value(), 64u << 20);
}

TEST(Victim, LiveAdjMinusThousandExempts) {
  Child big(64u << 20);
  Child idle(0);
  ASSERT_TRUE(big.ready());
  ASSERT_TRUE(idle.ready());
  // Lowering oom_score_adj needs CAP_SYS_RESOURCE, which root in a container
  // may lack.
  int err = set_oom_score_adj(big.pid(), -1000);
  if (err == EACCES || err == EPERM) GTEST_SKIP() << "no CAP_SYS_RESOURCE: " << std::strerror(err);
  ASSERT_EQ(err, 0) << std::strerror(err);
  auto cands = read_candidates({big.pid(), idle.pid()}).candidates;
  ASSERT_EQ(cands.size(), 2u);
  auto v = pick_victim(cands, kLiveLimit);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->pid, idle.pid());
}

TEST(Victim, LiveRaisedAdjOverridesSize) {
  // Raising needs no privilege, so this exercises the live oom_score_adj path
  // everywhere: +1000 adds a whole limit's worth of pages to the idle child.
  Child big(64u << 20);
  Child idle(0);
  ASSERT_TRUE(big.ready());
  ASSERT_TRUE(idle.ready());
  ASSERT_EQ(set_oom_score_adj(idle.pid(), 1000), 0);
  auto cands = read_candidates({big.pid(), idle.pid()}).candidates;
  ASSERT_EQ(cands.size(), 2u);
  auto v = pick_victim(cands, kLiveLimit);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->pid, idle.pid());
  EXPECT_EQ(v->oom_score_adj, 1000);
}

TEST(Victim, LargestTasksAreTheKernelsTaskListBoundedByRss) {
  // The unkillable are listed too (the kernel's OOM report lists them), and
  // a tie in RSS goes to the lower pid.
  std::vector<VictimCandidate> cands = {cand(70, 100), cand(71, 300, -1000), cand(72, 50),
                                        cand(73, 100),  cand(74, 400, 0, 9, 2)};
  auto top = largest_tasks(cands, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].pid, 74);
  EXPECT_EQ(top[0].memory.swap_bytes, 9 * kPage);
  EXPECT_EQ(top[1].pid, 71);
  EXPECT_EQ(top[1].oom_score_adj, -1000);
  EXPECT_EQ(top[2].pid, 70);
  EXPECT_EQ(largest_tasks(cands, 10).size(), 5u);
  EXPECT_EQ(largest_tasks(cands, 10)[4].pid, 72);
  EXPECT_TRUE(largest_tasks({}, 3).empty());
}
