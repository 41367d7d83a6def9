// What a Go heap snapshot is checked against: the fixture's census of what
// it retains, and its own heap profile (runtime/pprof). Shared by the live
// read's tests (go_snapshot_test.cpp) and the last gasp's (last_gasp_test.cpp).
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "core/snapshot.h"
#include "pprof_summary.h"

namespace oomsnap_test {

inline std::map<std::string, std::pair<uint64_t, uint64_t>> entries_by_name(const oomsnap::Snapshot& s) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> m;  // name -> {objects, bytes}
  for (const auto& e : s.entries) {
    m[e.name].first += e.objects;
    m[e.name].second += e.bytes;
  }
  return m;
}

// At MemProfileRate=1: every site of the fixture's census is in the snapshot
// with exactly its in-use objects and bytes.
inline void expect_census_exact(const oomsnap::Snapshot& s, const nlohmann::json& census) {
  auto got = entries_by_name(s);
  for (auto& [name, site] : census["sites"].items()) {
    ASSERT_TRUE(got.count(name)) << "site " << name << " missing from the snapshot";
    EXPECT_EQ(got[name].first, site["objects"].get<uint64_t>()) << name;
    EXPECT_EQ(got[name].second, site["bytes"].get<uint64_t>()) << name;
  }
}

// Stacks through the fixture's own code, without all-zero samples: a bucket
// created after the target wrote its own profile (by the writing itself) shows
// up in our read with zero counts (they are still in a future cycle), which is
// the same as absent.
inline oomsnap::testutil::StackMap fixture_stacks(const oomsnap::testutil::PprofSummary& s) {
  oomsnap::testutil::StackMap out;
  for (auto& [stack, v] : oomsnap::testutil::filter_stacks(s, "main."))
    if (v[0] || v[1] || v[2] || v[3]) out.emplace(stack, v);
  return out;
}

}  // namespace oomsnap_test
