#include "agent/config.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <string_view>

#include <toml++/toml.h>

#include "agent/config_file.h"
#include "agent/incident/policy.h"
#include "agent/ops/listen_address.h"

namespace oomsnap {

namespace {

// "'storage.MaxBytes' (line 7)": where to look in the file.
std::string where(const std::string& key, const toml::source_region& src) {
  std::string s = "'" + key + "'";
  if (src.begin.line > 0) s += " (line " + std::to_string(src.begin.line) + ")";
  return s;
}

[[noreturn]] void fail(const std::string& key, const toml::node& n, const std::string& why) {
  throw ConfigError("config: key " + where(key, n.source()) + ": " + why);
}

std::string type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::date: return "date";
    case toml::node_type::time: return "time";
    case toml::node_type::date_time: return "date-time";
    default: return "none";
  }
}

int64_t get_int(const std::string& key, const toml::node& n, int64_t lo, int64_t hi) {
  if (!n.is_integer()) fail(key, n, "expected integer, got " + type_name(n));
  int64_t v = n.as_integer()->get();
  if (v < lo || v > hi)
    fail(key, n, "value " + std::to_string(v) + " out of range " + std::to_string(lo) + ".." +
                     std::to_string(hi));
  return v;
}

std::string get_string(const std::string& key, const toml::node& n) {
  if (!n.is_string()) fail(key, n, "expected string, got " + type_name(n));
  return n.as_string()->get();
}

bool get_bool(const std::string& key, const toml::node& n) {
  if (!n.is_boolean()) fail(key, n, "expected boolean, got " + type_name(n));
  return n.as_boolean()->get();
}

const toml::table& get_table(const std::string& key, const toml::node& n) {
  if (!n.is_table()) fail(key, n, "expected table, got " + type_name(n));
  return *n.as_table();
}

// Seconds as integer or float, converted to whole milliseconds (> 0, or >= 0 with allow_zero).
std::chrono::milliseconds get_seconds_ms(const std::string& key, const toml::node& n, bool allow_zero = false) {
  double s = 0;
  if (n.is_integer()) s = static_cast<double>(n.as_integer()->get());
  else if (n.is_floating_point()) s = n.as_floating_point()->get();
  else fail(key, n, "expected seconds (integer or float), got " + type_name(n));
  // Upper bound keeps the conversion to an integer well defined (~31 years).
  if (!std::isfinite(s) || s > 1e9) fail(key, n, "value out of range");
  auto ms = static_cast<int64_t>(std::llround(s * 1000.0));
  if (allow_zero ? ms < 0 : ms <= 0)
    fail(key, n, std::string("must be ") + (allow_zero ? ">= 0" : "> 0") + " ms, got " + std::to_string(s) + " s");
  return std::chrono::milliseconds(ms);
}

void parse_storage(const toml::table& t, AgentConfig& cfg) {
  for (auto&& [k, v] : t) {
    const std::string key = "storage." + std::string(k.str());
    if (k == "Path") {
      cfg.storage_path = get_string(key, v);
      if (cfg.storage_path.empty()) fail(key, v, "must not be empty");
    } else if (k == "MaxBytes") {
      cfg.storage_max_bytes = static_cast<uint64_t>(get_int(key, v, 1, INT64_MAX));
    } else if (k == "MaxFiles") {
      cfg.storage_max_files = static_cast<int>(get_int(key, v, 1, INT_MAX));
    } else if (k == "Stdout") {
      cfg.stdout_sink = get_bool(key, v);
    } else if (k == "LocalFile") {
      cfg.file_sink = get_bool(key, v);
    } else {
      throw ConfigError("config: unknown key " + where(key, k.source()));
    }
  }
}

void parse_triggers(const toml::table& t, AgentConfig& cfg) {
  for (auto&& [k, v] : t) {
    const std::string key = "triggers." + std::string(k.str());
    if (k == "InKernelThreshold") {
      cfg.in_kernel_threshold = get_bool(key, v);
      continue;
    }
    if (k != "Blacklist") throw ConfigError("config: unknown key " + where(key, k.source()));
    if (!v.is_array()) fail(key, v, "expected array of strings, got " + type_name(v));
    std::vector<std::string> names;
    for (const auto& item : *v.as_array()) {
      std::string name = get_string(key, item);
      const auto& known = known_triggers();
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        std::string list;
        for (const auto& kn : known) list += (list.empty() ? "" : ", ") + kn;
        fail(key, item, "unknown trigger '" + name + "' (known: " + list + ")");
      }
      names.push_back(std::move(name));
    }
    cfg.trigger_blacklist = std::move(names);
  }
}

void parse_capture(const toml::table& t, AgentConfig& cfg) {
  for (auto&& [k, v] : t) {
    const std::string key = "capture." + std::string(k.str());
    if (k == "Grace") {
      cfg.capture_grace = get_seconds_ms(key, v);
      if (cfg.capture_grace.count() < 100 || cfg.capture_grace.count() > 600'000)
        fail(key, v, "must be from 0.1 to 600 seconds");
    } else if (k == "MemoryMax") {
      cfg.capture_memory_max = static_cast<uint64_t>(get_int(key, v, 64ll << 20, INT64_MAX));
    } else if (k == "ResultMaxBytes") {
      cfg.capture_result_max = static_cast<uint64_t>(get_int(key, v, 64ll << 10, 64ll << 20));
    } else if (k == "LastGasp") {
      cfg.last_gasp = get_bool(key, v);
    } else {
      throw ConfigError("config: unknown key " + where(key, k.source()));
    }
  }
}

void parse_cgroup(const toml::table& t, AgentConfig& cfg) {
  for (auto&& [k, v] : t) {
    const std::string key = "cgroup." + std::string(k.str());
    if (k == "Root") {
      cfg.cgroup_root = get_string(key, v);
    } else if (k == "Scope") {
      cfg.cgroup_scope = get_string(key, v);
      if (cfg.cgroup_scope.empty() || cfg.cgroup_scope[0] != '/' ||
          cfg.cgroup_scope.find("..") != std::string::npos)
        fail(key, v, "must be an absolute path within the cgroup hierarchy, e.g. \"/kubepods\"");
    } else {
      throw ConfigError("config: unknown key " + where(key, k.source()));
    }
  }
}

void parse_kubernetes(const toml::table& t, AgentConfig& cfg) {
  for (auto&& [k, v] : t) {
    const std::string key = "kubernetes." + std::string(k.str());
    if (k == "PodLogRoot") {
      cfg.pod_log_root = get_string(key, v);
      // Everything below it is opened relative to it; the root itself must
      // not depend on the agent's working directory or climb out with "..".
      if (!cfg.pod_log_root.empty() &&
          (cfg.pod_log_root[0] != '/' || cfg.pod_log_root.find('\0') != std::string::npos ||
           ("/" + cfg.pod_log_root + "/").find("/../") != std::string::npos))
        fail(key, v, "must be an absolute path without \"..\" (the directory holding kubelet's pods/ and "
                     "containers/, e.g. \"/var/log\"), or \"\" to look up no pod names");
    } else {
      throw ConfigError("config: unknown key " + where(key, k.source()));
    }
  }
}

void parse_http(const toml::table& t, AgentConfig& cfg) {
  for (auto&& [k, v] : t) {
    const std::string key = "http." + std::string(k.str());
    if (k == "Listen") {
      cfg.http_listen = get_string(key, v);
      std::string why;
      if (!cfg.http_listen.empty() && !parse_listen_address(cfg.http_listen, why))
        fail(key, v, why + "; or \"\" for no HTTP endpoint");
    } else {
      throw ConfigError("config: unknown key " + where(key, k.source()));
    }
  }
}

}  // namespace

AgentConfig parse_config(const std::string& toml_text) {
  toml::table root;
  try {
    root = toml::parse(toml_text);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    throw ConfigError("config: TOML syntax error at line " + std::to_string(b.line) + ", column " +
                      std::to_string(b.column) + ": " + std::string(e.description()));
  }
  AgentConfig cfg;
  for (auto&& [k, v] : root) {
    const std::string key(k.str());
    if (key == "ThresholdPercent") {
      cfg.threshold_percent = static_cast<int>(get_int(key, v, 1, 100));
    } else if (key == "ForecastFloorPercent") {
      cfg.forecast_floor_percent = static_cast<int>(get_int(key, v, 1, 100));
    } else if (key == "ForecastMargin") {
      cfg.forecast_margin = get_seconds_ms(key, v, /*allow_zero=*/true);
    } else if (key == "IntervalTracing") {
      cfg.interval_tracing = std::chrono::seconds(get_int(key, v, 0, INT64_MAX / 1000));
    } else if (key == "NodeMaxCapturesPerMinute") {
      cfg.node_max_captures_per_minute = static_cast<unsigned>(get_int(key, v, 1, 10000));
    } else if (key == "MaxProcessesPerIncident") {
      cfg.max_processes_per_incident = static_cast<unsigned>(get_int(key, v, 1, 16));
    } else if (key == "RunTracingToolTimeout") {
      cfg.run_tracing_tool_timeout = get_seconds_ms(key, v);
    } else if (key == "MaxMemoryObjectEntries") {
      cfg.max_memory_object_entries = static_cast<size_t>(get_int(key, v, 1, 100000));
    } else if (key == "BatchWindow") {
      cfg.batch_window = get_seconds_ms(key, v);
    } else if (key == "OomKillWindow") {
      cfg.oom_kill_window = get_seconds_ms(key, v);
    } else if (key == "RescanInterval") {
      cfg.rescan_interval = get_seconds_ms(key, v);
    } else if (key == "MaxExitRecordsPerMinute") {
      cfg.max_exit_records_per_minute = static_cast<uint64_t>(get_int(key, v, 1, 100000));
    } else if (key == "MaxOomKillRecordsPerMinute") {
      cfg.max_oom_kill_records_per_minute = static_cast<uint64_t>(get_int(key, v, 1, 100000));
    } else if (key == "storage") {
      parse_storage(get_table(key, v), cfg);
    } else if (key == "triggers") {
      parse_triggers(get_table(key, v), cfg);
    } else if (key == "cgroup") {
      parse_cgroup(get_table(key, v), cfg);
    } else if (key == "capture") {
      parse_capture(get_table(key, v), cfg);
    } else if (key == "kubernetes") {
      parse_kubernetes(get_table(key, v), cfg);
    } else if (key == "http") {
      parse_http(get_table(key, v), cfg);
    } else {
      throw ConfigError("config: unknown key " + where(key, k.source()));
    }
  }
  return cfg;
}

AgentConfig load_config(const std::string& path) {
  if (path.empty()) return AgentConfig{};
  const std::string text = read_config_file(path);  // refuses one another user could have written
  try {
    return parse_config(text);
  } catch (const ConfigError& e) {
    throw ConfigError(path + ": " + e.what());
  }
}

}  // namespace oomsnap
