#include "core/proc_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>

namespace oomsnap {
namespace {

struct FileSpec {
  const char* leaf;
  int flags;
};

constexpr std::array<FileSpec, static_cast<size_t>(ProcFile::kCount)> kSpecs = {{
    {"stat", O_RDONLY},
    {"status", O_RDONLY},
    {"maps", O_RDONLY},
    {"smaps", O_RDONLY},
    {"pagemap", O_RDONLY},
    {"mountinfo", O_RDONLY},
    {"exe", O_RDONLY},
    {"root", O_PATH | O_DIRECTORY},
}};

}  // namespace

std::string ProcFiles::path(ProcFile f) const {
  return "/proc/" + std::to_string(pid_) + "/" + kSpecs[static_cast<size_t>(f)].leaf;
}

int ProcFiles::fd(ProcFile f) const {
  UniqueFd& slot = fds_[static_cast<size_t>(f)];
  if (slot.get() < 0) {
    if (pid_ <= 0) {
      errno = ESRCH;
      return -1;
    }
    slot.reset(::open(path(f).c_str(), kSpecs[static_cast<size_t>(f)].flags | O_CLOEXEC));
  }
  return slot.get();
}

void ProcFiles::open_all() const {
  for (size_t i = 0; i < kFiles; ++i) fd(static_cast<ProcFile>(i));
}

int ProcFiles::fd_at_start(ProcFile f) const {
  const int d = fd(f);
  if (d >= 0 && ::lseek(d, 0, SEEK_SET) != 0) return -1;
  return d;
}

bool ProcFiles::read(ProcFile f, std::string& out) const {
  bool cut = false;
  return read(f, out, std::numeric_limits<size_t>::max(), std::chrono::steady_clock::time_point::max(), cut);
}

bool ProcFiles::read(ProcFile f, std::string& out, size_t max_bytes, std::chrono::steady_clock::time_point deadline,
                     bool& cut) const {
  out.clear();
  cut = false;
  const int d = fd_at_start(f);
  return d >= 0 && read_fd_text(d, out, max_bytes, deadline, cut);
}

bool read_fd_text(int fd, std::string& out, size_t max_bytes, std::chrono::steady_clock::time_point deadline,
                  bool& cut) {
  cut = false;
  out.clear();
  // In chunks, so that a /proc file the kernel writes as it goes (smaps) is
  // stopped at the bound or the deadline, not read whole first.
  char buf[64 * 1024];
  for (;;) {
    if (out.size() >= max_bytes || std::chrono::steady_clock::now() >= deadline) {
      char probe;
      ssize_t n;
      while ((n = ::read(fd, &probe, 1)) < 0 && errno == EINTR) {
      }
      cut = n > 0;
      return true;
    }
    const ssize_t n = ::read(fd, buf, std::min(sizeof buf, max_bytes - out.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    out.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace oomsnap
