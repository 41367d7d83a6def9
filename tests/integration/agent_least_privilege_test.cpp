// The agent with exactly the capabilities deploy/ grants (the systemd unit's
// CapabilityBoundingSet, the DaemonSet's capabilities.add) and no_new_privs:
// a Go program and a containerised CPython, both run by another user, are
// still snapshotted before their OOM kills. And without a capability the
// agent says at start which one and what it costs.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "agent_process.h"

using namespace std::chrono_literals;
using namespace oomsnap_test;

namespace {

// "CAP_BPF CAP_PERFMON ..." from the unit file, as setpriv's "+bpf,+perfmon,...".
std::string unit_bounding_set() {
  const std::string unit = slurp(std::string(OOMSNAP_SOURCE_DIR) + "/deploy/oomsnap.service");
  std::smatch m;
  if (!std::regex_search(unit, m, std::regex("\nCapabilityBoundingSet=([^\n]*)")))
    throw std::runtime_error("no CapabilityBoundingSet= in deploy/oomsnap.service");
  std::string out, caps = m[1];
  std::istringstream in(caps);
  for (std::string c; in >> c;) {
    if (c.rfind("CAP_", 0) != 0) throw std::runtime_error("unexpected capability " + c);
    std::string name = c.substr(4);
    for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    out += ",+" + name;
  }
  return out;
}

std::vector<std::string> setpriv_with(const std::string& bounding) {
  return {"/usr/bin/setpriv", "--bounding-set=-all" + bounding, "--inh-caps=-all", "--no-new-privs"};
}

const std::vector<std::string> kAsNobody = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"};

}  // namespace

TEST(AgentLeastPrivilege, DeployedCapabilitiesSnapshotOtherUsersGoAndContainerPython) {
  require_fixture();
  const std::string root = std::string(OOMSNAP_ROOTFS) + "/trixie";
  if (!std::filesystem::exists(root + "/usr/bin/python3.13"))
    FAIL() << root << "/usr/bin/python3.13 missing (tools/fetch-python-rootfs.sh trixie)";
  TestMemcg scope("scope");
  TestMemcg go_box(scope, "go", 256 * kMiB);
  TestMemcg py_box(scope, "py", 256 * kMiB);
  const std::string dir = temp_dir();
  // Both containers are collected as they reach the threshold (the interval is per container).
  AgentProcess agent(dir, config_for(scope, dir, "OomKillWindow = 60\nRunTracingToolTimeout = 5\nIntervalTracing = 5"),
                     {}, {}, setpriv_with(unit_bounding_set()));
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  EXPECT_EQ(agent.log().find("missing capability"), std::string::npos) << agent.log();

  // The Go leaker as nobody: reading its memory needs CAP_SYS_PTRACE.
  std::vector<std::string> go = kAsNobody;
  go.insert(go.end(), {kFixture, "-leak-mb-per-s", "25"});
  Process go_proc(go, {}, go_box.dir());
  ASSERT_NE(go_proc.read_line(20s).find("\"ready\":true"), std::string::npos);
  json rec = agent.next_record(90s);
  ASSERT_FALSE(rec.is_null()) << "no record; agent log:\n" << agent.log();
  EXPECT_EQ(rec["victim_pid"], go_proc.pid());
  EXPECT_EQ(rec["tracer_data"]["snapshot"]["status"], "complete") << rec.dump(2);
  EXPECT_EQ(rec["tracer_data"]["snapshot"]["entries"][0]["name"], "main.leakForever") << rec.dump(2);
  EXPECT_EQ(rec["oom_kill"]["matches_victim"], true) << rec.dump(2);

  // CPython 3.13 in a trixie root file system as nobody: its executable is
  // opened inside the container's root.
  std::string src = slurp(std::string(OOMSNAP_SOURCE_DIR) + "/tests/fixtures/python/heapfixture.py");
  Process py({"/usr/sbin/chroot", "--userspec=65534:65534", root, "/usr/bin/python3.13", "-c", src, "--with-dict",
              "0", "--with-slots", "0", "--inner", "0", "--dicts", "0", "--lists", "0", "--blobs", "0", "--dict-blobs",
              "0", "--attr-blobs", "0", "--leak-mb-per-s", "25"},
             {}, py_box.dir());
  ASSERT_FALSE(py.read_line(30s).empty());
  rec = agent.next_record(90s);
  ASSERT_FALSE(rec.is_null()) << "no record; agent log:\n" << agent.log();
  EXPECT_EQ(rec["victim_pid"], py.pid()) << rec.dump(2);
  const json& snap = rec["tracer_data"]["snapshot"];
  EXPECT_EQ(snap["status"], "complete") << rec.dump(2);
  EXPECT_EQ(snap["runtime_version"].get<std::string>().rfind("cpython3.13.", 0), 0u) << snap.dump(2);
  EXPECT_EQ(rec["oom_kill"]["matches_victim"], true) << rec.dump(2);
  EXPECT_EQ(agent.stop(), 0) << agent.log();
  std::filesystem::remove_all(dir);
}

TEST(AgentLeastPrivilege, MissingCapabilitiesAreNamedAtStart) {
  TestMemcg scope("scope");
  const std::string dir = temp_dir();
  {
    // Without CAP_SYS_PTRACE the agent runs, and says what it cannot do.
    std::string caps = std::regex_replace(unit_bounding_set(), std::regex(",\\+sys_ptrace"), "");
    AgentProcess agent(dir, config_for(scope, dir, ""), {}, {}, setpriv_with(caps));
    ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
    EXPECT_NE(agent.log().find("missing capability CAP_SYS_PTRACE: the memory"), std::string::npos) << agent.log();
    EXPECT_EQ(agent.stop(), 0) << agent.log();
  }
  {
    // Without CAP_PERFMON it cannot load BPF: exit 1 naming the capability.
    std::string caps = std::regex_replace(unit_bounding_set(), std::regex(",\\+perfmon"), "");
    AgentProcess agent(dir, config_for(scope, dir, ""), {}, {}, setpriv_with(caps));
    int st = -1;
    for (int i = 0; i < 200 && (st = agent.process().try_wait()) < 0; ++i) std::this_thread::sleep_for(50ms);
    ASSERT_TRUE(WIFEXITED(st)) << agent.log();
    EXPECT_EQ(WEXITSTATUS(st), 1) << agent.log();
    EXPECT_NE(agent.log().find("cannot start: missing capability CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN)"),
              std::string::npos)
        << agent.log();
  }
  std::filesystem::remove_all(dir);
}
