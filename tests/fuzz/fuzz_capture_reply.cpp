// The parent's parser of what a capture process hands back: the child read a
// hostile target, so its bytes are hostile too. Any input must give a reply
// or an error, never a crash or an unbounded allocation.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "capture/capture_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  oomsnap::CaptureOptions bounds;
  bounds.max_entries = 64;
  std::string why;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  // As a whole frame, and as the JSON of a frame built around it (so the
  // fuzzer need not find the header to reach the JSON checks).
  (void)oomsnap::decode_reply(in, bounds, why);
  std::string frame = "OOMSNAPR";
  for (uint32_t v : {static_cast<uint32_t>(size), 0u})
    for (int i = 0; i < 4; ++i) frame.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  frame.append(in);
  (void)oomsnap::decode_reply(frame, bounds, why);
  // The same JSON with a blob behind it, so recent_pprof_bytes splits real bytes.
  frame[12] = 7;
  frame.append("BLOBXYZ");
  (void)oomsnap::decode_reply(frame, bounds, why);
  (void)oomsnap::decode_request(in, why);
  return 0;
}
