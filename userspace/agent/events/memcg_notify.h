// Kernel notifications about memory cgroups, as plain file descriptors: the
// agent's event loop waits on fd() and calls drain()/read_changes()/fired_now()
// when it is ready. Nothing here blocks except PsiTrigger::fired(timeout).
//
// Which mechanism fits which kernel:
//   cgroup v1: V1ThresholdEvent (usage crosses N bytes), V1OomEvent (the memcg
//              hit its limit and could not reclaim) — eventfds registered via
//              cgroup.event_control. PSI is system-wide only (/proc/pressure).
//   cgroup v2: MemoryEventsWatcher (memory.events counters: high, max, oom,
//              oom_kill, ...) and PsiTrigger on <cgroup>/memory.pressure.
//
// Waiting with Boost.Asio: wrap fd() in a posix::stream_descriptor and call
// release() before it is destroyed (the objects here own their fds).
//   eventfds and the inotify fd are readable → async_wait(wait_read).
//   PSI triggers only ever report POLLPRI (or POLLERR when the cgroup goes
//   away) → async_wait(wait_error): Asio's epoll reactor registers every
//   descriptor with EPOLLPRI and completes wait_error ops on it (checked for
//   Asio 1.18, the integration test does it). Because the kernel clears a
//   PSI event when it is polled and Asio registers edge-triggered, an event
//   that arrives while no wait_error op is pending is consumed and lost; the
//   trigger fires again after the next window while the stall continues, so
//   re-arm right away. poll/epoll with POLLPRI/EPOLLPRI directly works too.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/cgroup/cgroup.h"

namespace oomsnap {

// An eventfd registered with a v1 memory cgroup through cgroup.event_control.
// The kernel signals it when the event happens and, once more, when the
// cgroup is removed (so a fire may also mean "gone": check the directory).
// Destroying the object closes the eventfd, which makes the kernel
// unregister the event (asynchronously, from a workqueue; verified on 6.18).
class V1EventFd {
 public:
  ~V1EventFd();
  V1EventFd(const V1EventFd&) = delete;
  V1EventFd& operator=(const V1EventFd&) = delete;

  int fd() const { return efd_; }  // non-blocking, close-on-exec; readable when fired
  const std::string& rel_path() const { return rel_path_; }
  // Reads (and so resets) the eventfd counter: true when it had fired since
  // the last drain. Several fires between drains count once.
  bool drain();

 protected:
  V1EventFd(int efd, std::string rel_path) : efd_(efd), rel_path_(std::move(rel_path)) {}
  // Opens an eventfd and registers it for control_file of the cgroup with
  // "<efd> <control_fd>[ <args>]". Returns the eventfd or -1 with error set.
  static int register_event(const CgroupFs& fs, const std::string& rel_path, const char* control_file,
                            const std::string& args, std::string& error);

 private:
  int efd_;
  std::string rel_path_;
};

// Fires when memory.usage_in_bytes crosses threshold_bytes, in either
// direction. The kernel checks thresholds only every ~128 page charge events
// (THRESHOLDS_EVENTS_TARGET), so a fire may trail the crossing slightly, and
// registering above the threshold does not fire until usage crosses it.
class V1ThresholdEvent : public V1EventFd {
 public:
  static std::unique_ptr<V1ThresholdEvent> create(const CgroupFs& fs, const std::string& rel_path,
                                                  uint64_t threshold_bytes, std::string& error);
  uint64_t threshold() const { return threshold_; }

 private:
  V1ThresholdEvent(int efd, std::string rel_path, uint64_t threshold)
      : V1EventFd(efd, std::move(rel_path)), threshold_(threshold) {}
  uint64_t threshold_;
};

// Fires when the cgroup enters OOM (memory.oom_control; also right away when
// it is already under OOM at registration). With the OOM killer enabled the
// kill follows; memory.oom_control's oom_kill counter tells whether it did.
class V1OomEvent : public V1EventFd {
 public:
  static std::unique_ptr<V1OomEvent> create(const CgroupFs& fs, const std::string& rel_path, std::string& error);

 private:
  V1OomEvent(int efd, std::string rel_path) : V1EventFd(efd, std::move(rel_path)) {}
};

struct MemoryEventsChange {
  std::string rel_path;
  std::map<std::string, uint64_t> counters;  // memory.events now
  // How much each counter grew since the previous read (the first read after
  // add() compares with the values add() saw). Only keys that grew; a
  // counter that went down (cannot happen in the kernel) counts from 0.
  std::map<std::string, uint64_t> delta;
  // The file can no longer be read or the kernel dropped the watch (cgroup
  // removed): the cgroup is no longer watched, counters/delta are empty.
  bool gone = false;
  std::string error;  // why it is gone, with the path
};

// v2 memory.events of many cgroups through one inotify fd: the kernel
// signals IN_MODIFY on memory.events whenever one of its counters changes
// (cgroup_file_notify: at most one notification per file per ~10 ms; a
// change inside that interval is notified when it ends, not dropped).
class MemoryEventsWatcher {
 public:
  static std::unique_ptr<MemoryEventsWatcher> create(std::string& error);
  ~MemoryEventsWatcher();
  MemoryEventsWatcher(const MemoryEventsWatcher&) = delete;
  MemoryEventsWatcher& operator=(const MemoryEventsWatcher&) = delete;

  int fd() const { return ifd_; }  // non-blocking inotify fd; readable when something changed

  // Watches <cgroup>/memory.events and takes its current counters as the
  // baseline. Adding a watched cgroup again keeps the old baseline. v2 only:
  // on v1 (no memory.events) it fails with the file named in error.
  bool add(const CgroupFs& fs, const std::string& rel_path, std::string& error);
  void remove(const std::string& rel_path);  // unknown paths are ignored
  size_t size() const { return watches_.size(); }

  // Drains the inotify fd and re-reads the files it names: one entry per
  // cgroup whose counters changed (a rewrite with equal values is not a
  // change) or that is gone. Empty when nothing is pending.
  std::vector<MemoryEventsChange> read_changes();

 private:
  struct Watch {
    std::string rel_path, file;
    std::map<std::string, uint64_t> last;
  };
  explicit MemoryEventsWatcher(int ifd) : ifd_(ifd) {}
  std::optional<MemoryEventsChange> refresh(Watch& w);

  int ifd_;
  std::map<int, Watch> watches_;            // by inotify watch descriptor
  std::map<std::string, int> wd_of_path_;   // rel_path → watch descriptor
};

struct PsiLine {
  double avg10 = 0, avg60 = 0, avg300 = 0;  // percent of time stalled
  uint64_t total_us = 0;                    // total stall time
};
struct PsiStats {
  PsiLine some;
  std::optional<PsiLine> full;  // absent from files that have no "full" line
};

// Parses a pressure file ("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n
// full ..."). nullopt unless there is exactly one well-formed "some" line
// and at most one "full"; unknown keys and lines are skipped so a newer
// kernel's additions do not break it.
std::optional<PsiStats> parse_psi(const std::string& text);

// The pressure file the agent should use for a memcg: v2 <cgroup>/memory.pressure,
// v1 (no per-cgroup PSI) the system-wide /proc/pressure/memory.
std::string memory_pressure_file(const CgroupFs& fs, const std::string& rel_path);

// A PSI trigger: fires (POLLPRI) when tasks were stalled on memory for at
// least `stall` within a `window`. The kernel accepts 0 < stall <= window and
// 500 ms <= window <= 10 s; writers without CAP_SYS_RESOURCE (root in many
// containers, and on this project's CI VM) get triggers serviced by the 2 s
// averaging clock and must use a window that is a multiple of 2 s. It fires
// at most once per window while the stall lasts.
class PsiTrigger {
 public:
  static std::unique_ptr<PsiTrigger> create(const std::string& pressure_file, const std::string& kind,
                                            std::chrono::microseconds stall, std::chrono::microseconds window,
                                            std::string& error);
  ~PsiTrigger();
  PsiTrigger(const PsiTrigger&) = delete;
  PsiTrigger& operator=(const PsiTrigger&) = delete;

  int fd() const { return fd_; }  // wait for POLLPRI (see the note at the top)
  const std::string& path() const { return path_; }

  // Polls for POLLPRI up to timeout_ms (0: do not wait, -1: forever). True
  // when the trigger fired — polling consumes the event, so the next call
  // waits for a new one — or when the file reports POLLERR (cgroup removed;
  // gone() then stays true and every later call returns true at once).
  bool fired(int timeout_ms);
  bool fired_now() { return fired(0); }
  bool gone() const { return gone_; }

  // The file's current averages (read through the trigger's own fd).
  std::optional<PsiStats> read(std::string& error) const;

 private:
  PsiTrigger(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
  bool gone_ = false;
};

}  // namespace oomsnap
