// What /proc says about a process: identity (pid + start time), comm, the
// memory summary of the record, and its mappings.
#pragma once
#include <sys/types.h>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/mapping.h"
#include "core/memory_breakdown.h"
#include "core/proc_files.h"
#include "core/remote_memory.h"  // AddressRange

namespace oomsnap {

// Fields of /proc/PID/status in bytes; a field that cannot be read stays empty
// (and is omitted from JSON), never zero.
struct ProcessMemory {
  std::optional<uint64_t> virtual_bytes, rss_bytes, rss_anon_bytes, rss_file_bytes,
      rss_shmem_bytes, swap_bytes, page_table_bytes;
  std::string status;  // "ok" or why nothing could be read
  // The RSS by kind (capture process only: smaps_breakdown.h); absent when
  // not computed.
  std::optional<MemoryBreakdown> breakdown;
};
nlohmann::json to_json(const ProcessMemory& m);

// The optional byte counts of ProcessMemory by JSON name, for writing and
// reading them back (the capture process hands its record to the agent).
struct ProcessMemoryField {
  const char* name;
  std::optional<uint64_t> ProcessMemory::*member;
};
inline constexpr ProcessMemoryField kProcessMemoryFields[] = {
    {"virtual_bytes", &ProcessMemory::virtual_bytes},     {"rss_bytes", &ProcessMemory::rss_bytes},
    {"rss_anon_bytes", &ProcessMemory::rss_anon_bytes},   {"rss_file_bytes", &ProcessMemory::rss_file_bytes},
    {"rss_shmem_bytes", &ProcessMemory::rss_shmem_bytes}, {"swap_bytes", &ProcessMemory::swap_bytes},
    {"page_table_bytes", &ProcessMemory::page_table_bytes}};

struct ProcessIdentity {
  pid_t pid = 0;
  uint64_t start_time_ticks = 0;  // field 22 of /proc/PID/stat
  std::string comm;
  char state = '?';               // field 3: 'R', 'S', ..., 'Z' zombie, 'X' dead
  uint32_t flags = 0;             // field 9: the kernel's PF_* flags
  // PF_EXITING (0x4) is set as do_exit begins, before the memory is let go
  // and long before the state turns 'Z': a process killed a moment ago may
  // still say 'R' with no mappings and no exe left.
  static constexpr uint32_t kPfExiting = 0x4;
  bool exited() const { return state == 'Z' || state == 'X' || state == 'x' || (flags & kPfExiting); }
};

// Parse helpers take file contents so unit tests can feed text directly.
std::optional<ProcessIdentity> parse_proc_stat(pid_t pid, const std::string& stat_text);
ProcessMemory parse_proc_status(const std::string& status_text);
std::vector<Mapping> parse_proc_maps(const std::string& maps_text);
// Mappings registered with userfaultfd for missing or minor faults (smaps
// VmFlags "um" / "ui"): a read of a page not yet there waits for a handler
// that may never answer.
std::vector<AddressRange> parse_userfaultfd_ranges(const std::string& smaps_text);

// Live readers. read_identity returns nullopt when the pid does not exist.
// The ProcFiles forms read the files a capture keeps open (proc_files.h).
std::optional<ProcessIdentity> read_identity(pid_t pid);
std::optional<ProcessIdentity> read_identity(const ProcFiles& proc);
ProcessMemory read_process_memory(pid_t pid);
ProcessMemory read_process_memory(const ProcFiles& proc);
std::vector<Mapping> read_maps(pid_t pid);  // empty on failure
std::vector<AddressRange> read_userfaultfd_ranges(pid_t pid);  // /proc/PID/smaps; empty on failure
bool read_text_file(const std::string& path, std::string& out);
// At most max_bytes, until the deadline: cut says that more was left.
bool read_text_file(const std::string& path, std::string& out, size_t max_bytes,
                    std::chrono::steady_clock::time_point deadline, bool& cut);

}  // namespace oomsnap
