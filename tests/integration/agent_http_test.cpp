// The agent's HTTP endpoint with the real binary: a real Prometheus scrapes
// it through an end-to-end incident; promtool checks a scrape; /healthz
// reports a stalled event loop and its recovery; an idle or oversized client
// neither holds the server nor keeps /metrics from others; a port in use
// stops `oomsnap watch` with exit 1 naming the address.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "agent_process.h"
#include "http_get.h"

using namespace oomsnap_test;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kPrometheus = "/usr/bin/prometheus";
constexpr const char* kPromtool = "/usr/bin/promtool";

// Polls `probe` every 100 ms until it returns true or `timeout` passes.
template <class F>
bool eventually(std::chrono::milliseconds timeout, F probe) {
  const auto end = Clock::now() + timeout;
  while (Clock::now() < end) {
    if (probe()) return true;
    std::this_thread::sleep_for(100ms);
  }
  return probe();
}

std::string url_encode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~') out += static_cast<char>(c);
    else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

// A Prometheus server of its own: loopback, a free port, a temporary
// storage directory, one job scraping the agent every second. Killed (and
// its directory removed) in the destructor.
class PrometheusServer {
 public:
  PrometheusServer(const std::string& dir, uint16_t agent_port) : dir_(dir + "/prometheus"), port_(free_loopback_port()) {
    std::filesystem::create_directories(dir_ + "/data");
    std::ofstream(dir_ + "/prometheus.yml") << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                                               "  evaluation_interval: 1s\n"
                                               "scrape_configs:\n  - job_name: oomsnap\n    static_configs:\n"
                                               "      - targets: ['127.0.0.1:"
                                            << agent_port << "']\n";
    proc_ = std::make_unique<Process>(std::vector<std::string>{
        "/bin/sh", "-c", "exec \"$0\" \"$@\" 2>\"" + dir_ + "/prometheus.log\"", kPrometheus,
        "--config.file=" + dir_ + "/prometheus.yml", "--storage.tsdb.path=" + dir_ + "/data",
        "--web.listen-address=127.0.0.1:" + std::to_string(port_), "--storage.tsdb.retention.time=1h"});
  }
  ~PrometheusServer() {
    proc_.reset();  // SIGKILL and reap
    std::filesystem::remove_all(dir_);
  }
  bool wait_ready(std::chrono::milliseconds timeout) {
    return eventually(timeout, [&] { return http_get(port_, "/-/ready", 2s).status == 200; });
  }
  // The value of an instant query's single result; nullopt when it has none.
  std::optional<double> query(const std::string& promql) {
    HttpReply r = http_get(port_, "/api/v1/query?query=" + url_encode(promql), 5s);
    if (r.status != 200) return std::nullopt;
    json j = json::parse(r.body, nullptr, false);
    if (j.is_discarded() || j.value("status", "") != "success") return std::nullopt;
    const json& result = j["data"]["result"];
    if (!result.is_array() || result.size() != 1) return std::nullopt;
    return std::stod(result[0]["value"][1].get<std::string>());
  }
  std::string log() const { return slurp(dir_ + "/prometheus.log"); }

 private:
  std::string dir_;
  uint16_t port_;
  std::unique_ptr<Process> proc_;
};

// Runs `cmd` with `input` on stdin; its exit status and output (both streams).
int run_with_input(const std::string& cmd, const std::string& input_file, std::string& out) {
  FILE* p = popen((cmd + " < '" + input_file + "' 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  return pclose(p);
}

}  // namespace

// A real Prometheus scrapes the agent through one incident: up is 1, and
// the incident and its kill (snapshot before the kill) each count once.
TEST(AgentHttpPrometheus, ScrapesAnIncidentEndToEnd) {
  if (access(kPrometheus, X_OK) != 0) GTEST_SKIP() << "prometheus not installed (tools/setup.sh installs it)";
  require_fixture();
  TestMemcg scope("scope");
  TestMemcg box(scope, "box", 128 * kMiB);
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir, "OomKillWindow = 60\nRunTracingToolTimeout = 5", "127.0.0.1:0"));
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  const uint16_t port = http_port(agent, 5s);
  ASSERT_NE(port, 0) << agent.log();

  PrometheusServer prom(dir, port);
  ASSERT_TRUE(prom.wait_ready(60s)) << prom.log();
  ASSERT_TRUE(eventually(30s, [&] { return prom.query("up{job=\"oomsnap\"}") == 1.0; })) << prom.log();
  // The series exist from the first scrape, at 0 (declared at start).
  std::optional<double> incidents0, kills0;
  ASSERT_TRUE(eventually(10s, [&] {
    incidents0 = prom.query("sum(oomsnap_incidents_total{job=\"oomsnap\"})");
    kills0 = prom.query("oomsnap_oom_kills_total{job=\"oomsnap\",snapshot=\"before_kill\"}");
    return incidents0 && kills0;
  }));
  EXPECT_EQ(*incidents0, 0.0);
  EXPECT_EQ(*kills0, 0.0);

  auto fx = leaker(box, 25);
  json rec = agent.next_record(60s);
  ASSERT_FALSE(rec.is_null()) << agent.log();
  ASSERT_TRUE(rec.contains("oom_kill")) << rec.dump(2);
  EXPECT_GT(rec["oom_kill"]["lead_ms"].get<double>(), 0.0) << rec.dump(2);

  EXPECT_TRUE(eventually(20s, [&] {
    return prom.query("sum(oomsnap_incidents_total{job=\"oomsnap\"})") == *incidents0 + 1 &&
           prom.query("oomsnap_oom_kills_total{job=\"oomsnap\",snapshot=\"before_kill\"}") == *kills0 + 1;
  })) << "incidents " << prom.query("sum(oomsnap_incidents_total)").value_or(-1) << ", before_kill "
      << prom.query("oomsnap_oom_kills_total{snapshot=\"before_kill\"}").value_or(-1);
  EXPECT_EQ(prom.query("oomsnap_incidents_total{job=\"oomsnap\",trigger=\"" + rec["trigger"]["type"].get<std::string>() +
                       "\",status=\"collected\"}"),
            1.0);
  EXPECT_EQ(prom.query("oomsnap_capture_lead_seconds_count{job=\"oomsnap\"}"), 1.0);
  EXPECT_EQ(prom.query("oomsnap_capture_duration_seconds_count{job=\"oomsnap\",language=\"go\"}"), 1.0);
  EXPECT_EQ(prom.query("up{job=\"oomsnap\"}"), 1.0);
  EXPECT_EQ(agent.stop(), 0);
  std::filesystem::remove_all(dir);
}

// promtool's own check of a real scrape (names, types, HELP, histogram shape).
TEST(AgentHttpPrometheus, PromtoolFindsNothingWrongInAScrape) {
  if (access(kPromtool, X_OK) != 0) GTEST_SKIP() << "promtool not installed (tools/setup.sh installs prometheus)";
  TestMemcg scope("scope");
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir, "", "127.0.0.1:0"));
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  const uint16_t port = http_port(agent, 5s);
  ASSERT_NE(port, 0) << agent.log();
  HttpReply r = http_get(port, "/metrics");
  ASSERT_EQ(r.status, 200) << r.headers;
  EXPECT_NE(r.headers.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << r.headers;
  for (const char* family :
       {"oomsnap_build_info", "oomsnap_incidents_total", "oomsnap_oom_kills_total", "oomsnap_capture_duration_seconds",
        "oomsnap_capture_lead_seconds", "oomsnap_capture_failures_total", "oomsnap_bpf_ring_drops_total",
        "oomsnap_pressure_events_suppressed_total", "oomsnap_queue_overflows_total", "oomsnap_records_written_total",
        "oomsnap_sink_errors_total", "oomsnap_watched_cgroups", "oomsnap_last_event_timestamp_seconds"})
    EXPECT_NE(r.body.find(std::string("# TYPE ") + family + " "), std::string::npos) << family;
  EXPECT_NE(r.body.find("oomsnap_records_written_total{sink=\"stdout\"}"), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("oomsnap-test"), std::string::npos) << "a cgroup path became a label";
  std::ofstream(dir + "/scrape.txt") << r.body;
  std::string out;
  const int st = run_with_input(std::string(kPromtool) + " check metrics", dir + "/scrape.txt", out);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
  EXPECT_EQ(out, "") << "promtool lint findings:\n" << out;
  EXPECT_EQ(agent.stop(), 0);
  std::filesystem::remove_all(dir);
}

// /healthz sees the event loop stall (the test hook blocks it on SIGUSR2)
// while /metrics, served off the loop, keeps answering; then it recovers.
TEST(AgentHttpHealth, HealthzTurns503WhileTheLoopStallsAndBack) {
  TestMemcg scope("scope");
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir, "", "127.0.0.1:0"), {}, {"OOMSNAP_TEST_STALL_LOOP_ON_SIGUSR2=9"},
                     {}, kTestHooksBinary);
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  const uint16_t port = http_port(agent, 5s);
  ASSERT_NE(port, 0) << agent.log();
  HttpReply h = http_get(port, "/healthz");
  EXPECT_EQ(h.status, 200) << h.body;
  EXPECT_EQ(h.body, "ok\n");
  EXPECT_EQ(http_get(port, "/readyz").status, 200);

  ::kill(agent.process().pid(), SIGUSR2);
  ASSERT_TRUE(agent.wait_log("test hook: blocking the event loop", 5s)) << agent.log();
  const auto t0 = Clock::now();
  HttpReply stalled;
  ASSERT_TRUE(eventually(8s, [&] { return (stalled = http_get(port, "/healthz", 2s)).status == 503; }))
      << stalled.status << " " << stalled.body;
  const double seen_after = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_NE(stalled.body.find("event loop stalled: last turn"), std::string::npos) << stalled.body;
  EXPECT_EQ(std::count(stalled.body.begin(), stalled.body.end(), '\n'), 1) << "one line: " << stalled.body;
  // Reported after the 5 s allowance, not before.
  EXPECT_GT(seen_after, 3.0);
  const auto m0 = Clock::now();
  EXPECT_EQ(http_get(port, "/metrics", 2s).status, 200) << "/metrics waited for the stalled loop";
  EXPECT_LT(Clock::now() - m0, 1s);

  EXPECT_TRUE(eventually(10s, [&] { return http_get(port, "/healthz", 2s).status == 200; })) << agent.log();
  EXPECT_TRUE(agent.wait_log("test hook: event loop running again", 1s)) << agent.log();
  EXPECT_EQ(agent.stop(), 0);
  std::filesystem::remove_all(dir);
}

// A client that connects and sends nothing, and one that sends a 1 MiB
// header, hold nothing: /metrics answers others at once, the idle one is cut
// at the server's 5 s deadline, the oversized one as soon as it passes 8 KiB.
TEST(AgentHttpHealth, IdleAndOversizedClientsDoNotHoldTheServer) {
  TestMemcg scope("scope");
  const std::string dir = temp_dir();
  AgentProcess agent(dir, config_for(scope, dir, "", "127.0.0.1:0"));
  ASSERT_TRUE(agent.wait_log("ready:", 30s)) << agent.log();
  const uint16_t port = http_port(agent, 5s);
  ASSERT_NE(port, 0) << agent.log();

  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(connect_loopback(port, 10s));
  for (int fd : idle) ASSERT_GE(fd, 0);
  const auto t0 = Clock::now();

  int big = connect_loopback(port, 10s);
  ASSERT_GE(big, 0);
  send_all(big, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(1 << 20, 'a') + "\r\n\r\n");
  HttpReply refused = read_reply(big);
  close(big);
  EXPECT_TRUE(refused.status == 431 || refused.status == 0) << refused.status;

  for (int i = 0; i < 3; ++i) {
    const auto s0 = Clock::now();
    HttpReply r = http_get(port, "/metrics", 3s);
    EXPECT_EQ(r.status, 200);
    EXPECT_LT(Clock::now() - s0, 1s) << "a scrape waited behind idle clients";
  }
  // Each idle connection is closed by the server near its 5 s read deadline.
  for (int fd : idle) {
    char c;
    const ssize_t n = recv(fd, &c, 1, 0);  // SO_RCVTIMEO 10 s: returns 0 when the server closes
    EXPECT_LE(n, 0);
    close(fd);
  }
  const double cut = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_GT(cut, 4.0);
  EXPECT_LT(cut, 8.0) << "idle clients were not cut at the 5 s deadline";
  EXPECT_EQ(http_get(port, "/healthz").status, 200);
  EXPECT_EQ(agent.stop(), 0);
  std::filesystem::remove_all(dir);
}

// A port another program listens on: exit 1, the message names the address.
TEST(AgentHttpCli, PortInUseExitsOneNamingTheAddress) {
  TestMemcg scope("scope");
  const std::string dir = temp_dir();
  int holder = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(holder, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(bind(holder, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(holder, 1), 0);
  ASSERT_EQ(getsockname(holder, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string address = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));

  AgentProcess agent(dir, config_for(scope, dir, "", address));
  int st = -1;
  ASSERT_TRUE(eventually(30s, [&] { return (st = agent.process().try_wait()) >= 0; })) << agent.log();
  close(holder);
  ASSERT_TRUE(WIFEXITED(st)) << agent.log();
  EXPECT_EQ(WEXITSTATUS(st), 1) << agent.log();
  const std::string log = agent.log();
  EXPECT_NE(log.find("cannot start: http: cannot listen on " + address), std::string::npos) << log;
  EXPECT_NE(log.find("Address already in use"), std::string::npos) << log;
  EXPECT_EQ(log.find("ready:"), std::string::npos) << log;

  // --http-listen overrides the file: the same config with a free port runs.
  AgentProcess ok(dir, config_for(scope, dir, "", address), {"--http-listen=127.0.0.1:0"});
  ASSERT_TRUE(ok.wait_log("ready:", 30s)) << ok.log();
  EXPECT_NE(http_port(ok, 1s), 0) << ok.log();
  EXPECT_EQ(ok.stop(), 0);
  std::filesystem::remove_all(dir);
}
