// What every live breakdown test checks of `oomsnap snapshot`'s record: the
// record holds to the schema, the breakdown is complete and its kinds sum to
// VmRSS within 2 %; and the detail's names.
#pragma once
#include <gtest/gtest.h>
#include <sys/types.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "record_schema.h"
#include "run_command.h"

namespace oomsnap_test {

inline constexpr uint64_t kMiB = 1 << 20;
inline const char* const kBreakdownKinds[] = {"heap", "heap_free", "runtime", "stacks", "native", "file", "shmem"};

inline nlohmann::json snapshot_of(pid_t pid) {
  auto r = run_command(std::string(OOMSNAP_BINARY) + " snapshot --pid " + std::to_string(pid) + " 2>/dev/null");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(record_schema_errors(r.out, true), "");
  return nlohmann::json::parse(r.out, nullptr, false);
}

// The breakdown, checked for what holds of every one: complete, the kinds
// sum to VmRSS within 2 %. Returns the largest kind's name.
inline std::string check_breakdown(const nlohmann::json& snap, const nlohmann::json*& out) {
  const nlohmann::json& pm = snap.at("process_memory");
  const nlohmann::json& b = pm.at("breakdown");
  out = &b;
  EXPECT_EQ(b.at("status"), "complete") << b.dump(1);
  uint64_t sum = 0, largest = 0;
  std::string largest_kind;
  for (const char* k : kBreakdownKinds) {
    const uint64_t v = b.at(k).get<uint64_t>();
    sum += v;
    if (v > largest) largest = v, largest_kind = k;
  }
  const double rss = pm.at("rss_bytes").get<double>();
  const double off = (static_cast<double>(sum) - rss) / rss;
  EXPECT_LT(std::abs(off), 0.02) << "kinds sum to " << sum << ", VmRSS " << rss << "\n" << b.dump(1);
  std::printf("[ info ] kinds sum %llu vs VmRSS %.0f: %+.3f %%\n", static_cast<unsigned long long>(sum), rss, off * 100);
  return largest_kind;
}

// True when the detail names `what_prefix` under `kind` (its bytes in *bytes).
inline bool names(const nlohmann::json& b, const std::string& kind, const std::string& what_prefix,
                  uint64_t* bytes = nullptr) {
  for (const auto& d : b.at("detail"))
    if (d.at("kind") == kind && d.at("what").get<std::string>().rfind(what_prefix, 0) == 0) {
      if (bytes) *bytes = d.at("bytes").get<uint64_t>();
      return true;
    }
  return false;
}

}  // namespace oomsnap_test
