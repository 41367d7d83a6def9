// The last gasp's kernel side: loads bpf/last_gasp.bpf.c (skeleton
// last_gasp.skel.h), arms Go processes with what their walk needs
// (core/last_gasp.h, resolved by go/go_last_gasp.h), and assembles each walk
// the program sends at a process's SIGKILL from its two ring buffers.
//
// Ordering: the program sends BEGIN (lg_control), the buckets (lg_buckets),
// then END (lg_control). consume() reads lg_control first and lg_buckets
// after, then applies what lg_control said: every bucket committed before an
// END it read is in by then.
//
// Bounded: a walk is capped in the kernel (Limits::max_buckets); the images
// waiting for their END are capped together (Limits::max_pending_bytes: past
// it, buckets are dropped and the walk says so); a walk whose END never came
// (lg_control full) is given up after Limits::end_timeout.
//
// Kernel prerequisites, probed by open(): BTF, the BPF ring buffer, and
// bpf_loop (5.17+). Without them open() says why and the agent runs without
// the last gasp. Not thread-safe: one thread calls everything.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/last_gasp.h"
#include "last_gasp_events.h"

struct last_gasp_bpf;
struct ring_buffer;

namespace oomsnap {

class LastGaspSource {
 public:
  struct Limits {
    uint32_t max_buckets = 20000;  // per walk: ~15 ms of the dying task's time at ~0.7 µs a bucket
    uint64_t max_pending_bytes = uint64_t{256} << 20;
    std::chrono::milliseconds end_timeout{5000};
    // Raw tracepoint first, the tracepoint (tracefs) when it fails; or only one.
    enum class Attach { kAuto, kRawTracepoint, kTracepoint } attach = Attach::kAuto;
  };
  // nullptr with why when the kernel cannot run the program.
  static std::unique_ptr<LastGaspSource> open(const Limits& limits, std::string& why);
  ~LastGaspSource();
  LastGaspSource(const LastGaspSource&) = delete;
  LastGaspSource& operator=(const LastGaspSource&) = delete;

  // How the program is attached (raw tracepoint or tracepoint, and why).
  const std::string& description() const { return description_; }
  // Reads pid's heap profile at its SIGKILL from now on (once).
  // start_time_ticks (ProcessIdentity's): a process of that pid started at
  // another time is not read (the pid reused before disarm); 0: not checked.
  bool arm(pid_t pid, uint64_t start_time_ticks, const LastGaspArm& arm, std::string& why);
  bool armed(pid_t pid) const { return armed_.count(pid) != 0; }
  // A walk of pid begun (BEGIN read) whose END has not come yet.
  bool walking(pid_t pid) const { return pending_.count(pid) != 0; }
  void disarm(pid_t pid);
  size_t armed() const { return armed_.size(); }
  // Readable (epoll) when a BEGIN or END waits.
  int fd() const;
  // Drains both ring buffers: every walk whose END came (or timed out),
  // complete or not. Its process is disarmed.
  std::vector<LastGaspWalk> consume();
  // BEGIN/END records the kernel had no room for.
  uint64_t dropped_control() const;

 private:
  LastGaspSource() = default;
  static int on_control(void* ctx, void* data, size_t size);
  static int on_bucket(void* ctx, void* data, size_t size);
  struct Pending {
    LastGaspWalk walk;
    std::chrono::steady_clock::time_point since;
    bool capped = false;  // buckets dropped past max_pending_bytes
    uint32_t malformed = 0;
  };
  Pending& pending(pid_t pid);
  void finish(pid_t pid, SnapshotStatus status, std::string reason);

  Limits limits_;
  last_gasp_bpf* skel_ = nullptr;
  ring_buffer* control_rb_ = nullptr;
  ring_buffer* buckets_rb_ = nullptr;
  std::string description_;
  std::map<pid_t, LastGaspArm> armed_;
  std::map<pid_t, Pending> pending_;
  uint64_t pending_bytes_ = 0;
  std::vector<oomsnap_lg_control> control_records_;  // read this consume(), applied after the buckets
  std::vector<LastGaspWalk> done_;
};

// The reason for an END's enum oomsnap_lg_end, with where it stopped.
std::string last_gasp_end_reason(uint32_t end, uint32_t buckets, uint64_t at);

}  // namespace oomsnap
