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
//                 files through Target::open_in_root under the sandbox and
//                 aborts (SIGABRT) unless each gives what it must
//   hook-vmread   process_vm_readv of its parent (the agent): SIGSYS
//   hook-spew     writes 4 MiB of escapes and forged log lines to stderr,
//                 then captures as usual: the parent logs at most its cap
#include <fcntl.h>
#include <linux/openat2.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "capture/capture_child.h"
#include "core/collector.h"
#include "core/proc_info.h"

namespace {

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "capture hook: %s\n", why.c_str());
  std::abort();
}

// What open_in_root gives for `path`: the file's text, or "" (no file).
std::string read_in_root(const oomsnap::Target& t, const char* path) {
  const int fd = t.open_in_root(path);
  if (fd < 0) return "";
  std::string out;
  char buf[256];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

void check_open_in_root(pid_t pid) {
  std::string err;
  auto t = oomsnap::Target::open(pid, err);
  if (!t) fail("Target::open: " + err);
  if (read_in_root(*t, "/lib/libreal.so") != "container library") fail("/lib/libreal.so not opened");
  if (read_in_root(*t, "/lib/librel.so") != "container library") fail("/lib/librel.so not opened");
  if (read_in_root(*t, "/lib/libabs.so") != "container shadow") fail("/lib/libabs.so not the container's /etc/shadow");
  for (const char* refused : {"/lib/libfifo.so", "/lib/libdir.so", "/lib/libnull.so", "/lib/libhost.so"}) {
    const int fd = t->open_in_root(refused);
    if (fd >= 0) fail(std::string(refused) + " opened");
  }
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

void misbehave(const oomsnap::CaptureRequest& req) {
  auto id = oomsnap::read_identity(req.pid);
  if (!id) return;
  const std::string& c = id->comm;
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
  } else if (c == "hook-inroot") {
    check_open_in_root(req.pid);
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
  return oomsnap::run_capture_child(args, misbehave);
}
