// The Go side of the last gasp (core/last_gasp.h): what a live Go process is
// armed with, from its binary, and the snapshot from what the BPF program read
// in it at its kill, through the same heap path as a live read
// (collect_go_heap), so the entries, `recent` and the pprof are the same a
// live read would have given of the same buckets.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/collector.h"
#include "core/last_gasp.h"
#include "core/target.h"
#include "elf/elf_file.h"
#include "go/go_buildinfo.h"
#include "go/go_pprof.h"

namespace oomsnap {

// What a walk needs besides its bytes, fixed while the process lived.
struct GoLastGaspPlan {
  LastGaspArm arm;
  GoVersion version;
  uint64_t load_bias = 0;
  std::vector<GoMapping> mappings;  // for the pprof
};

// nullopt with why when the process is not a Go 1.19+ program whose heap
// profile globals can be found (the same rules as a live read).
std::optional<GoLastGaspPlan> plan_go_last_gasp(Target& target, const CaptureOptions& opts, std::string& why);

// The snapshot of one walk: language "go", snapshot.source "last_gasp". elf
// is the process's executable (kept open since it was armed: the process is
// gone). The walk's own end (a cap, an unreadable bucket, a full ring) makes
// it partial or failed with that reason.
CaptureResult go_last_gasp_snapshot(const LastGaspWalk& walk, const GoLastGaspPlan& plan, const ElfFile& elf,
                                    const CaptureOptions& opts);

}  // namespace oomsnap
