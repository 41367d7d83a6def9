// The order the policy collects candidates in, and how the node's budget is
// shared between tenants (issue #28 item 6). Pure functions over candidates
// whose growth (usage_trend.h) is already estimated.
//
// Rank, first to last:
//  1. growing containers, soonest to reach their limit first (time to the
//     limit = headroom / rate): a leak rising through 92 % goes before
//     containers parked at 99 %, and one over the threshold and rising fast
//     goes first of all;
//  2. the others (growth unknown, steady or shrinking) not collected
//     recently, those whose growth is not yet known before steady ones,
//     then closest to the limit first;
//  3. the others collected recently: one already captured and not growing
//     waits behind everything that has not been.
//
// Share: each free slot of the node budget goes to the best-ranked
// candidate of the tenant that has had the fewest collections in the
// budget's 60 s window (round-robin, weighted by what each tenant already
// used): one tenant's containers cannot take every slot while another
// tenant's candidate waits. The tenant is the Kubernetes pod (its uid, from
// the cgroup path); a cgroup outside any pod is its own tenant.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "agent/incident/policy.h"

namespace oomsnap {

// "pod:<uid>" for a cgroup inside a Kubernetes pod, else the cgroup path.
std::string tenant_of(const std::string& memcg);

// Sorts by the rank above (ties: by cgroup path, for a stable order).
void rank_candidates(std::vector<Candidate>& candidates);

// The index of the next candidate to collect among those not yet `taken`:
// the first in rank order whose tenant has the fewest collections in
// `used` (tenant -> collections in the window). ranked.size() when all are taken.
size_t next_fair_pick(const std::vector<Candidate>& ranked, const std::vector<bool>& taken,
                      const std::map<std::string, unsigned>& used);

}  // namespace oomsnap
