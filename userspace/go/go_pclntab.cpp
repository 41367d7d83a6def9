// Go pclntab reader (Go 1.18–1.27). Layout facts: runtime/symtab.go,
// runtime/symtabinl.go, runtime/runtime2.go (_func), cmd/link/internal/ld/pcln.go.
// Every load from the table (and the inline tree, the relocations and the
// data words read from the file) goes through the ByteView of the buffer it
// indexes (base/checked_bytes.h): a load outside reads as absent (0, false,
// no function, no name), never past the buffer. Every loop over table bytes is
// bounded.
#include "go/go_pclntab.h"

#include <elf.h>

#include <algorithm>
#include <cstring>

#include "base/checked_bytes.h"
#include "elf/elf_file.h"

namespace oomsnap {

namespace {

constexpr uint32_t kMagic118 = 0xfffffff0u;
constexpr uint32_t kMagic120 = 0xfffffff1u;
constexpr size_t kHeaderSize = 72;
constexpr int kPcdataInlTreeIndex = 2;
constexpr int kFuncdataInlTree = 3;
constexpr int kMaxInlineDepth = 128;     // real inline chains are far shorter
constexpr size_t kMaxNameLen = 1 << 16;  // cap on NUL-terminated string scans
// Names and file names reported are cut here (a crafted table can make one
// 64 KiB long, times every frame of every stack), marked as cut.
constexpr size_t kMaxReportedName = 4096;
constexpr std::string_view kTruncatedMark = "...[truncated]";
// Frames one symbolized stack may expand to: 1026 stored PCs (Go's maximum
// depth + 2) with a few inlined callers each stay far below it.
constexpr size_t kMaxStackFrames = 8192;
// Entries one pcvalue lookup decodes: a real function's table has about one
// per line change; a crafted one could otherwise run to the end of the data.
constexpr uint32_t kMaxPcvalueSteps = 1 << 18;
// The magic scan of a file without pclntab sections: how many candidates get
// the full check (a functab sort check, O(nfunc)) after the cheap header
// checks; a real file has one.
constexpr uint64_t kMaxScanFullChecks = 8;

// Checked loads: the integer at off in v, 0 when it is not all inside v.
inline uint8_t u8_at(ByteView v, uint64_t off) {
  uint8_t x = 0;
  v.read_u8(off, x);
  return x;
}
inline uint16_t u16_at(ByteView v, uint64_t off) {
  uint16_t x = 0;
  v.read_u16(off, x);
  return x;
}
inline uint32_t u32_at(ByteView v, uint64_t off) {
  uint32_t x = 0;
  v.read_u32(off, x);
  return x;
}
inline uint64_t u64_at(ByteView v, uint64_t off) {
  uint64_t x = 0;
  v.read_u64(off, x);
  return x;
}

// Cuts a name read from the table to kMaxReportedName bytes (marked).
std::string reported_name(std::string_view s) {
  if (s.size() <= kMaxReportedName) return std::string(s);
  std::string out(s.substr(0, kMaxReportedName));
  out += kTruncatedMark;
  return out;
}

// The fixed part of a pcHeader: magic, two zero pad bytes, minLC, ptrSize 8.
// False when h is shorter than the header.
bool header_sane(ByteView h) {
  if (!h.contains(0, kHeaderSize)) return false;
  const uint32_t magic = u32_at(h, 0);
  const uint8_t min_lc = u8_at(h, 6);
  return (magic == kMagic118 || magic == kMagic120) && u8_at(h, 4) == 0 && u8_at(h, 5) == 0 &&
         (min_lc == 1 || min_lc == 2 || min_lc == 4) && u8_at(h, 7) == 8;
}

// O(1) checks a scan candidate must pass before the full (O(nfunc)) check:
// the header is sane and its tables lie in the order the linker writes them
// (funcnametab, cutab, filetab, pctab, functab) inside `rest`, with room for
// the functab.
bool header_plausible(ByteView rest) {
  if (!header_sane(rest)) return false;
  uint64_t nfunc = 0, nfiles = 0, offs[5] = {};
  rest.read_u64(8, nfunc);
  rest.read_u64(16, nfiles);
  for (int k = 0; k < 5; ++k) rest.read_u64(32 + 8 * k, offs[k]);
  uint64_t prev = kHeaderSize;
  for (uint64_t o : offs) {
    if (o < prev || o > rest.size()) return false;
    prev = o;
  }
  const uint64_t functab_room = rest.size() - offs[4];
  return nfiles <= rest.size() && nfunc < functab_room / 8;
}

}  // namespace

// Internal helpers with access to GoPclntab's private state.
struct PclntabAccess {
  // The table bytes and the inline-tree bytes, as checked views.
  static ByteView data(const GoPclntab& t) { return t.data_; }
  static ByteView gofunc(const GoPclntab& t) { return t.gofunc_data_; }

  struct FuncRef {
    ByteView fn;  // the _func with its pcdata and funcdata offset arrays
    uint64_t entry = 0, end = 0;
    uint32_t npcdata = 0, nfuncdata = 0;
  };

  static size_t func_header_size(const GoPclntab& t) { return t.go120_plus() ? 44 : 40; }

  // The functab: nfunc + 1 entries {entryoff, funcoff} (init_header has
  // checked that they are inside the data; empty view otherwise).
  static ByteView ftab(const GoPclntab& t) {
    ByteView v;
    data(t).sub(t.pcln_offset_, (uint64_t(t.nfunc_) + 1) * 8, v);
    return v;
  }
  // ftab entry i's entryoff / funcoff; 0 outside the functab.
  static uint32_t ftab_entry(ByteView ftab, size_t i) { return u32_at(ftab, uint64_t(i) * 8); }
  static uint32_t ftab_funcoff(ByteView ftab, size_t i) { return u32_at(ftab, uint64_t(i) * 8 + 4); }

  // The _func of ftab entry i; none when it (with its offset arrays) is not
  // all inside the data.
  static std::optional<FuncRef> func_at_index(const GoPclntab& t, size_t i) {
    return func_at_index(t, ftab(t), i);
  }
  static std::optional<FuncRef> func_at_index(const GoPclntab& t, ByteView ft, size_t i) {
    if (i >= t.nfunc_) return std::nullopt;
    const ByteView d = data(t);
    const uint64_t off = t.pcln_offset_ + uint64_t(ftab_funcoff(ft, i));
    const size_t hs = func_header_size(t);
    ByteView head;
    if (!d.sub(off, hs, head)) return std::nullopt;
    FuncRef r;
    r.entry = t.text_start_ + ftab_entry(ft, i);
    r.end = t.text_start_ + ftab_entry(ft, i + 1);
    r.npcdata = u32_at(head, 28);
    r.nfuncdata = u8_at(head, hs - 1);
    if (!d.sub(off, hs + (uint64_t(r.npcdata) + r.nfuncdata) * 4, r.fn)) return std::nullopt;
    return r;
  }

  static std::optional<std::pair<FuncRef, size_t>> lookup(const GoPclntab& t, uint64_t pc) {
    if (t.nfunc_ == 0 || pc < t.text_start_) return std::nullopt;
    const ByteView ft = ftab(t);
    uint64_t rel = pc - t.text_start_;
    if (rel >= ftab_entry(ft, t.nfunc_) || rel > 0xffffffffull) return std::nullopt;
    uint32_t r = static_cast<uint32_t>(rel);
    // Last i in [0, nfunc) with entryoff[i] <= r.
    size_t lo = 0, hi = t.nfunc_;
    if (ftab_entry(ft, 0) > r) return std::nullopt;
    while (hi - lo > 1) {
      size_t mid = lo + (hi - lo) / 2;
      if (ftab_entry(ft, mid) <= r)
        lo = mid;
      else
        hi = mid;
    }
    auto f = func_at_index(t, ft, lo);
    if (!f) return std::nullopt;
    return std::make_pair(*f, lo);
  }

  // A fixed _func field (nameOff 4, pcfile 20, pcln 24, cuOffset 32, startLine 36).
  static uint32_t field(const GoPclntab&, const FuncRef& f, size_t off) { return u32_at(f.fn, off); }
  static uint32_t pcdata_off(const GoPclntab& t, const FuncRef& f, uint32_t idx) {
    if (idx >= f.npcdata) return 0;
    return u32_at(f.fn, func_header_size(t) + 4 * uint64_t(idx));
  }
  static std::optional<uint32_t> funcdata_off(const GoPclntab& t, const FuncRef& f, uint32_t idx) {
    if (idx >= f.nfuncdata) return std::nullopt;
    uint32_t v = 0;
    if (!f.fn.read_u32(func_header_size(t) + 4 * (uint64_t(f.npcdata) + idx), v) || v == 0xffffffffu)
      return std::nullopt;
    return v;
  }

  // NUL-terminated string at [base + off], bounded by the data (and kMaxNameLen).
  static std::string_view cstr(ByteView d, uint64_t base, uint64_t off) {
    const uint64_t p = base + off;
    ByteView s;
    if (p < base || p >= d.size() || !d.sub(p, std::min<uint64_t>(d.size() - p, kMaxNameLen), s)) return {};
    const char* c = reinterpret_cast<const char*>(s.data());
    return std::string_view(c, strnlen(c, s.size()));
  }
  static std::string_view name_at(const GoPclntab& t, uint32_t nameoff) {
    return cstr(data(t), t.funcname_offset_, nameoff);
  }

  // Reads a uvarint of at most 5 bytes (32 bits) at pos in d, advancing pos.
  static bool uvarint(ByteView d, uint64_t& pos, uint32_t& out) {
    uint32_t v = 0;
    for (int shift = 0; shift < 35; shift += 7) {
      uint8_t b;
      if (!d.read_u8(pos, b)) return false;
      ++pos;
      v |= uint32_t(b & 0x7f) << shift;
      if (!(b & 0x80)) {
        out = v;
        return true;
      }
    }
    return false;
  }

  // runtime.pcvalue: the value of table `tab` at target pc; -1 when absent.
  static int32_t pcvalue(const GoPclntab& t, const FuncRef& f, uint32_t tab, uint64_t target) {
    if (tab == 0) return -1;
    const ByteView d = data(t);
    uint64_t pos = t.pctab_offset_ + uint64_t(tab);
    uint64_t pc = f.entry;
    uint32_t val = static_cast<uint32_t>(-1);
    // Each step consumes >= 2 bytes, so this loop is bounded by the data size,
    // and by kMaxPcvalueSteps (the data may be hundreds of MiB).
    uint8_t b;
    for (uint32_t steps = 0; steps < kMaxPcvalueSteps && d.read_u8(pos, b); ++steps) {
      bool first = pc == f.entry;
      uint32_t uvdelta, pcdelta;
      if (b == 0 && !first) return -1;  // end of table
      if (b < 0x80) {
        uvdelta = b;
        ++pos;
      } else if (!uvarint(d, pos, uvdelta)) {
        return -1;
      }
      val += (-(uvdelta & 1)) ^ (uvdelta >> 1);
      if (d.read_u8(pos, b) && b < 0x80) {
        pcdelta = b;
        ++pos;
      } else if (!uvarint(d, pos, pcdelta)) {
        return -1;
      }
      pc += uint64_t(pcdelta) * t.min_lc_;
      if (target < pc) return static_cast<int32_t>(val);
    }
    return -1;
  }

  static std::string_view file_name(const GoPclntab& t, const FuncRef& f, int32_t fileno) {
    if (fileno < 0) return "?";
    uint64_t cu = field(t, f, 32);
    uint64_t idx = cu + uint64_t(uint32_t(fileno));
    uint32_t fo = 0;
    if (idx > 0xffffffffull || !data(t).read_u32(t.cu_offset_ + idx * 4, fo) || fo == 0xffffffffu) return "?";
    auto s = cstr(data(t), t.filetab_offset_, fo);
    return s.empty() ? std::string_view("?") : s;  // cut to kMaxReportedName by the caller
  }

  // runtime.funcline1 on the physical function.
  static void file_line(const GoPclntab& t, const FuncRef& f, uint64_t q, std::string_view& file,
                        int64_t& line) {
    int32_t fileno = pcvalue(t, f, field(t, f, 20), q);
    int32_t ln = pcvalue(t, f, field(t, f, 24), q);
    if (fileno == -1 || ln == -1) {
      file = "?";
      line = 0;
      return;
    }
    file = file_name(t, f, fileno);
    line = ln;
  }

  struct InlEntry {
    uint32_t name_off = 0;
    int32_t parent_pc = 0;
    int32_t start_line = 0;
  };
  static size_t inl_entry_size(const GoPclntab& t) { return t.go120_plus() ? 16 : 20; }

  // The inline tree of f: the gofunc bytes from its funcdata offset to the
  // end, if any (none when the offset is outside them).
  static std::optional<ByteView> inl_tree(const GoPclntab& t, const FuncRef& f) {
    if (!t.has_gofunc_) return std::nullopt;
    auto fd = funcdata_off(t, f, kFuncdataInlTree);
    const ByteView g = gofunc(t);
    ByteView tree;
    if (!fd || *fd >= g.size() || !g.sub(*fd, g.size() - *fd, tree)) return std::nullopt;
    return tree;
  }
  // Entry ix of an inline tree; none when it is not all inside the tree.
  static std::optional<InlEntry> inl_entry(const GoPclntab& t, ByteView tree, int32_t ix) {
    ByteView p;
    if (ix < 0 || !tree.element(uint64_t(ix), inl_entry_size(t), p)) return std::nullopt;
    InlEntry e;
    if (t.go120_plus()) {
      e.name_off = u32_at(p, 4);
      e.parent_pc = static_cast<int32_t>(u32_at(p, 8));
      e.start_line = static_cast<int32_t>(u32_at(p, 12));
    } else {
      e.name_off = u32_at(p, 12);
      e.parent_pc = static_cast<int32_t>(u32_at(p, 16));
      e.start_line = 0;
    }
    return e;
  }

  // Expands one stored pc. When next_stored is set, stops before an implied
  // caller whose pc+1 equals it (the next stored pc lists that frame itself).
  static void expand(const GoPclntab& t, uint64_t pc, std::optional<uint64_t> next_stored,
                     std::vector<GoFrame>& out) {
    auto lf = lookup(t, pc);
    if (!lf) return;
    const FuncRef& f = lf->first;
    uint64_t q = pc > f.entry ? pc - 1 : pc;
    auto tree = inl_tree(t, f);
    uint32_t inl_tab = pcdata_off(t, f, kPcdataInlTreeIndex);
    int32_t ix = tree ? pcvalue(t, f, inl_tab, q) : -1;
    for (int depth = 0;; ++depth) {
      GoFrame fr;
      std::string_view file;
      file_line(t, f, q, file, fr.line);
      fr.file = reported_name(file);
      fr.entry = f.entry;
      fr.pc = q;
      std::optional<InlEntry> e;
      if (ix >= 0 && depth < kMaxInlineDepth) e = inl_entry(t, *tree, ix);
      if (!e) {
        fr.function = reported_name(name_at(t, field(t, f, 4)));
        fr.start_line = t.go120_plus() ? static_cast<int32_t>(field(t, f, 36)) : 0;
        out.push_back(std::move(fr));
        return;
      }
      fr.function = reported_name(name_at(t, e->name_off));
      fr.start_line = e->start_line;
      fr.inlined = true;
      out.push_back(std::move(fr));
      uint64_t parent = f.entry + static_cast<uint64_t>(static_cast<int64_t>(e->parent_pc));
      if (next_stored && *next_stored == parent + 1) return;
      q = parent;
      ix = pcvalue(t, f, inl_tab, q);
    }
  }

  // Pointer-sized value at a link-time address in the file: the word itself, or
  // (PIE) the addend of the R_X86_64_RELATIVE relocation that fills it.
  struct Relocs {
    std::vector<std::pair<uint64_t, uint64_t>> rel;  // sorted (offset, addend)
    std::optional<uint64_t> at(uint64_t vaddr) const {
      auto it = std::lower_bound(rel.begin(), rel.end(), std::make_pair(vaddr, uint64_t(0)));
      if (it != rel.end() && it->first == vaddr) return it->second;
      return std::nullopt;
    }
  };
  static Relocs load_relocs(const ElfFile& elf) {
    Relocs r;
    for (const auto& s : elf.sections()) {
      if (s.type != SHT_RELA) continue;
      std::span<const uint8_t> d;
      try {
        d = elf.section_data(s);
      } catch (const ElfError&) {
        continue;
      }
      const ByteView v(d);
      ByteView e;
      for (size_t i = 0; v.element(i, 24, e); ++i) {  // Elf64_Rela {offset, info, addend}
        if ((u64_at(e, 8) & 0xffffffffu) != R_X86_64_RELATIVE) continue;
        r.rel.emplace_back(u64_at(e, 0), u64_at(e, 16));
      }
    }
    std::sort(r.rel.begin(), r.rel.end());
    return r;
  }
  static std::optional<uint64_t> ptr_at(const ElfFile& elf, const Relocs& rel, uint64_t vaddr) {
    auto b = elf.bytes_at_vaddr(vaddr, 8);
    uint64_t v = b ? u64_at(ByteView(*b), 0) : 0;
    if (v != 0) return v;
    if (auto a = rel.at(vaddr)) return a;
    if (b) return v;
    return std::nullopt;
  }

  // Candidate addresses of runtime.firstmoduledata: its first two words are
  // pcHeader and funcnametab.ptr = pcHeader + funcnameOffset.
  static std::vector<uint64_t> find_moduledata(const GoPclntab& t, const ElfFile& elf,
                                               const Relocs& rel) {
    std::vector<uint64_t> out;
    uint64_t ph = t.pcheader_vaddr_;
    if (ph == 0) return out;
    uint64_t fn = ph + t.funcname_offset_;
    for (const auto& [off, addend] : rel.rel) {
      if (addend != ph) continue;
      if (auto v = ptr_at(elf, rel, off + 8); v && *v == fn) out.push_back(off);
      if (out.size() >= 4) return out;
    }
    for (const auto& seg : elf.segments()) {
      if (seg.type != PT_LOAD || !(seg.flags & PF_W)) continue;
      auto whole = elf.bytes_at_vaddr(seg.vaddr, seg.filesz);
      if (!whole) continue;
      const ByteView w(*whole);
      // 8-aligned link-time addresses a = seg.vaddr + off, two words each.
      for (uint64_t off = (8 - (seg.vaddr & 7)) & 7; w.contains(off, 16); off += 8) {
        const uint64_t a = seg.vaddr + off;
        if (u64_at(w, off) == ph && u64_at(w, off + 8) == fn &&
            std::find(out.begin(), out.end(), a) == out.end()) {
          out.push_back(a);
          if (out.size() >= 4) return out;
        }
      }
    }
    return out;
  }

  // How plausible it is that gofunc = base: the fraction of sampled inline trees
  // whose entries decode sanely. Returns the number of good and checked trees.
  static std::pair<int, int> score_gofunc(const GoPclntab& t, ByteView bytes) {
    int good = 0, checked = 0;
    size_t es = inl_entry_size(t);
    size_t fnsize = t.cu_offset_ > t.funcname_offset_ ? t.cu_offset_ - t.funcname_offset_
                                                      : t.data_.size() - t.funcname_offset_;
    size_t step = std::max<size_t>(1, t.nfunc_ / 4000);
    for (size_t i = 0; i < t.nfunc_ && checked < 64; i += step) {
      auto f = func_at_index(t, i);
      if (!f) continue;
      auto fd = funcdata_off(t, *f, kFuncdataInlTree);
      if (!fd) continue;
      ++checked;
      ByteView p;
      if (!bytes.sub(*fd, es, p)) continue;
      uint32_t name_off;
      int32_t parent_pc;
      bool ok = true;
      if (t.go120_plus()) {
        name_off = u32_at(p, 4);
        parent_pc = static_cast<int32_t>(u32_at(p, 8));
        ok = u8_at(p, 1) == 0 && u8_at(p, 2) == 0 && u8_at(p, 3) == 0 &&
             static_cast<int32_t>(u32_at(p, 12)) > 0;
      } else {
        name_off = u32_at(p, 12);
        parent_pc = static_cast<int32_t>(u32_at(p, 16));
        int16_t parent = static_cast<int16_t>(u16_at(p, 0));
        ok = parent >= -1 && u8_at(p, 3) == 0 && static_cast<int32_t>(u32_at(p, 8)) > 0;
      }
      // The name starts a string of funcnametab: NUL before it, not empty.
      const ByteView d = data(t);
      uint8_t before = 1, first = 0;
      ok = ok && parent_pc >= 0 && uint64_t(parent_pc) < f->end - f->entry && name_off > 0 &&
           name_off < fnsize && d.read_u8(t.funcname_offset_ + name_off - 1, before) && before == 0 &&
           d.read_u8(t.funcname_offset_ + name_off, first) && first != 0;
      if (ok) ++good;
    }
    return {good, checked};
  }

  static std::optional<std::span<const uint8_t>> gofunc_bytes(const ElfFile& elf, uint64_t addr) {
    for (const auto& s : elf.segments()) {
      if (s.type != PT_LOAD || addr < s.vaddr || addr - s.vaddr >= s.filesz) continue;
      size_t len = static_cast<size_t>(s.filesz - (addr - s.vaddr));
      if (auto b = elf.bytes_at_vaddr(addr, len)) return *b;
    }
    return std::nullopt;
  }

  static bool good_score(std::pair<int, int> s) {
    return s.second == 0 || s.first * 10 >= s.second * 9;
  }
};

using A = PclntabAccess;

GoPclntab::GoPclntab(std::vector<uint8_t> data, uint64_t text_start, uint64_t pcheader_vaddr)
    : owned_(std::make_shared<const std::vector<uint8_t>>(std::move(data))),
      data_(owned_->data(), owned_->size()),
      text_start_(text_start),
      pcheader_vaddr_(pcheader_vaddr) {
  init_header();
}

GoPclntab::GoPclntab(View, std::span<const uint8_t> data, uint64_t text_start, uint64_t pcheader_vaddr)
    : data_(data), text_start_(text_start), pcheader_vaddr_(pcheader_vaddr) {
  init_header();
}

void GoPclntab::init_header() {
  const ByteView h(data_);
  if (!h.contains(0, kHeaderSize)) throw PclntabError("pclntab: too small for a pcHeader");
  magic_ = u32_at(h, 0);
  if (magic_ != kMagic118 && magic_ != kMagic120) {
    char buf[64];
    snprintf(buf, sizeof buf, "pclntab: unsupported magic 0x%08x", magic_);
    throw PclntabError(buf);
  }
  if (!header_sane(h)) throw PclntabError("pclntab: header sanity check failed");
  min_lc_ = u8_at(h, 6);
  uint64_t nfunc = u64_at(h, 8), nfiles = u64_at(h, 16);
  header_text_start_ = u64_at(h, 24);
  funcname_offset_ = u64_at(h, 32);
  cu_offset_ = u64_at(h, 40);
  filetab_offset_ = u64_at(h, 48);
  pctab_offset_ = u64_at(h, 56);
  pcln_offset_ = u64_at(h, 64);
  const uint64_t n = h.size();
  for (uint64_t off : {funcname_offset_, cu_offset_, filetab_offset_, pctab_offset_, pcln_offset_})
    if (off < kHeaderSize || off > n) throw PclntabError("pclntab: table offset out of range");
  if (nfunc > (n - pcln_offset_) / 8 || (nfunc + 1) * 8 > n - pcln_offset_)
    throw PclntabError("pclntab: functab (nfunc=" + std::to_string(nfunc) + ") exceeds data");
  if (nfiles > n) throw PclntabError("pclntab: nfiles out of range");
  nfunc_ = static_cast<size_t>(nfunc);
  nfiles_ = static_cast<size_t>(nfiles);
  // The functab must be sorted for binary search to be meaningful.
  const ByteView ft = A::ftab(*this);
  for (size_t i = 0; i < nfunc_; ++i)
    if (A::ftab_entry(ft, i) > A::ftab_entry(ft, i + 1))
      throw PclntabError("pclntab: functab not sorted at index " + std::to_string(i));
}

GoPclntab GoPclntab::from_elf(const ElfFile& elf, std::optional<uint64_t> text_start_override,
                              PclntabScanStats* stats) {
  try {
    return from_elf_impl(elf, text_start_override, stats);
  } catch (const ElfError& e) {
    throw PclntabError(std::string("pclntab: ") + e.what());
  }
}

GoPclntab GoPclntab::from_elf_impl(const ElfFile& elf, std::optional<uint64_t> text_start_override,
                                   PclntabScanStats* stats) {
  std::optional<std::span<const uint8_t>> bytes;
  uint64_t vaddr = 0;
  for (const char* name : {".gopclntab", ".data.rel.ro.gopclntab"}) {
    const auto* s = elf.section(name);
    if (!s || s->type == SHT_NOBITS) continue;
    auto d = elf.section_data(*s);
    if (!header_sane(ByteView(d))) continue;  // includes the size check
    bytes = d;
    vaddr = s->addr;
    break;
  }
  std::optional<GoPclntab> scanned;
  if (!bytes) {
    // Magic scan over the file-backed load segments, 8-byte aligned: cheap
    // O(1) checks on every position, the full check on a few (a file full of
    // plausible headers sharing one long functab made this quadratic).
    PclntabScanStats local;
    PclntabScanStats& st = stats ? *stats : local;
    elf.scan_loaded(8, kHeaderSize, [&](uint64_t a, std::span<const uint8_t> rest) {
      ++st.positions;
      const ByteView r(rest);
      if (u8_at(r, 7) != 8 || u8_at(r, 3) != 0xff || !header_plausible(r)) return false;
      if (++st.full_checks > kMaxScanFullChecks) return true;  // stop: budget spent
      try {
        scanned.emplace(GoPclntab(View{}, rest, 0, a));
        vaddr = a;
        return true;
      } catch (const PclntabError&) {
        return false;
      }
    });
    if (!scanned) {
      std::string why = st.full_checks > kMaxScanFullChecks
                            ? " (scan stopped after " + std::to_string(kMaxScanFullChecks) + " plausible candidates)"
                            : "";
      if (st.positions == 0 && !elf.io_error().empty()) why = " (" + elf.io_error() + ")";
      throw PclntabError(elf.label() + ": no Go pclntab found" + why);
    }
  }
  GoPclntab t = scanned ? std::move(*scanned) : GoPclntab(View{}, *bytes, 0, vaddr);
  t.pcheader_vaddr_ = vaddr;

  A::Relocs rel = A::load_relocs(elf);
  auto mods = A::find_moduledata(t, elf, rel);

  // Text start.
  std::optional<uint64_t> text = text_start_override;
  if (!text)
    if (auto s = elf.symbol("runtime.text"); s && s->value) text = s->value;
  if (!text && t.header_text_start_) text = t.header_text_start_;
  if (!text && vaddr)
    if (auto v = rel.at(vaddr + 24); v && *v) text = *v;
  if (!text)
    for (uint64_t m : mods)
      if (auto v = A::ptr_at(elf, rel, m + 176); v && *v) {
        text = *v;
        break;
      }
  if (!text)
    if (const auto* s = elf.section(".text")) text = s->addr;
  if (!text) throw PclntabError(elf.label() + ": cannot determine the text start");
  t.text_start_ = *text;

  // gofunc: the symbol, else moduledata.gofunc, validated against inline trees.
  std::vector<uint64_t> cands;
  for (const char* name : {"go:func.*", "go.func.*"})
    if (auto s = elf.symbol(name); s && s->value) cands.push_back(s->value);
  for (uint64_t m : mods) {
    // moduledata.gofunc: 304 (1.18/1.19), 320 (1.20–1.26), 344 (1.27+).
    static constexpr uint64_t kOffs120[] = {320, 344, 304}, kOffs118[] = {304, 320};
    std::span<const uint64_t> offs = t.go120_plus() ? std::span<const uint64_t>(kOffs120)
                                                    : std::span<const uint64_t>(kOffs118);
    for (uint64_t o : offs)
      if (auto v = A::ptr_at(elf, rel, m + o); v && *v) cands.push_back(*v);
  }
  for (const char* name : {".go.func", ".data.rel.ro.go.func"})
    if (const auto* s = elf.section(name); s && s->addr) cands.push_back(s->addr);
  for (uint64_t c : cands) {
    auto b = A::gofunc_bytes(elf, c);
    if (!b) continue;
    auto sc = A::score_gofunc(t, *b);
    if (sc.second > 0 && A::good_score(sc)) {
      t.set_gofunc(elf, c);
      break;
    }
  }
  return t;
}

bool GoPclntab::set_gofunc(const ElfFile& elf, uint64_t link_time_addr) {
  auto b = A::gofunc_bytes(elf, link_time_addr);
  if (!b) return false;
  gofunc_owned_.reset();
  gofunc_ = link_time_addr;
  gofunc_data_ = *b;
  has_gofunc_ = true;
  return true;
}

void GoPclntab::set_gofunc(uint64_t link_time_addr, std::vector<uint8_t> bytes) {
  gofunc_owned_ = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  gofunc_ = link_time_addr;
  gofunc_data_ = ByteView(gofunc_owned_->data(), gofunc_owned_->size());
  has_gofunc_ = true;
}

std::optional<GoPclntab::Func> GoPclntab::find_func(uint64_t pc) const {
  auto lf = A::lookup(*this, pc);
  if (!lf) return std::nullopt;
  return Func{lf->first.entry, lf->first.end, reported_name(A::name_at(*this, A::field(*this, lf->first, 4)))};
}

std::optional<GoPclntab::Func> GoPclntab::find_func_by_name(std::string_view name) const {
  const ByteView ft = A::ftab(*this);
  for (size_t i = 0; i < nfunc_; ++i) {
    auto f = A::func_at_index(*this, ft, i);
    if (!f) continue;
    if (A::name_at(*this, A::field(*this, *f, 4)) == name) return Func{f->entry, f->end, std::string(name)};
  }
  return std::nullopt;
}

std::optional<GoPclntab::FrameInfo> GoPclntab::frame_info(uint64_t pc) const {
  auto lf = A::lookup(*this, pc);
  if (!lf) return std::nullopt;
  const auto& f = lf->first;
  // _func: pcsp at 16 in both layouts; funcID and flag at 36/37 (1.18/1.19)
  // or 40/41 (1.20+, after startLine).
  int32_t delta = A::pcvalue(*this, f, A::field(*this, f, 16), pc);
  if (delta < 0) return std::nullopt;
  FrameInfo out;
  out.entry = f.entry;
  out.end = f.end;
  out.sp_delta = delta;
  out.func_id = u8_at(f.fn, go120_plus() ? 40 : 36);
  if (out.func_id != 0 && A::inl_tree(*this, f)) {
    const uint64_t q = pc > f.entry ? pc - 1 : pc;
    out.in_inlined_body = A::pcvalue(*this, f, A::pcdata_off(*this, f, kPcdataInlTreeIndex), q) >= 0;
  }
  const uint8_t flag = u8_at(f.fn, go120_plus() ? 41 : 37);
  out.top_frame = (flag & 1) != 0;  // FuncFlag_TOPFRAME = 1 << 0
  out.assembly = (flag & 4) != 0;   // FuncFlag_ASM = 1 << 2 (1.19 and later)
  return out;
}

std::vector<GoFrame> GoPclntab::frames_for_pc(uint64_t pc) const {
  std::vector<GoFrame> out;
  A::expand(*this, pc, std::nullopt, out);
  return out;
}

std::vector<GoFrame> GoPclntab::symbolize_stack(std::span<const uint64_t> pcs) const {
  std::vector<GoFrame> out;
  out.reserve(pcs.size() + 4);
  for (size_t i = 0; i < pcs.size(); ++i) {
    std::optional<uint64_t> next;
    if (i + 1 < pcs.size()) next = pcs[i + 1];
    A::expand(*this, pcs[i], next, out);
    if (out.size() > kMaxStackFrames) {
      // Deep stacks times crafted inline chains: keep the leaf end, say so.
      out.resize(kMaxStackFrames);
      GoFrame cut;
      cut.function = "[frames truncated]";
      cut.file = "?";
      out.push_back(std::move(cut));
      break;
    }
  }
  return out;
}

std::vector<uint64_t> GoPclntab::expand_final_inline_frame(std::span<const uint64_t> pcs) const {
  std::vector<uint64_t> out(pcs.begin(), pcs.end());
  if (pcs.empty()) return out;
  uint64_t pc = pcs.back();
  if (pc == 0) return out;
  uint64_t tracepc = pc - 1;
  auto lf = A::lookup(*this, tracepc);
  if (!lf) return out;
  const auto& f = lf->first;
  auto tree = A::inl_tree(*this, f);
  if (!tree) return out;
  uint32_t tab = A::pcdata_off(*this, f, kPcdataInlTreeIndex);
  int32_t ix = A::pcvalue(*this, f, tab, tracepc);
  if (ix < 0) return out;
  out.pop_back();
  uint64_t q = tracepc;
  for (int depth = 0; depth <= kMaxInlineDepth; ++depth) {
    out.push_back(q + 1);
    if (ix < 0) break;
    auto e = A::inl_entry(*this, *tree, ix);
    if (!e) break;
    q = f.entry + static_cast<uint64_t>(static_cast<int64_t>(e->parent_pc));
    ix = A::pcvalue(*this, f, tab, q);
  }
  return out;
}

}  // namespace oomsnap
