#include "agent/events/last_gasp_source.h"

#include <errno.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cstring>

#include "agent/events/tracefs.h"
#include "base/text.h"
#include "last_gasp.skel.h"
#include "last_gasp_events.h"

namespace oomsnap {
namespace {

// Loads the skeleton with one of its two programs and attaches it. nullptr
// with why on failure (the skeleton destroyed).
last_gasp_bpf* load_attached(bool raw, std::string& why) {
  last_gasp_bpf* s = last_gasp_bpf__open();
  if (!s) {
    why = "open: " + errno_text(errno);
    return nullptr;
  }
  bpf_program__set_autoload(s->progs.lg_signal_deliver_raw, raw);
  bpf_program__set_autoload(s->progs.lg_signal_deliver_tp, !raw);
  if (int rc = last_gasp_bpf__load(s); rc != 0) {
    why = "load: " + errno_text(-rc);
    last_gasp_bpf__destroy(s);
    return nullptr;
  }
  bpf_link* link = raw ? bpf_program__attach_raw_tracepoint(s->progs.lg_signal_deliver_raw, "signal_deliver")
                       : bpf_program__attach(s->progs.lg_signal_deliver_tp);
  if (!link) {
    why = "attach: " + errno_text(errno);
    last_gasp_bpf__destroy(s);
    return nullptr;
  }
  (raw ? s->links.lg_signal_deliver_raw : s->links.lg_signal_deliver_tp) = link;  // destroyed with it
  return s;
}

}  // namespace

std::string last_gasp_end_reason(uint32_t end, uint32_t buckets, uint64_t at) {
  const std::string after = " after " + std::to_string(buckets) + " buckets";
  switch (end) {
    case OOMSNAP_LG_END_OF_LIST: return "";
    case OOMSNAP_LG_END_BUCKET_CAP: return "bucket cap reached" + after;
    case OOMSNAP_LG_END_UNREADABLE: return "unreadable bucket at " + hex(at) + after;
    case OOMSNAP_LG_END_IMPLAUSIBLE: return "implausible bucket stack depth at " + hex(at) + after;
    case OOMSNAP_LG_END_RING_FULL: return "the ring buffer was full" + after;
    case OOMSNAP_LG_END_NO_HEAD: return "cannot read runtime.mbuckets or runtime.MemProfileRate";
    default: return "unknown end " + std::to_string(end) + after;
  }
}

std::unique_ptr<LastGaspSource> LastGaspSource::open(const Limits& limits, std::string& why) {
  const int has_loop = libbpf_probe_bpf_helper(BPF_PROG_TYPE_RAW_TRACEPOINT, BPF_FUNC_loop, nullptr);
  if (has_loop == 0) {
    why = "the kernel has no bpf_loop (5.17+)";
    return nullptr;
  }
  std::unique_ptr<LastGaspSource> src(new LastGaspSource());
  src->limits_ = limits;
  using Attach = Limits::Attach;
  std::string raw_why = "not tried", tp_why = "not tried";
  if (limits.attach != Attach::kTracepoint) src->skel_ = load_attached(true, raw_why);
  if (src->skel_) {
    src->description_ = "raw_tp/signal_deliver";
  } else if (limits.attach != Attach::kRawTracepoint) {
    std::string note;
    int err = 0;
    if (ensure_tracefs(note, tp_why, err)) src->skel_ = load_attached(false, tp_why);
    if (src->skel_)
      src->description_ = "tp/signal/signal_deliver (raw_tp: " + raw_why + ")" + (note.empty() ? "" : "; " + note);
  }
  if (!src->skel_) {
    why = "raw_tp/signal_deliver: " + raw_why + "; tp/signal/signal_deliver: " + tp_why;
    return nullptr;
  }
  src->control_rb_ =
      ring_buffer__new(bpf_map__fd(src->skel_->maps.lg_control), &LastGaspSource::on_control, src.get(), nullptr);
  src->buckets_rb_ =
      ring_buffer__new(bpf_map__fd(src->skel_->maps.lg_buckets), &LastGaspSource::on_bucket, src.get(), nullptr);
  if (!src->control_rb_ || !src->buckets_rb_) {
    why = "ring buffer: " + errno_text(errno);
    return nullptr;
  }
  return src;
}

LastGaspSource::~LastGaspSource() {
  if (control_rb_) ring_buffer__free(control_rb_);
  if (buckets_rb_) ring_buffer__free(buckets_rb_);
  if (skel_) last_gasp_bpf__destroy(skel_);
}

int LastGaspSource::fd() const { return ring_buffer__epoll_fd(control_rb_); }

uint64_t LastGaspSource::dropped_control() const {
  return __atomic_load_n(&skel_->bss->lg_control_dropped, __ATOMIC_RELAXED);
}

bool LastGaspSource::arm(pid_t pid, uint64_t start_time_ticks, const LastGaspArm& arm, std::string& why) {
  if (arm.record_bytes > OOMSNAP_LG_MAX_RECORD || arm.max_stack == 0 || arm.mbuckets == 0 ||
      arm.mem_profile_rate == 0) {
    why = "implausible arm (record " + std::to_string(arm.record_bytes) + " bytes, max stack " +
          std::to_string(arm.max_stack) + ")";
    return false;
  }
  oomsnap_lg_target t{};
  t.mbuckets = arm.mbuckets;
  t.mem_profile_rate = arm.mem_profile_rate;
  t.mprof_cycle = arm.mprof_cycle;
  t.start_ticks = start_time_ticks;
  t.record_bytes = arm.record_bytes;
  t.max_stack = std::min<uint32_t>(arm.max_stack, OOMSNAP_LG_MAX_STACK);
  t.max_buckets = std::min<uint32_t>(limits_.max_buckets, OOMSNAP_LG_MAX_BUCKETS);
  const __u32 key = static_cast<__u32>(pid);
  if (bpf_map__update_elem(skel_->maps.lg_targets, &key, sizeof key, &t, sizeof t, BPF_ANY) != 0) {
    why = "lg_targets: " + errno_text(errno);
    return false;
  }
  armed_[pid] = arm;
  return true;
}

void LastGaspSource::disarm(pid_t pid) {
  const __u32 key = static_cast<__u32>(pid);
  bpf_map__delete_elem(skel_->maps.lg_targets, &key, sizeof key, 0);
  armed_.erase(pid);
}

LastGaspSource::Pending& LastGaspSource::pending(pid_t pid) {
  auto [it, fresh] = pending_.try_emplace(pid);
  if (fresh) {
    it->second.walk.pid = pid;
    it->second.since = std::chrono::steady_clock::now();
    if (auto a = armed_.find(pid); a != armed_.end()) it->second.walk.arm = a->second;
  }
  return it->second;
}

int LastGaspSource::on_control(void* ctx, void* data, size_t size) {
  auto* self = static_cast<LastGaspSource*>(ctx);
  if (size < sizeof(oomsnap_lg_control)) return 0;
  oomsnap_lg_control c;
  std::memcpy(&c, data, sizeof c);  // a copy: the ring's record is let go after this call
  self->control_records_.push_back(c);
  return 0;
}

int LastGaspSource::on_bucket(void* ctx, void* data, size_t size) {
  auto* self = static_cast<LastGaspSource*>(ctx);
  constexpr size_t kHead = offsetof(oomsnap_lg_bucket, data);
  if (size < kHead) return 0;
  oomsnap_lg_bucket head;
  std::memcpy(&head, data, kHead);
  Pending& p = self->pending(static_cast<pid_t>(head.tgid));
  if (head.len > size - kHead || head.len > OOMSNAP_LG_MAX_BUCKET) {
    ++p.malformed;
    return 0;
  }
  ++p.walk.buckets_received;
  if (self->pending_bytes_ + head.len > self->limits_.max_pending_bytes) {
    p.capped = true;
    return 0;
  }
  const auto* bytes = static_cast<const uint8_t*>(data) + kHead;
  if (!p.walk.image->add(head.addr, std::vector<uint8_t>(bytes, bytes + head.len))) {
    ++p.malformed;  // overlapping another bucket or a global: no real list does
    return 0;
  }
  self->pending_bytes_ += head.len;
  return 0;
}

void LastGaspSource::finish(pid_t pid, SnapshotStatus status, std::string reason) {
  auto it = pending_.find(pid);
  if (it == pending_.end()) return;
  Pending& p = it->second;
  LastGaspWalk& w = p.walk;
  w.status = status;
  w.reason = std::move(reason);
  auto worse = [&w](std::string why) {
    if (w.status == SnapshotStatus::kComplete) w.status = SnapshotStatus::kPartial;
    w.reason += (w.reason.empty() ? "" : "; ") + why;
  };
  if (w.buckets_received < w.buckets_sent)
    worse(std::to_string(w.buckets_sent - w.buckets_received) + " of " + std::to_string(w.buckets_sent) +
          " buckets did not arrive");
  if (p.capped) worse("buckets dropped past the agent's cap on last-gasp images");
  if (p.malformed) worse(std::to_string(p.malformed) + " malformed bucket records");
  pending_bytes_ -= std::min(pending_bytes_, w.image->bytes());
  done_.push_back(std::move(w));
  pending_.erase(it);
  disarm(pid);
}

std::vector<LastGaspWalk> LastGaspSource::consume() {
  control_records_.clear();
  ring_buffer__consume(control_rb_);
  ring_buffer__consume(buckets_rb_);  // after lg_control: every bucket before an END read above is in
  for (const oomsnap_lg_control& c : control_records_) {
    const auto pid = static_cast<pid_t>(c.tgid);
    Pending& p = pending(pid);
    LastGaspWalk& w = p.walk;
    if (c.type == OOMSNAP_LG_BEGIN) {
      w.ktime_ns = c.ktime_ns;
      auto put = [this, &w](uint64_t addr, const void* v, size_t n) {
        if (!addr) return;
        const auto* b = static_cast<const uint8_t*>(v);
        if (w.image->add(addr, std::vector<uint8_t>(b, b + n))) pending_bytes_ += n;
      };
      put(w.arm.mbuckets, &c.head, sizeof c.head);
      put(w.arm.mem_profile_rate, &c.rate, sizeof c.rate);
      if (c.cycle_ok) put(w.arm.mprof_cycle, &c.cycle, sizeof c.cycle);
    } else if (c.type == OOMSNAP_LG_END) {
      w.buckets_sent = c.buckets;
      w.walk_ns = c.walk_ns;
      w.zero_tails = c.zero_tails;
      if (w.arm.mbuckets == 0) {
        finish(pid, SnapshotStatus::kFailed, "disarmed during the walk");
      } else if (c.end == OOMSNAP_LG_END_OF_LIST) {
        finish(pid, SnapshotStatus::kComplete, "");
      } else {
        const bool nothing = c.end == OOMSNAP_LG_END_NO_HEAD || c.buckets == 0;
        finish(pid, nothing ? SnapshotStatus::kFailed : SnapshotStatus::kPartial,
               last_gasp_end_reason(c.end, c.buckets, c.at));
      }
    }
  }
  // A walk whose END was lost (lg_control full) ends here.
  const auto now = std::chrono::steady_clock::now();
  std::vector<pid_t> stale;
  for (const auto& [pid, p] : pending_)
    if (now - p.since > limits_.end_timeout) stale.push_back(pid);
  for (pid_t pid : stale)
    finish(pid, SnapshotStatus::kPartial, "the walk's END record was lost (lg_control full)");
  return std::exchange(done_, {});
}

}  // namespace oomsnap
