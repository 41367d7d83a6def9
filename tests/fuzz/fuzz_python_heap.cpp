// libFuzzer: hostile memory for the CPython heap walker. The input becomes a
// hostile image (hostile_image.h); _PyRuntime is its start. The walk is
// read through process_vm_readv on ourselves, like a real target, with a
// small object cap and deadline. The first byte picks the mode:
//  - even: a built-in 3.8-3.14 layout (minor from the byte) walks the image
//    (3.8's GC state in the runtime, 3.8-3.10 dict keys and instance dicts);
//    the same bytes also feed the debug-offsets parser.
//  - odd: layout selection as the collector does it, with unconstrained
//    values: a PY_VERSION_HEX from the next 4 bytes picks the table layout,
//    the image's first 768 bytes are its _Py_DebugOffsets (the cookie
//    planted or not, by a bit of the first byte; every other word as fuzzed),
//    parsed, applied and checked; a layout that passes walks the image.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/chunk_cache.h"
#include "hostile_image.h"
#include "python/python_heap.h"
#include "python/python_layout.h"

namespace {

void walk(const oomsnap::PyLayout& layout, const uint8_t* image, size_t size) {
  const uint64_t base = oomsnap_fuzz::load_hostile_image(image, size);
  oomsnap::RemoteMemory mem(getpid());
  oomsnap::ChunkCache cache(mem, oomsnap::read_maps(getpid()), 4096, 64 << 10);
  cache.set_read_limit(4 << 20);
  oomsnap::PyHeapInput in;
  in.runtime_addr = base;
  in.max_objects = 20000;
  oomsnap::Deadline deadline{std::chrono::milliseconds(200)};
  oomsnap::walk_python_heap(cache, layout, in, deadline);
}

// Debug offsets and the version as the target gives them, then the walk with
// whatever layout they select.
void layout_selection(uint8_t flags, const uint8_t* data, size_t size) {
  if (size < 4) return;
  uint32_t hex;
  std::memcpy(&hex, data, 4);
  data += 4, size -= 4;
  // _PyRuntime's first bytes, unrelocated (offsets are small numbers, which
  // the hostile image would turn into pointers).
  std::vector<uint8_t> dbg(oomsnap::kPyDebugOffsetsReadSize, 0);
  std::memcpy(dbg.data(), data, std::min(size, dbg.size()));
  if (flags & 2) std::memcpy(dbg.data(), "xdebugpy", 8);
  if (flags & 4) {  // a version word that agrees with the chosen one, so the checks past it run
    const uint64_t v = hex;
    std::memcpy(dbg.data() + 8, &v, 8);
  }
  std::string err;
  // The parser with any minor, as a name or Py_Version could claim.
  oomsnap::parse_py_debug_offsets(dbg, static_cast<int>((hex >> 16) & 0xff), err);
  auto layout = oomsnap::python_layout_for(hex);
  if (!layout) return;
  if (layout->minor >= 13) {
    auto d = oomsnap::parse_py_debug_offsets(dbg, layout->minor, err);
    if (!d || d->free_threaded || oomsnap::apply_py_debug_offsets(*layout, *d)) return;
  }
  walk(*layout, data, size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  if (data[0] & 1) {
    layout_selection(data[0], data + 1, size - 1);
    return 0;
  }
  const int minor = 8 + (data[0] >> 1) % 7;
  const uint32_t hex = 0x03000000u | (static_cast<uint32_t>(minor) << 16);
  std::span<const uint8_t> rest(data + 1, size - 1);
  std::string err;
  oomsnap::parse_py_debug_offsets(rest, minor, err);
  auto layout = oomsnap::python_layout_for(hex);
  if (!layout) return 0;
  walk(*layout, rest.data(), rest.size());
  return 0;
}
