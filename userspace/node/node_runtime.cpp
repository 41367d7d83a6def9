#include "node/node_runtime.h"

#include <unistd.h>


#include "core/runtime_module.h"
#include "elf/elf_file.h"
#include "elf/module_map.h"

namespace oomsnap {
namespace {

constexpr const char* kNodeMetadata = "_ZN4node11per_process8metadataE";
constexpr const char* kV8VersionPrefix = "_ZN2v88internal7Version";

std::string basename_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::optional<V8Version> v8_version_of(const ElfFile& elf) {
  V8Version v;
  int found = 0;
  for (const auto& sym : elf.symbols_with_prefix(kV8VersionPrefix, 32)) {
    uint32_t* into = sym.name == "_ZN2v88internal7Version6major_E"   ? &v.major
                     : sym.name == "_ZN2v88internal7Version6minor_E" ? &v.minor
                     : sym.name == "_ZN2v88internal7Version6build_E" ? &v.build
                     : sym.name == "_ZN2v88internal7Version6patch_E" ? &v.patch
                                                                     : nullptr;
    if (!into || sym.size != 4) continue;
    if (auto value = elf.symbol_u32(sym)) {
      *into = *value;
      ++found;
    }
  }
  if (found != 4 || v.major == 0 || v.major > 1000) return std::nullopt;
  return v;
}

// Fills rt from a module when it exports v8dbg_ symbols.
bool inspect_module(const Target& target, const ElfFile& elf, uint64_t inode, const std::string& path,
                    NodeRuntime& rt) {
  const auto symbols = elf.symbols_with_prefix("v8dbg_", kMaxV8dbgSymbols + 1, kMaxV8dbgName);
  if (symbols.empty()) return false;
  auto bias = module_load_bias(elf, target.maps(), inode);
  if (!bias) return false;
  rt.module = path;
  rt.bias = *bias;
  std::vector<std::pair<std::string, uint32_t>> values;
  values.reserve(symbols.size());
  for (const auto& sym : symbols)
    if (auto value = elf.symbol_u32(sym)) values.emplace_back(sym.name, *value);
  rt.metadata = parse_v8_metadata(values, rt.metadata_error);
  rt.v8_version = v8_version_of(elf);
  if (auto md = elf.symbol(kNodeMetadata); md && md->value) rt.node_metadata_addr = md->value + *bias;
  return true;
}

}  // namespace

std::string V8Version::text() const {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(build) + "." +
         std::to_string(patch);
}

bool is_libnode_mapping(const Mapping& m) {
  return m.offset == 0 && m.inode != 0 && basename_of(m.path).rfind("libnode.so", 0) == 0;
}

std::optional<NodeRuntime> find_node_runtime(Target& target) {
  NodeRuntime rt;
  if (find_runtime_module(target, is_libnode_mapping, [&](const ElfFile& elf, uint64_t inode, const std::string& path) {
        return inspect_module(target, elf, inode, path, rt);
      }))
    return rt;
  return std::nullopt;
}

std::optional<std::string> read_node_version(RemoteMemory& mem, const NodeRuntime& rt) {
  if (!rt.node_metadata_addr) return std::nullopt;
  // libstdc++'s std::string: data pointer, length, then 16 bytes of inline
  // buffer (where a version string lives).
  uint64_t head[2] = {};
  if (!mem.read(rt.node_metadata_addr, head, sizeof head)) return std::nullopt;
  const uint64_t data = head[0], len = head[1];
  if (len == 0 || len > 31) return std::nullopt;
  char text[32] = {};
  if (!mem.read(data, text, len)) return std::nullopt;
  std::string v(text, len);
  int dots = 0;
  for (char c : v) {
    if (c == '.') ++dots;
    else if (c < '0' || c > '9') return std::nullopt;
  }
  if (dots != 2 || v.front() == '.' || v.back() == '.') return std::nullopt;
  return v;
}

}  // namespace oomsnap
