#include "go/go_contention_collector.h"

#include <chrono>
#include <exception>

#include "elf/elf_file.h"
#include "go/go_buildinfo.h"
#include "go/go_contention_pprof.h"
#include "go/go_contention_profile.h"
#include "go/go_pclntab.h"
#include "go/go_stripped.h"

namespace oomsnap {
namespace {

struct Located {
  std::optional<uint64_t> head, rate, ticks;  // link-time
  std::string why;                            // what could not be found
};

// Symbols first; what a stripped binary lacks comes from the runtime's code.
Located locate(const ElfFile& elf, const GoPclntab& tab, const GoVersion& ver, GoContentionKind kind) {
  const bool block = kind == GoContentionKind::kBlock;
  Located l;
  auto sym = [&](const char* name) -> std::optional<uint64_t> {
    if (auto s = elf.symbol(name)) return s->value;
    return std::nullopt;
  };
  l.head = sym(block ? "runtime.bbuckets" : "runtime.xbuckets");
  l.rate = sym(block ? "runtime.blockprofilerate" : "runtime.mutexprofilerate");
  l.ticks = sym("runtime.ticks");
  if (!l.head || !l.rate || !l.ticks) {
    GoContentionGlobals rec = recover_go_contention_globals(elf, tab, ver);
    if (!l.head) l.head = block ? rec.bbuckets : rec.xbuckets;
    if (!l.rate) l.rate = block ? rec.block_rate : rec.mutex_rate;
    if (!l.ticks) l.ticks = rec.ticks;
    l.why = rec.error;
  }
  return l;
}

}  // namespace

ContentionProfile collect_go_contention(Target& target, const GoContentionTarget& in, GoContentionKind kind,
                                        const CaptureOptions& opts, const Deadline& deadline,
                                        std::optional<std::string>* pprof) {
  ContentionProfile out;
  const int minor = in.version->minor;
  try {
    Located l = locate(*in.elf, *in.pclntab, *in.version, kind);
    if (!l.head) {
      out.status = SnapshotStatus::kUnavailable;
      out.reason = std::string("stripped binary: cannot locate runtime.") +
                   (kind == GoContentionKind::kBlock ? "bbuckets" : "xbuckets") + ": " + l.why;
      return out;
    }
    if (kind == GoContentionKind::kMutex && minor <= 20 && !l.rate) {
      // Go <= 1.20 scales mutex records by the fraction when it prints them.
      out.status = SnapshotStatus::kUnavailable;
      out.reason = "stripped binary: cannot locate runtime.mutexprofilerate, which " + in.version->text +
                   " scales the mutex profile by: " + l.why;
      return out;
    }
    GoContentionAddrs addrs;
    addrs.head = *l.head + in.load_bias;
    if (l.rate) addrs.rate = *l.rate + in.load_bias;
    if (l.ticks) addrs.ticks = *l.ticks + in.load_bias;
    GoContentionRead rd = read_go_contention(target.memory(), target.maps(), addrs, kind, minor, opts, deadline);
    std::vector<GoContentionSample> samples;
    samples.reserve(rd.records.size());
    for (const auto& r : rd.records) {
      GoContentionSample s;
      s.values = go_contention_values(r.count, r.cycles, kind, minor, rd.cycles_per_second, rd.rate.value_or(0));
      s.frames = symbolize_go_contention_stack(r.pcs, in.load_bias, minor, *in.pclntab);
      samples.push_back(std::move(s));
    }
    out = summarize_go_contention(samples, opts.max_entries);
    out.status = rd.status;
    out.reason = rd.reason;
    out.rate = rd.rate;
    out.cycles_per_second = rd.cycles_per_second;
    if (!rd.records.empty() && rd.cycles_per_second_source != "runtime.ticks") {
      // Say so: the delays then rest on our own measurement of the clock.
      out.reason += std::string(out.reason.empty() ? "" : "; ") + "cycles per second " +
                    rd.cycles_per_second_source + " (the target had not computed it)";
    }
    if (!target.still_same()) {
      out.status = SnapshotStatus::kFailed;
      out.reason = "target exited or was replaced during the capture";
      return out;
    }
    if (pprof && (out.status == SnapshotStatus::kComplete || out.status == SnapshotStatus::kPartial) &&
        rd.cycles_per_second > 0) {
      const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::system_clock::now().time_since_epoch()).count();
      *pprof = encode_go_contention_pprof(samples, in.load_bias, in.mappings, now);
    }
  } catch (const std::exception& e) {
    out.status = SnapshotStatus::kFailed;
    out.reason = std::string("cannot read the ") + to_string(kind) + " profile: " + e.what();
  }
  return out;
}

}  // namespace oomsnap
