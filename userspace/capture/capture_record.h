// One capture's result: who was captured, its /proc memory summary, and what
// the collector found; the `oomsnap snapshot` JSON object.
#pragma once
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/collector.h"

namespace oomsnap {

struct CaptureRecord {
  ProcessIdentity identity;
  ProcessMemory process_memory;
  CaptureResult result;
  // Set when the capture process itself failed (killed at its deadline,
  // died, over its memory cap, wrote garbage): the snapshot then says failed
  // with this reason. Empty for anything a collector reported.
  std::string process_failure;
};

// The one-shot JSON object: pid, start_time_ticks, comm, process_memory, language, snapshot.
nlohmann::json to_json(const CaptureRecord& record);

}  // namespace oomsnap
