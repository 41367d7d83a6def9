#include "java/hotspot_classes.h"

#include <functional>

#include "base/text.h"

namespace oomsnap {
namespace {

// The bounds of every walk over a list the target keeps: a cap on the
// entries (which also ends a cycle) and the deadline, checked every 256.
bool within_bounds(size_t seen, const char* list, const Deadline& deadline, std::string& error) {
  if (seen >= HotSpotClasses::kMaxKlasses) {
    error = "more than " + std::to_string(HotSpotClasses::kMaxKlasses) + " entries in " + list + " (a cycle?)";
    return false;
  }
  if ((seen & 255) == 255 && deadline.expired()) {
    error = "the deadline passed while looking for classes by name in " + std::string(list);
    return false;
  }
  return true;
}

}  // namespace

std::optional<HotSpotClasses> HotSpotClasses::resolve(ChunkCache& mem, const HotSpotVm& vm, const JavaHeapLayout& L,
                                                      bool compressed_oops, std::string& error) {
  HotSpotClasses c;
  const VmField* head = vm.field("ClassLoaderDataGraph", "_head");
  if (!head || !head->is_static) {
    error = "VMStructs has no ClassLoaderDataGraph::_head";
    return std::nullopt;
  }
  c.graph_head_ = head->address;
  OffsetResolver o(vm);
  if (vm.field("ClassLoaderData", "_klasses") && vm.field("Klass", "_next_link")) {
    c.cld_next_ = o.field({"ClassLoaderData"}, "_next", 8);
    c.cld_klasses_ = o.field({"ClassLoaderData"}, "_klasses", 8);
    c.klass_next_link_ = o.field({"Klass"}, "_next_link", 8);
  } else if (const VmField* dict = vm.field("SystemDictionary", "_dictionary"); dict && dict->is_static) {
    // JDK 8 lists no loader's classes, but its system dictionary holds
    // every loaded class: a hashtable, as the Serviceability Agent reads it
    // (the mtInternal instances describe every instance's layout).
    c.dictionary_ = dict->address;
    c.table_size_ = o.field({"BasicHashtable<mtInternal>"}, "_table_size", 4);
    c.table_buckets_ = o.field({"BasicHashtable<mtInternal>"}, "_buckets", 8);
    c.bucket_entry_ = o.field({"HashtableBucket<mtInternal>"}, "_entry", 8);
    c.bucket_stride_ = static_cast<uint32_t>(vm.type_size("HashtableBucket<mtInternal>").value_or(0));
    c.entry_next_ = o.field({"BasicHashtableEntry<mtInternal>"}, "_next", 8);
    c.entry_literal_ = o.field({"IntptrHashtableEntry"}, "_literal", 8);
    // The buckets are read as one array of entry pointers.
    if (!o.error && (c.bucket_entry_ != 0 || c.bucket_stride_ != 8)) {
      error = "HashtableBucket<mtInternal> is not one entry pointer";
      return std::nullopt;
    }
  } else {
    error = "VMStructs describes neither the loaders' class lists (ClassLoaderData::_klasses) nor "
            "SystemDictionary::_dictionary";
    return std::nullopt;
  }
  c.klass_mirror_ = o.field({"Klass"}, "_java_mirror", 8);
  c.init_state_ = o.field({"InstanceKlass"}, "_init_state", 1);
  c.constants_ = o.field({"InstanceKlass"}, "_constants", 8);
  c.cp_length_ = o.field({"ConstantPool"}, "_length", 4);
  // Array<T> is one template: its _length is described for Array<int>,
  // its _data per element type.
  c.array_length_ = o.field({"Array<int>"}, "_length", 4);
  c.stream_ = vm.field("InstanceKlass", "_fieldinfo_stream") != nullptr;
  if (c.stream_) {
    c.fields_ = o.field({"InstanceKlass"}, "_fieldinfo_stream", 8);
    c.array_data_ = o.field({"Array<u1>"}, "_data", 1);
  } else {
    c.fields_ = o.field({"InstanceKlass"}, "_fields", 8);
    c.java_fields_count_ = o.field({"InstanceKlass"}, "_java_fields_count", 2);
    c.array_data_ = o.field({"Array<u2>"}, "_data", 2);
  }
  auto cp_size = vm.checked_type_size({"ConstantPool"}, error);
  if (o.error || !cp_size) {
    if (o.error) error = *o.error;
    return std::nullopt;
  }
  c.cp_header_ = *cp_size;
  const VmField* mirror = vm.field("Klass", "_java_mirror");
  c.mirror_is_handle_ = mirror->type != "oop";
  if (auto v = vm.int_constant("InstanceKlass::fully_initialized")) c.fully_initialized_ = *v;
  // The field table's layout, from the JVM's own constants.
  auto constant = [&](const char* name, uint32_t& out) {
    auto v = vm.int_constant(name);
    if (!v || *v < 0 || *v > 1024) {
      error = std::string("VMStructs has no plausible ") + name;
      return false;
    }
    out = static_cast<uint32_t>(*v);
    return true;
  };
  bool ok = true;
  if (c.stream_) {
    FieldFlagBits& b = c.flag_bits_;
    ok = constant("FieldInfo::FieldFlags::_ff_initialized", b.initialized) &&
         constant("FieldInfo::FieldFlags::_ff_injected", b.injected) &&
         constant("FieldInfo::FieldFlags::_ff_generic", b.generic) &&
         constant("FieldInfo::FieldFlags::_ff_stable", b.stable) &&
         constant("FieldInfo::FieldFlags::_ff_contended", b.contended);
  } else {
    LegacyFieldLayout& l = c.legacy_;
    ok = constant("FieldInfo::field_slots", l.slots) &&
         constant("FieldInfo::access_flags_offset", l.access_flags_slot) &&
         constant("FieldInfo::name_index_offset", l.name_index_slot) &&
         constant("FieldInfo::low_packed_offset", l.low_packed_slot) &&
         constant("FieldInfo::high_packed_offset", l.high_packed_slot) &&
         constant("FIELDINFO_TAG_SIZE", l.tag_size) && constant("FIELDINFO_TAG_OFFSET", l.tag_offset);
    if (auto v = vm.int_constant("JVM_ACC_FIELD_INTERNAL"); v && *v > 0 && *v <= 0xffff)
      l.internal_flag = static_cast<uint32_t>(*v);
  }
  if (!ok) return std::nullopt;
  c.klass_name_ = L.klass_name;
  c.symbol_length_ = L.symbol_length;
  c.symbol_body_ = L.symbol_body;
  c.compressed_oops_ = compressed_oops;
  if (compressed_oops) {
    const VmField* base = vm.field_any({"CompressedOops", "Universe"}, "_narrow_oop._base");
    const VmField* shift = vm.field_any({"CompressedOops", "Universe"}, "_narrow_oop._shift");
    if (!base || !shift) base = vm.field("CompressedOops", "_base"), shift = vm.field("CompressedOops", "_shift");
    auto b = read_static<uint64_t>(mem, base);
    auto s = read_static<int32_t>(mem, shift);
    if (!b || !s || *s < 0 || *s > 8) {
      error = "cannot read the narrow oop encoding (CompressedOops::_base and _shift)";
      return std::nullopt;
    }
    c.narrow_base_ = *b;
    c.narrow_shift_ = static_cast<uint32_t>(*s);
  }
  return c;
}

bool HotSpotClasses::name_is(ChunkCache& mem, uint64_t symbol, std::string_view name) const {
  char buf[64];
  if (name.size() > sizeof buf) return false;
  // A buffer of the name's size: a longer symbol is not read.
  auto s = read_symbol(mem, symbol, symbol_length_, symbol_body_, std::span<char>(buf, name.size()));
  return s && *s == name;
}

bool HotSpotClasses::visit_boot_list(ChunkCache& mem, const Deadline& deadline, std::string& error,
                                        const std::function<bool(uint64_t)>& visit) const {
  std::vector<uint64_t> loaders;
  uint64_t cld = 0;
  if (!mem.get(graph_head_, cld)) {
    error = "cannot read ClassLoaderDataGraph::_head";
    return false;
  }
  while (cld) {
    if (loaders.size() >= kMaxLoaders) {
      error = "more than " + std::to_string(kMaxLoaders) + " class loader data in the graph (a cycle?)";
      return false;
    }
    loaders.push_back(cld);
    if (!mem.get(cld + cld_next_, cld)) {
      error = "cannot read the class loader data at " + hex(loaders.back());
      return false;
    }
  }
  // New loader data is put at the list's head: the boot loader's, made at
  // start-up, is last.
  if (loaders.empty()) return true;
  uint64_t k = 0;
  if (!mem.get(loaders.back() + cld_klasses_, k)) {
    error = "cannot read the classes of the boot loader's data at " + hex(loaders.back());
    return false;
  }
  for (size_t seen = 0; k; ++seen) {
    if (!within_bounds(seen, "the boot loader's class list", deadline, error)) return false;
    if (visit(k)) return true;
    if (!mem.get(k + klass_next_link_, k)) {
      error = "cannot read the next klass of the boot loader's list";
      return false;
    }
  }
  return true;
}

bool HotSpotClasses::visit_dictionary(ChunkCache& mem, const Deadline& deadline, std::string& error,
                                      const std::function<bool(uint64_t)>& visit) const {
  uint64_t dict = 0, buckets = 0;
  int32_t size = 0;
  if (!mem.get(dictionary_, dict) || !dict || !mem.get(dict + table_size_, size) ||
      !mem.get(dict + table_buckets_, buckets)) {
    error = "cannot read SystemDictionary::_dictionary";
    return false;
  }
  if (size <= 0 || static_cast<size_t>(size) > kMaxBuckets) {
    error = "implausible dictionary size " + std::to_string(size);
    return false;
  }
  std::vector<uint64_t> heads(static_cast<size_t>(size));
  if (!mem.read(buckets, heads.data(), heads.size() * 8)) {
    error = "cannot read the dictionary's " + std::to_string(size) + " buckets";
    return false;
  }
  size_t seen = 0;
  for (uint64_t e : heads) {
    // The low bit of an entry pointer marks an entry shared from an archive.
    for (e &= ~uint64_t{1}; e; ++seen) {
      if (!within_bounds(seen, "the system dictionary", deadline, error)) return false;
      uint64_t k = 0, next = 0;
      if (!mem.get(e + entry_literal_, k) || !mem.get(e + entry_next_, next)) {
        // A JVM of many class loaders has as many entries, each a read of
        // its class: the naming allowance can run out before Bits is met.
        error = mem.read_limit_hit() ? "the read allowance ran out in the system dictionary after " +
                                           std::to_string(seen) + " entries"
                                     : "cannot read the dictionary entry at " + hex(e);
        return false;
      }
      if (k && visit(k)) return true;
      e = next & ~uint64_t{1};
    }
  }
  return true;
}

bool HotSpotClasses::find(ChunkCache& mem, const std::vector<std::string_view>& names, std::vector<uint64_t>& klasses,
                          const Deadline& deadline, std::string& error) const {
  klasses.assign(names.size(), 0);
  size_t left = names.size();
  auto visit = [&](uint64_t k) {
    uint64_t symbol = 0;
    if (!mem.get(k + klass_name_, symbol)) return false;
    for (size_t i = 0; i < names.size(); ++i)
      if (!klasses[i] && name_is(mem, symbol, names[i])) klasses[i] = k, --left;
    return left == 0;
  };
  return left == 0 || (dictionary_ ? visit_dictionary(mem, deadline, error, visit)
                                   : visit_boot_list(mem, deadline, error, visit));
}

std::optional<std::vector<JavaFieldEntry>> HotSpotClasses::fields_of(ChunkCache& mem, uint64_t klass,
                                                                     std::string& error) const {
  uint64_t array = 0;
  int32_t length = 0;
  if (!mem.get(klass + fields_, array) || !array || !mem.get(array + array_length_, length)) {
    error = "cannot read the field table of the klass at " + hex(klass);
    return std::nullopt;
  }
  const uint64_t elem = stream_ ? 1 : 2;
  if (length < 0 || static_cast<uint64_t>(length) * elem > kMaxFieldTableBytes) {
    error = "implausible field table length " + std::to_string(length) + " of the klass at " + hex(klass);
    return std::nullopt;
  }
  if (stream_) {
    std::vector<uint8_t> bytes(static_cast<size_t>(length));
    if (!mem.read(array + array_data_, bytes.data(), bytes.size())) {
      error = "cannot read the field stream of the klass at " + hex(klass);
      return std::nullopt;
    }
    return decode_field_stream(bytes, flag_bits_, error);
  }
  uint16_t java_fields = 0;
  std::vector<uint16_t> slots(static_cast<size_t>(length));
  if (!mem.get(klass + java_fields_count_, java_fields) ||
      !mem.read(array + array_data_, slots.data(), slots.size() * 2)) {
    error = "cannot read the fields of the klass at " + hex(klass);
    return std::nullopt;
  }
  return decode_legacy_fields(slots, java_fields, legacy_, error);
}

std::optional<JavaFieldEntry> HotSpotClasses::field(ChunkCache& mem, uint64_t klass, std::string_view name,
                                                    std::string& error) const {
  auto fields = fields_of(mem, klass, error);
  if (!fields) return std::nullopt;
  uint64_t cp = 0;
  int32_t cp_length = 0;
  if (!mem.get(klass + constants_, cp) || !cp || !mem.get(cp + cp_length_, cp_length) || cp_length <= 0 ||
      cp_length > 0xffff) {
    error = "cannot read the constant pool of the klass at " + hex(klass);
    return std::nullopt;
  }
  for (const JavaFieldEntry& f : *fields) {
    if (f.name_index == 0 || f.name_index >= static_cast<uint32_t>(cp_length)) continue;
    uint64_t symbol = 0;
    if (!mem.get(cp + cp_header_ + uint64_t{f.name_index} * 8, symbol)) continue;
    if (!name_is(mem, symbol & ~uint64_t{1}, name)) continue;
    if (!f.offset_set) {
      error = "field " + std::string(name) + " is not laid out yet";
      return std::nullopt;
    }
    return f;
  }
  error = "the klass at " + hex(klass) + " declares no field " + std::string(name);
  return std::nullopt;
}

bool HotSpotClasses::initialized(ChunkCache& mem, uint64_t klass) const {
  uint8_t state = 0;
  return mem.get(klass + init_state_, state) && state == fully_initialized_;
}

uint64_t HotSpotClasses::mirror(ChunkCache& mem, uint64_t klass) const {
  uint64_t m = 0;
  if (!mem.get(klass + klass_mirror_, m)) return 0;
  // An OopHandle is a pointer to the slot holding the oop (OopHandle::_obj,
  // its only member).
  if (mirror_is_handle_ && m && !mem.get(m, m)) return 0;
  return m;
}

uint64_t HotSpotClasses::reference_at(ChunkCache& mem, uint64_t addr) const {
  if (!compressed_oops_) {
    uint64_t v = 0;
    return mem.get(addr, v) ? v : 0;
  }
  uint32_t n = 0;
  if (!mem.get(addr, n) || !n) return 0;
  return narrow_base_ + (uint64_t{n} << narrow_shift_);
}

}  // namespace oomsnap
