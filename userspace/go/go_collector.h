// The Go collector: finds the heap profile globals of a live Go process (from
// symbols, or from code in stripped binaries), reads the buckets, and turns
// them into the snapshot entries and, on request, a pprof heap profile.
#pragma once
#include <functional>
#include <memory>
#include <optional>

#include "core/collector.h"
#include "elf/elf_file.h"
#include "go/go_buildinfo.h"
#include "go/go_heap_reader.h"
#include "go/go_pclntab.h"
#include "go/go_pprof.h"

namespace oomsnap {
class GoPclntab;

class GoCollector : public Collector {
 public:
  const char* language() const override { return "go"; }
  bool detect(Target& target) override;
  CaptureResult collect(Target& target, const CaptureOptions& options) override;

 private:
  const ElfFile* elf_ = nullptr;  // the target's, parsed once (Target::exe_elf)
  std::optional<GoBuildInfo> buildinfo_;
};

// The heap profile's globals at run time: from the symbols, or in a stripped
// binary from the moduledata and the code that uses them (go_stripped.h).
// nullopt with why when they cannot be found.
std::optional<GoHeapAddrs> locate_go_heap(const ElfFile& elf, const GoPclntab& tab, const GoVersion& ver,
                                          uint64_t bias, std::string& why);

// Where a heap snapshot's bytes come from: a live target, or the image a
// last-gasp read took of a dying one (go_last_gasp.h).
struct GoHeapSource {
  RemoteMemory& mem;
  const std::vector<Mapping>& maps;  // bounds the bucket reader's windows; empty: exact reads
  std::function<bool()> still_same;  // unset: the bytes cannot change any more
  std::function<std::vector<GoMapping>()> pprof_mappings;
};

// The heap snapshot (entries, recent, and the heap pprof when want_pprof)
// into run: one path for the live read and the last gasp.
void collect_go_heap(const GoHeapSource& src, const ElfFile& elf, const GoVersion& ver, const GoPclntab& tab,
                     uint64_t bias, const CaptureOptions& opts, CaptureRun& run, bool want_pprof);

// The main executable's text mapping as runtime/pprof writes it.
std::vector<GoMapping> go_exe_mappings(Target& target, const ElfFile& elf);

// Load bias of the main executable: runtime address − link-time address.
std::optional<uint64_t> exe_load_bias(const ElfFile& elf, const std::vector<Mapping>& maps, int exe_fd);

}  // namespace oomsnap
