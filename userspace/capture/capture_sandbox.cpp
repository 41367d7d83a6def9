#include "capture/capture_sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "capture/capture_child.h"
#include "capture/capture_wire.h"
#include "capture/sandbox_policy.h"

namespace oomsnap {
namespace {

using Clock = std::chrono::steady_clock;

std::string seconds(Clock::duration d) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", std::chrono::duration<double>(d).count());
  return b;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string mib(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

uint64_t cpu_seconds_for(const SandboxOptions& o) {
  auto ms = (o.max_budget + o.grace).count();
  return static_cast<uint64_t>((ms + 999) / 1000) + 1;
}

// Moves fd to a number >= 10, so the dup2s onto 3 and 4 in the child cannot
// overwrite each other.
int high_fd(int fd) {
  int h = fcntl(fd, F_DUPFD_CLOEXEC, 10);
  ::close(fd);
  return h;
}

// Reaps pid, waiting at most until `until` (it was just killed, or closed its
// end: it is exiting). -1 when it did not.
int reap(pid_t pid, Clock::time_point until) {
  for (;;) {
    int st = 0;
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return st;
    if (r < 0 && errno != EINTR) return -1;
    if (Clock::now() >= until) return -1;
    usleep(1000);
  }
}

}  // namespace

CaptureSandbox::CaptureSandbox(SandboxOptions options) : options_(std::move(options)) {
  cancel_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

CaptureSandbox::~CaptureSandbox() {
  discard_helper();
  if (cancel_fd_ >= 0) ::close(cancel_fd_);
}

void CaptureSandbox::set_options(const SandboxOptions& options) {
  if (options == options_) return;
  options_ = options;
  discard_helper();
}

void CaptureSandbox::cancel() {
  cancelled_.store(true);
  uint64_t one = 1;
  if (cancel_fd_ >= 0 && ::write(cancel_fd_, &one, sizeof one) < 0) {
    // Nothing to do: cancelled_ is set, and a capture checks it at every wake-up.
  }
}

void CaptureSandbox::discard_helper() {
  if (helper_.pid > 0) {
    ::kill(helper_.pid, SIGKILL);
    if (reap(helper_.pid, Clock::now() + std::chrono::seconds(2)) < 0) {
      // A SIGKILLed process that is not gone in 2 s is stuck in the kernel;
      // leave it to init rather than block here.
    }
  }
  if (helper_.sock >= 0) ::close(helper_.sock);
  helper_ = Helper{};
}

bool CaptureSandbox::prestart(std::string& error) {
  if (helper_.pid > 0) return true;
  if (cancelled_.load()) {
    error = "the capture sandbox was cancelled";
    return false;
  }
  return spawn(error);
}

bool CaptureSandbox::spawn(std::string& error) {
  std::string path = options_.helper_path;
  if (path.empty()) {
    const char* env = std::getenv("OOMSNAP_CAPTURE_HELPER");
    path = env && *env ? env : "/proc/self/exe";
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    error = std::string("socketpair: ") + std::strerror(errno);
    return false;
  }
  int parent_end = high_fd(sv[0]), child_end = high_fd(sv[1]);
  if (parent_end < 0 || child_end < 0) {
    if (parent_end >= 0) ::close(parent_end);
    if (child_end >= 0) ::close(child_end);
    error = std::string("fcntl(F_DUPFD): ") + std::strerror(errno);
    return false;
  }
  std::vector<std::string> args = {path,
                                   kCaptureChildCommand,
                                   "--parent", std::to_string(getpid()),
                                   "--memory-max", std::to_string(options_.memory_bytes),
                                   "--cpu-seconds", std::to_string(cpu_seconds_for(options_)),
                                   "--grace-ms", std::to_string(options_.grace.count()),
                                   "--result-max", std::to_string(options_.result_max_bytes)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  char* envp[] = {nullptr};  // nothing of the agent's environment

  // posix_spawn (vfork-like, safe in a threaded parent): stdin and stdout on
  // /dev/null (stdout carries the agent's records), stderr kept for the
  // child's one-line complaints, the socket on 3 and 4, nothing else open.
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, child_end, kCaptureRequestFd);
  posix_spawn_file_actions_adddup2(&fa, child_end, kCaptureResultFd);
  posix_spawn_file_actions_addclosefrom_np(&fa, kCaptureResultFd + 1);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);      // the agent blocks signals in some threads
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, path.c_str(), &fa, &attr, argv.data(), envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(child_end);
  if (rc != 0) {
    ::close(parent_end);
    error = "cannot start the capture process " + path + ": " + std::strerror(rc);
    return false;
  }
  helper_ = Helper{pid, parent_end};
  return true;
}

CaptureSandbox::Wait CaptureSandbox::collect(Clock::time_point deadline, std::string& frame, int& wait_status) {
  const size_t cap = kResultHeaderBytes + options_.result_max_bytes;
  char buf[64 * 1024];
  bool eof = false;
  for (;;) {
    if (cancelled_.load()) return Wait::kCancelled;
    auto now = Clock::now();
    if (now >= deadline) return Wait::kDeadline;
    if (eof) {
      // The child closed its end: it is exiting (or wedged after closing).
      wait_status = reap(helper_.pid, deadline);
      if (wait_status < 0) return Wait::kDeadline;
      helper_.pid = -1;
      return Wait::kExited;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    pollfd p[2] = {{helper_.sock, POLLIN, 0}, {cancel_fd_, POLLIN, 0}};
    int n = poll(p, 2, static_cast<int>(left));
    if (n < 0 && errno != EINTR) return Wait::kDeadline;
    if (n <= 0) continue;
    if (p[1].revents) continue;  // cancelled_ is checked above
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t r = ::recv(helper_.sock, buf, sizeof buf, MSG_DONTWAIT);
      if (r > 0) {
        if (frame.size() + static_cast<size_t>(r) > cap) return Wait::kTooLarge;
        frame.append(buf, static_cast<size_t>(r));
      } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
        eof = true;
      }
    }
  }
}

std::optional<CaptureRecord> CaptureSandbox::capture(pid_t pid, const CaptureOptions& options, std::string& error) {
  auto identity = read_identity(pid);
  if (!identity) {
    error = "no process with pid " + std::to_string(pid) + " (cannot read /proc/" + std::to_string(pid) + "/stat)";
    return std::nullopt;
  }
  CaptureRecord failed;
  failed.identity = *identity;
  auto fail = [&](std::string why, std::string language = "unknown") {
    failed.process_memory = read_process_memory(pid);
    failed.result.language = language.empty() ? "unknown" : std::move(language);
    failed.result.snapshot.set_status(SnapshotStatus::kFailed, why);
    auto now = read_identity(pid);
    if (!now || now->start_time_ticks != identity->start_time_ticks || now->exited())
      mark_target_exited(failed.result.snapshot);
    failed.process_failure = failed.result.snapshot.reason;
    return std::optional<CaptureRecord>(std::move(failed));
  };
  if (cancelled_.load()) return fail("capture process not started: the agent is stopping");

  // Send the request; a helper that died while waiting is replaced once.
  const auto start = Clock::now();
  const std::string req = encode_request({pid, options});
  bool sent = false;
  for (int attempt = 0; attempt < 2 && !sent; ++attempt) {
    std::string why;
    if (!prestart(why)) return fail("capture process could not start: " + why);
    sent = ::send(helper_.sock, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size());
    if (!sent) discard_helper();
  }
  if (!sent) return fail("capture process did not take the request (it died twice before the capture)");

  const auto deadline = start + options.budget + options_.grace;
  std::string frame;
  int status = 0;
  Wait w = collect(deadline, frame, status);
  const std::string after = seconds(Clock::now() - start);
  if (w != Wait::kExited) {
    discard_helper();
    switch (w) {
      case Wait::kCancelled: return fail("capture process killed after " + after + ": the agent is stopping");
      case Wait::kTooLarge:
        return fail("capture process result refused: more than its " + mib(options_.result_max_bytes) + " cap");
      default:
        return fail("capture process killed after " + after + " (hard deadline " +
                    seconds(options.budget + options_.grace) + "): no result" +
                    (frame.empty() ? "" : " (only " + std::to_string(frame.size()) + " bytes of it)"));
    }
  }
  ::close(helper_.sock);
  helper_ = Helper{};

  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    if (sig == SIGXCPU) return fail("capture process exceeded its CPU time cap of " + std::to_string(cpu_seconds_for(options_)) + " s");
    if (sig == SIGSYS) return fail("capture process died: SIGSYS (a system call outside its seccomp allow-list)");
    return fail("capture process died: " + signal_name(sig));
  }
  const int code = WEXITSTATUS(status);
  if (code == kExitMemoryCap) return fail("capture process exceeded its " + mib(options_.memory_bytes) + " memory cap");
  if (code == kExitResultTooLarge)
    return fail("capture process result refused: more than its " + mib(options_.result_max_bytes) + " cap");
  if (code != 0) return fail("capture process exited with status " + std::to_string(code) + " without a result");

  std::string why;
  auto reply = decode_reply(frame, options, why);
  if (!reply) return fail("capture process wrote an invalid result: " + why);
  switch (reply->kind) {
    case CaptureReply::Kind::kNoTarget:
      error = reply->message;
      return std::nullopt;
    case CaptureReply::Kind::kStalled:
      return fail("capture process stopped after " + after + ": " + reply->message, reply->language);
    case CaptureReply::Kind::kRecord: break;
  }
  if (reply->record->identity.pid != pid) return fail("capture process wrote an invalid result: a record of another pid");
  return std::move(reply->record);
}

}  // namespace oomsnap
