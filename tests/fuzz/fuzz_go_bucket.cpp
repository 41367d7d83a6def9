// libFuzzer: hostile bytes as one heap-profile bucket image, for every layout.
#include <cstddef>
#include <cstdint>
#include <string>

#include "go/go_heap_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  int minor = 19 + data[0] % 9;  // 1.19 … 1.27
  std::span<const uint8_t> img(data + 1, size - 1);
  std::string err;
  auto b = oomsnap::decode_go_bucket(img, minor, 1026, err);
  if (b) {
    uint64_t sum = 0;
    for (uint64_t i = 0; i < b->nstk; ++i) sum += b->pc(i);
    uint64_t v[4], extra[4];
    oomsnap::fold_go_cycles(*b, static_cast<uint32_t>(sum % 3), v, extra);
  }
  return 0;
}
