// Allocator for large, short-lived scratch buffers (the Go reader's bucket
// summaries and read windows). First touch of fresh memory costs one page fault
// per 4 KiB, and on this kind of VM that dominated a 100k-bucket capture
// (~3.5 ms per MiB). Anonymous mappings in whole 2 MiB units with
// MADV_HUGEPAGE fault once per 2 MiB where transparent huge pages are
// enabled ("madvise" or "always"); elsewhere they behave like plain pages.
#pragma once
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

namespace oomsnap {

inline void* huge_page_alloc(size_t bytes, size_t& mapped) {
  constexpr size_t kHuge = size_t{2} << 20;
  mapped = (bytes + kHuge - 1) & ~(kHuge - 1);
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  madvise(p, mapped, MADV_HUGEPAGE);  // advisory: failure just means small pages
  return p;
}

inline void huge_page_free(void* p, size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  if (p) munmap(p, (bytes + kHuge - 1) & ~(kHuge - 1));
}

// Allocations of at least kHugeFrom bytes come from huge-page-backed
// mappings, smaller ones from malloc (0: every one).
template <typename T, size_t kHugeFrom>
struct PageBackedAllocator {
  using value_type = T;
  template <typename U>
  struct rebind {
    using other = PageBackedAllocator<U, kHugeFrom>;
  };
  PageBackedAllocator() = default;
  template <typename U>
  PageBackedAllocator(const PageBackedAllocator<U, kHugeFrom>&) {}
  static bool huge(size_t n) { return kHugeFrom == 0 || n >= (kHugeFrom + sizeof(T) - 1) / sizeof(T); }
  T* allocate(size_t n) {
    if (!huge(n)) return std::allocator<T>().allocate(n);
    size_t mapped;
    return static_cast<T*>(huge_page_alloc(n * sizeof(T), mapped));
  }
  void deallocate(T* p, size_t n) {
    if (huge(n)) huge_page_free(p, n * sizeof(T));
    else std::allocator<T>().deallocate(p, n);
  }
  template <typename U>
  bool operator==(const PageBackedAllocator<U, kHugeFrom>&) const { return true; }
};

template <typename T>
using HugePageAllocator = PageBackedAllocator<T, 0>;

// Small allocations from malloc (whose heap is usually warm), large ones
// huge-page backed: for tables that are a few entries for most processes
// and hundreds of KiB for some (the breakdown's mapping table: ~100 faults,
// ~1.5 ms here, for a 10,000-mapping process in a fresh capture process;
// MAP_POPULATE instead of a huge page measured 0.5-1 ms slower).
// glibc's default mmap threshold: above it malloc maps fresh pages anyway.
inline constexpr size_t kScratchHugeFrom = 128 * 1024;
template <typename T>
using ScratchAllocator = PageBackedAllocator<T, kScratchHugeFrom>;

template <typename T>
using ScratchVector = std::vector<T, ScratchAllocator<T>>;

// A byte buffer in one huge-page-advised mapping that nothing zeroes: the
// kernel's pages come zeroed, so only the pages written are ever faulted in.
// A std::vector of the same size value-initializes every byte, which faults
// in the whole worst-case size (the Go census's 6 MiB for ten goroutines).
class UntouchedBuffer {
 public:
  explicit UntouchedBuffer(size_t bytes) : size_(bytes) {
    if (bytes) data_ = static_cast<uint8_t*>(huge_page_alloc(bytes, mapped_));
  }
  ~UntouchedBuffer() { huge_page_free(data_, size_); }
  UntouchedBuffer(const UntouchedBuffer&) = delete;
  UntouchedBuffer& operator=(const UntouchedBuffer&) = delete;
  uint8_t* data() { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;
};

}  // namespace oomsnap
