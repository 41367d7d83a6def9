#include "agent/events/container_record_limit.h"

#include <algorithm>

namespace oomsnap {

ContainerRecordLimiter::Verdict ContainerRecordLimiter::admit(const std::string& container, const HeldEvent& event,
                                                              MonoNs now, uint64_t limit) {
  State& s = state_[container];
  if (s.written == 0 && !s.held) {
    s.window_start = now;  // a fresh entry: its window starts with this event
  } else if (window_ended(s, now)) {
    // What the ended window still owes goes into this record, which opens
    // the next window.
    s.window_start = now;
    s.written = 0;
  }
  const uint64_t in_kernel = event.event.suppressed;
  if (s.written < (limit ? limit : 1)) {
    ++s.written;
    Verdict v;
    v.write = true;
    v.suppressed = {s.pending.total + in_kernel, s.pending.in_kernel + in_kernel, s.pending.first_ns};
    s.pending = {};
    s.held.reset();
    return v;
  }
  s.pending.total += 1 + in_kernel;
  s.pending.in_kernel += in_kernel;
  if (!s.pending.first_ns) s.pending.first_ns = event.event.ktime_ns;
  s.held = event;
  return {};
}

void ContainerRecordLimiter::add_suppressed(const std::string& container, uint64_t in_kernel) {
  if (in_kernel == 0) return;
  auto it = state_.find(container);
  // Without an entry there is no window to carry it to; the next event opens
  // one, so keep the count in a fresh entry whose window starts then.
  State& s = it != state_.end() ? it->second : state_[container];
  s.pending.total += in_kernel;
  s.pending.in_kernel += in_kernel;
}

std::optional<ContainerRecordLimiter::Due> ContainerRecordLimiter::owed(const std::string& container, State& s) {
  if (!s.held) return std::nullopt;  // counts without a held event wait for the next record
  Due d;
  d.container = container;
  d.event = std::move(*s.held);
  d.suppressed = s.pending;
  d.suppressed.total -= 1;  // the held event is the record itself
  d.suppressed.in_kernel = std::min(d.suppressed.in_kernel, d.suppressed.total);
  s.held.reset();
  s.pending = {};
  return d;
}

std::vector<ContainerRecordLimiter::Due> ContainerRecordLimiter::take_due(MonoNs now, bool all) {
  std::vector<Due> due;
  for (auto it = state_.begin(); it != state_.end();) {
    State& s = it->second;
    if (!all && s.written > 0 && !window_ended(s, now)) {
      ++it;
      continue;
    }
    if (auto d = owed(it->first, s)) {
      // Its record opens the next window.
      s.window_start = now;
      s.written = 1;
      due.push_back(std::move(*d));
      ++it;
    } else if (s.pending.total == 0 || all) {
      it = state_.erase(it);
    } else {
      ++it;  // counts only (add_suppressed): kept for the next record
    }
  }
  return due;
}

std::optional<ContainerRecordLimiter::Due> ContainerRecordLimiter::forget(const std::string& container) {
  auto it = state_.find(container);
  if (it == state_.end()) return std::nullopt;
  auto d = owed(container, it->second);
  state_.erase(it);
  return d;
}

}  // namespace oomsnap
