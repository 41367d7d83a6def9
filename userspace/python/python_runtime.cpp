#include "python/python_runtime.h"


#include <algorithm>

#include "base/checked_bytes.h"
#include "core/runtime_module.h"
#include "elf/module_map.h"
#include "elf/x86_code.h"

namespace oomsnap {
namespace {

std::string basename_of(const std::string& path) {
  auto slash = path.rfind('/');
  std::string b = slash == std::string::npos ? path : path.substr(slash + 1);
  if (auto del = b.find(" (deleted)"); del != std::string::npos) b.resize(del);
  return b;
}

// The first kMaxArenaCandidates distinct 8- and 4-byte globals loaded by
// the first kArenaCodeBytes of each exported function that reads
// obmalloc.c's arena table (their code is the module's, and may be
// anything: the candidates are only tried against the target's memory).
constexpr size_t kArenaCodeBytes = 1024, kMaxArenaCandidates = 8;
void arena_table_candidates(const ElfFile& elf, uint64_t bias, PythonRuntime& rt) {
  const Disassembler dis;
  if (!dis.ok()) return;
  auto add = [](std::vector<uint64_t>& to, uint64_t addr) {
    if (to.size() < kMaxArenaCandidates && std::find(to.begin(), to.end(), addr) == to.end()) to.push_back(addr);
  };
  for (const char* fn : {"_Py_GetAllocatedBlocks", "_PyObject_DebugMallocStats"}) {
    const auto sym = elf.symbol(fn);
    if (!sym || !sym->value) continue;
    std::span<const uint8_t> code;
    for (size_t len = kArenaCodeBytes; len >= 64 && code.empty(); len /= 2)  // near the end of a segment: less
      if (auto b = elf.bytes_at_vaddr(sym->value, len)) code = *b;
    for (const Insn& i : dis.decode(sym->value, code)) {
      if (i.kind == Insn::kLoad64) add(rt.arenas_candidates, i.target + bias);
      else if (i.kind == Insn::kLoad32) add(rt.maxarenas_candidates, i.target + bias);
    }
  }
}

// Fills `rt` from a module's ELF when it holds _PyRuntime.
bool inspect_module(const Target& target, const ElfFile& elf, uint64_t inode, const std::string& path,
                    PythonRuntime& rt) {
  uint64_t link_addr = 0;
  if (auto sym = elf.symbol("_PyRuntime")) link_addr = sym->value;
  else if (auto* sec = elf.section(".PyRuntime")) link_addr = sec->addr;
  if (!link_addr) return false;
  auto bias = module_load_bias(elf, target.maps(), inode);
  if (!bias) return false;
  rt.bias = *bias;
  rt.runtime_addr = link_addr + *bias;
  rt.module = path;
  rt.static_range = module_range(elf, *bias);
  if (auto v = elf.symbol("Py_Version"); v && v->size >= 4) {
    if (auto bytes = elf.bytes_at_vaddr(v->value, 4); bytes && ByteView(*bytes).read_u32(0, rt.version_hex))
      rt.exact_version = true;
  }
  auto arenas = elf.symbol("arenas"), maxarenas = elf.symbol("maxarenas");
  if (arenas && maxarenas && arenas->value && maxarenas->value && arenas->size == 8 && maxarenas->size == 4) {
    rt.arenas_var = arenas->value + *bias;
    rt.maxarenas_var = maxarenas->value + *bias;
  } else {
    arena_table_candidates(elf, *bias, rt);
  }
  if (auto named = python_version_from_name(basename_of(path))) {
    rt.free_threaded_name = named->second;
    if (!rt.exact_version) rt.version_hex = named->first;
  }
  return true;
}

}  // namespace

std::optional<std::pair<uint32_t, bool>> python_version_from_name(const std::string& path) {
  const std::string b = basename_of(path);
  size_t at = 0;
  if (b.rfind("libpython3.", 0) == 0) at = 11;
  else if (b.rfind("python3.", 0) == 0) at = 8;
  else return std::nullopt;
  // The minor version: 1-3 digits (a longer run of digits is no version;
  // sscanf's %u would overflow on it).
  unsigned minor = 0;
  size_t digits = 0;
  while (at + digits < b.size() && digits < 4 && b[at + digits] >= '0' && b[at + digits] <= '9')
    minor = minor * 10 + static_cast<unsigned>(b[at + digits++] - '0');
  if (digits == 0 || digits > 3 || minor > 255) return std::nullopt;
  const bool t = at + digits < b.size() && b[at + digits] == 't';
  return std::make_pair((3u << 24) | (minor << 16), t);
}

std::string python_version_text(uint32_t hex, bool exact) {
  const unsigned major = hex >> 24, minor = (hex >> 16) & 0xff, micro = (hex >> 8) & 0xff, level = (hex >> 4) & 0xf,
                 serial = hex & 0xf;
  std::string s = std::to_string(major) + "." + std::to_string(minor);
  if (!exact) return s;
  s += "." + std::to_string(micro);
  if (level == 0xa) s += "a" + std::to_string(serial);
  else if (level == 0xb) s += "b" + std::to_string(serial);
  else if (level == 0xc) s += "rc" + std::to_string(serial);
  return s;
}

bool is_libpython_mapping(const Mapping& m) {
  return m.offset == 0 && m.inode != 0 && basename_of(m.path).rfind("libpython3.", 0) == 0;
}

std::optional<PythonRuntime> find_python_runtime(Target& target) {
  PythonRuntime rt;
  // Embedded or --enable-shared builds: the runtime is in libpython3.X.
  if (find_runtime_module(target, is_libpython_mapping, [&](const ElfFile& elf, uint64_t inode, const std::string& path) {
        return inspect_module(target, elf, inode, path, rt);
      }))
    return rt;
  return std::nullopt;
}

}  // namespace oomsnap
