// Classes and their fields in a live HotSpot JVM, read out of process: a
// class of the boot loader (java.base's) found by name in its class loader
// data (the last of ClassLoaderDataGraph::_head's list; its _klasses linked
// by Klass::_next_link), a field found by name in its field table (field_info.h)
// through the class's constant pool, and the values of static fields in the
// class's mirror (Klass::_java_mirror), references decoded as the JVM
// compresses them. Everything from VMStructs; JDK 8 exports no loader's
// class list (ClassLoaderData::_klasses), so there the system dictionary's
// hashtable is read instead.
//
// Bounded like the heap walk: the loader and klass lists have caps (which
// also end a cycle) and the deadline; every pointer, count and index is
// checked before it is used; a failed read is an error, never a guess.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/chunk_cache.h"
#include "core/collector.h"
#include "java/field_info.h"
#include "java/hotspot_vmstructs.h"
#include "java/java_heap.h"

namespace oomsnap {

class HotSpotClasses {
 public:
  static constexpr size_t kMaxLoaders = size_t{1} << 16;
  static constexpr size_t kMaxKlasses = size_t{1} << 19;
  static constexpr size_t kMaxBuckets = size_t{1} << 20;
  // Field tables larger than this are not read (a class has at most 65535
  // fields; real ones have a few hundred bytes).
  static constexpr uint32_t kMaxFieldTableBytes = 1u << 20;

  // nullopt + error naming what VMStructs does not describe (or describes
  // out of its type). compressed_oops: the JVM's UseCompressedOops.
  static std::optional<HotSpotClasses> resolve(ChunkCache& mem, const HotSpotVm& vm, const JavaHeapLayout& L,
                                               bool compressed_oops, std::string& error);

  // The boot loader's klasses named in `names` (internal form:
  // "java/nio/Bits"), in the same order, 0 for one not loaded (JDK 8's
  // dictionary holds every loader's classes: there the first of a name).
  // The walk ends when all are found. false + error when a list cannot be
  // read, or a cap or the deadline ends it first.
  bool find(ChunkCache& mem, const std::vector<std::string_view>& names, std::vector<uint64_t>& klasses,
            const Deadline& deadline, std::string& error) const;

  // A field the klass itself declares (not its superclasses), by name;
  // nullopt + error when it is not there or not laid out.
  std::optional<JavaFieldEntry> field(ChunkCache& mem, uint64_t klass, std::string_view name,
                                      std::string& error) const;

  // Whether the class's static initializer has run (its statics hold their values).
  bool initialized(ChunkCache& mem, uint64_t klass) const;

  // The class's mirror (its java.lang.Class object); 0 when unreadable.
  uint64_t mirror(ChunkCache& mem, uint64_t klass) const;

  // The object a reference field at `addr` points to, decoded as the JVM
  // stores references in objects (narrow when compressed oops are on); 0
  // for null or unreadable.
  uint64_t reference_at(ChunkCache& mem, uint64_t addr) const;

 private:
  bool name_is(ChunkCache& mem, uint64_t symbol, std::string_view name) const;
  // Each loaded klass to `visit` until it returns true; false + error when
  // a list cannot be read or a cap or the deadline ends it.
  bool visit_boot_list(ChunkCache& mem, const Deadline& deadline, std::string& error,
                       const std::function<bool(uint64_t)>& visit) const;
  bool visit_dictionary(ChunkCache& mem, const Deadline& deadline, std::string& error,
                        const std::function<bool(uint64_t)>& visit) const;
  std::optional<std::vector<JavaFieldEntry>> fields_of(ChunkCache& mem, uint64_t klass, std::string& error) const;

  uint64_t graph_head_ = 0;  // &ClassLoaderDataGraph::_head
  uint32_t cld_next_ = 0, cld_klasses_ = 0, klass_next_link_ = 0, klass_name_ = 0;
  // JDK 8: &SystemDictionary::_dictionary (0: the loader lists are read) and its hashtable's layout.
  uint64_t dictionary_ = 0;
  uint32_t table_size_ = 0, table_buckets_ = 0, bucket_entry_ = 0, bucket_stride_ = 8, entry_next_ = 0,
           entry_literal_ = 0;
  uint32_t symbol_length_ = 0, symbol_body_ = 0;
  uint32_t klass_mirror_ = 0;
  bool mirror_is_handle_ = true;  // OopHandle (JDK 9+): a pointer to the oop; else the oop itself (JDK 8)
  uint32_t init_state_ = 0;
  int64_t fully_initialized_ = 4;
  uint32_t constants_ = 0, cp_length_ = 0;
  uint64_t cp_header_ = 0;  // sizeof(ConstantPool): its slots follow it
  uint32_t array_length_ = 0, array_data_ = 4;
  // JDK 21+: _fieldinfo_stream; else _fields and _java_fields_count.
  bool stream_ = false;
  uint32_t fields_ = 0, java_fields_count_ = 0;
  LegacyFieldLayout legacy_;
  FieldFlagBits flag_bits_;
  bool compressed_oops_ = true;
  uint64_t narrow_base_ = 0;
  uint32_t narrow_shift_ = 0;
};

}  // namespace oomsnap
