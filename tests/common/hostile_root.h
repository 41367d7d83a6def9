// Test helpers for opening files a target controls: a directory laid out as
// a hostile container root, and opens run in a forked child with a timeout,
// so an open that blocks (a FIFO without a writer) fails the test instead of
// hanging it.
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>

namespace oomsnap_test {

inline std::string read_all_fd(int fd, size_t max = 1 << 20) {
  std::string out;
  char buf[4096];
  for (ssize_t n; out.size() < max && (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

// What an open returned, as seen from the child that ran it.
struct Opened {
  bool timed_out = false;
  bool ok = false;       // an fd
  int err = 0;           // errno when not
  bool regular = false;  // fstat of the fd
  std::string content;   // what the fd reads (its first 4 KiB)
};

// Runs open_fn (an fd, or -1 + errno) in a forked child for at most `limit`;
// a child still inside it then is killed (timed_out).
inline Opened run_open(const std::function<int()>& open_fn,
                       std::chrono::milliseconds limit = std::chrono::milliseconds(3000)) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork");
  if (pid == 0) {
    ::close(p[0]);
    const int fd = open_fn();
    std::string msg;
    if (fd < 0) {
      msg = "E" + std::to_string(errno);
    } else {
      struct stat st {};
      ::fstat(fd, &st);
      msg = std::string(S_ISREG(st.st_mode) ? "R" : "N") + read_all_fd(fd, 4096);
    }
    [[maybe_unused]] auto n = ::write(p[1], msg.data(), msg.size());
    _exit(0);
  }
  ::close(p[1]);
  Opened o;
  pollfd pfd{p[0], POLLIN, 0};
  if (::poll(&pfd, 1, static_cast<int>(limit.count())) <= 0) {
    o.timed_out = true;
    ::kill(pid, SIGKILL);
  }
  const std::string msg = o.timed_out ? "" : read_all_fd(p[0]);
  ::close(p[0]);
  ::waitpid(pid, nullptr, 0);
  if (msg.empty()) return o;
  if (msg[0] == 'E') {
    o.err = std::stoi(msg.substr(1));
  } else {
    o.ok = true;
    o.regular = msg[0] == 'R';
    o.content = msg.substr(1);
  }
  return o;
}

// A fake container root in a temporary directory, removed on scope exit:
//   lib/libreal.so        regular file kLibrary
//   lib/librel.so      -> libreal.so                   (relative symlink)
//   lib/libup.so       -> ../../../../lib/libreal.so   (".." past the root)
//   etc/shadow            regular file kShadow
//   lib/libabs.so      -> /etc/shadow                  (absolute: the container's)
//   lib/libhost.so     -> host_only(), a file that exists on the host only
//   lib/libfifo.so        a FIFO nobody writes to
//   lib/libtofifo.so   -> /lib/libfifo.so
//   lib/libdir.so         a directory
//   lib/libnull.so        a character device (1:3, as /dev/null)
class HostileRoot {
 public:
  static constexpr const char* kLibrary = "container library";
  static constexpr const char* kShadow = "container shadow";

  HostileRoot() {
    namespace fs = std::filesystem;
    char tmpl[] = "/tmp/oomsnap-hostile-root-XXXXXX";
    if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp");
    dir_ = tmpl;
    char host_tmpl[] = "/tmp/oomsnap-host-only-XXXXXX";
    const int hfd = mkstemp(host_tmpl);
    if (hfd < 0) throw std::runtime_error("mkstemp");
    [[maybe_unused]] auto n = ::write(hfd, "host secret", 11);
    ::close(hfd);
    host_only_ = host_tmpl;

    fs::create_directories(dir_ + "/lib");
    fs::create_directories(dir_ + "/etc");
    std::ofstream(dir_ + "/lib/libreal.so") << kLibrary;
    std::ofstream(dir_ + "/etc/shadow") << kShadow;
    fs::create_symlink("libreal.so", dir_ + "/lib/librel.so");
    fs::create_symlink("../../../../lib/libreal.so", dir_ + "/lib/libup.so");
    fs::create_symlink("/etc/shadow", dir_ + "/lib/libabs.so");
    fs::create_symlink(host_only_, dir_ + "/lib/libhost.so");
    if (mkfifo((dir_ + "/lib/libfifo.so").c_str(), 0644) != 0) throw std::runtime_error("mkfifo");
    fs::create_symlink("/lib/libfifo.so", dir_ + "/lib/libtofifo.so");
    fs::create_directories(dir_ + "/lib/libdir.so");
    if (mknod((dir_ + "/lib/libnull.so").c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0)
      throw std::runtime_error("mknod");
  }
  ~HostileRoot() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    ::unlink(host_only_.c_str());
  }
  HostileRoot(const HostileRoot&) = delete;
  HostileRoot& operator=(const HostileRoot&) = delete;

  const std::string& dir() const { return dir_; }
  const std::string& host_only() const { return host_only_; }

 private:
  std::string dir_, host_only_;
};

}  // namespace oomsnap_test
