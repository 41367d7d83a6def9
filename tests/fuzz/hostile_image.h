// For the heap-walker fuzzers: the input becomes a 64 KiB image in this
// process, whose words below 64 Ki are taken as offsets into the image (so
// fuzzed pointers mostly land inside it). The walkers then read it through
// process_vm_readv on ourselves, exactly as they read a target.
#pragma once
#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace oomsnap_fuzz {

constexpr size_t kImageBytes = 64 << 10;

// Fills the image from the input and relocates small words; returns its base.
inline uint64_t load_hostile_image(const uint8_t* data, size_t size) {
  static uint8_t* img = static_cast<uint8_t*>(
      mmap(nullptr, kImageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  std::memset(img, 0, kImageBytes);
  std::memcpy(img, data, std::min(size, kImageBytes));
  const uint64_t base = reinterpret_cast<uint64_t>(img);
  for (size_t off = 0; off + 8 <= kImageBytes; off += 8) {
    uint64_t w;
    std::memcpy(&w, img + off, 8);
    if (w && w < kImageBytes) {
      w += base;
      std::memcpy(img + off, &w, 8);
    }
  }
  return base;
}

}  // namespace oomsnap_fuzz
