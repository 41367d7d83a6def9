// The block/mutex profile as a gzipped profile.proto, shaped like the one
// runtime/pprof writes (printCountCycleProfile).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "go/go_contention_profile.h"
#include "go/go_pprof.h"

namespace oomsnap {

// A gzipped profile.proto shaped like runtime/pprof's block/mutex profile:
// PeriodType contentions/count, Period 1, sample types contentions/count and
// delay/nanoseconds, one sample per record.
std::string encode_go_contention_pprof(const std::vector<GoContentionSample>& samples, uint64_t load_bias,
                                       const std::vector<GoMapping>& mappings, int64_t time_nanos);

}  // namespace oomsnap
