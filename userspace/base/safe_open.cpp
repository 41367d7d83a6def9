#include "base/safe_open.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

#ifndef SYS_openat2
#define SYS_openat2 437
#endif
#ifndef SYS_mseal
#define SYS_mseal 462  // the same number on every architecture
#endif

namespace oomsnap {
namespace {

constexpr open_how kHow = {
    .flags = O_PATH | O_CLOEXEC,
    .mode = 0,
    .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
};

std::atomic<const open_how*> g_sealed{nullptr};

// Takes the O_PATH fd `pfd` (closes it): a read-only fd of the same inode if
// it is a regular file (a directory when `directory`), else -1 (EINVAL, or
// ENOTDIR).
int reopen_if(int pfd, bool directory) {
  struct stat st {};
  if (::fstat(pfd, &st) != 0) {
    const int err = errno;
    ::close(pfd);
    errno = err;
    return -1;
  }
  if (directory ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
    ::close(pfd);
    errno = directory ? ENOTDIR : EINVAL;
    return -1;
  }
  char self[48];
  std::snprintf(self, sizeof self, "/proc/self/fd/%d", pfd);
  const int fd = ::open(self, (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY | O_NOCTTY) | O_CLOEXEC);
  const int err = errno;
  ::close(pfd);
  errno = err;
  return fd;
}

int open_in_root(int root_fd, const std::string& path, bool directory) {
  const open_how* how = g_sealed.load(std::memory_order_acquire);
  if (!how) how = &kHow;
  const long pfd = ::syscall(SYS_openat2, root_fd, path.c_str(), how, sizeof(open_how));
  if (pfd < 0) return -1;
  return reopen_if(static_cast<int>(pfd), directory);
}

}  // namespace

int open_regular_in_root(int root_fd, const std::string& path) { return open_in_root(root_fd, path, false); }

int open_directory_in_root(int root_fd, const std::string& path) { return open_in_root(root_fd, path, true); }

int open_regular_file(const std::string& path) {
  const int pfd = ::open(path.c_str(), O_PATH | O_CLOEXEC);
  if (pfd < 0) return -1;
  return reopen_if(pfd, false);
}

int open_proc_root(pid_t pid) {
  const std::string root = "/proc/" + std::to_string(pid) + "/root";
  // O_PATH: a handle for openat2's RESOLVE_IN_ROOT only, nothing is read
  // through it; openat2 refuses a dirfd that is not a directory (ENOTDIR).
  return ::open(root.c_str(), O_PATH | O_CLOEXEC);
}

const void* seal_open_how() {
  static std::mutex mu;
  static bool tried = false;
  std::lock_guard<std::mutex> l(mu);
  // Tried once, whatever the answer: the capture process asks again under its
  // first seccomp filter (for the second, pid-pinned one), which refuses
  // mseal(2); a kernel without mseal (before 6.10) must not be
  // asked twice.
  if (tried) return g_sealed.load();
  tried = true;
  const long page = ::sysconf(_SC_PAGESIZE);
  const size_t len = page > 0 ? static_cast<size_t>(page) : 4096;
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  std::memcpy(p, &kHow, sizeof kHow);
  if (::mprotect(p, len, PROT_READ) != 0 || ::syscall(SYS_mseal, p, len, 0) != 0) {
    const int err = errno;
    ::munmap(p, len);
    errno = err;
    return nullptr;
  }
  g_sealed.store(static_cast<const open_how*>(p), std::memory_order_release);
  return p;
}

size_t open_how_size() { return sizeof(open_how); }

}  // namespace oomsnap
