// ElfFile: ELF64 headers decoded through ByteView; file bytes pread on demand
// into an anonymous reservation (see elf_file.h for why not mmap of the file).
#include "elf/elf_file.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_set>

#include "base/checked_bytes.h"
#include "base/huge_page_allocator.h"

namespace oomsnap {

namespace {

std::string hex(const uint8_t* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  s.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    s.push_back(digits[p[i] >> 4]);
    s.push_back(digits[p[i] & 15]);
  }
  return s;
}

// Note sections are a few dozen bytes; a larger one is not read.
constexpr uint64_t kMaxNotes = uint64_t{1} << 20;

std::string mib(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

// Walks ELF notes in d and returns the descriptor of the first note with the
// given name and type.
std::optional<std::span<const uint8_t>> find_note(ByteView d, std::string_view name, uint32_t type) {
  uint64_t off = 0;
  // Each note consumes at least 12 bytes, so this terminates.
  for (;;) {
    uint32_t namesz, descsz, ntype;
    if (!d.read_u32(off, namesz) || !d.read_u32(off + 4, descsz) || !d.read_u32(off + 8, ntype)) break;
    uint64_t name_off = off + 12;
    uint64_t desc_off = name_off + ((uint64_t(namesz) + 3) & ~uint64_t(3));
    uint64_t next = desc_off + ((uint64_t(descsz) + 3) & ~uint64_t(3));
    ByteView nm_bytes, desc;
    if (!d.sub(name_off, namesz, nm_bytes) || !d.sub(desc_off, descsz, desc)) break;
    std::string_view nm(reinterpret_cast<const char*>(nm_bytes.data()), nm_bytes.size());
    while (!nm.empty() && nm.back() == '\0') nm.remove_suffix(1);
    if (ntype == type && nm == name) return std::span<const uint8_t>(desc.data(), desc.size());
    off = next;
  }
  return std::nullopt;
}

// The raw fields of an ELF64 section header, as read from the table.
struct RawShdr {
  uint32_t name = 0, type = 0, link = 0, info = 0;
  uint64_t flags = 0, addr = 0, offset = 0, size = 0;
};
bool read_shdr(ByteView table, uint64_t index, RawShdr& s) {
  ByteView e;
  return table.element(index, sizeof(Elf64_Shdr), e) && e.read_u32(0, s.name) && e.read_u32(4, s.type) &&
         e.read_u64(8, s.flags) && e.read_u64(16, s.addr) && e.read_u64(24, s.offset) &&
         e.read_u64(32, s.size) && e.read_u32(40, s.link) && e.read_u32(44, s.info);
}

}  // namespace

std::unique_ptr<ElfFile> ElfFile::open_fd(int fd, std::string label) {
  int dfd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dfd < 0) throw ElfError(label + ": dup failed: " + std::strerror(errno));
  std::unique_ptr<ElfFile> f(new ElfFile());
  f->fd_ = dfd;  // closed by the destructor from here on
  f->label_ = std::move(label);
  struct stat st {};
  if (::fstat(dfd, &st) != 0) throw ElfError(f->label_ + ": fstat failed: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode) || st.st_size <= 0) throw ElfError(f->label_ + ": not a regular non-empty file");
  if (static_cast<uint64_t>(st.st_size) > kMaxFileSize)
    throw ElfError(f->label_ + ": file of " + mib(st.st_size) + " is larger than the " + mib(kMaxFileSize) +
                   " this reader accepts");
  f->size_ = static_cast<size_t>(st.st_size);
  // Address space only: pages cost memory when a pread fills them. Huge pages
  // (where enabled) make that one fault per chunk rather than per 4 KiB page.
  void* m = nullptr;
  try {
    m = huge_page_alloc(f->size_, f->reserved_);
  } catch (const std::bad_alloc&) {
    throw ElfError(f->label_ + ": cannot reserve " + mib(f->size_) + " of address space: " + std::strerror(errno));
  }
  f->data_ = static_cast<uint8_t*>(m);
  f->chunk_read_.assign((f->size_ + kChunk - 1) / kChunk, false);
  f->parse();
  return f;
}

std::unique_ptr<ElfFile> ElfFile::from_bytes(std::vector<uint8_t> bytes, std::string label) {
  std::unique_ptr<ElfFile> f(new ElfFile());
  f->label_ = std::move(label);
  f->owned_ = std::move(bytes);
  f->data_ = f->owned_.data();
  f->size_ = f->owned_.size();
  f->parse();
  return f;
}

ElfFile::~ElfFile() {
  if (reserved_) huge_page_free(data_, reserved_);
  if (fd_ >= 0) ::close(fd_);
}

uint64_t ElfFile::bytes_read() const {
  std::lock_guard lk(mutex_);
  return bytes_read_;
}

std::string ElfFile::io_error() const {
  std::lock_guard lk(mutex_);
  return io_error_;
}

void ElfFile::ensure(uint64_t off, uint64_t len) const {
  if (!in_bounds(off, len, size_))
    throw ElfError(label_ + ": bytes [" + std::to_string(off) + ", +" + std::to_string(len) +
                   ") outside the file of " + std::to_string(size_) + " bytes");
  if (len == 0) return;
  std::lock_guard lk(mutex_);
  if (chunk_read_.empty()) return;  // an owned image: all present
  const uint64_t last = (off + len - 1) / kChunk;
  uint64_t c = off / kChunk;
  while (c <= last) {
    if (chunk_read_[c]) {
      ++c;
      continue;
    }
    uint64_t run_end = c;  // one pread for each run of chunks not read yet
    while (run_end + 1 <= last && !chunk_read_[run_end + 1]) ++run_end;
    read_chunks(c, run_end);
    c = run_end + 1;
  }
}

void ElfFile::read_chunks(uint64_t first, uint64_t last) const {
  const uint64_t from = first * kChunk, to = std::min<uint64_t>((last + 1) * kChunk, size_);
  if (bytes_read_ + (to - from) > kMaxReadBytes)
    throw ElfError(label_ + ": reading " + std::to_string(to - from) + " bytes at offset " + std::to_string(from) +
                   " would pass the read budget of " + mib(kMaxReadBytes) + " per file");
  uint64_t at = from;
  while (at < to) {
    ssize_t n = ::pread(fd_, data_ + at, to - at, static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw ElfError(label_ + ": read at offset " + std::to_string(at) + " failed: " + std::strerror(errno));
    if (n == 0)
      throw ElfError(label_ + ": file ended at offset " + std::to_string(at) + " while read (it was " +
                     std::to_string(size_) + " bytes when opened: it shrank)");
    at += static_cast<uint64_t>(n);
  }
  bytes_read_ += to - from;
  for (uint64_t c = first; c <= last; ++c) chunk_read_[c] = true;
}

bool ElfFile::try_ensure(uint64_t off, uint64_t len) const {
  try {
    ensure(off, len);
    return true;
  } catch (const ElfError& e) {
    std::lock_guard lk(mutex_);
    io_error_ = e.what();
    return false;
  }
}

void ElfFile::parse() {
  constexpr uint64_t kEhdr = sizeof(Elf64_Ehdr);
  if (size_ < kEhdr) throw ElfError(label_ + ": too small for an ELF header");
  ensure(0, kEhdr);
  const ByteView file(data_, size_);  // only what ensure() covered is read below
  if (std::memcmp(data_, ELFMAG, SELFMAG) != 0) throw ElfError(label_ + ": bad ELF magic");
  if (data_[EI_CLASS] != ELFCLASS64) throw ElfError(label_ + ": not ELF64");
  if (data_[EI_DATA] != ELFDATA2LSB) throw ElfError(label_ + ": not little-endian");
  uint64_t phoff = 0, shoff = 0;
  uint16_t phentsize = 0, phnum16 = 0, shentsize = 0, shnum16 = 0, shstrndx16 = 0;
  file.read_u16(16, elf_type_);
  file.read_u64(32, phoff);
  file.read_u64(40, shoff);
  file.read_u16(54, phentsize);
  file.read_u16(56, phnum16);
  file.read_u16(58, shentsize);
  file.read_u16(60, shnum16);
  file.read_u16(62, shstrndx16);

  // Section header 0 holds the real counts when they do not fit in 16 bits.
  RawShdr sh0;
  const bool extended = shoff != 0 && (shnum16 == 0 || phnum16 == PN_XNUM || shstrndx16 == SHN_XINDEX);
  if (extended) {
    if (shentsize != sizeof(Elf64_Shdr) || !in_bounds(shoff, sizeof(Elf64_Shdr), size_))
      throw ElfError(label_ + ": section header 0 out of bounds");
    ensure(shoff, sizeof(Elf64_Shdr));
    read_shdr(ByteView(data_ + shoff, sizeof(Elf64_Shdr)), 0, sh0);
  }

  // Program headers.
  uint64_t phnum = phnum16 == PN_XNUM ? sh0.info : phnum16;
  if (phnum > kMaxSegments)
    throw ElfError(label_ + ": " + std::to_string(phnum) + " program headers, more than the " +
                   std::to_string(kMaxSegments) + " this reader accepts");
  if (phnum > 0) {
    if (phentsize != sizeof(Elf64_Phdr) || !in_bounds(phoff, phnum * sizeof(Elf64_Phdr), size_))
      throw ElfError(label_ + ": program header table out of bounds");
    ensure(phoff, phnum * sizeof(Elf64_Phdr));
  }
  ByteView ph_table;
  file.sub(phoff, phnum * sizeof(Elf64_Phdr), ph_table);
  segments_.reserve(phnum);
  for (uint64_t i = 0; i < phnum; ++i) {
    ByteView e;
    Segment s;
    if (!ph_table.element(i, sizeof(Elf64_Phdr), e) || !e.read_u32(0, s.type) || !e.read_u32(4, s.flags) ||
        !e.read_u64(8, s.offset) || !e.read_u64(16, s.vaddr) || !e.read_u64(32, s.filesz) ||
        !e.read_u64(40, s.memsz) || !e.read_u64(48, s.align))
      throw ElfError(label_ + ": bad program header " + std::to_string(i));
    segments_.push_back(s);
  }

  // Section headers (optional: a file may have none).
  if (shoff == 0) return;
  uint64_t shnum = shnum16 == 0 && extended ? sh0.size : shnum16;
  if (shnum == 0) return;
  if (shnum > kMaxSections)
    throw ElfError(label_ + ": " + std::to_string(shnum) + " section headers, more than the " +
                   std::to_string(kMaxSections) + " this reader accepts");
  if (shentsize != sizeof(Elf64_Shdr) || !in_bounds(shoff, shnum * sizeof(Elf64_Shdr), size_))
    throw ElfError(label_ + ": section header table out of bounds");
  ensure(shoff, shnum * sizeof(Elf64_Shdr));
  ByteView sh_table;
  file.sub(shoff, shnum * sizeof(Elf64_Shdr), sh_table);
  const uint64_t shstrndx = shstrndx16 == SHN_XINDEX ? sh0.link : shstrndx16;

  // Section names: resolved against the .shstrtab bytes, when it is sane.
  ByteView names;
  RawShdr strsh;
  if (shstrndx != SHN_UNDEF && read_shdr(sh_table, shstrndx, strsh) && strsh.type != SHT_NOBITS &&
      in_bounds(strsh.offset, strsh.size, size_)) {
    if (strsh.size > kMaxSectionNames)
      throw ElfError(label_ + ": section name table of " + std::to_string(strsh.size) + " bytes, more than the " +
                     std::to_string(kMaxSectionNames) + " this reader accepts");
    ensure(strsh.offset, strsh.size);
    file.sub(strsh.offset, strsh.size, names);
  }
  sections_.reserve(shnum);
  for (uint64_t i = 0; i < shnum; ++i) {
    RawShdr sh;
    read_shdr(sh_table, i, sh);  // in bounds: the table was checked above
    Section s;
    if (sh.name < names.size()) {
      const char* p = reinterpret_cast<const char*>(names.data() + sh.name);
      s.name.assign(p, strnlen(p, names.size() - sh.name));
    }
    s.type = sh.type;
    s.flags = sh.flags;
    s.addr = sh.addr;
    s.offset = sh.offset;
    s.size = sh.size;
    s.link = sh.link;
    sections_.push_back(std::move(s));
  }
}

const ElfFile::Section* ElfFile::section(std::string_view name) const {
  for (const auto& s : sections_)
    if (s.name == name) return &s;
  return nullptr;
}

std::optional<uint64_t> ElfFile::first_load_vaddr() const {
  std::optional<uint64_t> lo;
  for (const auto& s : segments_)
    if (s.type == PT_LOAD && (!lo || s.vaddr < *lo)) lo = s.vaddr;
  return lo;
}

bool ElfFile::has_symtab() const {
  for (const auto& s : sections_)
    if (s.type == SHT_SYMTAB && s.size >= 2 * sizeof(Elf64_Sym)) return true;
  return false;
}

template <typename Match>
void ElfFile::scan_symbols(Match&& match) const {
  // A table is usable when it and its strings are inside the file, within the
  // size cap, and readable.
  auto table = [&](const Section& s, ByteView& out) {
    if (s.type == SHT_NOBITS || !in_bounds(s.offset, s.size, size_)) return false;
    if (s.size > kMaxSymbolTable) {
      std::lock_guard lk(mutex_);
      io_error_ = label_ + ": section " + s.name + " of " + std::to_string(s.size) +
                  " bytes is larger than the symbol table cap of " + mib(kMaxSymbolTable);
      return false;
    }
    if (!try_ensure(s.offset, s.size)) return false;
    out = ByteView(data_ + s.offset, static_cast<size_t>(s.size));
    return true;
  };
  for (uint32_t want : {uint32_t(SHT_SYMTAB), uint32_t(SHT_DYNSYM)}) {
    for (const auto& s : sections_) {
      if (s.type != want || s.link >= sections_.size()) continue;
      ByteView syms, strs;
      if (!table(s, syms) || !table(sections_[s.link], strs) || strs.empty()) continue;
      for (uint64_t i = 1;; ++i) {
        ByteView e;
        uint32_t st_name;
        if (!syms.element(i, sizeof(Elf64_Sym), e) || !e.read_u32(0, st_name)) break;
        if (match(e, strs, st_name)) return;
      }
    }
  }
}

namespace {
ElfFile::Symbol symbol_of(ByteView entry, std::string name) {
  ElfFile::Symbol sym{std::move(name), 0, 0, 0};
  entry.read_u16(6, sym.shndx);
  entry.read_u64(8, sym.value);
  entry.read_u64(16, sym.size);
  return sym;
}
}  // namespace

std::optional<ElfFile::Symbol> ElfFile::symbol(std::string_view name) const {
  if (name.empty()) return std::nullopt;
  std::optional<Symbol> found;
  scan_symbols([&](ByteView e, ByteView strs, uint32_t st_name) {
    ByteView str;
    if (!strs.sub(st_name, name.size() + 1, str)) return false;
    if (std::memcmp(str.data(), name.data(), name.size()) != 0 || str.data()[name.size()] != '\0') return false;
    found = symbol_of(e, std::string(name));
    return true;
  });
  return found;
}

std::vector<ElfFile::Symbol> ElfFile::symbols_with_prefix(std::string_view prefix, size_t max_count,
                                                          size_t max_name) const {
  std::vector<Symbol> out;
  std::unordered_set<std::string> seen;  // .symtab and .dynsym both list an exported symbol
  scan_symbols([&](ByteView e, ByteView strs, uint32_t st_name) {
    ByteView str;
    if (prefix.empty() || !strs.sub(st_name, prefix.size(), str) ||
        std::memcmp(str.data(), prefix.data(), prefix.size()) != 0)
      return false;
    // The name's end within max_name bytes and the table: a longer or
    // unterminated name is not one of these symbols.
    const size_t room = std::min<uint64_t>(max_name + 1, strs.size() - st_name);
    const void* nul = std::memchr(strs.data() + st_name, '\0', room);
    if (!nul) return false;
    std::string name(reinterpret_cast<const char*>(strs.data() + st_name),
                     static_cast<const uint8_t*>(nul) - (strs.data() + st_name));
    if (!seen.insert(name).second) return false;
    out.push_back(symbol_of(e, std::move(name)));
    return out.size() >= max_count;
  });
  return out;
}

std::optional<uint32_t> ElfFile::symbol_u32(const Symbol& sym) const {
  if (sym.shndx == SHN_UNDEF || sym.shndx >= SHN_LORESERVE) return std::nullopt;
  if (sym.shndx < sections_.size() && sections_[sym.shndx].type == SHT_NOBITS) {
    const Section& s = sections_[sym.shndx];
    // Zero-initialised data has no bytes in the file: it reads as 0.
    if (sym.value >= s.addr && sym.value - s.addr <= s.size && s.size - (sym.value - s.addr) >= 4) return 0u;
    return std::nullopt;
  }
  auto bytes = bytes_at_vaddr(sym.value, 4);
  if (!bytes) return std::nullopt;
  uint32_t v;
  std::memcpy(&v, bytes->data(), 4);
  return v;
}

std::span<const uint8_t> ElfFile::section_data(const Section& s) const {
  if (s.type == SHT_NOBITS || s.size == 0) return {};
  if (!in_bounds(s.offset, s.size, size_))
    throw ElfError(label_ + ": section " + s.name + " out of file bounds");
  ensure(s.offset, s.size);
  return {data_ + s.offset, static_cast<size_t>(s.size)};
}

std::optional<std::span<const uint8_t>> ElfFile::bytes_at_vaddr(uint64_t vaddr, size_t len) const {
  for (const auto& s : segments_) {
    if (s.type != PT_LOAD) continue;
    if (vaddr < s.vaddr) continue;
    uint64_t rel = vaddr - s.vaddr;
    if (!in_bounds(rel, len, s.filesz)) continue;
    if (!in_bounds(s.offset, s.filesz, size_)) continue;
    if (!try_ensure(s.offset + rel, len)) return std::nullopt;
    return std::span<const uint8_t>(data_ + s.offset + rel, len);
  }
  return std::nullopt;
}

std::span<const uint8_t> ElfFile::image() const {
  ensure(0, size_);
  return {data_, size_};
}

std::optional<std::string> ElfFile::gnu_build_id() const {
  auto from = [&](uint64_t off, uint64_t len) -> std::optional<std::string> {
    if (len > kMaxNotes || !in_bounds(off, len, size_) || !try_ensure(off, len)) return std::nullopt;
    if (auto desc = find_note(ByteView(data_ + off, len), "GNU", NT_GNU_BUILD_ID); desc && !desc->empty())
      return hex(desc->data(), desc->size());
    return std::nullopt;
  };
  if (const auto* s = section(".note.gnu.build-id"))
    if (auto r = from(s->offset, s->size)) return r;
  for (const auto& s : sections_)
    if (s.type == SHT_NOTE)
      if (auto r = from(s.offset, s.size)) return r;
  if (sections_.empty())
    for (const auto& p : segments_)
      if (p.type == PT_NOTE)
        if (auto r = from(p.offset, p.filesz)) return r;
  return std::nullopt;
}

std::optional<std::string> ElfFile::go_build_id() const {
  constexpr uint32_t kGoBuildIdNote = 4;
  auto from = [&](uint64_t off, uint64_t len) -> std::optional<std::string> {
    if (len > kMaxNotes || !in_bounds(off, len, size_) || !try_ensure(off, len)) return std::nullopt;
    if (auto desc = find_note(ByteView(data_ + off, len), "Go", kGoBuildIdNote); desc && !desc->empty()) {
      std::string s(reinterpret_cast<const char*>(desc->data()), desc->size());
      while (!s.empty() && s.back() == '\0') s.pop_back();
      return s;
    }
    return std::nullopt;
  };
  if (const auto* s = section(".note.go.buildid"))
    if (auto r = from(s->offset, s->size)) return r;
  for (const auto& p : segments_)
    if (p.type == PT_NOTE)
      if (auto r = from(p.offset, p.filesz)) return r;
  return std::nullopt;
}

}  // namespace oomsnap
