// The deployment files in deploy/ checked against the code they deploy: the
// example and ConfigMap TOML go through the agent's own parser, the systemd
// unit and the DaemonSet are parsed and their essentials asserted, so none of
// them can silently drift from what the agent accepts or needs.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "agent/config.h"
#include "agent/ops/listen_address.h"
#include "agent/ops/privileges.h"

using namespace oomsnap;
using nlohmann::json;

namespace {

const std::string kDeploy = std::string(OOMSNAP_SOURCE_DIR) + "/deploy/";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// A systemd unit file as INI: section -> key -> values (keys may repeat).
// Enough of systemd's syntax for our own unit: comments (# ;), [Section],
// Key=Value; no line continuations (the test fails on one rather than
// misreading it).
using Ini = std::map<std::string, std::map<std::string, std::vector<std::string>>>;

Ini parse_ini(const std::string& text) {
  Ini ini;
  std::string section;
  std::istringstream in(text);
  int lineno = 0;
  for (std::string raw; std::getline(in, raw);) {
    ++lineno;
    const std::string line = trim(raw);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.back() == '\\') ADD_FAILURE() << "line " << lineno << ": continuation not supported";
    if (line.front() == '[') {
      if (line.back() != ']') ADD_FAILURE() << "line " << lineno << ": bad section " << line;
      section = line.substr(1, line.size() - 2);
      ini[section];
      continue;
    }
    const auto eq = line.find('=');
    if (eq == std::string::npos || section.empty()) {
      ADD_FAILURE() << "line " << lineno << ": not key=value in a section: " << line;
      continue;
    }
    ini[section][trim(line.substr(0, eq))].push_back(trim(line.substr(eq + 1)));
  }
  return ini;
}

// The single value of `key`, or "" (failing the test) when absent or repeated.
std::string one(const Ini& ini, const std::string& section, const std::string& key) {
  auto s = ini.find(section);
  if (s == ini.end() || !s->second.count(key)) {
    ADD_FAILURE() << "[" << section << "] " << key << " missing";
    return "";
  }
  const auto& v = s->second.at(key);
  EXPECT_EQ(v.size(), 1u) << "[" << section << "] " << key << " set more than once";
  return v.back();
}

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> w;
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

// Runs `python3 <script> <arg>` and returns its stdout; fails the test with
// stderr's gist when it exits non-zero.
std::string run_python(const std::string& script, const std::string& arg) {
  char tmpl[] = "/tmp/oomsnap-deploy-XXXXXX.py";
  int fd = ::mkstemps(tmpl, 3);
  if (fd < 0) throw std::runtime_error("mkstemps failed");
  if (::write(fd, script.data(), script.size()) != static_cast<ssize_t>(script.size()))
    throw std::runtime_error("write script failed");
  ::close(fd);
  const std::string cmd = "python3 '" + std::string(tmpl) + "' '" + arg + "' 2>&1";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) throw std::runtime_error("popen python3 failed");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  ::unlink(tmpl);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "python3 failed (PyYAML comes from tools/setup.sh: python3-yaml):\n" << out;
  return out;
}

// Reduces the manifests to what the checks below need, as JSON.
const char* kYamlSummary = R"PY(
import json, sys
import yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
out = {"kinds": [d["kind"] for d in docs], "configmaps": {}, "daemonsets": [], "networkpolicies": []}
for d in docs:
    meta = d.get("metadata", {})
    if d["kind"] == "NetworkPolicy":
        out["networkpolicies"].append({"namespace": meta.get("namespace"), "spec": d["spec"]})
    if d["kind"] == "ConfigMap":
        out["configmaps"][meta["name"]] = {"namespace": meta.get("namespace"),
                                           "data": d.get("data", {})}
    if d["kind"] == "DaemonSet":
        spec = d["spec"]["template"]["spec"]
        vols = {v["name"]: v for v in spec.get("volumes", [])}
        containers = []
        for c in spec["containers"]:
            mounts = []
            for m in c.get("volumeMounts", []):
                v = vols.get(m["name"], {})
                mounts.append({"mountPath": m["mountPath"],
                               "readOnly": m.get("readOnly", False),
                               "hostPath": v.get("hostPath", {}).get("path"),
                               "configMap": v.get("configMap", {}).get("name")})
            containers.append({"image": c.get("image"),
                               "argv": c.get("command", []) + c.get("args", []),
                               "privileged": c.get("securityContext", {}).get("privileged", False),
                               "securityContext": c.get("securityContext", {}),
                               "annotations": d["spec"]["template"]["metadata"].get("annotations", {}),
                               "resources": c.get("resources", {}),
                               "env": c.get("env", []),
                               "ports": c.get("ports", []),
                               "livenessProbe": c.get("livenessProbe"),
                               "readinessProbe": c.get("readinessProbe"),
                               "mounts": mounts})
        out["daemonsets"].append({
            "namespace": meta.get("namespace"),
            "hostPID": spec.get("hostPID", False),
            "hostNetwork": spec.get("hostNetwork", False),
            "tolerations": spec.get("tolerations", []),
            "selector": d["spec"]["selector"].get("matchLabels", {}),
            "labels": d["spec"]["template"]["metadata"].get("labels", {}),
            "containers": containers})
print(json.dumps(out))
)PY";

// Every key name config.cpp compares against (`k == "Path"`, `key ==
// "storage"`, `k != "Blacklist"`, ...): what the parser accepts.
std::set<std::string> parser_keys() {
  const std::string src = read_file(std::string(OOMSNAP_SOURCE_DIR) + "/userspace/agent/config.cpp");
  static const std::regex cmp(R"re(\b(?:k|key)\s*[!=]=\s*"([A-Za-z_][A-Za-z0-9_]*)")re");
  std::set<std::string> keys;
  for (std::sregex_iterator it(src.begin(), src.end(), cmp), end; it != end; ++it)
    keys.insert((*it)[1].str());
  return keys;
}

void expect_same_config(const AgentConfig& a, const AgentConfig& b, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(a.threshold_percent, b.threshold_percent);
  EXPECT_EQ(a.forecast_floor_percent, b.forecast_floor_percent);
  EXPECT_EQ(a.forecast_margin, b.forecast_margin);
  EXPECT_EQ(a.interval_tracing, b.interval_tracing);
  EXPECT_EQ(a.node_max_captures_per_minute, b.node_max_captures_per_minute);
  EXPECT_EQ(a.run_tracing_tool_timeout, b.run_tracing_tool_timeout);
  EXPECT_EQ(a.max_processes_per_incident, b.max_processes_per_incident);
  EXPECT_EQ(a.max_memory_object_entries, b.max_memory_object_entries);
  EXPECT_EQ(a.storage_path, b.storage_path);
  EXPECT_EQ(a.storage_max_bytes, b.storage_max_bytes);
  EXPECT_EQ(a.storage_max_files, b.storage_max_files);
  EXPECT_EQ(a.trigger_blacklist, b.trigger_blacklist);
  EXPECT_EQ(a.cgroup_root, b.cgroup_root);
  EXPECT_EQ(a.cgroup_scope, b.cgroup_scope);
  EXPECT_EQ(a.stdout_sink, b.stdout_sink);
  EXPECT_EQ(a.file_sink, b.file_sink);
  EXPECT_EQ(a.batch_window, b.batch_window);
  EXPECT_EQ(a.oom_kill_window, b.oom_kill_window);
  EXPECT_EQ(a.rescan_interval, b.rescan_interval);
  EXPECT_EQ(a.capture_grace, b.capture_grace);
  EXPECT_EQ(a.capture_memory_max, b.capture_memory_max);
  EXPECT_EQ(a.capture_result_max, b.capture_result_max);
  EXPECT_EQ(a.pod_log_root, b.pod_log_root);
  EXPECT_EQ(a.http_listen, b.http_listen);
}

// The capabilities the agent's start-up check wants on this kernel.
std::set<std::string> needed_on_this_kernel() {
  PrivilegeFacts f = current_privilege_facts();
  f.memlock_unlimited = true;  // LimitMEMLOCK=infinity
  const auto w = words(needed_capabilities(f));
  return {w.begin(), w.end()};
}

std::set<std::string> unit_bounding_set() {
  const Ini ini = parse_ini(read_file(kDeploy + "oomsnap.service"));
  const auto w = words(one(ini, "Service", "CapabilityBoundingSet"));
  return {w.begin(), w.end()};
}

bool by_path_has_no_devices(const json& mounts) {
  for (const auto& m : mounts)
    if (m["hostPath"].is_string() && m["hostPath"].get<std::string>().rfind("/dev", 0) == 0) return false;
  return true;
}

}  // namespace

// ------------------------------------------------------------------ oomsnap.toml

TEST(DeployConfig, ExampleLoadsAndStatesTheDefaults) {
  AgentConfig c;
  ASSERT_NO_THROW(c = load_config(kDeploy + "oomsnap.toml"));
  // The example promises "behaves exactly like no file at all".
  expect_same_config(c, AgentConfig{}, "deploy/oomsnap.toml vs defaults");
}

TEST(DeployConfig, ExampleSetsEveryKeyTheParserAccepts) {
  const std::set<std::string> keys = parser_keys();
  // If config.cpp stops comparing key names this way, this scan finds nothing
  // and must be adapted rather than pass vacuously.
  ASSERT_GE(keys.size(), 10u) << "config.cpp's key comparisons changed shape; update parser_keys()";
  const std::string text = read_file(kDeploy + "oomsnap.toml");
  for (const auto& k : keys) {
    const std::regex set_line("(^|\\n)[ \\t]*" + k + "[ \\t]*=");
    const std::regex table_line("(^|\\n)[ \\t]*\\[" + k + "\\]");
    EXPECT_TRUE(std::regex_search(text, set_line) || std::regex_search(text, table_line))
        << "deploy/oomsnap.toml does not set or document key '" << k << "'";
  }
}

// ------------------------------------------------------------------ oomsnap.service

TEST(DeployService, RunsTheAgentAsRootWithReload) {
  const Ini ini = parse_ini(read_file(kDeploy + "oomsnap.service"));
  ASSERT_TRUE(ini.count("Unit"));
  ASSERT_TRUE(ini.count("Service"));
  ASSERT_TRUE(ini.count("Install"));

  const auto argv = words(one(ini, "Service", "ExecStart"));
  ASSERT_GE(argv.size(), 4u);
  EXPECT_EQ(argv[0], "/usr/local/bin/oomsnap");
  EXPECT_EQ(argv[1], "watch");
  EXPECT_EQ(argv[2], "--config");
  EXPECT_EQ(argv[3], "/etc/oomsnap/oomsnap.toml");  // deploy/oomsnap.toml installed

  EXPECT_EQ(one(ini, "Service", "Restart"), "on-failure");
  // sd_notify: READY=1 after start-up, WATCHDOG=1 from the loop
  // (tests/integration/agent_systemd_test.cpp plays systemd's part).
  EXPECT_EQ(one(ini, "Service", "Type"), "notify");
  EXPECT_EQ(one(ini, "Service", "NotifyAccess"), "main");
  EXPECT_FALSE(one(ini, "Service", "WatchdogSec").empty());
  // /metrics on loopback: reachable from the host, nothing else.
  EXPECT_EQ(one(ini, "Service", "IPAddressDeny"), "any");
  EXPECT_EQ(one(ini, "Service", "IPAddressAllow"), "localhost");
  EXPECT_FALSE(ini.at("Service").count("PrivateNetwork")) << "the node could not scrape /metrics";
  EXPECT_EQ(load_config(kDeploy + "oomsnap.toml").http_listen.rfind("127.0.0.1:", 0), 0u);
  EXPECT_EQ(one(ini, "Service", "ExecReload"), "/bin/kill -HUP $MAINPID");
  EXPECT_EQ(one(ini, "Service", "KillSignal"), "SIGTERM");
  EXPECT_EQ(one(ini, "Service", "LimitMEMLOCK"), "infinity");
  EXPECT_EQ(one(ini, "Install", "WantedBy"), "multi-user.target");
  // Root: BPF, other processes' memory, cgroupfs writes.
  EXPECT_FALSE(ini.at("Service").count("User"));
  EXPECT_FALSE(ini.at("Service").count("DynamicUser"));
}

TEST(DeployService, HardeningLeavesWhatTheAgentNeeds) {
  const Ini ini = parse_ini(read_file(kDeploy + "oomsnap.service"));
  const auto& svc = ini.at("Service");
  auto value = [&](const std::string& k) {
    return svc.count(k) ? svc.at(k).back() : std::string();
  };
  EXPECT_EQ(value("ProtectSystem"), "strict");
  std::set<std::string> rw;
  for (const auto& v : svc.count("ReadWritePaths") ? svc.at("ReadWritePaths") : std::vector<std::string>{})
    for (const auto& p : words(v)) rw.insert(p[0] == '-' ? p.substr(1) : p);
  EXPECT_TRUE(rw.count("/sys/fs/cgroup")) << "cgroup.event_control, memory.pressure triggers";
  // The records go where the example config says.
  EXPECT_TRUE(rw.count(load_config(kDeploy + "oomsnap.toml").storage_path));
  // Each of these would make cgroupfs read-only or hide other processes.
  EXPECT_NE(value("ProtectControlGroups"), "yes");
  EXPECT_NE(value("ProtectKernelTunables"), "yes");
  EXPECT_EQ(value("ProtectProc"), "");
  EXPECT_EQ(value("ProcSubset"), "");
  EXPECT_NE(value("PrivateUsers"), "yes");
  // A deny-list only: an allow-list such as @system-service lacks bpf(2) and
  // perf_event_open(2); the groups denied hold none of the calls the agent makes.
  const auto filter = value("SystemCallFilter");
  ASSERT_FALSE(filter.empty());
  EXPECT_EQ(filter[0], '~') << filter;
  for (const char* needed : {"@debug", "@privileged", "@resources", "@process", "@system-service", "bpf",
                             "perf_event_open", "process_vm_readv", "setrlimit", "seccomp"})
    EXPECT_EQ(filter.find(needed), std::string::npos) << needed << " denied by " << filter;
  EXPECT_EQ(value("SystemCallErrorNumber"), "EPERM");
  // Outside those groups, what the agent never makes even at start (its own
  // filter, loaded after start, refuses these too; agent/ops/self_confinement.cpp).
  const auto denied = words(filter.substr(1));
  for (const char* never : {"ptrace", "process_vm_writev", "open_by_handle_at", "keyctl", "io_uring_setup"})
    EXPECT_NE(std::find(denied.begin(), denied.end(), never), denied.end()) << never << " not in " << filter;
  // Exactly the capabilities the agent checks for on this kernel (with
  // LimitMEMLOCK=infinity); tests/integration/agent_least_privilege_test.cpp
  // runs the agent with this set.
  EXPECT_EQ(unit_bounding_set(), needed_on_this_kernel());
  EXPECT_EQ(value("NoNewPrivileges"), "yes");
  // Bounded whatever a target does.
  EXPECT_FALSE(value("MemoryMax").empty());
  EXPECT_FALSE(value("TasksMax").empty());
  EXPECT_EQ(value("UMask"), "0077");
  // No /dev/kmsg, /proc/kallsyms or setns(2) in the agent: these hold.
  for (const char* k : {"PrivateDevices", "ProtectClock", "ProtectKernelModules", "RestrictNamespaces", "PrivateTmp",
                        "PrivateMounts"})
    EXPECT_EQ(value(k), "yes") << k;
  // The kernel's log is read with syslog(2) (its OOM reports): not
  // ProtectKernelLogs, which would deny the call and take CAP_SYSLOG away.
  EXPECT_EQ(value("ProtectKernelLogs"), "no");
}

// systemd's own reading of the unit (offline: no systemd needed): an exposure
// score at most 3.0 ("OK"; the unit before least privilege scored 6.1).
namespace {
// `systemd-analyze security --offline` of the unit with `options`: its output,
// and its wait status in status.
std::string systemd_analyze_security(const std::string& options, int& status) {
  const std::string cmd =
      "/usr/bin/systemd-analyze security --offline=yes " + options + " '" + kDeploy + "oomsnap.service' 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return "cannot run " + cmd;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  status = pclose(p);
  return out;
}
}  // namespace

TEST(DeployService, SystemdRatesTheExposureLow) {
  if (access("/usr/bin/systemd-analyze", X_OK) != 0) GTEST_SKIP() << "systemd-analyze not installed";
  int st = -1;
  // 3.3 since the agent reads the kernel's OOM reports (CAP_SYSLOG, no
  // ProtectKernelLogs; its own filter lets syslog(2) read only): 3.0 before.
  const std::string out = systemd_analyze_security("--threshold=33", st);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
  EXPECT_NE(out.find("Overall exposure level for oomsnap.service"), std::string::npos) << out;
}

// The pages that describe the unit say what it does: the exposure score
// systemd gives it now, and PrivateNetwork only as what the unit does not set
// (it has no PrivateNetwork=, DeployService.HardeningLeavesWhatTheAgentNeeds).
TEST(DeployService, DocsQuoteTheUnitsScoreAndNeverClaimPrivateNetwork) {
  if (access("/usr/bin/systemd-analyze", X_OK) != 0) GTEST_SKIP() << "systemd-analyze not installed";
  int st = -1;
  const std::string out = systemd_analyze_security("", st);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("Overall exposure level for oomsnap.service: ([0-9.]+)"))) << out;
  const std::string score = m[1];
  const std::string root = std::string(OOMSNAP_SOURCE_DIR) + "/";
  for (const char* page : {"docs/security.md", "docs/agent.md", "deploy/README.md"}) {
    std::string text = read_file(root + page);
    ASSERT_FALSE(text.empty()) << page;
    std::replace(text.begin(), text.end(), '\n', ' ');
    EXPECT_NE(text.find("rates it " + score), std::string::npos) << page << " does not quote the score " << score;
    // PrivateNetwork, or a private network in words ("private /dev, /tmp and network").
    const std::regex claim("PrivateNetwork|[Pp]rivate [^.]*network");
    for (std::sregex_iterator it(text.begin(), text.end(), claim), end; it != end; ++it) {
      // The sentence it is in says it is not set.
      const size_t at = static_cast<size_t>(it->position());
      const size_t dot = text.rfind(". ", at), from = dot == std::string::npos ? 0 : dot;
      const std::string sentence = text.substr(from, text.find(". ", at) - from);
      const bool says_not = std::regex_search(sentence, std::regex("instead of|rather than|\\bnot\\b|left out"));
      EXPECT_TRUE(says_not) << page << " names a private network as if the unit set it: " << sentence;
    }
  }
}

// ------------------------------------------------------------------ daemonset.yaml

TEST(DeployDaemonSet, PrivilegedHostPidWithTheMountsTheAgentNeeds) {
  const std::string out = run_python(kYamlSummary, kDeploy + "daemonset.yaml");
  json s;
  ASSERT_NO_THROW(s = json::parse(out)) << out;
  ASSERT_EQ(s["daemonsets"].size(), 1u) << out;
  const json& ds = s["daemonsets"][0];
  const std::string ns = ds["namespace"].get<std::string>();
  EXPECT_TRUE(ns == "oomsnap" || ns == "kube-system") << ns;
  EXPECT_TRUE(std::find(s["kinds"].begin(), s["kinds"].end(), "ConfigMap") != s["kinds"].end());

  EXPECT_EQ(ds["hostPID"], true);
  // Runs on every node whatever its taints.
  bool tolerates_all = false;
  for (const auto& t : ds["tolerations"])
    if (t.value("operator", "") == "Exists" && !t.contains("key")) tolerates_all = true;
  EXPECT_TRUE(tolerates_all) << ds["tolerations"].dump();
  for (const auto& item : ds["selector"].items())
    EXPECT_EQ(ds["labels"].value(item.key(), json()), item.value())
        << "selector label " << item.key() << " not on the pod template";

  ASSERT_EQ(ds["containers"].size(), 1u);
  const json& c = ds["containers"][0];
  EXPECT_EQ(c["image"], "oomsnap:latest");
  // Least privilege: the capabilities the agent checks for, nothing else
  // (the same list as the systemd unit), no privileged mode, a read-only root.
  EXPECT_EQ(c["privileged"], false);
  const json& sc = c["securityContext"];
  EXPECT_EQ(sc.value("readOnlyRootFilesystem", false), true);
  EXPECT_EQ(sc.value("allowPrivilegeEscalation", true), false);
  EXPECT_EQ(sc["capabilities"]["drop"], json::array({"ALL"}));
  std::set<std::string> added;
  for (const auto& cap : sc["capabilities"]["add"]) added.insert("CAP_" + cap.get<std::string>());
  EXPECT_EQ(added, needed_on_this_kernel());
  EXPECT_EQ(added, unit_bounding_set());
  const auto argv = c["argv"].get<std::vector<std::string>>();
  ASSERT_GE(argv.size(), 4u);
  EXPECT_EQ(argv[0], "/usr/local/bin/oomsnap");
  EXPECT_EQ(argv[1], "watch");
  EXPECT_EQ(argv[2], "--config");
  const std::string config_path = argv[3];
  EXPECT_EQ(c["resources"]["requests"]["cpu"], "50m");
  EXPECT_EQ(c["resources"]["requests"]["memory"], "64Mi");
  EXPECT_TRUE(c["resources"]["limits"].contains("memory"));
  EXPECT_TRUE(c["resources"]["limits"].contains("cpu"));
  EXPECT_TRUE(by_path_has_no_devices(c["mounts"]));

  std::map<std::string, json> by_path;
  for (const auto& m : c["mounts"]) by_path[m["mountPath"].get<std::string>()] = m;
  // Host paths mounted at the same place in the container.
  for (const char* p : {"/sys/fs/cgroup", "/sys/kernel/btf", "/var/log/oomsnap"}) {
    ASSERT_TRUE(by_path.count(p)) << p << " not mounted";
    EXPECT_EQ(by_path[p]["hostPath"], p) << p;
  }
  // No bpffs (issue #28): nothing is pinned, and a read-write bpffs would let
  // a compromised agent pin programs that outlive it. Should the BPF object
  // ever pin a map, this test names the mount it then needs.
  EXPECT_FALSE(by_path.count("/sys/fs/bpf")) << "bpffs mounted, though nothing is pinned";
  EXPECT_EQ(read_file(std::string(OOMSNAP_SOURCE_DIR) + "/bpf/agent.bpf.c").find("pinning"), std::string::npos)
      << "bpf/agent.bpf.c pins a map: the DaemonSet then needs /sys/fs/bpf";
  for (const auto& m : c["mounts"])
    EXPECT_NE(m["hostPath"], "/sys/fs/bpf") << m.dump();
  // The runtime's seccomp and AppArmor profiles are chosen here, never left to
  // the cluster's default (which differs between runtimes; docs/security.md
  // says why both are Unconfined and what the agent's own filter refuses).
  EXPECT_EQ(sc["seccompProfile"].value("type", ""), "Unconfined") << sc.dump();
  EXPECT_EQ(sc["appArmorProfile"].value("type", ""), "Unconfined") << sc.dump();
  EXPECT_EQ(by_path["/sys/fs/cgroup"]["readOnly"], false) << "cgroup.event_control is written";
  EXPECT_EQ(by_path["/var/log/oomsnap"]["readOnly"], false);
  // The kubelet's log directories, for pod and container names: at the same
  // paths, read-only (the agent reads their names, nothing else).
  for (const char* p : {"/var/log/pods", "/var/log/containers"}) {
    ASSERT_TRUE(by_path.count(p)) << p << " not mounted";
    EXPECT_EQ(by_path[p]["hostPath"], p) << p;
    EXPECT_EQ(by_path[p]["readOnly"], true) << p << " must be mounted readOnly";
  }
  // hostPID already shows every process in the container's /proc.
  EXPECT_FALSE(by_path.count("/host/proc"));

  // The config file comes from a ConfigMap in the same namespace, it parses,
  // and it writes records into the hostPath mount.
  const auto slash = config_path.rfind('/');
  const std::string config_dir = config_path.substr(0, slash);
  const std::string config_file = config_path.substr(slash + 1);
  ASSERT_TRUE(by_path.count(config_dir)) << config_dir << " not mounted";
  const std::string cm_name = by_path[config_dir]["configMap"].get<std::string>();
  ASSERT_TRUE(s["configmaps"].contains(cm_name)) << cm_name;
  const json& cm = s["configmaps"][cm_name];
  EXPECT_EQ(cm["namespace"], ns);
  ASSERT_TRUE(cm["data"].contains(config_file)) << "ConfigMap has no key " << config_file;
  AgentConfig cfg;
  try {
    cfg = parse_config(cm["data"][config_file].get<std::string>());
  } catch (const ConfigError& e) {
    FAIL() << "ConfigMap " << cm_name << "/" << config_file << ": " << e.what();
  }
  ASSERT_TRUE(cfg.file_sink);
  ASSERT_TRUE(by_path.count(cfg.storage_path)) << "[storage] Path " << cfg.storage_path << " not mounted";
  EXPECT_FALSE(by_path[cfg.storage_path]["hostPath"].is_null());
  // [kubernetes] PodLogRoot names the directory those two are mounted in.
  ASSERT_FALSE(cfg.pod_log_root.empty());
  for (const char* sub : {"/pods", "/containers"})
    EXPECT_TRUE(by_path.count(cfg.pod_log_root + sub)) << "[kubernetes] PodLogRoot " << cfg.pod_log_root << sub
                                                       << " not mounted";
  // The ConfigMap is the example without its comments.
  expect_same_config(cfg, load_config(kDeploy + "oomsnap.toml"), "ConfigMap vs deploy/oomsnap.toml");
}

// /metrics, /healthz and /readyz on the pod's IP: the downward API's
// status.podIP reaches the agent as --http-listen=$(POD_IP):PORT, the probes
// and Prometheus's annotations name that same port, and the pod stays off
// the host network (the agent needs the host's PID namespace, not its network).
TEST(DeployDaemonSet, MetricsAndHealthOnThePodIpWithProbesAndScrapeAnnotations) {
  const std::string out = run_python(kYamlSummary, kDeploy + "daemonset.yaml");
  json s;
  ASSERT_NO_THROW(s = json::parse(out)) << out;
  ASSERT_EQ(s["daemonsets"].size(), 1u) << out;
  const json& ds = s["daemonsets"][0];
  EXPECT_EQ(ds["hostNetwork"], false);
  ASSERT_EQ(ds["containers"].size(), 1u);
  const json& c = ds["containers"][0];

  bool pod_ip_from_downward_api = false;
  for (const auto& e : c["env"])
    if (e.value("name", "") == "POD_IP")
      pod_ip_from_downward_api = e["valueFrom"]["fieldRef"].value("fieldPath", "") == "status.podIP";
  EXPECT_TRUE(pod_ip_from_downward_api) << c["env"].dump();

  // Exactly one --http-listen=$(POD_IP):PORT, whose PORT everything else names.
  const std::string prefix = "--http-listen=$(POD_IP):";
  std::string listen_port;
  int listen_args = 0;
  for (const auto& a : c["argv"]) {
    const std::string arg = a.get<std::string>();
    if (arg.rfind("--http-listen", 0) != 0) continue;
    ++listen_args;
    ASSERT_EQ(arg.rfind(prefix, 0), 0u) << arg;
    listen_port = arg.substr(prefix.size());
  }
  ASSERT_EQ(listen_args, 1) << c["argv"].dump();
  // What the agent makes of it once the kubelet substitutes a pod IP (v4 or v6).
  for (const char* ip : {"10.244.1.17", "fd00:10:244::17"}) {
    std::string why;
    auto a = parse_listen_address(std::string(ip) + ":" + listen_port, why);
    ASSERT_TRUE(a) << ip << ":" << listen_port << ": " << why;
    EXPECT_EQ(a->host, ip);
    EXPECT_NE(a->port, 0);
  }

  std::string port_name;
  for (const auto& p : c["ports"])
    if (std::to_string(p.value("containerPort", 0)) == listen_port) port_name = p.value("name", "");
  ASSERT_FALSE(port_name.empty()) << "no named containerPort " << listen_port << ": " << c["ports"].dump();
  auto probe_port = [&](const json& probe) {
    const json& port = probe["httpGet"]["port"];
    return port.is_string() ? port.get<std::string>() == port_name : std::to_string(port.get<int>()) == listen_port;
  };
  ASSERT_TRUE(c["livenessProbe"].is_object()) << "no livenessProbe";
  EXPECT_EQ(c["livenessProbe"]["httpGet"].value("path", ""), "/healthz");
  EXPECT_TRUE(probe_port(c["livenessProbe"])) << c["livenessProbe"].dump();
  // The agent reports a stall after 5 s; the kubelet acts on it after
  // failureThreshold periods, never on one slow answer.
  EXPECT_GE(c["livenessProbe"].value("failureThreshold", 3), 2);
  ASSERT_TRUE(c["readinessProbe"].is_object()) << "no readinessProbe";
  EXPECT_EQ(c["readinessProbe"]["httpGet"].value("path", ""), "/readyz");
  EXPECT_TRUE(probe_port(c["readinessProbe"])) << c["readinessProbe"].dump();

  const json& ann = c["annotations"];
  EXPECT_EQ(ann.value("prometheus.io/scrape", ""), "true") << ann.dump();
  EXPECT_EQ(ann.value("prometheus.io/port", ""), listen_port) << ann.dump();
  EXPECT_EQ(ann.value("prometheus.io/path", ""), "/metrics") << ann.dump();
}

// Issue #28: without a NetworkPolicy any pod in the cluster can reach the
// agent's port. Only the scraper may: one ingress rule, for the listen port,
// from pods a namespace and a pod selector name (never from everywhere).
TEST(DeployDaemonSet, ANetworkPolicyLetsOnlyTheScraperReachTheMetricsPort) {
  const std::string out = run_python(kYamlSummary, kDeploy + "daemonset.yaml");
  json s;
  ASSERT_NO_THROW(s = json::parse(out)) << out;
  ASSERT_EQ(s["networkpolicies"].size(), 1u) << out;
  const json& ds = s["daemonsets"][0];
  const json& np = s["networkpolicies"][0];
  EXPECT_EQ(np["namespace"], ds["namespace"]);
  EXPECT_EQ(np["spec"]["podSelector"]["matchLabels"], ds["labels"]) << "it must select the agent's pods";
  EXPECT_EQ(np["spec"]["policyTypes"], json::array({"Ingress"}));
  ASSERT_EQ(np["spec"]["ingress"].size(), 1u);
  const json& rule = np["spec"]["ingress"][0];
  ASSERT_EQ(rule["ports"].size(), 1u);
  EXPECT_EQ(rule["ports"][0]["port"], ds["containers"][0]["ports"][0]["containerPort"]);
  ASSERT_FALSE(rule["from"].empty()) << "an ingress rule without 'from' admits every pod";
  for (const auto& peer : rule["from"]) {
    EXPECT_FALSE(peer.value("namespaceSelector", json::object()).empty()) << peer.dump();
    EXPECT_FALSE(peer.value("podSelector", json::object()).empty()) << peer.dump();
    EXPECT_FALSE(peer.contains("ipBlock")) << peer.dump();
  }
}
