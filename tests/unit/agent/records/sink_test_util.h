// Helpers for the sink and sink-writer tests: a process holding the store's
// directory lock, and a way to run an operation that must not block so that
// a regression fails the test instead of hanging it.
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <string>
#include <stdexcept>
#include <thread>
#include <vector>

namespace sinktest {

// A fresh directory under /tmp, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/oomsnap-sink-XXXXXX";
    const char* dir = ::mkdtemp(tmpl);
    if (!dir) throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
    path_ = dir;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// A child process that takes flock(LOCK_EX) on `dir` (as another agent, or a
// local user who can open the directory, would) and holds it for `hold`, or
// until release().
class LockHolder {
 public:
  LockHolder(const std::string& dir, std::chrono::milliseconds hold) {
    int ready[2];
    if (::pipe(ready) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(ready[0]);
      const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd < 0 || ::flock(fd, LOCK_EX) != 0) _exit(2);
      if (::write(ready[1], "L", 1) != 1) _exit(3);
      std::this_thread::sleep_for(hold);
      _exit(0);
    }
    ::close(ready[1]);
    char c = 0;
    locked_ = pid_ > 0 && ::read(ready[0], &c, 1) == 1 && c == 'L';
    ::close(ready[0]);
  }
  ~LockHolder() { release(); }
  LockHolder(const LockHolder&) = delete;
  LockHolder& operator=(const LockHolder&) = delete;

  bool locked() const { return locked_; }
  pid_t pid() const { return pid_; }
  // Waits for the child to let go by itself (after `hold`).
  void wait() {
    if (pid_ <= 0) return;
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  // Ends the hold now (killing the child releases its lock).
  void release() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    wait();
  }

 private:
  pid_t pid_ = -1;
  bool locked_ = false;
};

// Runs `op` on a thread and returns whether it finished within `limit`. If it
// did not (the code under test blocked), `rescue` is called — it must unblock
// the operation, e.g. by draining a pipe or releasing a lock — until it has
// finished, so the test fails instead of hanging.
inline bool finishes_within(std::chrono::milliseconds limit, const std::function<void()>& op,
                            const std::function<void()>& rescue) {
  std::promise<void> done;
  auto finished = done.get_future();
  std::thread t([&] {
    op();
    done.set_value();
  });
  const bool in_time = finished.wait_for(limit) == std::future_status::ready;
  while (finished.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) rescue();
  t.join();
  return in_time;
}

// Reads whatever `fd` has now without blocking (the descriptor's own flags
// are left alone: MSG_DONTWAIT-like reads via a temporary O_NONBLOCK would
// change them, so poll first).
inline std::string drain(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0 || !(p.revents & POLLIN)) break;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

inline long long ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count();
}

}  // namespace sinktest
