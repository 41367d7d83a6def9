#include "agent/sink.h"

#include "agent/record_limit.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "base/text.h"
#include "base/unique_fd.h"

namespace oomsnap {

using Clock = SinkDeadline::Clock;

void SinkDeadline::bring_forward(Clock::time_point t) {
  const Clock::rep want = t.time_since_epoch().count();
  Clock::rep cur = rep_.load(std::memory_order_acquire);
  while (want < cur && !rep_.compare_exchange_weak(cur, want, std::memory_order_acq_rel)) {
  }
}

bool RecordSink::write_line(const std::string& json_line, std::string& error) {
  SinkDeadline none;
  WriteResult r = write_record(json_line, none);
  if (r.status == WriteStatus::written) return true;
  error = r.error.empty() ? name() + ": write failed" : r.error;
  return false;
}

namespace {

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

// ---------------------------------------------------------------- common

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

// ---------------------------------------------------------------- stream

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
    if (!prepare_line(json_line, line, r.error)) {
      r.status = WriteStatus::rejected;
      r.error = name_ + ": " + r.error;
      return r;
    }
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

// ---------------------------------------------------------------- store directory

bool trusted_owner(uid_t uid) { return uid == 0 || uid == ::geteuid(); }

std::vector<std::string> path_components(const std::string& path) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    if (j > i) parts.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  return parts;
}

// Who could replace `path` (a directory on the way to the store, or the
// store itself) or put files into it. Empty when only root/we can.
std::string untrusted_dir(const std::string& path, const struct stat& st, bool is_store) {
  if (!trusted_owner(st.st_uid))
    return "'" + path + "' is owned by uid " + std::to_string(st.st_uid);
  const mode_t w = st.st_mode & (S_IWGRP | S_IWOTH);
  if (w == 0) return {};
  // Sticky: others may add entries but not rename or remove root's, so an
  // ancestor like /tmp cannot be used to swap our directory. The store
  // itself would still let them plant files next to the records.
  if (!is_store && (st.st_mode & S_ISVTX)) return {};
  std::string who = (w & S_IWOTH) ? "everyone" : "group " + std::to_string(st.st_gid);
  return "'" + path + "' is writable by " + who + " (mode " + octal_mode(st.st_mode) + ")";
}

// Resolves `dir` from "/" one component at a time, following symlinks by
// hand, and checks every directory passed and every symlink followed (see
// make_rotating_file_sink in sink.h). Missing directories are created 0700.
// On success `out` holds the store directory opened O_DIRECTORY.
bool open_store_dir(const std::string& dir, UniqueFd& out, std::string& error) {
  std::string abs = dir;
  if (abs.empty() || abs[0] != '/') {
    char cwd[4096];
    if (!::getcwd(cwd, sizeof cwd)) {
      error = "getcwd: " + errno_text(errno);
      return false;
    }
    abs = std::string(cwd) + "/" + abs;
  }
  const auto refuse = [&](const std::string& why) {
    error = "refusing to keep records in '" + dir + "': " + why +
            "; whoever can write there can read or redirect the records (make it owned by root and "
            "not group/other-writable)";
    return false;
  };
  auto parts = path_components(abs);
  std::deque<std::string> todo(parts.begin(), parts.end());
  std::string cur;  // resolved so far, no symlinks; "" is "/"
  struct stat st{};
  if (::lstat("/", &st) != 0) {
    error = "stat '/': " + errno_text(errno);
    return false;
  }
  if (auto why = untrusted_dir("/", st, todo.empty()); !why.empty()) return refuse(why);
  int links = 0;
  while (!todo.empty()) {
    const std::string comp = todo.front();
    todo.pop_front();
    if (comp == ".") continue;
    if (comp == "..") {
      cur = cur.substr(0, cur.rfind('/'));  // cur is resolved: its parent is lexical
      continue;
    }
    const std::string path = cur + "/" + comp;
    if (::lstat(path.c_str(), &st) != 0) {
      if (errno != ENOENT) {
        error = "stat '" + path + "': " + errno_text(errno);
        return false;
      }
      if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
        error = "mkdir '" + path + "': " + errno_text(errno);
        return false;
      }
      if (::lstat(path.c_str(), &st) != 0) {
        error = "stat '" + path + "': " + errno_text(errno);
        return false;
      }
    }
    if (S_ISLNK(st.st_mode)) {
      if (!trusted_owner(st.st_uid))
        return refuse("'" + path + "' is a symbolic link owned by uid " + std::to_string(st.st_uid));
      if (++links > 40) {
        error = "resolving '" + dir + "': " + errno_text(ELOOP);
        return false;
      }
      std::string target(4096, '\0');
      const ssize_t n = ::readlink(path.c_str(), target.data(), target.size());
      if (n < 0 || static_cast<size_t>(n) >= target.size()) {
        error = "readlink '" + path + "': " + errno_text(n < 0 ? errno : ENAMETOOLONG);
        return false;
      }
      target.resize(static_cast<size_t>(n));
      const auto more = path_components(target);
      todo.insert(todo.begin(), more.begin(), more.end());
      if (!target.empty() && target[0] == '/') cur.clear();
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      error = todo.empty() ? "'" + dir + "' exists but is not a directory"
                           : "'" + path + "': " + errno_text(ENOTDIR);
      return false;
    }
    if (auto why = untrusted_dir(path, st, todo.empty()); !why.empty()) return refuse(why);
    cur = path;
  }
  const std::string resolved = cur.empty() ? "/" : cur;
  const int fd = ::open(resolved.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    error = "open directory '" + resolved + "': " + errno_text(errno);
    return false;
  }
  out.reset(fd);
  struct stat opened{};
  if (::fstat(fd, &opened) != 0 || opened.st_dev != st.st_dev || opened.st_ino != st.st_ino) {
    error = "directory '" + resolved + "' changed while it was being checked";
    return false;
  }
  return true;
}

// "pid 1234 (comm)" for the process holding an flock on the file `fd` is
// open on, from /proc/locks; "another process" when it does not say.
std::string lock_holder(int fd) {
  struct stat st{};
  if (::fstat(fd, &st) != 0) return "another process";
  std::ifstream in("/proc/locks");
  std::string line;
  while (std::getline(in, line)) {
    // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; waiters have "->".
    std::istringstream f(line);
    std::string id, type, advisory, mode, pid, where;
    if (!(f >> id >> type) || type == "->" || type != "FLOCK") continue;
    if (!(f >> advisory >> mode >> pid >> where)) continue;
    unsigned maj = 0, min = 0;
    unsigned long long ino = 0;
    if (std::sscanf(where.c_str(), "%x:%x:%llu", &maj, &min, &ino) != 3) continue;
    if (maj != major(st.st_dev) || min != minor(st.st_dev) || ino != st.st_ino) continue;
    if (pid == "0" || pid.empty()) break;  // holder not visible in our pid namespace
    std::string comm;
    std::ifstream c("/proc/" + pid + "/comm");
    std::getline(c, comm);
    return "pid " + pid + (comm.empty() ? "" : " (" + comm + ")");
  }
  return "another process";
}

// ---------------------------------------------------------------- rotating file

class RotatingFileSink final : public RecordSink {
 public:
  explicit RotatingFileSink(RotatingFileOptions o)
      : dir_(std::move(o.dir)),
        path_(dir_ + "/" + kRecordFileName),
        name_("file:" + path_),
        max_bytes_(o.max_bytes),
        max_files_(o.max_files),
        lock_timeout_(o.lock_timeout) {}

  ~RotatingFileSink() override {
    if (fd_ >= 0) ::close(fd_);
  }

  std::string name() const override { return name_; }

  // Checks and creates the directory and opens the file, so configuration
  // mistakes and an unsafe store show at startup rather than at the first
  // incident. Takes no directory lock: another process holding it cannot
  // delay the start.
  bool open_now(std::string& error) {
    std::lock_guard<std::timed_mutex> lock(mu_);
    std::string err;
    UniqueFd dir;
    if (!open_store_dir(dir_, dir, err) || !ensure_open(dir.get(), err)) {
      error = name_ + ": " + err;
      return false;
    }
    return true;
  }

  WriteResult write_record(const std::string& json_line, const SinkDeadline& deadline) override {
    WriteResult r;
    std::string line;
    if (!prepare_line(json_line, line, r.error)) {
      r.status = WriteStatus::rejected;
      r.error = name_ + ": " + r.error;
      return r;
    }
    const auto start = Clock::now();
    const auto own = start + lock_timeout_;
    std::vector<std::string> problems;
    // mu_ orders this process's threads; the directory flock orders agents
    // sharing the directory, so size check, rotation and append are one step.
    std::unique_lock<std::timed_mutex> lock(mu_, std::defer_lock);
    if (!lock.try_lock_until(earliest(own, deadline)))
      return fail_unwritten("another thread's record is still being written", problems, r);
    std::string err, warning;
    UniqueFd dir;
    if (!open_store_dir(dir_, dir, err)) return fail_unwritten(err, problems, r);
    if (!lock_dir(dir.get(), start, own, deadline, err, warning)) return fail_unwritten(err, problems, r);
    if (!warning.empty()) problems.push_back(warning);
    if (!ensure_open(dir.get(), err)) return fail_unwritten(err, problems, r);

    uint64_t size = 0;
    bool terminate = false;
    inspect(size, terminate);
    const uint64_t need = line.size() + (terminate ? 1 : 0);
    // `size > 0`: an empty file is never rotated, which is what lets a line
    // longer than max_bytes go whole into a fresh file instead of looping.
    if (size > 0 && size + need > max_bytes_) {
      if (!rotate(dir.get(), err)) problems.push_back("rotate: " + err);
      // Reopen by name either way: after a good rotation it is a new file;
      // after a failed one it is whatever still has the name, and the record
      // goes there rather than nowhere.
      close_fd();
      if (!ensure_open(dir.get(), err)) return fail_unwritten(err, problems, r);
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
      if (problems.empty()) {
        r.status = WriteStatus::written;
        r.error.clear();
        return r;
      }
      r.status = WriteStatus::written_with_error;
      r.error = name_ + ": " + join(problems, "; ") + "; record written";
      return r;
    }
    if (n < 0) {
      const int e = errno;
      guard.discard(e);
      close_fd();  // EBADF, ESTALE, ...: start over from the name next time
      return fail_unwritten("write: " + errno_text(e), problems, r);
    }
    // Short write (a regular file does that only when full: ENOSPC, EFBIG).
    // The rest is NOT written with a second write(2): an unrelated appender
    // may have written in between and the tail would land after its bytes.
    // Instead end the fragment now; if even that fails, the next write's
    // inspect() finds the unterminated tail and ends it.
    close_fd_after_short_write(n, terminate ? 1 : 0, line.size(), guard, problems);
    r.status = WriteStatus::failed;
    r.error = name_ + ": " + join(problems, "; ");
    return r;
  }

 private:
  // flock(2) on the directory itself, so no extra lock file appears next to
  // the records; released when `dir_fd` is closed. LOCK_NB retried with a
  // backoff from 100 us to 5 ms until min(own, deadline). A failing flock
  // other than "held" is only a `warning`: the single O_APPEND write keeps
  // lines whole without it; only cross-process rotation loses coordination,
  // which is no reason to drop the record.
  bool lock_dir(int dir_fd, Clock::time_point start, Clock::time_point own, const SinkDeadline& deadline,
                std::string& error, std::string& warning) {
    auto pause = std::chrono::microseconds(100);
    for (;;) {
      if (::flock(dir_fd, LOCK_EX | LOCK_NB) == 0) return true;
      if (errno == EINTR) continue;
      if (errno != EWOULDBLOCK) {
        warning = "flock '" + dir_ + "': " + errno_text(errno) + " (writing unlocked)";
        return true;
      }
      const auto now = Clock::now();
      const auto end = earliest(own, deadline);
      if (now >= end) {
        error = "directory lock on '" + dir_ + "' held by " + lock_holder(dir_fd) + "; gave up after " +
                std::to_string(ms_since(start)) + " ms" +
                (own <= deadline.get() ? "" : " (the writer's deadline)");
        return false;
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, end - now));
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(5));
    }
  }

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
        what += ", fragment left open (" + errno_text(e) + "), the next write ends it";
      }
    }
    close_fd();
    problems.push_back("short write: " + what);
  }

  WriteResult& fail_unwritten(const std::string& why, std::vector<std::string>& problems, WriteResult& r) {
    problems.push_back(why);
    r.status = WriteStatus::failed;
    r.error = name_ + ": " + join(problems, "; ") + "; record not written";
    return r;
  }

  void close_fd() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Why the entry `name` in the store is not something rotation may rename
  // or remove; empty when it is absent, a directory (rename(2) then fails on
  // its own, with its own error) or a record file of ours.
  std::string foreign_entry(int dir_fd, const std::string& name) const {
    struct stat st{};
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return {};
    if (S_ISDIR(st.st_mode)) return {};
    const std::string path = dir_ + "/" + name;
    if (!S_ISREG(st.st_mode))
      return "'" + path + "' is " + file_kind(st.st_mode) + ", not a record file of ours";
    if (st.st_uid != ::geteuid())
      return "'" + path + "' is owned by uid " + std::to_string(st.st_uid) + ", not a record file of ours";
    if (st.st_nlink != 1)
      return "'" + path + "' has " + std::to_string(st.st_nlink) + " hard links, not a record file of ours";
    return {};
  }

  // Keeps fd_ on the file that currently has the name: another agent (or
  // logrotate) may have rotated it away since our last write. Opens only a
  // regular file, owned by us, with one link, never through a symlink and
  // never blocking (a FIFO planted there).
  bool ensure_open(int dir_fd, std::string& error) {
    if (fd_ >= 0) {
      struct stat by_fd{}, by_name{};
      if (::fstat(fd_, &by_fd) != 0 ||
          ::fstatat(dir_fd, kRecordFileName, &by_name, AT_SYMLINK_NOFOLLOW) != 0 ||
          by_fd.st_dev != by_name.st_dev || by_fd.st_ino != by_name.st_ino)
        close_fd();
    }
    if (fd_ >= 0) return true;
    // O_RDWR (not O_WRONLY) so inspect() can read the last byte back.
    int fd = ::openat(dir_fd, kRecordFileName,
                      O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
    if (fd < 0) {
      const int e = errno;
      if (e == ELOOP)
        error = "'" + path_ + "' is a symbolic link; not following it (remove it)";
      else
        error = "open '" + path_ + "' for append: " + errno_text(e);
      return false;
    }
    UniqueFd opened(fd);
    struct stat st{};
    if (::fstat(fd, &st) != 0) {
      error = "fstat '" + path_ + "': " + errno_text(errno);
      return false;
    }
    if (!S_ISREG(st.st_mode)) {
      error = "'" + path_ + "' is " + file_kind(st.st_mode) + ", not a regular file; not writing to it";
      return false;
    }
    if (st.st_uid != ::geteuid()) {
      error = "'" + path_ + "' is owned by uid " + std::to_string(st.st_uid) + ", not by us (uid " +
              std::to_string(::geteuid()) + "); not writing to it";
      return false;
    }
    if (st.st_nlink != 1) {
      error = "'" + path_ + "' has " + std::to_string(st.st_nlink) + " hard links; not writing to it";
      return false;
    }
    // A file from an older version (0644): records are for root only.
    if ((st.st_mode & 07777) != 0600) (void)::fchmod(fd, 0600);
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    fd_ = opened.release();
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

  std::string numbered(int i) const { return std::string(kRecordFileName) + "." + std::to_string(i); }
  std::string full(const std::string& name) const { return dir_ + "/" + name; }

  // oomsnap.jsonl -> .1 -> .2 ... -> .(max_files-1); rename(2) replaces its
  // target, which is how the oldest file goes. Oldest first so every rename
  // has a free slot. Every name involved is checked first: a symlink, FIFO or
  // someone else's file there stops the rotation before anything moved.
  // Called with the directory lock held.
  bool rotate(int dir_fd, std::string& error) {
    const int last = max_files_ == 1 ? 0 : max_files_ - 1;
    for (int i = 0; i <= last; ++i) {
      const std::string name = i == 0 ? std::string(kRecordFileName) : numbered(i);
      if (auto why = foreign_entry(dir_fd, name); !why.empty()) {
        error = why + "; not rotating (remove it)";
        return false;
      }
    }
    if (max_files_ == 1) {
      // Only the live file is kept: rotation starts it over.
      if (::unlinkat(dir_fd, kRecordFileName, 0) != 0 && errno != ENOENT) {
        error = "unlink '" + path_ + "': " + errno_text(errno);
        return false;
      }
      return remove_beyond(dir_fd, 1, error);
    }
    for (int i = max_files_ - 2; i >= 1; --i) {
      if (::renameat(dir_fd, numbered(i).c_str(), dir_fd, numbered(i + 1).c_str()) != 0 && errno != ENOENT) {
        error = "rename '" + full(numbered(i)) + "' -> '" + full(numbered(i + 1)) + "': " + errno_text(errno);
        return false;
      }
    }
    if (::renameat(dir_fd, kRecordFileName, dir_fd, numbered(1).c_str()) != 0) {
      error = "rename '" + path_ + "' -> '" + full(numbered(1)) + "': " + errno_text(errno);
      return false;
    }
    return remove_beyond(dir_fd, max_files_, error);
  }

  // Files numbered past the limit (left by a run with a larger MaxFiles) would
  // otherwise stay forever; stop at the first gap, or at an entry that is not
  // ours (reported).
  bool remove_beyond(int dir_fd, int first, std::string& error) {
    for (int i = first;; ++i) {
      if (auto why = foreign_entry(dir_fd, numbered(i)); !why.empty()) {
        error = why + "; not removing it";
        return false;
      }
      if (::unlinkat(dir_fd, numbered(i).c_str(), 0) != 0) return true;
    }
  }

  static constexpr int kFragmentMaxLooks = 4;  // see inspect()
  static constexpr int kFragmentPauseMs = 1;

  const std::string dir_, path_, name_;
  const uint64_t max_bytes_;
  const int max_files_;
  const std::chrono::milliseconds lock_timeout_;
  std::timed_mutex mu_;
  int fd_ = -1;  // the live file, O_APPEND; -1 until opened or after an error
};

}  // namespace

std::unique_ptr<RecordSink> make_stream_sink(int fd, std::string name, StreamSinkOptions options) {
  return std::make_unique<StreamSink>(fd, std::move(name), options);
}

std::unique_ptr<RecordSink> make_rotating_file_sink(RotatingFileOptions options, std::string& error) {
  const std::string what = "record file sink in '" + options.dir + "': ";
  if (options.dir.empty()) {
    error = "record file sink: empty directory path";
    return nullptr;
  }
  if (options.max_bytes == 0) {
    error = what + "max_bytes must be > 0";
    return nullptr;
  }
  if (options.max_files < 1) {
    error = what + "max_files must be >= 1, got " + std::to_string(options.max_files);
    return nullptr;
  }
  if (options.lock_timeout.count() < 0) {
    error = what + "lock_timeout must be >= 0";
    return nullptr;
  }
  // "/var/log/oomsnap/" and "/var/log/oomsnap" name the same file.
  while (options.dir.size() > 1 && options.dir.back() == '/') options.dir.pop_back();
  auto sink = std::make_unique<RotatingFileSink>(std::move(options));
  if (!sink->open_now(error)) return nullptr;
  return sink;
}

std::unique_ptr<RecordSink> make_rotating_file_sink(std::string dir, uint64_t max_bytes,
                                                    int max_files, std::string& error) {
  RotatingFileOptions o;
  o.dir = std::move(dir);
  o.max_bytes = max_bytes;
  o.max_files = max_files;
  return make_rotating_file_sink(std::move(o), error);
}

std::string record_line(const nlohmann::json& record) {
  // Invalid UTF-8 becomes U+FFFD instead of dump() throwing type_error 316
  // and losing the whole record over one bad comm/path byte; the line is
  // bounded (agent/record_limit.h).
  return serialise_record(record) + '\n';
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
      errors.push_back(error);
    }
  }
  return ok;
}

}  // namespace oomsnap
