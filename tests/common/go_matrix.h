// The Go fixture matrix tools/build-go-fixtures.sh builds: every cached
// toolchain × every build mode oomsnap must read (the live Go tests run each).
#pragma once
#include <string>

namespace oomsnap_test {

inline constexpr const char* kGoVersions[] = {"1.19", "1.21", "1.22", "1.23", "1.24", "1.25", "1.26", "1.27"};
inline constexpr const char* kGoModes[] = {"default", "pie", "stripped", "pie-stripped"};

inline std::string go_fixture_path(const std::string& ver, const std::string& mode) {
  return std::string(OOMSNAP_FIXTURES) + "/go/" + ver + "/" + mode + "/heapfixture";
}

}  // namespace oomsnap_test
