#include "cli/watch_command.h"

#include <signal.h>
#include <sys/resource.h>

#include <boost/asio/io_context.hpp>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "agent/agent.h"
#include "agent/ops/listen_address.h"
#include "cli/command_line.h"
#include "base/log_escape.h"

namespace oomsnap {
namespace {

// The message of a log line (%*), kept to one line whatever reaches it: a
// control character (target text a call site did not escape) is written as
// \xNN. Call sites escape comm, cgroup and path text themselves
// (base/log_escape.h: backslashes too), and that output holds no control
// character, so nothing is escaped twice.
class OneLineMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    const std::string line = one_line(std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<OneLineMessage>(); }
};

constexpr const char* kUsage =
    "usage: oomsnap watch [--config FILE] [--bpf-mode auto|raw_tp|tracepoint] [--log-level "
    "debug|info|warn|error]\n"
    "                     [--http-listen HOST:PORT]\n"
    "  Records go to stdout and/or the LocalFile sink as JSON lines; logs go to stderr.\n"
    "  SIGHUP reloads the configuration, SIGTERM/SIGINT stop cleanly.\n"
    "  --http-listen HOST:PORT serves /metrics, /healthz, /readyz there instead of [http] Listen\n"
    "    (\"\" for none).\n"
    "  Every capture runs in a sandboxed capture process (oomsnap snapshot --in-process is\n"
    "  the debugging switch without it, for one process by hand).\n";

// Every fd is a notification (one or two per watched cgroup): use the hard limit.
void raise_fd_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

}  // namespace

int run_watch_command(const std::vector<std::string>& args, const TestHooks& hooks, std::ostream& out,
                      std::ostream& err) {
  // The switch watch had until issue #28: named, so that a unit or script
  // still passing it learns why the agent will not start.
  for (const std::string& a : args)
    if (a == "--capture-in-process" || a.rfind("--capture-in-process=", 0) == 0) {
      err << "oomsnap watch: --capture-in-process is not an option of the agent: its captures always run in "
             "the sandboxed capture process (oomsnap snapshot --in-process captures one process without it, "
             "for debugging)\n"
          << kUsage;
      return 2;
    }
  AgentOptions options;
  std::string level = "info", http_listen;
  CLI::App app("", "oomsnap watch");
  app.add_option("--config", options.config_path)->check(file_name(false));
  // --http-listen=$(POD_IP):9463 is how the DaemonSet passes it; "" serves nothing.
  auto* listen_opt = app.add_option("--http-listen", http_listen)->check(CLI::Validator(
      [](const std::string& v) {
        std::string why;
        return v.empty() || parse_listen_address(v, why) ? std::string() : "'" + v + "': " + why;
      },
      "HOST:PORT"));
  std::string bpf_mode = to_string(options.bpf_mode);
  std::vector<std::string> mode_names;
  for (BpfAttachMode m : {BpfAttachMode::Auto, BpfAttachMode::RawTracepoint, BpfAttachMode::Tracepoint})
    mode_names.emplace_back(to_string(m));
  app.add_option("--bpf-mode", bpf_mode)->check(CLI::IsMember(mode_names));
  app.add_option("--log-level", level)->check(CLI::IsMember({"trace", "debug", "info", "warn", "warning", "error",
                                                              "err", "critical", "off"}));
  if (auto rc = parse_command_line(app, args, kUsage, out, err)) return *rc;
  if (listen_opt->count()) options.http_listen = http_listen;
  for (BpfAttachMode m : {BpfAttachMode::Auto, BpfAttachMode::RawTracepoint, BpfAttachMode::Tracepoint})
    if (bpf_mode == to_string(m)) options.bpf_mode = m;
  options.test = hooks.agent;  // all off in the shipped binary (cli/test_hooks.h)
  try {
    options.config = load_config(options.config_path);
  } catch (const ConfigError& e) {
    err << "oomsnap watch: " << e.what() << "\n";
    return 2;
  }

  auto log = std::make_shared<spdlog::logger>("oomsnap", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<OneLineMessage>('*').set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ oomsnap: %*");
  log->set_formatter(std::move(formatter));
  log->set_level(spdlog::level::from_str(level));
  log->flush_on(spdlog::level::trace);  // log lines are events for whoever tails them

  // A closed stdout pipe must be a write error on the record, not a signal
  // that kills the agent.
  signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();

  boost::asio::io_context io;
  if (hooks.built_in)
    log->warn("this is oomsnap-test-hooks, which reads test hooks from its environment: never deploy it");
  Agent agent(io, options, log);
  std::string error;
  if (!agent.start(error)) {
    log->error("cannot start: {}", error);
    return 1;
  }
  io.run();
  return 0;
}

}  // namespace oomsnap
