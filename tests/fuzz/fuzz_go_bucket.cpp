// libFuzzer: hostile bytes as one profile bucket image, decoded both as a heap
// bucket (memRecord) and as a block/mutex bucket (blockRecord). Nothing is
// held to plausible values: the Go version byte and the stack-depth cap come
// straight from the input too (a cap near 2^64 once let nstk * 8 wrap).
//
// Input: [0] Go minor version (any byte; its low bit also picks block or
// mutex), [1..8] depth cap (u64 LE), rest: the bucket.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "go/go_contention_reader.h"
#include "go/go_heap_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 9) return 0;
  int minor = data[0];
  uint64_t depth_cap;
  std::memcpy(&depth_cap, data + 1, 8);
  std::span<const uint8_t> img(data + 9, size - 9);
  std::string err;
  auto b = oomsnap::decode_go_bucket(img, minor, static_cast<size_t>(depth_cap), err);
  if (b) {
    // Every PC and record the decoder vouched for must be inside the image.
    uint64_t sum = 0;
    for (uint64_t i = 0; i < b->nstk; ++i) sum += b->pc(i);
    uint64_t v[4], extra[4];
    oomsnap::fold_go_cycles(*b, static_cast<uint32_t>(sum % 3), v, extra);
    // Recent is net and clamped: never more than the futures allocated.
    uint64_t objects = 0, bytes = 0;
    oomsnap::go_recent_cycles(extra, objects, bytes);
    if (objects > extra[0] || bytes > extra[2]) __builtin_trap();
    if (oomsnap::go_bucket_size(minor, b->nstk) > img.size()) __builtin_trap();
  }
  const auto kind = (minor & 1) ? oomsnap::GoContentionKind::kMutex : oomsnap::GoContentionKind::kBlock;
  auto c = oomsnap::decode_go_block_bucket(img, kind, static_cast<size_t>(depth_cap), err);
  if (c) {
    uint64_t sum = 0;
    for (uint64_t i = 0; i < c->nstk; ++i) sum += c->pc(i);
    if (c->nstk > (img.size() - 48) / 8 || 48 + c->nstk * 8 + oomsnap::kGoBlockRecordBytes > img.size())
      __builtin_trap();
    static volatile uint64_t sink;
    sink = sum + static_cast<uint64_t>(c->cycles);  // keep the loads
  }
  return 0;
}
