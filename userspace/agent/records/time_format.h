// Timestamps for incident records.
#pragma once
#include <chrono>
#include <string>

namespace oomsnap {

// RFC 3339 in UTC with exactly three fractional digits, e.g.
// "2026-11-29T14:21:51.123Z". Always UTC ("Z") so records from nodes in
// different time zones sort and compare as plain strings. Sub-millisecond
// parts are truncated toward the past (floor), never rounded up, so a
// timestamp never names a millisecond that had not yet begun.
std::string rfc3339_ms(std::chrono::system_clock::time_point tp);

}  // namespace oomsnap
