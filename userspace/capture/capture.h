// The one capture path shared by `oomsnap snapshot --pid` and the agent:
// identify the process, summarise its memory, pick the collector for its
// runtime, capture, and say "target exited" the same way for every runtime.
// It sits above the collectors (core/ knows none of them); the sandbox
// (capture_sandbox.h) runs it in a separate, killable process.
#pragma once
#include <sys/types.h>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "capture/capture_record.h"
#include "core/collector.h"
#include "core/target.h"

namespace oomsnap {

// Every collector, in detection order.
std::vector<std::unique_ptr<Collector>> make_collectors();
// Opens pid as a capture needs it: with the mapped files some collector
// reads (Collector::reads_mapped_file), and no others.
std::unique_ptr<Target> open_capture_target(pid_t pid, std::string& error);

// In this process. nullopt (and error) only when the process does not exist
// or cannot be read at all; every other trouble is a status + reason inside
// the record. A target that is gone after the capture turns "unavailable"
// into "failed" and says "target exited" in the reason, whatever the runtime.
std::optional<CaptureRecord> capture_process(pid_t pid, const CaptureOptions& options, std::string& error);
// The same for a target already open (the capture process opens it before
// it gives up opening files: sandbox_policy.h); reads its files through it.
CaptureRecord capture_target(Target& target, const CaptureOptions& options);

// capture_process, or CaptureSandbox::capture: how a caller captures a pid.
using CaptureFn = std::function<std::optional<CaptureRecord>(pid_t, const CaptureOptions&, std::string&)>;

// The rule above, for a snapshot of a target that is no longer there.
void mark_target_exited(Snapshot& s);

}  // namespace oomsnap
