// .go.buildinfo decoding (format: debug/buildinfo/buildinfo.go,
// cmd/link/internal/ld/data.go buildinfo()).
#include "go/go_buildinfo.h"

#include <elf.h>

#include <cstring>
#include <span>

#include "elf/elf_file.h"

namespace oomsnap {

namespace {

constexpr char kMagic[] = "\xff Go buildinf:";
constexpr size_t kMagicLen = 14;
constexpr size_t kHeaderSize = 32;
constexpr uint64_t kMaxString = 1 << 20;

// uvarint (up to 10 bytes) from d at off; advances off.
bool uvarint(std::span<const uint8_t> d, size_t& off, uint64_t& out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (off >= d.size()) return false;
    uint8_t b = d[off++];
    v |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      out = v;
      return true;
    }
  }
  return false;
}

std::optional<std::string> read_inline_string(std::span<const uint8_t> d, size_t& off) {
  uint64_t len;
  if (!uvarint(d, off, len)) return std::nullopt;
  if (len > kMaxString || len > d.size() - off) return std::nullopt;
  std::string s(reinterpret_cast<const char*>(d.data() + off), static_cast<size_t>(len));
  off += static_cast<size_t>(len);
  return s;
}

uint64_t read_ptr(const uint8_t* p, int ptr_size, bool big_endian) {
  uint64_t v = 0;
  for (int i = 0; i < ptr_size; ++i) {
    int idx = big_endian ? i : ptr_size - 1 - i;
    v = (v << 8) | p[idx];
  }
  return v;
}

// Pre-1.18 format: a pointer to a Go string header {ptr, len}.
std::string read_ptr_string(const ElfFile& elf, uint64_t addr, int ptr_size, bool be) {
  auto hdr = elf.bytes_at_vaddr(addr, 2 * static_cast<size_t>(ptr_size));
  if (!hdr) return {};
  uint64_t ptr = read_ptr(hdr->data(), ptr_size, be);
  uint64_t len = read_ptr(hdr->data() + ptr_size, ptr_size, be);
  if (len == 0 || len > kMaxString) return {};
  auto b = elf.bytes_at_vaddr(ptr, static_cast<size_t>(len));
  if (!b) return {};
  return std::string(reinterpret_cast<const char*>(b->data()), b->size());
}

// Decodes a blob starting with the magic; d runs to the end of its section/segment.
std::optional<GoBuildInfo> decode(const ElfFile& elf, std::span<const uint8_t> d) {
  if (d.size() < kHeaderSize || std::memcmp(d.data(), kMagic, kMagicLen) != 0) return std::nullopt;
  // The linker writes the pointer size in both formats. Requiring it also
  // refuses a bare copy of the magic (followed by its NUL), which any program
  // that looks for Go binaries holds in its .rodata, oomsnap included.
  int ptr_size = d[14];
  if (ptr_size != 4 && ptr_size != 8) return std::nullopt;
  uint8_t flags = d[15];
  std::string vers, mod;
  if ((flags & 0x2) == 0x2) {
    size_t off = kHeaderSize;
    auto v = read_inline_string(d, off);
    if (!v) return std::nullopt;
    vers = std::move(*v);
    if (auto m = read_inline_string(d, off)) mod = std::move(*m);
  } else {
    bool be = flags & 0x1;
    vers = read_ptr_string(elf, read_ptr(d.data() + 16, ptr_size, be), ptr_size, be);
    mod = read_ptr_string(elf, read_ptr(d.data() + 16 + ptr_size, ptr_size, be), ptr_size, be);
  }
  // runtime.buildVersion: "go1.N...", or "devel ..." for a toolchain built from source.
  if (vers.rfind("go", 0) != 0 && vers.rfind("devel", 0) != 0) return std::nullopt;
  if (mod.size() >= 33 && mod[mod.size() - 17] == '\n')
    mod = mod.substr(16, mod.size() - 32);
  else
    mod.clear();
  GoBuildInfo bi;
  if (auto gv = GoVersion::parse(vers)) {
    bi.version = *gv;
  } else if (auto pos = vers.find("go1."); pos != std::string::npos) {
    // e.g. "devel go1.23-abcdef ...": keep the text, take the numbers we can.
    if (auto gv2 = GoVersion::parse(std::string_view(vers).substr(pos))) bi.version = *gv2;
    bi.version.text = vers;
  } else {
    bi.version.text = vers;
  }
  bi.modinfo = std::move(mod);
  return bi;
}

}  // namespace

std::optional<GoBuildInfo> read_go_buildinfo(const ElfFile& elf) {
  try {
    if (const auto* s = elf.section(".go.buildinfo"); s && s->type != SHT_NOBITS) {
      if (auto r = decode(elf, elf.section_data(*s))) return r;
    }
    // No (usable) section: scan the file-backed data segments at 16-byte
    // aligned addresses. Go's linker puts the blob in writable data (first
    // in it; debug/buildinfo searches there too): scanning every segment read
    // and scanned the whole of each program that is not Go (a CPython's 7 MB,
    // the tenth of its snapshot's time).
    std::optional<GoBuildInfo> found;
    elf.scan_loaded(
        16, kHeaderSize,
        [&](uint64_t, std::span<const uint8_t> rest) {
          if (rest[0] != 0xff || std::memcmp(rest.data(), kMagic, kMagicLen) != 0) return false;
          found = decode(elf, rest);
          return found.has_value();
        },
        /*writable_data_only=*/true);
    if (found) return found;
  } catch (const ElfError&) {
  }
  return std::nullopt;
}

}  // namespace oomsnap
