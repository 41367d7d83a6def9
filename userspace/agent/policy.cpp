#include "agent/policy.h"

#include <time.h>

#include <algorithm>
#include <cstdio>

namespace oomsnap {

MonoNs monotonic_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<MonoNs>(ts.tv_sec) * 1'000'000'000ull + static_cast<MonoNs>(ts.tv_nsec);
}

const char* to_string(OfferResult r) {
  switch (r) {
    case OfferResult::kOpenedBatch: return "opened batch";
    case OfferResult::kJoinedBatch: return "joined batch";
    case OfferResult::kDeferred: return "deferred (cooldown)";
    case OfferResult::kUnlimited: return "not a candidate: no finite limit";
    case OfferResult::kBelowThreshold: return "not a candidate: below threshold";
  }
  return "?";
}

void Policy::add(std::map<std::string, Candidate>& into, const std::string& memcg, const Trigger& t) {
  auto it = into.find(memcg);
  if (it == into.end()) {
    Candidate c;
    c.memcg = memcg;
    c.trigger = t;
    it = into.emplace(memcg, std::move(c)).first;
  } else {
    ++it->second.merged;  // the first trigger stays: it is when pressure began
  }
  if (it->second.seen.size() < kMaxSeenTriggers) it->second.seen.push_back({t.type, t.kernel_ns});
}

OfferResult Policy::offer(const std::string& memcg, const Trigger& trigger, const MemcgStats& stats, MonoNs now) {
  if (!stats.limit_bytes) return OfferResult::kUnlimited;
  auto r = usage_ratio(stats);
  if (!r || *r * 100.0 < options_.threshold_percent) return OfferResult::kBelowThreshold;
  if (in_cooldown(now)) {
    add(deferred_, memcg, trigger);
    return OfferResult::kDeferred;
  }
  if (batch_deadline_) {
    add(batch_, memcg, trigger);
    return OfferResult::kJoinedBatch;
  }
  batch_deadline_ = now + static_cast<MonoNs>(options_.batch_window.count());
  add(batch_, memcg, trigger);
  return OfferResult::kOpenedBatch;
}

std::optional<MonoNs> Policy::next_deadline() const {
  if (batch_deadline_) return batch_deadline_;
  if (!deferred_.empty()) return cooldown_until_.value_or(0);
  return std::nullopt;
}

bool Policy::recently_collected(const std::string& memcg, MonoNs now) const {
  auto it = last_collected_.find(memcg);
  // Two cooldowns: the deferred re-check runs right at (or just after) the
  // end of the cooldown that the last collection started.
  return it != last_collected_.end() && now - it->second <= 2 * static_cast<MonoNs>(options_.cooldown.count());
}

Decision Policy::on_deadline(MonoNs now, const Reread& reread) {
  Decision d;
  const bool batch_due = batch_deadline_ && now >= *batch_deadline_;
  const bool deferred_due = !batch_deadline_ && !deferred_.empty() && !in_cooldown(now);
  if (!batch_due && !deferred_due) return d;

  // Everything due is judged together: the batch, plus deferred candidates
  // once the cooldown is over.
  std::map<std::string, Candidate> pool = std::move(batch_);
  batch_.clear();
  batch_deadline_.reset();
  if (!in_cooldown(now)) {
    for (auto& [memcg, c] : deferred_) {
      auto it = pool.find(memcg);
      if (it == pool.end()) {
        pool.emplace(memcg, std::move(c));
      } else {
        it->second.merged += 1 + c.merged;
        for (auto& s : c.seen)
          if (it->second.seen.size() < kMaxSeenTriggers) it->second.seen.push_back(std::move(s));
      }
    }
    deferred_.clear();
  }

  std::vector<Candidate> keep;
  for (auto& [memcg, c] : pool) {
    c.stats = reread(memcg);
    auto r = usage_ratio(c.stats);
    if (!c.stats.limit_bytes || !r) {
      d.dropped.emplace_back(memcg, "no finite limit at re-check");
      continue;
    }
    if (*r * 100.0 < options_.threshold_percent) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "usage %.1f%% of the limit at re-check, below the %d%% threshold",
                    *r * 100.0, options_.threshold_percent);
      d.dropped.emplace_back(memcg, buf);
      continue;
    }
    c.ratio = *r;
    keep.push_back(std::move(c));
  }
  if (keep.empty()) return d;

  std::sort(keep.begin(), keep.end(), [&](const Candidate& a, const Candidate& b) {
    bool ra = recently_collected(a.memcg, now), rb = recently_collected(b.memcg, now);
    if (ra != rb) return !ra;
    if (a.ratio != b.ratio) return a.ratio > b.ratio;
    return a.memcg < b.memcg;
  });
  d.collect = std::move(keep.front());
  cooldown_until_ = now + static_cast<MonoNs>(options_.cooldown.count());
  last_collected_[d.collect->memcg] = now;
  for (size_t i = 1; i < keep.size(); ++i) {
    d.dropped.emplace_back(keep[i].memcg, "a container with a higher usage ratio was collected; deferred until the cooldown ends");
    deferred_.emplace(keep[i].memcg, std::move(keep[i]));
  }
  return d;
}

void Policy::forget(const std::string& memcg) {
  batch_.erase(memcg);
  deferred_.erase(memcg);
  last_collected_.erase(memcg);
  if (batch_.empty()) batch_deadline_.reset();
}

}  // namespace oomsnap
