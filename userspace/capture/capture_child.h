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

namespace oomsnap {

inline constexpr const char* kCaptureChildCommand = "__capture-child";
inline constexpr int kCaptureRequestFd = 3;
inline constexpr int kCaptureResultFd = 4;

// For the test build of the helper only (tests/capture_hooks): runs after the
// request is read and the sandbox is in place, before the capture.
using CaptureChildHook = std::function<void(const CaptureRequest&)>;

// args: what follows the command word. Returns the exit status.
int run_capture_child(const std::vector<std::string>& args, const CaptureChildHook& hook = {});

}  // namespace oomsnap
