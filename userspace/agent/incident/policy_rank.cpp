#include "agent/incident/policy_rank.h"

#include <algorithm>
#include <tuple>

#include "agent/cgroup/cgroup.h"

namespace oomsnap {

std::string tenant_of(const std::string& memcg) {
  auto ref = container_of(memcg);
  if (ref && !ref->pod_uid.empty()) return "pod:" + ref->pod_uid;
  return memcg;
}

namespace {

int tier(const Candidate& c) {
  if (c.growth.kind == GrowthKind::kGrowing) return 0;
  return c.collected_recently ? 2 : 1;
}

}  // namespace

void rank_candidates(std::vector<Candidate>& candidates) {
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    const int ta = tier(a), tb = tier(b);
    if (ta != tb) return ta < tb;
    if (ta == 0 && a.growth.seconds_to_limit != b.growth.seconds_to_limit)
      return a.growth.seconds_to_limit < b.growth.seconds_to_limit;
    const bool ua = a.growth.kind == GrowthKind::kUnknown, ub = b.growth.kind == GrowthKind::kUnknown;
    if (ua != ub) return ua;
    if (a.ratio != b.ratio) return a.ratio > b.ratio;
    return a.memcg < b.memcg;
  });
}

size_t next_fair_pick(const std::vector<Candidate>& ranked, const std::vector<bool>& taken,
                      const std::map<std::string, unsigned>& used) {
  size_t best = ranked.size();
  unsigned best_used = 0;
  for (size_t i = 0; i < ranked.size(); ++i) {
    if (taken[i]) continue;
    auto it = used.find(ranked[i].tenant);
    const unsigned u = it == used.end() ? 0 : it->second;
    if (best == ranked.size() || u < best_used) {
      best = i;
      best_used = u;
    }
  }
  return best;
}

}  // namespace oomsnap
