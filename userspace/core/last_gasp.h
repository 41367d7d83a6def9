// The last gasp: a Go process's heap profile read in its own context at its
// kill (bpf/last_gasp.bpf.c), when no read from outside can reach it any more.
// What it is armed with, and what one walk took. The Go side (what to arm a
// process with, the snapshot from a walk) is go/go_last_gasp.h; the BPF side
// is agent/events/last_gasp_source.h.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/memory_image.h"
#include "core/snapshot.h"

namespace oomsnap {

// RUNTIME addresses in the target and the bucket layout, resolved from its
// binary while it lives.
struct LastGaspArm {
  uint64_t mbuckets = 0;          // &runtime.mbuckets
  uint64_t mem_profile_rate = 0;  // &runtime.MemProfileRate
  uint64_t mprof_cycle = 0;       // &runtime.mProfCycle; 0 when unknown
  uint32_t record_bytes = 0;      // bytes after a bucket's PCs (this Go version's memRecord)
  uint32_t max_stack = 0;         // a deeper bucket ends the walk
};

// One walk, as user space received it.
struct LastGaspWalk {
  pid_t pid = 0;
  uint64_t ktime_ns = 0;  // CLOCK_MONOTONIC when the walk began (the SIGKILL's delivery)
  uint64_t walk_ns = 0;   // how long the walk held the dying task
  LastGaspArm arm;        // what the process was armed with
  // The globals (at their addresses in arm) and every bucket received, at
  // its address: the live reader runs over it as over the process.
  std::shared_ptr<MemoryImage> image = std::make_shared<MemoryImage>();
  uint32_t buckets_sent = 0;      // by the BPF program
  uint32_t buckets_received = 0;  // by user space
  // Buckets whose counters ran into a page that was not present at the kill
  // (never written: the newest bucket's), read as zeros.
  uint32_t zero_tails = 0;
  // complete: to the list's end, every bucket received; partial or failed
  // with why otherwise.
  SnapshotStatus status = SnapshotStatus::kFailed;
  std::string reason;
};

}  // namespace oomsnap
