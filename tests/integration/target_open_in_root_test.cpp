// Opening by path in a target's root, and Target::open's fallback for its
// mapped files (open_mapped_file), against a real
// process chrooted into a hostile root (tests/common/hostile_root.h): the
// target's absolute symlinks must resolve in its root, never the agent's, and
// a FIFO, directory or device planted where a library should be must be
// refused at once. Each open runs in a forked child with a timeout, so an
// open that blocks fails the test instead of hanging it. Then the same in the
// capture process (seccomp: openat2 allowed with the sealed arguments only),
// and a real caller (the CPython collector finding a shared libpython) with
// /proc/PID/map_files out of reach, so the fallback is what finds it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/capability.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "base/safe_open.h"
#include "capture/capture_sandbox.h"
#include "core/collector.h"
#include "chrooted.h"
#include "hostile_root.h"
#include "python/python_collector.h"
#include "test_process.h"

using namespace std::chrono_literals;
using oomsnap::Target;
using oomsnap_test::Chrooted;
using oomsnap_test::HostileRoot;
using oomsnap_test::Opened;
using oomsnap_test::run_open;

namespace {

std::unique_ptr<Target> open_target(pid_t pid) {
  std::string err;
  auto t = Target::open(pid, err);
  EXPECT_TRUE(t) << err;
  return t;
}

int root_of(const Target& t) { return t.proc().fd(oomsnap::ProcFile::kRoot); }

Opened in_root(const Target& t, const std::string& path) {
  return run_open([&t, path] { return oomsnap::open_regular_in_root(root_of(t), path); });
}

// A mapping /proc/PID/map_files cannot open (no such range): Target::open
// falls back to the path in the target's root.
Opened via_mapping(const Target& t, const std::string& path) {
  oomsnap::Mapping m;
  m.start = 0x1000;
  m.end = 0x2000;
  m.inode = 1;
  m.path = path;
  return run_open([&t, m] { return oomsnap::open_mapped_file(t.pid(), root_of(t), m); });
}

}  // namespace

TEST(TargetOpenInRoot, FilesAndSymlinksInsideTheTargetsRootAreOpened) {
  HostileRoot r;
  Chrooted c(r.dir(), "inroot-target");
  auto t = open_target(c.pid());
  ASSERT_TRUE(t);
  for (const char* p : {"/lib/libreal.so", "/lib/librel.so", "/lib/libup.so"}) {
    SCOPED_TRACE(p);
    for (const Opened& o : {in_root(*t, p), via_mapping(*t, p)}) {
      ASSERT_FALSE(o.timed_out);
      ASSERT_TRUE(o.ok) << std::strerror(o.err);
      EXPECT_TRUE(o.regular);
      EXPECT_EQ(o.content, HostileRoot::kLibrary);
    }
  }
}

// lib/libabs.so -> /etc/shadow: the container's /etc/shadow, not the host's
// (through /proc/PID/root + path the kernel resolved it against the reader's
// own root).
TEST(TargetOpenInRoot, AbsoluteSymlinkStaysInTheTargetsRoot) {
  HostileRoot r;
  Chrooted c(r.dir(), "inroot-target");
  auto t = open_target(c.pid());
  ASSERT_TRUE(t);
  for (const Opened& o : {in_root(*t, "/lib/libabs.so"), via_mapping(*t, "/lib/libabs.so")}) {
    ASSERT_FALSE(o.timed_out);
    ASSERT_TRUE(o.ok) << std::strerror(o.err);
    // (What else was read is not printed: it may be the host's /etc/shadow.)
    EXPECT_TRUE(o.content == HostileRoot::kShadow) << "read another file than the container's /etc/shadow";
  }
  for (const Opened& o : {in_root(*t, "/lib/libhost.so"), via_mapping(*t, "/lib/libhost.so")}) {
    ASSERT_FALSE(o.timed_out);
    EXPECT_FALSE(o.ok) << "opened the host's " << r.host_only() << ": " << o.content;
  }
}

TEST(TargetOpenInRoot, FifoIsRefusedAtOnce) {
  HostileRoot r;
  Chrooted c(r.dir(), "inroot-target");
  auto t = open_target(c.pid());
  ASSERT_TRUE(t);
  for (const char* p : {"/lib/libfifo.so", "/lib/libtofifo.so"}) {
    SCOPED_TRACE(p);
    const auto t0 = std::chrono::steady_clock::now();
    for (const Opened& o : {in_root(*t, p), via_mapping(*t, p)}) {
      EXPECT_FALSE(o.timed_out) << "blocked opening the FIFO";
      EXPECT_FALSE(o.ok);
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  }
}

TEST(TargetOpenInRoot, DirectoryAndDeviceAreRefused) {
  HostileRoot r;
  Chrooted c(r.dir(), "inroot-target");
  auto t = open_target(c.pid());
  ASSERT_TRUE(t);
  for (const char* p : {"/lib/libdir.so", "/lib/libnull.so", "/"}) {
    SCOPED_TRACE(p);
    for (const Opened& o : {in_root(*t, p), via_mapping(*t, p)}) {
      ASSERT_FALSE(o.timed_out);
      EXPECT_FALSE(o.ok) << (o.regular ? "regular" : "not regular");
    }
  }
}

// The same opens inside the capture process, under its first two seccomp
// filters (the target not yet open) and its capabilities
// (tests/capture_hooks: hook-inroot aborts on any wrong answer, then the
// capture goes on as usual).
TEST(TargetOpenInRoot, InsideTheCaptureProcess) {
  HostileRoot r;
  Chrooted c(r.dir(), "hook-inroot");
  oomsnap::CaptureSandbox box(oomsnap::SandboxOptions{.helper_path = OOMSNAP_CAPTURE_HOOK_HELPER});
  oomsnap::CaptureOptions o;
  o.budget = 2000ms;
  std::string err;
  auto rec = box.capture(c.pid(), o, err);
  ASSERT_TRUE(rec) << err;
  EXPECT_TRUE(rec->process_failure.empty()) << rec->process_failure;
  EXPECT_EQ(rec->result.snapshot.status, oomsnap::SnapshotStatus::kUnavailable) << rec->result.snapshot.reason;
}

// openat2 takes its flags in a struct the filter cannot read: only the sealed
// one (O_PATH) is allowed, any other kills the capture process.
TEST(TargetOpenInRoot, CaptureProcessRefusesAnyOtherOpenat2) {
  const std::string planted = "/tmp/oomsnap-hook-openat2";
  ::unlink(planted.c_str());
  HostileRoot r;
  Chrooted c(r.dir(), "hook-openat2");
  oomsnap::CaptureSandbox box(oomsnap::SandboxOptions{.helper_path = OOMSNAP_CAPTURE_HOOK_HELPER});
  oomsnap::CaptureOptions o;
  o.budget = 2000ms;
  std::string err;
  auto rec = box.capture(c.pid(), o, err);
  ASSERT_TRUE(rec) << err;
  EXPECT_EQ(rec->result.snapshot.status, oomsnap::SnapshotStatus::kFailed);
  EXPECT_NE(rec->process_failure.find("SIGSYS"), std::string::npos) << rec->process_failure;
  EXPECT_NE(access(planted.c_str(), F_OK), 0) << "openat2 created " << planted;
  ::unlink(planted.c_str());
}

// A real caller on the fallback: the CPython collector finds the runtime in
// a program's shared libpython3.11 while /proc/PID/map_files is out of reach
// (CAP_CHECKPOINT_RESTORE and CAP_SYS_ADMIN dropped), so open_mapping must
// open the library through the target's root.
TEST(TargetOpenInRoot, PythonRuntimeInSharedLibpythonFoundThroughTheRoot) {
  oomsnap_test::Process py({OOMSNAP_PY_EMBED_HOST, "-c", "import time; print('ready', flush=True); time.sleep(600)"});
  ASSERT_NE(py.read_line(30s).find("ready"), std::string::npos);
  const pid_t pid = py.pid();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    cap_t caps = cap_get_proc();
    const cap_value_t drop[] = {CAP_SYS_ADMIN, static_cast<cap_value_t>(40) /* CAP_CHECKPOINT_RESTORE */};
    if (!caps || cap_set_flag(caps, CAP_EFFECTIVE, 2, drop, CAP_CLEAR) != 0 || cap_set_proc(caps) != 0) _exit(10);
    std::string err;
    auto t = Target::open(pid, err);
    if (!t) _exit(11);
    const oomsnap::Mapping* lib = nullptr;
    for (const auto& m : t->maps())
      if (m.path.find("libpython3.") != std::string::npos && m.offset == 0) lib = &m;
    if (!lib) _exit(12);
    char mf[96];
    std::snprintf(mf, sizeof mf, "/proc/%d/map_files/%llx-%llx", pid, static_cast<unsigned long long>(lib->start),
                  static_cast<unsigned long long>(lib->end));
    if (::open(mf, O_RDONLY | O_CLOEXEC) >= 0) _exit(13);  // map_files still reachable: not the fallback
    oomsnap::PythonCollector pc;
    _exit(pc.detect(*t) ? 0 : 14);
  }
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 600 && (done = waitpid(child, &status, WNOHANG)) == 0; ++i) std::this_thread::sleep_for(50ms);
  if (done == 0) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    FAIL() << "detection hung";
  }
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: caps, 11: Target::open, 12: no libpython mapping, "
                                       "13: map_files open, 14: runtime not found";
}
