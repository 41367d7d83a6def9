// The notification layer against the live kernel: v1 eventfds in a real
// memory cgroup created below this process's own memcg, and PSI triggers on
// /proc/pressure/memory. Deadlines only bound the waiting; nothing asserts
// how fast the kernel is.
#include <gtest/gtest.h>
#include <dirent.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cctype>
#include <chrono>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>

#include "agent/events/memcg_notify.h"
#include "test_cgroup.h"
#include "test_process.h"

using namespace oomsnap;
using namespace oomsnap_test;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t kMiB = 1 << 20;

bool readable_within(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(timeout.count())) == 1 && (p.revents & POLLIN);
}

// python3 that touches `mib` MiB of anonymous memory, says "ready", and holds it.
std::vector<std::string> python_holding(int mib) {
  return {"/usr/bin/python3", "-c",
          "import sys, time\nb = bytearray(" + std::to_string(mib) +
              " << 20)\nprint('ready', flush=True)\ntime.sleep(120)\n"};
}

#define REQUIRE_V1(cg)                                                                               \
  if ((cg).fs().version != 1)                                                                        \
  GTEST_SKIP() << "cgroup.event_control exists only on cgroup v1; this host's memory controller is v" \
               << (cg).fs().version

// "eventfd-id" from /proc/self/fdinfo: a global id the kernel frees only
// when the eventfd's context is freed, i.e. when nothing references it.
std::optional<long> eventfd_id(int fd) {
  std::string info;
  if (!read_file("/proc/self/fdinfo/" + std::to_string(fd), info)) return std::nullopt;
  std::smatch m;
  if (!std::regex_search(info, m, std::regex("eventfd-id:\\s*(\\d+)"))) return std::nullopt;
  return std::stol(m[1]);
}

// Whether another process holds an eventfd with this id (then its being
// taken says nothing about our registration).
bool eventfd_id_held_elsewhere(long id) {
  DIR* proc = opendir("/proc");
  if (!proc) return false;
  bool held = false;
  while (dirent* p = readdir(proc)) {
    if (!std::isdigit(static_cast<unsigned char>(p->d_name[0])) || std::to_string(getpid()) == p->d_name) continue;
    const std::string fd_dir = std::string("/proc/") + p->d_name + "/fdinfo";
    DIR* fds = opendir(fd_dir.c_str());
    if (!fds) continue;
    while (dirent* f = readdir(fds)) {
      std::string info;
      if (f->d_name[0] == '.' || !read_file(fd_dir + "/" + f->d_name, info)) continue;
      std::smatch m;
      if (std::regex_search(info, m, std::regex("eventfd-id:\\s*(\\d+)")) && std::stol(m[1]) == id) held = true;
    }
    closedir(fds);
  }
  closedir(proc);
  return held;
}

}  // namespace

TEST(V1MemcgNotify, ThresholdFiresWhenUsageCrossesIt) {
  TestMemcg cg("thr", 64 * kMiB);
  REQUIRE_V1(cg);
  std::string error;
  auto ev = V1ThresholdEvent::create(cg.fs(), cg.rel_path(), 32 * kMiB, error);
  ASSERT_TRUE(ev) << error;
  EXPECT_EQ(ev->threshold(), 32 * kMiB);
  EXPECT_EQ(ev->rel_path(), cg.rel_path());
  EXPECT_FALSE(ev->drain());  // an empty cgroup is far below

  Process p(python_holding(48), {}, cg.dir());
  ASSERT_EQ(p.read_line(30s), "ready");
  ASSERT_TRUE(readable_within(ev->fd(), 30s))
      << "usage " << read_memcg(cg.fs(), cg.rel_path()).usage_bytes.value_or(0);
  EXPECT_TRUE(ev->drain());
  EXPECT_FALSE(ev->drain());  // the read reset the counter
  EXPECT_GT(read_memcg(cg.fs(), cg.rel_path()).usage_bytes.value_or(0), 32 * kMiB);
}

TEST(V1MemcgNotify, ThresholdFiresForPageCacheToo) {
  TestMemcg cg("thrpc", 64 * kMiB);
  REQUIRE_V1(cg);
  std::string error;
  auto ev = V1ThresholdEvent::create(cg.fs(), cg.rel_path(), 32 * kMiB, error);
  ASSERT_TRUE(ev) << error;
  const std::string file = "/var/tmp/oomsnap-notify-" + std::to_string(getpid()) + "-pagecache";
  struct Remove {
    std::string f;
    ~Remove() { ::unlink(f.c_str()); }
  } remove_file{file};
  Process p({"/bin/sh", "-c", "dd if=/dev/zero of=" + file + " bs=1M count=48 status=none && echo ready && sleep 120"},
            {}, cg.dir());
  ASSERT_EQ(p.read_line(60s), "ready");
  ASSERT_TRUE(readable_within(ev->fd(), 30s))
      << "usage " << read_memcg(cg.fs(), cg.rel_path()).usage_bytes.value_or(0);
  EXPECT_TRUE(ev->drain());
}

TEST(V1MemcgNotify, ThresholdNotCrossedDoesNotFire) {
  TestMemcg cg("thrno", 64 * kMiB);
  REQUIRE_V1(cg);
  std::string error;
  auto ev = V1ThresholdEvent::create(cg.fs(), cg.rel_path(), 48 * kMiB, error);
  ASSERT_TRUE(ev) << error;
  Process p(python_holding(8), {}, cg.dir());
  ASSERT_EQ(p.read_line(30s), "ready");
  EXPECT_FALSE(readable_within(ev->fd(), 1500ms))
      << "usage " << read_memcg(cg.fs(), cg.rel_path()).usage_bytes.value_or(0);
  EXPECT_FALSE(ev->drain());
  EXPECT_LT(read_memcg(cg.fs(), cg.rel_path()).usage_bytes.value_or(0), 48 * kMiB);
}

TEST(V1MemcgNotify, OomEventFires) {
  TestMemcg cg("oom", 32 * kMiB);
  REQUIRE_V1(cg);
  std::string error;
  auto ev = V1OomEvent::create(cg.fs(), cg.rel_path(), error);
  ASSERT_TRUE(ev) << error;
  EXPECT_FALSE(ev->drain());
  // No swap: 128 MiB in a 32 MiB cgroup can only end in the OOM killer.
  Process p({"/usr/bin/python3", "-c", "b = bytearray(128 << 20)"}, {}, cg.dir());
  ASSERT_TRUE(readable_within(ev->fd(), 60s));
  EXPECT_TRUE(ev->drain());
  int status = -1;
  for (auto end = std::chrono::steady_clock::now() + 30s; std::chrono::steady_clock::now() < end;) {
    if ((status = p.try_wait()) != -1) break;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  EXPECT_GE(read_memcg(cg.fs(), cg.rel_path()).events["oom_kill"], 1u);
}

TEST(V1MemcgNotify, MissingCgroupErrorNamesThePath) {
  TestMemcg cg("bad", 64 * kMiB);
  REQUIRE_V1(cg);
  std::string error;
  auto none = V1ThresholdEvent::create(cg.fs(), cg.rel_path() + "/no-such-child", kMiB, error);
  EXPECT_FALSE(none);
  EXPECT_NE(error.find(cg.dir() + "/no-such-child/memory.usage_in_bytes: No such file or directory"),
            std::string::npos)
      << error;
}

// Both kinds of v1 event are signalled once more when the cgroup is removed.
TEST(V1MemcgNotify, EventsSignalWhenTheCgroupIsRemoved) {
  auto cg = std::make_unique<TestMemcg>("rm", 64 * kMiB);
  REQUIRE_V1(*cg);
  std::string error;
  auto thr = V1ThresholdEvent::create(cg->fs(), cg->rel_path(), 32 * kMiB, error);
  ASSERT_TRUE(thr) << error;
  auto oom = V1OomEvent::create(cg->fs(), cg->rel_path(), error);
  ASSERT_TRUE(oom) << error;
  const std::string dir = cg->dir();
  cg.reset();  // rmdir
  ASSERT_NE(::access(dir.c_str(), F_OK), 0);
  ASSERT_TRUE(readable_within(thr->fd(), 10s));
  ASSERT_TRUE(readable_within(oom->fd(), 10s));
  EXPECT_TRUE(thr->drain());
  EXPECT_TRUE(oom->drain());
}

// Closing the eventfd must unregister the kernel's event (or an agent that
// re-arms thresholds would leak one per re-arm). Observable from user space
// through eventfd-id: the id is freed only with the eventfd context, and a
// registered memcg event holds a reference to it.
TEST(V1MemcgNotify, ClosingTheEventfdUnregisters) {
  TestMemcg cg("close", 64 * kMiB);
  REQUIRE_V1(cg);
  std::string error;
  auto ev = V1ThresholdEvent::create(cg.fs(), cg.rel_path(), 32 * kMiB, error);
  ASSERT_TRUE(ev) << error;
  auto id = eventfd_id(ev->fd());
  if (!id) GTEST_SKIP() << "this kernel's fdinfo has no eventfd-id (added in 6.2)";

  // Last close: the kernel unregisters (from a workqueue) and drops its
  // reference, so the id becomes free and the next eventfd gets it back.
  ev.reset();
  bool reused = false;
  for (auto end = std::chrono::steady_clock::now() + 5s; !reused && std::chrono::steady_clock::now() < end;) {
    int probe = ::eventfd(0, EFD_CLOEXEC);
    ASSERT_GE(probe, 0);
    reused = eventfd_id(probe) == id;
    ::close(probe);
    if (!reused) std::this_thread::sleep_for(20ms);
  }
  if (!reused && eventfd_id_held_elsewhere(*id)) {
    GTEST_SKIP() << "another process took eventfd id " << *id << " meanwhile; cannot tell";
  }
  EXPECT_TRUE(reused) << "eventfd id " << *id << " still referenced after close: the memcg event was not unregistered";
}

namespace {

bool has_cap_sys_resource() {
  std::string status;
  if (!read_file("/proc/self/status", status)) return false;
  std::smatch m;
  if (!std::regex_search(status, m, std::regex("CapEff:\\s*([0-9a-f]+)"))) return false;
  return (std::stoull(m[1], nullptr, 16) >> 24) & 1;  // CAP_SYS_RESOURCE = 24
}

constexpr const char* kSystemPressure = "/proc/pressure/memory";

#define REQUIRE_PSI()                        \
  if (::access(kSystemPressure, F_OK) != 0) \
  GTEST_SKIP() << kSystemPressure << " is absent (kernel without PSI or booted with psi=0)"

// Memory pressure on demand: page cache thrashing in a 16 MiB memcg (reclaim
// and refaults are memory stalls, counted system-wide too).
struct PressureLoad {
  TestMemcg cg{"psi", 16 * kMiB};
  std::string file = "/var/tmp/oomsnap-notify-" + std::to_string(getpid()) + "-psi";
  std::unique_ptr<Process> proc;
  PressureLoad() {
    proc = std::make_unique<Process>(
        std::vector<std::string>{"/bin/sh", "-c",
                                 "dd if=/dev/zero of=" + file +
                                     " bs=1M count=64 status=none; while :; do cat " + file + " > /dev/null; done"},
        std::vector<std::string>{}, cg.dir());
  }
  ~PressureLoad() {
    proc.reset();  // kill before the memcg and the file go
    ::unlink(file.c_str());
  }
};

}  // namespace

// Windows that are multiples of 2 s are accepted without CAP_SYS_RESOURCE;
// others are refused then, with an error saying why.
TEST(PsiTriggerLive, SystemPressureWindows) {
  REQUIRE_PSI();
  std::string error;
  auto two = PsiTrigger::create(kSystemPressure, "some", 150ms, 2s, error);
  ASSERT_TRUE(two) << error;
  EXPECT_EQ(two->path(), kSystemPressure);
  auto full = PsiTrigger::create(kSystemPressure, "full", 100ms, 10s, error);
  ASSERT_TRUE(full) << error;

  auto one = PsiTrigger::create(kSystemPressure, "some", 150ms, 1s, error);
  if (has_cap_sys_resource()) {
    EXPECT_TRUE(one) << error;
  } else {
    EXPECT_FALSE(one);
    EXPECT_NE(error.find("write \"some 150000 1000000\" to /proc/pressure/memory: Invalid argument"),
              std::string::npos)
        << error;
    EXPECT_NE(error.find("lacks CAP_SYS_RESOURCE"), std::string::npos) << error;
    EXPECT_NE(error.find("multiple of 2 s"), std::string::npos) << error;
  }
  // Outside the kernel's 500 ms .. 10 s range for everyone.
  EXPECT_FALSE(PsiTrigger::create(kSystemPressure, "some", 100ms, 12s, error));
  EXPECT_NE(error.find("Invalid argument"), std::string::npos) << error;

  // The trigger's own fd reads the averages.
  auto stats = two->read(error);
  ASSERT_TRUE(stats) << error;
  ASSERT_TRUE(stats->full);
  EXPECT_GE(stats->some.total_us, stats->full->total_us);
  auto again = two->read(error);  // and again, from the start
  ASSERT_TRUE(again) << error;
  EXPECT_GE(again->some.total_us, stats->some.total_us);
  EXPECT_FALSE(two->gone());
}

TEST(PsiTriggerLive, FiresUnderMemoryPressure) {
  REQUIRE_PSI();
  std::string error;
  auto trigger = PsiTrigger::create(kSystemPressure, "some", 10ms, 2s, error);
  ASSERT_TRUE(trigger) << error;
  PressureLoad load;
  bool fired = false;
  for (auto end = std::chrono::steady_clock::now() + 60s; !fired && std::chrono::steady_clock::now() < end;) {
    fired = trigger->fired(1000);
  }
  ASSERT_TRUE(fired) << "no 10 ms stall within a 2 s window in 60 s of thrashing";
  EXPECT_FALSE(trigger->gone());
  auto stats = trigger->read(error);
  ASSERT_TRUE(stats) << error;
  EXPECT_GT(stats->some.total_us, 0u);
}

// Boost.Asio's stream_descriptor waits for POLLPRI with wait_error (its epoll
// reactor registers EPOLLPRI), which is what the agent's loop will use.
TEST(PsiTriggerLive, AsioWaitErrorCompletesOnFire) {
  REQUIRE_PSI();
  std::string error;
  auto trigger = PsiTrigger::create(kSystemPressure, "some", 10ms, 2s, error);
  ASSERT_TRUE(trigger) << error;
  boost::asio::io_context io;
  boost::asio::posix::stream_descriptor sd(io, trigger->fd());
  bool completed = false;
  boost::system::error_code result;
  sd.async_wait(boost::asio::posix::stream_descriptor::wait_error, [&](const boost::system::error_code& ec) {
    completed = true;
    result = ec;
  });
  PressureLoad load;
  io.run_for(60s);
  sd.release();  // the trigger owns the fd
  ASSERT_TRUE(completed) << "no wait_error completion in 60 s of thrashing";
  EXPECT_FALSE(result) << result.message();
}
