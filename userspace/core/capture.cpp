#include "core/capture.h"

#include <nlohmann/json.hpp>

#include "go/go_collector.h"
#include "java/java_collector.h"
#include "python/python_collector.h"

namespace oomsnap {

std::vector<std::unique_ptr<Collector>> make_collectors() {
  std::vector<std::unique_ptr<Collector>> v;
  v.push_back(std::make_unique<GoCollector>());
  v.push_back(std::make_unique<PythonCollector>());
  v.push_back(std::make_unique<JavaCollector>());
  return v;
}

std::optional<CaptureRecord> capture_process(pid_t pid, const CaptureOptions& options, std::string& error) {
  auto target = Target::open(pid, error);
  if (!target) return std::nullopt;
  CaptureRecord rec;
  rec.identity = target->identity();
  rec.process_memory = read_process_memory(pid);
  for (auto& c : make_collectors()) {
    if (c->detect(*target)) {
      rec.result = c->collect(*target, options);
      return rec;
    }
  }
  rec.result.language = "unknown";
  rec.result.snapshot.set_status(SnapshotStatus::kUnavailable,
                                 "no collector recognises this process's runtime (supported: Go, CPython, HotSpot Java)");
  return rec;
}

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
