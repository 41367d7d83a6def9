// When to collect, and which container: pure decisions over triggers, usage
// figures and a monotonic clock, so every rule is unit-testable without a
// kernel. The agent feeds it triggers and asks it at the deadlines it names.
//
// Rules (issues #3, #13, #25):
// - a container is a candidate only with a finite limit and usage/limit at or
//   above the threshold, or, for a "forecast" trigger (climb_forecast.h: the
//   limit is nearer than a capture's time at the current rate), at or above
//   the forecast's floor;
// - candidates arriving within a short batch window are merged; at the end of
//   the window each is re-read and re-checked and they are ranked by how soon
//   they reach their limit (growth and closeness, policy_rank.h; issue #28);
// - a container is not collected again within its interval (IntervalTracing,
//   per container): its triggers in that time are deferred and re-checked
//   when the interval ends. Unlike a node-wide cooldown (HUATUO's), one
//   container's incident leaves the others' visible;
// - a candidate whose usage reads below the threshold at the re-check (a
//   runtime returning pages just then) is re-read every 100 ms for 10 s,
//   and judged again as soon as it is back above: the trigger that found
//   it above may not come again (the usage poll and the kernel's thresholds
//   signal crossings only, and it may never read below in between);
// - a node-wide budget bounds the overhead: at most max_per_minute
//   collections in any 60 s, shared round-robin between tenants (pods);
//   candidates beyond it are deferred, in rank order, until the oldest
//   collection in the window ages out.
// OOM kills are not decided here: the agent records every one.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/cgroup/cgroup.h"
#include "agent/incident/usage_trend.h"

namespace oomsnap {

using MonoNs = uint64_t;  // CLOCK_MONOTONIC nanoseconds, the clock of bpf_ktime_get_ns()

MonoNs monotonic_now_ns();

// What made the agent look at a container.
struct Trigger {
  std::string type;        // a known_triggers() name: "memcg_pressure", "threshold", ...
  std::string source;      // how it arrived, e.g. "bpf raw_tp/mm_vmscan_memcg_reclaim_begin"
  MonoNs kernel_ns = 0;    // when the kernel saw it (BPF timestamp), else when it was read
  bool from_bpf_clock = false;  // kernel_ns is the BPF event's own timestamp
  MonoNs received_ns = 0;  // when the agent took it in
  pid_t pid = 0;           // the task involved, when the kernel names one
  nlohmann::json counters = nlohmann::json::object();
};

// Every Trigger::type there is (the names [triggers] Blacklist accepts).
const std::vector<std::string>& known_triggers();

struct PolicyOptions {
  int threshold_percent = 90;
  int forecast_floor_percent = 50;  // the bar of a candidate a "forecast" trigger made
  std::chrono::nanoseconds interval{std::chrono::seconds(300)};  // per container (IntervalTracing)
  unsigned max_per_minute = 6;                                    // node-wide (NodeMaxCapturesPerMinute)
  std::chrono::nanoseconds batch_window{std::chrono::milliseconds(2)};
};

// One trigger as it was seen, for an incident's timeline.
struct SeenTrigger {
  std::string type;
  MonoNs kernel_ns = 0;
  std::string source;  // Trigger::source: which mechanism saw it (a BPF event, the poll, an eventfd, ...)
};
constexpr size_t kMaxSeenTriggers = 64;  // per candidate / incident: the first ones are what matter
// Past kMaxSeenTriggers, the first trigger of a type and source not listed yet
// still is, up to this many more: memory.events under memory.high fires dozens
// of times a second, and must not hide the usage poll's first "threshold"
// behind it, nor the in-kernel threshold's behind the poll's.
constexpr size_t kMaxSeenTriggerTypesPastCap = 8;
// Adds `s` to an incident's or candidate's list of seen triggers, within the caps.
void note_seen_trigger(std::vector<SeenTrigger>& seen, SeenTrigger s);

// Why a candidate waits.
enum class Deferral {
  kInterval,        // its container was collected within IntervalTracing
  kBudget,          // the node's capture budget is used
  kBelowThreshold,  // it read below the threshold at its re-check: re-read until back above
};

const char* to_string(Deferral d);

// Below the threshold at a re-check: re-read this often, for this long.
constexpr MonoNs kBelowRecheckEvery = 100'000'000ull;
constexpr MonoNs kBelowWatch = 10'000'000'000ull;

struct Candidate {
  std::string memcg;   // relative cgroup path of the limited container
  Trigger trigger;     // the first trigger that made it a candidate
  uint64_t merged = 0; // further triggers for it that were folded in
  std::vector<SeenTrigger> seen;  // every trigger folded in, in arrival order (capped)
  MemcgStats stats;    // as re-read when the decision was made
  double ratio = 0;
  Growth growth;                  // from its usage samples, at the decision
  // The rule it was collected by: "threshold" (at or above ThresholdPercent)
  // or "forecast" (a forecast trigger made it a candidate, and it may be below).
  std::string rule;
  bool collected_recently = false; // collected within kRecentCollection before this decision
  std::string tenant;             // whose share of the budget it uses (policy_rank.h tenant_of)
  MonoNs not_before = 0;  // deferred: re-checked from then on
  Deferral deferred_for = Deferral::kInterval;
  MonoNs watch_until = 0; // read below the threshold at a re-check: re-read until then
};

enum class OfferResult {
  kOpenedBatch,     // first candidate: a batch window started
  kJoinedBatch,     // added to (or merged into) the open batch
  kDeferred,        // it waits (Policy::deferral says why) and is re-checked when that ends
  kUnlimited,       // no finite limit: never a candidate
  kBelowThreshold,  // usage/limit under the threshold
};
const char* to_string(OfferResult r);

// A container collected this recently and not growing ranks behind the
// others (at least; twice its interval when that is longer).
constexpr MonoNs kRecentCollection = 600'000'000'000ull;

struct Decision {
  std::vector<Candidate> collect;                            // in rank order, within the budget's share
  std::vector<std::pair<std::string, std::string>> dropped;  // memcg, why it was not collected
};

class Policy {
 public:
  using Reread = std::function<MemcgStats(const std::string& memcg)>;

  explicit Policy(PolicyOptions options) : options_(options) {}
  void set_options(PolicyOptions options) { options_ = options; }
  const PolicyOptions& options() const { return options_; }

  // A trigger for `memcg` whose counters right now are `stats`.
  OfferResult offer(const std::string& memcg, const Trigger& trigger, const MemcgStats& stats, MonoNs now);

  // When on_deadline() should next be called (batch end, or the earliest
  // time a deferred candidate may be re-checked); nullopt when nothing is pending.
  std::optional<MonoNs> next_deadline() const;

  // Closes a due batch, together with the deferred candidates now due, and
  // decides which to collect: by rank, within the node budget, shared between tenants.
  Decision on_deadline(MonoNs now, const Reread& reread);

  size_t deferred_count() const { return deferred_.size(); }
  // Why the container's candidate waits; nullopt when none does.
  std::optional<Deferral> deferral(const std::string& memcg) const {
    auto it = deferred_.find(memcg);
    return it == deferred_.end() ? std::nullopt : std::optional<Deferral>(it->second.deferred_for);
  }
  bool is_deferred(const std::string& memcg) const { return deferral(memcg).has_value(); }
  bool deferred_by_budget(const std::string& memcg) const { return deferral(memcg) == Deferral::kBudget; }
  bool in_batch(const std::string& memcg) const { return batch_.count(memcg) != 0; }
  // The end of the container's interval, when it is within one.
  std::optional<MonoNs> interval_until(const std::string& memcg, MonoNs now) const;
  // When the node budget next admits a collection (now when it does).
  MonoNs budget_free_at(MonoNs now) const;
  void forget(const std::string& memcg);  // the cgroup was removed

 private:
  void add(std::map<std::string, Candidate>& into, const std::string& memcg, const Trigger& t);
  void expire_budget(MonoNs now);
  // A candidate read below the threshold: watched (deferred for a re-read
  // soon) while its watch lasts, else dropped with the reason.
  void below_at_recheck(Candidate c, double ratio, int bar_percent, MonoNs now, Decision& d);
  // The share of the limit a candidate must be at: the forecast's floor once
  // a forecast trigger is among its triggers, else the threshold.
  int bar_percent(const Candidate& c) const;
  void sample(const std::string& memcg, const MemcgStats& stats, MonoNs now);
  bool collected_recently(const std::string& memcg, MonoNs now) const;

  PolicyOptions options_;
  std::map<std::string, Candidate> batch_;
  std::optional<MonoNs> batch_deadline_;
  std::map<std::string, Candidate> deferred_;
  std::map<std::string, MonoNs> last_collected_;
  struct Spent {
    MonoNs at;
    std::string tenant;
  };
  std::vector<Spent> recent_;  // collections within the last 60 s, oldest first
  std::map<std::string, UsageTrend> trends_;  // limited containers' usage samples
};

}  // namespace oomsnap
