// The capture process: `oomsnap __capture-child ...`, started (and replaced
// after each capture) by CaptureSandbox. It locks itself down (sandbox_policy.h),
// waits for one request on fd 3, runs the in-process capture path and writes
// one result frame to fd 4. A watchdog thread writes a "stalled" result at the
// cooperative deadline + half the grace when the capture has not finished (a
// read that never returns); the parent's SIGKILL at deadline + grace covers
// the rest.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "capture/capture_wire.h"
#include "core/target.h"

namespace oomsnap {

inline constexpr const char* kCaptureChildCommand = "__capture-child";
inline constexpr int kCaptureRequestFd = 3;
inline constexpr int kCaptureResultFd = 4;

// For the test build of the helper only (tests/capture_hooks).
struct CaptureChildHooks {
  // After the request is read and process_vm_readv is pinned to its pid,
  // before the target is opened (file opens still allowed, read-only).
  std::function<void(const CaptureRequest&)> target_named;
  // Once the target is open (nullptr: it could not be) and the sandbox is
  // complete, before the capture.
  std::function<void(const CaptureRequest&, Target*)> confined;
};

// args: what follows the command word. Returns the exit status.
int run_capture_child(const std::vector<std::string>& args, const CaptureChildHooks& hooks = {});

}  // namespace oomsnap
