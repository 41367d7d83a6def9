// The one walker of the runtime's profile bucket lists (mbuckets for the heap,
// bbuckets/xbuckets for block and mutex contention): it follows allnext from a
// list head out of a live process with batched window reads (buckets come from
// 256 KiB persistentalloc chunks, so one process_vm_readv serves many
// neighbours), bounded by a bucket cap, a stack depth cap and a read byte cap,
// with a cooperative deadline and Brent cycle detection. What a bucket holds
// after its PCs (memRecord or blockRecord) is the caller's to decode.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/collector.h"

namespace oomsnap {

inline constexpr size_t kGoBucketHeaderSize = 48;  // next, allnext, typ, hash, size, nstk

struct GoBucketWalkLimits {
  size_t max_buckets = 0;
  size_t max_depth = 0;          // a larger nstk means the target changed or is corrupt
  uint64_t max_read_bytes = 0;
  size_t record_bytes = 0;       // bytes after the PCs (memRecord / blockRecord)
};

struct GoBucketWalkEnd {
  SnapshotStatus status = SnapshotStatus::kComplete;
  std::string reason;  // " after N buckets" is appended by the walker
  size_t visited = 0;  // buckets handed to visit (before any trimming)
};

// visit(addr, bytes): the whole bucket (header, PCs, record) at addr; returns
// its allnext, or nullopt with why set to stop the walk as broken.
using GoBucketVisitor =
    std::function<std::optional<uint64_t>(uint64_t addr, std::span<const uint8_t> bytes, std::string& why)>;
// On a cycle, the caller drops the laps walked twice (it knows the addresses
// it kept) and returns how many buckets remain; the count goes in the reason.
using GoBucketCycleTrim = std::function<size_t()>;

GoBucketWalkEnd walk_go_buckets(RemoteMemory& mem, const std::vector<Mapping>& maps, uint64_t head,
                                const GoBucketWalkLimits& limits, const Deadline& deadline,
                                const GoBucketVisitor& visit, const GoBucketCycleTrim& trim);

// Index of the first address seen twice (the start of the repeated lap), or n.
size_t first_repeated_bucket(size_t n, const std::function<uint64_t(size_t)>& addr_at);

}  // namespace oomsnap
