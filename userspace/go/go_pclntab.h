// Go's pclntab (runtime.pcHeader and the tables after it): function lookup by
// PC, names, file:line and the inline tree, for Go 1.18–1.27 (magic 0xfffffff0
// and 0xfffffff1). All addresses here are LINK-TIME addresses: callers subtract
// the load bias from runtime PCs first. Malformed tables throw PclntabError at
// construction; lookups on bad offsets return empty results, never crash.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "base/checked_bytes.h"

namespace oomsnap {
class ElfFile;

class PclntabError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct GoFrame {
  std::string function;  // "main.leak", "runtime.mallocgc"
  std::string file;      // "/src/main.go", "?" if unknown
  int64_t line = 0;
  int64_t start_line = 0;  // the function's first line (0 when unknown, i.e. Go < 1.20)
  uint64_t entry = 0;      // entry of the PHYSICAL function containing the pc
  uint64_t pc = 0;         // the pc this frame was resolved at (call pc, i.e. stored pc - 1)
  bool inlined = false;    // true for frames inlined into their caller
};

// Work done by the magic scan for a pclntab in a file without its sections.
struct PclntabScanStats {
  uint64_t positions = 0;    // 8-aligned positions looked at (O(1) each)
  uint64_t full_checks = 0;  // candidates given the full O(nfunc) check (capped)
};

class GoPclntab {
 public:
  // data: bytes from the pcHeader to the end of the tables (copied).
  // text_start: link-time address of runtime.text (= moduledata.text − load bias).
  // pcheader_vaddr: link-time address of the pcHeader (0 when unknown).
  GoPclntab(std::vector<uint8_t> data, uint64_t text_start, uint64_t pcheader_vaddr = 0);

  // Finds the table in the ELF (.gopclntab, .data.rel.ro.gopclntab, or a magic scan
  // with header sanity checks) and the text start (the runtime.text symbol; else
  // pcHeader.textStart when non-zero in the file; else the .text section).
  // text_start_override wins when given (e.g. read from the live moduledata).
  // The table VIEWS the ElfFile's mapped bytes (copying MBs of pclntab cost more
  // than the whole bucket walk): the ElfFile must outlive it and its copies.
  // Function and file names longer than 4 KiB are cut and marked
  // "...[truncated]"; a symbolized stack stops at 8192 frames (then one
  // "[frames truncated]" frame).
  static GoPclntab from_elf(const ElfFile& elf, std::optional<uint64_t> text_start_override = std::nullopt,
                            PclntabScanStats* stats = nullptr);

  uint32_t magic() const { return magic_; }
  bool go120_plus() const { return magic_ == 0xfffffff1u; }
  uint64_t text_start() const { return text_start_; }
  uint64_t pcheader_vaddr() const { return pcheader_vaddr_; }
  uint64_t funcname_offset() const { return funcname_offset_; }
  // The textStart field as stored in the header (0 in 1.26+ and in PIE files).
  uint64_t header_text_start() const { return header_text_start_; }
  size_t nfunc() const { return nfunc_; }

  struct Func {
    uint64_t entry = 0;  // link-time
    uint64_t end = 0;    // entry of the next function
    std::string name;
  };
  // The physical function whose [entry, end) holds pc.
  std::optional<Func> find_func(uint64_t pc) const;
  // Linear search by exact name (used for stripped-binary recovery).
  std::optional<Func> find_func_by_name(std::string_view name) const;

  // What an unwinder needs at one PC (runtime.funcspdelta and the _func
  // flags): the physical function, the SP delta from the pcsp table (bytes
  // the function has pushed below its caller's SP, return address excluded)
  // and whether unwinding stops there (FuncFlag_TOPFRAME: runtime.goexit,
  // mstart, ...). nullopt when pc is in no function or pcsp has no value.
  struct FrameInfo {
    uint64_t entry = 0, end = 0;
    int32_t sp_delta = 0;
    bool top_frame = false;
    bool assembly = false;  // FuncFlag_ASM: may keep its frame pointer its own way
    // _func.funcID (abi.FuncID): its numbering moves between Go versions
    // (go_func_id_wrapper says where FuncIDWrapper is).
    uint8_t func_id = 0;
    // pc (a return pc: pc - 1 is looked up, unless pc is the entry) lies in a
    // body inlined into this function. Decoded only for functions with a
    // special funcID (func_id != 0: wrappers, runtime entry points), false
    // for the others.
    bool in_inlined_body = false;
  };
  std::optional<FrameInfo> frame_info(uint64_t pc) const;

  // The frames of ONE stored (return) PC, expanded through the inline tree the way
  // runtime.CallersFrames expands a single-PC slice: innermost first, then each
  // inlined-into caller, ending with the physical function. Empty if unknown.
  std::vector<GoFrame> frames_for_pc(uint64_t pc) const;

  // A whole stored stack (leaf first) symbolized like runtime.CallersFrames:
  // each PC expands its inline chain, but an implied caller is skipped when the
  // next stored PC is that caller's own (logical stacks already list it).
  std::vector<GoFrame> symbolize_stack(std::span<const uint64_t> pcs) const;

  // runtime_expandFinalInlineFrame: if the last stored PC is inside an inlined
  // body whose callers were cut off by the depth limit, append the fake PCs of
  // the missing callers (parentPc + 1 style), as runtime/pprof does.
  std::vector<uint64_t> expand_final_inline_frame(std::span<const uint64_t> pcs) const;

  // funcdata (the inline tree) is addressed relative to moduledata.gofunc
  // ("go:func.*"; "go.func.*" in 1.19). from_elf finds it from the symbol, or in
  // stripped files from runtime.firstmoduledata in the file (non-PIE words or PIE
  // R_X86_64_RELATIVE addends), validated against the inline trees. Without it,
  // inlined frames are not expanded (only physical functions are reported).
  // set_gofunc overrides it, e.g. with moduledata.gofunc read from the live process
  // minus the load bias; the bytes are viewed in the ELF file. Returns false (and
  // changes nothing) when the address is not file-backed in elf.
  bool set_gofunc(const ElfFile& elf, uint64_t link_time_addr);
  // Raw variant (tests/fuzzing): bytes = memory from link_time_addr onwards.
  void set_gofunc(uint64_t link_time_addr, std::vector<uint8_t> bytes);
  std::optional<uint64_t> gofunc() const {
    return has_gofunc_ ? std::optional<uint64_t>(gofunc_) : std::nullopt;
  }

 private:
  // Owned bytes (vector constructor, raw set_gofunc) are shared between copies,
  // so the views below stay valid when a table is copied or moved. Every load
  // from the table and the inline trees goes through these checked views.
  std::shared_ptr<const std::vector<uint8_t>> owned_, gofunc_owned_;
  ByteView data_;
  uint32_t magic_ = 0;
  uint64_t text_start_ = 0, pcheader_vaddr_ = 0, header_text_start_ = 0;
  size_t nfunc_ = 0, nfiles_ = 0;
  uint64_t funcname_offset_ = 0, cu_offset_ = 0, filetab_offset_ = 0, pctab_offset_ = 0,
           pcln_offset_ = 0;
  uint32_t min_lc_ = 1;
  bool has_gofunc_ = false;
  uint64_t gofunc_ = 0;
  ByteView gofunc_data_;
  struct View {};
  GoPclntab(View, std::span<const uint8_t> data, uint64_t text_start, uint64_t pcheader_vaddr);
  void init_header();
  static GoPclntab from_elf_impl(const ElfFile& elf, std::optional<uint64_t> text_start_override,
                                 PclntabScanStats* stats);
  // helpers implemented in go_pclntab.cpp
  friend struct PclntabAccess;
};

}  // namespace oomsnap
