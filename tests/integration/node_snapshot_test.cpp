// Live Node.js targets: the official 18, 20, 22 and 24 binaries
// (tools/fetch-node.sh), running tests/fixtures/node/heapfixture.js. The
// oracle for what the snapshot names is the process's own process.version
// and process.versions.v8.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "capture/capture.h"
#include "node/node_collector.h"
#include "snapshot_checks.h"
#include "test_process.h"

using namespace oomsnap;
using oomsnap_test::all_entries;
using oomsnap_test::Process;

namespace {

struct NodeFixture {
  std::unique_ptr<Process> proc;
  nlohmann::json hello;  // {pid, version, v8}
};

std::string node_binary(int major) { return std::string(OOMSNAP_NODE_CACHE) + "/" + std::to_string(major) + "/bin/node"; }

NodeFixture start_fixture(int major, int objects = 200000) {
  NodeFixture fx;
  const std::string node = node_binary(major);
  if (access(node.c_str(), X_OK) != 0) {
    ADD_FAILURE() << node << " is missing: tools/fetch-node.sh fetches it";
    return fx;
  }
  fx.proc = std::make_unique<Process>(std::vector<std::string>{
      node, std::string(OOMSNAP_SOURCE_DIR) + "/tests/fixtures/node/heapfixture.js", std::to_string(objects)});
  const std::string line = fx.proc->read_line(std::chrono::seconds(60));
  if (line.empty()) {
    ADD_FAILURE() << "the Node " << major << " fixture printed nothing";
    fx.proc.reset();
    return fx;
  }
  fx.hello = nlohmann::json::parse(line);
  return fx;
}

// "12.4.254.21-node.33" -> "12.4.254.21": Node's embedder suffix is not V8's version.
std::string v8_release(const std::string& v8) { return v8.substr(0, v8.find('-')); }

class NodeSnapshot : public testing::TestWithParam<int> {};

TEST_P(NodeSnapshot, IsRecognisedByItsV8MetadataWithItsVersions) {
  auto fx = start_fixture(GetParam());
  ASSERT_TRUE(fx.proc);
  std::string err;
  auto rec = oomsnap_test::capture_sandboxed(fx.proc->pid(), all_entries(), err);
  ASSERT_TRUE(rec) << err;
  EXPECT_EQ(rec->result.language, "node");
  const Snapshot& s = rec->result.snapshot;
  EXPECT_EQ(s.runtime_version, "node " + fx.hello["version"].get<std::string>() + ", V8 " +
                                   v8_release(fx.hello["v8"].get<std::string>()));
  EXPECT_NE(s.status, SnapshotStatus::kFailed) << s.reason;
}

// The pages found, by owner space, add up to what the runtime itself counts
// as each space's size (v8.getHeapSpaceStatistics().space_size: committed
// bytes, the new space's two semispaces together).
TEST_P(NodeSnapshot, PagesFoundAddUpToEachSpacesSize) {
  auto fx = start_fixture(GetParam());
  ASSERT_TRUE(fx.proc);
  std::string err;
  auto rec = oomsnap_test::capture_sandboxed(fx.proc->pid(), all_entries(), err);
  ASSERT_TRUE(rec) << err;
  std::map<std::string, uint64_t> totals(rec->result.snapshot.totals.begin(), rec->result.snapshot.totals.end());
  size_t compared = 0;
  for (const auto& [name, stats] : fx.hello["spaces"].items()) {
    const uint64_t size = stats["size"].get<uint64_t>();
    if (name == "read_only_space") continue;  // not pages of this heap (shared, or in the binary's snapshot)
    const auto it = totals.find(name + ".committed_bytes");
    if (size == 0) {
      EXPECT_TRUE(it == totals.end() || it->second == 0) << name;
      continue;
    }
    ASSERT_NE(it, totals.end()) << name << " (" << size << " bytes) was not found";
    // The fixture is idle once it has printed: a collection in between
    // (the memory reducer) may still move a page.
    EXPECT_NEAR(static_cast<double>(it->second), static_cast<double>(size), 0.05 * size) << name;
    ++compared;
  }
  EXPECT_GE(compared, 4u) << "new, old, code and large-object space at least";
  // The pages are the heap's share of the process's memory.
  ASSERT_TRUE(rec->process_memory.breakdown);
  bool old_space_claimed = false;
  for (const auto& d : rec->process_memory.breakdown->detail)
    if (d.what == "V8 heap (old_space)" && d.kind == MemoryKind::kHeap && d.bytes > 0) old_space_claimed = true;
  EXPECT_TRUE(old_space_claimed) << "no breakdown detail for the old space's pages";
}

INSTANTIATE_TEST_SUITE_P(Official, NodeSnapshot, testing::Values(18, 20, 22, 24),
                         [](const testing::TestParamInfo<int>& i) { return "node" + std::to_string(i.param); });

// A program that is no V8 embedder is not taken for one, and the collector
// asked anyway says why.
TEST(NodeSnapshotBadInput, NonNodeProcessIsNotRecognised) {
  Process p({"/bin/sleep", "30"});
  ASSERT_TRUE(p.wait_exec(std::chrono::seconds(5)));
  std::string err;
  auto target = open_capture_target(p.pid(), err);
  ASSERT_TRUE(target) << err;
  NodeCollector c;
  EXPECT_FALSE(c.detect(*target));
  auto r = c.collect(*target, all_entries());
  EXPECT_EQ(r.snapshot.status, SnapshotStatus::kFailed);
  EXPECT_NE(r.snapshot.reason.find("v8dbg_"), std::string::npos) << r.snapshot.reason;
}

}  // namespace
