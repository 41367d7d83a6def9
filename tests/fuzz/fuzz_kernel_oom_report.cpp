// The kernel's OOM reports as the agent reads them: kmsg records (one per
// input line) and syslog(2) text. The kernel writes them, but the names and
// cgroup paths in them are a tenant's; and a reader must not trust any line's
// shape. Any input gives reports or none, never a crash, a leak or an
// allocation beyond the parser's bounds; a finished report's figures turn
// into the record's JSON and memory.stat without fault.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "agent/cgroup/kernel_oom_report.h"
#include "agent/events/kernel_log.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  oomsnap::KernelOomReports kmsg;
  for (std::string_view rest = in; !rest.empty();) {
    const size_t nl = rest.find('\n');
    kmsg.feed(rest.substr(0, nl));
    rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
  }
  oomsnap::KernelOomReports syslog;
  uint64_t after_us = 0, after_count = 0;
  oomsnap::feed_syslog_lines(in, syslog, after_us, after_count);
  oomsnap::feed_syslog_lines(in, syslog, after_us, after_count);  // a second pass feeds nothing new
  for (const oomsnap::KernelOomReports* r : {&kmsg, &syslog})
    for (pid_t pid : {1, 7, 21308})
      if (const oomsnap::KernelOomReport* rep = r->find(pid, 0, ~uint64_t{0})) {
        if (rep->tasks.size() > oomsnap::KernelOomReports::kMaxTasks) __builtin_trap();
        // As the record writer dumps it (record_limit.cpp): invalid UTF-8 (a
        // comm in syslog(2) text is raw bytes) is replaced, not thrown.
        (void)oomsnap::to_json(*rep, 4096).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
      }
  if (kmsg.finished() > oomsnap::KernelOomReports::kMaxReports) __builtin_trap();
  return 0;
}
