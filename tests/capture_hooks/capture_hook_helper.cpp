// A capture-process binary for tests only (never installed): the real
// capture child, plus misbehaviour chosen by the target's comm, so tests can
// make a capture process crash, hog memory, hang or answer garbage and check
// that the agent and the CLI report it and carry on. A target is given such a
// comm by starting it through a symlink of that name.
//   hook-segv     SIGSEGV            hook-abort    abort() (SIGABRT)
//   hook-hog      allocate and touch memory until the cap stops it
//   hook-stop     SIGSTOP itself (its watchdog cannot run: the hard kill must)
//   hook-garbage  a result that is not a frame      hook-huge  a result over the cap
//   hook-syscall  a system call outside the allow-list (SIGSYS)
//   hook-openat2  openat2 with flags of its own (write access): SIGSYS
//   hook-inroot   a chrooted target (tests/common/hostile_root.h): opens its
//                 files by path in its root (base/safe_open.h) under the
//                 first two filters, before the target is open, and aborts
//                 (SIGABRT) unless each gives what it must
//   hook-escape   once confined, tries every way out of the target's root
//                 that fails without a kill (paths, magic links, ".." from
//                 its root): aborts if one opens, else captures as usual
//   hook-cwd      once confined, opens a directory by the working
//                 directory (the agent's): SIGSYS
//   hook-handle   once confined, opens a file in the target's root through
//                 an O_PATH handle (its reopen is by path): SIGSYS
//   hook-vmread   process_vm_readv of its parent (the agent): SIGSYS
//   hook-spew     writes 4 MiB of escapes and forged log lines to stderr,
//                 then captures as usual: the parent logs at most its cap
#include <fcntl.h>
#include <linux/openat2.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/safe_open.h"
#include "capture/capture_child.h"
#include "core/collector.h"
#include "core/proc_info.h"

namespace {

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "capture hook: %s\n", why.c_str());
  std::abort();
}

// What open_regular_in_root gives for `path`: the file's text, or "" (no file).
std::string read_in_root(int root, const char* path) {
  const int fd = oomsnap::open_regular_in_root(root, path);
  if (fd < 0) return "";
  std::string out;
  char buf[256];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

void check_open_in_root(pid_t pid) {
  const int root = oomsnap::open_proc_root(pid);
  if (root < 0) fail("cannot open the target's root");
  if (read_in_root(root, "/lib/libreal.so") != "container library") fail("/lib/libreal.so not opened");
  if (read_in_root(root, "/lib/librel.so") != "container library") fail("/lib/librel.so not opened");
  if (read_in_root(root, "/lib/libabs.so") != "container shadow") fail("/lib/libabs.so not the container's /etc/shadow");
  for (const char* refused : {"/lib/libfifo.so", "/lib/libdir.so", "/lib/libnull.so", "/lib/libhost.so"}) {
    const int fd = oomsnap::open_regular_in_root(root, refused);
    if (fd >= 0) fail(std::string(refused) + " opened");
  }
  if (oomsnap::open_directory_in_root(root, "/lib/libdir.so") < 0) fail("/lib/libdir.so not opened as a directory");
  ::close(root);
}

// Once confined: each must be refused (EACCES, the confinement filter's
// answer to an open by path), and ".." from the target's root must stay in
// it.
void try_to_escape(const oomsnap::Target* t) {
  if (!t) fail("the target was not opened");
  const int root = t->proc().fd(oomsnap::ProcFile::kRoot);
  char exe_link[64];
  std::snprintf(exe_link, sizeof exe_link, "/proc/self/fd/%d", t->exe_fd());
  for (const char* path : {"/proc/1/root/etc/hostname", "/etc/hostname", "/proc/self/root/etc/hostname",
                           static_cast<const char*>(exe_link)}) {
    errno = 0;
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0 || errno != EACCES) fail(std::string("open ") + path + ": " + std::strerror(errno));
  }
  errno = 0;
  if (::openat(root, "etc/shadow", O_RDONLY | O_CLOEXEC) >= 0 || errno != EACCES)
    fail(std::string("openat in the target's root: ") + std::strerror(errno));
  // The one open left, a directory inside a directory fd: ".." stops at the
  // target's root.
  const int up = oomsnap::open_directory_in_root(root, "../../../..");
  struct stat a {}, b {};
  if (up < 0 || ::fstat(up, &a) != 0 || ::fstat(root, &b) != 0) fail("the target's root not opened as a directory");
  if (a.st_ino != b.st_ino || a.st_dev != b.st_dev) fail("\"..\" from the target's root left it");
  ::close(up);
}

void read_parent() {
  char buf[64];
  iovec local{buf, sizeof buf};
  // Any address: the filter decides on the pid alone. Without it the call
  // returns (data, or EFAULT) and the hook aborts instead of dying of SIGSYS.
  iovec remote{buf, sizeof buf};
  const ssize_t n = process_vm_readv(getppid(), &local, 1, &remote, 1, 0);
  fail("process_vm_readv of the parent returned " + std::to_string(n));
}

void spew() {
  std::string chunk = "\x1b[31m[error] forged agent line\r\n";
  while (chunk.size() < 64 * 1024) chunk += chunk;
  for (size_t sent = 0; sent < (4u << 20);) {
    const ssize_t n = write(STDERR_FILENO, chunk.data(), chunk.size());
    if (n <= 0) fail("write to stderr failed");
    sent += static_cast<size_t>(n);
  }
}

std::string comm_of(pid_t pid) {
  auto id = oomsnap::read_identity(pid);
  return id ? id->comm : "";
}

void before_target_open(const oomsnap::CaptureRequest& req) {
  if (comm_of(req.pid) == "hook-inroot") check_open_in_root(req.pid);
}

void misbehave(const oomsnap::CaptureRequest&, oomsnap::Target* t) {
  if (!t) return;
  const std::string& c = t->identity().comm;
  if (c == "hook-segv") {
    volatile int* p = nullptr;
    *p = 1;
  } else if (c == "hook-abort") {
    std::abort();
  } else if (c == "hook-hog") {
    std::vector<char*> keep;
    for (;;) {
      char* b = new char[16 << 20];
      std::memset(b, 0x5a, 16 << 20);
      keep.push_back(b);
    }
  } else if (c == "hook-stop") {
    raise(SIGSTOP);
  } else if (c == "hook-garbage") {
    const char junk[] = "OOMSNAPR\xff\xff\xff\x7f garbage that is not a result";
    [[maybe_unused]] auto n = write(oomsnap::kCaptureResultFd, junk, sizeof junk);
    _exit(0);
  } else if (c == "hook-huge") {
    std::string big(1 << 20, 'x');
    for (int i = 0; i < 256; ++i)
      if (write(oomsnap::kCaptureResultFd, big.data(), big.size()) < 0) break;
    _exit(0);
  } else if (c == "hook-syscall") {
    [[maybe_unused]] int s = socket(AF_INET, SOCK_STREAM, 0);
  } else if (c == "hook-openat2") {
    open_how how{};
    how.flags = O_WRONLY | O_CREAT | O_CLOEXEC;
    how.mode = 0600;
    [[maybe_unused]] long fd = syscall(SYS_openat2, AT_FDCWD, "/tmp/oomsnap-hook-openat2", &how, sizeof how);
  } else if (c == "hook-escape") {
    try_to_escape(t);
  } else if (c == "hook-cwd") {
    [[maybe_unused]] int fd = oomsnap::open_directory_in_root(AT_FDCWD, "etc");
    fail("a directory opened by the working directory: " + std::to_string(fd));
  } else if (c == "hook-handle") {
    [[maybe_unused]] int fd = oomsnap::open_regular_in_root(t->proc().fd(oomsnap::ProcFile::kRoot), "/etc/shadow");
    fail("a file opened in the target's root through a handle: " + std::to_string(fd));
  } else if (c == "hook-vmread") {
    read_parent();
  } else if (c == "hook-spew") {
    spew();
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] != oomsnap::kCaptureChildCommand) return 2;
  args.erase(args.begin());
  return oomsnap::run_capture_child(args, {.target_named = before_target_open, .confined = misbehave});
}
