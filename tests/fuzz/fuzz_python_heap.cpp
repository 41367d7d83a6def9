// libFuzzer: hostile memory for the CPython heap walker. The input becomes a
// hostile image (hostile_image.h); _PyRuntime is its start. The walk is
// read through process_vm_readv on ourselves, like a real target, with a
// small object cap and deadline. The same bytes also feed the debug-offsets
// parser.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/chunk_cache.h"
#include "python/python_heap.h"
#include "hostile_image.h"
#include "python/python_layout.h"


extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int minor = 11 + data[0] % 4;
  const uint32_t hex = 0x03000000u | (static_cast<uint32_t>(minor) << 16);
  std::span<const uint8_t> rest(data + 1, size - 1);
  std::string err;
  oomsnap::parse_py_debug_offsets(rest, minor, err);

  auto layout = oomsnap::python_layout_for(hex);
  if (!layout) return 0;
  const uint64_t base = oomsnap_fuzz::load_hostile_image(rest.data(), rest.size());
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
