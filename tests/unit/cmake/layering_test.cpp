// The folders' layers (userspace/CMakeLists.txt, OOMSNAP_LAYERS) are checked at
// every build by cmake/check_layering.cmake: the real tree passes, and the same
// tree with one include against the layers fails, naming the file and the rule.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "run_command.h"

namespace fs = std::filesystem;

namespace {

const std::string kSource = OOMSNAP_SOURCE_DIR;

// The check on the folders under root, with the layers as the build passes them.
oomsnap_test::CommandRun check(const fs::path& root) {
  std::string layers = OOMSNAP_LAYERS;
  for (char& c : layers)
    if (c == '|') c = ';';
  const std::string cmd = std::string("'") + OOMSNAP_CMAKE + "' -DROOT='" + root.string() + "' '-DLAYERS=" + layers +
                          "' -P '" + kSource + "/cmake/check_layering.cmake'";
  return oomsnap_test::run_command(cmd);
}

class LayeringCopy : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("oomsnap-layering-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::copy(kSource + "/userspace", dir_, fs::copy_options::recursive);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void plant(const std::string& file, const std::string& include) {
    std::ofstream(dir_ / file, std::ios::app) << "\n#include \"" << include << "\"\n";
  }
  fs::path dir_;
};

}  // namespace

TEST(Layering, TheTreeFollowsItsLayers) {
  const oomsnap_test::CommandRun r = check(kSource + "/userspace");
  EXPECT_EQ(r.status, 0) << r.out;
}

TEST_F(LayeringCopy, ARuntimeIncludingAnotherFailsNamingTheFile) {
  plant("java/klass_table.h", "go/go_collector.h");
  const oomsnap_test::CommandRun r = check(dir_);
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("java/klass_table.h includes go/"), std::string::npos) << r.out;
}

TEST_F(LayeringCopy, AnIncludeRunningBackUpFails) {
  plant("core/chunk_cache.cpp", "capture/capture.h");  // core below capture
  plant("agent/records/sink.cpp", "agent/agent.h");    // a wing below the loop
  plant("base/text.cpp", "core/snapshot.h");           // base depends on nothing
  const oomsnap_test::CommandRun r = check(dir_);
  EXPECT_NE(r.status, 0) << r.out;
  for (const char* what : {"core/chunk_cache.cpp includes capture/", "agent/records/sink.cpp includes agent/",
                           "base/text.cpp includes core/"})
    EXPECT_NE(r.out.find(what), std::string::npos) << what << "\n" << r.out;
}

TEST_F(LayeringCopy, IncludesWithinTheLayerAndOfGeneratedHeadersPass) {
  plant("java/heap_walk.cpp", "java/klass_table.h");
  plant("cli/main.cpp", "git_commit.h");
  const oomsnap_test::CommandRun r = check(dir_);
  EXPECT_EQ(r.status, 0) << r.out;
}
