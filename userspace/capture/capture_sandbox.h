// Runs each capture in a separate capture process (capture_child.h) that the
// parent can always get rid of: killed with SIGKILL at a hard deadline
// (budget + grace), capped in memory and CPU, holding none of the parent's
// descriptors, and answering through a socket whose bytes are parsed as
// hostile. Its stderr is a pipe the parent drains as it waits: at most a few
// KiB per capture reach the log, escaped (child_stderr.h). A helper is started ahead of time (prestart) so a capture does
// not wait for exec; each helper serves one capture and is then replaced.
//
// Threads: capture(), prestart() and set_options() from one thread (the
// agent's worker, or the CLI); cancel() from any thread.
#pragma once
#include <sys/types.h>
#include <atomic>
#include <chrono>
#include <functional>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "capture/capture.h"
#include "capture/capture_wire.h"
#include "capture/child_stderr.h"
#include "capture/last_gasp_capture.h"

namespace oomsnap {

struct SandboxOptions {
  std::string helper_path;                      // the capture process's executable; empty: /proc/self/exe
  std::chrono::milliseconds grace{1000};        // hard deadline = budget + grace
  uint64_t memory_bytes = 1ull << 30;         // the capture process's address-space cap
  // The whole result frame; the capture process cuts its result to fit
  // (capture/result_budget.h), and a larger frame is refused.
  uint64_t result_max_bytes = 4ull << 20;
  std::chrono::milliseconds max_budget{2000};   // the longest budget asked for: sets the CPU cap
  bool operator==(const SandboxOptions&) const = default;
};

class CaptureSandbox {
 public:
  // Where the capture processes' stderr lines go (escaped, one line each,
  // without a newline); empty: this process's stderr.
  using LogLine = std::function<void(const std::string&)>;
  explicit CaptureSandbox(SandboxOptions options, LogLine log = {});
  ~CaptureSandbox();  // kills the waiting helper
  CaptureSandbox(const CaptureSandbox&) = delete;
  CaptureSandbox& operator=(const CaptureSandbox&) = delete;

  // A helper waiting for its capture (idempotent). False + error when none
  // could be started; capture() then tries once more itself.
  bool prestart(std::string& error);
  // Like capture_process(): nullopt + error only when the pid does not
  // exist. When the capture process fails, the record's snapshot is
  // `failed` and process_failure says how (killed at the deadline, died by a
  // signal, over its memory or CPU cap, result over its cap or malformed).
  // A read that hangs is reported by the capture process after
  // options.stall_after (default: a quarter of the budget, 100-500 ms); the
  // capture then runs again, within the same budget, without the target's
  // userfaultfd mappings and the mapping the read hung in, and its snapshot
  // is `partial`, naming what was not read.
  std::optional<CaptureRecord> capture(pid_t pid, const CaptureOptions& options, std::string& error);
  // The last gasp's plan of pid (capture/last_gasp_capture.h), found in a
  // capture process. nullopt with why (not a Go 1.19+ program, gone, ...).
  std::optional<GoLastGaspPlan> plan_last_gasp(pid_t pid, const CaptureOptions& options, std::string& why);
  // The record of a last-gasp walk, decoded in a capture process, to which
  // exe_fd (the armed process's executable: an O_PATH descriptor is enough)
  // and the image go as descriptors. When the capture process fails, the
  // snapshot says failed and process_failure says how.
  CaptureRecord decode_last_gasp(const LastGaspDecodeRequest& request, const MemoryImage& image, int exe_fd,
                                 const CaptureOptions& options);
  // Ends the running capture now and every later one at once (shutdown).
  void cancel();
  // New limits for the next helper (a waiting one is replaced).
  void set_options(const SandboxOptions& options);

  pid_t helper_pid() const { return helper_.pid; }
  const SandboxOptions& options() const { return options_; }

 private:
  struct Attempt;
  // fds go with the request line (SCM_RIGHTS).
  Attempt run_once(const CaptureRequest& request, std::span<const int> fds = {});
  Attempt decode(pid_t pid, const std::string& frame, const CaptureOptions& options, const std::string& after);
  struct Helper {
    pid_t pid = -1;
    int sock = -1;  // request out, result in
    int err = -1;   // the child's stderr (non-blocking read end)
  };
  bool spawn(std::string& error);
  void discard_helper();  // SIGKILL + reap
  void reap_finished();   // helpers that answered and are exiting
  // Reads what the helper wrote to its stderr so far, without blocking;
  // closes the pipe at its end.
  void drain_stderr();
  void log_stderr(pid_t child);  // and forgets it: the cap is per capture
  // Waits for the result frame or the helper's end; fills frame and status.
  enum class Wait { kFrame, kExited, kDeadline, kCancelled, kTooLarge };
  Wait collect(std::chrono::steady_clock::time_point deadline, std::string& frame, int& wait_status);

  SandboxOptions options_;
  LogLine log_;
  Helper helper_;
  ChildStderr stderr_;
  std::vector<pid_t> finishing_;  // answered; reaped when they are gone
  int cancel_fd_ = -1;  // eventfd: wakes a capture waiting in poll
  std::atomic<bool> cancelled_{false};
};

}  // namespace oomsnap
