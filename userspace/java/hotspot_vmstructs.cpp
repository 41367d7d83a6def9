#include "java/hotspot_vmstructs.h"

#include <cstring>
#include <vector>

namespace oomsnap {
namespace {

bool read_u64(ChunkCache& mem, uint64_t addr, uint64_t& v) { return addr && mem.get(addr, v); }

// Reads the layout variables; all must be readable and small.
bool read_layout(ChunkCache& mem, std::initializer_list<std::pair<uint64_t, uint64_t*>> vars, std::string& error) {
  for (auto [addr, out] : vars) {
    if (!read_u64(mem, addr, *out) || *out > 4096) {
      error = "unreadable or implausible VMStructs entry layout variable";
      return false;
    }
  }
  return true;
}

// Walks a table of `stride`-byte records at `base` until the record whose
// name pointer (at name_off) is null; calls visit(record bytes).
template <typename Visit>
bool walk_table(ChunkCache& mem, uint64_t base, uint64_t stride, uint64_t name_off, const char* what,
                std::string& error, Visit&& visit) {
  if (!base || stride < 8 || stride > 4096 || name_off + 8 > stride) {
    error = std::string("bad ") + what + " table (address or stride)";
    return false;
  }
  std::vector<uint8_t> rec(stride);
  for (size_t i = 0; i < HotSpotVm::kMaxEntries; ++i) {
    if (!mem.read(base + i * stride, rec.data(), stride)) {
      error = std::string("cannot read the ") + what + " table at entry " + std::to_string(i);
      return false;
    }
    uint64_t name = 0;
    std::memcpy(&name, rec.data() + name_off, 8);
    if (name == 0) return true;  // the terminating entry
    visit(rec.data());
  }
  error = std::string(what) + " table has no end within " + std::to_string(HotSpotVm::kMaxEntries) + " entries";
  return false;
}

uint64_t at64(const uint8_t* rec, uint64_t off) {
  uint64_t v;
  std::memcpy(&v, rec + off, 8);
  return v;
}

}  // namespace

std::string read_remote_c_string(ChunkCache& mem, uint64_t addr, size_t max) {
  std::string s;
  char buf[64];
  while (addr && s.size() < max) {
    // Small steps: a string near the end of a mapping must not fail as a whole.
    const size_t n = std::min(sizeof buf, max - s.size());
    if (!mem.read(addr, buf, n)) {
      if (!mem.read(addr, buf, 1)) return {};
      if (buf[0] == 0) return s;
      s += buf[0];
      ++addr;
      continue;
    }
    const size_t len = strnlen(buf, n);
    s.append(buf, len);
    if (len < n) return s;
    addr += n;
  }
  return s.size() < max ? s : std::string();
}

std::optional<HotSpotVm> HotSpotVm::read(ChunkCache& mem, const HotSpotSymbols& y, std::string& error) {
  HotSpotSymbols s = y;
  uint64_t st_type = 0, st_field = 0, st_tstr = 0, st_static = 0, st_off = 0, st_addr = 0, st_stride = 0;
  uint64_t ty_name = 0, ty_size = 0, ty_stride = 0, in_name = 0, in_value = 0, in_stride = 0, lo_name = 0,
           lo_value = 0, lo_stride = 0;
  if (!read_layout(mem,
                   {{s.struct_type_name, &st_type},
                    {s.struct_field_name, &st_field},
                    {s.struct_type_string, &st_tstr},
                    {s.struct_is_static, &st_static},
                    {s.struct_offset, &st_off},
                    {s.struct_address, &st_addr},
                    {s.struct_stride, &st_stride},
                    {s.type_type_name, &ty_name},
                    {s.type_size, &ty_size},
                    {s.type_stride, &ty_stride},
                    {s.int_name, &in_name},
                    {s.int_value, &in_value},
                    {s.int_stride, &in_stride},
                    {s.long_name, &lo_name},
                    {s.long_value, &lo_value},
                    {s.long_stride, &lo_stride}},
                   error))
    return std::nullopt;
  uint64_t structs = 0, types = 0, ints = 0, longs = 0;
  if (!read_u64(mem, s.structs, structs) || !read_u64(mem, s.types, types) || !read_u64(mem, s.int_constants, ints) ||
      !read_u64(mem, s.long_constants, longs)) {
    error = "cannot read the gHotSpotVM* table pointers";
    return std::nullopt;
  }
  auto fits = [](uint64_t off, uint64_t len, uint64_t stride) { return off + len <= stride; };
  if (!fits(st_type, 8, st_stride) || !fits(st_field, 8, st_stride) || !fits(st_tstr, 8, st_stride) ||
      !fits(st_static, 4, st_stride) || !fits(st_off, 8, st_stride) || !fits(st_addr, 8, st_stride) ||
      !fits(ty_name, 8, ty_stride) || !fits(ty_size, 8, ty_stride) || !fits(in_name, 8, in_stride) ||
      !fits(in_value, 4, in_stride) || !fits(lo_name, 8, lo_stride) || !fits(lo_value, 8, lo_stride)) {
    error = "VMStructs entry layout does not fit its stride";
    return std::nullopt;
  }

  HotSpotVm vm;
  bool ok = walk_table(mem, structs, st_stride, st_type, "gHotSpotVMStructs", error, [&](const uint8_t* r) {
    std::string type = read_remote_c_string(mem, at64(r, st_type));
    std::string name = read_remote_c_string(mem, at64(r, st_field));
    if (type.empty() || name.empty()) return;
    VmField f;
    int32_t is_static = 0;
    std::memcpy(&is_static, r + st_static, 4);
    f.is_static = is_static != 0;
    f.offset = at64(r, st_off);
    f.address = at64(r, st_addr);
    f.type = read_remote_c_string(mem, at64(r, st_tstr));
    vm.fields_.emplace(type + "::" + name, std::move(f));
  });
  ok = ok && walk_table(mem, types, ty_stride, ty_name, "gHotSpotVMTypes", error, [&](const uint8_t* r) {
    std::string name = read_remote_c_string(mem, at64(r, ty_name));
    if (!name.empty()) vm.types_.emplace(std::move(name), at64(r, ty_size));
  });
  ok = ok && walk_table(mem, ints, in_stride, in_name, "gHotSpotVMIntConstants", error, [&](const uint8_t* r) {
    std::string name = read_remote_c_string(mem, at64(r, in_name));
    int32_t v = 0;
    std::memcpy(&v, r + in_value, 4);
    if (!name.empty()) vm.ints_.emplace(std::move(name), v);
  });
  ok = ok && walk_table(mem, longs, lo_stride, lo_name, "gHotSpotVMLongConstants", error, [&](const uint8_t* r) {
    std::string name = read_remote_c_string(mem, at64(r, lo_name));
    if (!name.empty()) vm.longs_.emplace(std::move(name), at64(r, lo_value));
  });
  if (!ok) return std::nullopt;
  if (vm.fields_.size() < 16 || vm.types_.size() < 16) {
    error = "VMStructs tables are nearly empty (" + std::to_string(vm.fields_.size()) + " fields, " +
            std::to_string(vm.types_.size()) + " types)";
    return std::nullopt;
  }
  return vm;
}

const VmField* HotSpotVm::field(std::string_view type, std::string_view name) const {
  std::string key(type);
  key += "::";
  key += name;
  auto it = fields_.find(key);
  return it == fields_.end() ? nullptr : &it->second;
}

const VmField* HotSpotVm::field_any(std::initializer_list<std::string_view> types, std::string_view name) const {
  for (auto t : types)
    if (const VmField* f = field(t, name)) return f;
  return nullptr;
}

std::optional<uint64_t> HotSpotVm::type_size(std::string_view type) const {
  auto it = types_.find(std::string(type));
  if (it == types_.end()) return std::nullopt;
  return it->second;
}

std::optional<int64_t> HotSpotVm::int_constant(std::string_view name) const {
  auto it = ints_.find(std::string(name));
  if (it == ints_.end()) return std::nullopt;
  return it->second;
}

std::optional<uint64_t> HotSpotVm::long_constant(std::string_view name) const {
  auto it = longs_.find(std::string(name));
  if (it == longs_.end()) return std::nullopt;
  return it->second;
}

}  // namespace oomsnap
