// The last gasp (core/last_gasp.h) through the capture path, so that nothing
// of a target is parsed in the agent: the plan (its binary read, the heap
// profile globals found) runs where a capture runs, with the target open; the
// walk's snapshot too, given the executable and the image as descriptors,
// since the process is gone by then. The sandbox (capture_sandbox.h) runs
// both in a capture process; these are the in-process halves it calls there.
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "capture/capture_record.h"
#include "core/last_gasp.h"
#include "core/target.h"
#include "go/go_last_gasp.h"

namespace oomsnap {

// Everything a walk's snapshot needs besides its bytes and the executable.
struct LastGaspDecodeRequest {
  GoLastGaspPlan plan;
  ProcessIdentity identity;  // the process as it was when armed
  LastGaspWalk walk;         // its image travels apart (a descriptor), not here
};

// The plan of a live target; nullopt with why (not Go, too old, globals not found).
std::optional<GoLastGaspPlan> plan_last_gasp(Target& target, const CaptureOptions& options, std::string& why);

// The record of one walk: the identity as armed, language "go", the
// snapshot with source "last_gasp"; exe_fd a readable descriptor of the
// executable. Never throws: a binary that cannot be read is a failed snapshot.
CaptureRecord decode_last_gasp(const LastGaspDecodeRequest& request, std::shared_ptr<MemoryImage> image,
                               int exe_fd, const CaptureOptions& options);

// The image in a sealed memfd (the agent's side), and back (the capture
// process's, at most max_bytes of it). -1 / nullptr with why.
int image_to_memfd(const MemoryImage& image, std::string& why);
std::shared_ptr<MemoryImage> image_from_fd(int fd, uint64_t max_bytes, std::string& why);

// The wire forms (capture_wire.h), checked on the way in like any field of a
// capture process's reply.
nlohmann::json to_json(const GoLastGaspPlan& plan);
std::optional<GoLastGaspPlan> last_gasp_plan_from_json(const nlohmann::json& j, std::string& why);
nlohmann::json to_json(const LastGaspDecodeRequest& request);
std::optional<LastGaspDecodeRequest> last_gasp_decode_from_json(const nlohmann::json& j, std::string& why);

}  // namespace oomsnap
