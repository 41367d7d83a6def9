// base/safe_open.h against a directory laid out as a hostile container root
// (tests/common/hostile_root.h): symlinks that point at the host, a FIFO, a
// directory and a device where a library should be. Every open runs in a
// forked child with a timeout, so an open that blocks fails instead of hanging.
#include "base/safe_open.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "hostile_root.h"

using namespace std::chrono_literals;
using oomsnap_test::HostileRoot;
using oomsnap_test::Opened;
using oomsnap_test::run_open;

namespace {

// open_fn(root fd of r, path), in a child (run_open).
Opened opened_in(const HostileRoot& r, const std::string& path, int (*open_fn)(int, const std::string&)) {
  const std::string dir = r.dir();
  return run_open([dir, path, open_fn] {
    const int root_fd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root_fd < 0) return -1;
    return open_fn(root_fd, path);
  });
}

Opened in_root(const HostileRoot& r, const std::string& path) {
  return opened_in(r, path, oomsnap::open_regular_in_root);
}

Opened dir_in_root(const HostileRoot& r, const std::string& path) {
  return opened_in(r, path, oomsnap::open_directory_in_root);
}

}  // namespace

TEST(SafeOpen, RegularFileAndSymlinksInsideTheRootAreOpened) {
  HostileRoot r;
  for (const char* p : {"/lib/libreal.so", "lib/libreal.so", "/lib/librel.so", "/lib/libup.so",
                        "/lib/../lib/libreal.so", "/../../lib/libreal.so"}) {
    SCOPED_TRACE(p);
    Opened o = in_root(r, p);
    ASSERT_FALSE(o.timed_out);
    ASSERT_TRUE(o.ok) << std::strerror(o.err);
    EXPECT_TRUE(o.regular);
    EXPECT_EQ(o.content, HostileRoot::kLibrary);
  }
}

TEST(SafeOpen, AbsoluteSymlinkResolvesInTheContainerNotOnTheHost) {
  HostileRoot r;
  Opened o = in_root(r, "/lib/libabs.so");
  ASSERT_FALSE(o.timed_out);
  ASSERT_TRUE(o.ok) << std::strerror(o.err);
  // Never the host's /etc/shadow (not printed if it was).
  EXPECT_TRUE(o.content == HostileRoot::kShadow) << "read another file than the container's /etc/shadow";

  // A link to a host path that does not exist in the container: nothing.
  Opened h = in_root(r, "/lib/libhost.so");
  ASSERT_FALSE(h.timed_out);
  EXPECT_FALSE(h.ok) << h.content;
  EXPECT_EQ(h.err, ENOENT);
}

TEST(SafeOpen, FifoIsRefusedWithoutBlocking) {
  HostileRoot r;
  for (const char* p : {"/lib/libfifo.so", "/lib/libtofifo.so"}) {
    SCOPED_TRACE(p);
    const auto t0 = std::chrono::steady_clock::now();
    Opened o = in_root(r, p);
    EXPECT_FALSE(o.timed_out) << "the open blocked on the FIFO";
    EXPECT_FALSE(o.ok);
    EXPECT_EQ(o.err, EINVAL);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  }
}

TEST(SafeOpen, DirectoryAndDeviceAreRefused) {
  HostileRoot r;
  for (const char* p : {"/lib/libdir.so", "/lib/libnull.so", "/lib", "/"}) {
    SCOPED_TRACE(p);
    Opened o = in_root(r, p);
    ASSERT_FALSE(o.timed_out);
    EXPECT_FALSE(o.ok);
    EXPECT_EQ(o.err, EINVAL);
  }
}

// A directory to walk is opened in one openat2, with no handle first: the
// kernel refuses anything that is not a directory before its open runs (a
// FIFO must not block, a device's open must not run), and a symlink as the
// last component; ".." and absolute paths stay inside the root.
TEST(SafeOpen, DirectoryInRootIsOpenedAndNothingElse) {
  HostileRoot r;
  for (const char* p : {"/lib/libdir.so", "lib", "/", "/../../lib/libdir.so"}) {
    SCOPED_TRACE(p);
    Opened o = dir_in_root(r, p);
    ASSERT_FALSE(o.timed_out);
    EXPECT_TRUE(o.ok) << std::strerror(o.err);
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (const char* p : {"/lib/libfifo.so", "/lib/libtofifo.so", "/lib/libnull.so", "/lib/libreal.so"}) {
    SCOPED_TRACE(p);
    Opened o = dir_in_root(r, p);
    ASSERT_FALSE(o.timed_out);
    EXPECT_FALSE(o.ok);
    EXPECT_TRUE(o.err == ENOTDIR || o.err == ELOOP) << std::strerror(o.err);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  // The container's /etc through ".." past its root, never the host's.
  const std::string dir = r.dir();
  Opened shadow = run_open([dir] {
    const int root_fd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    const int etc = oomsnap::open_directory_in_root(root_fd, "../../../etc");
    return etc < 0 ? -1 : oomsnap::open_regular_in_root(etc, "shadow");
  });
  ASSERT_TRUE(shadow.ok) << std::strerror(shadow.err);
  EXPECT_TRUE(shadow.content == HostileRoot::kShadow) << "read another file than the container's /etc/shadow";
}

// /proc magic links are not followed, even from the host's own root; the
// kernel's links opened on purpose (open_regular_file, as for
// /proc/PID/map_files) are.
TEST(SafeOpen, MagicLinksAreRefusedInRoot) {
  Opened o = run_open([] {
    const int root_fd = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    return oomsnap::open_regular_in_root(root_fd, "/proc/self/exe");
  });
  ASSERT_FALSE(o.timed_out);
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.err, ELOOP) << std::strerror(o.err);  // RESOLVE_NO_MAGICLINKS
  Opened exe = run_open([] { return oomsnap::open_regular_file("/proc/self/exe"); });
  ASSERT_TRUE(exe.ok) << std::strerror(exe.err);
  EXPECT_TRUE(exe.regular);
  EXPECT_EQ(exe.content.substr(0, 4), "\x7f" "ELF");
}

TEST(SafeOpen, OpenRegularFileRefusesFifoDirectoryAndDevice) {
  HostileRoot r;
  for (const char* p : {"/lib/libfifo.so", "/lib/libdir.so", "/lib/libnull.so"}) {
    SCOPED_TRACE(p);
    const std::string path = r.dir() + p;
    Opened o = run_open([path] { return oomsnap::open_regular_file(path); });
    EXPECT_FALSE(o.timed_out);
    EXPECT_FALSE(o.ok);
    EXPECT_EQ(o.err, EINVAL);
  }
  const std::string real = r.dir() + "/lib/librel.so";
  Opened o = run_open([real] { return oomsnap::open_regular_file(real); });
  ASSERT_TRUE(o.ok) << std::strerror(o.err);
  EXPECT_EQ(o.content, HostileRoot::kLibrary);
}

TEST(SafeOpen, ProcRootOfThisProcess) {
  const int root = oomsnap::open_proc_root(getpid());
  ASSERT_GE(root, 0) << std::strerror(errno);
  struct stat a {}, b {};
  ASSERT_EQ(::fstat(root, &a), 0);
  ASSERT_EQ(::stat("/", &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(a.st_dev, b.st_dev);
  ::close(root);
}

// The sealed open_hows (for the capture process's seccomp filter): the same
// addresses on every call, read-only and immovable, and open_regular_in_root
// and open_directory_in_root go on working with them. In a child: sealing
// lasts for the process.
TEST(SafeOpen, SealedOpenHowCannotBeChangedOrMoved) {
  Opened o = run_open([]() -> int {
    const oomsnap::SealedOpenHows* how = oomsnap::seal_open_hows();
    if (!how) return errno = ENOSYS, -1;  // kernel without mseal
    if (oomsnap::seal_open_hows() != how || !how->directory) return errno = EFAULT, -1;
    void* page = const_cast<void*>(how->path_handle);
    const size_t len = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    if (::mprotect(page, len, PROT_READ | PROT_WRITE) == 0) return errno = EACCES, -1;
    if (::munmap(page, len) == 0) return errno = EACCES, -1;
    if (::mmap(page, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED)
      return errno = EACCES, -1;
    const int root_fd = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    const int etc = oomsnap::open_directory_in_root(root_fd, "/etc");
    if (etc < 0) return -1;
    return oomsnap::open_regular_in_root(etc, "passwd");
  });
  ASSERT_FALSE(o.timed_out);
  if (!o.ok && o.err == ENOSYS) GTEST_SKIP() << "no mseal on this kernel";
  ASSERT_TRUE(o.ok) << std::strerror(o.err);
  EXPECT_TRUE(o.regular);
  EXPECT_NE(o.content.find("root:"), std::string::npos);
}
