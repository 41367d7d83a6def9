// Recovering runtime.mbuckets and runtime.MemProfileRate from stripped Go
// binaries (amd64). See go_stripped.h.
//
// Rules (checked against go1.19.8, 1.21.13, 1.22.12, 1.23.5, 1.24.4, 1.25.12,
// 1.26.10, 1.27.3; default, pie, -s -w and pie -s -w builds):
//
// mbuckets (an 8-byte pointer in .bss):
//   In runtime.mProf_FlushLocked, and independently in runtime.memProfileInternal
//   (1.23+; else runtime.MemProfile, <= 1.22), the FIRST `mov r64, qword ptr [rip+d]`
//   whose target lies in .bss, before the first direct call to
//   runtime.(*bucket).mp, is the load of the list head
//   (`for b := mbuckets.Load(); b != nil; b = b.allnext { mp := b.mp() ...`).
//   Every reader that exists must call (*bucket).mp (when pclntab has it; this
//   also catches a wrong text start) and yield a candidate; all must agree.
//
// MemProfileRate (an 8-byte int; .noptrbss in 1.19/1.20, .noptrdata in 1.21+):
//   runtime.allocmcache (c.nextSample = nextSample()) and runtime.profilealloc
//   both call runtime.fastexprand(MemProfileRate) (nextSample inlined). The LAST
//   `mov r64, qword ptr [rip+d]` into a data section before the first direct
//   call to runtime.fastexprand is the MemProfileRate load. Both functions exist
//   in every version; all candidates must agree. When fastexprand cannot be
//   resolved, allocmcache's only qword RIP-relative data load is used instead
//   (it has exactly one in every version). A target in a file-backed section
//   must hold the static initializer 512*1024.
//
// Anything else (missing functions, undecodable code, disagreement, a target in
// the wrong section) leaves the global unset and explains why in `error`.
#include "go/go_stripped.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <iterator>
#include <set>
#include <span>
#include <sstream>
#include <vector>

#include "base/text.h"
#include "elf/elf_file.h"
#include "elf/x86_code.h"
#include "go/go_buildinfo.h"
#include "go/go_contention_reader.h"
#include "go/go_pclntab.h"

namespace oomsnap {
namespace {

constexpr int64_t kDefaultMemProfileRate = 512 * 1024;
// Runtime functions are a few hundred bytes; anything huge is a broken table.
constexpr uint64_t kMaxFuncSize = 1 << 20;

struct Region {
  std::string name;
  uint64_t addr = 0, size = 0;
  bool file_backed = false;
  bool contains(uint64_t a, uint64_t len) const {
    return a >= addr && a - addr <= size && size - (a - addr) >= len;
  }
};

// A global's address as one reader function's code names it.
struct Cand {
  std::string fn;
  uint64_t addr;
};

class Recoverer {
 public:
  Recoverer(const ElfFile& elf, const GoPclntab& pcln, const GoVersion& ver)
      : elf_(elf), pcln_(pcln), ver_(ver) {
    for (const auto& s : elf.sections()) {
      if (s.name == ".noptrdata" || s.name == ".data" || s.name == ".bss" || s.name == ".noptrbss") {
        regions_.push_back({s.name, s.addr, s.size, s.type != 8 /* SHT_NOBITS */});
      }
    }
  }

  const Region* region_of(uint64_t addr, uint64_t len = 8) const {
    for (const auto& r : regions_)
      if (r.contains(addr, len)) return &r;
    return nullptr;
  }
  bool has_region(std::string_view name) const {
    return std::any_of(regions_.begin(), regions_.end(), [&](const Region& r) { return r.name == name; });
  }

  // Code of a function by name: nullopt + note when absent or unreadable.
  struct Code {
    uint64_t entry = 0;
    std::vector<Insn> insns;
  };
  std::optional<Code> code_of(std::string_view name, std::string* why) const {
    auto f = pcln_.find_func_by_name(name);
    if (!f) {
      if (why) *why = std::string(name) + " not in pclntab";
      return std::nullopt;
    }
    if (f->end <= f->entry || f->end - f->entry > kMaxFuncSize) {
      if (why) *why = std::string(name) + ": implausible bounds";
      return std::nullopt;
    }
    auto bytes = elf_.bytes_at_vaddr(f->entry, f->end - f->entry);
    if (!bytes) {
      if (why) *why = std::string(name) + ": code not file-backed";
      return std::nullopt;
    }
    Code c;
    c.entry = f->entry;
    c.insns = dis_.decode(f->entry, *bytes);
    if (c.insns.empty()) {
      if (why) *why = std::string(name) + ": undecodable code";
      return std::nullopt;
    }
    return c;
  }

  bool disassembler_ok() const { return dis_.ok(); }

  std::optional<uint64_t> mbuckets(std::string& err) const {
    if (!has_region(".bss")) {
      err = "mbuckets: no .bss section header";
      return std::nullopt;
    }
    std::vector<Cand> cands;
    std::vector<std::string> notes;
    // The second reader: memProfileInternal (1.23+; MemProfile is then a thin
    // wrapper without the load), else MemProfile (<= 1.22).
    const char* second = pcln_.find_func_by_name("runtime.memProfileInternal")
                             ? "runtime.memProfileInternal"
                             : "runtime.MemProfile";
    std::optional<uint64_t> bucket_mp;
    if (auto f = pcln_.find_func_by_name("runtime.(*bucket).mp")) bucket_mp = f->entry;
    for (const char* fn : {"runtime.mProf_FlushLocked", second}) {
      std::string why;
      auto code = code_of(fn, &why);
      if (!code) {
        notes.push_back(why);
        continue;
      }
      std::optional<uint64_t> hit;
      bool calls_mp = false;
      for (const auto& in : code->insns) {
        if (in.kind == Insn::kCall && bucket_mp && in.target == *bucket_mp) {
          calls_mp = true;
          break;
        }
        if (hit || in.kind != Insn::kLoad64) continue;
        const Region* r = region_of(in.target);
        if (r && r->name == ".bss") hit = in.target;
      }
      if (bucket_mp && !calls_mp) {
        // Every reader walks the list calling b.mp(); no such call means the
        // code does not match the table (wrong text start?) or the code changed.
        err = std::string("mbuckets: ") + fn + " does not call runtime.(*bucket).mp";
        return std::nullopt;
      }
      if (!hit) {
        err = std::string("mbuckets: ") + fn + " has no qword RIP-relative load from .bss";
        return std::nullopt;
      }
      cands.push_back({fn, *hit});
    }
    if (!agree("mbuckets", cands, notes, err)) return std::nullopt;
    if (cands[0].addr % 8 != 0) {
      err = "mbuckets: candidate " + hex(cands[0].addr) + " is not 8-byte aligned";
      return std::nullopt;
    }
    return cands[0].addr;
  }

  std::optional<uint64_t> mem_profile_rate(std::string& err) const {
    if (regions_.empty()) {
      err = "MemProfileRate: no data section headers";
      return std::nullopt;
    }
    std::optional<uint64_t> fastexprand;
    if (auto f = pcln_.find_func_by_name("runtime.fastexprand")) fastexprand = f->entry;

    std::vector<Cand> cands;
    std::vector<std::string> notes;
    for (const char* fn : {"runtime.allocmcache", "runtime.profilealloc"}) {
      std::string why;
      auto code = code_of(fn, &why);
      if (!code) {
        notes.push_back(why);
        continue;
      }
      std::optional<uint64_t> hit;
      if (fastexprand) {
        std::optional<uint64_t> last_load;
        bool called = false;
        for (const auto& in : code->insns) {
          if (in.kind == Insn::kCall && in.target == *fastexprand) {
            called = true;
            break;
          }
          if (in.kind == Insn::kLoad64 && region_of(in.target)) last_load = in.target;
        }
        if (!called) {
          err = std::string("MemProfileRate: ") + fn + " does not call runtime.fastexprand";
          return std::nullopt;
        }
        hit = last_load;
      } else if (std::string_view(fn) == "runtime.allocmcache") {
        std::set<uint64_t> targets;
        for (const auto& in : code->insns)
          if (in.kind == Insn::kLoad64 && region_of(in.target)) targets.insert(in.target);
        if (targets.size() > 1) {
          err = "MemProfileRate: runtime.fastexprand unknown and allocmcache loads " +
                std::to_string(targets.size()) + " data words";
          return std::nullopt;
        }
        if (targets.size() == 1) hit = *targets.begin();
      } else {
        continue;  // profilealloc needs the fastexprand anchor
      }
      if (!hit) {
        err = std::string("MemProfileRate: ") + fn + " has no qword RIP-relative data load";
        return std::nullopt;
      }
      cands.push_back({fn, *hit});
    }
    if (!agree("MemProfileRate", cands, notes, err)) return std::nullopt;
    const uint64_t addr = cands[0].addr;
    const Region* r = region_of(addr);
    if (!r || addr % 8 != 0) {
      err = "MemProfileRate: candidate " + hex(addr) + " misaligned or outside data";
      return std::nullopt;
    }
    // 1.19/1.20 compute it at init (defaultMemProfileRate): zero-initialized,
    // so a BSS section. 1.21+ have a static initializer: .noptrdata.
    if (ver_.major == 1 && ver_.minor >= 21 && !r->file_backed) {
      err = "MemProfileRate: candidate " + hex(addr) + " in " + r->name + ", expected initialized data for " +
            ver_.text;
      return std::nullopt;
    }
    if (ver_.major == 1 && ver_.minor > 0 && ver_.minor < 21 && r->file_backed) {
      err = "MemProfileRate: candidate " + hex(addr) + " in " + r->name + ", expected bss for " + ver_.text;
      return std::nullopt;
    }
    if (r->file_backed) {
      auto b = elf_.bytes_at_vaddr(addr, 8);
      if (!b || b->size() != 8) {
        err = "MemProfileRate: cannot read initializer at " + hex(addr);
        return std::nullopt;
      }
      int64_t v = 0;
      std::memcpy(&v, b->data(), 8);
      if (v != kDefaultMemProfileRate) {
        err = "MemProfileRate: candidate " + hex(addr) + " holds " + std::to_string(v) + ", not 524288";
        return std::nullopt;
      }
    }
    return addr;
  }

  // &runtime.mProfCycle (a uint32: the cycle << 1 | flushed). mProf_Flush's
  // setFlushed reads it and compare-and-swaps it: the one zero-initialized
  // address it both loads as a dword and takes the address of, in every
  // version 1.19–1.27. mProf_PostSweep's first dword load from those sections
  // must name it too (cycle := mProfCycle.read() + 1, its first global).
  std::optional<uint64_t> mprof_cycle(std::string& err) const {
    std::string why;
    auto flush = code_of("runtime.mProf_Flush", &why);
    if (!flush) {
      err = "mProfCycle: " + why;
      return std::nullopt;
    }
    std::set<uint64_t> loaded, addressed;
    for (const auto& in : flush->insns) {
      const Region* r = region_of(in.target, 4);
      if (!r || (r->name != ".bss" && r->name != ".noptrbss")) continue;
      if (in.kind == Insn::kLoad32) loaded.insert(in.target);
      if (in.kind == Insn::kLea) addressed.insert(in.target);
    }
    std::vector<uint64_t> both;
    std::set_intersection(loaded.begin(), loaded.end(), addressed.begin(), addressed.end(),
                          std::back_inserter(both));
    if (both.size() != 1 || both[0] % 4) {
      err = "mProfCycle: runtime.mProf_Flush loads and addresses " + std::to_string(both.size()) +
            " aligned zero-initialized dwords, not one";
      return std::nullopt;
    }
    auto sweep = code_of("runtime.mProf_PostSweep", &why);
    if (!sweep) {
      err = "mProfCycle: " + why;
      return std::nullopt;
    }
    for (const auto& in : sweep->insns) {
      if (in.kind != Insn::kLoad32) continue;
      const Region* r = region_of(in.target, 4);
      if (!r || (r->name != ".bss" && r->name != ".noptrbss")) continue;
      if (in.target == both[0]) return both[0];
      break;
    }
    err = "mProfCycle: runtime.mProf_PostSweep does not read mProf_Flush's " + hex(both[0]) + " first";
    return std::nullopt;
  }

  // runtime.allglen and runtime.allgptr (the goroutine census). forEachGRace
  // (atomicAllG inlined) loads allglen, then allgptr: its first two qword
  // RIP-relative loads from .bss/.noptrbss, in that order, in every version
  // 1.19–1.27.
  // allgadd must take the address of both (atomic stores of the new length
  // and of &allgs[0]): a second, independent witness.
  bool allgs(uint64_t& allglen, uint64_t& allgptr, std::string& err) const {
    std::string why;
    auto each = code_of("runtime.forEachGRace", &why);
    if (!each) {
      err = "allglen/allgptr: " + why;
      return false;
    }
    std::vector<uint64_t> loads;
    for (const auto& in : each->insns) {
      if (in.kind != Insn::kLoad64) continue;
      const Region* r = region_of(in.target);
      // allglen is pointer-free (.noptrbss), allgptr a pointer (.bss).
      if (r && (r->name == ".bss" || r->name == ".noptrbss")) loads.push_back(in.target);
      if (loads.size() == 2) break;
    }
    if (loads.size() != 2 || loads[0] == loads[1] || loads[0] % 8 || loads[1] % 8) {
      err = "allglen/allgptr: runtime.forEachGRace does not load two distinct zero-initialized words";
      return false;
    }
    auto add = code_of("runtime.allgadd", &why);
    if (!add) {
      err = "allglen/allgptr: " + why;
      return false;
    }
    bool len_seen = false, ptr_seen = false;
    for (const auto& in : add->insns) {
      if (in.kind != Insn::kLea) continue;
      len_seen |= in.target == loads[0];
      ptr_seen |= in.target == loads[1];
    }
    if (!len_seen || !ptr_seen) {
      err = "allglen/allgptr: runtime.allgadd does not store to forEachGRace's " + hex(loads[0]) + "/" +
            hex(loads[1]);
      return false;
    }
    allglen = loads[0];
    allgptr = loads[1];
    return true;
  }

  // The first qword RIP-relative load in the first of fns that exists whose
  // target lies in one of the zero-initialized data sections.
  std::optional<uint64_t> first_bss_load(std::initializer_list<const char*> fns, const char* what,
                                         std::string& err) const {
    return first_bss_ref(fns, what, Insn::kLoad64, err);
  }

  // One global from witnesses that each take its address or a field's (a
  // LEA: the receiver or a *sysMemStat argument): the first .bss/.noptrbss
  // address each takes, less the field's offset. Every witness must exist
  // and all must agree.
  struct LeaWitness {
    const char* fn;
    uint64_t field_offset;
  };
  std::optional<uint64_t> lea_witnesses(const char* what, std::initializer_list<LeaWitness> witnesses,
                                        std::string& err) const {
    std::vector<Cand> cands;
    for (const LeaWitness& w : witnesses) {
      auto a = first_bss_ref({w.fn}, what, Insn::kLea, err);
      if (!a) return std::nullopt;
      if (*a < w.field_offset) {
        err = std::string(what) + ": " + w.fn + " takes " + hex(*a) + ", below its field's offset";
        return std::nullopt;
      }
      cands.push_back({w.fn, *a - w.field_offset});
    }
    if (!agree(what, cands, {}, err)) return std::nullopt;
    return cands[0].addr;
  }

 private:
  std::optional<uint64_t> first_bss_ref(std::initializer_list<const char*> fns, const char* what, Insn::Kind kind,
                                        std::string& err) const {
    std::string notes;
    for (const char* fn : fns) {
      if (!pcln_.find_func_by_name(fn)) {
        notes += std::string(notes.empty() ? "" : ", ") + fn + " not in pclntab";
        continue;
      }
      std::string why;
      auto code = code_of(fn, &why);
      if (!code) {
        err = std::string(what) + ": " + why;
        return std::nullopt;
      }
      const char* const verb = kind == Insn::kLea ? "takes" : "loads";
      for (const auto& in : code->insns) {
        if (in.kind != kind) continue;
        const Region* r = region_of(in.target);
        if (!r || (r->name != ".bss" && r->name != ".noptrbss")) continue;
        if (in.target % 8 != 0) {
          err = std::string(what) + ": " + fn + " " + verb + " misaligned " + hex(in.target);
          return std::nullopt;
        }
        return in.target;
      }
      err = std::string(what) + ": " + fn + " has no " +
            (kind == Insn::kLea ? "RIP-relative address" : "qword RIP-relative load") + " of .bss/.noptrbss";
      return std::nullopt;
    }
    err = std::string(what) + ": no reader function (" + notes + ")";
    return std::nullopt;
  }

  static std::string describe(const std::string& fn, uint64_t a) { return fn + "→" + hex(a); }

  // Every reader that exists must name the same global; none, or any two
  // that differ, is an error (never a guess).
  static bool agree(const char* what, const std::vector<Cand>& cands, const std::vector<std::string>& notes,
                    std::string& err) {
    if (cands.empty()) {
      err = std::string(what) + ": no candidate function (" + join(notes, "; ") + ")";
      return false;
    }
    for (const auto& c : cands) {
      if (c.addr != cands[0].addr) {
        err = std::string(what) + ": candidates disagree (" + describe(cands[0].fn, cands[0].addr) + " vs " +
              describe(c.fn, c.addr) + ")";
        return false;
      }
    }
    return true;
  }
  const ElfFile& elf_;
  const GoPclntab& pcln_;
  const GoVersion& ver_;
  std::vector<Region> regions_;
  Disassembler dis_;
};

}  // namespace

GoGlobalsRecovery recover_go_globals(const ElfFile& elf, const GoPclntab& pclntab,
                                     const GoVersion& version) {
  GoGlobalsRecovery out;
  try {
    Recoverer rec(elf, pclntab, version);
    if (!rec.disassembler_ok()) {
      out.error = "capstone: cannot open x86-64 disassembler";
      return out;
    }
    std::string e1, e2;
    out.mbuckets = rec.mbuckets(e1);
    out.mem_profile_rate = rec.mem_profile_rate(e2);
    out.mprof_cycle = rec.mprof_cycle(out.mprof_cycle_error);
    if (!e1.empty()) out.error = e1;
    if (!e2.empty()) out.error += (out.error.empty() ? "" : "; ") + e2;
  } catch (const std::exception& e) {
    out = {};
    out.error = std::string("stripped-binary recovery failed: ") + e.what();
  }
  return out;
}

GoAllgsRecovery recover_go_allgs(const ElfFile& elf, const GoPclntab& pclntab, const GoVersion& version) {
  GoAllgsRecovery out;
  try {
    Recoverer rec(elf, pclntab, version);
    if (!rec.disassembler_ok()) {
      out.error = "capstone: cannot open x86-64 disassembler";
      return out;
    }
    uint64_t len = 0, ptr = 0;
    if (rec.allgs(len, ptr, out.error)) {
      out.allglen = len;
      out.allgptr = ptr;
    }
  } catch (const std::exception& e) {
    out.error = std::string("stripped-binary recovery failed: ") + e.what();
  }
  return out;
}

namespace {

// Runs body(rec, out) with a Recoverer: no disassembler, or an exception
// from the reading, becomes out.error (and nothing else of out).
template <typename Out, typename Body>
Out recover_with(const ElfFile& elf, const GoPclntab& pclntab, const GoVersion& version, Body body) {
  Out out;
  try {
    Recoverer rec(elf, pclntab, version);
    if (!rec.disassembler_ok()) {
      out.error = "capstone: cannot open x86-64 disassembler";
      return out;
    }
    body(rec, out);
  } catch (const std::exception& ex) {
    out = {};
    out.error = std::string("stripped-binary recovery failed: ") + ex.what();
  }
  return out;
}

void add_error(std::string& to, const std::string& e) {
  if (!e.empty()) to += (to.empty() ? "" : "; ") + e;
}

}  // namespace

GoContentionGlobals recover_go_contention_globals(const ElfFile& elf, const GoPclntab& pclntab,
                                                  const GoVersion& version) {
  return recover_with<GoContentionGlobals>(elf, pclntab, version, [&](Recoverer& rec, GoContentionGlobals& out) {
    std::string e;
    out.bbuckets = rec.first_bss_load({"runtime.blockProfileInternal", "runtime.BlockProfile"}, "bbuckets", e);
    add_error(out.error, e), e.clear();
    out.xbuckets = rec.first_bss_load({"runtime.mutexProfileInternal", "runtime.MutexProfile"}, "xbuckets", e);
    add_error(out.error, e), e.clear();
    if (out.bbuckets && out.xbuckets && *out.bbuckets == *out.xbuckets) {
      add_error(out.error, "bbuckets and xbuckets recovered as the same address " + hex(*out.bbuckets));
      out.bbuckets.reset();
      out.xbuckets.reset();
    }
    out.block_rate = rec.first_bss_load({"runtime.blockevent"}, "blockprofilerate", e);
    add_error(out.error, e), e.clear();
    out.mutex_rate = rec.first_bss_load({"runtime.mutexevent", "sync.event"}, "mutexprofilerate", e);
    add_error(out.error, e), e.clear();
    auto val = rec.first_bss_load({"runtime.ticksPerSecond", "runtime.tickspersecond"}, "ticks", e);
    add_error(out.error, e);
    const uint64_t val_off = go_ticks_layout(version.minor).val;
    if (val && *val >= val_off) out.ticks = *val - val_off;
  });
}

GoMemGlobalsRecovery recover_go_mem_globals(const ElfFile& elf, const GoPclntab& pclntab, const GoVersion& version,
                                            uint32_t stacks_sys) {
  return recover_with<GoMemGlobalsRecovery>(elf, pclntab, version, [&](Recoverer& rec, GoMemGlobalsRecovery& out) {
    std::string e;
    out.mheap =
        rec.lea_witnesses("mheap_", {{"runtime.(*mcentral).grow", 0}, {"runtime.(*mcache).allocLarge", 0}}, e);
    add_error(out.error, e), e.clear();
    // mspan_sys and buckhash_sys: 8 and 24 bytes past stacks_sys.
    out.memstats = rec.lea_witnesses("memstats",
                                     {{"runtime.newBucket", uint64_t{stacks_sys} + 24},
                                      {"runtime.(*mheap).init", uint64_t{stacks_sys} + 8}},
                                     e);
    add_error(out.error, e);
  });
}

}  // namespace oomsnap
