#include "capture/oom_victim.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace oomsnap {

bool become_first_oom_victim(std::string& why) {
  const int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    why = std::string("cannot open /proc/self/oom_score_adj: ") + std::strerror(errno);
    return false;
  }
  static constexpr char kHighest[] = "1000";
  const ssize_t n = ::write(fd, kHighest, sizeof kHighest - 1);
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(sizeof kHighest - 1)) {
    why = std::string("cannot write 1000 to /proc/self/oom_score_adj: ") + (n < 0 ? std::strerror(err) : "short write");
    return false;
  }
  return true;
}

}  // namespace oomsnap
