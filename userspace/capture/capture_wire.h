// What crosses the pipes between the agent (or CLI) and its capture process:
// one request line, one framed result. The parent treats the result as
// hostile bytes (the child read a hostile target): every field is checked
// for type and size, and anything else is an error, never a crash.
#pragma once
#include <sys/types.h>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "capture/capture_record.h"
#include "capture/last_gasp_wire.h"

namespace oomsnap {

// What the capture process is asked to do with pid.
enum class CaptureKind {
  kCapture,         // capture it (capture_target)
  kLastGaspPlan,    // plan its last gasp (plan_last_gasp): the reply's record carries the plan
  kLastGaspDecode,  // the snapshot of its last gasp (decode_last_gasp); pid is gone, and the
                    // executable and the image come with the request line as descriptors
};

struct CaptureRequest {
  pid_t pid = 0;
  CaptureOptions options;  // progress is not sent (the child has its own)
  CaptureKind kind = CaptureKind::kCapture;
  std::optional<LastGaspDecodeRequest> last_gasp = std::nullopt;  // kLastGaspDecode only
};
// The longest request line the capture process reads.
inline constexpr size_t kMaxRequestLine = 32 * 1024;

// One line of JSON ending in '\n'.
std::string encode_request(const CaptureRequest& r);
std::optional<CaptureRequest> decode_request(std::string_view line, std::string& why);

// The result frame: "OOMSNAPR", then the JSON length and the blob length as
// little-endian u32, the JSON, then the blob (a gzipped pprof profile, or
// nothing).
inline constexpr size_t kResultHeaderBytes = 16;

// What the child says.
struct CaptureReply {
  enum class Kind { kRecord, kNoTarget, kStalled } kind = Kind::kRecord;
  std::optional<CaptureRecord> record;  // kRecord
  std::string message;                  // kNoTarget: why; kStalled: what hung
  std::string language;                 // kStalled: the collector that had the target, if known
  uint64_t stalled_addr = 0;            // kStalled: the read in flight (0: none)
  std::optional<GoLastGaspPlan> last_gasp_plan = std::nullopt;  // kRecord, of a kLastGaspPlan request that found one
};

inline constexpr size_t kMaxSkipRanges = 64;

std::string encode_reply(const CaptureReply& reply);
// The size the frame starting `bytes` declares (header included); 0 while the
// header is incomplete or not a frame's.
size_t declared_frame_size(std::string_view bytes);
// The whole frame as read from the pipe; max_entries and max_stack_depth
// bound what a record may hold (the request's).
std::optional<CaptureReply> decode_reply(std::string_view frame, const CaptureOptions& bounds, std::string& why);

}  // namespace oomsnap
