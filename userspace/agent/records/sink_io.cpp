#include "agent/records/sink_io.h"

#include <poll.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace oomsnap::sink_io {

bool prepare_line(const std::string& json_line, std::string& line, std::string& error) {
  line = json_line;
  if (!line.empty() && line.back() == '\n') line.pop_back();
  if (line.empty()) {
    error = "empty record; not written";
    return false;
  }
  if (line.find('\n') != std::string::npos) {
    error = "record contains a raw newline and would span several lines; not written";
    return false;
  }
  line.push_back('\n');
  return true;
}

bool prepare_or_reject(const std::string& json_line, const std::string& sink, std::string& line, WriteResult& r) {
  if (prepare_line(json_line, line, r.error)) return true;
  r.status = WriteStatus::rejected;
  r.error = sink + ": " + r.error;
  return false;
}

Clock::time_point earliest(Clock::time_point own, const SinkDeadline& deadline) {
  return std::min(own, deadline.get());
}

long long ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// Waits until `fd` has room (or an error/hangup a write will report), in
// slices of at most 10 ms so a deadline brought forward by another thread is
// seen. False when min(own, deadline) passed first.
bool wait_writable(int fd, Clock::time_point own, const SinkDeadline& deadline) {
  for (;;) {
    const auto now = Clock::now();
    const auto end = earliest(own, deadline);
    if (now >= end) return false;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(end - now);
    const int slice = static_cast<int>(std::clamp<long long>(left.count(), 1, 10));
    pollfd p{fd, POLLOUT, 0};
    const int r = ::poll(&p, 1, slice);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return true;  // let the write say what is wrong
  }
}

const char* file_kind(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISREG(mode)) return "a regular file";
  return "not a regular file";
}

std::string octal_mode(mode_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

}  // namespace oomsnap::sink_io
