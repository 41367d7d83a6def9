// Where a last gasp's snapshot (a Go process's heap profile read in the
// process itself at its SIGKILL, agent/last_gasp/last_gasp_watch.h) goes in
// the record of its OOM kill. Pure.
//
// The kernel's chosen victim: into the record's own victim and snapshot when
// the record has none (a kill no trigger came before), or when its snapshot
// of that very process is not complete. A complete snapshot from before the
// kill stays: it was read from outside, with the census and everything a
// live read gives. Any other process killed in the event (a group kill):
// into other_processes on the same terms, within max_others entries.
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <string>

#include "agent/incident/incident.h"
#include "capture/capture_record.h"

namespace oomsnap {

// One walk's record, decoded: the process as it was armed, language "go",
// snapshot.source "last_gasp".
struct LastGaspDecoded {
  pid_t pid = 0;
  MonoNs walk_start_ns = 0;  // the SIGKILL's delivery (CLOCK_MONOTONIC)
  MonoNs walk_end_ns = 0;    // the walk's end in the dying task
  CaptureRecord record;
};

// other_processes entries a group kill's last gasps may fill: a record of
// a group kill of many Go processes stays a few MiB at most.
inline constexpr size_t kMaxLastGaspOthers = 16;

// Whether d is of a process this incident's OOM kill killed (by pid, its
// walk begun in the window after the kill: a SIGKILL is delivered at once).
bool last_gasp_of_kill(const Incident& inc, const LastGaspDecoded& d);

// Puts d into inc (see above); what it did, for the log. d must be of the
// incident's kill (last_gasp_of_kill).
std::string attach_last_gasp(Incident& inc, LastGaspDecoded d, size_t max_others);

}  // namespace oomsnap
