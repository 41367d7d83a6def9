// ElfFile: libelf parses the headers; every byte access goes through our own
// bounds checks against the (mmapped or owned) image.
#include "elf/elf_file.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

namespace oomsnap {

namespace {

struct ElfHandle {
  Elf* e = nullptr;
  ~ElfHandle() {
    if (e) elf_end(e);
  }
};

void ensure_libelf() {
  static const bool ok = elf_version(EV_CURRENT) != EV_NONE;
  if (!ok) throw ElfError("libelf initialisation failed");
}

// true when [off, off+len) lies within [0, size).
inline bool in_bounds(uint64_t off, uint64_t len, uint64_t size) {
  return off <= size && len <= size - off;
}

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

uint32_t rd32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Walks ELF notes in [p, p+n) and returns the descriptor of the first note with
// the given name and type.
std::optional<std::span<const uint8_t>> find_note(std::span<const uint8_t> d, std::string_view name,
                                                  uint32_t type) {
  size_t off = 0;
  // Each note consumes at least 12 bytes, so this terminates.
  while (off + 12 <= d.size()) {
    uint32_t namesz = rd32(d.data() + off), descsz = rd32(d.data() + off + 4),
             ntype = rd32(d.data() + off + 8);
    uint64_t name_off = off + 12;
    uint64_t desc_off = name_off + ((uint64_t(namesz) + 3) & ~uint64_t(3));
    uint64_t next = desc_off + ((uint64_t(descsz) + 3) & ~uint64_t(3));
    if (!in_bounds(name_off, namesz, d.size()) || !in_bounds(desc_off, descsz, d.size())) break;
    std::string_view nm(reinterpret_cast<const char*>(d.data() + name_off), namesz);
    while (!nm.empty() && nm.back() == '\0') nm.remove_suffix(1);
    if (ntype == type && nm == name) return d.subspan(desc_off, descsz);
    if (next <= off) break;
    off = next;
  }
  return std::nullopt;
}

}  // namespace

std::unique_ptr<ElfFile> ElfFile::open_fd(int fd, std::string label) {
  int dfd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dfd < 0) throw ElfError(label + ": dup failed: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(dfd, &st) != 0) {
    int err = errno;
    ::close(dfd);
    throw ElfError(label + ": fstat failed: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode) || st.st_size <= 0) {
    ::close(dfd);
    throw ElfError(label + ": not a regular non-empty file");
  }
  size_t size = static_cast<size_t>(st.st_size);
  // MAP_PRIVATE + PROT_WRITE: libelf never writes in read mode, but a private
  // mapping makes that harmless even if it did. The file is never modified.
  void* m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, dfd, 0);
  int err = errno;
  ::close(dfd);
  if (m == MAP_FAILED) throw ElfError(label + ": mmap failed: " + std::strerror(err));
  std::unique_ptr<ElfFile> f(new ElfFile());
  f->label_ = std::move(label);
  f->data_ = static_cast<const uint8_t*>(m);
  f->size_ = size;
  f->mmapped_ = true;
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
  if (mmapped_ && data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void ElfFile::parse() {
  ensure_libelf();
  if (size_ < sizeof(Elf64_Ehdr)) throw ElfError(label_ + ": too small for an ELF header");
  if (std::memcmp(data_, ELFMAG, SELFMAG) != 0) throw ElfError(label_ + ": bad ELF magic");
  if (data_[EI_CLASS] != ELFCLASS64) throw ElfError(label_ + ": not ELF64");
  if (data_[EI_DATA] != ELFDATA2LSB) throw ElfError(label_ + ": not little-endian");

  // libelf needs a mutable buffer; our mapping is private (or owned), and
  // libelf does not write in read mode.
  ElfHandle h;
  h.e = elf_memory(reinterpret_cast<char*>(const_cast<uint8_t*>(data_)), size_);
  if (!h.e || elf_kind(h.e) != ELF_K_ELF)
    throw ElfError(label_ + ": libelf: " + (elf_errmsg(-1) ? elf_errmsg(-1) : "not ELF"));
  GElf_Ehdr eh;
  if (!gelf_getehdr(h.e, &eh)) throw ElfError(label_ + ": cannot read ELF header");
  elf_type_ = eh.e_type;

  // Program headers.
  size_t phnum = 0;
  if (elf_getphdrnum(h.e, &phnum) != 0) phnum = 0;
  if (phnum > 0 && (eh.e_phentsize != sizeof(Elf64_Phdr) ||
                    !in_bounds(eh.e_phoff, uint64_t(phnum) * sizeof(Elf64_Phdr), size_)))
    throw ElfError(label_ + ": program header table out of bounds");
  segments_.reserve(phnum);
  for (size_t i = 0; i < phnum; ++i) {
    GElf_Phdr ph;
    if (!gelf_getphdr(h.e, static_cast<int>(i), &ph)) throw ElfError(label_ + ": bad program header");
    Segment s;
    s.type = ph.p_type;
    s.flags = ph.p_flags;
    s.offset = ph.p_offset;
    s.vaddr = ph.p_vaddr;
    s.filesz = ph.p_filesz;
    s.memsz = ph.p_memsz;
    s.align = ph.p_align;
    segments_.push_back(s);
  }

  // Section headers (optional: a file may have none).
  size_t shnum = 0, shstrndx = 0;
  if (elf_getshdrnum(h.e, &shnum) != 0) shnum = 0;
  if (shnum > 0) {
    if (eh.e_shentsize != sizeof(Elf64_Shdr) ||
        !in_bounds(eh.e_shoff, uint64_t(shnum) * sizeof(Elf64_Shdr), size_))
      throw ElfError(label_ + ": section header table out of bounds");
    if (elf_getshdrstrndx(h.e, &shstrndx) != 0) shstrndx = SHN_UNDEF;
    // Section names: resolve ourselves against the shstrtab bytes.
    std::span<const uint8_t> shstr;
    if (shstrndx != SHN_UNDEF && shstrndx < shnum) {
      const auto* raw = reinterpret_cast<const Elf64_Shdr*>(data_ + eh.e_shoff);
      Elf64_Shdr sh;
      std::memcpy(&sh, &raw[shstrndx], sizeof sh);
      if (sh.sh_type != SHT_NOBITS && in_bounds(sh.sh_offset, sh.sh_size, size_))
        shstr = {data_ + sh.sh_offset, static_cast<size_t>(sh.sh_size)};
    }
    sections_.reserve(shnum);
    for (size_t i = 0; i < shnum; ++i) {
      Elf64_Shdr sh;
      std::memcpy(&sh, data_ + eh.e_shoff + i * sizeof(Elf64_Shdr), sizeof sh);
      Section s;
      if (sh.sh_name < shstr.size()) {
        const char* p = reinterpret_cast<const char*>(shstr.data() + sh.sh_name);
        s.name.assign(p, strnlen(p, shstr.size() - sh.sh_name));
      }
      s.type = sh.sh_type;
      s.flags = sh.sh_flags;
      s.addr = sh.sh_addr;
      s.offset = sh.sh_offset;
      s.size = sh.sh_size;
      sections_.push_back(std::move(s));
    }
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

std::optional<ElfFile::Symbol> ElfFile::symbol(std::string_view name) const {
  if (name.empty()) return std::nullopt;
  for (uint32_t want : {uint32_t(SHT_SYMTAB), uint32_t(SHT_DYNSYM)}) {
    for (const auto& s : sections_) {
      if (s.type != want || !in_bounds(s.offset, s.size, size_)) continue;
      auto syms = section_data(s);
      // sh_link names the string table; re-read it from the raw section header
      // (parse() checked that the table is in bounds).
      size_t idx = &s - sections_.data();
      const Elf64_Ehdr* eh = reinterpret_cast<const Elf64_Ehdr*>(data_);
      Elf64_Shdr raw;
      std::memcpy(&raw, data_ + eh->e_shoff + idx * sizeof(Elf64_Shdr), sizeof raw);
      if (raw.sh_link >= sections_.size()) continue;
      const Section& strsec = sections_[raw.sh_link];
      if (strsec.type == SHT_NOBITS || !in_bounds(strsec.offset, strsec.size, size_)) continue;
      auto strs = section_data(strsec);
      if (strs.empty()) continue;
      size_t n = syms.size() / sizeof(Elf64_Sym);
      for (size_t i = 1; i < n; ++i) {
        Elf64_Sym sym;
        std::memcpy(&sym, syms.data() + i * sizeof(Elf64_Sym), sizeof sym);
        if (sym.st_name >= strs.size()) continue;
        const char* p = reinterpret_cast<const char*>(strs.data() + sym.st_name);
        size_t maxlen = strs.size() - sym.st_name;
        if (name.size() >= maxlen) continue;
        if (std::memcmp(p, name.data(), name.size()) != 0 || p[name.size()] != '\0') continue;
        return Symbol{std::string(name), sym.st_value, sym.st_size, sym.st_shndx};
      }
    }
  }
  return std::nullopt;
}

std::span<const uint8_t> ElfFile::section_data(const Section& s) const {
  if (s.type == SHT_NOBITS || s.size == 0) return {};
  if (!in_bounds(s.offset, s.size, size_))
    throw ElfError(label_ + ": section " + s.name + " out of file bounds");
  return {data_ + s.offset, static_cast<size_t>(s.size)};
}

std::optional<std::span<const uint8_t>> ElfFile::bytes_at_vaddr(uint64_t vaddr, size_t len) const {
  for (const auto& s : segments_) {
    if (s.type != PT_LOAD) continue;
    if (vaddr < s.vaddr) continue;
    uint64_t rel = vaddr - s.vaddr;
    if (!in_bounds(rel, len, s.filesz)) continue;
    if (!in_bounds(s.offset, s.filesz, size_)) continue;
    return std::span<const uint8_t>(data_ + s.offset + rel, len);
  }
  return std::nullopt;
}

std::optional<std::string> ElfFile::gnu_build_id() const {
  auto from = [&](std::span<const uint8_t> d) -> std::optional<std::string> {
    if (auto desc = find_note(d, "GNU", NT_GNU_BUILD_ID); desc && !desc->empty())
      return hex(desc->data(), desc->size());
    return std::nullopt;
  };
  if (const auto* s = section(".note.gnu.build-id")) {
    if (in_bounds(s->offset, s->size, size_))
      if (auto r = from(section_data(*s))) return r;
  }
  for (const auto& s : sections_)
    if (s.type == SHT_NOTE && in_bounds(s.offset, s.size, size_))
      if (auto r = from(section_data(s))) return r;
  if (sections_.empty())
    for (const auto& p : segments_)
      if (p.type == PT_NOTE && in_bounds(p.offset, p.filesz, size_))
        if (auto r = from({data_ + p.offset, static_cast<size_t>(p.filesz)})) return r;
  return std::nullopt;
}

std::optional<std::string> ElfFile::go_build_id() const {
  constexpr uint32_t kGoBuildIdNote = 4;
  auto from = [&](std::span<const uint8_t> d) -> std::optional<std::string> {
    if (auto desc = find_note(d, "Go", kGoBuildIdNote); desc && !desc->empty()) {
      std::string s(reinterpret_cast<const char*>(desc->data()), desc->size());
      while (!s.empty() && s.back() == '\0') s.pop_back();
      return s;
    }
    return std::nullopt;
  };
  if (const auto* s = section(".note.go.buildid")) {
    if (in_bounds(s->offset, s->size, size_))
      if (auto r = from(section_data(*s))) return r;
  }
  for (const auto& p : segments_)
    if (p.type == PT_NOTE && in_bounds(p.offset, p.filesz, size_))
      if (auto r = from({data_ + p.offset, static_cast<size_t>(p.filesz)})) return r;
  return std::nullopt;
}

}  // namespace oomsnap
