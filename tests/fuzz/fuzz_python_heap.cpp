// libFuzzer: hostile memory for the CPython heap walker. The input becomes a
// 64 KiB image in this process (words below 64 Ki are taken as offsets into
// it, so pointers mostly land inside); _PyRuntime is its start. The walk is
// read through process_vm_readv on ourselves, like a real target, with a
// small object cap and deadline. The same bytes also feed the debug-offsets
// parser.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/chunk_cache.h"
#include "python/python_heap.h"
#include "python/python_layout.h"

namespace {
constexpr size_t kImage = 64 << 10;
uint8_t* image() {
  static uint8_t* img = static_cast<uint8_t*>(
      mmap(nullptr, kImage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  return img;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int minor = 11 + data[0] % 4;
  const uint32_t hex = 0x03000000u | (static_cast<uint32_t>(minor) << 16);
  std::span<const uint8_t> rest(data + 1, size - 1);
  std::string err;
  oomsnap::parse_py_debug_offsets(rest, minor, err);

  auto layout = oomsnap::python_layout_for(hex);
  if (!layout) return 0;
  uint8_t* img = image();
  std::memset(img, 0, kImage);
  std::memcpy(img, rest.data(), std::min(rest.size(), kImage));
  const uint64_t base = reinterpret_cast<uint64_t>(img);
  for (size_t off = 0; off + 8 <= kImage; off += 8) {
    uint64_t w;
    std::memcpy(&w, img + off, 8);
    if (w && w < kImage) {
      w += base;
      std::memcpy(img + off, &w, 8);
    }
  }
  oomsnap::RemoteMemory mem(getpid());
  oomsnap::ChunkCache cache(mem, oomsnap::read_maps(getpid()), 4096, 64 << 10);
  cache.set_read_limit(4 << 20);
  oomsnap::PyHeapInput in;
  in.runtime_addr = base;
  in.max_objects = 20000;
  oomsnap::Deadline deadline{std::chrono::milliseconds(200)};
  oomsnap::walk_python_heap(cache, *layout, in, deadline);
  return 0;
}
