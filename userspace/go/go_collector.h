// The Go collector: finds the heap profile globals of a live Go process (from
// symbols, or from code in stripped binaries), reads the buckets, and turns
// them into the snapshot entries and, on request, a pprof heap profile.
#pragma once
#include <memory>
#include <optional>

#include "core/collector.h"
#include "elf/elf_file.h"
#include "go/go_buildinfo.h"
#include "go/go_heap_reader.h"
#include "go/go_pclntab.h"

namespace oomsnap {
class GoPclntab;

class GoCollector : public Collector {
 public:
  const char* language() const override { return "go"; }
  bool detect(Target& target) override;
  CaptureResult collect(Target& target, const CaptureOptions& options) override;

 private:
  // The heap snapshot (entries, and the heap pprof when want_pprof) into run.
  void collect_heap(Target& target, const CaptureOptions& opts, CaptureRun& run, const GoPclntab& tab,
                    uint64_t bias, bool want_pprof);
  const ElfFile* elf_ = nullptr;  // the target's, parsed once (Target::exe_elf)
  std::optional<GoBuildInfo> buildinfo_;
};

// The heap profile's globals at run time: from the symbols, or in a stripped
// binary from the moduledata and the code that uses them (go_stripped.h).
// nullopt with why when they cannot be found.
std::optional<GoHeapAddrs> locate_go_heap(const ElfFile& elf, const GoPclntab& tab, const GoVersion& ver,
                                          uint64_t bias, std::string& why);

// Load bias of the main executable: runtime address − link-time address.
std::optional<uint64_t> exe_load_bias(const ElfFile& elf, const std::vector<Mapping>& maps, int exe_fd);

}  // namespace oomsnap
