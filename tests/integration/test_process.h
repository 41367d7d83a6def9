// Test helpers: start a real child process (optionally waiting for its first
// stdout line), kill it on scope exit.
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace oomsnap_test {

inline bool read_file(const std::string& path, std::string& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  return true;
}

// Removes a path at scope exit (a /dev/shm file a test's child writes).
struct RemoveAtExit {
  std::string path;
  ~RemoveAtExit() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

class Process {
 public:
  // cgroup_dir: when set, the child moves itself into that cgroup (writes 0 to
  // its cgroup.procs) before exec, so everything it allocates is charged there.
  explicit Process(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
                   const std::string& cgroup_dir = "") {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork");
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a killed test binary
      if (!cgroup_dir.empty()) {
        int cfd = open((cgroup_dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
        if (cfd < 0 || write(cfd, "0\n", 2) != 2) _exit(126);
        close(cfd);
      }
      dup2(fds[1], 1);
      std::vector<char*> av;
      for (auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
      av.push_back(nullptr);
      for (auto& e : env) putenv(const_cast<char*>(e.c_str()));
      execv(av[0], av.data());
      _exit(127);
    }
    close(fds[1]);
    out_fd_ = fds[0];
  }
  ~Process() {
    kill_now();
    if (out_fd_ >= 0) close(out_fd_);
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  // Waits until the child has exec'd (its /proc/PID/exe is no longer this
  // binary): right after fork it is still a copy of the test, comm and all.
  bool wait_exec(std::chrono::milliseconds timeout) {
    auto link = [](const std::string& path) {
      char buf[4096];
      ssize_t n = readlink(path.c_str(), buf, sizeof buf - 1);
      return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
    };
    const std::string self = link("/proc/self/exe");
    auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      std::string exe = link("/proc/" + std::to_string(pid_) + "/exe");
      if (!exe.empty() && exe != self) return true;
      usleep(2000);
    }
    return false;
  }
  // Reaps the child if it has exited; returns its wait status, or -1 while it runs.
  int try_wait() {
    if (pid_ <= 0) return status_;
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      status_ = st;
    }
    return pid_ > 0 ? -1 : status_;
  }
  // The first line the child writes to stdout, or "" on timeout/EOF.
  std::string read_line(std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    std::string line;
    while (true) {
      auto nl = buf_.find('\n');
      if (nl != std::string::npos) {
        line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "";
      pollfd p{out_fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return "";
      char b[65536];
      ssize_t n = read(out_fd_, b, sizeof b);
      if (n <= 0) return "";
      buf_.append(b, static_cast<size_t>(n));
    }
  }
  void kill_now() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

 private:
  pid_t pid_ = -1;
  int status_ = -1;
  int out_fd_ = -1;
  std::string buf_;
};

// A shell command's exit status (-1: killed by a signal), its stdout in *out.
inline int run_status(const std::string& cmd, std::string* out = nullptr) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  std::string o;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) o.append(buf, n);
  const int st = pclose(p);
  if (out) *out = o;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace oomsnap_test
