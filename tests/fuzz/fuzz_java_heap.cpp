// libFuzzer: hostile memory for the Java collector's readers. The input
// becomes a hostile image (hostile_image.h); it is read as HotSpot's
// VMStructs tables and as a G1 heap (region table, regions, objects, klasses)
// through process_vm_readv on ourselves, with a small budget.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/chunk_cache.h"
#include "hostile_image.h"
#include "java/g1_heap.h"
#include "java/hotspot_vmstructs.h"

namespace {
constexpr size_t kImage = oomsnap_fuzz::kImageBytes;
uint64_t word(const uint8_t* img, size_t i) {
  uint64_t v;
  std::memcpy(&v, img + (i * 8) % (kImage - 8), 8);
  return v;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 64) return 0;
  const uint64_t base = oomsnap_fuzz::load_hostile_image(data, size);
  const uint8_t* img = reinterpret_cast<const uint8_t*>(base);
  oomsnap::RemoteMemory mem(getpid());
  oomsnap::ChunkCache cache(mem, oomsnap::read_maps(getpid()), 4096, 64 << 10);
  cache.set_read_limit(4 << 20);

  // The table symbols are the first 20 words of the image.
  oomsnap::HotSpotSymbols y;
  uint64_t* f[] = {&y.structs, &y.types, &y.int_constants, &y.long_constants, &y.struct_type_name,
                   &y.struct_field_name, &y.struct_type_string, &y.struct_is_static, &y.struct_offset,
                   &y.struct_address, &y.struct_stride, &y.type_type_name, &y.type_size, &y.type_stride,
                   &y.int_name, &y.int_value, &y.int_stride, &y.long_name, &y.long_value, &y.long_stride};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; ++i) *f[i] = base + (word(img, i) % (kImage - 8));
  std::string err;
  oomsnap::HotSpotVm::read(cache, y, err);

  // The G1 layout from the next words; offsets kept small.
  oomsnap::G1Layout L;
  L.region_table = word(img, 20);
  L.region_count = word(img, 21) % 64;
  L.grain_bytes = 4096;
  L.region_tag = static_cast<uint32_t>(word(img, 22) % 64);
  L.tag_starts_humongous = 4, L.tag_continues_humongous = 5;
  L.compact_headers = word(img, 23) & 1;
  L.compressed_klass = word(img, 23) & 2;
  L.narrow_klass_base = base;
  L.narrow_klass_shift = static_cast<uint32_t>(word(img, 24) % 4);
  L.array_length_offset = L.compact_headers ? 8 : (L.compressed_klass ? 12 : 16);
  L.mirror_size_offset = static_cast<int32_t>(word(img, 25) % 64);
  L.holes = {{base + word(img, 26) % kImage, base + word(img, 26) % kImage + 256}};
  oomsnap::G1Limits lim;
  lim.max_walk_bytes = 1 << 20;
  oomsnap::Deadline deadline{std::chrono::milliseconds(200)};
  oomsnap::walk_g1_heap(cache, L, lim, deadline);
  return 0;
}
