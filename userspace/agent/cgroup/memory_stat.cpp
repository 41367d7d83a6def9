#include "agent/cgroup/memory_stat.h"

#include <sstream>

#include "core/proc_info.h"

namespace oomsnap {
namespace {

// One kind of the common vocabulary, and the key each version reports it
// under. v1's total_* keys count the subtree (hierarchical), as every v2 key
// does; its plain keys count the cgroup alone, which for a container whose
// processes sit in child cgroups is nearly nothing.
struct Kind {
  const char* name;
  const char* v1;
  const char* v2;
};
constexpr Kind kKinds[] = {
    {"anon", "total_rss", "anon"},
    {"file", "total_cache", "file"},
    {"shmem", "total_shmem", "shmem"},
    {"file_mapped", "total_mapped_file", "file_mapped"},
    {"file_dirty", "total_dirty", "file_dirty"},
    {"file_writeback", "total_writeback", "file_writeback"},
    {"swap", "total_swap", nullptr},  // v2: memory.swap.current
    {"active_anon", "total_active_anon", "active_anon"},
    {"inactive_anon", "total_inactive_anon", "inactive_anon"},
    {"active_file", "total_active_file", "active_file"},
    {"inactive_file", "total_inactive_file", "inactive_file"},
    {"unevictable", "total_unevictable", "unevictable"},
};

// v2 kernels before 5.18 have no "kernel" key: its parts, where reported.
constexpr const char* kV2KernelParts[] = {"kernel_stack", "pagetables", "sec_pagetables", "percpu",
                                          "sock",         "slab",       "vmalloc"};

std::optional<uint64_t> lookup(const std::map<std::string, uint64_t>& m, const std::string& key) {
  auto it = m.find(key);
  if (it == m.end()) return std::nullopt;
  return it->second;
}

}  // namespace

MemoryStat parse_memory_stat(int version, const std::string& text, std::optional<uint64_t> v1_kmem_usage,
                             std::optional<uint64_t> v2_swap_current) {
  MemoryStat s;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key, value;
    if (!(fields >> key >> value) || key.size() > MemoryStat::kMaxKeyLength) continue;
    auto v = parse_memcg_value(value);
    if (!v) continue;
    if (s.raw.size() == MemoryStat::kMaxRawKeys && !s.raw.count(key)) {
      s.raw_truncated = true;
      continue;
    }
    s.raw[key] = *v;
  }
  for (const Kind& k : kKinds) {
    std::optional<uint64_t> v;
    if (version == 1) {
      v = lookup(s.raw, k.v1);
      if (!v) v = lookup(s.raw, k.v1 + 6);  // no hierarchy (use_hierarchy 0): the cgroup's own
    } else if (k.v2) {
      v = lookup(s.raw, k.v2);
    }
    if (v) s.bytes[k.name] = *v;
  }
  if (version == 1) {
    if (v1_kmem_usage) s.bytes["kernel"] = *v1_kmem_usage;
  } else {
    if (v2_swap_current) s.bytes["swap"] = *v2_swap_current;
    if (auto kernel = lookup(s.raw, "kernel")) {
      s.bytes["kernel"] = *kernel;
    } else {
      uint64_t sum = 0;
      bool any = false;
      for (const char* part : kV2KernelParts)
        if (auto v = lookup(s.raw, part)) sum += *v, any = true;
      if (any) s.bytes["kernel"] = sum;
    }
  }
  return s;
}

MemoryStat read_memory_stat(const CgroupFs& fs, const std::string& rel_path) {
  const std::string dir = memcg_dir(fs, rel_path);
  std::string text;
  if (fs.version != 1 && fs.version != 2) {
    MemoryStat s;
    s.error = "no memory cgroup hierarchy";
    return s;
  }
  if (!read_text_file(dir + "/memory.stat", text)) {
    MemoryStat s;
    s.error = "cannot read " + dir + "/memory.stat";
    return s;
  }
  auto counter = [&dir](const char* name) -> std::optional<uint64_t> {
    std::string t;
    if (!read_text_file(dir + "/" + name, t)) return std::nullopt;
    return parse_memcg_value(t);
  };
  MemoryStat s = fs.version == 1
                     ? parse_memory_stat(1, text, counter("memory.kmem.usage_in_bytes"), std::nullopt)
                     : parse_memory_stat(2, text, std::nullopt, counter("memory.swap.current"));
  s.usage_bytes = counter(fs.version == 1 ? "memory.usage_in_bytes" : "memory.current");
  return s;
}

nlohmann::json to_json(const MemoryStat& s) {
  nlohmann::json j = nlohmann::json::object();
  if (!s.error.empty()) {
    j["error"] = s.error;
    return j;
  }
  for (const auto& [k, v] : s.bytes) j[k] = v;
  if (s.usage_bytes) j["usage"] = *s.usage_bytes;
  j["raw"] = s.raw;
  if (s.raw_truncated) j["raw_truncated"] = true;
  return j;
}

}  // namespace oomsnap
