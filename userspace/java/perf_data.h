// The JVM's own performance counters (the hsperfdata jstat reads), out of
// process: PerfMemory's buffer, a prologue and a list of named entries whose
// layouts VMStructs describes (PerfDataPrologue, PerfDataEntry; the same in
// JDK 8 to 26). The buffer is in the target's memory whether it is shared
// through /tmp/hsperfdata_USER/PID (the default) or not
// (-XX:+PerfDisableSharedMem); -XX:-UsePerfData keeps none.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/checked_bytes.h"
#include "core/chunk_cache.h"
#include "java/hotspot_vmstructs.h"

namespace oomsnap {

// Field offsets in the prologue and in an entry, from VMStructs.
struct PerfDataLayout {
  uint32_t magic = 0, used = 8, entry_offset = 24, num_entries = 28;  // PerfDataPrologue
  uint32_t entry_length = 0, name_offset = 4, vector_length = 8, data_type = 12, data_offset = 16;  // PerfDataEntry
};

// A buffer larger than this is not read (HotSpot's default is 64 KiB, its
// flag's documented range far less than this).
inline constexpr uint64_t kMaxPerfDataBytes = uint64_t{1} << 20;
// Entries looked at, at most (a JDK 26 JVM has ~300).
inline constexpr uint32_t kMaxPerfDataEntries = 1u << 16;

// The scalar long counters (data type 'J', vector length 0) of a PerfData
// buffer among `wanted`, by name. nullopt + error when the buffer is not one
// (its magic), or its prologue or an entry lies outside it; an entry with a
// name or value outside itself ends the list there, with what was found.
// offsets (when given): where each value found lies in the buffer.
std::optional<std::map<std::string, int64_t>> parse_perf_data(ByteView buffer, const PerfDataLayout& layout,
                                                              const std::vector<std::string_view>& wanted,
                                                              std::string& error,
                                                              std::map<std::string, uint64_t>* offsets = nullptr);

// The offsets from VMStructs; nullopt + error when a field is missing or does
// not fit its type.
std::optional<PerfDataLayout> resolve_perf_data_layout(const HotSpotVm& vm, std::string& error);

// Reads PerfMemory's buffer (its used bytes) and parses it. nullopt + error
// when the JVM keeps none (-XX:-UsePerfData), or it cannot be read or parsed.
// addresses (when given): where each value found lies in the target, to be
// read again as it changes (8 bytes, the JVM updates them in place).
std::optional<std::map<std::string, int64_t>> read_perf_counters(ChunkCache& mem, const HotSpotVm& vm,
                                                                 const std::vector<std::string_view>& wanted,
                                                                 std::string& error,
                                                                 std::map<std::string, uint64_t>* addresses = nullptr);

// Metaspace as the JVM counts it (what jstat -gc prints as MU and MC):
// sun.gc.metaspace.used and .capacity (class space included), updated at
// each garbage collection.
struct MetaspaceUse {
  uint64_t used = 0, committed = 0;
};
inline constexpr std::string_view kMetaspaceUsedCounter = "sun.gc.metaspace.used";
inline constexpr std::string_view kMetaspaceCommittedCounter = "sun.gc.metaspace.capacity";
// The full collections, whatever the collector: HotSpot's collector 1 is
// Serial's and Parallel's old-generation collector and G1's full one (its
// collector 0 the young pauses), counted as each starts.
inline constexpr std::string_view kFullCollectionsCounter = "sun.gc.collector.1.invocations";
// G1's collector 2: its remark and cleanup pauses (the concurrent cycle's).
inline constexpr std::string_view kG1RemarkPausesCounter = "sun.gc.collector.2.invocations";
// More than this is not believed (the address space of x86-64's user half).
inline constexpr uint64_t kMaxMetaspaceBytes = uint64_t{1} << 47;
// From parsed counters: nullopt + error when one is missing, negative,
// implausible, or used exceeds committed.
std::optional<MetaspaceUse> metaspace_use(const std::map<std::string, int64_t>& counters, std::string& error);

}  // namespace oomsnap
