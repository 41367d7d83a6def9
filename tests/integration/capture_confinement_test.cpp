// What a capture process taken over by a crafted target could still reach
// (issue 28, item 3), tried from inside it by tests/capture_hooks: another
// process's memory (seccomp pins process_vm_readv to the target: SIGSYS),
// the agent's log (its stderr is a pipe the parent caps and escapes), and
// any file outside the target's root (no file is opened by a path once the
// target is open). A benign capture, under the same filters, reads its
// target as before and logs nothing.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "capture/capture_sandbox.h"
#include "capture/child_stderr.h"
#include "chrooted.h"
#include "hostile_root.h"
#include "test_process.h"

using namespace std::chrono_literals;
using oomsnap::CaptureSandbox;
using oomsnap::SandboxOptions;
using oomsnap::SnapshotStatus;
using oomsnap_test::Chrooted;

namespace {

const std::string kGoFixture = std::string(OOMSNAP_FIXTURES) + "/go/1.26/default/heapfixture";

// A sandbox whose capture processes' log lines are kept for the test.
struct LoggedSandbox {
  explicit LoggedSandbox(const std::string& helper)
      : box(SandboxOptions{.helper_path = helper}, [this](const std::string& l) { lines.push_back(l); }) {}
  std::optional<oomsnap::CaptureRecord> capture(pid_t pid) {
    oomsnap::CaptureOptions o;
    o.budget = 2000ms;
    std::string err;
    auto rec = box.capture(pid, o, err);
    EXPECT_TRUE(rec) << err;
    return rec;
  }
  std::vector<std::string> lines;
  CaptureSandbox box;
};

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

}  // namespace

// hook-vmread calls process_vm_readv on its parent: the filter, pinned to the
// target's pid once the request named it, kills the capture process.
TEST(CaptureConfinement, ReadingTheParentsMemoryKillsTheCaptureProcess) {
  Chrooted target("/", "hook-vmread");
  LoggedSandbox s(OOMSNAP_CAPTURE_HOOK_HELPER);
  auto rec = s.capture(target.pid());
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->result.snapshot.status, SnapshotStatus::kFailed);
  EXPECT_NE(rec->process_failure.find("SIGSYS"), std::string::npos) << rec->process_failure << "\n" << joined(s.lines);
}

// hook-escape, in a target chrooted into a container-like root, tries the
// node's files once confined: /proc/1/root/..., /etc/hostname, its own
// /proc/self/fd magic links (a reopen of the target's exe), openat from the
// target's root fd: each gets EACCES (without the last filter each opens,
// and the hook aborts); ".." from the target's root stays in it. Then it
// captures as usual: nothing failed, nothing logged.
TEST(CaptureConfinement, NoFileOutsideTheTargetsRootCanBeOpened) {
  oomsnap_test::HostileRoot r;
  Chrooted target(r.dir(), "hook-escape");
  LoggedSandbox s(OOMSNAP_CAPTURE_HOOK_HELPER);
  auto rec = s.capture(target.pid());
  ASSERT_TRUE(rec);
  EXPECT_TRUE(rec->process_failure.empty()) << rec->process_failure << "\n" << joined(s.lines);
  EXPECT_EQ(rec->result.snapshot.status, SnapshotStatus::kUnavailable) << rec->result.snapshot.reason;
  EXPECT_TRUE(s.lines.empty()) << joined(s.lines);
}

// The two opens that would resolve outside the target's root if allowed
// once confined kill the capture process: a directory by the working
// directory (the agent's), and an O_PATH handle (whose reopen goes through
// /proc/self/fd by path).
TEST(CaptureConfinement, OpensThatCouldLeaveTheRootKillTheCaptureProcess) {
  for (const char* hook : {"hook-cwd", "hook-handle"}) {
    SCOPED_TRACE(hook);
    oomsnap_test::HostileRoot r;
    Chrooted target(r.dir(), hook);
    LoggedSandbox s(OOMSNAP_CAPTURE_HOOK_HELPER);
    auto rec = s.capture(target.pid());
    ASSERT_TRUE(rec);
    EXPECT_EQ(rec->result.snapshot.status, SnapshotStatus::kFailed);
    EXPECT_NE(rec->process_failure.find("SIGSYS"), std::string::npos) << rec->process_failure << "\n"
                                                                       << joined(s.lines);
  }
}

// hook-spew writes 4 MiB of terminal escapes and forged lines to its stderr,
// then captures as usual: the capture is not held up, and the log gets the
// first 4 KiB, escaped, each line naming the capture process, then the count
// of what was dropped.
TEST(CaptureConfinement, StderrReachesTheLogCappedAndEscaped) {
  Chrooted target("/", "hook-spew");
  LoggedSandbox s(OOMSNAP_CAPTURE_HOOK_HELPER);
  std::string err;
  ASSERT_TRUE(s.box.prestart(err)) << err;
  const pid_t helper = s.box.helper_pid();
  auto rec = s.capture(target.pid());
  ASSERT_TRUE(rec);
  EXPECT_TRUE(rec->process_failure.empty()) << rec->process_failure;
  ASSERT_FALSE(s.lines.empty());
  const std::string who = "capture process " + std::to_string(helper) + ": ";
  size_t bytes = 0;
  for (const auto& l : s.lines) {
    EXPECT_EQ(l.rfind(who, 0), 0u) << l;
    for (char c : l) ASSERT_TRUE(c >= 0x20 && c < 0x7f) << l;
    bytes += l.size();
  }
  // 4 KiB kept; escaping makes a byte at most 4 ("\x1b").
  EXPECT_LE(bytes, 4 * oomsnap::ChildStderr::kDefaultCap + s.lines.size() * (who.size() + 80));
  const size_t dropped = (4u << 20) - oomsnap::ChildStderr::kDefaultCap;
  EXPECT_NE(s.lines.back().find(std::to_string(dropped) + " more bytes of its stderr dropped"), std::string::npos)
      << s.lines.back();
}

// The real capture process on a Go program: confined, it still reads the
// heap (the executable through /proc/PID/exe, its mappings, its memory) and
// walks its tmpfs mounts into subdirectories (the one open left to it), and
// says nothing on its stderr.
TEST(CaptureConfinement, BenignCaptureReadsItsTargetAndLogsNothing) {
  char tmpl[] = "/dev/shm/oomsnap-confined-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, sub = dir + "/sub", file = sub + "/deep";
  ASSERT_EQ(mkdir(sub.c_str(), 0700), 0);
  {
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    const std::string mib(1 << 20, 'x');
    for (int i = 0; i < 8; ++i) ASSERT_EQ(::write(fd, mib.data(), mib.size()), static_cast<ssize_t>(mib.size()));
    ::close(fd);
  }
  oomsnap_test::Process go({kGoFixture, "-rate", "1"});
  ASSERT_NE(go.read_line(20s).find("\"ready\":true"), std::string::npos);
  LoggedSandbox s(OOMSNAP_BINARY);
  auto rec = s.capture(go.pid());
  ::unlink(file.c_str());
  ::rmdir(sub.c_str());
  ::rmdir(dir.c_str());
  ASSERT_TRUE(rec);
  EXPECT_TRUE(rec->process_failure.empty()) << rec->process_failure;
  EXPECT_EQ(rec->result.snapshot.status, SnapshotStatus::kComplete) << rec->result.snapshot.reason;
  EXPECT_TRUE(s.lines.empty()) << joined(s.lines);
  ASSERT_TRUE(rec->process_memory.breakdown);
  ASSERT_TRUE(rec->process_memory.breakdown->tmpfs);
  const auto& tmpfs = *rec->process_memory.breakdown->tmpfs;
  bool found = false;
  for (const auto& f : tmpfs.largest) found = found || f.path == file;
  EXPECT_TRUE(found) << file << " not among the tmpfs files (" << tmpfs.files << " files; " << tmpfs.reason << ")";
}
