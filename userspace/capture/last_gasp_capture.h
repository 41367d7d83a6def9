// The last gasp (core/last_gasp.h) through the capture path, so that nothing
// of a target is parsed in the agent: the plan (plan_go_last_gasp: its binary
// read, the heap profile globals found) runs where a capture runs, with the
// target open; the walk's snapshot too (here), given the executable and the
// image as descriptors, since the process is gone by then. The sandbox
// (capture_sandbox.h) runs both in a capture process.
#pragma once
#include <optional>
#include <string>

#include "capture/capture_record.h"
#include "capture/last_gasp_wire.h"
#include "core/last_gasp.h"
#include "go/go_last_gasp.h"

namespace oomsnap {

// The record of one walk: the identity as armed, language "go", the
// snapshot with source "last_gasp"; exe_fd a readable descriptor of the
// executable. Never throws: a binary that cannot be read is a failed snapshot.
CaptureRecord decode_last_gasp(const LastGaspDecodeRequest& request, std::shared_ptr<MemoryImage> image,
                               int exe_fd, const CaptureOptions& options);

}  // namespace oomsnap
