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
#include <algorithm>
#include <cstring>
#include <vector>

#include "base/text.h"
#include "base/unique_fd.h"
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

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// Runs of the capture process per capture when reads stall: the first, and
// retries each without the ranges that stalled so far.
constexpr int kMaxStallRetries = 3;

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
    usleep(200);
  }
}

}  // namespace

CaptureSandbox::CaptureSandbox(SandboxOptions options, LogLine log)
    : options_(std::move(options)), log_(std::move(log)) {
  cancel_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

CaptureSandbox::~CaptureSandbox() {
  discard_helper();
  for (pid_t p : finishing_) {
    ::kill(p, SIGKILL);
    reap(p, Clock::now() + std::chrono::seconds(2));
  }
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
  drain_stderr();
  if (helper_.pid > 0) log_stderr(helper_.pid);
  if (helper_.sock >= 0) ::close(helper_.sock);
  if (helper_.err >= 0) ::close(helper_.err);
  helper_ = Helper{};
}

void CaptureSandbox::drain_stderr() {
  // Bounded per call, so a child that writes as fast as it can cannot keep
  // the parent here; the rest waits for the next wake-up (or is dropped with
  // the pipe).
  char buf[16 * 1024];
  for (int i = 0; i < 64 && helper_.err >= 0; ++i) {
    const ssize_t n = ::read(helper_.err, buf, sizeof buf);
    if (n > 0) {
      stderr_.add(std::string_view(buf, static_cast<size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    ::close(helper_.err);  // its end is closed: the child is gone
    helper_.err = -1;
  }
}

void CaptureSandbox::log_stderr(pid_t child) {
  for (const auto& line : stderr_.take_lines(child)) {
    if (log_) log_(line);
    else std::fprintf(stderr, "%s\n", line.c_str());
  }
}

void CaptureSandbox::reap_finished() {
  std::erase_if(finishing_, [](pid_t p) {
    int st = 0;
    pid_t r = waitpid(p, &st, WNOHANG);
    return r == p || (r < 0 && errno == ECHILD);
  });
  // One that answered but has not exited since the last capture is stuck
  // (exiting never takes that long): make sure.
  for (pid_t p : finishing_) ::kill(p, SIGKILL);
}

bool CaptureSandbox::prestart(std::string& error) {
  if (!finishing_.empty()) reap_finished();
  if (helper_.pid > 0) return true;
  if (cancelled_.load()) {
    error = "the capture sandbox was cancelled";
    return false;
  }
  return spawn(error);
}

bool CaptureSandbox::spawn(std::string& error) {
  // The caller picks the executable (tests: a misbehaving one); the sandbox
  // reads no environment, so nothing outside the caller can swap it.
  const std::string path = options_.helper_path.empty() ? "/proc/self/exe" : options_.helper_path;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    error = std::string("socketpair: ") + std::strerror(errno);
    return false;
  }
  int ep[2];
  if (pipe2(ep, O_CLOEXEC) != 0) {
    error = std::string("pipe2: ") + std::strerror(errno);
    ::close(sv[0]);
    ::close(sv[1]);
    return false;
  }
  int parent_end = high_fd(sv[0]), child_end = high_fd(sv[1]);
  int err_read = high_fd(ep[0]), err_write = high_fd(ep[1]);
  if (parent_end < 0 || child_end < 0 || err_read < 0 || err_write < 0 ||
      fcntl(err_read, F_SETFL, O_NONBLOCK) != 0) {
    error = std::string("fcntl: ") + std::strerror(errno);
    for (int fd : {parent_end, child_end, err_read, err_write})
      if (fd >= 0) ::close(fd);
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
  // /dev/null (stdout carries the agent's records), stderr a pipe to the
  // parent (never the agent's own stderr: what the child writes is hostile),
  // the socket on 3 and 4, nothing else open.
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, err_write, STDERR_FILENO);
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
  ::close(err_write);
  if (rc != 0) {
    ::close(parent_end);
    ::close(err_read);
    error = "cannot start the capture process " + path + ": " + std::strerror(rc);
    return false;
  }
  helper_ = Helper{pid, parent_end, err_read};
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
    pollfd p[3] = {{helper_.sock, POLLIN, 0}, {cancel_fd_, POLLIN, 0}, {helper_.err, POLLIN, 0}};
    int n = poll(p, 3, static_cast<int>(left));
    if (n < 0 && errno != EINTR) return Wait::kDeadline;
    if (n <= 0) continue;
    if (p[2].revents) drain_stderr();  // kept empty, so the child never blocks on it
    if (p[1].revents) continue;  // cancelled_ is checked above
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t r = ::recv(helper_.sock, buf, sizeof buf, MSG_DONTWAIT);
      if (r > 0) {
        if (frame.size() + static_cast<size_t>(r) > cap) return Wait::kTooLarge;
        frame.append(buf, static_cast<size_t>(r));
        // The whole frame is here: no need to wait for the child's exit.
        const size_t want = declared_frame_size(frame);
        // Room for the frame at once: growing by doubling would hold up to
        // twice the cap while it copies.
        if (want > frame.capacity() && want <= cap) frame.reserve(want);
        if (want && frame.size() == want) return Wait::kFrame;
      } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
        eof = true;
      }
    }
  }
}

// One run of the capture process: the record, or why there is none.
struct CaptureSandbox::Attempt {
  std::optional<CaptureRecord> record;  // the child's record
  bool no_target = false;               // the child found no such process (message)
  bool stalled = false;                 // the child reported a hung read (message, stalled_addr)
  uint64_t stalled_addr = 0;
  std::string language;                 // stalled: the collector that had the target
  std::string message;                  // otherwise: how the capture process failed
  std::optional<GoLastGaspPlan> last_gasp_plan;  // a plan request's
};

namespace {

// The request line, with fds as SCM_RIGHTS on its first byte.
bool send_request(int sock, const std::string& req, std::span<const int> fds) {
  if (fds.empty()) return ::send(sock, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size());
  iovec iov{const_cast<char*>(req.data()), req.size()};
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  return ::sendmsg(sock, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(req.size());
}

}  // namespace

CaptureSandbox::Attempt CaptureSandbox::run_once(const CaptureRequest& request, std::span<const int> fds) {
  const pid_t pid = request.pid;
  const CaptureOptions& options = request.options;
  Attempt a;
  if (cancelled_.load()) {
    a.message = "capture process not started: the agent is stopping";
    return a;
  }
  // Send the request; a helper that died while waiting is replaced once.
  const auto start = Clock::now();
  const std::string req = encode_request(request);
  bool sent = false;
  for (int attempt = 0; attempt < 2 && !sent; ++attempt) {
    std::string why;
    if (!prestart(why)) {
      a.message = "capture process could not start: " + why;
      return a;
    }
    sent = send_request(helper_.sock, req, fds);
    if (!sent) discard_helper();
  }
  if (!sent) {
    a.message = "capture process did not take the request (it died twice before the capture)";
    return a;
  }

  const auto deadline = start + options.budget + options_.grace;
  const pid_t child = helper_.pid;  // collect() forgets it once reaped
  std::string frame;
  int status = 0;
  Wait w = collect(deadline, frame, status);
  const std::string after = seconds(Clock::now() - start);
  if (w == Wait::kFrame) {
    // Answered: it exits by itself; reaped at the next capture. It wrote to
    // its stderr before its result, so all of that is in the pipe now.
    finishing_.push_back(helper_.pid);
    drain_stderr();
    log_stderr(child);
    ::close(helper_.sock);
    if (helper_.err >= 0) ::close(helper_.err);
    helper_ = Helper{};
    return decode(pid, frame, options, after);
  }
  if (w != Wait::kExited) {
    discard_helper();
    if (w == Wait::kCancelled) a.message = "capture process killed after " + after + ": the agent is stopping";
    else if (w == Wait::kTooLarge)
      a.message = "capture process result refused: more than its " + mib(options_.result_max_bytes) + " cap";
    else
      a.message = "capture process killed after " + after + " (hard deadline " +
                  seconds(options.budget + options_.grace) + "): no result" +
                  (frame.empty() ? "" : " (only " + std::to_string(frame.size()) + " bytes of it)");
    return a;
  }
  drain_stderr();
  log_stderr(child);
  ::close(helper_.sock);
  if (helper_.err >= 0) ::close(helper_.err);
  helper_ = Helper{};

  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    if (sig == SIGXCPU)
      a.message = "capture process exceeded its CPU time cap of " + std::to_string(cpu_seconds_for(options_)) + " s";
    else if (sig == SIGSYS)
      a.message = "capture process died: SIGSYS (a system call outside its seccomp allow-list)";
    else
      a.message = "capture process died: " + signal_name(sig);
    return a;
  }
  const int code = WEXITSTATUS(status);
  if (code == kExitMemoryCap) {
    a.message = "capture process exceeded its " + mib(options_.memory_bytes) + " memory cap";
    return a;
  }
  if (code == kExitResultTooLarge) {
    a.message = "capture process result refused: more than its " + mib(options_.result_max_bytes) + " cap";
    return a;
  }
  if (code != 0) {
    a.message = "capture process exited with status " + std::to_string(code) + " without a result";
    return a;
  }
  return decode(pid, frame, options, after);
}

CaptureSandbox::Attempt CaptureSandbox::decode(pid_t pid, const std::string& frame, const CaptureOptions& options,
                                               const std::string& after) {
  Attempt a;
  std::string why;
  auto reply = decode_reply(frame, options, why);
  if (!reply) {
    a.message = "capture process wrote an invalid result: " + why;
    return a;
  }
  switch (reply->kind) {
    case CaptureReply::Kind::kNoTarget:
      a.no_target = true;
      a.message = reply->message;
      break;
    case CaptureReply::Kind::kStalled:
      a.stalled = true;
      a.stalled_addr = reply->stalled_addr;
      a.language = reply->language;
      a.message = "capture process stopped after " + after + ": " + reply->message;
      break;
    case CaptureReply::Kind::kRecord:
      if (reply->record->identity.pid != pid) {
        a.message = "capture process wrote an invalid result: a record of another pid";
      } else {
        a.record = std::move(reply->record);
        a.last_gasp_plan = std::move(reply->last_gasp_plan);
      }
      break;
  }
  return a;
}

std::optional<CaptureRecord> CaptureSandbox::capture(pid_t pid, const CaptureOptions& options, std::string& error) {
  auto identity = read_identity(pid);
  if (!identity) {
    error = "no process with pid " + std::to_string(pid) + " (cannot read /proc/" + std::to_string(pid) + "/stat)";
    return std::nullopt;
  }
  auto target_gone = [&] {
    auto now = read_identity(pid);
    return !now || now->start_time_ticks != identity->start_time_ticks || now->exited();
  };
  auto fail = [&](std::string why, std::string language) {
    CaptureRecord failed;
    failed.identity = *identity;
    failed.process_memory = read_process_memory(pid);
    failed.result.language = language.empty() ? "unknown" : std::move(language);
    failed.result.snapshot.set_status(SnapshotStatus::kFailed, std::move(why));
    if (target_gone()) mark_target_exited(failed.result.snapshot);
    failed.process_failure = failed.result.snapshot.reason;
    return std::optional<CaptureRecord>(std::move(failed));
  };

  // A read that hangs (a userfaultfd or FUSE page nobody serves) is reported
  // by the capture process after stall_after; while budget is left, the
  // capture runs again without the ranges that can hang, and says so.
  const auto coop_end = Clock::now() + options.budget;
  CaptureOptions opts = options;
  if (opts.stall_after.count() == 0)
    opts.stall_after = std::clamp(options.budget / 4, std::chrono::milliseconds(100), std::chrono::milliseconds(500));
  std::vector<std::string> skipped;
  for (int run = 0;; ++run) {
    Attempt a = run_once({pid, opts});
    if (a.record) {
      CaptureRecord rec = std::move(*a.record);
      if (!skipped.empty()) {
        Snapshot& s = rec.result.snapshot;
        std::string note = "not read: " + join(skipped) + " (reads there stalled: userfaultfd or FUSE pages nobody serves?)";
        if (s.status == SnapshotStatus::kComplete) s.status = SnapshotStatus::kPartial;
        s.reason = s.reason.empty() ? note : note + "; " + s.reason;
      }
      return rec;
    }
    if (a.no_target) {
      error = a.message;
      return std::nullopt;
    }
    const auto left = coop_end - Clock::now();
    if (!a.stalled || run >= kMaxStallRetries || left < std::chrono::milliseconds(50) || target_gone())
      return fail(a.message, a.language);
    // Skip every mapping registered with userfaultfd, and the one the read hung in.
    size_t before = opts.skip_ranges.size();
    auto add = [&](AddressRange r, const std::string& what) {
      for (const auto& have : opts.skip_ranges)
        if (have.start == r.start && have.end == r.end) return;
      if (opts.skip_ranges.size() >= kMaxSkipRanges) return;
      opts.skip_ranges.push_back(r);
      skipped.push_back(hex(r.start) + "-" + hex(r.end) + (what.empty() ? "" : " (" + what + ")"));
    };
    for (const auto& r : read_userfaultfd_ranges(pid)) add(r, "userfaultfd");
    if (a.stalled_addr) {
      for (const auto& m : read_maps(pid))
        if (a.stalled_addr >= m.start && a.stalled_addr < m.end) add({m.start, m.end}, m.path);
    }
    if (opts.skip_ranges.size() == before) return fail(a.message, a.language);  // nothing new to avoid
    opts.budget = std::chrono::duration_cast<std::chrono::milliseconds>(left);
  }
}

std::optional<GoLastGaspPlan> CaptureSandbox::plan_last_gasp(pid_t pid, const CaptureOptions& options,
                                                             std::string& why) {
  CaptureRequest req{pid, options, CaptureKind::kLastGaspPlan, std::nullopt};
  Attempt a = run_once(req);
  if (a.last_gasp_plan) return std::move(a.last_gasp_plan);
  why = a.record ? a.record->result.snapshot.reason : a.message;
  return std::nullopt;
}

CaptureRecord CaptureSandbox::decode_last_gasp(const LastGaspDecodeRequest& request, const MemoryImage& image,
                                               int exe_fd, const CaptureOptions& options) {
  auto failed = [&](std::string why) {
    CaptureRecord rec;
    rec.identity = request.identity;
    rec.process_memory.status = "the process was gone: read in it at its kill (last gasp)";
    rec.result.language = "go";
    rec.result.snapshot.source = "last_gasp";
    rec.result.snapshot.set_status(SnapshotStatus::kFailed, why);
    rec.process_failure = std::move(why);
    return rec;
  };
  std::string why;
  UniqueFd memfd(image_to_memfd(image, why));
  if (memfd.get() < 0) return failed("last gasp: " + why);
  CaptureRequest req{request.identity.pid, options, CaptureKind::kLastGaspDecode, request};
  const int fds[2] = {exe_fd, memfd.get()};
  Attempt a = run_once(req, fds);
  if (a.record) return std::move(*a.record);
  return failed(a.message);
}

}  // namespace oomsnap
