// `oomsnap snapshot --profile block|mutex` for Go targets: locates the
// contention globals (symbols, or the runtime's code in stripped binaries),
// reads the bucket list, and turns it into snapshot.block / snapshot.mutex and,
// on request, the profile.proto runtime/pprof would write.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/collector.h"
#include "go/go_contention_reader.h"
#include "go/go_pprof.h"

namespace oomsnap {
class ElfFile;
class GoPclntab;
struct GoVersion;

struct GoContentionTarget {
  const ElfFile* elf = nullptr;
  const GoPclntab* pclntab = nullptr;
  const GoVersion* version = nullptr;
  uint64_t load_bias = 0;
  std::vector<GoMapping> mappings;  // for the pprof output, the executable first
};

// pprof (when non-null) receives the gzipped profile when records were read.
ContentionProfile collect_go_contention(Target& target, const GoContentionTarget& in, GoContentionKind kind,
                                        const CaptureOptions& opts, const Deadline& deadline,
                                        std::optional<std::string>* pprof);

}  // namespace oomsnap
