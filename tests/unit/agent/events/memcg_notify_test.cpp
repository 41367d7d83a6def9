// Notification layer on fake cgroup trees (plain files in a temp directory):
// inotify reports IN_MODIFY for regular-file writes just as cgroupfs does for
// memory.events, so the v2 watcher runs for real here. The v1 eventfd and PSI
// mechanisms need the kernel's files and are covered by the integration tests;
// here only their argument and error handling.
#include <gtest/gtest.h>

#include "temp_tree.h"
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "agent/events/memcg_notify.h"

using namespace oomsnap;
namespace fs = std::filesystem;

namespace {

using oomsnap_test::TempTree;

std::string events_text(uint64_t high, uint64_t max, uint64_t oom, uint64_t oom_kill) {
  return "low 0\nhigh " + std::to_string(high) + "\nmax " + std::to_string(max) + "\noom " + std::to_string(oom) +
         "\noom_kill " + std::to_string(oom_kill) + "\noom_group_kill 0\n";
}

// A deadline for the kernel to queue the event, not a timing assertion.
bool readable_within(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(timeout.count())) == 1 && (p.revents & POLLIN);
}

// Waits for the watcher to become readable and returns what it reports.
std::vector<MemoryEventsChange> next_changes(MemoryEventsWatcher& w) {
  if (!readable_within(w.fd(), std::chrono::seconds(5))) return {};
  return w.read_changes();
}

}  // namespace

TEST(MemoryEventsWatcher, ReportsCountersAndDeltasOfRewrittenFile) {
  TempTree t;
  t.write("pod/memory.events", events_text(2, 0, 0, 0));
  t.write("other/memory.events", events_text(0, 0, 0, 0));
  CgroupFs cfs{2, t.root, "/"};
  std::string error;
  auto w = MemoryEventsWatcher::create(error);
  ASSERT_TRUE(w) << error;
  ASSERT_TRUE(w->add(cfs, "/pod", error)) << error;
  ASSERT_TRUE(w->add(cfs, "/other", error)) << error;
  EXPECT_EQ(w->size(), 2u);
  EXPECT_TRUE(w->read_changes().empty());  // nothing happened yet

  // Deltas count from the baseline add() read (high was already 2).
  t.write("pod/memory.events", events_text(5, 1, 0, 0));
  auto changes = next_changes(*w);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rel_path, "/pod");
  EXPECT_FALSE(changes[0].gone);
  EXPECT_EQ(changes[0].counters.size(), 6u);
  EXPECT_EQ(changes[0].counters.at("high"), 5u);
  EXPECT_EQ(changes[0].counters.at("max"), 1u);
  EXPECT_EQ(changes[0].counters.at("oom_kill"), 0u);
  EXPECT_EQ(changes[0].delta, (std::map<std::string, uint64_t>{{"high", 3}, {"max", 1}}));

  // Then from the previous read.
  t.write("pod/memory.events", events_text(5, 1, 1, 1));
  changes = next_changes(*w);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].delta, (std::map<std::string, uint64_t>{{"oom", 1}, {"oom_kill", 1}}));

  // Both cgroups at once, each once however many writes were queued.
  t.write("other/memory.events", events_text(1, 0, 0, 0));
  t.write("other/memory.events", events_text(4, 0, 0, 0));
  t.write("pod/memory.events", events_text(6, 1, 1, 1));
  ASSERT_TRUE(readable_within(w->fd(), std::chrono::seconds(5)));
  changes = w->read_changes();
  ASSERT_EQ(changes.size(), 2u);
  std::map<std::string, std::map<std::string, uint64_t>> delta_by_path;
  for (const auto& c : changes) delta_by_path[c.rel_path] = c.delta;
  EXPECT_EQ(delta_by_path["/other"], (std::map<std::string, uint64_t>{{"high", 4}}));
  EXPECT_EQ(delta_by_path["/pod"], (std::map<std::string, uint64_t>{{"high", 1}}));

  // A rewrite with the same values is an event but not a change.
  t.write("pod/memory.events", events_text(6, 1, 1, 1));
  ASSERT_TRUE(readable_within(w->fd(), std::chrono::seconds(5)));
  EXPECT_TRUE(w->read_changes().empty());
  EXPECT_FALSE(readable_within(w->fd(), std::chrono::milliseconds(0)));  // drained
}

TEST(MemoryEventsWatcher, RemoveStopsChanges) {
  TempTree t;
  t.write("a/memory.events", events_text(0, 0, 0, 0));
  t.write("b/memory.events", events_text(0, 0, 0, 0));
  CgroupFs cfs{2, t.root, "/"};
  std::string error;
  auto w = MemoryEventsWatcher::create(error);
  ASSERT_TRUE(w) << error;
  ASSERT_TRUE(w->add(cfs, "/a", error)) << error;
  ASSERT_TRUE(w->add(cfs, "/b", error)) << error;

  // A change queued before remove() is not reported after it either.
  t.write("a/memory.events", events_text(1, 0, 0, 0));
  w->remove("/a");
  w->remove("/never-added");  // ignored
  EXPECT_EQ(w->size(), 1u);
  t.write("a/memory.events", events_text(2, 0, 0, 0));
  t.write("b/memory.events", events_text(0, 3, 0, 0));  // proves events still flow
  auto changes = next_changes(*w);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rel_path, "/b");
  EXPECT_EQ(changes[0].delta, (std::map<std::string, uint64_t>{{"max", 3}}));

  // Added again: a fresh baseline.
  ASSERT_TRUE(w->add(cfs, "/a", error)) << error;
  t.write("a/memory.events", events_text(7, 0, 0, 0));
  changes = next_changes(*w);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rel_path, "/a");
  EXPECT_EQ(changes[0].delta, (std::map<std::string, uint64_t>{{"high", 5}}));
}

TEST(MemoryEventsWatcher, DeletedFileIsReportedGoneOnce) {
  TempTree t;
  t.write("a/memory.events", events_text(0, 0, 0, 0));
  CgroupFs cfs{2, t.root, "/"};
  std::string error;
  auto w = MemoryEventsWatcher::create(error);
  ASSERT_TRUE(w) << error;
  ASSERT_TRUE(w->add(cfs, "/a", error)) << error;
  fs::remove_all(fs::path(t.root) / "a");
  auto changes = next_changes(*w);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rel_path, "/a");
  EXPECT_TRUE(changes[0].gone);
  EXPECT_NE(changes[0].error.find(t.root + "/a/memory.events"), std::string::npos) << changes[0].error;
  EXPECT_EQ(w->size(), 0u);
  EXPECT_TRUE(w->read_changes().empty());
}

TEST(MemoryEventsWatcher, AddErrorsNameTheFile) {
  TempTree t;
  t.write("v2/memory.events", events_text(0, 0, 0, 0));
  std::string error;
  auto w = MemoryEventsWatcher::create(error);
  ASSERT_TRUE(w) << error;

  EXPECT_FALSE(w->add(CgroupFs{2, t.root, "/"}, "/missing", error));
  EXPECT_NE(error.find(t.root + "/missing/memory.events"), std::string::npos) << error;
  EXPECT_NE(error.find("No such file or directory"), std::string::npos) << error;

  // v1 has no memory.events: refused even where a file of that name exists.
  error.clear();
  EXPECT_FALSE(w->add(CgroupFs{1, t.root, "/"}, "/v2", error));
  EXPECT_NE(error.find(t.root + "/v2/memory.events"), std::string::npos) << error;
  EXPECT_NE(error.find("cgroup v2"), std::string::npos) << error;

  // One file under two spellings would share one inotify watch.
  ASSERT_TRUE(w->add(CgroupFs{2, t.root, "/"}, "/v2", error)) << error;
  EXPECT_TRUE(w->add(CgroupFs{2, t.root, "/"}, "/v2", error));  // same spelling: already there
  error.clear();
  EXPECT_FALSE(w->add(CgroupFs{2, t.root, "/"}, "v2", error));
  EXPECT_NE(error.find("already watched as /v2"), std::string::npos) << error;
  EXPECT_EQ(w->size(), 1u);
}

TEST(PsiParse, RealText) {
  auto s = parse_psi(
      "some avg10=1.53 avg60=0.87 avg300=0.22 total=9152313\n"
      "full avg10=0.40 avg60=0.21 avg300=0.05 total=2871011\n");
  ASSERT_TRUE(s);
  EXPECT_DOUBLE_EQ(s->some.avg10, 1.53);
  EXPECT_DOUBLE_EQ(s->some.avg60, 0.87);
  EXPECT_DOUBLE_EQ(s->some.avg300, 0.22);
  EXPECT_EQ(s->some.total_us, 9152313u);
  ASSERT_TRUE(s->full);
  EXPECT_DOUBLE_EQ(s->full->avg10, 0.40);
  EXPECT_EQ(s->full->total_us, 2871011u);

  // Idle system, as this host's /proc/pressure/memory reads at boot.
  auto idle = parse_psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
  ASSERT_TRUE(idle);
  EXPECT_EQ(idle->some.total_us, 0u);
  EXPECT_EQ(idle->full->avg300, 0.0);

  // Files without a "full" line (cpu on older kernels), a missing final
  // newline, and keys a newer kernel might add.
  auto cpu = parse_psi("some avg10=100.00 avg60=50.5 avg300=0.01 total=18446744073709551615");
  ASSERT_TRUE(cpu);
  EXPECT_FALSE(cpu->full);
  EXPECT_DOUBLE_EQ(cpu->some.avg10, 100.0);
  EXPECT_EQ(cpu->some.total_us, 18446744073709551615u);
  auto newer = parse_psi("some avg10=1.00 avg5=9.99 avg60=2.00 avg300=3.00 total=4\nextra line\n");
  ASSERT_TRUE(newer);
  EXPECT_DOUBLE_EQ(newer->some.avg60, 2.0);
}

TEST(PsiParse, MalformedText) {
  EXPECT_FALSE(parse_psi(""));
  EXPECT_FALSE(parse_psi("garbage\n"));
  EXPECT_FALSE(parse_psi("full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"));       // no "some"
  EXPECT_FALSE(parse_psi("some avg10=0.00 avg60=0.00 avg300=0.00\n"));               // no total
  EXPECT_FALSE(parse_psi("some avg10=0.00 avg60=0.00 total=0\n"));                   // no avg300
  EXPECT_FALSE(parse_psi("some avg10=x avg60=0.00 avg300=0.00 total=0\n"));          // not a number
  EXPECT_FALSE(parse_psi("some avg10=1.0 avg60=0.00 avg300=0.00 total=12ab\n"));     // trailing junk
  EXPECT_FALSE(parse_psi("some avg10=-1.0 avg60=0.00 avg300=0.00 total=1\n"));       // negative
  EXPECT_FALSE(parse_psi("some avg10=1.0 avg60=0.00 avg300=0.00 total=-1\n"));
  EXPECT_FALSE(parse_psi("some avg10=nan avg60=0.00 avg300=0.00 total=1\n"));
  EXPECT_FALSE(parse_psi("some avg10 0.00 avg60=0.00 avg300=0.00 total=0\n"));       // token without '='
  EXPECT_FALSE(parse_psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
                         "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"));       // twice
  EXPECT_FALSE(parse_psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
                         "full avg10=0.00 total=0\n"));                               // bad full
}

TEST(PsiTriggerArgs, RejectedBeforeTouchingTheFile) {
  using std::chrono::microseconds;
  std::string error;
  EXPECT_FALSE(PsiTrigger::create("/proc/pressure/memory", "most", microseconds(100000), microseconds(2000000), error));
  EXPECT_NE(error.find("\"some\" or \"full\""), std::string::npos) << error;
  EXPECT_NE(error.find("/proc/pressure/memory"), std::string::npos) << error;
  EXPECT_FALSE(PsiTrigger::create("/proc/pressure/memory", "some", microseconds(3000000), microseconds(2000000), error));
  EXPECT_NE(error.find("stall <= window"), std::string::npos) << error;
  EXPECT_FALSE(PsiTrigger::create("/proc/pressure/memory", "some", microseconds(0), microseconds(2000000), error));
  EXPECT_NE(error.find("0 < stall"), std::string::npos) << error;

  TempTree t;
  const std::string missing = t.root + "/gone/memory.pressure";
  EXPECT_FALSE(PsiTrigger::create(missing, "full", microseconds(100000), microseconds(2000000), error));
  EXPECT_NE(error.find("open " + missing + ": No such file or directory"), std::string::npos) << error;
}

TEST(PsiPaths, MemoryPressureFilePerVersion) {
  EXPECT_EQ(memory_pressure_file(CgroupFs{2, "/sys/fs/cgroup", "/"}, "/pod/c1"), "/sys/fs/cgroup/pod/c1/memory.pressure");
  EXPECT_EQ(memory_pressure_file(CgroupFs{2, "/sys/fs/cgroup", "/"}, "/"), "/sys/fs/cgroup/memory.pressure");
  // v1 memcgs have no pressure file of their own.
  EXPECT_EQ(memory_pressure_file(CgroupFs{1, "/sys/fs/cgroup/memory", "/"}, "/pod"), "/proc/pressure/memory");
}

TEST(V1Events, ErrorsNameThePath) {
  TempTree t;
  std::string error;
  // Not v1: refused without touching anything.
  EXPECT_FALSE(V1ThresholdEvent::create(CgroupFs{2, t.root, "/"}, "/a", 1 << 20, error));
  EXPECT_NE(error.find(t.root + "/a/memory.usage_in_bytes"), std::string::npos) << error;
  EXPECT_NE(error.find("cgroup v1"), std::string::npos) << error;
  EXPECT_FALSE(V1OomEvent::create(CgroupFs{2, t.root, "/"}, "/a", error));
  EXPECT_NE(error.find(t.root + "/a/memory.oom_control"), std::string::npos) << error;

  // A v1 cgroup that does not exist.
  EXPECT_FALSE(V1ThresholdEvent::create(CgroupFs{1, t.root, "/"}, "/gone", 1 << 20, error));
  EXPECT_NE(error.find("open " + t.root + "/gone/memory.usage_in_bytes: No such file or directory"),
            std::string::npos)
      << error;
  EXPECT_FALSE(V1OomEvent::create(CgroupFs{1, t.root, "/"}, "/gone", error));
  EXPECT_NE(error.find("open " + t.root + "/gone/memory.oom_control: No such file or directory"), std::string::npos)
      << error;

  // The target file exists but cgroup.event_control does not.
  t.write("half/memory.oom_control", "oom_kill_disable 0\n");
  EXPECT_FALSE(V1OomEvent::create(CgroupFs{1, t.root, "/"}, "/half", error));
  EXPECT_NE(error.find("open " + t.root + "/half/cgroup.event_control"), std::string::npos) << error;
}
