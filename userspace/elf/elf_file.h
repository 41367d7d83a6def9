// A read-only view of an ELF64 little-endian file: sections, segments, symbols
// and bounds-checked byte access. The file is usually a target's executable or
// library, i.e. another container's to craft, so reading it is bounded:
//  - nothing is mapped from the file (its pages could fault on FUSE, or raise
//    SIGBUS when it shrinks): the parts needed are pread() on first use into a
//    private anonymous reservation of the file's size, so addresses stay stable
//    and only what was read costs memory; a file that shrinks while read gives
//    an error;
//  - the file size, the number of section and program headers, string and
//    symbol table sizes, and the total bytes read are capped (constants below);
//  - headers are decoded here through ByteView, never by a library that
//    allocates per header.
// Garbage input throws ElfError with context; it never crashes.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace oomsnap {

class ElfError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ElfFile {
 public:
  // Local limits, far above what real binaries need (a large Go binary such
  // as kubelet: ~120 MiB, ~70 sections, a symbol table of a few MiB).
  static constexpr uint64_t kMaxFileSize = uint64_t{2} << 30;     // address space reserved
  static constexpr uint64_t kMaxReadBytes = uint64_t{256} << 20;  // bytes pread, all parts together
  static constexpr uint64_t kMaxSections = 65535;
  static constexpr uint64_t kMaxSegments = 4096;
  static constexpr uint64_t kMaxSectionNames = uint64_t{1} << 20;  // .shstrtab
  static constexpr uint64_t kMaxSymbolTable = uint64_t{128} << 20;  // .symtab/.dynsym and its strings
  // Read granularity: one huge page, so pages touched never exceed bytes
  // read. (64 KiB pieces in 4 KiB pages measured no faster for a CPython's
  // symbol tables and slower for a Go pclntab: a 4 KiB fault costs ~14-20 us
  // on this kind of VM, a whole huge page ~0.3-0.6 ms.)
  static constexpr uint64_t kChunk = uint64_t{2} << 20;

  struct Section {
    std::string name;
    uint32_t type = 0;   // SHT_*
    uint64_t flags = 0;  // SHF_*
    uint64_t addr = 0, offset = 0, size = 0;
    uint32_t link = 0;  // sh_link (the string table of a symbol table)
  };
  struct Segment {
    uint32_t type = 0, flags = 0;  // PT_*, PF_*
    uint64_t offset = 0, vaddr = 0, filesz = 0, memsz = 0, align = 0;
  };
  struct Symbol {
    std::string name;
    uint64_t value = 0, size = 0;
    uint16_t shndx = 0;
  };

  // Reads the headers now and the rest on demand; fd is dup'ed (the caller
  // keeps its own) and kept until destruction.
  static std::unique_ptr<ElfFile> open_fd(int fd, std::string label);
  // An in-memory image (tests, fuzzing).
  static std::unique_ptr<ElfFile> from_bytes(std::vector<uint8_t> bytes, std::string label);
  ~ElfFile();
  ElfFile(const ElfFile&) = delete;
  ElfFile& operator=(const ElfFile&) = delete;

  const std::string& label() const { return label_; }
  uint64_t file_size() const { return size_; }
  // Bytes pread from the file so far (what this file costs in memory).
  uint64_t bytes_read() const;
  // The last read that failed inside an accessor that reports failure as
  // nullopt (a file that shrank, the read budget spent), for error messages.
  std::string io_error() const;
  uint16_t elf_type() const { return elf_type_; }  // ET_EXEC, ET_DYN
  const std::vector<Section>& sections() const { return sections_; }
  const Section* section(std::string_view name) const;
  const std::vector<Segment>& segments() const { return segments_; }
  // Lowest p_vaddr of the PT_LOAD segments (0x400000 for non-PIE Go, 0 for most PIE).
  std::optional<uint64_t> first_load_vaddr() const;
  bool has_symtab() const;
  // Looks in .symtab, then .dynsym (each at most kMaxSymbolTable).
  std::optional<Symbol> symbol(std::string_view name) const;
  // Every symbol whose name starts with prefix, each name once (a symbol in
  // both tables is listed from .symtab), at most max_count; a name longer
  // than max_name bytes is skipped.
  std::vector<Symbol> symbols_with_prefix(std::string_view prefix, size_t max_count, size_t max_name = 256) const;
  // The 32-bit value a data symbol holds in the file (a constant such as
  // V8's v8dbg_*), 0 for one in a NOBITS section (.bss: zero-initialised,
  // no bytes in the file); nullopt when it is undefined, absolute or its
  // four bytes are not in the file.
  std::optional<uint32_t> symbol_u32(const Symbol& sym) const;
  // File bytes of a section (empty for SHT_NOBITS); throws ElfError when they
  // are outside the file or cannot be read.
  std::span<const uint8_t> section_data(const Section& s) const;
  // File bytes backing [vaddr, vaddr+len) through a PT_LOAD segment, or nullopt
  // when the range is not entirely file-backed or cannot be read (io_error()).
  std::optional<std::span<const uint8_t>> bytes_at_vaddr(uint64_t vaddr, size_t len) const;
  // Calls visit(vaddr, bytes from vaddr to the end of its segment's file data)
  // at every `align`-aligned address of the file-backed PT_LOAD data until it
  // returns true (for magic scans when section headers are missing or lie).
  // Returns whether a visit returned true. writable_data_only: only the
  // segments that are writable and not executable (a program's data).
  template <typename Visit>
  bool scan_loaded(uint64_t align, size_t min_len, Visit&& visit, bool writable_data_only = false) const {
    for (const auto& seg : segments_) {
      if (seg.type != 1 /* PT_LOAD */ || seg.filesz < min_len) continue;
      if (writable_data_only && (seg.flags & 3 /* PF_X | PF_W */) != 2 /* PF_W */) continue;
      auto whole = bytes_at_vaddr(seg.vaddr, seg.filesz);
      if (!whole) continue;
      for (uint64_t a = (seg.vaddr + align - 1) & ~(align - 1); a + min_len <= seg.vaddr + seg.filesz; a += align)
        if (visit(a, whole->subspan(a - seg.vaddr))) return true;
    }
    return false;
  }
  // The whole image, read in full (tests; subject to kMaxReadBytes).
  std::span<const uint8_t> image() const;
  // GNU build id (hex) from .note.gnu.build-id, if any.
  std::optional<std::string> gnu_build_id() const;
  // Go build id from .note.go.buildid, if any.
  std::optional<std::string> go_build_id() const;

 private:
  ElfFile() = default;
  void parse();
  // Calls match(entry, strings, st_name) for each entry of .symtab, then of
  // .dynsym, until it returns true.
  template <typename Match>
  void scan_symbols(Match&& match) const;
  // Makes [off, off + len) of the file present in data_ (pread of the chunks
  // not read yet); throws ElfError when it is outside the file, the file
  // ended early or the read budget is spent.
  void ensure(uint64_t off, uint64_t len) const;
  // ensure() for accessors that report failure as nullopt.
  bool try_ensure(uint64_t off, uint64_t len) const;
  void read_chunks(uint64_t first, uint64_t last) const;  // mutex_ held
  std::string label_;
  uint8_t* data_ = nullptr;  // anonymous reservation (open_fd) or owned_.data()
  size_t size_ = 0;
  size_t reserved_ = 0;  // bytes of the anonymous reservation (2 MiB units), 0 for owned images
  int fd_ = -1;
  std::vector<uint8_t> owned_;
  mutable std::mutex mutex_;
  mutable std::vector<bool> chunk_read_;  // per kChunk of the file; empty when all present
  mutable uint64_t bytes_read_ = 0;
  mutable std::string io_error_;
  uint16_t elf_type_ = 0;
  std::vector<Section> sections_;
  std::vector<Segment> segments_;
};

}  // namespace oomsnap
