// The Go fixture matrix tools/build-go-fixtures.sh builds: every cached
// toolchain × every build mode oomsnap must read (the live Go tests run each),
// and how a test starts one of them.
#pragma once
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "go_versions.h"
#include "test_process.h"

namespace oomsnap_test {

inline constexpr const char* kGoModes[] = {"default", "pie", "stripped", "pie-stripped"};

// A (version, mode) test parameter: Combine(ValuesIn(go_versions()), ValuesIn(kGoModes)).
using GoMatrixParam = std::tuple<const char*, const char*>;

// "go1_26_pie_stripped": the test-name suffix of a parameter.
inline std::string go_matrix_name(const ::testing::TestParamInfo<GoMatrixParam>& info) {
  std::string n = std::string("go") + std::get<0>(info.param) + "_" + std::get<1>(info.param);
  for (auto& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

inline std::string go_fixture_path(const std::string& ver, const std::string& mode) {
  return std::string(OOMSNAP_FIXTURES) + "/go/" + ver + "/" + mode + "/heapfixture";
}

// A started fixture and its ready line (the fixture's own census of what it
// holds). proc is null, with a gtest failure recorded, when it did not start.
struct StartedGoFixture {
  std::unique_ptr<Process> proc;
  nlohmann::json census;
};

inline StartedGoFixture start_go_fixture(const std::string& bin, std::vector<std::string> args) {
  StartedGoFixture s;
  if (!std::filesystem::exists(bin)) {
    ADD_FAILURE() << "fixture " << bin << " is missing: run tools/build-go-fixtures.sh";
    return s;
  }
  args.insert(args.begin(), bin);
  s.proc = std::make_unique<Process>(args);
  std::string line = s.proc->read_line(std::chrono::seconds(60));
  if (line.empty()) {
    ADD_FAILURE() << bin << " did not print its ready line";
    s.proc.reset();
    return s;
  }
  s.census = nlohmann::json::parse(line);
  return s;
}

}  // namespace oomsnap_test
