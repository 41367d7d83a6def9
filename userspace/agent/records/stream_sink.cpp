// The stream sink: records to stdout (or any pipe, FIFO, terminal or socket),
// through a non-blocking description of its own, at most its timeout per record.
#include "agent/records/sink.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "agent/records/sink_io.h"
#include "base/text.h"
#include "base/unique_fd.h"

namespace oomsnap {
namespace {

using namespace sink_io;  // the helpers every sink shares

class StreamSink final : public RecordSink {
 public:
  StreamSink(int fd, std::string name, StreamSinkOptions options)
      : fd_(fd), name_(std::move(name)), timeout_(options.write_timeout) {
    struct stat st{};
    if (::fstat(fd_, &st) == 0) {
      if (S_ISSOCK(st.st_mode)) {
        kind_ = Kind::socket;
      } else if (S_ISFIFO(st.st_mode)) {
        kind_ = Kind::reopen;
        fifo_ = true;
      } else if (S_ISCHR(st.st_mode) && ::isatty(fd_)) {
        kind_ = Kind::reopen;
      }
    }
  }

  std::string name() const override { return name_; }

  WriteResult write_record(const std::string& json_line, const SinkDeadline& deadline) override {
    WriteResult r;
    std::string line;
    if (!prepare_or_reject(json_line, name_, line, r)) return r;
    const auto start = Clock::now();
    const auto own = start + timeout_;
    // The mutex is held until the whole line is out, so the retries below for
    // short writes can never let another thread's record in between.
    std::unique_lock<std::timed_mutex> lock(mu_, std::defer_lock);
    if (!lock.try_lock_until(earliest(own, deadline))) {
      r.error = where() + ": write: another thread's record is still being written; record not written";
      return r;
    }
    // An earlier write died mid-line: end that fragment first so this record
    // starts on its own line instead of being glued to the fragment.
    const size_t prefix = fragment_open_ ? 1 : 0;
    if (prefix) line.insert(line.begin(), '\n');

    // Pipes and terminals: a private non-blocking open file description, so
    // a full pipe says EAGAIN without touching the shared descriptor's flags.
    UniqueFd own_fd;
    int wfd = fd_;
    if (kind_ == Kind::reopen) {
      std::string why;
      if (open_private(own_fd, why)) {
        wfd = own_fd.get();
      } else if (why_fatal_ || !shared_is_nonblocking()) {
        return fail(0, prefix, line.size(), why, r);
      }
      // else: no /proc, but the shared descriptor is non-blocking already.
    }

    WriteSignalGuard guard;
    size_t off = 0;
    while (off < line.size()) {
      const char* data = line.data() + off;
      const size_t left = line.size() - off;
      ssize_t n = kind_ == Kind::socket ? ::send(wfd, data, left, MSG_DONTWAIT | MSG_NOSIGNAL)
                                        : ::write(wfd, data, left);
      if (n > 0) {
        off += static_cast<size_t>(n);
        continue;
      }
      const int err = n < 0 ? errno : EIO;  // 0 for a non-empty write: treat as I/O error
      if (err == EINTR) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) {
        // No room: wait, but not past the deadline; a consumer that stopped
        // reading must not stall the writer.
        if (wait_writable(wfd, own, deadline)) continue;
        const std::string why =
            own <= deadline.get()
                ? "consumer not reading (no room for " + std::to_string(ms_since(start)) + " ms)"
                : "consumer not reading; gave up at the writer's deadline after " +
                      std::to_string(ms_since(start)) + " ms";
        return fail(off, prefix, line.size(), why, r);
      }
      guard.discard(err);
      return fail(off, prefix, line.size(), errno_text(err), r);
    }
    fragment_open_ = false;
    r.status = WriteStatus::written;
    r.error.clear();
    return r;
  }

 private:
  enum class Kind { plain, reopen, socket };

  std::string where() const { return name_ + " (fd " + std::to_string(fd_) + ")"; }

  bool open_private(UniqueFd& out, std::string& why) {
    const std::string path = "/proc/self/fd/" + std::to_string(fd_);
    int fd;
    while ((fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)) < 0 &&
           errno == EINTR) {
    }
    if (fd >= 0) {
      out.reset(fd);
      return true;
    }
    const int e = errno;
    why_fatal_ = fifo_ && e == ENXIO;
    if (why_fatal_) {
      // Opening a pipe for writing without blocking fails with ENXIO exactly
      // when nobody has it open for reading: what a write reports as EPIPE.
      why = errno_text(EPIPE) + " (the pipe has no reader)";
    } else {
      why = "cannot get a non-blocking descriptor for it (open " + path + ": " + errno_text(e) +
            "), not writing blocking";
    }
    return false;
  }

  bool shared_is_nonblocking() const {
    const int flags = ::fcntl(fd_, F_GETFL);
    return flags >= 0 && (flags & O_NONBLOCK);
  }

  WriteResult& fail(size_t off, size_t prefix, size_t total, const std::string& why, WriteResult& r) {
    // Bytes of this record reached the stream: a fragment is now open. If only
    // the terminating '\n' of an older fragment got out, that one is closed.
    if (off > prefix) fragment_open_ = true;
    else if (off == prefix) fragment_open_ = false;
    r.status = WriteStatus::failed;
    r.error = where() + ": write: " + why;
    if (off > prefix)
      r.error += "; record cut after " + std::to_string(off - prefix) + " of " +
                 std::to_string(total - prefix) + " bytes, the fragment will be ended with a newline";
    else
      r.error += "; record not written";
    return r;
  }

  const int fd_;
  const std::string name_;
  const std::chrono::milliseconds timeout_;
  Kind kind_ = Kind::plain;
  bool fifo_ = false;
  bool why_fatal_ = false;  // the last open_private failure was "no reader"
  std::timed_mutex mu_;
  bool fragment_open_ = false;  // the stream ends in a partial line of ours
};

}  // namespace

std::unique_ptr<RecordSink> make_stream_sink(int fd, std::string name, StreamSinkOptions options) {
  return std::make_unique<StreamSink>(fd, std::move(name), options);
}


}  // namespace oomsnap
