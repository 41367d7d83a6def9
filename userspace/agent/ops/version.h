// The agent's version, as /metrics reports it (oomsnap_build_info{version}).
// Bumped by hand at a release; the repository has no other version yet.
#pragma once

namespace oomsnap {

inline constexpr const char* kOomsnapVersion = "0.1.0";

}  // namespace oomsnap
