#include "core/snapshot.h"

#include <algorithm>

namespace oomsnap {

const char* to_string(SnapshotStatus s) {
  switch (s) {
    case SnapshotStatus::kComplete: return "complete";
    case SnapshotStatus::kPartial: return "partial";
    case SnapshotStatus::kUnavailable: return "unavailable";
    case SnapshotStatus::kFailed: return "failed";
  }
  return "failed";
}

std::optional<SnapshotStatus> snapshot_status_from_string(std::string_view s) {
  for (auto st : {SnapshotStatus::kComplete, SnapshotStatus::kPartial, SnapshotStatus::kUnavailable,
                  SnapshotStatus::kFailed})
    if (s == to_string(st)) return st;
  return std::nullopt;
}

bool Snapshot::sort_and_truncate(std::vector<SnapshotEntry>& entries, size_t max_entries) {
  std::sort(entries.begin(), entries.end(), [](const SnapshotEntry& a, const SnapshotEntry& b) {
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    if (a.objects != b.objects) return a.objects > b.objects;
    return a.name < b.name;
  });
  if (entries.size() <= max_entries) return false;
  entries.resize(max_entries);
  return true;
}

void Snapshot::sort_and_truncate(size_t max_entries) {
  if (sort_and_truncate(entries, max_entries)) output_truncated = true;
}

}  // namespace oomsnap
