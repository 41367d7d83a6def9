#include "java/hotspot_vmstructs.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "base/checked_bytes.h"

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
// name pointer (at name_off) is null; calls visit(record). Ends on the entry
// cap or the deadline, whichever comes first.
template <typename Visit>
bool walk_table(ChunkCache& mem, uint64_t base, uint64_t stride, uint64_t name_off, const char* what,
                const Deadline& deadline, std::string& error, Visit&& visit) {
  if (!base || stride < 8 || stride > 4096 || !in_bounds(name_off, 8, stride)) {
    error = std::string("bad ") + what + " table (address or stride)";
    return false;
  }
  std::vector<uint8_t> rec(stride);
  for (size_t i = 0; i < HotSpotVm::kMaxEntries; ++i) {
    if (deadline.expired()) {
      error = std::string("deadline reached reading the ") + what + " table (at entry " + std::to_string(i) + ")";
      return false;
    }
    if (!mem.read(base + i * stride, rec.data(), stride)) {
      error = std::string("cannot read the ") + what + " table at entry " + std::to_string(i);
      return false;
    }
    const ByteView r(rec.data(), rec.size());
    uint64_t name = 0;
    r.read_u64(name_off, name);
    if (name == 0) return true;  // the terminating entry
    visit(r);
  }
  error = std::string(what) + " table has no end within " + std::to_string(HotSpotVm::kMaxEntries) + " entries";
  return false;
}

// A record's field. Every entry offset was checked against the stride before
// the walk, so 0 here only stands for a record that is itself garbage.
uint64_t u64_at(ByteView r, uint64_t off) {
  uint64_t v = 0;
  r.read_u64(off, v);
  return v;
}
int32_t i32_at(ByteView r, uint64_t off) {
  int32_t v = 0;
  r.read_i32(off, v);
  return v;
}

}  // namespace

std::optional<std::string_view> read_symbol(ChunkCache& mem, uint64_t symbol, uint32_t length_off, uint32_t body_off,
                                            std::span<char> buf) {
  uint16_t len = 0;
  if (!symbol || (symbol & 1) || !mem.get(symbol + length_off, len) || len == 0 || len > buf.size() ||
      !mem.read(symbol + body_off, buf.data(), len))
    return std::nullopt;
  return std::string_view(buf.data(), len);
}

std::string read_remote_c_string(ChunkCache& mem, uint64_t addr, size_t max) {
  constexpr uint64_t kPage = 4096;
  std::string s;
  char buf[64];
  while (addr && s.size() < max) {
    // Never across a page boundary: a string that ends right before an
    // unreadable page still reads, and a read that fails means the string
    // cannot be read (no byte-by-byte retries, each a failed syscall).
    const size_t n = static_cast<size_t>(std::min<uint64_t>({sizeof buf, max - s.size(), kPage - (addr & (kPage - 1))}));
    if (!mem.read(addr, buf, n)) return {};
    const size_t len = strnlen(buf, n);
    s.append(buf, len);
    if (len < n) return s;
    addr += n;
  }
  return {};  // no NUL within max bytes (or a null pointer)
}

std::string jre_version_of(std::string_view info) {
  constexpr std::string_view kJre = " JRE (";
  const size_t at = info.find(kJre);
  if (at == std::string_view::npos) return {};
  const std::string_view rest = info.substr(at + kJre.size());
  const size_t close = rest.find(')');
  if (close == std::string_view::npos || close == 0 || close > 64) return {};
  const std::string_view v = rest.substr(0, close);
  for (unsigned char c : v)
    if (c <= 0x20 || c >= 0x7f) return {};
  return std::string(v);
}

std::optional<HotSpotVm> HotSpotVm::read(ChunkCache& mem, const HotSpotSymbols& y, const Deadline& deadline,
                                         std::string& error) {
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
  // Optional (every HotSpot since 6 exports it, but the collector needs it
  // only where a field sits on a base class).
  uint64_t ty_super = 0;
  const bool have_super = s.type_superclass_name != 0;
  if (have_super && !read_layout(mem, {{s.type_superclass_name, &ty_super}}, error)) return std::nullopt;
  auto fits = [](uint64_t off, uint64_t len, uint64_t stride) { return in_bounds(off, len, stride); };
  if (have_super && !fits(ty_super, 8, ty_stride)) {
    error = "VMStructs entry layout does not fit its stride";
    return std::nullopt;
  }
  if (!fits(st_type, 8, st_stride) || !fits(st_field, 8, st_stride) || !fits(st_tstr, 8, st_stride) ||
      !fits(st_static, 4, st_stride) || !fits(st_off, 8, st_stride) || !fits(st_addr, 8, st_stride) ||
      !fits(ty_name, 8, ty_stride) || !fits(ty_size, 8, ty_stride) || !fits(in_name, 8, in_stride) ||
      !fits(in_value, 4, in_stride) || !fits(lo_name, 8, lo_stride) || !fits(lo_value, 8, lo_stride)) {
    error = "VMStructs entry layout does not fit its stride";
    return std::nullopt;
  }

  HotSpotVm vm;
  bool ok = walk_table(mem, structs, st_stride, st_type, "gHotSpotVMStructs", deadline, error, [&](ByteView r) {
    std::string type = read_remote_c_string(mem, u64_at(r, st_type));
    std::string name = read_remote_c_string(mem, u64_at(r, st_field));
    if (type.empty() || name.empty()) return;
    VmField f;
    f.is_static = i32_at(r, st_static) != 0;
    f.offset = u64_at(r, st_off);
    f.address = u64_at(r, st_addr);
    f.type = read_remote_c_string(mem, u64_at(r, st_tstr));
    vm.fields_.emplace(type + "::" + name, std::move(f));
  });
  ok = ok && walk_table(mem, types, ty_stride, ty_name, "gHotSpotVMTypes", deadline, error, [&](ByteView r) {
    std::string name = read_remote_c_string(mem, u64_at(r, ty_name));
    if (name.empty()) return;
    TypeEntry t;
    t.size = u64_at(r, ty_size);
    if (have_super) t.superclass = read_remote_c_string(mem, u64_at(r, ty_super));
    vm.types_.emplace(std::move(name), std::move(t));
  });
  ok = ok && walk_table(mem, ints, in_stride, in_name, "gHotSpotVMIntConstants", deadline, error, [&](ByteView r) {
    std::string name = read_remote_c_string(mem, u64_at(r, in_name));
    if (!name.empty()) vm.ints_.emplace(std::move(name), i32_at(r, in_value));
  });
  ok = ok && walk_table(mem, longs, lo_stride, lo_name, "gHotSpotVMLongConstants", deadline, error, [&](ByteView r) {
    std::string name = read_remote_c_string(mem, u64_at(r, lo_name));
    if (!name.empty()) vm.longs_.emplace(std::move(name), u64_at(r, lo_value));
  });
  if (!ok) return std::nullopt;
  if (vm.fields_.size() < 16 || vm.types_.size() < 16) {
    error = "VMStructs tables are nearly empty (" + std::to_string(vm.fields_.size()) + " fields, " +
            std::to_string(vm.types_.size()) + " types)";
    return std::nullopt;
  }
  return vm;
}

const VmField* HotSpotVm::field(std::string_view type, std::string_view name, std::string* declared_in) const {
  std::string t(type);
  // Up the superclass chain, at most kMaxTypeDepth types: a chain the
  // target made longer, or circular, ends there.
  for (int depth = 0; depth < kMaxTypeDepth && !t.empty(); ++depth) {
    auto it = fields_.find(t + "::" + std::string(name));
    if (it != fields_.end()) {
      if (declared_in) *declared_in = t;
      return &it->second;
    }
    t = superclass(t);
  }
  return nullptr;
}

const VmField* HotSpotVm::field_any(std::initializer_list<std::string_view> types, std::string_view name) const {
  for (auto t : types)
    if (const VmField* f = field(t, name)) return f;
  return nullptr;
}

std::optional<uint64_t> HotSpotVm::type_size(std::string_view type) const {
  auto it = types_.find(std::string(type));
  if (it == types_.end()) return std::nullopt;
  return it->second.size;
}

std::string HotSpotVm::superclass(std::string_view type) const {
  auto it = types_.find(std::string(type));
  return it == types_.end() ? std::string() : it->second.superclass;
}

std::optional<uint64_t> HotSpotVm::checked_type_size(std::initializer_list<std::string_view> types,
                                                     std::string& error) const {
  for (auto t : types) {
    auto size = type_size(t);
    if (!size) continue;
    if (*size == 0 || *size > kMaxTypeBytes) {
      error = "implausible size " + std::to_string(*size) + " of type " + std::string(t) + " in gHotSpotVMTypes";
      return std::nullopt;
    }
    return size;
  }
  error = "gHotSpotVMTypes has no type " + std::string(*types.begin());
  return std::nullopt;
}

std::optional<uint64_t> HotSpotVm::field_offset(std::initializer_list<std::string_view> types, std::string_view name,
                                                uint64_t bytes, std::string& error) const {
  for (auto t : types) {
    std::string decl;
    const VmField* f = field(t, name, &decl);
    if (!f) continue;
    std::string what = std::string(t) + "::" + std::string(name);
    if (decl != t) what += " (declared in " + decl + ")";
    if (f->is_static) {
      error = what + " is static, expected a field";
      return std::nullopt;
    }
    // A base class's field must fit in the base class and in the type read.
    auto size = checked_type_size({t}, error);
    if (!size) return std::nullopt;
    if (decl != t) {
      auto base = checked_type_size({decl}, error);
      if (!base) return std::nullopt;
      size = std::min(*size, *base);
    }
    if (!in_bounds(f->offset, bytes, *size)) {
      error = what + " at offset " + std::to_string(f->offset) + " (+" + std::to_string(bytes) +
              " bytes) does not fit in its type's " + std::to_string(*size) + " bytes";
      return std::nullopt;
    }
    return f->offset;
  }
  error = "VMStructs has no " + std::string(*types.begin()) + "::" + std::string(name);
  return std::nullopt;
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

namespace oomsnap {

std::optional<std::map<std::string, uint64_t>> read_jvm_flags(ChunkCache& mem, const HotSpotVm& vm,
                                                              std::initializer_list<const char*> wanted,
                                                              const Deadline& deadline, std::string& error) {
  // Real JVMs: ~1,300 flags of 24 bytes.
  constexpr uint64_t kMaxFlags = 10000, kMinRecord = 16, kMaxRecord = 256;
  std::map<std::string, uint64_t> out;
  // The flag record: JVMFlag (JDK 11+) or Flag (8), whichever describes a table.
  const char* type = nullptr;
  const VmField *flags = nullptr, *num = nullptr;
  for (const char* t : {"JVMFlag", "Flag"}) {
    flags = vm.field(t, "flags");
    num = vm.field(t, "numFlags");
    if (flags && num) {
      type = t;
      break;
    }
  }
  if (!type) return out;  // no flag table: every flag unknown
  auto size = vm.checked_type_size({type}, error);
  if (!size) return std::nullopt;
  if (*size < kMinRecord || *size > kMaxRecord) {
    error = "implausible " + std::string(type) + " record size " + std::to_string(*size);
    return std::nullopt;
  }
  auto name_off = vm.field_offset({type}, "_name", 8, error);
  if (!name_off) return std::nullopt;
  auto addr_off = vm.field_offset({type}, "_addr", 8, error);
  if (!addr_off) return std::nullopt;
  uint64_t base = 0, n = 0;
  if (!mem.get(flags->address, base) || !mem.get(num->address, n)) {
    error = "cannot read " + std::string(type) + "::flags or ::numFlags";
    return std::nullopt;
  }
  if (n > kMaxFlags) {
    error = "implausible JVMFlag::numFlags " + std::to_string(n);
    return std::nullopt;
  }
  std::vector<uint8_t> all(n * *size);
  if (!mem.read(base, all.data(), all.size())) {
    error = "cannot read the " + std::string(type) + " table (" + std::to_string(n) + " flags)";
    return std::nullopt;
  }
  const ByteView table(all.data(), all.size());
  for (uint64_t i = 0; i < n; ++i) {
    if ((i & 255) == 0 && deadline.expired()) {
      error = "deadline reached reading the JVM's flags";
      return std::nullopt;
    }
    ByteView rec;
    uint64_t np = 0, vp = 0;
    if (!table.element(i, *size, rec) || !rec.read_u64(*name_off, np) || !rec.read_u64(*addr_off, vp)) continue;
    const std::string s = read_remote_c_string(mem, np, 64);
    for (const char* w : wanted)
      if (s == w) out[s] = vp;
  }
  return out;
}

}  // namespace oomsnap
