// Which memory cgroups the in-kernel usage threshold watches, and against
// what (bpf/agent.bpf.c, OOMSNAP_EV_USAGE_THRESHOLD). Pure: from the cgroups
// of a rescan to the entries BpfEventSource::set_usage_watches puts in the
// BPF maps.
//
// A charge is seen in the memcg of the task that makes it. The limit that
// matters is its container's: the nearest cgroup at or above it (within the
// scope) with a finite limit (nearest_limited, which
// CgroupTriggers::limited_container_of asks too). So every cgroup below a
// limit is watched, each pointing `hops` parents up to its container.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace oomsnap {

// One watched memcg: its charges count toward `container_inode`, `hops`
// parents up (0: itself), whose usage is compared with threshold_bytes.
// After a crossing it fires again only once usage fell below rearm_bytes.
struct UsageWatch {
  uint64_t memcg_inode = 0;
  uint64_t container_inode = 0;
  uint32_t hops = 0;
  uint64_t threshold_bytes = 0;
  uint64_t rearm_bytes = 0;
  bool operator==(const UsageWatch&) const = default;
};

// `percent` of `limit`, without overflow for any limit.
uint64_t threshold_of(uint64_t limit, int percent);

// Below the threshold by this share of the limit (2 %), a container's
// threshold is armed again: usage wavering around the threshold as a runtime
// frees and grows is one crossing, not one per page.
uint64_t rearm_of(uint64_t limit, int percent);

// The container of `memcg`: the nearest cgroup at or above it, not above
// `scope`, that `limited` says has a finite limit, and how many parents up it
// is (0: itself). None when no such cgroup is there, or memcg is outside the
// scope.
struct LimitedAncestor {
  std::string path;
  uint32_t hops = 0;
};
std::optional<LimitedAncestor> nearest_limited(const std::string& memcg, const std::string& scope,
                                               const std::function<bool(const std::string&)>& limited);

struct ScannedMemcg {
  std::string path;  // relative to the controller's mount, "/" or "/a/b"
  uint64_t inode = 0;
  std::optional<uint64_t> limit_bytes;  // none: unlimited
};

// The watches for the cgroups of one rescan, all within `scope`: one per
// cgroup that has a container (itself included), none for a cgroup with no
// limit at or above it. A cgroup whose container is more than max_hops up is
// left out (counted in *too_deep when given).
std::vector<UsageWatch> usage_watches(const std::vector<ScannedMemcg>& memcgs, const std::string& scope,
                                      int threshold_percent, uint32_t max_hops, size_t* too_deep = nullptr);

}  // namespace oomsnap
