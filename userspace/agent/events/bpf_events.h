// The agent's kernel event source: loads bpf/agent.bpf.c (skeleton
// agent.skel.h), attaches one program per event and hands every record of its
// two ring buffers to a handler.
//
//   OOMSNAP_EV_OOM_KILL        oom:mark_victim; never rate-limited
//   OOMSNAP_EV_MEMCG_PRESSURE  vmscan:mm_vmscan_memcg_reclaim_begin, at most one
//                              per memcg per pressure_min_interval (rate-limited
//                              in BPF; `suppressed` counts the events not sent)
//   OOMSNAP_EV_PROCESS_EXIT    sched:sched_process_exit when the whole thread
//                              group is dead and it was killed by a signal or
//                              its tgid is tracked (track_pid, and every OOM
//                              victim from its mark_victim on); untracked ones
//                              at most one per memcg per exit_min_interval
//                              (`suppressed` as for pressure), tracked ones
//                              always
//   OOMSNAP_EV_USAGE_THRESHOLD kmem:rss_stat, when the memcg usage of a
//                              container set with set_usage_watches is at or
//                              above its threshold: once per crossing (again
//                              after usage fell below the re-arm level), at
//                              most one per container per threshold_min_interval.
//                              Optional: a kernel where its programs do not
//                              load or attach runs without it (description()
//                              says so; the agent keeps polling usage).
//
// Ring buffers: OOM kills and tracked exits have one of their own, which
// pressure and exit storms cannot fill (dropped_oom() counts its losses); the
// rest share the other. consume() drains the OOM buffer first, so in one
// drain a kill is handled before the exits and pressure that came with it,
// and an OOM victim's exit (same buffer) always after its kill.
//
// What the events mean exactly:
// - MEMCG_PRESSURE is the memcg of the task that entered memcg reclaim
//   (current). That is the charging task's memcg for charges (page faults,
//   page cache) but the writer's own memcg when reclaim is forced by writing a
//   limit (memory.limit_in_bytes / memory.max / memory.reclaim /
//   force_empty): the tracepoint does not carry the target memcg.
//   The rate limit's races are resolved in BPF (compare-and-swap on the last
//   send time, atomic exchange of the count): no duplicates within an
//   interval and no lost counts, except when the per-memcg state is evicted
//   from its LRU map (more than 4096 memcgs reclaiming) or an event cannot be
//   reserved (then dropped() grows and its count moves to the next event).
// - PROCESS_EXIT is sent once per process (the threads of a group killed at
//   once are de-duplicated in BPF); exit_code is the kernel's: signal in the
//   low 7 bits, 0x80 for a core dump, exit status << 8. A tracked tgid is
//   untracked when it is reported.
// - rss_* are the mm's folded per-CPU counters (get_mm_counter): they may lag
//   the exact value by a few dozen pages.
//
// Two attach modes with the same events: raw tracepoints (preferred; no
// tracefs) and classic tracepoints (fallback; needs tracefs, which open()
// mounts at /sys/kernel/tracing when it is missing), chosen per event. They
// differ in one case: a tracepoint-mode OOM_KILL (and a raw_tp one before 6.8,
// whose tracepoint passed the pid, not the task) gets the victim's pid from the
// trace entry, a thread id, which becomes the process id (tgid) before the
// handler sees it — from the current task in BPF when the victim is current,
// else from /proc/<pid>/status at once or, when the thread is gone already,
// from what the exit program saw of it (pid_source says which; see
// oomsnap_events.h) — its rss and comm from the entry (6.8+ kernels; before,
// from current when it is the victim, else rss 0 and the comm from /proc) and
// the memcg of the task whose charge hit the limit (the OOM-ing memcg's
// hierarchy; for a system-wide OOM the allocating task's memcg, which may be
// unrelated) instead of the victim's own memcg.
//
// Kernel prerequisites, probed by open() before loading (not read from the
// version string): BTF at /sys/kernel/btf/vmlinux and the BPF ring buffer
// (5.8+). Layout differences between supported kernels (5.10+) are handled in
// bpf/core_fixes.bpf.h.
//
// Not thread-safe as a whole: consume() from one thread. track_pid(),
// untrack_pid() and dropped() may be called from any thread.
#pragma once
#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agent/events/usage_watches.h"
#include "oomsnap_events.h"

struct agent_bpf;
struct ring_buffer;

namespace oomsnap {

enum class BpfAttachMode { Auto, RawTracepoint, Tracepoint };

// The kernel events (OOM kill, pressure, exit, usage threshold) and how each is attached.
constexpr size_t kBpfEvents = 4;
constexpr size_t kUsageThresholdEvent = 3;  // the optional one
enum class EventAttach { kRaw, kTracepoint, kOff };
using EventAttachment = std::array<EventAttach, kBpfEvents>;


// "auto", "raw_tp", "tracepoint".
const char* to_string(BpfAttachMode mode);

// Does the kernel run the BPF atomic cmpxchg/xchg instructions (5.12+)? Probed
// once by loading a tiny program. Without them the rate-limited programs load
// in their *_old variants (bpf/core_fixes.bpf.h).
bool kernel_has_bpf_atomics();

// How an OOM_KILL's tgid was obtained (enum oomsnap_pid_source): "task",
// "current", "proc_status", "thread_exit", "trace_entry" (unresolved), "unknown".
const char* pid_source_name(uint32_t source);

struct BpfEventOptions {
  BpfAttachMode mode = BpfAttachMode::Auto;
  // At most one MEMCG_PRESSURE event per memcg per interval; 0 = every reclaim.
  std::chrono::milliseconds pressure_min_interval{100};
  // At most one PROCESS_EXIT event of an untracked process per memcg per
  // interval; 0 = every exit. Bounds what a container killing its own
  // processes in a loop costs (ring space, agent work, records).
  std::chrono::milliseconds exit_min_interval{100};
  // At most one USAGE_THRESHOLD event per container per interval.
  std::chrono::milliseconds threshold_min_interval{100};
  // false: the usage-threshold programs are not attached at all.
  bool usage_threshold = true;
};

class BpfEventSource {
 public:
  using Handler = std::function<void(const oomsnap_event&)>;

  // Opens, loads, attaches. First checks the kernel has BTF and the BPF ring
  // buffer (error names what is missing). Auto: raw tracepoints for all three
  // events; if that fails, per event: an event whose raw_tp program does not
  // load (probed alone) or attach gets its tracepoint variant, the others keep
  // raw_tp (tracefs mounted at /sys/kernel/tracing if
  // /sys/kernel/tracing/events is missing). nullptr + error on failure; the
  // error names the step and program, the libbpf error text and libbpf's
  // warnings (e.g. the verifier log), and on EPERM/EACCES says that root
  // (CAP_BPF + CAP_PERFMON, or CAP_SYS_ADMIN) is needed.
  static std::unique_ptr<BpfEventSource> open(const BpfEventOptions& opts, Handler handler,
                                              std::string& error);
  ~BpfEventSource();
  BpfEventSource(const BpfEventSource&) = delete;
  BpfEventSource& operator=(const BpfEventSource&) = delete;

  // ring_buffer__epoll_fd: readable when events are waiting in either buffer.
  int fd() const;
  // Drains the OOM buffer, then the other, into the handler: the number of events, or -errno.
  // An exception thrown by the handler stops the drain (the record that threw
  // is consumed, the rest stay queued) and is rethrown here.
  int consume();
  // Ring-buffer reservation failures so far (events lost in the kernel), in
  // both buffers.
  uint64_t dropped() const;
  // Those of the OOM buffer alone (OOM kills, tracked exits).
  uint64_t dropped_oom() const;
  // What was attached: RawTracepoint or Tracepoint for every attached event,
  // Auto when they differ (see mode_of).
  BpfAttachMode mode() const { return mode_; }
  // The mode of one event type's program (OOMSNAP_EV_*): RawTracepoint or Tracepoint.
  BpfAttachMode mode_of(uint32_t event_type) const;
  // e.g. "raw_tp: mark_victim, mm_vmscan_memcg_reclaim_begin, sched_process_exit, rss_stat";
  // with tracepoints also why raw_tp was not used and whether tracefs was
  // mounted, e.g. "raw_tp: ...; tracepoint: oom/mark_victim (fallback from raw_tp: ...)".
  std::string description() const { return description_; }
  // The exit of this tgid is reported even when it exits normally. The entry
  // is removed when the process is dead (reported) or by untrack_pid. false
  // when the map is full (4096) or the update failed.
  bool track_pid(pid_t tgid);
  void untrack_pid(pid_t tgid);
  // Is the usage-threshold program attached?
  bool usage_thresholds() const { return how_[kUsageThresholdEvent] != EventAttach::kOff; }
  // Makes `watches` the set of watched memcgs (maps usage_watch and
  // usage_thresholds): entries no longer listed are removed, a container
  // whose threshold or re-arm level changed is armed afresh, the others
  // keep their state. The number of watches set; error says what failed
  // (e.g. a map full, more than 16384 memcgs, or hops above 8).
  size_t set_usage_watches(const std::vector<UsageWatch>& watches, std::string& error);

 private:
  BpfEventSource() = default;
  // One attempt: event i (OOM kill, pressure, exit, usage threshold) with its
  // raw_tp program, its tracepoint program or not at all (how[i]). On failure: false, error = what
  // failed (without the libbpf log), err = the errno, failed_event = the
  // event whose program failed to attach (-1: not one event's: open, load, ring).
  bool init(const EventAttachment& how, const BpfEventOptions& opts, std::string& error, int& err,
            int& failed_event);
  static int on_sample(void* ctx, void* data, size_t size);
  // A tracepoint-mode OOM_KILL with the entry's pid: the tgid from /proc.
  void resolve_entry_pid(oomsnap_event& ev);

  agent_bpf* skel_ = nullptr;
  ring_buffer* rb_ = nullptr;
  Handler handler_;
  BpfAttachMode mode_ = BpfAttachMode::Auto;
  EventAttachment how_{};  // per event (OOM kill, pressure, exit, usage threshold)
  std::map<uint64_t, UsageWatch> watches_;  // by memcg inode: what the maps hold
  std::string description_;
  std::exception_ptr handler_error_;
};

}  // namespace oomsnap
