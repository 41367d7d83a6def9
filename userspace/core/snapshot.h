// The language-neutral result of one heap capture: the `snapshot` object of the
// JSON record, shared by every collector (Go, Java, Python).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace oomsnap {

enum class SnapshotStatus { kComplete, kPartial, kUnavailable, kFailed };
const char* to_string(SnapshotStatus s);
// The inverse of to_string; nullopt for any other text.
std::optional<SnapshotStatus> snapshot_status_from_string(std::string_view s);

struct SnapshotEntry {
  std::string kind;  // "allocation_site" (Go) | "object_type" (Java, Python)
  std::string name;
  uint64_t bytes = 0;
  uint64_t objects = 0;
  std::vector<std::string> stack;  // leaf first; empty for object_type
  std::optional<uint64_t> average_bytes;  // when the collector knows better than bytes/objects
};

// Go: allocations since the last published GC cycle, which the in-use
// entries do not include yet (the runtime's unpublished profile cycles), net
// of the frees swept in those cycles; unsampled like the entries.
struct SnapshotRecent {
  std::vector<SnapshotEntry> entries;  // allocation_site, sorted by bytes, capped like entries
  uint64_t bytes = 0, objects = 0;     // over every bucket, not only the printed entries
};

// One group of the Go goroutine census: goroutines with the same stack (as
// runtime/pprof's goroutine profile groups them), state, wait reason and
// creation site.
struct GoroutineGroup {
  uint64_t count = 0;
  std::string state;        // "waiting", "runnable", "syscall", "running", ...
  std::string wait_reason;  // "chan receive", "sleep", ...; empty when none
  // Leaf first, inlined frames expanded, runtime.goexit left out (as the
  // goroutine profile shows it); empty when not read (running goroutines).
  std::vector<std::string> stack;
  std::string created_by;   // function holding the `go` statement (g.gopc)
  std::string start;        // the goroutine's function (g.startpc)
};

// The census of a Go process's goroutines (Snapshot::goroutines). Its own
// status: a census can be partial while the heap entries are complete.
struct GoroutineCensus {
  SnapshotStatus status = SnapshotStatus::kFailed;
  std::string reason;
  uint64_t total = 0;   // user goroutines: what runtime.NumGoroutine and the profile count
  uint64_t system = 0;  // runtime-internal goroutines, left out of total and groups as pprof does
  std::vector<std::pair<std::string, uint64_t>> by_state;  // of the total, by state name
  std::vector<GoroutineGroup> groups;  // sorted by count descending, capped
  bool groups_truncated = false;
  // Stacks read again because the GC moved them while the census read them
  // (0 in a program whose GC was idle).
  uint64_t stacks_reread = 0;
};

// A contention profile (Go block or mutex), as the runtime's own pprof
// profile would report it: snapshot.block / snapshot.mutex.
struct ContentionEntry {
  std::string name;                 // leaf frame
  std::vector<std::string> stack;   // leaf first, inlined frames expanded
  int64_t contentions = 0;
  int64_t delay_ns = 0;
};
struct ContentionProfile {
  SnapshotStatus status = SnapshotStatus::kFailed;
  std::string reason;               // set whenever status != kComplete
  std::optional<int64_t> rate;      // block: runtime.blockprofilerate (CPU ticks); mutex: the fraction
  int64_t cycles_per_second = 0;    // the conversion applied to the delays
  int64_t total_contentions = 0, total_delay_ns = 0;  // over every record, not only the entries
  uint64_t records = 0;             // buckets read
  bool output_truncated = false;
  std::vector<ContentionEntry> entries;  // by delay, descending, capped by max_entries
};

struct Snapshot {
  std::string runtime_version;  // e.g. "go1.26.10"; empty when unknown
  SnapshotStatus status = SnapshotStatus::kFailed;
  std::string reason;           // set whenever status != kComplete
  double duration_ms = 0;
  // How it was read: empty for a read of the live process; "last_gasp" for
  // a Go heap profile read in the dying process at its kill (go_last_gasp.h).
  std::string source;
  std::optional<int64_t> sample_rate;
  bool output_truncated = false;
  std::vector<SnapshotEntry> entries;  // sorted by bytes descending, capped
  std::optional<SnapshotRecent> recent;  // Go only
  // What the entries cover, for readers that walk a heap (Python, Java):
  // scope names the object population; coverage is the share of it read
  // (1 when complete); totals are counts over everything read, not only the
  // printed entries. Empty/unset for Go.
  std::string scope;
  std::optional<double> coverage;
  std::vector<std::pair<std::string, uint64_t>> totals;
  std::optional<GoroutineCensus> goroutines;  // Go only
  // Go, with --profile block|mutex only.
  std::optional<ContentionProfile> block, mutex;
  // Cost of the capture, for benchmarks and the record.
  uint64_t read_syscalls = 0;
  uint64_t bytes_read = 0;

  void set_status(SnapshotStatus s, std::string why) {
    status = s;
    reason = std::move(why);
  }
  // Sorts entries by bytes (then name, for stable output) and keeps max_entries.
  void sort_and_truncate(size_t max_entries);
  // The same order, for any list of entries (recent's); true when it cut.
  static bool sort_and_truncate(std::vector<SnapshotEntry>& entries, size_t max_entries);
};

nlohmann::json to_json(const Snapshot& s);
nlohmann::json to_json(const GoroutineCensus& c);
nlohmann::json to_json(const ContentionProfile& p);

struct CaptureOptions;
class JsonStream;
// The inverse of to_json(Snapshot), for a snapshot from an untrusted peer (a
// capture process): false, with why, for any field of the wrong type or past
// the bounds (max_entries, max_stack_depth, max_goroutine_groups). The lists
// (entries, recent entries, goroutine groups, contention entries) are decoded
// element by element while the text is parsed, so a result never becomes one
// tree; finish() decodes the rest from the tree the parse left. A list the
// stream did not take (finish() on a whole tree) is decoded there instead.
// core/snapshot_json.cpp holds both directions.
class SnapshotDecoder {
 public:
  explicit SnapshotDecoder(const CaptureOptions& bounds);
  ~SnapshotDecoder();
  SnapshotDecoder(const SnapshotDecoder&) = delete;
  SnapshotDecoder& operator=(const SnapshotDecoder&) = delete;

  // The lists of the snapshot at `at` (its keys from the root) go through
  // `stream` to this decoder, which must outlive the parse.
  void stream_lists(JsonStream& stream, const std::vector<std::string>& at);
  bool finish(const nlohmann::json& j, Snapshot& out, std::string& why);

  // What an element of a list may hold beyond its stack: the stream's limit.
  size_t max_element_values() const;

 private:
  struct Lists;
  std::unique_ptr<Lists> lists_;
};

}  // namespace oomsnap
