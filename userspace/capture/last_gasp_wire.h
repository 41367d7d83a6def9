// The last gasp's forms between the agent and its capture process
// (capture_wire.h): the plan that comes back from a capture process that read
// a hostile target, the decode request that goes to one, and the image it
// gets as a descriptor. Everything coming in is checked, nothing indexed
// before it is.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/last_gasp.h"
#include "core/proc_info.h"
#include "go/go_last_gasp.h"

namespace oomsnap {

// Everything a walk's snapshot needs besides its bytes and the executable.
struct LastGaspDecodeRequest {
  GoLastGaspPlan plan;
  ProcessIdentity identity;  // the process as it was when armed
  LastGaspWalk walk;         // its image travels apart (a descriptor), not here
};

// The image in a sealed memfd (the agent's side), and back (the capture
// process's, at most max_bytes of it). -1 / nullptr with why.
int image_to_memfd(const MemoryImage& image, std::string& why);
std::shared_ptr<MemoryImage> image_from_fd(int fd, uint64_t max_bytes, std::string& why);
// The parse of the memfd's bytes, once read (image_from_fd's second half).
std::shared_ptr<MemoryImage> image_from_bytes(const std::vector<uint8_t>& bytes, std::string& why);

// The wire forms (capture_wire.h), checked on the way in like any field of a
// capture process's reply.
nlohmann::json to_json(const GoLastGaspPlan& plan);
std::optional<GoLastGaspPlan> last_gasp_plan_from_json(const nlohmann::json& j, std::string& why);
nlohmann::json to_json(const LastGaspDecodeRequest& request);
std::optional<LastGaspDecodeRequest> last_gasp_decode_from_json(const nlohmann::json& j, std::string& why);

}  // namespace oomsnap
