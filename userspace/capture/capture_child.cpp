#include "capture/capture_child.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include <CLI/CLI.hpp>

#include "base/text.h"
#include "capture/capture.h"
#include "capture/oom_victim.h"
#include "capture/result_budget.h"
#include "capture/last_gasp_capture.h"
#include "capture/sandbox_policy.h"

namespace oomsnap {
namespace {

struct ChildArgs {
  pid_t parent = 0;
  SandboxLimits limits;
  std::chrono::milliseconds grace{1000};
  uint64_t result_max = 4ull << 20;
};

// The agent's own arguments for the child (capture_sandbox.cpp); anything
// else is refused, as a command line only the agent writes.
bool parse_args(const std::vector<std::string>& args, ChildArgs& a) {
  CLI::App app("", kCaptureChildCommand);
  uint64_t grace_ms = static_cast<uint64_t>(a.grace.count());
  app.add_option("--parent", a.parent)->required()->check(CLI::PositiveNumber);
  app.add_option("--memory-max", a.limits.memory_bytes);
  app.add_option("--cpu-seconds", a.limits.cpu_seconds);
  app.add_option("--grace-ms", grace_ms);
  app.add_option("--result-max", a.result_max);
  try {
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));
  } catch (const CLI::ParseError&) {
    return false;
  }
  a.grace = std::chrono::milliseconds(grace_ms);
  return true;
}

uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

bool write_all(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// The request line, read whole (it is small), and the descriptors sent with
// it (a last-gasp decode's executable and image; at most kMaxRequestFds, the
// rest closed); empty on EOF or error.
constexpr size_t kMaxRequestFds = 2;
std::string read_request_line(std::vector<UniqueFd>& fds) {
  std::string line;
  char buf[4096];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxRequestFds)];
  while (line.size() < kMaxRequestLine && line.find('\n') == std::string::npos) {
    iovec iov{buf, sizeof buf};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = ::recvmsg(kCaptureRequestFd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        fds.emplace_back(fd);  // kept or closed (UniqueFd) either way
      }
    }
    if (n <= 0) return {};
    line.append(buf, static_cast<size_t>(n));
  }
  if (fds.size() > kMaxRequestFds) fds.resize(kMaxRequestFds);
  return line;
}

// A last-gasp decode (the target is gone): the executable, reopened readable
// from the agent's O_PATH descriptor, and the image, read now, before the
// last filter takes opens away. The record, or why there is none.
std::optional<CaptureRecord> decode_last_gasp_request(const CaptureRequest& req, std::vector<UniqueFd>& fds,
                                                      std::string& error) {
  if (!req.last_gasp || fds.size() != 2) {
    error = "a last-gasp decode without its executable and image";
    return std::nullopt;
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fds[0].get());
  UniqueFd exe(::openat(AT_FDCWD, path.c_str(), O_RDONLY | O_CLOEXEC));
  if (exe.get() < 0) {
    error = "cannot reopen the executable: " + errno_text(errno);
    return std::nullopt;
  }
  constexpr uint64_t kMaxImageBytes = uint64_t{320} << 20;  // the agent keeps at most 256 MiB of images
  auto image = image_from_fd(fds[1].get(), kMaxImageBytes, error);
  fds.clear();
  if (!image) return std::nullopt;
  std::string why;
  if (!load_confinement_filter(why)) {
    std::fprintf(stderr, "oomsnap capture process: %s\n", why.c_str());
    _exit(3);
  }
  return decode_last_gasp(*req.last_gasp, std::move(image), exe.get(), req.options);
}

// Exactly one of the capture thread and the watchdog writes the result.
class ResultGate {
 public:
  bool claim() { return !claimed_.exchange(true); }

 private:
  std::atomic<bool> claimed_{false};
};

// Started before the seccomp filter, so that starting it cannot fail under
// the filter; armed with the deadline once a request arrives. Reports (and
// ends the process) at the deadline, or as soon as one read has hung for
// stall_after: the parent can then retry without that range while budget
// is left.
class Watchdog {
 public:
  Watchdog(CaptureProgress& progress, ResultGate& gate) : progress_(progress), gate_(gate) {
    thread_ = std::thread([this] { run(); });
    thread_.detach();  // the process ends with _exit, never by joining it
  }
  void arm(std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds stall_after) {
    {
      std::lock_guard<std::mutex> l(mu_);
      deadline_ = deadline;
      stall_after_ns_ = static_cast<uint64_t>(std::chrono::nanoseconds(stall_after).count());
      armed_ = true;
    }
    cv_.notify_one();
  }

 private:
  void run() {
    constexpr auto kPoll = std::chrono::milliseconds(20);
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return armed_; });
    for (;;) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline_) break;
      cv_.wait_until(l, std::min(deadline_, now + kPoll), [] { return false; });
      const uint64_t since = progress_.read.since_ns.load(std::memory_order_acquire);
      if (stall_after_ns_ && since && now_ns() - since > stall_after_ns_) break;
    }
    if (!gate_.claim()) return;  // the capture is writing its result
    CaptureReply r;
    r.kind = CaptureReply::Kind::kStalled;
    const char* lang = progress_.language.load(std::memory_order_acquire);
    r.language = lang ? lang : "";
    const uint64_t since = progress_.read.since_ns.load(std::memory_order_acquire);
    if (since) {
      r.stalled_addr = progress_.read.addr.load();
      const double stuck_s = static_cast<double>(now_ns() - since) / 1e9;
      char secs[32];
      std::snprintf(secs, sizeof secs, "%.1f", stuck_s);
      r.message = "target read stalled: process_vm_readv at " + hex(progress_.read.addr.load()) + " (" +
                  std::to_string(progress_.read.len.load()) + " bytes) blocked for " + secs +
                  " s (a page of a userfaultfd, FUSE or NFS mapping nobody serves?)";
    } else {
      r.message = "the capture did not finish by its deadline (no target read in flight)";
    }
    write_all(kCaptureResultFd, encode_reply(r));
    _exit(0);  // exit_group also ends the capture thread's killable wait
  }

  CaptureProgress& progress_;
  ResultGate& gate_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false;
  std::chrono::steady_clock::time_point deadline_;
  uint64_t stall_after_ns_ = 0;
  std::thread thread_;
};

}  // namespace

int run_capture_child(const std::vector<std::string>& args, const CaptureChildHooks& hooks) {
  ChildArgs a;
  if (!parse_args(args, a)) {
    std::fputs("oomsnap __capture-child: bad arguments (started by the agent, not by hand)\n", stderr);
    return 2;
  }
  // Never outlive the parent (the agent or the CLI that waits for us).
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != a.parent) return 0;
  prctl(PR_SET_NAME, "oomsnap-capture");  // not "exe" in ps and audit logs

  std::string why;
  if (!become_first_oom_victim(why) || !apply_limits(a.limits, why) || !drop_capabilities(why)) {
    std::fprintf(stderr, "oomsnap capture process: %s\n", why.c_str());
    return 3;
  }
  // From here on every path ends in _exit: the detached watchdog uses these.
  CaptureProgress progress;
  ResultGate gate;
  Watchdog watchdog(progress, gate);
  if (!load_seccomp_filter(kCaptureResultFd, 0, why)) {
    std::fprintf(stderr, "oomsnap capture process: %s\n", why.c_str());
    _exit(3);
  }

  std::vector<UniqueFd> fds;
  std::string line = read_request_line(fds);
  if (line.empty()) _exit(0);  // replaced or shutting down: nothing asked
  auto req = decode_request(line.substr(0, line.find('\n')), why);
  if (!req) {
    std::fprintf(stderr, "oomsnap capture process: bad request: %s\n", why.c_str());
    _exit(2);
  }
  // Now that the target is known, a second filter (filters stack: each can
  // only take away) pins process_vm_readv to it; a decode reads no process.
  const bool decode = req->kind == CaptureKind::kLastGaspDecode;
  if (!load_seccomp_filter(kCaptureResultFd, decode ? kNoTargetPid : req->pid, why)) {
    std::fprintf(stderr, "oomsnap capture process: %s\n", why.c_str());
    _exit(3);
  }
  // Armed before the target's files are opened: an open can hang as a read
  // can (a mapped file on a FUSE mount nobody serves).
  const auto half_grace = std::max(a.grace / 2, std::chrono::milliseconds(100));
  watchdog.arm(std::chrono::steady_clock::now() + req->options.budget + half_grace, req->options.stall_after);
  if (hooks.target_named) hooks.target_named(*req);
  CaptureOptions opts = req->options;
  opts.progress = &progress;
  CaptureReply reply;
  std::optional<CaptureRecord> rec;
  std::string error;
  if (decode) {
    rec = decode_last_gasp_request(*req, fds, error);
  } else {
    fds.clear();  // only a decode takes descriptors
    // Every file the capture reads, opened now (core/target.h); then the last
    // filter takes file opens away before anything of the target is read.
    auto target = open_capture_target(req->pid, error);
    if (!load_confinement_filter(why)) {
      std::fprintf(stderr, "oomsnap capture process: %s\n", why.c_str());
      _exit(3);
    }
    if (hooks.confined) hooks.confined(*req, target.get());
    if (target && req->kind == CaptureKind::kLastGaspPlan) {
      rec.emplace();
      rec->identity = target->identity();
      rec->result.language = "go";
      std::string plan_why;
      reply.last_gasp_plan = plan_go_last_gasp(*target, opts, plan_why);
      if (reply.last_gasp_plan) rec->result.snapshot.set_status(SnapshotStatus::kComplete, "");
      else rec->result.snapshot.set_status(SnapshotStatus::kUnavailable, "no last gasp: " + plan_why);
    } else if (target) {
      rec = capture_target(*target, opts);
    }
  }
  if (rec) {
    fit_result_budget(*rec, result_budget_for(*rec, a.result_max));
    reply.kind = CaptureReply::Kind::kRecord;
    reply.record = std::move(rec);
  } else {
    reply.kind = CaptureReply::Kind::kNoTarget;
    reply.message = error;
  }
  std::string frame = encode_reply(reply);
  if (!gate.claim())  // the watchdog is writing; it exits the process
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  if (frame.size() > a.result_max) _exit(kExitResultTooLarge);
  _exit(write_all(kCaptureResultFd, frame) ? 0 : 1);
}

}  // namespace oomsnap
