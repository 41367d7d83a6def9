#include "agent/events/bpf_events.h"

#include <errno.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <utility>
#include <vector>

#include "agent.skel.h"
#include "agent/events/tracefs.h"

namespace oomsnap {
namespace {

// ---- libbpf's log ---------------------------------------------------------
//
// libbpf_set_print() takes one process-global callback without a user pointer.
// It is installed once (std::call_once, a function-static flag) and writes
// warnings into the LibbpfLog of the innermost capture scope active on the
// calling thread: open() runs its whole open/load/attach sequence inside one,
// so each attempt gets exactly its own messages, concurrent opens on other
// threads never mix theirs in, and nothing outlives the scope. Outside a scope
// (libbpf calls from consume(), the destructor, or other code) messages are
// discarded: those calls report failure through their return values. The
// thread_local scope pointer and the once-flag are the only process-level
// state; the callback replaces any print function installed before.
class LibbpfLog {
 public:
  LibbpfLog() : prev_(current_) {
    static std::once_flag installed;
    std::call_once(installed, [] { libbpf_set_print(&LibbpfLog::print); });
    current_ = this;
  }
  ~LibbpfLog() { current_ = prev_; }
  LibbpfLog(const LibbpfLog&) = delete;
  LibbpfLog& operator=(const LibbpfLog&) = delete;

  void clear() {
    text_.clear();
    truncated_ = false;
  }
  // The last `max` bytes of the warnings, marked when cut.
  std::string tail(size_t max = 4096) const {
    if (text_.empty()) return "";
    std::string t = text_;
    while (!t.empty() && t.back() == '\n') t.pop_back();
    if (t.size() > max || truncated_) {
      if (t.size() > max) t = t.substr(t.size() - max);
      t = "[...]" + t;
    }
    return t;
  }

 private:
  static constexpr size_t kMaxKept = 64 * 1024;

  static int print(enum libbpf_print_level level, const char* fmt, va_list ap) {
    LibbpfLog* self = current_;
    if (!self || level > LIBBPF_WARN) return 0;
    va_list copy;
    va_copy(copy, ap);
    int n = std::vsnprintf(nullptr, 0, fmt, copy);
    va_end(copy);
    if (n <= 0) return 0;
    std::string line(static_cast<size_t>(n) + 1, '\0');
    std::vsnprintf(line.data(), line.size(), fmt, ap);
    line.resize(static_cast<size_t>(n));
    self->text_ += line;
    if (self->text_.size() > kMaxKept) {  // keep the end: a verifier log's verdict is last
      self->text_.erase(0, self->text_.size() - kMaxKept / 2);
      self->truncated_ = true;
    }
    return n;
  }

  static thread_local LibbpfLog* current_;
  LibbpfLog* prev_;
  std::string text_;
  bool truncated_ = false;
};

thread_local LibbpfLog* LibbpfLog::current_ = nullptr;

std::string errno_text(int err) {
  char buf[256];
  libbpf_strerror(err, buf, sizeof buf);  // libbpf's own codes too; falls back to strerror
  return std::string(buf) + " (errno " + std::to_string(err) + ")";
}

bool permission_error(int err) { return err == EPERM || err == EACCES; }

const char* kPermissionHint =
    "loading and attaching BPF programs needs root (CAP_BPF + CAP_PERFMON, or CAP_SYS_ADMIN)";

// The events in the order of event_progs: their raw tracepoints and their
// tracepoints (category/name).
constexpr const char* kEventNames[kBpfEvents] = {"mark_victim", "mm_vmscan_memcg_reclaim_begin", "sched_process_exit",
                                                 "rss_stat"};
constexpr const char* kTracepointNames[kBpfEvents] = {"oom/mark_victim", "vmscan/mm_vmscan_memcg_reclaim_begin",
                                                      "sched/sched_process_exit", "kmem/rss_stat"};
// The usage threshold is optional: without it the agent polls usage (its
// fallback on cgroup v2, beside the eventfd on v1). The others are required.
bool optional_event(size_t i) { return i == kUsageThresholdEvent; }

// The four events and their two program variants, in a fixed order.
struct EventProgs {
  bpf_program* raw;
  bpf_link** raw_link;
  bpf_program* tp;
  bpf_link** tp_link;
};

// atomics: the kernel runs BPF cmpxchg/xchg (5.12+, kernel_has_bpf_atomics);
// without, the rate-limited events use their *_old programs. Every program's
// autoload is switched off here: the caller enables the ones it loads.
std::vector<EventProgs> event_progs(agent_bpf* s, bool atomics) {
  bpf_program* prog;
  bpf_object__for_each_program(prog, s->obj) bpf_program__set_autoload(prog, false);
  auto& p = s->progs;
  auto& l = s->links;
  return {
      {p.oom_kill_raw, &l.oom_kill_raw, p.oom_kill_tp, &l.oom_kill_tp},
      {atomics ? p.pressure_raw : p.pressure_raw_old, atomics ? &l.pressure_raw : &l.pressure_raw_old,
       atomics ? p.pressure_tp : p.pressure_tp_old, atomics ? &l.pressure_tp : &l.pressure_tp_old},
      {atomics ? p.exit_raw : p.exit_raw_old, atomics ? &l.exit_raw : &l.exit_raw_old,
       atomics ? p.exit_tp : p.exit_tp_old, atomics ? &l.exit_tp : &l.exit_tp_old},
      {p.usage_raw, &l.usage_raw, p.usage_tp, &l.usage_tp},
  };
}

}  // namespace

// A socket filter holding one BPF_CMPXCHG: loads only where the kernel has the
// atomic instructions (5.12, 5ffa25502b5a); 5.10 refuses it ("BPF_STX uses
// reserved fields"). Probed once.
bool kernel_has_bpf_atomics() {
  static const bool yes = [] {
    const bpf_insn insns[] = {
        {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},           // r0 = 0
        {BPF_STX | BPF_MEM | BPF_DW, BPF_REG_10, BPF_REG_0, -8, 0},  // *(u64 *)(r10 - 8) = r0
        {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_1, 0, 0, 1},           // r1 = 1
        {BPF_STX | BPF_ATOMIC | BPF_DW, BPF_REG_10, BPF_REG_1, -8, BPF_CMPXCHG},  // r0 = cmpxchg(r10 - 8, r0, r1)
        {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},           // r0 = 0
        {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
    };
    int fd = bpf_prog_load(BPF_PROG_TYPE_SOCKET_FILTER, nullptr, "GPL", insns, sizeof insns / sizeof insns[0], nullptr);
    if (fd >= 0) ::close(fd);
    return fd >= 0;
  }();
  return yes;
}

namespace {


void set_rodata(agent_bpf* s, const BpfEventOptions& opts) {
  s->rodata->pressure_min_interval_ns = static_cast<uint64_t>(opts.pressure_min_interval.count()) * 1000000ull;
  s->rodata->exit_min_interval_ns = static_cast<uint64_t>(opts.exit_min_interval.count()) * 1000000ull;
  s->rodata->threshold_min_interval_ns = static_cast<uint64_t>(opts.threshold_min_interval.count()) * 1000000ull;
}

// Does event i's raw_tp (raw) or tracepoint program load on this kernel on
// its own (nothing else loaded, nothing attached)? false + why when not
// (libbpf's warnings, e.g. a CO-RE relocation the kernel cannot satisfy, go
// to the active LibbpfLog).
bool probe_load(size_t i, bool raw, const BpfEventOptions& opts, std::string& why) {
  agent_bpf* s = agent_bpf__open();
  if (!s) {
    why = "opening the BPF object failed: " + errno_text(errno);
    return false;
  }
  set_rodata(s, opts);
  auto progs = event_progs(s, kernel_has_bpf_atomics());
  bpf_program__set_autoload(raw ? progs[i].raw : progs[i].tp, true);
  int rc = agent_bpf__load(s);
  if (rc != 0) why = std::string("does not load: ") + errno_text(-rc);
  agent_bpf__destroy(s);
  return rc == 0;
}

constexpr const char* kBtf = "/sys/kernel/btf/vmlinux";

// What the programs need of the kernel, probed: BTF (for the CO-RE
// relocations) and the BPF ring buffer (5.8). false + error naming what is
// missing. A probe that cannot run (e.g. no privileges) passes: the load
// reports the real cause.
bool check_kernel(std::string& error) {
  utsname u{};
  const std::string release = ::uname(&u) == 0 ? std::string(u.release) : "unknown";
  if (::access(kBtf, R_OK) != 0) {
    error = std::string("this kernel (") + release + ") has no BTF: " + kBtf + " is missing (" +
            std::strerror(errno) +
            "); the CO-RE BPF programs need a kernel built with CONFIG_DEBUG_INFO_BTF=y (oomsnap supports "
            "Linux 5.10 and later with BTF)";
    return false;
  }
  // A ring buffer of one page: a kernel before 5.8 does not know the map type
  // (EINVAL); EPERM/EACCES (no privileges) says nothing about the kernel.
  int fd = bpf_map_create(BPF_MAP_TYPE_RINGBUF, nullptr, 0, 0, static_cast<__u32>(::getpagesize()), nullptr);
  const int probe_err = fd < 0 ? errno : 0;
  if (fd >= 0) ::close(fd);
  if (probe_err == EINVAL) {
    error = std::string("this kernel (") + release +
            ") has no BPF ring buffer (BPF_MAP_TYPE_RINGBUF, Linux 5.8 and later; oomsnap supports Linux "
            "5.10 and later)";
    return false;
  }
  return true;
}

// The Tgid line of /proc/PID/status (PID may be a thread id): 0 when gone.
pid_t tgid_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("Tgid:")) return static_cast<pid_t>(std::strtol(line.c_str() + 5, nullptr, 10));
  }
  return 0;
}

}  // namespace

const char* pid_source_name(uint32_t source) {
  switch (source) {
    case OOMSNAP_PID_TASK: return "task";
    case OOMSNAP_PID_CURRENT: return "current";
    case OOMSNAP_PID_PROC_STATUS: return "proc_status";
    case OOMSNAP_PID_THREAD_EXIT: return "thread_exit";
    case OOMSNAP_PID_ENTRY:
    case OOMSNAP_PID_UNRESOLVED: return "trace_entry";
  }
  return "unknown";
}

const char* to_string(BpfAttachMode mode) {
  switch (mode) {
    case BpfAttachMode::Auto: return "auto";
    case BpfAttachMode::RawTracepoint: return "raw_tp";
    case BpfAttachMode::Tracepoint: return "tracepoint";
  }
  return "?";
}

std::unique_ptr<BpfEventSource> BpfEventSource::open(const BpfEventOptions& opts, Handler handler,
                                                     std::string& error) {
  if (!handler) {
    error = "BpfEventSource: no event handler";
    return nullptr;
  }
  for (auto [name, interval] : {std::pair{"pressure_min_interval", opts.pressure_min_interval},
                                 std::pair{"exit_min_interval", opts.exit_min_interval}}) {
    if (interval.count() < 0 || interval > std::chrono::hours(24)) {
      error = std::string("BpfEventSource: ") + name + " must be between 0 and 24 h, not " +
              std::to_string(interval.count()) + " ms";
      return nullptr;
    }
  }
  LibbpfLog log;
  // What failed in each attempt: "<mode>: <step>: <error>", libbpf's warnings
  // indented below it.
  std::string failures;
  bool permission = false;
  auto failed = [&](BpfAttachMode mode, const std::string& why, int err) {
    permission = permission || permission_error(err);
    failures += (failures.empty() ? "" : "\n") + std::string(to_string(mode)) + ": " + why;
    std::string warnings = log.tail();
    for (size_t pos = 0; pos < warnings.size();) {
      size_t nl = warnings.find('\n', pos);
      if (nl == std::string::npos) nl = warnings.size();
      failures += "\n  " + warnings.substr(pos, nl - pos);
      pos = nl + 1;
    }
  };
  auto give_up = [&] {
    error = "cannot attach the BPF event programs";
    if (permission) error += ": permission denied — " + std::string(kPermissionHint);
    error += "\n" + failures;
  };

  if (!check_kernel(error)) return nullptr;

  // How each event is attached. Auto starts with raw_tp for all; an event
  // whose raw_tp program does not load (probed alone) or attach falls back to
  // its tracepoint, the others keep raw_tp. An optional event (the usage
  // threshold) whose programs fail in every mode allowed is left off.
  EventAttachment how;
  how.fill(opts.mode == BpfAttachMode::Tracepoint ? EventAttach::kTracepoint : EventAttach::kRaw);
  if (!opts.usage_threshold) how[kUsageThresholdEvent] = EventAttach::kOff;
  auto variant = [&](size_t i) {
    return (how[i] == EventAttach::kRaw ? std::string("raw_tp ") + kEventNames[i]
                                        : std::string("tracepoint ") + kTracepointNames[i]);
  };
  // Event i's next choice after its current one failed: false when a required
  // event has none left.
  auto step_down = [&](size_t i) {
    if (how[i] == EventAttach::kRaw && opts.mode == BpfAttachMode::Auto) {
      how[i] = EventAttach::kTracepoint;
      return true;
    }
    if (!optional_event(i)) return false;
    how[i] = EventAttach::kOff;
    return true;
  };
  std::string fallbacks;  // why events left raw_tp (or were left off), for the description
  std::string tracefs_note;
  bool tracefs_ready = false;
  for (size_t round = 0; round <= 2 * kBpfEvents; ++round) {
    const bool any_tp = std::count(how.begin(), how.end(), EventAttach::kTracepoint) > 0;
    const bool any_raw = std::count(how.begin(), how.end(), EventAttach::kRaw) > 0;
    if (any_tp && !tracefs_ready) {
      std::string why;
      int err = 0;
      log.clear();
      if (!ensure_tracefs(tracefs_note, why, err)) {
        failed(BpfAttachMode::Tracepoint, why, err);
        give_up();
        return nullptr;
      }
      tracefs_ready = true;
    }
    log.clear();
    std::unique_ptr<BpfEventSource> src(new BpfEventSource());
    src->handler_ = handler;
    std::string why;
    int err = 0, failed_event = -1;
    if (src->init(how, opts, why, err, failed_event)) {
      if (!fallbacks.empty()) src->description_ += " (fallback from " + fallbacks + ")";
      if (!tracefs_note.empty()) src->description_ += "; " + tracefs_note;
      return src;
    }
    const BpfAttachMode tried = !any_tp ? BpfAttachMode::RawTracepoint
                                : !any_raw ? BpfAttachMode::Tracepoint
                                           : BpfAttachMode::Auto;
    failed(tried, why, err);
    src.reset();  // destroys the half-built skeleton
    // Which programs are to blame: the one that failed to attach, or those
    // that do not load on their own.
    std::vector<size_t> blame;
    if (failed_event >= 0) {
      blame.push_back(static_cast<size_t>(failed_event));
      fallbacks += (fallbacks.empty() ? "" : "; ") + variant(blame[0]) + ": " + why;
    } else {
      for (size_t i = 0; i < kBpfEvents; ++i) {
        if (how[i] == EventAttach::kOff) continue;
        std::string probe_why;
        log.clear();
        if (!probe_load(i, how[i] == EventAttach::kRaw, opts, probe_why)) {
          std::string warnings = log.tail(600);
          std::replace(warnings.begin(), warnings.end(), '\n', ' ');
          blame.push_back(i);
          fallbacks += (fallbacks.empty() ? "" : "; ") + variant(i) + ": " + probe_why +
                       (warnings.empty() ? "" : ": " + warnings);
        }
      }
    }
    if (blame.empty()) {
      if (opts.mode != BpfAttachMode::Auto || !any_raw) break;  // tracepoints failed too
      // Not one program's fault: tracepoints for every event (as before per-event fallback).
      for (auto& h : how)
        if (h == EventAttach::kRaw) h = EventAttach::kTracepoint;
      fallbacks += (fallbacks.empty() ? "" : "; ") + std::string("raw_tp: ") + why;
      continue;
    }
    bool left = true;
    for (size_t i : blame) left = step_down(i) && left;
    if (!left) break;
  }
  give_up();
  return nullptr;
}

bool BpfEventSource::init(const EventAttachment& how, const BpfEventOptions& opts, std::string& error, int& err,
                          int& failed_event) {
  failed_event = -1;
  skel_ = agent_bpf__open();
  if (!skel_) {
    err = errno;
    error = "opening the BPF object (agent.bpf.o) failed: " + errno_text(err);
    return false;
  }
  set_rodata(skel_, opts);
  auto progs = event_progs(skel_, kernel_has_bpf_atomics());
  for (size_t i = 0; i < progs.size(); ++i) {
    bpf_program__set_autoload(progs[i].raw, how[i] == EventAttach::kRaw);
    bpf_program__set_autoload(progs[i].tp, how[i] == EventAttach::kTracepoint);
  }
  if (int rc = agent_bpf__load(skel_); rc != 0) {
    err = -rc;
    error = "loading the BPF programs into the kernel failed: " + errno_text(err);
    return false;
  }
  std::string raw_names, tp_names;
  for (size_t i = 0; i < progs.size(); ++i) {
    if (how[i] == EventAttach::kOff) continue;
    const bool raw = how[i] == EventAttach::kRaw;
    auto& p = progs[i];
    bpf_program* prog = raw ? p.raw : p.tp;
    bpf_link* link = bpf_program__attach(prog);
    if (!link) {
      err = errno;
      failed_event = static_cast<int>(i);
      error = std::string("attaching ") + bpf_program__name(prog) + " (" + bpf_program__section_name(prog) +
              ") failed: " + errno_text(err);
      return false;
    }
    *(raw ? p.raw_link : p.tp_link) = link;  // destroyed with the skeleton
    std::string& names = raw ? raw_names : tp_names;
    names += (names.empty() ? "" : ", ") + std::string(raw ? kEventNames[i] : kTracepointNames[i]);
  }
  // The OOM buffer first: ring_buffer__consume drains the buffers in the
  // order they were added, so a kill is handled before the storm beside it.
  rb_ = ring_buffer__new(bpf_map__fd(skel_->maps.oom_events), &BpfEventSource::on_sample, this, nullptr);
  if (!rb_) {
    err = errno;
    error = "creating the ring-buffer reader (oom_events) failed: " + errno_text(err);
    return false;
  }
  if (int rc = ring_buffer__add(rb_, bpf_map__fd(skel_->maps.events), &BpfEventSource::on_sample, this);
      rc != 0) {
    err = -rc;
    error = "adding the ring buffer 'events' to the reader failed: " + errno_text(err);
    return false;
  }
  how_ = how;
  const bool all_raw = tp_names.empty(), all_tp = raw_names.empty();
  mode_ = all_raw ? BpfAttachMode::RawTracepoint : all_tp ? BpfAttachMode::Tracepoint : BpfAttachMode::Auto;
  if (!raw_names.empty()) description_ = std::string("raw_tp: ") + raw_names;
  if (!tp_names.empty()) description_ += (description_.empty() ? "" : "; ") + std::string("tracepoint: ") + tp_names;
  if (how[kUsageThresholdEvent] == EventAttach::kOff) description_ += "; usage threshold not checked in the kernel";
  if (!kernel_has_bpf_atomics()) description_ += "; rate limits without BPF atomics (kernel before 5.12)";
  return true;
}

BpfAttachMode BpfEventSource::mode_of(uint32_t event_type) const {
  const size_t i = event_type == OOMSNAP_EV_OOM_KILL           ? 0
                   : event_type == OOMSNAP_EV_MEMCG_PRESSURE   ? 1
                   : event_type == OOMSNAP_EV_USAGE_THRESHOLD  ? kUsageThresholdEvent
                                                               : 2;
  return how_[i] == EventAttach::kRaw ? BpfAttachMode::RawTracepoint : BpfAttachMode::Tracepoint;
}

BpfEventSource::~BpfEventSource() {
  if (rb_) ring_buffer__free(rb_);
  if (skel_) agent_bpf__destroy(skel_);
}

int BpfEventSource::on_sample(void* ctx, void* data, size_t size) {
  auto* self = static_cast<BpfEventSource*>(ctx);
  if (size < sizeof(oomsnap_event)) return 0;  // cannot happen: one struct per record
  oomsnap_event ev;
  std::memcpy(&ev, data, sizeof ev);
  if (ev.type == OOMSNAP_EV_OOM_KILL && ev.pid_source == OOMSNAP_PID_ENTRY) self->resolve_entry_pid(ev);
  try {
    self->handler_(ev);
  } catch (...) {
    self->handler_error_ = std::current_exception();
    return -ECANCELED;  // stops ring_buffer__consume
  }
  return 0;
}

void BpfEventSource::resolve_entry_pid(oomsnap_event& ev) {
  const pid_t entry = static_cast<pid_t>(ev.tgid);
  pid_t tgid = entry > 0 ? tgid_of(entry) : 0;
  ev.pid_source = OOMSNAP_PID_PROC_STATUS;
  // Gone from /proc: it has exited, and the exit program noted its process.
  __u32 key = static_cast<__u32>(entry), seen = 0;
  if (tgid <= 0 && bpf_map__lookup_elem(skel_->maps.marked_tids, &key, sizeof key, &seen, sizeof seen, 0) == 0 &&
      seen != 0) {
    tgid = static_cast<pid_t>(seen);
    ev.pid_source = OOMSNAP_PID_THREAD_EXIT;
  }
  bpf_map__delete_elem(skel_->maps.marked_tids, &key, sizeof key, 0);
  if (tgid <= 0) {
    ev.pid_source = OOMSNAP_PID_UNRESOLVED;
    return;
  }
  if (tgid != entry) {
    // BPF tracked the thread id: track the process instead.
    untrack_pid(entry);
    if (ev.pid_source == OOMSNAP_PID_PROC_STATUS) track_pid(tgid);  // alive a moment ago
    ev.tgid = static_cast<uint32_t>(tgid);
  }
  if (ev.comm[0] == '\0') {  // an entry without comm (before 6.8): the process's name
    std::ifstream in("/proc/" + std::to_string(tgid) + "/comm");
    std::string comm;
    if (std::getline(in, comm)) std::strncpy(ev.comm, comm.c_str(), sizeof ev.comm - 1);
  }
}

int BpfEventSource::fd() const { return ring_buffer__epoll_fd(rb_); }

int BpfEventSource::consume() {
  int n = ring_buffer__consume(rb_);
  if (handler_error_) {
    std::exception_ptr e = handler_error_;
    handler_error_ = nullptr;
    std::rethrow_exception(e);
  }
  return n;
}

uint64_t BpfEventSource::dropped() const {
  // .bss is memory-mapped and updated by the programs.
  return __atomic_load_n(&skel_->bss->dropped_events, __ATOMIC_RELAXED) + dropped_oom();
}

uint64_t BpfEventSource::dropped_oom() const {
  return __atomic_load_n(&skel_->bss->dropped_oom_events, __ATOMIC_RELAXED);
}

bool BpfEventSource::track_pid(pid_t tgid) {
  if (tgid <= 0) return false;
  __u32 key = static_cast<__u32>(tgid);
  __u8 one = 1;
  return bpf_map__update_elem(skel_->maps.tracked, &key, sizeof key, &one, sizeof one, BPF_ANY) == 0;
}

namespace {

uint64_t pages_up(uint64_t bytes) {
  const uint64_t page = static_cast<uint64_t>(::getpagesize());
  return bytes / page + (bytes % page ? 1 : 0);
}

}  // namespace

size_t BpfEventSource::set_usage_watches(const std::vector<UsageWatch>& watches, std::string& error) {
  error.clear();
  if (!usage_thresholds()) {
    error = "the usage-threshold program is not attached";
    return 0;
  }
  auto note = [&error](const std::string& what) {
    if (error.empty()) error = what;
  };
  std::map<uint64_t, UsageWatch> want;
  std::map<uint64_t, const UsageWatch*> containers;  // one threshold per container: the first listed
  for (const UsageWatch& w : watches) {
    if (w.hops > OOMSNAP_MAX_WATCH_HOPS) {
      note("memcg " + std::to_string(w.memcg_inode) + " is " + std::to_string(w.hops) +
           " levels below its container: at most " + std::to_string(OOMSNAP_MAX_WATCH_HOPS) + " are followed");
      continue;
    }
    want[w.memcg_inode] = w;
    containers.emplace(w.container_inode, &want[w.memcg_inode]);
  }
  // What the maps hold per container now.
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> set_before;
  for (const auto& [key, w] : watches_)
    set_before.emplace(w.container_inode, std::pair{w.threshold_bytes, w.rearm_bytes});
  // Removed first: a full map then has room for the new ones.
  for (auto it = watches_.begin(); it != watches_.end();) {
    const uint64_t key = it->first;
    if (want.count(key)) {
      ++it;
      continue;
    }
    bpf_map__delete_elem(skel_->maps.usage_watch, &key, sizeof key, 0);
    it = watches_.erase(it);
  }
  for (const auto& [container, levels] : set_before)
    if (!containers.count(container))
      bpf_map__delete_elem(skel_->maps.usage_thresholds, &container, sizeof container, 0);
  // Thresholds: only a changed one is written, so a container keeps its
  // armed state (one event per crossing) across rescans.
  for (const auto& [container, w] : containers) {
    auto before = set_before.find(container);
    if (before != set_before.end() && before->second == std::pair{w->threshold_bytes, w->rearm_bytes}) continue;
    oomsnap_usage_threshold t{};
    t.threshold_pages = pages_up(w->threshold_bytes);
    t.rearm_pages = pages_up(w->rearm_bytes);
    t.armed = 1;
    if (bpf_map__update_elem(skel_->maps.usage_thresholds, &container, sizeof container, &t, sizeof t, BPF_ANY) != 0)
      note("usage threshold of memcg " + std::to_string(container) + ": " + errno_text(errno));
  }
  size_t n = 0;
  for (const auto& [key, w] : want) {
    auto old = watches_.find(key);
    if (old != watches_.end() && old->second == w) {
      ++n;
      continue;
    }
    oomsnap_usage_watch v{};
    v.container_id = w.container_inode;
    v.hops = w.hops;
    if (bpf_map__update_elem(skel_->maps.usage_watch, &key, sizeof key, &v, sizeof v, BPF_ANY) != 0) {
      note("usage watch of memcg " + std::to_string(key) + ": " + errno_text(errno));
      watches_.erase(key);
      continue;
    }
    watches_[key] = w;
    ++n;
  }
  return n;
}

void BpfEventSource::untrack_pid(pid_t tgid) {
  if (tgid <= 0) return;
  __u32 key = static_cast<__u32>(tgid);
  bpf_map__delete_elem(skel_->maps.tracked, &key, sizeof key, 0);
}

}  // namespace oomsnap
