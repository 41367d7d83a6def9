// A gzip-compressed profile.proto shaped like Go's own heap profile
// (runtime/pprof writeHeapProto): four sample types, period = MemProfileRate,
// every bucket, inlined frames expanded, runtime allocator frames hidden.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "go/go_heap_profile.h"

namespace oomsnap {
class GoPclntab;

struct GoMapping {
  uint64_t start = 0, limit = 0, offset = 0;  // runtime addresses
  std::string file;
  std::string build_id;
};

struct GoPprofInput {
  const GoHeapProfile* profile = nullptr;
  const GoPclntab* pclntab = nullptr;
  uint64_t load_bias = 0;            // runtime PC − load_bias = link-time PC
  std::vector<GoMapping> mappings;   // the main executable first
  int64_t time_nanos = 0;
  // Count profiles (encode_go_count_pprof): (runtime PCs leaf first, count)
  // per sample and the profile's name ("goroutine").
  const std::vector<std::pair<std::vector<uint64_t>, int64_t>>* counts = nullptr;
  std::string count_name;
};

// Returns the gzipped bytes. Throws std::runtime_error on encoder failure.
std::string encode_go_heap_pprof(const GoPprofInput& in);
// A count profile shaped like runtime/pprof's goroutine profile (debug=0):
// `go tool pprof` reads it. Throws like encode_go_heap_pprof.
std::string encode_go_count_pprof(const GoPprofInput& in);

// The allocations since the last published GC cycle (GoHeapBucket::recent_*)
// as a profile of the same shape with two sample types, alloc_objects/count
// and alloc_space/bytes (net of the frees in those cycles, unsampled like the
// heap profile); only buckets with recent allocations.
std::string encode_go_recent_pprof(const GoPprofInput& in);

}  // namespace oomsnap
