#include "agent/sink.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace oomsnap {

namespace {

std::string errno_str(int err) {
  // GNU strerror_r (g++ defines _GNU_SOURCE): thread-safe, unlike strerror
  // on older C libraries, and sinks are written from several threads.
  char buf[256];
  return strerror_r(err, buf, sizeof buf);
}

// `json_line` as exactly one '\n'-terminated line, or false when it is empty
// or holds a newline inside (it would become two "records" in the file).
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

// Blocks SIGPIPE and SIGXFSZ in the calling thread for the lifetime of the
// object. A write(2) to a closed pipe raises SIGPIPE, and one past
// RLIMIT_FSIZE raises SIGXFSZ, at the writing thread; both default to killing
// the process, which must not be what a sink failure does. Blocked, the
// signal stays pending on this thread and the write returns EPIPE/EFBIG, which
// we report; discard() then removes the pending signal so it is not delivered
// when the mask is restored. A signal already pending before we blocked
// (someone else's) is left alone.
class WriteSignalGuard {
 public:
  WriteSignalGuard() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGPIPE);
    sigaddset(&set_, SIGXFSZ);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    pipe_was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    fsize_was_pending_ = sigismember(&pending, SIGXFSZ) == 1;
  }
  ~WriteSignalGuard() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  WriteSignalGuard(const WriteSignalGuard&) = delete;
  WriteSignalGuard& operator=(const WriteSignalGuard&) = delete;

  // After a write failed with `err`: drops the signal that failure raised.
  void discard(int err) {
    int sig = 0;
    if (err == EPIPE && !pipe_was_pending_) sig = SIGPIPE;
    if (err == EFBIG && !fsize_was_pending_) sig = SIGXFSZ;
    if (sig == 0) return;
    const int saved = errno;
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    const timespec zero{0, 0};
    // Zero timeout: if the signal is ignored it was never queued (EAGAIN).
    while (sigtimedwait(&one, nullptr, &zero) < 0 && errno == EINTR) {
    }
    errno = saved;
  }

 private:
  sigset_t set_{}, old_{};
  bool pipe_was_pending_ = false, fsize_was_pending_ = false;
};

// ---------------------------------------------------------------- stream

class StreamSink final : public RecordSink {
 public:
  StreamSink(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}

  std::string name() const override { return name_; }

  bool write_line(const std::string& json_line, std::string& error) override {
    std::string line;
    if (!prepare_line(json_line, line, error)) {
      error = name_ + ": " + error;
      return false;
    }
    // The mutex is held until the whole line is out, so the retries below for
    // short writes can never let another thread's record in between.
    std::lock_guard<std::mutex> lock(mu_);
    // An earlier write died mid-line: end that fragment first so this record
    // starts on its own line instead of being glued to the fragment.
    const size_t prefix = fragment_open_ ? 1 : 0;
    if (prefix) line.insert(line.begin(), '\n');

    WriteSignalGuard guard;
    size_t off = 0;
    while (off < line.size()) {
      ssize_t n = ::write(fd_, line.data() + off, line.size() - off);
      if (n > 0) {
        off += static_cast<size_t>(n);
        continue;
      }
      const int err = n < 0 ? errno : EIO;  // 0 for a non-empty write: treat as I/O error
      if (err == EINTR) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) {
        // Inherited non-blocking descriptor: wait for room, but not forever;
        // a consumer that stopped reading must not stall the agent.
        pollfd p{fd_, POLLOUT, 0};
        int r = ::poll(&p, 1, kStallMs);
        if (r > 0 || (r < 0 && errno == EINTR)) continue;
        return fail(off, prefix, line.size(),
                    "consumer not reading (no room for " + std::to_string(kStallMs) + " ms)",
                    error);
      }
      guard.discard(err);
      return fail(off, prefix, line.size(), errno_str(err), error);
    }
    fragment_open_ = false;
    return true;
  }

 private:
  static constexpr int kStallMs = 5000;

  bool fail(size_t off, size_t prefix, size_t total, const std::string& why, std::string& error) {
    // Bytes of this record reached the stream: a fragment is now open. If only
    // the terminating '\n' of an older fragment got out, that one is closed.
    if (off > prefix) fragment_open_ = true;
    else if (off == prefix) fragment_open_ = false;
    error = name_ + " (fd " + std::to_string(fd_) + "): write: " + why;
    if (off > prefix)
      error += "; record cut after " + std::to_string(off - prefix) + " of " +
               std::to_string(total - prefix) + " bytes, the fragment will be ended with a newline";
    else
      error += "; record not written";
    return false;
  }

  const int fd_;
  const std::string name_;
  std::mutex mu_;
  bool fragment_open_ = false;  // the stream ends in a partial line of ours
};

// ---------------------------------------------------------------- rotating file

// mkdir -p with mode 0755 (before umask). Error names the component that failed.
bool make_dirs(const std::string& dir, std::string& error) {
  struct stat st{};
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return true;
    error = "'" + dir + "' exists but is not a directory";
    return false;
  }
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string prefix = dir.substr(0, pos);
    if (prefix.empty() || prefix.back() == '/') continue;  // "//" in the path
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      error = "mkdir '" + prefix + "': " + errno_str(errno);
      return false;
    }
  }
  if (::stat(dir.c_str(), &st) != 0) {
    error = "stat '" + dir + "': " + errno_str(errno);
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    error = "'" + dir + "' exists but is not a directory";
    return false;
  }
  return true;
}

// flock(2) on the directory itself, so no extra lock file appears next to the
// records. Released by close() in the destructor.
class DirLock {
 public:
  DirLock() = default;
  ~DirLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  // Opens `dir` (creating it if it vanished) and takes the lock. Returns
  // false when the directory cannot be opened. A failing flock itself is
  // reported in `warning` but still returns true: the single O_APPEND write
  // keeps lines whole without it; only cross-process rotation loses
  // coordination, which is no reason to drop the record.
  bool acquire(const std::string& dir, std::string& error, std::string& warning) {
    fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ < 0 && errno == ENOENT) {
      if (!make_dirs(dir, error)) return false;
      fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
    if (fd_ < 0) {
      error = "open directory '" + dir + "': " + errno_str(errno);
      return false;
    }
    int r;
    while ((r = ::flock(fd_, LOCK_EX)) != 0 && errno == EINTR) {
    }
    if (r != 0) warning = "flock '" + dir + "': " + errno_str(errno) + " (writing unlocked)";
    return true;
  }

 private:
  int fd_ = -1;
};

class RotatingFileSink final : public RecordSink {
 public:
  RotatingFileSink(std::string dir, uint64_t max_bytes, int max_files)
      : dir_(std::move(dir)),
        path_(dir_ + "/" + kRecordFileName),
        name_("file:" + path_),
        max_bytes_(max_bytes),
        max_files_(max_files) {}

  ~RotatingFileSink() override {
    if (fd_ >= 0) ::close(fd_);
  }

  std::string name() const override { return name_; }

  // Creates the directory and opens the file, so configuration mistakes show
  // at startup rather than at the first incident.
  bool open_now(std::string& error) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string err;
    if (!make_dirs(dir_, err) || !ensure_open(err)) {
      error = name_ + ": " + err;
      return false;
    }
    return true;
  }

  bool write_line(const std::string& json_line, std::string& error) override {
    std::string line;
    if (!prepare_line(json_line, line, error)) {
      error = name_ + ": " + error;
      return false;
    }
    // mu_ orders this process's threads; the directory flock orders agents
    // sharing the directory, so size check, rotation and append are one step.
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> problems;
    std::string err, warning;
    DirLock dir_lock;
    if (!dir_lock.acquire(dir_, err, warning)) return fail_unwritten(err, problems, error);
    if (!warning.empty()) problems.push_back(warning);
    if (!ensure_open(err)) return fail_unwritten(err, problems, error);

    uint64_t size = 0;
    bool terminate = false;
    inspect(size, terminate);
    const uint64_t need = line.size() + (terminate ? 1 : 0);
    // `size > 0`: an empty file is never rotated, which is what lets a line
    // longer than max_bytes go whole into a fresh file instead of looping.
    if (size > 0 && size + need > max_bytes_) {
      if (!rotate(err)) problems.push_back("rotate: " + err);
      // Reopen by path either way: after a good rotation it is a new file;
      // after a failed one it is whatever still has the name, and the record
      // goes there rather than nowhere.
      close_fd();
      if (!ensure_open(err)) return fail_unwritten(err, problems, error);
      inspect(size, terminate);
    }
    // A fragment left by a failed write (ours or another agent's) is ended
    // in the same write(2), so the record can't be glued to it.
    if (terminate) line.insert(line.begin(), '\n');

    WriteSignalGuard guard;
    ssize_t n;
    while ((n = ::write(fd_, line.data(), line.size())) < 0 && errno == EINTR) {
      // -1/EINTR: nothing was written, so repeating the whole write is safe.
    }
    if (n == static_cast<ssize_t>(line.size())) {
      if (problems.empty()) return true;
      error = name_ + ": " + join(problems) + "; record written";
      return false;
    }
    if (n < 0) {
      const int e = errno;
      guard.discard(e);
      close_fd();  // EBADF, ESTALE, ...: start over from the path next time
      return fail_unwritten("write: " + errno_str(e), problems, error);
    }
    // Short write (a regular file does that only when full: ENOSPC, EFBIG).
    // The rest is NOT written with a second write(2): an unrelated appender
    // may have written in between and the tail would land after its bytes.
    // Instead end the fragment now; if even that fails, the next write's
    // inspect() finds the unterminated tail and ends it.
    close_fd_after_short_write(n, terminate ? 1 : 0, line.size(), guard, problems);
    error = name_ + ": " + join(problems);
    return false;
  }

 private:
  void close_fd_after_short_write(ssize_t n, size_t prefix, size_t total, WriteSignalGuard& guard,
                                  std::vector<std::string>& problems) {
    const size_t written = static_cast<size_t>(n);
    std::string what;
    if (written <= prefix) {
      // Only the newline ending an older fragment got out: nothing to end.
      what = "record not written";
    } else {
      ssize_t t;
      while ((t = ::write(fd_, "\n", 1)) < 0 && errno == EINTR) {
      }
      what = "record cut after " + std::to_string(written - prefix) + " of " +
             std::to_string(total - prefix) + " bytes";
      if (t == 1) {
        what += ", fragment ended with a newline";
      } else {
        const int e = t < 0 ? errno : EIO;
        guard.discard(e);
        what += ", fragment left open (" + errno_str(e) + "), the next write ends it";
      }
    }
    close_fd();
    problems.push_back("short write: " + what);
  }

  static std::string join(const std::vector<std::string>& parts) {
    std::string s;
    for (const auto& p : parts) s += (s.empty() ? "" : "; ") + p;
    return s;
  }

  bool fail_unwritten(const std::string& why, std::vector<std::string>& problems,
                      std::string& error) {
    problems.push_back(why);
    error = name_ + ": " + join(problems) + "; record not written";
    return false;
  }

  void close_fd() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Keeps fd_ on the file that currently has the name: another agent (or
  // logrotate) may have rotated it away since our last write.
  bool ensure_open(std::string& error) {
    if (fd_ >= 0) {
      struct stat by_fd{}, by_path{};
      if (::fstat(fd_, &by_fd) != 0 || ::stat(path_.c_str(), &by_path) != 0 ||
          by_fd.st_dev != by_path.st_dev || by_fd.st_ino != by_path.st_ino)
        close_fd();
    }
    if (fd_ >= 0) return true;
    // O_RDWR (not O_WRONLY) so inspect() can read the last byte back.
    fd_ = ::open(path_.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      error = "open '" + path_ + "' for append: " + errno_str(errno);
      return false;
    }
    return true;
  }

  // Current size (with other appenders' bytes) and whether the file ends in a
  // partial line that must be terminated before the next record.
  //
  // A file not ending in '\n' is either a fragment (a write cut short, ours
  // or another agent's) or a line another program is appending right now:
  // the kernel grows the file page by page during one write(2), so its tail
  // is briefly visible. Ending the latter would only add an empty line after
  // it (our write waits for theirs). To tell them apart, a zero-length
  // write(2) serves as a barrier: Linux file systems take the inode's write
  // lock for it too (checked on ext4 and tmpfs), so it returns only once a
  // write in progress has finished. A tail that is still unterminated and the
  // same size after that (and a short pause, for file systems where the
  // barrier might not wait) is a fragment. A tail that keeps changing is a
  // busy writer: our write lands after its current one, so nothing to end.
  void inspect(uint64_t& size, bool& terminate) const {
    size = 0;
    terminate = false;
    off_t prev = -1;
    for (int look = 0; look < kFragmentMaxLooks; ++look) {
      if (look > 0) {
        while (::write(fd_, "", 0) < 0 && errno == EINTR) {
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(kFragmentPauseMs));
      }
      struct stat st{};
      if (::fstat(fd_, &st) != 0 || st.st_size <= 0) return;
      size = static_cast<uint64_t>(st.st_size);
      char last = '\n';
      if (::pread(fd_, &last, 1, st.st_size - 1) != 1 || last == '\n') return;
      if (st.st_size == prev) {
        terminate = true;  // nobody was writing it: a fragment
        return;
      }
      prev = st.st_size;
    }
  }

  std::string numbered(int i) const { return path_ + "." + std::to_string(i); }

  // oomsnap.jsonl -> .1 -> .2 ... -> .(max_files-1); rename(2) replaces its
  // target, which is how the oldest file goes. Oldest first so every rename
  // has a free slot. Called with the directory lock held.
  bool rotate(std::string& error) {
    if (max_files_ == 1) {
      // Only the live file is kept: rotation starts it over.
      if (::unlink(path_.c_str()) != 0 && errno != ENOENT) {
        error = "unlink '" + path_ + "': " + errno_str(errno);
        return false;
      }
      remove_beyond(1);
      return true;
    }
    for (int i = max_files_ - 2; i >= 1; --i) {
      if (::rename(numbered(i).c_str(), numbered(i + 1).c_str()) != 0 && errno != ENOENT) {
        error = "rename '" + numbered(i) + "' -> '" + numbered(i + 1) + "': " + errno_str(errno);
        return false;
      }
    }
    if (::rename(path_.c_str(), numbered(1).c_str()) != 0) {
      error = "rename '" + path_ + "' -> '" + numbered(1) + "': " + errno_str(errno);
      return false;
    }
    remove_beyond(max_files_);
    return true;
  }

  // Files numbered past the limit (left by a run with a larger MaxFiles) would
  // otherwise stay forever; stop at the first gap.
  void remove_beyond(int first) {
    for (int i = first;; ++i)
      if (::unlink(numbered(i).c_str()) != 0) break;
  }

  static constexpr int kFragmentMaxLooks = 4;  // see inspect()
  static constexpr int kFragmentPauseMs = 1;

  const std::string dir_, path_, name_;
  const uint64_t max_bytes_;
  const int max_files_;
  std::mutex mu_;
  int fd_ = -1;  // the live file, O_APPEND; -1 until opened or after an error
};

}  // namespace

std::unique_ptr<RecordSink> make_stream_sink(int fd, std::string name) {
  return std::make_unique<StreamSink>(fd, std::move(name));
}

std::unique_ptr<RecordSink> make_rotating_file_sink(std::string dir, uint64_t max_bytes,
                                                    int max_files, std::string& error) {
  const std::string what = "record file sink in '" + dir + "': ";
  if (dir.empty()) {
    error = "record file sink: empty directory path";
    return nullptr;
  }
  if (max_bytes == 0) {
    error = what + "max_bytes must be > 0";
    return nullptr;
  }
  if (max_files < 1) {
    error = what + "max_files must be >= 1, got " + std::to_string(max_files);
    return nullptr;
  }
  // "/var/log/oomsnap/" and "/var/log/oomsnap" name the same file.
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  auto sink = std::make_unique<RotatingFileSink>(std::move(dir), max_bytes, max_files);
  if (!sink->open_now(error)) return nullptr;
  return sink;
}

std::string record_line(const nlohmann::json& record) {
  // replace: an invalid UTF-8 byte becomes U+FFFD instead of dump() throwing
  // type_error 316 and losing the whole record over one bad comm/path byte.
  return record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + '\n';
}

void SinkSet::add(std::unique_ptr<RecordSink> sink) {
  if (sink) sinks_.push_back(std::move(sink));
}

bool SinkSet::write(const nlohmann::json& record, std::vector<std::string>& errors) {
  if (sinks_.empty()) {
    errors.push_back("no record sinks configured; record dropped");
    return false;
  }
  const std::string line = record_line(record);  // serialised once for all sinks
  bool ok = true;
  for (const auto& sink : sinks_) {
    std::string error;
    if (!sink->write_line(line, error)) {
      ok = false;
      errors.push_back(error.empty() ? sink->name() + ": write failed" : error);
    }
  }
  return ok;
}

}  // namespace oomsnap
