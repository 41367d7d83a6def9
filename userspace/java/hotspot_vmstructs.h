// HotSpot's self-description, read from a live JVM: the gHotSpotVMStructs,
// gHotSpotVMTypes, gHotSpotVMIntConstants and gHotSpotVMLongConstants tables
// that libjvm exports for the Serviceability Agent. Every offset the Java
// collector uses comes from here, none is hard-coded per JDK version. The
// entry layouts (field offsets, strides) are themselves exported variables
// that libjvm fills at start-up, so they are read from the process too.
// Bounded: entry caps, string length caps, the deadline; garbage gives an
// error, never a hang. Nothing read here is trusted: a process can map a file
// named libjvm.so that exports tables of its own making, so every offset and
// size is checked against what it indexes (field_offset, read_jvm_flags)
// before anyone uses it.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/chunk_cache.h"
#include "core/collector.h"

namespace oomsnap {

// Target addresses of libjvm's exported table symbols (load bias applied).
struct HotSpotSymbols {
  uint64_t structs = 0, types = 0, int_constants = 0, long_constants = 0;  // T** variables
  // size_t variables describing the entry layouts
  uint64_t struct_type_name = 0, struct_field_name = 0, struct_type_string = 0, struct_is_static = 0,
           struct_offset = 0, struct_address = 0, struct_stride = 0;
  uint64_t type_type_name = 0, type_size = 0, type_stride = 0;
  // gHotSpotVMTypeEntrySuperclassNameOffset; 0 when libjvm exports none
  // (then every type is read as a top-level one).
  uint64_t type_superclass_name = 0;
  uint64_t int_name = 0, int_value = 0, int_stride = 0;
  uint64_t long_name = 0, long_value = 0, long_stride = 0;
};

struct VmField {
  bool is_static = false;
  uint64_t offset = 0;   // non-static: byte offset in the object
  uint64_t address = 0;  // static: address of the variable in the target
  std::string type;      // C++ type as the table spells it
};

class HotSpotVm {
 public:
  static constexpr size_t kMaxEntries = 20000;
  // Base classes followed up from a type when a field is looked up: HotSpot's
  // deepest chains are a few levels (HeapRegion < G1ContiguousSpace <
  // CompactibleSpace < Space in JDK 11); this also ends a cycle.
  static constexpr int kMaxTypeDepth = 16;
  // The largest type size believed: HotSpot's biggest structs the collector
  // indexes (JavaThread, G1CollectedHeap) are a few KiB.
  static constexpr uint64_t kMaxTypeBytes = 64 << 10;
  // nullopt + error when the tables cannot be read or make no sense (or the
  // deadline passes while reading them).
  static std::optional<HotSpotVm> read(ChunkCache& mem, const HotSpotSymbols& syms, const Deadline& deadline,
                                       std::string& error);

  // "Type::field", declared by the type itself or by one of its base classes
  // (gHotSpotVMTypes names each type's superclass: a field moves to a base
  // class between versions, e.g. HeapRegion::_bottom is Space's in JDK 11);
  // the nearest declaration wins. declared_in, when given, is set to the type
  // that declares it. For renamed types, the first name that exists wins.
  const VmField* field(std::string_view type, std::string_view name, std::string* declared_in = nullptr) const;
  const VmField* field_any(std::initializer_list<std::string_view> types, std::string_view name) const;
  // The offset of a non-static field that is read as `bytes` bytes, checked
  // against its own type: offset + bytes must fit in the type's size from
  // gHotSpotVMTypes, itself at most kMaxTypeBytes (and, for a field of a base
  // class, in the base class's size too). The first of `types` that has the
  // field (itself or through a base class) is used. nullopt + an error naming the field when it is
  // missing, static, or does not fit.
  std::optional<uint64_t> field_offset(std::initializer_list<std::string_view> types, std::string_view name,
                                       uint64_t bytes, std::string& error) const;
  // The size of the first of `types` that exists, when it is at most
  // kMaxTypeBytes; nullopt + error otherwise.
  std::optional<uint64_t> checked_type_size(std::initializer_list<std::string_view> types, std::string& error) const;
  std::optional<uint64_t> type_size(std::string_view type) const;
  // The superclass gHotSpotVMTypes names for `type`; empty for a top-level
  // type, an unknown one, or when libjvm exports no superclass names.
  std::string superclass(std::string_view type) const;
  bool has_type(std::string_view type) const { return types_.count(std::string(type)) != 0; }
  std::optional<int64_t> int_constant(std::string_view name) const;
  std::optional<uint64_t> long_constant(std::string_view name) const;
  size_t field_count() const { return fields_.size(); }

 private:
  std::unordered_map<std::string, VmField> fields_;
  struct TypeEntry {
    uint64_t size = 0;
    std::string superclass;
  };
  std::unordered_map<std::string, TypeEntry> types_;
  std::unordered_map<std::string, int64_t> ints_;
  std::unordered_map<std::string, uint64_t> longs_;
};

// Offsets resolved one by one from VMStructs, each checked against the size
// of the type it indexes; the first that is missing or does not fit is the
// error, and the ones after it are not looked at.
class OffsetResolver {
 public:
  explicit OffsetResolver(const HotSpotVm& vm) : vm_(vm) {}
  // A field read as `bytes` bytes at its offset.
  uint32_t field(std::initializer_list<std::string_view> types, std::string_view name, uint64_t bytes) {
    if (error) return 0;
    auto off = vm_.field_offset(types, name, bytes, err_);
    if (!off) error = err_;
    // field_offset keeps offsets below HotSpotVm::kMaxTypeBytes.
    return static_cast<uint32_t>(off.value_or(0));
  }
  // A struct embedded in another (HeapRegion::_type, Thread::_tlab): its
  // offset must leave room for the member's whole type.
  uint32_t embedded(std::initializer_list<std::string_view> types, std::string_view name,
                    std::initializer_list<std::string_view> member_types) {
    if (error) return 0;
    auto size = vm_.checked_type_size(member_types, err_);
    if (!size) {
      error = err_;
      return 0;
    }
    return field(types, name, *size);
  }
  std::optional<std::string> error;

 private:
  const HotSpotVm& vm_;
  std::string err_;
};

// The value of a static VMStructs variable (read from its address in the target).
template <typename T>
std::optional<T> read_static(ChunkCache& mem, const VmField* f) {
  T v{};
  if (!f || !f->is_static || !mem.get(f->address, v)) return std::nullopt;
  return v;
}

// A HotSpot Symbol's bytes (its u2 length at length_off, its body at
// body_off) read into buf: nullopt when the pointer is null or tagged (low
// bit set), the symbol is empty or longer than buf, or it cannot be read.
std::optional<std::string_view> read_symbol(ChunkCache& mem, uint64_t symbol, uint32_t length_off, uint32_t body_off,
                                            std::span<char> buf);

// Reads a NUL-terminated C string of at most `max` bytes; empty when
// unreadable or longer. At most a few reads whatever the bytes (a read never
// crosses a page, so the first one that fails ends it).
std::string read_remote_c_string(ChunkCache& mem, uint64_t addr, size_t max = 256);

// The JDK's version as `java -version` prints it on its "Runtime
// Environment (build ...)" line, from HotSpot's internal VM info string
// (Abstract_VM_Version::_s_internal_vm_info_string: "OpenJDK 64-Bit Server
// VM (25.504-b01) for linux-amd64 JRE (1.8.0_504-8u504-ga-1-b01), built on
// ..."): what follows " JRE (" up to ")". JDK 8's VM release (25.504-b01)
// is not the JDK's version; from JDK 9 on both are the same string. Empty
// when the string has no such part, or it is not a plausible version (at
// most 64 printable characters, no space).
std::string jre_version_of(std::string_view vm_info);

// The JVM's command-line flags among `wanted`, by name, each with the address
// of its value: JVMFlag::flags[JVMFlag::numFlags], each record holding its
// name and the address of its value. An empty map when the JVM exports no
// flag table (the caller decides what a missing flag means); nullopt + error
// when it exports one whose layout does not fit its own record size.
std::optional<std::map<std::string, uint64_t>> read_jvm_flags(ChunkCache& mem, const HotSpotVm& vm,
                                                              std::initializer_list<const char*> wanted,
                                                              const Deadline& deadline, std::string& error);

}  // namespace oomsnap
