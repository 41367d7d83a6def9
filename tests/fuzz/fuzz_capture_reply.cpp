// The parent's parser of what a capture process hands back: the child read a
// hostile target, so its bytes are hostile too. Any input must give a reply
// or an error, never a crash or an unbounded allocation. Also what a capture
// process takes in: the request line, and a last gasp's image (its memfd's
// bytes, which hold the target's).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "capture/capture_wire.h"
#include "capture/last_gasp_wire.h"

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
  // The image: as it came, and behind its magic (so the pieces are reached).
  std::vector<uint8_t> image(data, data + size);
  (void)oomsnap::image_from_bytes(image, why);
  const char* magic = "OOMSNAPI";
  image.insert(image.begin(), magic, magic + 8);
  if (auto img = oomsnap::image_from_bytes(image, why)) {
    uint8_t probe[16];
    for (const auto& [addr, bytes] : img->by_address()) (void)img->read(addr + bytes.size() / 2, probe, sizeof probe);
  }
  return 0;
}
