#include "agent/records/time_format.h"

#include <cstdio>
#include <ctime>

namespace oomsnap {

std::string rfc3339_ms(std::chrono::system_clock::time_point tp) {
  using namespace std::chrono;
  // floor (not duration_cast, which truncates toward zero) so times before
  // 1970 still get a millisecond part in 0..999 and the right second.
  const auto ms_total = floor<milliseconds>(tp.time_since_epoch());
  const auto secs = floor<seconds>(ms_total);
  const auto ms = (ms_total - secs).count();
  const std::time_t t = static_cast<std::time_t>(secs.count());
  std::tm tm{};
  // gmtime_r, not gmtime: the latter returns a shared static buffer and the
  // agent formats timestamps from several threads.
  if (gmtime_r(&t, &tm) == nullptr) {
    // Only for years outside int range; keep the record writable anyway.
    return "invalid-time(" + std::to_string(ms_total.count()) + "ms)";
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

}  // namespace oomsnap
