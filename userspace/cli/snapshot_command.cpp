#include "cli/snapshot_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "agent/records/record_limit.h"
#include "capture/capture.h"
#include "capture/capture_sandbox.h"
#include "cli/command_line.h"
#include "base/log_escape.h"

namespace oomsnap {
namespace {

constexpr const char* kUsage =
    "usage: oomsnap snapshot --pid PID [--format json|pprof] [--profile heap|goroutine|block|mutex] [-o FILE]\n"
    "                        [--max-entries N] [--budget-ms MS] [--grace-ms MS] [--memory-max-mb N] [--in-process]\n"
    "                        [--recent-pprof FILE]\n"
    "  --profile (Go): which profile --format pprof writes: heap (default), goroutine, or the\n"
    "  block/mutex contention profile (then also snapshot.block / snapshot.mutex in JSON).\n"
    "  The capture runs in a sandboxed capture process, killed at budget + grace;\n"
    "  --in-process (also --capture-in-process) skips the sandbox: a person's debugging\n"
    "  choice for one process, never the agent's (watch has no such switch).\n"
    "  --recent-pprof FILE (Go): also write the allocations since the last GC\n"
    "  (snapshot.recent) as a profile.proto; the main output is unchanged.\n";

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
  pid_t pid = 0;
  std::string format = "json", profile = "heap", output, recent_output;
  CaptureOptions opts;
  SandboxOptions sandbox;
  // A person's one-shot, outside the agent's memory cgroup: room for a large
  // pprof profile (the capture process still cuts names and stacks).
  sandbox.result_max_bytes = 64ull << 20;
  bool in_process = false;
  long budget_ms = opts.budget.count(), grace_ms = sandbox.grace.count();
  uint64_t memory_mb = sandbox.memory_bytes >> 20;
  std::vector<std::string> profiles;
  for (const auto& [k, name] : kProfileKinds) profiles.emplace_back(name);

  CLI::App app("", "oomsnap snapshot");
  app.add_option("--pid", pid)->required()->check(CLI::Range(1, 1 << 30));
  app.add_option("--format", format)->check(CLI::IsMember({"json", "pprof"}));
  app.add_option("--profile", profile)->check(CLI::IsMember(profiles));
  app.add_option("-o,--output", output)->check(file_name(true));
  app.add_option("--max-entries", opts.max_entries)->check(CLI::Range(size_t{1}, size_t{1'000'000}));
  app.add_option("--budget-ms", budget_ms)->check(CLI::Range(1L, 600'000L));
  app.add_option("--grace-ms", grace_ms)->check(CLI::Range(100L, 600'000L));
  app.add_option("--memory-max-mb", memory_mb)->check(CLI::Range(uint64_t{64}, uint64_t{1} << 20));
  app.add_option("--recent-pprof", recent_output)->check(file_name(false));
  app.add_flag("--in-process,--capture-in-process", in_process);
  if (auto rc = parse_command_line(app, args, kUsage, out, err)) return *rc;
  opts.profile = *profile_kind_from_name(profile);
  opts.budget = std::chrono::milliseconds(budget_ms);
  sandbox.grace = std::chrono::milliseconds(grace_ms);
  sandbox.memory_bytes = memory_mb << 20;
  opts.want_pprof = format == "pprof";
  opts.want_recent_pprof = !recent_output.empty();

  std::string error;
  std::optional<CaptureRecord> rec;
  if (in_process) {
    rec = capture_process(pid, opts, error);
  } else {
    sandbox.max_budget = opts.budget;
    CaptureSandbox box(sandbox);
    rec = box.capture(pid, opts, error);
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
      err << "oomsnap snapshot: no " << profile_kind_name(opts.profile) << " pprof profile for pid " << pid
          << " (language " << rec->result.language << ", status " << to_string(status)
          << (reason.empty() ? "" : ": " + printable(reason)) << ")\n";
      return 1;
    }
    data = std::move(*rec->result.pprof);
  } else {
    // A comm or name from the target need not be UTF-8 or printable: printable
    // ASCII with escapes, invalid UTF-8 replaced, never an abort.
    data = dump_printable_json(to_json(*rec)) + "\n";
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
    err << "oomsnap snapshot: no recent-allocations profile for pid " << pid << " (language "
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
