#include "java/perf_data.h"

#include <algorithm>
#include <cstring>

namespace oomsnap {

namespace {

// PerfDataPrologue::magic as it lies in memory (PERFDATA_MAGIC, big-endian
// whatever the buffer's byte order).
constexpr uint8_t kMagic[4] = {0xca, 0xfe, 0xc0, 0xc0};
constexpr uint8_t kTypeLong = 'J';

}  // namespace

std::optional<std::map<std::string, int64_t>> parse_perf_data(ByteView buf, const PerfDataLayout& L,
                                                              const std::vector<std::string_view>& wanted,
                                                              std::string& error,
                                                              std::map<std::string, uint64_t>* offsets) {
  uint8_t magic[4];
  uint32_t used = 0, first = 0, count = 0;
  if (!buf.copy(L.magic, magic, 4) || !buf.read_u32(L.used, used) || !buf.read_u32(L.entry_offset, first) ||
      !buf.read_u32(L.num_entries, count)) {
    error = "the performance counters' prologue is not inside their buffer (" + std::to_string(buf.size()) + " bytes)";
    return std::nullopt;
  }
  if (std::memcmp(magic, kMagic, 4) != 0) {
    error = "the performance counters' buffer has no PerfData magic";
    return std::nullopt;
  }
  // Entries are appended while the JVM runs: what lies past `used` is not
  // one yet, and what lies past the buffer read is not believed.
  const ByteView entries(buf.data(), std::min<uint64_t>(used, buf.size()));
  std::map<std::string, int64_t> found;
  uint64_t off = first;
  for (uint32_t i = 0; i < std::min(count, kMaxPerfDataEntries) && found.size() < wanted.size(); ++i) {
    int32_t length = 0, name_off = 0, vector_length = 0, data_off = 0;
    uint8_t type = 0;
    if (!entries.read_i32(off + L.entry_length, length) || length <= 0 || !entries.contains(off, uint64_t(length)))
      break;
    const ByteView entry(entries.data() + off, static_cast<size_t>(length));
    off += static_cast<uint64_t>(length);
    if (!entry.read_i32(L.name_offset, name_off) || !entry.read_i32(L.vector_length, vector_length) ||
        !entry.read_u8(L.data_type, type) || !entry.read_i32(L.data_offset, data_off) || name_off < 0 || data_off < 0)
      break;
    // The name ends at a NUL inside the entry.
    const uint64_t name_at = static_cast<uint64_t>(name_off);
    if (name_at >= entry.size()) break;
    const char* name = reinterpret_cast<const char*>(entry.data() + name_at);
    const void* nul = std::memchr(name, 0, entry.size() - name_at);
    if (!nul) break;
    const std::string_view n(name, static_cast<const char*>(nul) - name);
    if (type != kTypeLong || vector_length != 0 || std::find(wanted.begin(), wanted.end(), n) == wanted.end()) continue;
    int64_t v = 0;
    if (!entry.read_i64(static_cast<uint64_t>(data_off), v)) break;
    found.emplace(n, v);
    if (offsets) offsets->emplace(n, static_cast<uint64_t>(entry.data() - buf.data()) + static_cast<uint64_t>(data_off));
  }
  return found;
}

std::optional<PerfDataLayout> resolve_perf_data_layout(const HotSpotVm& vm, std::string& error) {
  OffsetResolver o(vm);
  PerfDataLayout L;
  L.magic = o.field({"PerfDataPrologue"}, "magic", 4);
  L.used = o.field({"PerfDataPrologue"}, "used", 4);
  L.entry_offset = o.field({"PerfDataPrologue"}, "entry_offset", 4);
  L.num_entries = o.field({"PerfDataPrologue"}, "num_entries", 4);
  L.entry_length = o.field({"PerfDataEntry"}, "entry_length", 4);
  L.name_offset = o.field({"PerfDataEntry"}, "name_offset", 4);
  L.vector_length = o.field({"PerfDataEntry"}, "vector_length", 4);
  L.data_type = o.field({"PerfDataEntry"}, "data_type", 1);
  L.data_offset = o.field({"PerfDataEntry"}, "data_offset", 4);
  if (o.error) {
    error = *o.error;
    return std::nullopt;
  }
  return L;
}

std::optional<std::map<std::string, int64_t>> read_perf_counters(ChunkCache& mem, const HotSpotVm& vm,
                                                                 const std::vector<std::string_view>& wanted,
                                                                 std::string& error,
                                                                 std::map<std::string, uint64_t>* addresses) {
  auto layout = resolve_perf_data_layout(vm, error);
  if (!layout) return std::nullopt;
  const VmField* start_f = vm.field("PerfMemory", "_start");
  const VmField* capacity_f = vm.field("PerfMemory", "_capacity");
  if (!start_f || !capacity_f) {
    error = "VMStructs has no PerfMemory::_start or _capacity";
    return std::nullopt;
  }
  auto start = read_static<uint64_t>(mem, start_f);
  auto capacity = read_static<uint64_t>(mem, capacity_f);
  if (!start || !capacity) {
    error = "cannot read PerfMemory::_start or _capacity";
    return std::nullopt;
  }
  if (!*start) {
    error = "the JVM keeps no performance counters (-XX:-UsePerfData)";
    return std::nullopt;
  }
  std::vector<uint8_t> buf(std::min(*capacity, kMaxPerfDataBytes));
  if (!mem.read(*start, buf.data(), buf.size())) {
    error = "cannot read the performance counters' " + std::to_string(buf.size()) + " bytes";
    return std::nullopt;
  }
  std::map<std::string, uint64_t> offsets;
  auto found = parse_perf_data(ByteView(buf.data(), buf.size()), *layout, wanted, error, addresses ? &offsets : nullptr);
  if (addresses)
    for (const auto& [name, off] : offsets) addresses->emplace(name, *start + off);
  return found;
}

std::optional<MetaspaceUse> metaspace_use(const std::map<std::string, int64_t>& counters, std::string& error) {
  auto get = [&](std::string_view name) -> std::optional<uint64_t> {
    auto it = counters.find(std::string(name));
    if (it == counters.end()) {
      error = "the performance counters have no " + std::string(name);
      return std::nullopt;
    }
    if (it->second < 0 || static_cast<uint64_t>(it->second) > kMaxMetaspaceBytes) {
      error = "implausible " + std::string(name) + " " + std::to_string(it->second);
      return std::nullopt;
    }
    return static_cast<uint64_t>(it->second);
  };
  auto used = get(kMetaspaceUsedCounter);
  if (!used) return std::nullopt;
  auto committed = get(kMetaspaceCommittedCounter);
  if (!committed) return std::nullopt;
  if (*used > *committed) {
    error = "metaspace used (" + std::to_string(*used) + ") exceeds its committed bytes (" +
            std::to_string(*committed) + ")";
    return std::nullopt;
  }
  return MetaspaceUse{*used, *committed};
}

}  // namespace oomsnap
