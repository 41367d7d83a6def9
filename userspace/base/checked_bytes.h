// Checked access to bytes that came from somewhere we do not trust: a copy
// of another process's memory, or a file. Every offset, size and count in
// such bytes is the other side's to choose, so every access goes through
// here and is bounds-checked in one place: out of bounds is `false`, never a
// read (or a write) past the buffer. Loads are unaligned (memcpy) and
// little-endian, as the targets lay out their data (x86-64 and arm64 Linux),
// whatever the host.
//
// This is the one home for the unaligned-load helpers the readers used to
// keep each for itself (u64/rd64/load_u64/at64, in_bounds): a reader with a
// checked range in hand may use load_le<T>() directly; everything else should
// go through ByteView.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

namespace oomsnap {

// Does [off, off + len) lie inside a buffer of `size` bytes? Never overflows,
// whatever the three values (off + len alone can wrap).
constexpr bool in_bounds(uint64_t off, uint64_t len, uint64_t size) { return off <= size && len <= size - off; }

// Little-endian, unaligned load of an integer at p. Unchecked: the caller
// has checked that sizeof(T) bytes at p are inside its buffer.
template <typename T>
T load_le(const uint8_t* p) {
  static_assert(std::is_integral_v<T>, "integers only");
  T v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::big) {
    using U = std::make_unsigned_t<T>;
    U u = static_cast<U>(v), r = 0;
    for (size_t i = 0; i < sizeof(T); ++i, u >>= 8) r = static_cast<U>((r << 8) | (u & 0xff));
    v = static_cast<T>(r);
  }
  return v;
}

// A non-owning view of untrusted bytes. Cheap to copy; the bytes must
// outlive it (a ChunkCache::view() pointer: until the next cache call).
class ByteView {
 public:
  constexpr ByteView() = default;
  constexpr ByteView(const uint8_t* data, size_t size) : data_(data), size_(data ? size : 0) {}
  constexpr ByteView(std::span<const uint8_t> bytes) : ByteView(bytes.data(), bytes.size()) {}

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  bool contains(uint64_t off, uint64_t len) const { return in_bounds(off, len, size_); }

  // The integer at off into v; false (v untouched) when it is not all inside.
  template <typename T>
  bool read(uint64_t off, T& v) const {
    if (!contains(off, sizeof(T))) return false;
    v = load_le<T>(data_ + off);
    return true;
  }
  bool read_u8(uint64_t off, uint8_t& v) const { return read(off, v); }
  bool read_u16(uint64_t off, uint16_t& v) const { return read(off, v); }
  bool read_u32(uint64_t off, uint32_t& v) const { return read(off, v); }
  bool read_i32(uint64_t off, int32_t& v) const { return read(off, v); }
  bool read_u64(uint64_t off, uint64_t& v) const { return read(off, v); }
  bool read_i64(uint64_t off, int64_t& v) const { return read(off, v); }

  // Copies len bytes at off into out; false when they are not all inside.
  bool copy(uint64_t off, void* out, size_t len) const {
    if (!contains(off, len)) return false;
    if (len) std::memcpy(out, data_ + off, len);
    return true;
  }
  // The bytes [off, off + len) as a view of their own; false when they are
  // not all inside (out untouched).
  bool sub(uint64_t off, uint64_t len, ByteView& out) const {
    if (!contains(off, len)) return false;
    out = ByteView(data_ + off, static_cast<size_t>(len));
    return true;
  }
  // Record `index` of an array of `stride`-byte records starting at 0 (a
  // table whose count and stride the other side chose); false when outside.
  bool element(uint64_t index, uint64_t stride, ByteView& out) const {
    if (stride == 0 || index >= size_ / stride) return false;
    return sub(index * stride, stride, out);
  }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace oomsnap
