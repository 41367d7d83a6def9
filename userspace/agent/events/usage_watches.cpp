#include "agent/events/usage_watches.h"

#include <algorithm>
#include <map>

#include "agent/cgroup/cgroup.h"
#include "agent/incident/collect.h"

namespace oomsnap {

uint64_t threshold_of(uint64_t limit, int percent) {
  const uint64_t p = static_cast<uint64_t>(std::clamp(percent, 0, 100));
  return limit / 100 * p + limit % 100 * p / 100;
}

uint64_t rearm_of(uint64_t limit, int percent) {
  const uint64_t t = threshold_of(limit, percent), margin = limit / 50;
  return t > margin ? t - margin : 0;
}

std::optional<LimitedAncestor> nearest_limited(const std::string& memcg, const std::string& scope,
                                               const std::function<bool(const std::string&)>& limited) {
  std::string p = memcg;
  // Each step drops one level of the path; "/" or the scope ends the walk.
  for (uint32_t hops = 0; memcg_within(p, scope); ++hops) {
    if (limited(p)) return LimitedAncestor{p, hops};
    if (p == "/" || p == scope) break;
    p = parent_of(p);
  }
  return std::nullopt;
}

std::vector<UsageWatch> usage_watches(const std::vector<ScannedMemcg>& memcgs, const std::string& scope,
                                      int threshold_percent, uint32_t max_hops, size_t* too_deep) {
  std::map<std::string, const ScannedMemcg*> by_path;
  for (const auto& m : memcgs)
    if (memcg_within(m.path, scope)) by_path[m.path] = &m;
  std::vector<UsageWatch> out;
  if (too_deep) *too_deep = 0;
  auto limited = [&](const std::string& p) {
    auto it = by_path.find(p);
    return it != by_path.end() && it->second->limit_bytes.has_value();
  };
  for (const auto& [path, m] : by_path) {
    auto up = nearest_limited(path, scope, limited);
    if (!up) continue;
    const ScannedMemcg* container = by_path.at(up->path);
    if (!m->inode || !container->inode) continue;
    if (up->hops > max_hops) {
      if (too_deep) ++*too_deep;
      continue;
    }
    const uint64_t limit = *container->limit_bytes;
    out.push_back({m->inode, container->inode, up->hops, threshold_of(limit, threshold_percent),
                   rearm_of(limit, threshold_percent)});
  }
  return out;
}

}  // namespace oomsnap
