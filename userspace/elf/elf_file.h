// A read-only view of an ELF64 little-endian file (libelf underneath): sections,
// segments, symbols and bounds-checked byte access. Garbage input throws
// ElfError with context; it never crashes.
#pragma once
#include <cstdint>
#include <memory>
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
  struct Section {
    std::string name;
    uint32_t type = 0;   // SHT_*
    uint64_t flags = 0;  // SHF_*
    uint64_t addr = 0, offset = 0, size = 0;
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

  // Maps the file read-only; fd is dup'ed (the caller keeps its own).
  static std::unique_ptr<ElfFile> open_fd(int fd, std::string label);
  // An in-memory image (tests, fuzzing).
  static std::unique_ptr<ElfFile> from_bytes(std::vector<uint8_t> bytes, std::string label);
  ~ElfFile();

  const std::string& label() const { return label_; }
  uint16_t elf_type() const { return elf_type_; }  // ET_EXEC, ET_DYN
  const std::vector<Section>& sections() const { return sections_; }
  const Section* section(std::string_view name) const;
  const std::vector<Segment>& segments() const { return segments_; }
  // Lowest p_vaddr of the PT_LOAD segments (0x400000 for non-PIE Go, 0 for most PIE).
  std::optional<uint64_t> first_load_vaddr() const;
  bool has_symtab() const;
  // Looks in .symtab, then .dynsym.
  std::optional<Symbol> symbol(std::string_view name) const;
  // File bytes of a section (empty for SHT_NOBITS); bounds-checked.
  std::span<const uint8_t> section_data(const Section& s) const;
  // File bytes backing [vaddr, vaddr+len) through a PT_LOAD segment, or nullopt
  // when the range is not entirely file-backed.
  std::optional<std::span<const uint8_t>> bytes_at_vaddr(uint64_t vaddr, size_t len) const;
  // Calls visit(vaddr, bytes from vaddr to the end of its segment's file data)
  // at every `align`-aligned address of the file-backed PT_LOAD data until it
  // returns true (for magic scans when section headers are missing or lie).
  // Returns whether a visit returned true.
  template <typename Visit>
  bool scan_loaded(uint64_t align, size_t min_len, Visit&& visit) const {
    for (const auto& seg : segments_) {
      if (seg.type != 1 /* PT_LOAD */ || seg.filesz < min_len) continue;
      auto whole = bytes_at_vaddr(seg.vaddr, seg.filesz);
      if (!whole) continue;
      for (uint64_t a = (seg.vaddr + align - 1) & ~(align - 1); a + min_len <= seg.vaddr + seg.filesz; a += align)
        if (visit(a, whole->subspan(a - seg.vaddr))) return true;
    }
    return false;
  }
  // The whole image.
  std::span<const uint8_t> image() const { return {data_, size_}; }
  // GNU build id (hex) from .note.gnu.build-id, if any.
  std::optional<std::string> gnu_build_id() const;
  // Go build id from .note.go.buildid, if any.
  std::optional<std::string> go_build_id() const;

 private:
  ElfFile() = default;
  void parse();
  std::string label_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mmapped_ = false;
  std::vector<uint8_t> owned_;
  uint16_t elf_type_ = 0;
  std::vector<Section> sections_;
  std::vector<Segment> segments_;
};

}  // namespace oomsnap
