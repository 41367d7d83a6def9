// The Go toolchains the tests run on: tools/go-versions, passed by CMake as
// OOMSNAP_GO_VERSIONS ("1.19 1.21 ..."), the list the fetch and fixture
// tools read too.
#pragma once
#include <sstream>
#include <string>
#include <vector>

namespace oomsnap_test {

// "1.19", "1.21", ...: pointers into a list that lives as long as the program.
inline const std::vector<const char*>& go_versions() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    std::istringstream in(OOMSNAP_GO_VERSIONS);
    for (std::string s; in >> s;) v.push_back(s);
    return v;
  }();
  static const std::vector<const char*> list = [] {
    std::vector<const char*> v;
    for (const auto& n : names) v.push_back(n.c_str());
    return v;
  }();
  return list;
}

}  // namespace oomsnap_test
