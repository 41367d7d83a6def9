// One interface for every language runtime (Go, CPython, HotSpot Java, Node.js).
// A collector reads the target from outside: never writes, stops or attaches.
#pragma once
#include <sys/types.h>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/capture_options.h"
#include "core/memory_breakdown.h"
#include "core/remote_memory.h"
#include "core/snapshot.h"
#include "core/target.h"

namespace oomsnap {

// Cooperative deadline: loops check it between batches.
class Deadline {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Deadline(std::chrono::milliseconds budget) : end_(Clock::now() + budget) {}
  bool expired() const { return Clock::now() >= end_; }
  Clock::duration remaining() const { return std::max(end_ - Clock::now(), Clock::duration::zero()); }
 private:
  Clock::time_point end_;
};

// Whether a walk that the runtime overlapped (a collection moved objects, a
// list changed under it) is done again: while fewer than max_walks were
// made and the deadline leaves room for two more as long as the last (the
// next, and what follows it). A busy runtime changes its heap every few
// hundred ms, a walk takes tens to hundreds: one of the next usually fits.
inline bool room_for_another_walk(const Deadline& deadline, Deadline::Clock::duration last_walk, unsigned walks,
                                  unsigned max_walks) {
  return walks < max_walks && deadline.remaining() >= 2 * last_walk;
}

// Measures one capture: its duration and the reads it cost, from construction
// to finish(), written into the snapshot (every collector reports both).
class CaptureMeter {
 public:
  explicit CaptureMeter(const RemoteMemory& mem)
      : mem_(mem), t0_(std::chrono::steady_clock::now()), syscalls0_(mem.syscalls()), bytes0_(mem.bytes_read()) {}
  void finish(Snapshot& s) const {
    s.duration_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
    s.read_syscalls = mem_.syscalls() - syscalls0_;
    s.bytes_read = mem_.bytes_read() - bytes0_;
  }

 private:
  const RemoteMemory& mem_;
  std::chrono::steady_clock::time_point t0_;
  uint64_t syscalls0_, bytes0_;
};

struct CaptureResult {
  std::string language = "unknown";  // "go", "java", "python", "node", "unknown"
  Snapshot snapshot;
  std::optional<std::string> pprof;  // gzipped profile.proto when asked for and possible
  std::optional<std::string> recent_pprof;  // the same for snapshot.recent (Go)
  // What the runtime says it owns of the process's memory (goroutine stacks,
  // a Java heap): applied to the breakdown in the capture process, never sent.
  std::vector<MemoryClaim> memory_claims;
  // What the runtime could not claim and why (a range in no mapping, a count
  // beyond its range): added to the breakdown's reason.
  std::string memory_claims_reason;
};

// The result a collect() builds, with its meter and deadline: every
// collector's collect() starts with one and returns finish().
struct CaptureRun {
  CaptureRun(Target& target, const char* language, const CaptureOptions& opts);
  CaptureRun(RemoteMemory& memory, const char* language, const CaptureOptions& opts);
  CaptureResult finish() {
    meter.finish(out.snapshot);
    return std::move(out);
  }
  CaptureResult out;
  CaptureMeter meter;
  Deadline deadline;
};

inline CaptureRun::CaptureRun(RemoteMemory& memory, const char* language, const CaptureOptions& opts)
    : meter(memory), deadline(opts.budget) {
  out.language = language;
}
inline CaptureRun::CaptureRun(Target& target, const char* language, const CaptureOptions& opts)
    : CaptureRun(target.memory(), language, opts) {}

class Collector {
 public:
  virtual ~Collector() = default;
  virtual const char* language() const = 0;
  // Cheap: is this the collector's runtime? Must not throw.
  virtual bool detect(Target& target) = 0;
  // The mappings whose files it reads (Target::open_mapping): Target::open
  // opens those, before the capture process gives up opening files
  // (capture/sandbox_policy.h). The executable needs none (Target::exe_fd).
  virtual bool reads_mapped_file(const Mapping&) const { return false; }
  // Never throws for target-side trouble: it becomes status + reason.
  virtual CaptureResult collect(Target& target, const CaptureOptions& options) = 0;
};

}  // namespace oomsnap
