// One record stays under a size limit whatever the target made it hold
// (names, stacks, entries, paths): the log pipelines that ingest records cap
// lines too (often at 256 KiB–1 MiB) and would drop or split a larger one.
#pragma once
#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace oomsnap {

inline constexpr size_t kMaxRecordBytes = 1 << 20;

// `record` serialised (compact, invalid UTF-8 replaced) in at most
// `max_bytes` bytes without its '\n'. Over the limit, the snapshot's entries
// are cut from the least important end first, then stacks and long strings
// and arrays anywhere; the record then says "output_truncated": true with
// what was cut and its original size in "output_truncated_reason".
std::string serialise_record(const nlohmann::json& record, size_t max_bytes = kMaxRecordBytes);

}  // namespace oomsnap
