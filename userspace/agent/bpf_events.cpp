#include "agent/bpf_events.h"

#include <errno.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "agent.skel.h"

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

// The three events and their two program variants, in a fixed order.
struct EventProgs {
  bpf_program* raw;
  bpf_link** raw_link;
  const char* raw_name;  // the raw tracepoint
  bpf_program* tp;
  bpf_link** tp_link;
  const char* tp_name;   // category/name
};

std::vector<EventProgs> event_progs(agent_bpf* s) {
  return {
      {s->progs.oom_kill_raw, &s->links.oom_kill_raw, "mark_victim", s->progs.oom_kill_tp,
       &s->links.oom_kill_tp, "oom/mark_victim"},
      {s->progs.pressure_raw, &s->links.pressure_raw, "mm_vmscan_memcg_reclaim_begin",
       s->progs.pressure_tp, &s->links.pressure_tp, "vmscan/mm_vmscan_memcg_reclaim_begin"},
      {s->progs.exit_raw, &s->links.exit_raw, "sched_process_exit", s->progs.exit_tp,
       &s->links.exit_tp, "sched/sched_process_exit"},
  };
}

constexpr const char* kTracefs = "/sys/kernel/tracing";

// Classic tracepoints are attached through tracefs (libbpf reads the event id
// from <tracefs>/events/<category>/<name>/id). Mounts it when it is missing;
// note says so.
bool ensure_tracefs(std::string& note, std::string& error, int& err) {
  struct stat st {};
  const std::string events = std::string(kTracefs) + "/events";
  if (stat(events.c_str(), &st) == 0) return true;
  if (errno != ENOENT) {  // there but not usable (e.g. EACCES): mounting would not help
    err = errno;
    error = "tracefs at " + events + " is not usable: " + errno_text(err);
    return false;
  }
  if (::mount("tracefs", kTracefs, "tracefs", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
    err = errno;
    if (stat(events.c_str(), &st) == 0) return true;  // mounted concurrently by someone else
    error = std::string("mounting tracefs at ") + kTracefs + " failed: " + errno_text(err);
    return false;
  }
  note = std::string("tracefs mounted at ") + kTracefs;
  return true;
}

}  // namespace

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
  auto attempt = [&](BpfAttachMode mode, std::string& why) -> std::unique_ptr<BpfEventSource> {
    log.clear();
    std::unique_ptr<BpfEventSource> src(new BpfEventSource());
    src->handler_ = handler;
    int err = 0;
    if (src->init(mode, opts, why, err)) return src;
    failed(mode, why, err);
    why = std::string(to_string(mode)) + ": " + why;
    return nullptr;  // destroys the half-built skeleton
  };
  auto give_up = [&] {
    error = "cannot attach the BPF event programs";
    if (permission) error += ": permission denied — " + std::string(kPermissionHint);
    error += "\n" + failures;
  };

  std::string raw_why;
  if (opts.mode == BpfAttachMode::Auto || opts.mode == BpfAttachMode::RawTracepoint) {
    if (auto src = attempt(BpfAttachMode::RawTracepoint, raw_why)) return src;
    if (opts.mode == BpfAttachMode::RawTracepoint) {
      give_up();
      return nullptr;
    }
  }
  std::string tracefs_note, tp_why;
  int err = 0;
  log.clear();
  if (!ensure_tracefs(tracefs_note, tp_why, err)) {
    failed(BpfAttachMode::Tracepoint, tp_why, err);
    give_up();
    return nullptr;
  }
  auto src = attempt(BpfAttachMode::Tracepoint, tp_why);
  if (!src) {
    give_up();
    return nullptr;
  }
  if (!raw_why.empty()) src->description_ += " (fallback from " + raw_why + ")";
  if (!tracefs_note.empty()) src->description_ += "; " + tracefs_note;
  return src;
}

bool BpfEventSource::init(BpfAttachMode mode, const BpfEventOptions& opts, std::string& error,
                          int& err) {
  const bool raw = mode == BpfAttachMode::RawTracepoint;
  skel_ = agent_bpf__open();
  if (!skel_) {
    err = errno;
    error = "opening the BPF object (agent.bpf.o) failed: " + errno_text(err);
    return false;
  }
  skel_->rodata->pressure_min_interval_ns =
      static_cast<uint64_t>(opts.pressure_min_interval.count()) * 1000000ull;
  skel_->rodata->exit_min_interval_ns = static_cast<uint64_t>(opts.exit_min_interval.count()) * 1000000ull;
  auto progs = event_progs(skel_);
  for (auto& p : progs) {
    bpf_program__set_autoload(p.raw, raw);
    bpf_program__set_autoload(p.tp, !raw);
  }
  if (int rc = agent_bpf__load(skel_); rc != 0) {
    err = -rc;
    error = "loading the BPF programs into the kernel failed: " + errno_text(err);
    return false;
  }
  std::string names;
  for (auto& p : progs) {
    bpf_program* prog = raw ? p.raw : p.tp;
    const char* name = raw ? p.raw_name : p.tp_name;
    bpf_link* link = bpf_program__attach(prog);
    if (!link) {
      err = errno;
      error = std::string("attaching ") + bpf_program__name(prog) + " (" +
              bpf_program__section_name(prog) + ") failed: " + errno_text(err);
      return false;
    }
    *(raw ? p.raw_link : p.tp_link) = link;  // destroyed with the skeleton
    names += (names.empty() ? "" : ", ") + std::string(name);
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
  mode_ = mode;
  description_ = std::string(to_string(mode)) + ": " + names;
  return true;
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
  try {
    self->handler_(ev);
  } catch (...) {
    self->handler_error_ = std::current_exception();
    return -ECANCELED;  // stops ring_buffer__consume
  }
  return 0;
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

void BpfEventSource::untrack_pid(pid_t tgid) {
  if (tgid <= 0) return;
  __u32 key = static_cast<__u32>(tgid);
  bpf_map__delete_elem(skel_->maps.tracked, &key, sizeof key, 0);
}

}  // namespace oomsnap
