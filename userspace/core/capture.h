// The one capture path shared by `oomsnap snapshot --pid` and the agent:
// identify the process, summarise its memory, pick the collector for its
// runtime, capture, and re-check identity.
#pragma once
#include <sys/types.h>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/collector.h"

namespace oomsnap {

struct CaptureRecord {
  ProcessIdentity identity;
  ProcessMemory process_memory;
  CaptureResult result;
};

// Every collector, in detection order.
std::vector<std::unique_ptr<Collector>> make_collectors();

// nullopt (and error) only when the process does not exist or cannot be read
// at all; every other trouble is a status + reason inside the record.
std::optional<CaptureRecord> capture_process(pid_t pid, const CaptureOptions& options, std::string& error);

// The one-shot JSON object: pid, start_time_ticks, comm, process_memory, language, snapshot.
nlohmann::json to_json(const CaptureRecord& record);

}  // namespace oomsnap
