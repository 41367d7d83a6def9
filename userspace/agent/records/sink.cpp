#include "agent/records/sink.h"

#include "agent/records/record_limit.h"

namespace oomsnap {

using Clock = SinkDeadline::Clock;

void SinkDeadline::bring_forward(Clock::time_point t) {
  const Clock::rep want = t.time_since_epoch().count();
  Clock::rep cur = rep_.load(std::memory_order_acquire);
  while (want < cur && !rep_.compare_exchange_weak(cur, want, std::memory_order_acq_rel)) {
  }
}

bool RecordSink::write_line(const std::string& json_line, std::string& error) {
  SinkDeadline none;
  WriteResult r = write_record(json_line, none);
  if (r.status == WriteStatus::written) return true;
  error = r.error.empty() ? name() + ": write failed" : r.error;
  return false;
}

std::string record_line(const nlohmann::json& record) {
  // Invalid UTF-8 becomes U+FFFD instead of dump() throwing type_error 316
  // and losing the whole record over one bad comm/path byte; the line is
  // bounded (agent/records/record_limit.h).
  return serialise_record(record) + '\n';
}

void SinkSet::add(std::unique_ptr<RecordSink> sink) {
  if (sink) sinks_.push_back(std::move(sink));
}

bool SinkSet::write(const nlohmann::json& record, std::vector<std::string>& errors) {
  if (sinks_.empty()) {
    errors.push_back("no record sinks configured; record dropped");
    return false;
  }
  const std::string line = record_line(record);  // serialised once for all sinks
  bool ok = true;
  for (const auto& sink : sinks_) {
    std::string error;
    if (!sink->write_line(line, error)) {
      ok = false;
      errors.push_back(error);
    }
  }
  return ok;
}

}  // namespace oomsnap
