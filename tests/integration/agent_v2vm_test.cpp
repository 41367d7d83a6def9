// `oomsnap watch` end to end on cgroup v2. This machine's memory controller is
// on cgroup v1, so the scenario runs in a throw-away QEMU guest booted on a pure
// cgroup-v2 hierarchy (../shared/v2vm/run-in-v2vm.sh): tests/v2vm/agent_v2_e2e.sh
// runs the agent and real Go leakers there and saves the records, the agent logs
// and what it observed (pids, exit statuses, memory.events) into a directory the
// guest shares writable with the host; this test judges the records here.
//
// Phase 1: a memory.events "high" change triggers the snapshot; the victim is the
// leaker, not the bigger process with oom_score_adj -1000; the kernel's OOM kill
// of the leaker is tied to the record. Phase 2: the PSI trigger on memory.pressure.
// Phase 3: memory.oom.group=1 (as Kubernetes sets it): one OOM event kills the
// three processes of the container; exactly one record carries it.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_process.h"
#include "v2vm_runner.h"

using namespace std::chrono_literals;
using nlohmann::json;
using oomsnap_test::on_path;
using oomsnap_test::Process;

namespace {

const std::string kFixture = std::string(OOMSNAP_FIXTURES) + "/go/1.26/default/heapfixture";
const std::string kScript = std::string(OOMSNAP_SOURCE_DIR) + "/tests/v2vm/agent_v2_e2e.sh";
constexpr uint64_t kMiB = 1 << 20;
// The guest's wall-clock bound (run-in-v2vm.sh -t); a warm run takes about a minute.
constexpr int kGuestTimeoutS = 260;
const std::string kBox = "/oomsnap-v2test/box";

std::string runner_path() { return oomsnap_test::v2vm_runner_path(); }

std::string slurp(const std::string& path) {
  std::string s;
  oomsnap_test::read_file(path, s);
  return s;
}

// KEY=VALUE lines (values may be double-quoted).
std::map<std::string, std::string> read_facts(const std::string& path) {
  std::map<std::string, std::string> m;
  std::istringstream in(slurp(path));
  for (std::string line; std::getline(in, line);) {
    auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string v = line.substr(eq + 1);
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    m[line.substr(0, eq)] = v;
  }
  return m;
}

int64_t fact_int(const std::map<std::string, std::string>& f, const std::string& key) {
  auto it = f.find(key);
  if (it == f.end() || it->second.empty()) return INT64_MIN;
  return std::strtoll(it->second.c_str(), nullptr, 10);
}

std::vector<json> read_records(const std::string& path, std::string& errors) {
  std::vector<json> out;
  std::istringstream in(slurp(path));
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    try {
      out.push_back(json::parse(line));
    } catch (const json::exception& e) {
      errors += std::string(e.what()) + ": " + line + "\n";
    }
  }
  return out;
}

const json* find_trigger(const std::vector<json>& recs, const std::string& type) {
  for (const auto& r : recs)
    if (r.contains("trigger") && r["trigger"].value("type", "") == type) return &r;
  return nullptr;
}

// What both phases expect of the container and the victim's snapshot.
void expect_container_and_snapshot(const json& rec, const std::map<std::string, std::string>& facts,
                                   uint64_t high_mib, int threshold_percent) {
  const json& c = rec["container"];
  EXPECT_EQ(c["cgroup_path"], kBox) << rec.dump(2);
  EXPECT_EQ(c["cgroup_inode"].get<int64_t>(), fact_int(facts, "box_inode")) << rec.dump(2);
  EXPECT_EQ(c["limit_bytes"], 64 * kMiB);
  ASSERT_TRUE(c.contains("high_bytes")) << rec.dump(2);
  EXPECT_EQ(c["high_bytes"], high_mib * kMiB);
  // The policy's re-check: usage / memory.max >= ThresholdPercent.
  EXPECT_GE(c["usage_bytes"].get<uint64_t>(), 64 * kMiB * threshold_percent / 100) << rec.dump(2);
  EXPECT_GT(rec["trigger"]["kernel_ts_ns"].get<uint64_t>(), 0u);

  // The leaker, not the holder: the holder has twice the memory but oom_score_adj -1000.
  EXPECT_EQ(fact_int(facts, "holder_oom_score_adj"), -1000) << "the guest could not exempt the holder";
  EXPECT_EQ(rec["victim_pid"].get<int64_t>(), fact_int(facts, "leaker_pid")) << rec.dump(2);
  EXPECT_NE(rec["victim_pid"].get<int64_t>(), fact_int(facts, "holder_pid"));
  EXPECT_EQ(rec["comm"], "heapfixture");
  EXPECT_EQ(rec["oom_score_adj"], 0);
  EXPECT_GT(rec["score"].get<int64_t>(), 0);
  EXPECT_EQ(rec["collection"]["status"], "collected") << rec.dump(2);

  EXPECT_EQ(rec["tracer_data"]["language"], "go");
  const json& snap = rec["tracer_data"]["snapshot"];
  EXPECT_EQ(snap["status"], "complete") << snap.dump(2);
  ASSERT_FALSE(snap["entries"].empty()) << snap.dump(2);
  EXPECT_EQ(snap["entries"][0]["name"], "main.leakForever") << snap.dump(2);

  const json& tl = rec["timeline"];
  EXPECT_LE(tl["trigger_ns"].get<uint64_t>(), tl["decided_ns"].get<uint64_t>());
  EXPECT_LE(tl["decided_ns"].get<uint64_t>(), tl["collection_start_ns"].get<uint64_t>());
  EXPECT_LT(tl["collection_start_ns"].get<uint64_t>(), tl["snapshot_complete_ns"].get<uint64_t>());
  EXPECT_EQ(rec["agent"]["bpf_ring_drops"], 0);
  EXPECT_EQ(rec["node"], "v2vm");
  EXPECT_EQ(rec["time"].get<std::string>().size(), 24u);
}

// Phase 1: memory.events, the -1000 rule, the OOM kill.
void check_phase1(const std::string& dir) {
  SCOPED_TRACE("phase 1 (memory.events)");
  auto facts = read_facts(dir + "/phase1/facts.env");
  std::string parse_errors;
  auto recs = read_records(dir + "/phase1/records.jsonl", parse_errors);
  EXPECT_TRUE(parse_errors.empty()) << parse_errors;
  EXPECT_EQ(recs.size(), 1u) << slurp(dir + "/phase1/records.jsonl");
  const json* rec = find_trigger(recs, "memory_events");
  if (!rec) {
    ADD_FAILURE() << "no memory_events record; agent log:\n" << slurp(dir + "/phase1/agent.log");
  } else {
    const json& r = *rec;
    std::cout << "[ v2vm     ] phase 1: trigger " << r["trigger"]["type"] << " delta "
              << r["trigger"]["counters"].value("delta", json()).dump() << ", victim " << r["victim_pid"]
              << " (holder " << facts["holder_pid"] << "), oom_kill "
              << (r.contains("oom_kill") ? r["oom_kill"].dump() : "none") << "; memory.high lifted by the script: "
              << (facts["high_lifted"] == "1" ? "yes (the throttled leaker was too slow)" : "no") << "\n";
    EXPECT_NE(r["trigger"]["source"].get<std::string>().find("memory.events"), std::string::npos);
    EXPECT_GE(r["trigger"]["counters"]["delta"].value("high", 0), 1) << r["trigger"].dump(2);
    expect_container_and_snapshot(r, facts, 58, 80);

    // The holder is exempt, so the kernel killed the leaker, after the snapshot.
    ASSERT_TRUE(r.contains("oom_kill")) << r.dump(2);
    EXPECT_EQ(r["oom_kill"]["pid"].get<int64_t>(), fact_int(facts, "leaker_pid"));
    EXPECT_EQ(r["oom_kill"]["matches_victim"], true);
    EXPECT_EQ(r["oom_kill"]["cgroup_path"], kBox);
    ASSERT_TRUE(r["oom_kill"]["lead_ms"].is_number()) << r["oom_kill"].dump(2);
    EXPECT_GT(r["oom_kill"]["lead_ms"].get<double>(), 0.0);
    ASSERT_TRUE(r.contains("exit")) << r.dump(2);
    EXPECT_EQ(r["exit"]["pid"], r["oom_kill"]["pid"]);
    EXPECT_EQ(r["exit"]["signal"], SIGKILL);
    const json& tl = r["timeline"];
    EXPECT_LT(tl["snapshot_complete_ns"].get<uint64_t>(), tl["oom_kill_ns"].get<uint64_t>());
    EXPECT_LE(tl["oom_kill_ns"].get<uint64_t>(), tl["exit_ns"].get<uint64_t>());
  }
  // What the guest saw: the kernel's choice matches, the holder lived on, the agent stopped cleanly.
  EXPECT_EQ(fact_int(facts, "leaker_wait_status"), 128 + SIGKILL);
  EXPECT_EQ(fact_int(facts, "holder_survived"), 1);
  EXPECT_EQ(fact_int(facts, "agent_exit"), 0) << slurp(dir + "/phase1/agent.log");
  EXPECT_NE(facts["events_after_kill"].find("oom_kill 1"), std::string::npos) << facts["events_after_kill"];
  // The LocalFile sink holds the same line.
  std::string file_errors;
  EXPECT_EQ(read_records(dir + "/phase1/store/oomsnap.jsonl", file_errors), recs) << file_errors;
}

// Phase 2: PSI.
void check_phase2(const std::string& dir) {
  SCOPED_TRACE("phase 2 (PSI)");
  auto facts = read_facts(dir + "/phase2/facts.env");
  std::string parse_errors;
  auto recs = read_records(dir + "/phase2/records.jsonl", parse_errors);
  EXPECT_TRUE(parse_errors.empty()) << parse_errors;
  const json* rec = find_trigger(recs, "psi");
  if (!rec) {
    ADD_FAILURE() << "no psi record (" << recs.size() << " records); agent log:\n"
                  << slurp(dir + "/phase2/agent.log");
  } else {
    const json& r = *rec;
    std::cout << "[ v2vm     ] phase 2: trigger " << r["trigger"]["type"] << " some "
              << r["trigger"]["counters"].value("some", json()).dump() << ", victim " << r["victim_pid"] << "\n";
    EXPECT_EQ(r["trigger"]["source"], "poll: memory.pressure trigger");
    ASSERT_TRUE(r["trigger"]["counters"].contains("some")) << r["trigger"].dump(2);
    EXPECT_GT(r["trigger"]["counters"]["some"]["total_us"].get<uint64_t>(), 0u);
    expect_container_and_snapshot(r, facts, 52, 70);
  }
  for (const auto& r : recs) EXPECT_EQ(r["trigger"]["type"], "psi") << "blacklisted trigger recorded:\n" << r.dump(2);
  EXPECT_EQ(fact_int(facts, "agent_exit"), 0) << slurp(dir + "/phase2/agent.log");
}

}  // namespace

// Phase 3: a group kill is one OOM event, in one record: the snapshot record
// of the leaker, with every killed process once (the kernel marks the chosen
// victim twice), group_kill, and no other record for the kill or the exits.
// The holder (Go) and the Python process are snapshotted too, next by
// badness (other_processes); the `sleep` is not needed to fill the three.
void check_phase3(const std::string& dir) {
  SCOPED_TRACE("phase 3 (" + dir + "/phase3)");
  auto facts = read_facts(dir + "/phase3/facts.env");
  std::string errors;
  auto recs = read_records(dir + "/phase3/records.jsonl", errors);
  EXPECT_TRUE(errors.empty()) << errors;
  const int64_t leaker = fact_int(facts, "leaker_pid"), holder = fact_int(facts, "holder_pid"),
                sleeper = fact_int(facts, "sleeper_pid"), python = fact_int(facts, "python_pid");
  ASSERT_GT(leaker, 0);
  ASSERT_GT(holder, 0);
  ASSERT_GT(sleeper, 0);
  ASSERT_GT(python, 0);
  for (const char* k : {"leaker_wait_status", "holder_wait_status", "sleeper_wait_status", "python_wait_status"})
    EXPECT_EQ(fact_int(facts, k), 137) << k;
  std::vector<const json*> with_kill;
  for (const auto& r : recs) {
    if (r.contains("oom_kill")) with_kill.push_back(&r);
    // No exit record of its own for a process the OOM event killed.
    if (r["trigger"].value("type", "") == "process_exit") {
      for (int64_t p : {leaker, holder, sleeper, python}) EXPECT_NE(r["exit"]["pid"].get<int64_t>(), p) << r.dump(2);
    }
  }
  ASSERT_EQ(with_kill.size(), 1u) << "records:\n" << slurp(dir + "/phase3/records.jsonl");
  const json& rec = *with_kill[0];
  const json& k = rec["oom_kill"];
  EXPECT_EQ(rec["victim_pid"].get<int64_t>(), leaker) << rec.dump(2);
  EXPECT_EQ(rec["collection"]["status"], "collected") << rec.dump(2);
  EXPECT_EQ(rec["tracer_data"]["snapshot"]["status"], "complete");
  EXPECT_EQ(k["pid"].get<int64_t>(), leaker) << k.dump(2);
  EXPECT_TRUE(k["matches_victim"].get<bool>());
  EXPECT_TRUE(k["group_kill"].get<bool>()) << k.dump(2);
  ASSERT_TRUE(k["lead_ms"].is_number()) << k.dump(2);
  EXPECT_GT(k["lead_ms"].get<double>(), 0) << k.dump(2);
  std::multiset<int64_t> killed;
  for (const auto& kp : k["killed"]) killed.insert(kp["pid"].get<int64_t>());
  EXPECT_EQ(killed, (std::multiset<int64_t>{leaker, holder, sleeper, python})) << k.dump(2);
  EXPECT_EQ(k["killed"][0]["pid"].get<int64_t>(), leaker);  // the kernel's chosen victim first

  ASSERT_TRUE(rec.contains("other_processes")) << rec.dump(2);
  const json& others = rec["other_processes"];
  ASSERT_EQ(others.size(), 2u) << others.dump(2);
  std::map<int64_t, const json*> by_pid;
  for (const auto& o : others) by_pid[o["pid"].get<int64_t>()] = &o;
  ASSERT_TRUE(by_pid.count(holder) && by_pid.count(python)) << others.dump(2);
  EXPECT_EQ(others[0]["pid"].get<int64_t>(), holder) << "the kernel's order: the 20 MiB holder first";
  for (auto [pid, lang] : {std::pair<int64_t, const char*>{holder, "go"}, {python, "python"}}) {
    const json& o = *by_pid[pid];
    SCOPED_TRACE(lang);
    EXPECT_EQ(o["collection"]["status"], "collected") << o["collection"].dump();
    EXPECT_EQ(o["tracer_data"]["language"], lang);
    EXPECT_EQ(o["tracer_data"]["snapshot"]["status"], "complete") << o["tracer_data"]["snapshot"].value("reason", "");
    EXPECT_GE(o["tracer_data"]["snapshot"]["entries"].size(), 1u);
    EXPECT_GT(o["score"].get<int64_t>(), 0);
    EXPECT_TRUE(o["killed"].get<bool>()) << "the group kill took it";
  }
}

TEST(AgentCgroupV2, EndToEndInGuest) {
  const std::string runner = runner_path();
  if (access(runner.c_str(), X_OK) != 0)
    GTEST_SKIP() << "cgroup-v2 guest runner not available: " << runner << " (set OOMSNAP_V2VM to its path)";
  if (!on_path("qemu-system-x86_64"))
    GTEST_SKIP() << "qemu-system-x86_64 not installed (tools/setup.sh installs qemu-system-x86 busybox-static)";
  ASSERT_EQ(access(kFixture.c_str(), X_OK), 0) << "fixture missing: " << kFixture << " (tools/build-go-fixtures.sh)";
  ASSERT_EQ(access(kScript.c_str(), R_OK), 0) << kScript;

  char tmpl[] = "/tmp/oomsnap-v2vm-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string console = dir + "/console.log";

  // Its own session, so a run past the deadline is ended with everything it started (qemu too).
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" >\"" + console + "\" 2>&1"};
  if (access("/usr/bin/setsid", X_OK) == 0) argv.push_back("/usr/bin/setsid");
  for (const std::string& a : {runner, std::string("-t"), std::to_string(kGuestTimeoutS), std::string("-w"), dir,
                               std::string("--"), std::string("/bin/bash"), kScript, dir, std::string(OOMSNAP_BINARY),
                               kFixture})
    argv.push_back(a);
  Process vm(argv);
  // The first run also fetches the kernel package and builds the initramfs (not bounded by -t).
  const auto deadline = t0 + std::chrono::seconds(kGuestTimeoutS + 120);
  int st = -1;
  while ((st = vm.try_wait()) < 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(200ms);
  if (st < 0) {
    ::kill(-vm.pid(), SIGKILL);
    ::kill(vm.pid(), SIGKILL);
    FAIL() << "run-in-v2vm.sh did not return within " << kGuestTimeoutS + 120 << " s; output:\n" << slurp(console);
  }
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string out = slurp(console);
  ASSERT_TRUE(WIFEXITED(st)) << "runner ended by signal " << WTERMSIG(st) << "; output:\n" << out;
  const int rc = WEXITSTATUS(st);
  ASSERT_NE(rc, 125) << "the VM failed or timed out (run-in-v2vm.sh exit 125; " << dir << " kept); output:\n" << out;

  auto guest = read_facts(dir + "/guest.env");
  std::cout << "[ v2vm     ] wall " << wall_s << " s; guest script started at uptime "
            << guest["script_start_uptime_s"] << " s; phase 1 " << guest["phase1_total_ms"] << " ms, phase 2 "
            << guest["phase2_total_ms"] << " ms, phase 3 " << guest["phase3_total_ms"] << " ms; script exit " << rc << "\n";
  RecordProperty("wall_s", std::to_string(wall_s));

  // Each phase in its own function: a failed ASSERT there ends only that phase's
  // checks, and the guest output below is still shown.
  for (auto check : {check_phase1, check_phase2, check_phase3}) {
    try {
      check(dir);
    } catch (const std::exception& e) {  // e.g. a record field of an unexpected JSON type
      ADD_FAILURE() << "while checking the records: " << e.what();
    }
  }

  EXPECT_EQ(rc, 0) << "the guest script reported a failed step";
  if (HasFailure()) {
    std::cout << "---- guest output (" << dir << " kept) ----\n" << out << "---- end of guest output\n";
  } else {
    std::filesystem::remove_all(dir);
  }
}
