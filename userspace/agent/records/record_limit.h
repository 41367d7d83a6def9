// One record stays under a size limit whatever the target made it hold
// (names, stacks, entries, paths): the log pipelines that ingest records cap
// lines too (often at 256 KiB–1 MiB) and would drop or split a larger one.
#pragma once
#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace oomsnap {

inline constexpr size_t kMaxRecordBytes = 1 << 20;

// JSON text of printable ASCII only: every character outside 0x20-0x7e is a
// \u escape (controls, DEL, C1 controls such as U+009B, bidi overrides such
// as U+202E, U+2028/2029, and all other non-ASCII text), and invalid UTF-8 is
// replaced by U+FFFD. Names from a target cannot drive a terminal, a
// `kubectl logs` or a log UI that shows the line as it is.
std::string dump_printable_json(const nlohmann::json& j);

// `record` serialised (compact, printable ASCII: dump_printable_json) in at most
// `max_bytes` bytes without its '\n'. Over the limit, the snapshot's entries
// are cut from the least important end first, then stacks and long strings
// and arrays anywhere; the record then says "output_truncated": true with
// what was cut and its original size in "output_truncated_reason".
std::string serialise_record(const nlohmann::json& record, size_t max_bytes = kMaxRecordBytes);

}  // namespace oomsnap
