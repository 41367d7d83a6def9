#include "capture/capture_record.h"

#include <nlohmann/json.hpp>

namespace oomsnap {

nlohmann::json to_json(const CaptureRecord& r) {
  nlohmann::json j;
  j["pid"] = r.identity.pid;
  j["start_time_ticks"] = r.identity.start_time_ticks;
  j["comm"] = r.identity.comm;
  j["process_memory"] = to_json(r.process_memory);
  j["language"] = r.result.language;
  j["snapshot"] = to_json(r.result.snapshot);
  return j;
}

}  // namespace oomsnap
