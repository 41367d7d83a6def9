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

// The two opens openat2 is asked for, at [0] and [1] of a sealed page once
// seal_open_hows has run (the capture process's filter allows no other).
// [0] a path handle: O_PATH opens nothing (a FIFO does not wait for a
//     writer, no device's open runs), reopened after fstat says regular.
// [1] a directory to read: O_DIRECTORY fails with ENOTDIR before the open
//     of anything else runs, so it needs no handle first; O_NOFOLLOW, as a
//     walk of a tree must not follow a symlink swapped in for a directory.
constexpr open_how kHows[2] = {
    {.flags = O_PATH | O_CLOEXEC, .mode = 0, .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS},
    {.flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
     .mode = 0,
     .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS},
};

std::atomic<const open_how*> g_sealed{nullptr};

const open_how* hows() {
  const open_how* sealed = g_sealed.load(std::memory_order_acquire);
  return sealed ? sealed : kHows;
}

// Takes the O_PATH fd `pfd` (closes it): a read-only fd of the same inode if
// it is a regular file, else -1 (EINVAL).
int reopen_if_regular(int pfd) {
  struct stat st {};
  if (::fstat(pfd, &st) != 0) {
    const int err = errno;
    ::close(pfd);
    errno = err;
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(pfd);
    errno = EINVAL;
    return -1;
  }
  char self[48];
  std::snprintf(self, sizeof self, "/proc/self/fd/%d", pfd);
  const int fd = ::open(self, O_RDONLY | O_NOCTTY | O_CLOEXEC);
  const int err = errno;
  ::close(pfd);
  errno = err;
  return fd;
}

}  // namespace

int open_regular_in_root(int root_fd, const std::string& path) {
  const long pfd = ::syscall(SYS_openat2, root_fd, path.c_str(), &hows()[0], sizeof(open_how));
  if (pfd < 0) return -1;
  return reopen_if_regular(static_cast<int>(pfd));
}

int open_directory_in_root(int root_fd, const std::string& path) {
  return static_cast<int>(::syscall(SYS_openat2, root_fd, path.c_str(), &hows()[1], sizeof(open_how)));
}

int open_regular_file(const std::string& path) {
  const int pfd = ::open(path.c_str(), O_PATH | O_CLOEXEC);
  if (pfd < 0) return -1;
  return reopen_if_regular(pfd);
}

int open_proc_root(pid_t pid) {
  const std::string root = "/proc/" + std::to_string(pid) + "/root";
  // O_PATH: a handle for openat2's RESOLVE_IN_ROOT only, nothing is read
  // through it; openat2 refuses a dirfd that is not a directory (ENOTDIR).
  return ::open(root.c_str(), O_PATH | O_CLOEXEC);
}

const SealedOpenHows* seal_open_hows() {
  static std::mutex mu;
  static bool tried = false;
  std::lock_guard<std::mutex> l(mu);
  // Tried once, whatever the answer: the capture process asks again under its
  // first seccomp filter (for the later ones), which refuses
  // mseal(2); a kernel without mseal (before 6.10) must not be
  // asked twice.
  static SealedOpenHows sealed{};
  if (tried) return sealed.path_handle ? &sealed : nullptr;
  tried = true;
  const long page = ::sysconf(_SC_PAGESIZE);
  const size_t len = page > 0 ? static_cast<size_t>(page) : 4096;
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  std::memcpy(p, kHows, sizeof kHows);
  if (::mprotect(p, len, PROT_READ) != 0 || ::syscall(SYS_mseal, p, len, 0) != 0) {
    const int err = errno;
    ::munmap(p, len);
    errno = err;
    return nullptr;
  }
  const auto* in_page = static_cast<const open_how*>(p);
  g_sealed.store(in_page, std::memory_order_release);
  sealed = {&in_page[0], &in_page[1]};
  return &sealed;
}

size_t open_how_size() { return sizeof(open_how); }

}  // namespace oomsnap
