// Byte images of HotSpot's classes for the unit tests of field_info.h,
// hotspot_classes.h and direct_buffers.h: UNSIGNED5 field streams, and a
// small class graph (loader lists or JDK 8's system dictionary, klasses with
// names, constant pools, field tables and mirrors, objects referenced by
// narrow oops) built in this process's memory and described by a FakeVm.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "java/field_info.h"
#include "java/java_heap.h"
#include "java_heap_images.h"

namespace oomsnap::java_test {

// HotSpot's UNSIGNED5 coding (unsigned5.hpp), written independently of the
// reader under test: low bytes 1..191 end a number, high bytes 192..255
// carry six bits each, at most five bytes.
inline void put_unsigned5(std::vector<uint8_t>& out, uint32_t v) {
  uint64_t sum = v;
  for (int i = 0;; ++i) {
    if (sum < 191 || i == 4) {
      out.push_back(static_cast<uint8_t>(sum + 1));
      return;
    }
    sum -= 191;
    out.push_back(static_cast<uint8_t>(1 + 191 + sum % 64));
    sum >>= 6;
  }
}

struct StreamField {
  uint32_t name, signature, offset, access, flags;
  std::vector<uint32_t> optional;  // the numbers the flags announce, in order
};

// A JDK 21+ field stream: the counts, then each Java field.
inline std::vector<uint8_t> field_stream(const std::vector<StreamField>& fields, uint32_t injected) {
  std::vector<uint8_t> out;
  put_unsigned5(out, static_cast<uint32_t>(fields.size()));
  put_unsigned5(out, injected);
  for (const StreamField& f : fields) {
    for (uint32_t x : {f.name, f.signature, f.offset, f.access, f.flags}) put_unsigned5(out, x);
    for (uint32_t x : f.optional) put_unsigned5(out, x);
  }
  return out;
}

// A class graph as JDK 21+ lays it out (loader lists, OopHandle mirrors,
// field streams) or as JDK 8 does (the system dictionary, oop mirrors, u2
// field arrays), with compressed oops (base and shift 3).
class FakeClasses {
 public:
  enum class Jdk { k21, k8 };
  struct Field {
    std::string name;
    uint32_t access, offset;
  };
  static constexpr uint32_t kName = 24, kMirror = 112, kNextLink = 144, kConstants = 224, kInitState = 305,
                            kStream = 448, kFields = 456, kJavaFieldsCount = 310, kCpLength = 60, kCpHeader = 72;
  static constexpr uint64_t kObjectArea = 1 << 20;

  explicit FakeClasses(Jdk jdk) : jdk_(jdk) {
    L.klass_name = kName, L.symbol_length = 4, L.symbol_body = 6;
    v.types.insert({{"Klass", 200}, {"InstanceKlass", 480}, {"ConstantPool", kCpHeader}, {"ClassLoaderData", 128},
               {"Array<int>", 8}, {"Array<u1>", 8}, {"Array<u2>", 8}, {"Symbol", 8}});
    v.supers["InstanceKlass"] = "Klass";
    v.field("Klass", "_name", kName);
    v.fields.push_back({"Klass", "_java_mirror", jdk == Jdk::k21 ? "OopHandle" : "oop", false, kMirror, 0});
    v.field("InstanceKlass", "_constants", kConstants);
    v.field("InstanceKlass", "_init_state", kInitState);
    v.field("ConstantPool", "_length", kCpLength);
    v.field("Array<int>", "_length", 0);
    v.ints["InstanceKlass::fully_initialized"] = 4;
    head_ = v.global("ClassLoaderDataGraph", "_head", 0);
    objects_ = v.a.alloc(kObjectArea, 8);
    next_object_ = objects_ + 8;  // narrow oop 0 is null
    v.global("CompressedOops", "_narrow_oop._base", objects_);
    v.global("CompressedOops", "_narrow_oop._shift", 3);
    if (jdk == Jdk::k21) {
      v.field("ClassLoaderData", "_next", 112);
      v.field("ClassLoaderData", "_klasses", 56);
      v.field("Klass", "_next_link", kNextLink);
      v.field("InstanceKlass", "_fieldinfo_stream", kStream);
      v.field("Array<u1>", "_data", 4);
      v.ints["FieldInfo::FieldFlags::_ff_initialized"] = 0;
      v.ints["FieldInfo::FieldFlags::_ff_injected"] = 1;
      v.ints["FieldInfo::FieldFlags::_ff_generic"] = 2;
      v.ints["FieldInfo::FieldFlags::_ff_stable"] = 3;
      v.ints["FieldInfo::FieldFlags::_ff_contended"] = 4;
    } else {
      v.field("InstanceKlass", "_fields", kFields);
      v.field("InstanceKlass", "_java_fields_count", kJavaFieldsCount);
      v.field("Array<u2>", "_data", 4);
      v.ints.insert({{"FieldInfo::field_slots", 6},
                {"FieldInfo::access_flags_offset", 0}, {"FieldInfo::name_index_offset", 1},
                {"FieldInfo::low_packed_offset", 4}, {"FieldInfo::high_packed_offset", 5},
                {"FIELDINFO_TAG_SIZE", 2}, {"FIELDINFO_TAG_OFFSET", 1}});
      dictionary_ = v.global("SystemDictionary", "_dictionary", 0);
      v.types.insert({{"BasicHashtable<mtInternal>", 48}, {"HashtableBucket<mtInternal>", 8},
                      {"BasicHashtableEntry<mtInternal>", 16}, {"IntptrHashtableEntry", 24}});
      v.supers["IntptrHashtableEntry"] = "BasicHashtableEntry<mtInternal>";
      v.field("BasicHashtable<mtInternal>", "_table_size", 0);
      v.field("BasicHashtable<mtInternal>", "_buckets", 8);
      v.field("HashtableBucket<mtInternal>", "_entry", 0);
      v.field("BasicHashtableEntry<mtInternal>", "_next", 8);
      v.field("IntptrHashtableEntry", "_literal", 16);
    }
  }

  uint64_t symbol(const std::string& s) {
    const uint64_t sym = v.a.alloc(8 + s.size());
    Arena::put<uint16_t>(sym + 4, static_cast<uint16_t>(s.size()));
    std::memcpy(reinterpret_cast<void*>(sym + 6), s.data(), s.size());
    return sym;
  }
  // An object of `bytes` in the compressed-oop area.
  uint64_t object(uint64_t bytes) {
    const uint64_t o = next_object_;
    next_object_ += (bytes + 7) & ~uint64_t{7};
    return o;
  }
  void put_reference(uint64_t addr, uint64_t obj) {
    Arena::put<uint32_t>(addr, obj ? static_cast<uint32_t>((obj - objects_) >> 3) : 0);
  }
  // An instance klass named `name` declaring `fields` (constant pool index
  // i + 1 names field i), with a mirror of 256 bytes, in the boot loader's
  // list (or the dictionary); initialized unless told otherwise.
  uint64_t klass(const std::string& name, const std::vector<Field>& fields, bool initialized = true) {
    const uint64_t k = v.a.alloc(480);
    Arena::put(k + kName, symbol(name));
    Arena::put<uint8_t>(k + kInitState, initialized ? 4 : 2);
    const uint64_t cp = v.a.alloc(kCpHeader + 8 * (fields.size() + 1));
    Arena::put<int32_t>(cp + kCpLength, static_cast<int32_t>(fields.size() + 1));
    for (size_t i = 0; i < fields.size(); ++i) Arena::put(cp + kCpHeader + 8 * (i + 1), symbol(fields[i].name));
    Arena::put(k + kConstants, cp);
    if (jdk_ == Jdk::k21) {
      std::vector<StreamField> sf;
      for (size_t i = 0; i < fields.size(); ++i)
        sf.push_back({static_cast<uint32_t>(i + 1), 0, fields[i].offset, fields[i].access, 0, {}});
      put_array(k + kStream, field_stream(sf, 0));
    } else {
      std::vector<uint8_t> bytes;
      for (size_t i = 0; i < fields.size(); ++i) {
        const uint32_t packed = fields[i].offset << 2 | 1;
        for (uint32_t slot : {fields[i].access, static_cast<uint32_t>(i + 1), 0u, 0u, packed & 0xffff, packed >> 16})
          bytes.push_back(static_cast<uint8_t>(slot)), bytes.push_back(static_cast<uint8_t>(slot >> 8));
      }
      put_array(k + kFields, bytes, 2);
      Arena::put<uint16_t>(k + kJavaFieldsCount, static_cast<uint16_t>(fields.size()));
    }
    const uint64_t mirror = object(256);
    if (jdk_ == Jdk::k21) {
      const uint64_t handle = v.a.alloc(8);
      Arena::put(handle, mirror);
      Arena::put(k + kMirror, handle);
    } else {
      Arena::put(k + kMirror, mirror);
    }
    klasses.push_back(k);
    mirrors.push_back(mirror);
    return k;
  }
  // Links the klasses: the boot loader's list after an application
  // loader's empty one (JDK 21), or one dictionary bucket each (JDK 8).
  void link() {
    if (jdk_ == Jdk::k21) {
      const uint64_t boot = v.a.alloc(128), app = v.a.alloc(128);
      Arena::put(app + 112, boot);
      for (size_t i = 0; i < klasses.size(); ++i)
        Arena::put<uint64_t>(klasses[i] + kNextLink, i + 1 < klasses.size() ? klasses[i + 1] : 0);
      Arena::put<uint64_t>(boot + 56, klasses.empty() ? 0 : klasses[0]);
      Arena::put(head_, app);
    } else {
      const uint64_t dict = v.a.alloc(48), buckets = v.a.alloc(8 * (klasses.size() + 1));
      Arena::put<int32_t>(dict, static_cast<int32_t>(klasses.size() + 1));
      Arena::put(dict + 8, buckets);
      for (size_t i = 0; i < klasses.size(); ++i) {
        const uint64_t e = v.a.alloc(24);
        Arena::put(e + 16, klasses[i]);
        Arena::put(buckets + 8 * (i + 1), e);
        entries.push_back(e);
      }
      Arena::put(dictionary_, dict);
    }
    v.build();
  }

  FakeVm v = generic_vm(20, 20);  // HotSpotVm refuses nearly empty tables
  JavaHeapLayout L;
  std::vector<uint64_t> klasses, mirrors, entries;

 private:
  void put_array(uint64_t slot, const std::vector<uint8_t>& bytes, size_t elem = 1) {
    const uint64_t arr = v.a.alloc(8 + bytes.size());
    Arena::put<int32_t>(arr, static_cast<int32_t>(bytes.size() / elem));
    if (!bytes.empty()) std::memcpy(reinterpret_cast<void*>(arr + 4), bytes.data(), bytes.size());
    Arena::put(slot, arr);
  }

  Jdk jdk_;
  uint64_t head_ = 0, dictionary_ = 0, objects_ = 0, next_object_ = 0;
};

}  // namespace oomsnap::java_test
