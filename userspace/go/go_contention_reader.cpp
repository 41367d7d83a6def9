#include "go/go_contention_reader.h"

#include <time.h>
#include <x86intrin.h>

#include <cerrno>
#include <cstring>

#include "base/checked_bytes.h"
#include "go/go_bucket_walk.h"

namespace oomsnap {
namespace {

constexpr uint64_t kBlockProfileType = 2;  // runtime.blockProfile
constexpr uint64_t kMutexProfileType = 3;  // runtime.mutexProfile

int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Go's cputicks on amd64 is RDTSC and nanotime is CLOCK_MONOTONIC: both are
// machine-wide, so the target's conversion can be re-derived from here.
int64_t ticks_per_second_since(int64_t start_ticks, int64_t start_ns) {
  const int64_t now_ns = monotonic_ns();
  const auto now_ticks = static_cast<int64_t>(__rdtsc());
  if (now_ticks <= start_ticks || now_ns - start_ns <= 5'000'000) return 0;
  return static_cast<int64_t>(static_cast<double>(now_ticks - start_ticks) * 1e9 /
                              static_cast<double>(now_ns - start_ns));
}

int64_t measure_ticks_per_second() {
  const int64_t t0 = monotonic_ns();
  const auto c0 = static_cast<int64_t>(__rdtsc());
  timespec nap{0, 10'000'000};
  nanosleep(&nap, nullptr);
  return ticks_per_second_since(c0, t0);
}

}  // namespace

const char* to_string(GoContentionKind k) { return k == GoContentionKind::kBlock ? "block" : "mutex"; }

uint64_t GoBlockBucketView::pc(size_t i) const {
  uint64_t v;
  std::memcpy(&v, pcs + i * 8, 8);
  return v;
}

std::optional<GoBlockBucketView> decode_go_block_bucket(std::span<const uint8_t> bytes, GoContentionKind kind,
                                                        size_t max_stack_depth, std::string& error) {
  const ByteView v(bytes);
  GoBlockBucketView b;
  if (!v.read_u64(8, b.allnext) || !v.read_u64(16, b.typ) || !v.read_u64(40, b.nstk)) {
    error = "bucket header truncated";
    return std::nullopt;
  }
  const uint64_t want = kind == GoContentionKind::kBlock ? kBlockProfileType : kMutexProfileType;
  if (b.typ != want) {
    error = "bucket type " + std::to_string(b.typ) + " is not a " + to_string(kind) + " profile bucket";
    return std::nullopt;
  }
  if (b.nstk == 0 || b.nstk > max_stack_depth) {
    error = "implausible bucket stack depth " + std::to_string(b.nstk);
    return std::nullopt;
  }
  // nstk is the target's: checked by division so nstk * 8 cannot wrap.
  ByteView pcs, rec;
  if (b.nstk > (v.size() - std::min<size_t>(v.size(), kGoBucketHeaderSize)) / 8 ||
      !v.sub(kGoBucketHeaderSize, b.nstk * 8, pcs) ||
      !v.sub(kGoBucketHeaderSize + b.nstk * 8, kGoBlockRecordBytes, rec)) {
    error = "bucket truncated";
    return std::nullopt;
  }
  b.pcs = pcs.data();
  uint64_t count_bits = 0;
  rec.read_u64(0, count_bits);
  rec.read_i64(8, b.cycles);
  std::memcpy(&b.count, &count_bits, 8);
  return b;
}

GoTicksLayout go_ticks_layout(int go_minor) {
  // ticksType: 1.19/1.20 {lock mutex; pad uint32; val uint64}; 1.21 {lock;
  // val atomic.Int64}; 1.22+ {lock; startTicks int64; startTime int64; val}.
  // runtime.mutex is one uintptr without static lock ranking.
  if (go_minor <= 20) return {16, std::nullopt, std::nullopt};
  if (go_minor == 21) return {8, std::nullopt, std::nullopt};
  return {24, 8, 16};
}

GoContentionRead read_go_contention(RemoteMemory& mem, const std::vector<Mapping>& maps,
                                    const GoContentionAddrs& addrs, GoContentionKind kind, int go_minor,
                                    const CaptureOptions& opts, const Deadline& deadline) {
  GoContentionRead res;
  const GoTicksLayout tl = go_ticks_layout(go_minor);
  // The globals in one batched read.
  uint64_t head = 0, rate = 0;
  int64_t ticks_val = 0, start_ticks = 0, start_time = 0;
  std::vector<RemoteMemory::Request> reqs = {{addrs.head, &head, 8}};
  size_t rate_i = 0, ticks_i = 0;
  if (addrs.rate) {
    rate_i = reqs.size();
    reqs.push_back({*addrs.rate, &rate, 8});
  }
  if (addrs.ticks) {
    ticks_i = reqs.size();
    reqs.push_back({*addrs.ticks + tl.val, &ticks_val, 8});
    if (tl.start_ticks) {
      reqs.push_back({*addrs.ticks + *tl.start_ticks, &start_ticks, 8});
      reqs.push_back({*addrs.ticks + *tl.start_time, &start_time, 8});
    }
  }
  mem.read_batch(reqs);
  const std::string what = std::string("runtime.") + (kind == GoContentionKind::kBlock ? "bbuckets" : "xbuckets");
  const std::string rate_name =
      std::string("runtime.") + (kind == GoContentionKind::kBlock ? "blockprofilerate" : "mutexprofilerate");
  if (!reqs[0].ok) {
    res.status = SnapshotStatus::kFailed;
    res.reason = "cannot read " + what + ": " + std::strerror(mem.last_errno());
    return res;
  }
  if (addrs.rate && reqs[rate_i].ok) res.rate = static_cast<int64_t>(rate);
  if (head == 0) {
    res.status = SnapshotStatus::kUnavailable;
    if (res.rate && *res.rate == 0)
      res.reason = rate_name + " is 0 and there are no " + to_string(kind) +
                   " profile buckets: the program never enabled the profile (" +
                   (kind == GoContentionKind::kBlock ? "runtime.SetBlockProfileRate" : "runtime.SetMutexProfileFraction") +
                   ")";
    else
      res.reason = std::string("no ") + to_string(kind) + " profile buckets (no event recorded yet)";
    // Enabled but nothing recorded is an empty profile, not a missing one.
    if (res.rate && *res.rate > 0) {
      res.status = SnapshotStatus::kComplete;
      res.reason.clear();
    }
  }
  if (addrs.ticks && reqs[ticks_i].ok) {
    if (ticks_val > 0) {
      res.cycles_per_second = ticks_val;
      res.cycles_per_second_source = "runtime.ticks";
    } else if (tl.start_ticks && reqs[ticks_i + 1].ok && reqs[ticks_i + 2].ok) {
      // Not computed yet in the target: what ticksPerSecond would compute now.
      res.cycles_per_second = ticks_per_second_since(start_ticks, start_time);
      res.cycles_per_second_source = "estimated: runtime.ticks start and this machine's TSC";
    }
  }
  if (res.cycles_per_second <= 0) {
    res.cycles_per_second = measure_ticks_per_second();
    res.cycles_per_second_source = "estimated: this machine's TSC over 10 ms";
  }
  if (head == 0) return res;

  GoBucketWalkLimits limits;
  limits.max_buckets = opts.max_records;
  // 1.23+ stacks may hold the blocked goroutine's pc before the unwound frames,
  // and 1.23-1.26 runtime-lock mutex stacks lead with a sentinel.
  limits.max_depth = opts.max_stack_depth + 8;
  limits.max_read_bytes = opts.max_read_bytes;
  limits.record_bytes = kGoBlockRecordBytes;
  std::vector<uint64_t> addrs_seen;
  auto visit = [&](uint64_t addr, std::span<const uint8_t> bytes, std::string& why) -> std::optional<uint64_t> {
    auto b = decode_go_block_bucket(bytes, kind, limits.max_depth, why);
    if (!b) return std::nullopt;
    GoContentionRecord r;
    r.count = b->count;
    r.cycles = b->cycles;
    r.pcs.resize(b->nstk);
    std::memcpy(r.pcs.data(), b->pcs, b->nstk * 8);
    res.records.push_back(std::move(r));
    addrs_seen.push_back(addr);
    return b->allnext;
  };
  auto trim = [&]() -> size_t {
    size_t keep = first_repeated_bucket(addrs_seen.size(), [&](size_t i) { return addrs_seen[i]; });
    res.records.resize(keep);
    return keep;
  };
  GoBucketWalkEnd end = walk_go_buckets(mem, maps, head, limits, deadline, visit, trim);
  res.status = end.status;
  res.reason = end.reason;
  return res;
}

}  // namespace oomsnap
