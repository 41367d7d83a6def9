#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "agent/config.h"
#include "config_error.h"

using namespace oomsnap;

namespace {

// The ConfigError message for `text`, or "" if it parsed.
std::string error_of(const std::string& text) {
  return oomsnap_test::config_error([&] { parse_config(text); });
}

}  // namespace

TEST(Config, EmptyTextGivesDefaults) {
  AgentConfig c = parse_config("");
  EXPECT_EQ(c.threshold_percent, 90);
  EXPECT_EQ(c.interval_tracing, std::chrono::seconds(300));
  EXPECT_EQ(c.node_max_captures_per_minute, 6u);
  EXPECT_EQ(c.run_tracing_tool_timeout, std::chrono::milliseconds(2000));
  EXPECT_EQ(c.max_memory_object_entries, 10u);
  EXPECT_EQ(c.storage_path, "/var/log/oomsnap");
  EXPECT_EQ(c.storage_max_bytes, 64ull << 20);
  EXPECT_EQ(c.storage_max_files, 5);
  EXPECT_TRUE(c.trigger_blacklist.empty());
  EXPECT_EQ(c.cgroup_root, "");
  EXPECT_EQ(c.cgroup_scope, "/");
  EXPECT_TRUE(c.stdout_sink);
  EXPECT_TRUE(c.file_sink);
  EXPECT_EQ(c.batch_window, std::chrono::milliseconds(2));
  EXPECT_EQ(c.oom_kill_window, std::chrono::milliseconds(60000));
  EXPECT_EQ(c.rescan_interval, std::chrono::milliseconds(2000));
  EXPECT_EQ(c.max_exit_records_per_minute, 30u);
  EXPECT_EQ(c.max_oom_kill_records_per_minute, 5u);
}

TEST(Config, MaxExitRecordsPerMinuteIsBounded) {
  EXPECT_EQ(parse_config("MaxExitRecordsPerMinute = 1\n").max_exit_records_per_minute, 1u);
  EXPECT_EQ(parse_config("MaxExitRecordsPerMinute = 100000\n").max_exit_records_per_minute, 100000u);
  // 0 would silence exits: that is what [triggers] Blacklist = ["process_exit"] is for.
  EXPECT_NE(error_of("MaxExitRecordsPerMinute = 0\n").find("'MaxExitRecordsPerMinute' (line 1)"), std::string::npos);
  EXPECT_NE(error_of("MaxExitRecordsPerMinute = 100001\n").find("out of range"), std::string::npos);
  EXPECT_NE(error_of("MaxExitRecordsPerMinute = -5\n").find("'MaxExitRecordsPerMinute'"), std::string::npos);
  EXPECT_NE(error_of("MaxExitRecordsPerMinute = 2.5\n").find("expected integer"), std::string::npos);
}

TEST(Config, MaxOomKillRecordsPerMinuteIsBounded) {
  EXPECT_EQ(parse_config("MaxOomKillRecordsPerMinute = 1\n").max_oom_kill_records_per_minute, 1u);
  EXPECT_EQ(parse_config("MaxOomKillRecordsPerMinute = 100000\n").max_oom_kill_records_per_minute, 100000u);
  // 0 would silence a container's first kill, which always has its record.
  EXPECT_NE(error_of("MaxOomKillRecordsPerMinute = 0\n").find("'MaxOomKillRecordsPerMinute' (line 1)"),
            std::string::npos);
  EXPECT_NE(error_of("MaxOomKillRecordsPerMinute = 100001\n").find("out of range"), std::string::npos);
}

TEST(Config, AgentTimingAndScopeKeys) {
  AgentConfig c = parse_config(R"(
BatchWindow = 2
OomKillWindow = 0.5
RescanInterval = 1
[storage]
LocalFile = false
[cgroup]
Scope = "/kubepods"
)");
  EXPECT_EQ(c.batch_window, std::chrono::milliseconds(2000));
  EXPECT_EQ(c.oom_kill_window, std::chrono::milliseconds(500));
  EXPECT_EQ(c.rescan_interval, std::chrono::milliseconds(1000));
  EXPECT_FALSE(c.file_sink);
  EXPECT_EQ(c.cgroup_scope, "/kubepods");
  EXPECT_NE(error_of("[cgroup]\nScope = \"kubepods\"\n").find("'cgroup.Scope' (line 2)"), std::string::npos);
  EXPECT_NE(error_of("[cgroup]\nScope = \"/a/../b\"\n").find("cgroup.Scope"), std::string::npos);
  EXPECT_NE(error_of("BatchWindow = 0\n").find("'BatchWindow'"), std::string::npos);
  EXPECT_NE(error_of("OomKillWindow = \"1s\"\n").find("'OomKillWindow'"), std::string::npos);
}

TEST(Config, FullValidFile) {
  AgentConfig c = parse_config(R"(
ThresholdPercent = 75
IntervalTracing = 0
NodeMaxCapturesPerMinute = 20
MaxProcessesPerIncident = 5
RunTracingToolTimeout = 1.5
MaxMemoryObjectEntries = 500

[storage]
Path = "/tmp/oomsnap"
MaxBytes = 1048576
MaxFiles = 3
Stdout = false

[triggers]
Blacklist = ["psi", "threshold"]
InKernelThreshold = false

[cgroup]
Root = "/sys/fs/cgroup/kubepods.slice"
)");
  EXPECT_EQ(c.threshold_percent, 75);
  EXPECT_EQ(c.interval_tracing, std::chrono::seconds(0));
  EXPECT_EQ(c.node_max_captures_per_minute, 20u);
  EXPECT_EQ(c.max_processes_per_incident, 5u);
  EXPECT_EQ(c.run_tracing_tool_timeout, std::chrono::milliseconds(1500));
  EXPECT_EQ(c.max_memory_object_entries, 500u);
  EXPECT_EQ(c.storage_path, "/tmp/oomsnap");
  EXPECT_EQ(c.storage_max_bytes, 1048576u);
  EXPECT_EQ(c.storage_max_files, 3);
  EXPECT_FALSE(c.stdout_sink);
  EXPECT_EQ(c.trigger_blacklist, (std::vector<std::string>{"psi", "threshold"}));
  EXPECT_FALSE(c.in_kernel_threshold);
  EXPECT_TRUE(parse_config("").in_kernel_threshold) << "on by default";
  EXPECT_TRUE(parse_config("").last_gasp) << "on by default";
  EXPECT_FALSE(parse_config("[capture]\nLastGasp = false\n").last_gasp);
  EXPECT_EQ(c.cgroup_root, "/sys/fs/cgroup/kubepods.slice");
}

TEST(Config, IntegerTimeoutIsSeconds) {
  EXPECT_EQ(parse_config("RunTracingToolTimeout = 3").run_tracing_tool_timeout,
            std::chrono::milliseconds(3000));
}

TEST(Config, UnknownKeysAtAnyLevel) {
  std::string e = error_of("ThresholdPercent = 80\nTreshold = 1\n");
  EXPECT_NE(e.find("unknown key 'Treshold'"), std::string::npos) << e;
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;

  e = error_of("[storage]\nPath = \"/x\"\nMaxByte = 5\n");
  EXPECT_NE(e.find("'storage.MaxByte'"), std::string::npos) << e;
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;

  e = error_of("[triggers]\nBlacklist = []\nWhitelist = []\n");
  EXPECT_NE(e.find("'triggers.Whitelist'"), std::string::npos) << e;
  e = error_of("[cgroup]\nPath = \"/x\"\n");
  EXPECT_NE(e.find("'cgroup.Path'"), std::string::npos) << e;
  e = error_of("[metrics]\nPort = 1\n");
  EXPECT_NE(e.find("unknown key 'metrics'"), std::string::npos) << e;
}

TEST(Config, WrongTypes) {
  std::string e = error_of("ThresholdPercent = \"90\"");
  EXPECT_NE(e.find("'ThresholdPercent'"), std::string::npos) << e;
  EXPECT_NE(e.find("expected integer, got string"), std::string::npos) << e;

  e = error_of("IntervalTracing = 1.5");
  EXPECT_NE(e.find("'IntervalTracing'"), std::string::npos) << e;
  e = error_of("RunTracingToolTimeout = true");
  EXPECT_NE(e.find("'RunTracingToolTimeout'"), std::string::npos) << e;
  e = error_of("[storage]\nStdout = 1\n");
  EXPECT_NE(e.find("'storage.Stdout'"), std::string::npos) << e;
  e = error_of("[storage]\nPath = 7\n");
  EXPECT_NE(e.find("'storage.Path'"), std::string::npos) << e;
  e = error_of("[triggers]\nBlacklist = \"psi\"\n");
  EXPECT_NE(e.find("'triggers.Blacklist'"), std::string::npos) << e;
  e = error_of("[triggers]\nInKernelThreshold = \"yes\"\n");
  EXPECT_NE(e.find("'triggers.InKernelThreshold'"), std::string::npos) << e;
  e = error_of("[capture]\nLastGasp = 1\n");
  EXPECT_NE(e.find("'capture.LastGasp'"), std::string::npos) << e;
  e = error_of("[triggers]\nBlacklist = [\"psi\", 3]\n");
  EXPECT_NE(e.find("'triggers.Blacklist'"), std::string::npos) << e;
  e = error_of("storage = 5");
  EXPECT_NE(e.find("'storage'"), std::string::npos) << e;
  EXPECT_NE(e.find("expected table"), std::string::npos) << e;
}

TEST(Config, OutOfRange) {
  struct Case {
    const char* text;
    const char* key;
  } cases[] = {
      {"ThresholdPercent = 0", "'ThresholdPercent'"},
      {"ThresholdPercent = 101", "'ThresholdPercent'"},
      {"ForecastFloorPercent = 0", "'ForecastFloorPercent'"},
      {"ForecastFloorPercent = 101", "'ForecastFloorPercent'"},
      {"ForecastMargin = -0.1", "'ForecastMargin'"},
      {"ForecastMargin = inf", "'ForecastMargin'"},
      {"IntervalTracing = -1", "'IntervalTracing'"},
      {"NodeMaxCapturesPerMinute = 0", "'NodeMaxCapturesPerMinute'"},
      {"NodeMaxCapturesPerMinute = 10001", "'NodeMaxCapturesPerMinute'"},
      {"MaxProcessesPerIncident = 0", "'MaxProcessesPerIncident'"},
      {"MaxProcessesPerIncident = 17", "'MaxProcessesPerIncident'"},
      {"RunTracingToolTimeout = 0", "'RunTracingToolTimeout'"},
      {"RunTracingToolTimeout = 0.0001", "'RunTracingToolTimeout'"},
      {"RunTracingToolTimeout = -2.0", "'RunTracingToolTimeout'"},
      {"RunTracingToolTimeout = nan", "'RunTracingToolTimeout'"},
      {"MaxMemoryObjectEntries = 0", "'MaxMemoryObjectEntries'"},
      {"MaxMemoryObjectEntries = 100001", "'MaxMemoryObjectEntries'"},
      {"[storage]\nMaxBytes = 0", "'storage.MaxBytes'"},
      {"[storage]\nMaxFiles = 0", "'storage.MaxFiles'"},
      {"[storage]\nMaxFiles = 9999999999", "'storage.MaxFiles'"},
  };
  for (const auto& c : cases) {
    std::string e = error_of(c.text);
    EXPECT_NE(e.find(c.key), std::string::npos) << c.text << " -> " << e;
  }
  // Bounds themselves are accepted.
  EXPECT_EQ(parse_config("ThresholdPercent = 1").threshold_percent, 1);
  EXPECT_EQ(parse_config("ThresholdPercent = 100").threshold_percent, 100);
  EXPECT_EQ(parse_config("MaxMemoryObjectEntries = 100000").max_memory_object_entries, 100000u);
}

TEST(Config, UnknownTriggerNamed) {
  std::string e = error_of("[triggers]\nBlacklist = [\"psi\", \"oom_kil\"]\n");
  EXPECT_NE(e.find("'triggers.Blacklist'"), std::string::npos) << e;
  EXPECT_NE(e.find("'oom_kil'"), std::string::npos) << e;
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  // Every known trigger is accepted.
  auto c = parse_config(
      "[triggers]\nBlacklist = [\"memcg_pressure\", \"oom_kill\", \"process_exit\", "
      "\"memory_events\", \"psi\", \"threshold\"]\n");
  EXPECT_EQ(c.trigger_blacklist.size(), 6u);
}

TEST(Config, SyntaxErrorHasLine) {
  std::string e = error_of("ThresholdPercent = 80\n\n[storage\nPath = \"/x\"\n");
  EXPECT_NE(e.find("syntax error"), std::string::npos) << e;
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
  e = error_of("ThresholdPercent = 80\nThresholdPercent = 81\n");  // duplicate key
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
}

TEST(Config, LoadConfig) {
  EXPECT_EQ(load_config("").threshold_percent, 90);

  try {
    load_config("/nonexistent/oomsnap.toml");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/oomsnap.toml"), std::string::npos) << e.what();
  }

  char path[] = "/tmp/oomsnap_config_test_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  {
    std::ofstream f(path);
    f << "ThresholdPercent = 42\n[storage]\nMaxFiles = -1\n";
  }
  try {
    load_config(path);
    ADD_FAILURE() << "expected ConfigError";
  } catch (const ConfigError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("'storage.MaxFiles' (line 3)"), std::string::npos) << msg;
  }
  {
    std::ofstream f(path);
    f << "ThresholdPercent = 42\n";
  }
  EXPECT_EQ(load_config(path).threshold_percent, 42);
  std::remove(path);
}

TEST(Config, KubernetesPodLogRoot) {
  EXPECT_EQ(parse_config("").pod_log_root, "/var/log");
  EXPECT_EQ(parse_config("[kubernetes]\nPodLogRoot = \"/host/var/log\"\n").pod_log_root, "/host/var/log");
  // "" turns the lookup off.
  EXPECT_EQ(parse_config("[kubernetes]\nPodLogRoot = \"\"\n").pod_log_root, "");

  std::string e = error_of("[kubernetes]\nPodLogRoot = \"var/log\"\n");
  EXPECT_NE(e.find("'kubernetes.PodLogRoot' (line 2)"), std::string::npos) << e;
  EXPECT_NE(e.find("absolute path"), std::string::npos) << e;
  e = error_of("[kubernetes]\n\nPodLogRoot = \"/var/log/..\"\n");
  EXPECT_NE(e.find("'kubernetes.PodLogRoot' (line 3)"), std::string::npos) << e;
  e = error_of("[kubernetes]\nPodLogRoot = \"/a/../var/log\"\n");
  EXPECT_NE(e.find("'kubernetes.PodLogRoot'"), std::string::npos) << e;
  // ".." only as a whole component: a directory named "..x" is fine.
  EXPECT_EQ(parse_config("[kubernetes]\nPodLogRoot = \"/srv/..x\"\n").pod_log_root, "/srv/..x");
  e = error_of("[kubernetes]\nPodLogRoot = 1\n");
  EXPECT_NE(e.find("'kubernetes.PodLogRoot'"), std::string::npos) << e;
  EXPECT_NE(e.find("expected string"), std::string::npos) << e;
  e = error_of("[kubernetes]\nPodLogRoot = \"/var/log\"\nApiServer = \"x\"\n");
  EXPECT_NE(e.find("unknown key 'kubernetes.ApiServer' (line 3)"), std::string::npos) << e;
  e = error_of("kubernetes = \"/var/log\"\n");
  EXPECT_NE(e.find("expected table"), std::string::npos) << e;
}

// ------------------------------------------------------------------ [http] Listen

TEST(Config, HttpListenDefaultsToLoopbackAndTakesAddresses) {
  EXPECT_EQ(parse_config("").http_listen, "127.0.0.1:9463");
  for (const char* good : {"127.0.0.1:9463", "0.0.0.0:0", "10.1.2.3:65535", "[::1]:9463", "[::]:80", "fd00::5:9463", ""})
    EXPECT_EQ(parse_config(std::string("[http]\nListen = \"") + good + "\"\n").http_listen, good) << good;
}

TEST(Config, HttpListenRefusesWhatIsNotIpAndPortNamingKeyAndLine) {
  struct Bad {
    const char* value;
    const char* says;
  };
  for (const Bad& b : {Bad{"\"localhost:9463\"", "not an IP address"}, Bad{"\"127.0.0.1\"", "no port"},
                       Bad{"\"127.0.0.1:\"", "not a number"}, Bad{"\"127.0.0.1:70000\"", "not a number from 0 to 65535"},
                       Bad{"\"127.0.0.1:94x\"", "not a number"}, Bad{"\"[127.0.0.1]:9463\"", "IPv6 hosts only"}, Bad{"\":9463\"", "not an IP address"},
                       Bad{"9463", "expected string, got integer"}}) {
    const std::string err = error_of(std::string("# metrics\n[http]\nListen = ") + b.value + "\n");
    EXPECT_NE(err.find("'http.Listen' (line 3)"), std::string::npos) << b.value << ": " << err;
    EXPECT_NE(err.find(b.says), std::string::npos) << b.value << ": " << err;
  }
  EXPECT_NE(error_of("[http]\nPort = 9463\n").find("unknown key 'http.Port'"), std::string::npos);
}

// The forecast trigger's keys: a margin of zero is allowed (the expected
// capture time alone), fractions are seconds.
TEST(Config, ForecastKeys) {
  AgentConfig c = parse_config("ForecastFloorPercent = 70\nForecastMargin = 0");
  EXPECT_EQ(c.forecast_floor_percent, 70);
  EXPECT_EQ(c.forecast_margin, std::chrono::milliseconds(0));
  EXPECT_EQ(parse_config("ForecastMargin = 0.35").forecast_margin, std::chrono::milliseconds(350));
  EXPECT_EQ(parse_config("[triggers]\nBlacklist = [\"forecast\"]").trigger_blacklist,
            std::vector<std::string>{"forecast"});
}
