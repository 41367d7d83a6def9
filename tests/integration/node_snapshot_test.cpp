// Live Node.js targets: the official 18, 20, 22 and 24 binaries
// (tools/fetch-node.sh) and Debian's own 18 (bookworm) and 24 (sid) in their
// root file systems, running tests/fixtures/node/heapfixture.js. The oracles
// are the process's own process.version, process.versions.v8 and
// v8.getHeapSpaceStatistics().
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
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

// A Node.js to test with: an official build from the cache, or Debian's own
// in its root file system, run with chroot as a container would.
struct NodeTarget {
  const char* name;
  const char* rootfs;  // under OOMSNAP_ROOTFS, or "" for an official build
  std::string node;    // the binary (inside the rootfs)
};

const NodeTarget kTargets[] = {
    {"official18", "", std::string(OOMSNAP_NODE_CACHE) + "/18/bin/node"},
    {"official20", "", std::string(OOMSNAP_NODE_CACHE) + "/20/bin/node"},
    {"official22", "", std::string(OOMSNAP_NODE_CACHE) + "/22/bin/node"},
    {"official24", "", std::string(OOMSNAP_NODE_CACHE) + "/24/bin/node"},
    // Debian's builds: V8 inside a shared libnode, found through map_files.
    {"bookworm18", "bookworm-node", "/usr/bin/node"},
    {"sid24", "sid-node", "/usr/bin/node"},
};

struct NodeFixture {
  std::unique_ptr<Process> proc;
  nlohmann::json hello;  // {pid, version, v8, spaces[, census]}
};

// The fixture's source, census.js first, passed with -e (a chrooted node
// cannot see the source tree).
std::string fixture_source() {
  const std::string dir = std::string(OOMSNAP_SOURCE_DIR) + "/tests/fixtures/node/";
  std::string census, fixture;
  oomsnap_test::read_file(dir + "census.js", census);
  oomsnap_test::read_file(dir + "heapfixture.js", fixture);
  return census + "\n" + fixture;
}

NodeFixture start_fixture(const NodeTarget& t, const std::vector<std::string>& args = {"200000"}) {
  NodeFixture fx;
  const std::string root = *t.rootfs ? std::string(OOMSNAP_ROOTFS) + "/" + t.rootfs : "";
  if (access((root + t.node).c_str(), X_OK) != 0) {
    ADD_FAILURE() << root + t.node << " is missing: "
                  << (*t.rootfs ? "tools/fetch-python-rootfs.sh " + std::string(t.rootfs) : std::string("tools/fetch-node.sh"))
                  << " fetches it";
    return fx;
  }
  std::vector<std::string> argv;
  if (*t.rootfs) argv = {"/usr/sbin/chroot", root};
  argv.insert(argv.end(), {t.node, "--expose-gc", "-e", fixture_source()});
  argv.insert(argv.end(), args.begin(), args.end());
  fx.proc = std::make_unique<Process>(argv);
  const std::string line = fx.proc->read_line(std::chrono::seconds(60));
  if (line.empty()) {
    ADD_FAILURE() << t.name << ": the fixture printed nothing";
    fx.proc.reset();
    return fx;
  }
  fx.hello = nlohmann::json::parse(line);
  return fx;
}

// "12.4.254.21-node.33" -> "12.4.254.21": Node's embedder suffix is not V8's version.
std::string v8_release(const std::string& v8) { return v8.substr(0, v8.find('-')); }

class NodeSnapshot : public testing::TestWithParam<NodeTarget> {};

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
    // The fixture settled before it printed, but the runtime's own tasks may
    // still take or give back a page of a space in between (the memory
    // reducer; code compiled after the print): 5 %, and at least two pages.
    const double slack = std::max(0.05 * size, 2.0 * (256 << 10));
    EXPECT_NEAR(static_cast<double>(it->second), static_cast<double>(size), slack) << name;
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

// The objects, by constructor, against the process's own heap snapshot
// (v8.writeHeapSnapshot aggregated as DevTools' Summary does, census.js):
// the fixture's classes within 2 % in count and 10 % in bytes. The walk
// counts what the pages hold, so garbage not collected yet counts too; the
// fixture collects before it reports.
TEST_P(NodeSnapshot, AgreesWithItsOwnHeapSnapshot) {
  auto fx = start_fixture(GetParam(), {"200000", "--census"});
  ASSERT_TRUE(fx.proc);
  std::string err;
  auto rec = oomsnap_test::capture_sandboxed(fx.proc->pid(), all_entries(), err);
  ASSERT_TRUE(rec) << err;
  const Snapshot& s = rec->result.snapshot;
  ASSERT_EQ(s.status, SnapshotStatus::kComplete) << s.reason;
  EXPECT_EQ(s.scope, "v8_heap_objects");
  ASSERT_TRUE(s.coverage);
  EXPECT_EQ(*s.coverage, 1.0);
  const auto got = oomsnap_test::by_name(s);
  for (const char* name : {"Order", "Customer", "Array"}) {
    const auto& want = fx.hello["census"][name];
    ASSERT_FALSE(want.is_null()) << name << " is not in the fixture's own census";
    const double objects = want[0].get<double>(), bytes = want[1].get<double>();
    ASSERT_TRUE(got.count(name)) << name << " is not in the snapshot";
    EXPECT_NEAR(static_cast<double>(got.at(name).first), objects, 0.02 * objects) << name;
    EXPECT_NEAR(static_cast<double>(got.at(name).second), bytes, 0.10 * bytes) << name;
  }
  EXPECT_TRUE(got.count("(string)") && got.count("(compiled code)") && got.count("(closure)"))
      << "V8's internal kinds are named as DevTools names them";
}

// The memory its ArrayBuffers hold outside the heap (Buffers, each store
// once however many views share it), against the runtime's own count
// (process.memoryUsage().arrayBuffers; in a chroot without /proc, what the
// fixture's buffers hold), and in the memory breakdown.
TEST_P(NodeSnapshot, CountsArrayBufferStoresAsTheRuntimeDoes) {
  auto fx = start_fixture(GetParam(), {"20000", "--buffers"});
  ASSERT_TRUE(fx.proc);
  std::string err;
  auto rec = oomsnap_test::capture_sandboxed(fx.proc->pid(), all_entries(), err);
  ASSERT_TRUE(rec) << err;
  const Snapshot& s = rec->result.snapshot;
  ASSERT_NE(s.status, SnapshotStatus::kFailed) << s.reason;
  const auto& runtime_count = fx.hello["array_buffers"];
  const uint64_t want = (runtime_count.is_null() ? fx.hello["own_array_buffers"] : runtime_count).get<uint64_t>();
  ASSERT_GE(want, 64u << 20) << "the fixture's own count";
  const uint64_t got = oomsnap_test::total(s, "external.array_buffer_bytes");
  // Node's own allocations (its pools, a few KiB each) count in both.
  EXPECT_NEAR(static_cast<double>(got), static_cast<double>(want), 0.02 * want);
  EXPECT_GE(oomsnap_test::total(s, "external.array_buffers"), 64u);
  ASSERT_TRUE(rec->process_memory.breakdown);
  uint64_t claimed = 0;
  for (const auto& d : rec->process_memory.breakdown->detail)
    if (d.what.starts_with("ArrayBuffer backing stores") && d.kind == MemoryKind::kNative) claimed += d.bytes;
  EXPECT_GE(claimed, 60u << 20) << "the stores' memory in the breakdown";
}

// A target that keeps allocating and dropping objects while it is read:
// complete or partial with a reason, never a failure or a hang. It collects
// garbage every few tens of ms, so some walk overlaps a collection: that is
// seen, and the walk done again or the snapshot said to be partial for it.
TEST_P(NodeSnapshot, MutatingTargetNeverFailsOrHangs) {
  auto fx = start_fixture(GetParam(), {"200000", "--mutate"});
  ASSERT_TRUE(fx.proc);
  std::string err;
  bool overlap_seen = false;
  for (int i = 0; i < 5; ++i) {
    auto rec = oomsnap_test::capture_sandboxed(fx.proc->pid(), all_entries(), err);
    ASSERT_TRUE(rec) << err;
    const Snapshot& s = rec->result.snapshot;
    ASSERT_NO_FATAL_FAILURE(oomsnap_test::expect_complete_or_partial_with_reason(s));
    EXPECT_LT(s.duration_ms, 20000);
    for (const auto& [name, value] : s.totals)
      if (name == "walks" && value >= 2) overlap_seen = true;
    if (s.reason.find("collected garbage") != std::string::npos) overlap_seen = true;
  }
  EXPECT_TRUE(overlap_seen) << "no walk of a target collecting every few ms overlapped a collection";
}

// The target is killed while its heap is walked: partial or failed, saying
// it exited.
TEST_P(NodeSnapshot, TargetExitingMidWalkIsReported) {
  auto fx = start_fixture(GetParam(), {"2000000"});
  ASSERT_TRUE(fx.proc);
  NodeCollector c;
  oomsnap_test::expect_exit_mid_walk_reported(c, *fx.proc, std::chrono::milliseconds(30), all_entries());
}

INSTANTIATE_TEST_SUITE_P(Builds, NodeSnapshot, testing::ValuesIn(kTargets),
                         [](const testing::TestParamInfo<NodeTarget>& i) { return std::string(i.param.name); });

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
