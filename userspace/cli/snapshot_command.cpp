#include "cli/snapshot_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "capture/capture.h"
#include "capture/capture_sandbox.h"
#include "core/log_escape.h"

namespace oomsnap {
namespace {

constexpr const char* kUsage =
    "usage: oomsnap snapshot --pid PID [--format json|pprof] [--profile heap|goroutine|block|mutex] [-o FILE]\n"
    "                        [--max-entries N] [--budget-ms MS] [--grace-ms MS] [--memory-max-mb N] [--in-process]\n"
    "                        [--recent-pprof FILE]\n"
    "  --profile (Go): which profile --format pprof writes: heap (default), goroutine, or the\n"
    "  block/mutex contention profile (then also snapshot.block / snapshot.mutex in JSON).\n"
    "  The capture runs in a sandboxed capture process, killed at budget + grace;\n"
    "  --in-process skips the sandbox (benchmarks and debugging only).\n"
    "  --recent-pprof FILE (Go): also write the allocations since the last GC\n"
    "  (snapshot.recent) as a profile.proto; the main output is unchanged.\n";

template <typename T>
bool parse_number(const std::string& s, T& out, T min, T max) {
  T v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < min || v > max) return false;
  out = v;
  return true;
}

bool write_all(const std::string& path, const std::string& data, std::string& why) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  f.flush();
  if (!f) why = "cannot write " + path;
  return static_cast<bool>(f);
}

// A regular file is written to FILE.tmp and renamed, so a failed write never
// leaves half a record. Anything else that exists (/dev/null, a pipe, a tty)
// is written in place: renaming over it would replace the device.
bool write_output(const std::string& path, const std::string& data, std::string& why) {
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return write_all(path, data, why);
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) {
      why = "cannot open " + tmp + " for writing";
      return false;
    }
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    f.flush();
    if (!f) {
      why = "cannot write " + tmp;
      std::remove(tmp.c_str());
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    why = "cannot rename " + tmp + " to " + path;
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace

int run_snapshot_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::optional<pid_t> pid;
  std::string format = "json", output, recent_output;
  CaptureOptions opts;
  SandboxOptions sandbox;
  bool in_process = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](std::string& v) {
      if (i + 1 >= args.size()) return false;
      v = args[++i];
      return true;
    };
    std::string v;
    if (a == "-h" || a == "--help") {
      out << kUsage;
      return 0;
    } else if (a == "--pid") {
      pid_t p = 0;
      if (!value(v) || !parse_number<pid_t>(v, p, 1, 1 << 30)) {
        err << "oomsnap snapshot: --pid needs a positive process id, got '" << v << "'\n" << kUsage;
        return 2;
      }
      pid = p;
    } else if (a == "--format") {
      if (!value(v) || (v != "json" && v != "pprof")) {
        err << "oomsnap snapshot: --format must be json or pprof, got '" << v << "'\n" << kUsage;
        return 2;
      }
      format = v;
    } else if (a == "--profile") {
      auto kind = value(v) ? profile_kind_from_name(v) : std::nullopt;
      if (!kind) {
        std::string names;
        for (const auto& [k, name] : kProfileKinds) names += (names.empty() ? "" : "|") + std::string(name);
        err << "oomsnap snapshot: --profile must be one of " << names << ", got '" << v << "'\n" << kUsage;
        return 2;
      }
      opts.profile = *kind;
    } else if (a == "-o" || a == "--output") {
      if (!value(output) || output.empty()) {
        err << "oomsnap snapshot: " << a << " needs a file name\n" << kUsage;
        return 2;
      }
    } else if (a == "--max-entries") {
      size_t n = 0;
      if (!value(v) || !parse_number<size_t>(v, n, 1, 1'000'000)) {
        err << "oomsnap snapshot: --max-entries needs a number from 1 to 1000000, got '" << v << "'\n";
        return 2;
      }
      opts.max_entries = n;
    } else if (a == "--budget-ms") {
      long ms = 0;
      if (!value(v) || !parse_number<long>(v, ms, 1, 600'000)) {
        err << "oomsnap snapshot: --budget-ms needs a number from 1 to 600000, got '" << v << "'\n";
        return 2;
      }
      opts.budget = std::chrono::milliseconds(ms);
    } else if (a == "--grace-ms") {
      long ms = 0;
      if (!value(v) || !parse_number<long>(v, ms, 100, 600'000)) {
        err << "oomsnap snapshot: --grace-ms needs a number from 100 to 600000, got '" << v << "'\n";
        return 2;
      }
      sandbox.grace = std::chrono::milliseconds(ms);
    } else if (a == "--memory-max-mb") {
      uint64_t mb = 0;
      if (!value(v) || !parse_number<uint64_t>(v, mb, 64, 1 << 20)) {
        err << "oomsnap snapshot: --memory-max-mb needs a number from 64 to 1048576, got '" << v << "'\n";
        return 2;
      }
      sandbox.memory_bytes = mb << 20;
    } else if (a == "--recent-pprof") {
      if (!value(recent_output) || recent_output.empty() || recent_output == "-") {
        err << "oomsnap snapshot: --recent-pprof needs a file name\n" << kUsage;
        return 2;
      }
    } else if (a == "--in-process") {
      in_process = true;
    } else {
      err << "oomsnap snapshot: unknown argument '" << a << "'\n" << kUsage;
      return 2;
    }
  }
  if (!pid) {
    err << "oomsnap snapshot: --pid is required\n" << kUsage;
    return 2;
  }
  opts.want_pprof = format == "pprof";
  opts.want_recent_pprof = !recent_output.empty();

  std::string error;
  std::optional<CaptureRecord> rec;
  if (in_process) {
    rec = capture_process(*pid, opts, error);
  } else {
    sandbox.max_budget = opts.budget;
    CaptureSandbox box(sandbox);
    rec = box.capture(*pid, opts, error);
  }
  if (!rec) {
    err << "oomsnap snapshot: " << printable(error) << "\n";
    return 1;
  }
  std::string data;
  if (format == "pprof") {
    if (!rec->result.pprof) {
      const Snapshot& s = rec->result.snapshot;
      // The status of the profile asked for: the heap's, the census's, or block/mutex's.
      SnapshotStatus status = s.status;
      std::string reason = s.reason;
      auto take = [&](const auto& part) {
        if (part) {
          status = part->status;
          reason = part->reason;
        }
      };
      if (opts.profile == ProfileKind::kGoroutine) take(s.goroutines);
      if (opts.profile == ProfileKind::kBlock) take(s.block);
      if (opts.profile == ProfileKind::kMutex) take(s.mutex);
      err << "oomsnap snapshot: no " << profile_kind_name(opts.profile) << " pprof profile for pid " << *pid
          << " (language " << rec->result.language << ", status " << to_string(status)
          << (reason.empty() ? "" : ": " + printable(reason)) << ")\n";
      return 1;
    }
    data = std::move(*rec->result.pprof);
  } else {
    // A comm or name from the target need not be UTF-8: replace, never abort.
    data = to_json(*rec).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
  std::string why;
  if (output.empty() || output == "-") {
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    out.flush();
    if (!out) return 1;
  } else if (!write_output(output, data, why)) {
    err << "oomsnap snapshot: " << why << "\n";
    return 1;
  }
  if (recent_output.empty()) return 0;
  // The main output is written either way: the recent profile is an extra.
  if (!rec->result.recent_pprof) {
    const Snapshot& s = rec->result.snapshot;
    err << "oomsnap snapshot: no recent-allocations profile for pid " << *pid << " (language "
        << rec->result.language << ", status " << to_string(s.status)
        << (s.reason.empty() ? "" : ": " + printable(s.reason)) << ")\n";
    return 1;
  }
  if (!write_output(recent_output, *rec->result.recent_pprof, why)) {
    err << "oomsnap snapshot: " << why << "\n";
    return 1;
  }
  return 0;
}

}  // namespace oomsnap
