#include "agent/incident/policy.h"

#include <time.h>

#include <algorithm>
#include <cstdio>

#include "agent/incident/policy_rank.h"

namespace oomsnap {

const std::vector<std::string>& known_triggers() {
  static const std::vector<std::string> names = {"memcg_pressure", "oom_kill", "process_exit", "memory_events",
                                                 "psi",            "threshold", "forecast"};
  return names;
}

MonoNs monotonic_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<MonoNs>(ts.tv_sec) * 1'000'000'000ull + static_cast<MonoNs>(ts.tv_nsec);
}

namespace {
constexpr MonoNs kBudgetWindow = 60'000'000'000ull;  // NodeMaxCapturesPerMinute counts collections in any 60 s
}

const char* to_string(OfferResult r) {
  switch (r) {
    case OfferResult::kOpenedBatch: return "opened batch";
    case OfferResult::kJoinedBatch: return "joined batch";
    case OfferResult::kDeferred: return "deferred";
    case OfferResult::kUnlimited: return "not a candidate: no finite limit";
    case OfferResult::kBelowThreshold: return "not a candidate: below threshold";
  }
  return "?";
}

const char* to_string(Deferral d) {
  switch (d) {
    case Deferral::kInterval: return "within the container's IntervalTracing";
    case Deferral::kBudget: return "the node's capture budget is used";
    case Deferral::kBelowThreshold: return "re-read below the threshold, until back above";
  }
  return "?";
}

void note_seen_trigger(std::vector<SeenTrigger>& seen, SeenTrigger s) {
  if (seen.size() >= kMaxSeenTriggers) {
    if (seen.size() >= kMaxSeenTriggers + kMaxSeenTriggerTypesPastCap) return;
    for (const SeenTrigger& have : seen)
      if (have.type == s.type && have.source == s.source) return;
  }
  seen.push_back(std::move(s));
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
  note_seen_trigger(it->second.seen, {t.type, t.kernel_ns, t.source});
}

std::optional<MonoNs> Policy::interval_until(const std::string& memcg, MonoNs now) const {
  auto it = last_collected_.find(memcg);
  if (it == last_collected_.end()) return std::nullopt;
  const MonoNs until = it->second + static_cast<MonoNs>(options_.interval.count());
  return now < until ? std::optional<MonoNs>(until) : std::nullopt;
}

MonoNs Policy::budget_free_at(MonoNs now) const {
  // recent_ is oldest first: the budget frees when the one that fills it ages out.
  size_t live = 0;
  for (const Spent& s : recent_) live += now < s.at + kBudgetWindow;
  if (live < options_.max_per_minute) return now;
  if (options_.max_per_minute == 0) return ~MonoNs{0};
  const size_t first_live = recent_.size() - live;
  return recent_[first_live + live - options_.max_per_minute].at + kBudgetWindow;
}

void Policy::expire_budget(MonoNs now) {
  size_t n = 0;
  while (n < recent_.size() && now >= recent_[n].at + kBudgetWindow) ++n;
  recent_.erase(recent_.begin(), recent_.begin() + static_cast<std::ptrdiff_t>(n));
}

void Policy::sample(const std::string& memcg, const MemcgStats& stats, MonoNs now) {
  if (!stats.limit_bytes || !stats.usage_bytes) return;  // never a candidate: no trend kept
  trends_[memcg].add(now, *stats.usage_bytes);
}

bool Policy::collected_recently(const std::string& memcg, MonoNs now) const {
  auto it = last_collected_.find(memcg);
  if (it == last_collected_.end()) return false;
  const MonoNs recent = std::max(kRecentCollection, 2 * static_cast<MonoNs>(options_.interval.count()));
  return now < it->second + recent;
}

OfferResult Policy::offer(const std::string& memcg, const Trigger& trigger, const MemcgStats& stats, MonoNs now) {
  if (!stats.limit_bytes) return OfferResult::kUnlimited;
  // Below the threshold too: the trend starts before the crossing. Not a
  // forecast's figure: it is one read mid-climb, and with the re-check of a
  // container parked since, the two would read as growth far steeper than
  // any (and rank parked containers by where their climbs were sampled).
  if (trigger.type != "forecast") sample(memcg, stats, now);
  auto r = usage_ratio(stats);
  const int bar = trigger.type == "forecast" ? std::min(options_.forecast_floor_percent, options_.threshold_percent)
                                             : options_.threshold_percent;
  if (!r || *r * 100.0 < bar) return OfferResult::kBelowThreshold;
  if (auto until = interval_until(memcg, now)) {
    add(deferred_, memcg, trigger);
    Candidate& c = deferred_[memcg];
    c.not_before = std::max(c.not_before, *until);
    return OfferResult::kDeferred;
  }
  // Already deferred by the budget: it waits there, in ratio order, rather
  // than opening batches the budget cannot serve.
  if (auto it = deferred_.find(memcg); it != deferred_.end()) {
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
  std::optional<MonoNs> next = batch_deadline_;
  for (const auto& [memcg, c] : deferred_)
    if (!next || c.not_before < *next) next = c.not_before;
  return next;
}

Decision Policy::on_deadline(MonoNs now, const Reread& reread) {
  Decision d;
  const bool batch_due = batch_deadline_ && now >= *batch_deadline_;
  bool deferred_due = false;
  for (const auto& [memcg, c] : deferred_) deferred_due = deferred_due || c.not_before <= now;
  if (!batch_due && !deferred_due) return d;

  // Everything due is judged together: the batch (when its window is over)
  // and the deferred candidates whose time has come.
  std::map<std::string, Candidate> pool;
  if (batch_due) {
    pool = std::move(batch_);
    batch_.clear();
    batch_deadline_.reset();
  }
  for (auto it = deferred_.begin(); it != deferred_.end();) {
    if (it->second.not_before > now) {
      ++it;
      continue;
    }
    auto [at, fresh] = pool.emplace(it->first, std::move(it->second));
    if (!fresh) {
      Candidate& c = it->second;
      at->second.merged += 1 + c.merged;
      for (auto& s : c.seen) note_seen_trigger(at->second.seen, std::move(s));
    }
    it = deferred_.erase(it);
  }

  std::vector<Candidate> keep;
  for (auto& [memcg, c] : pool) {
    if (auto until = interval_until(memcg, now)) {  // collected since it was pooled
      c.not_before = *until;
      c.deferred_for = Deferral::kInterval;
      c.watch_until = 0;
      deferred_.emplace(memcg, std::move(c));
      continue;
    }
    c.stats = reread(memcg);
    sample(memcg, c.stats, now);
    auto r = usage_ratio(c.stats);
    if (!c.stats.limit_bytes || !r) {
      d.dropped.emplace_back(memcg, "no finite limit at re-check");
      continue;
    }
    const int bar = bar_percent(c);
    if (*r * 100.0 < bar) {
      below_at_recheck(std::move(c), *r, bar, now, d);
      continue;
    }
    c.watch_until = 0;
    c.ratio = *r;
    c.rule = c.trigger.type == "forecast" || *r * 100.0 < options_.threshold_percent ? "forecast" : "threshold";
    auto trend = trends_.find(memcg);
    c.growth = trend == trends_.end() ? Growth{}
                                      : trend->second.growth(now, c.stats.usage_bytes.value_or(0), *c.stats.limit_bytes);
    c.collected_recently = collected_recently(memcg, now);
    c.tenant = tenant_of(memcg);
    keep.push_back(std::move(c));
  }
  rank_candidates(keep);
  expire_budget(now);
  std::map<std::string, unsigned> used;  // per tenant, within the budget's window
  for (const Spent& s : recent_) ++used[s.tenant];
  std::vector<bool> taken(keep.size(), false);
  while (budget_free_at(now) <= now) {
    const size_t i = next_fair_pick(keep, taken, used);
    if (i == keep.size()) break;
    taken[i] = true;
    ++used[keep[i].tenant];
    recent_.push_back({now, keep[i].tenant});
    last_collected_[keep[i].memcg] = now;
    d.collect.push_back(std::move(keep[i]));
  }
  const MonoNs free_at = budget_free_at(now);
  for (size_t i = 0; i < keep.size(); ++i) {
    if (taken[i]) continue;
    Candidate& c = keep[i];
    char buf[224];
    std::snprintf(buf, sizeof buf,
                  "the node's capture budget (NodeMaxCapturesPerMinute %u) is used; deferred %.1f s (growth %s, "
                  "tenant's collections this minute %u)",
                  options_.max_per_minute, static_cast<double>(free_at - now) / 1e9, to_string(c.growth.kind),
                  used[c.tenant]);
    d.dropped.emplace_back(c.memcg, buf);
    c.not_before = free_at;
    c.deferred_for = Deferral::kBudget;
    deferred_.emplace(c.memcg, std::move(c));
  }
  // Trends of containers nothing has offered for a while go (a trend is
  // only worth its memory while its container may become a candidate).
  for (auto it = trends_.begin(); it != trends_.end();)
    it = it->second.stale(now) && !batch_.count(it->first) && !deferred_.count(it->first) ? trends_.erase(it) : ++it;
  return d;
}

int Policy::bar_percent(const Candidate& c) const {
  for (const SeenTrigger& s : c.seen)
    if (s.type == "forecast") return std::min(options_.forecast_floor_percent, options_.threshold_percent);
  return options_.threshold_percent;
}

void Policy::below_at_recheck(Candidate c, double ratio, int bar_percent, MonoNs now, Decision& d) {
  char buf[160];
  const char* bar = bar_percent == options_.threshold_percent ? "threshold" : "forecast floor";
  const bool first = c.watch_until == 0;
  if (first) c.watch_until = now + kBelowWatch;
  if (now < c.watch_until) {
    // Said once, when the watch begins; its re-reads are silent.
    if (first) {
      std::snprintf(buf, sizeof buf,
                    "usage %.1f%% of the limit at re-check, below the %d%% %s; re-read every %llu ms for %llu s",
                    ratio * 100.0, bar_percent, bar,
                    static_cast<unsigned long long>(kBelowRecheckEvery / 1'000'000),
                    static_cast<unsigned long long>(kBelowWatch / 1'000'000'000));
      d.dropped.emplace_back(c.memcg, buf);
    }
    c.not_before = now + kBelowRecheckEvery;
    c.deferred_for = Deferral::kBelowThreshold;
    deferred_.emplace(c.memcg, std::move(c));
    return;
  }
  std::snprintf(buf, sizeof buf, "usage %.1f%% of the limit, still below the %d%% %s after %llu s of re-reads",
                ratio * 100.0, bar_percent, bar, static_cast<unsigned long long>(kBelowWatch / 1'000'000'000));
  d.dropped.emplace_back(c.memcg, buf);
}

void Policy::forget(const std::string& memcg) {
  batch_.erase(memcg);
  deferred_.erase(memcg);
  last_collected_.erase(memcg);
  trends_.erase(memcg);
  if (batch_.empty()) batch_deadline_.reset();
}

}  // namespace oomsnap
