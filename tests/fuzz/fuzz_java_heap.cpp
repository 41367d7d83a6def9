// libFuzzer: hostile memory for the Java collector's readers, in two parts.
//  1. The input becomes a hostile image (hostile_image.h); it is read as
//     HotSpot's VMStructs tables and as a G1 heap (region table, regions,
//     objects, klasses) with small offsets, through process_vm_readv on
//     ourselves, with a small budget. (This part's reading of the input is
//     what the regression inputs were found with: keep it as it is.)
//  2. VMStructs tables that name every field, type and constant the
//     collector resolves, with the values — offsets, type sizes, the
//     addresses of statics, counts, tags, shifts, flag values — each a real
//     JVM's plus an input word (so unconstrained: any 64-bit value), then
//     the collector's own sequence: the flags, the G1 layout, the TLAB holes
//     and, when the layout resolves, the walk with it (regions, objects and
//     threads in the image). One more word picks how JDK 8 or 11 would
//     describe the JVM instead (older_jdk_shapes): fields on base classes,
//     regions without types, Flag, a linked thread list, ... The input's last
//     byte picks the heap: G1's, or a Serial or Parallel one (generational_shape)
//     whose generations and spaces are described the way JDK 8 or a later
//     JDK describes them, each offset and pointer unconstrained, the space
//     records now in the image and now harness-made bounds into it.
// tests/unit/java/java_g1_heap_test.cpp runs regression inputs through this entry point.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/chunk_cache.h"
#include "hostile_image.h"
#include "java/java_heap.h"
#include "java/generational_heap.h"
#include "java/hotspot_vmstructs.h"

namespace java_fuzz {
namespace {

constexpr size_t kImage = oomsnap_fuzz::kImageBytes;

uint64_t word(const uint8_t* img, size_t i) {
  uint64_t v;
  std::memcpy(&v, img + (i * 8) % (kImage - 8), 8);
  return v;
}

// Part 1: the tables at addresses from the image, and a G1 walk with a layout
// from the image's words 20-26, offsets kept small.
void fuzz_small_layout(uint64_t base) {
  const uint8_t* img = reinterpret_cast<const uint8_t*>(base);
  oomsnap::RemoteMemory mem(getpid());
  oomsnap::ChunkCache cache(mem, oomsnap::read_maps(getpid()), 4096, 64 << 10);
  cache.set_read_limit(4 << 20);

  // The table symbols are the first 20 words of the image.
  oomsnap::HotSpotSymbols y;
  uint64_t* f[] = {&y.structs, &y.types, &y.int_constants, &y.long_constants, &y.struct_type_name,
                   &y.struct_field_name, &y.struct_type_string, &y.struct_is_static, &y.struct_offset,
                   &y.struct_address, &y.struct_stride, &y.type_type_name, &y.type_size, &y.type_stride,
                   &y.int_name, &y.int_value, &y.int_stride, &y.long_name, &y.long_value, &y.long_stride};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; ++i) *f[i] = base + (word(img, i) % (kImage - 8));
  std::string err;
  oomsnap::HotSpotVm::read(cache, y, oomsnap::Deadline{std::chrono::milliseconds(200)}, err);

  oomsnap::JavaHeapLayout L;
  L.region_table = word(img, 20);
  L.region_count = word(img, 21) % 64;
  L.grain_bytes = 4096;
  L.region_tag = static_cast<uint32_t>(word(img, 22) % 64);
  L.tag_starts_humongous = 4, L.tag_continues_humongous = 5;
  L.compact_headers = word(img, 23) & 1;
  L.compressed_klass = word(img, 23) & 2;
  L.narrow_klass_base = base;
  L.narrow_klass_shift = static_cast<uint32_t>(word(img, 24) % 4);
  L.array_length_offset = L.compact_headers ? 8 : (L.compressed_klass ? 12 : 16);
  L.mirror_size_offset = static_cast<int32_t>(word(img, 25) % 64);
  L.holes = {{base + word(img, 26) % kImage, base + word(img, 26) % kImage + 256}};
  oomsnap::JavaHeapLimits lim;
  lim.max_walk_bytes = 1 << 20;
  oomsnap::Deadline deadline{std::chrono::milliseconds(200)};
  oomsnap::JavaHeapWalker walker(cache, L, lim, deadline);
  walker.walk();
  // Brought up to date as after a young collection: the crafted regions
  // matched against the ones walked, the counts restored, the rest walked.
  cache.forget_contents();
  walker.walk_young_again();
}

// The values of part 2: successive 8-byte words of the raw input from byte
// 256 on (past the input: zeros), each added to the value a real JVM (JDK
// 17) has there. An input too short to reach part 2 describes a real JVM's
// tables; any 64-bit value is one word away.
class Values {
 public:
  Values(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint64_t raw() {
    uint64_t v = 0;
    for (size_t b = 0; b < 8; ++b)
      if (pos_ + b < size_) v |= uint64_t{data_[pos_ + b]} << (8 * b);
    pos_ += 8;
    return v;
  }
  uint64_t near(uint64_t real) { return real + raw(); }
  // A power of two by default (1 << (log2 + even/2)); any value when odd.
  uint64_t power_of_two_near(unsigned log2) {
    const uint64_t w = raw();
    return w & 1 ? w : uint64_t{1} << ((log2 + w / 2) % 64);
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 256;
};

// Scratch memory for the tables of part 2, laid out anew for every input.
class Tables {
 public:
  static constexpr size_t kBytes = 64 << 10;
  Tables() {
    static uint8_t* area = static_cast<uint8_t*>(
        mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    area_ = area;
    std::memset(area_, 0, kBytes);
  }
  uint64_t alloc(size_t n) {
    n = (n + 7) & ~size_t{7};
    // The dictionary below is fixed and its records at most 256 bytes: a
    // few KiB in all.
    if (used_ + n > kBytes) std::abort();
    const uint64_t p = reinterpret_cast<uint64_t>(area_ + used_);
    used_ += n;
    return p;
  }
  uint64_t var(uint64_t v) {
    const uint64_t p = alloc(8);
    put(p, v);
    return p;
  }
  uint64_t str(const std::string& s) {
    const uint64_t p = alloc(s.size() + 1);
    std::memcpy(reinterpret_cast<void*>(p), s.c_str(), s.size() + 1);
    return p;
  }
  static void put(uint64_t at, uint64_t v) { std::memcpy(reinterpret_cast<void*>(at), &v, 8); }

 private:
  uint8_t* area_;
  size_t used_ = 0;
};

const char* const kFlagNames[] = {"UseG1GC", "UseCompressedClassPointers", "UseCompactObjectHeaders",
                                  "ObjectAlignmentInBytes"};

struct Field {
  std::string type, name;
  bool is_static;
  uint64_t value;  // offset, or the static's address
};

Field* find_field(std::vector<Field>& fields, const std::string& type, const std::string& name) {
  for (auto& f : fields)
    if (f.type == type && f.name == name) return &f;
  return nullptr;
}

// How older JDKs describe the same JVM, each chosen by a bit of one more
// input word (past every value above, so inputs that end before it describe
// JDK 17 as before): JDK 11's HeapRegion bottom/end/top on base classes
// (with their sizes, and now and then a superclass cycle), JDK 8's regions
// without types, its Flag table, the threads as a linked list from
// Threads::_thread_list (its head into the image), the narrow klass under
// Universe, and JDK 9-15's anonymous-class flag.
void older_jdk_shapes(Values& in, Tables& t, uint64_t base, std::vector<Field>& fields,
                      std::vector<std::pair<std::string, uint64_t>>& types,
                      std::vector<std::pair<std::string, std::string>>& supers,
                      std::vector<std::pair<std::string, uint64_t>>& ints) {
  const uint64_t shape = in.raw();
  auto move = [&](const char* type, const char* name, const char* to) {
    if (Field* f = find_field(fields, type, name)) f->type = to;
  };
  auto drop = [&](const char* type, const char* name) {
    fields.erase(std::remove_if(fields.begin(), fields.end(),
                                [&](const Field& f) { return f.type == type && f.name == name; }),
                 fields.end());
  };
  const char* region = find_field(fields, "G1HeapRegion", "_bottom") ? "G1HeapRegion" : "HeapRegion";
  if (shape & 1) {
    const char* space = shape & 4 ? "G1OffsetTableContigSpace" : "G1ContiguousSpace";
    move(region, "_bottom", "Space"), move(region, "_end", "Space"), move(region, "_top", space);
    types.emplace_back(space, in.near(248)), types.emplace_back("CompactibleSpace", in.near(80));
    types.emplace_back("Space", in.near(48));
    supers.emplace_back(region, space), supers.emplace_back(space, "CompactibleSpace");
    supers.emplace_back("CompactibleSpace", "Space");
    if (shape & 2) supers.emplace_back("Space", region);  // a cycle
  }
  if (shape & 4) {
    fields.erase(std::remove_if(fields.begin(), fields.end(),
                                [&](const Field& f) { return f.name == "_tag" || (f.type == region && f.name == "_type"); }),
                 fields.end());
    ints.clear();
  }
  if (shape & 8) {
    for (const char* f : {"flags", "numFlags", "_addr", "_name"}) move("JVMFlag", f, "Flag");
    for (auto& ty : types)
      if (ty.first == "JVMFlag") ty.first = "Flag";
  }
  if (shape & 16) {
    drop("ThreadsSMRSupport", "_java_thread_list");
    fields.push_back({"Threads", "_thread_list", true, t.var(base + in.raw() % (kImage - 8))});
    fields.push_back({"JavaThread", "_next", false, in.near(560)});
    types.emplace_back("JavaThread", in.near(1072));
    types.emplace_back("Threads", 1);
    supers.emplace_back("JavaThread", "Thread");
  }
  if (shape & 32) {
    move("CompressedKlassPointers", "_narrow_klass._base", "Universe");
    move("CompressedKlassPointers", "_narrow_klass._shift", "Universe");
  }
  if (shape & 64) {
    fields.push_back({"InstanceKlass", "_misc_flags", false, in.near(314)});
    types.emplace_back("InstanceKlass", in.near(440));
    ints.emplace_back("InstanceKlass::_misc_is_anonymous", in.near(32));
  }
}

// A Serial or Parallel heap (kind), described from input words after every
// other value: the generations harness memory reached from the heap (or
// from statics), their space pointers each either into the image (a
// hostile record) or to a harness record whose bottom, top and end lie in
// the image (so that the walk parses the image's objects), the bounds and
// offsets unconstrained; JDK 8's shapes (GenCollectedHeap::_gens,
// ImmutableSpace) by one bit.
void generational_shape(Values& in, Tables& t, uint64_t base, uint64_t heap, oomsnap::HeapKind kind,
                        std::vector<Field>& fields, std::vector<std::pair<std::string, uint64_t>>& types,
                        std::vector<std::pair<std::string, std::string>>& supers) {
  const bool jdk8 = in.raw() & 1;
  auto image_ptr = [&] { return base + in.raw() % (kImage - 8); };
  auto space = [&](uint64_t off_bottom, uint64_t off_end, uint64_t off_top) {
    if (in.raw() & 1) return image_ptr();
    const uint64_t rec = t.alloc(256);
    const uint64_t bottom = image_ptr() & ~uint64_t{7};
    const uint64_t top = bottom + (in.raw() % (kImage / 2));
    const uint64_t end = top + (in.raw() % 4096);
    if (off_bottom <= 248) Tables::put(rec + off_bottom, bottom);
    if (off_end <= 248) Tables::put(rec + off_end, end);
    if (off_top <= 248) Tables::put(rec + off_top, top);
    return rec;
  };
  const uint64_t young = t.alloc(256), old = t.alloc(256);
  auto put_in = [](uint64_t object, uint64_t off, uint64_t v) {
    if (off <= 248) Tables::put(object + off, v);
  };
  // A generation's space pointers: each field's offset near a real JVM's,
  // each pointing at a space (space()) with the bounds at sb, se, st.
  auto gen_spaces = [&](uint64_t gen, const char* type,
                        std::initializer_list<std::pair<const char*, uint64_t>> names, uint64_t sb, uint64_t se,
                        uint64_t st) {
    for (auto [name, real] : names) {
      const uint64_t off = in.near(real);
      fields.push_back({type, name, false, off});
      put_in(gen, off, space(sb, se, st));
    }
  };
  if (kind == oomsnap::HeapKind::kSerial) {
    const uint64_t sb = in.near(8), se = in.near(16), st = in.near(64);
    fields.push_back({"Space", "_bottom", false, sb});
    fields.push_back({"Space", "_end", false, se});
    fields.push_back({"ContiguousSpace", "_top", false, st});
    types.emplace_back("ContiguousSpace", in.near(112)), types.emplace_back("Space", in.near(48));
    supers.emplace_back("ContiguousSpace", "Space");
    types.emplace_back("GenCollectedHeap", in.near(192)), types.emplace_back("DefNewGeneration", in.near(776));
    types.emplace_back("TenuredGeneration", in.near(312));
    const uint64_t gy = in.near(96), go = in.near(104), ng = in.near(124);
    if (jdk8) {
      fields.push_back({"GenCollectedHeap", "_gens", false, gy});
      fields.push_back({"GenCollectedHeap", "_n_gens", false, ng});
      put_in(heap, ng, in.near(2));
      put_in(heap, gy, young), put_in(heap, gy + 8, old);
    } else {
      types.emplace_back("SerialHeap", in.near(216));
      supers.emplace_back("SerialHeap", "GenCollectedHeap");
      fields.push_back({"GenCollectedHeap", "_young_gen", false, gy});
      fields.push_back({"GenCollectedHeap", "_old_gen", false, go});
      put_in(heap, gy, young), put_in(heap, go, old);
    }
    gen_spaces(young, "DefNewGeneration", {{"_eden_space", 8}, {"_from_space", 16}, {"_to_space", 24}}, sb, se, st);
    gen_spaces(old, "TenuredGeneration", {{"_the_space", 40}}, sb, se, st);
    return;
  }
  const char* bounds = jdk8 ? "ImmutableSpace" : "MutableSpace";
  const uint64_t sb = in.near(jdk8 ? 8 : 40), se = in.near(jdk8 ? 16 : 56), st = in.near(jdk8 ? 56 : 48);
  fields.push_back({bounds, "_bottom", false, sb});
  fields.push_back({bounds, "_end", false, se});
  fields.push_back({"MutableSpace", "_top", false, st});
  types.emplace_back("MutableSpace", in.near(64));
  if (jdk8) types.emplace_back("ImmutableSpace", in.near(24)), supers.emplace_back("MutableSpace", "ImmutableSpace");
  types.emplace_back("ParallelScavengeHeap", in.near(216)), types.emplace_back("PSYoungGen", in.near(104));
  types.emplace_back("PSOldGen", in.near(200));
  // Static in every JDK so far; now and then described as a heap field.
  const bool instance = (in.raw() & 7) == 7;
  const uint64_t gy = in.near(160), go = in.near(168);
  if (instance) {
    fields.push_back({"ParallelScavengeHeap", "_young_gen", false, gy});
    fields.push_back({"ParallelScavengeHeap", "_old_gen", false, go});
    put_in(heap, gy, young), put_in(heap, go, old);
  } else {
    fields.push_back({"ParallelScavengeHeap", "_young_gen", true, t.var(young + in.raw() % 2 * gy)});
    fields.push_back({"ParallelScavengeHeap", "_old_gen", true, t.var(old)});
  }
  gen_spaces(young, "PSYoungGen", {{"_eden_space", 32}, {"_from_space", 40}, {"_to_space", 48}}, sb, se, st);
  gen_spaces(old, "PSOldGen", {{"_object_space", 160}}, sb, se, st);
}

// Part 2: VMStructs naming what the collector resolves, values from the input.
void fuzz_resolution(const uint8_t* data, size_t size, uint64_t base) {
  Values in(data, size);
  Tables t;
  // The address of a static: a variable holding `value` by default; one
  // time in eight into the image, one in eight anywhere at all.
  auto global = [&](uint64_t value) {
    const uint64_t w = in.raw();
    switch (w % 8) {
      case 6: return base + (w >> 3) % (kImage - 8);
      case 7: return w >> 3;
      default: return t.var(value);
    }
  };
  auto image_ptr = [&] { return base + in.raw() % (kImage - 8); };

  // The flag table: records of JVMFlag's described size (the real record
  // when that is implausible), named from the flags the collector asks for,
  // each value a static as above (UseG1GC, compressed class pointers, no
  // compact headers, 8-byte alignment by default).
  const uint64_t flag_size = in.near(24), flag_name = in.near(8), flag_addr = in.near(0);
  const uint64_t stride = flag_size >= 16 && flag_size <= 256 ? flag_size : 24;
  const uint64_t flag_defaults[] = {1, 1, 0, 8};
  constexpr size_t kFlags = sizeof kFlagNames / sizeof kFlagNames[0];
  const uint64_t flag_table = t.alloc(stride * kFlags);
  for (size_t i = 0; i < kFlags; ++i) {
    const uint64_t rec = flag_table + stride * i;
    const uint64_t value = global(in.near(flag_defaults[i]));
    if (flag_name <= stride - 8) Tables::put(rec + flag_name, t.str(kFlagNames[i]));
    if (flag_addr <= stride - 8) Tables::put(rec + flag_addr, value);
  }

  // The G1CollectedHeap and the threads list are harness memory, with the
  // region table's address (into the image) and length, and the thread
  // array's (into the image) and length, where the described offsets put
  // them when that is inside; the regions, objects, klasses and threads are
  // the image's.
  const uint64_t hrm = in.near(304), regions = in.near(96), tbase = in.near(16), tlen = in.near(24);
  const uint64_t list_len = in.near(4), list_threads = in.near(16);
  constexpr uint64_t kHeapBytes = 2048, kListBytes = 64;
  const uint64_t heap = t.alloc(kHeapBytes), list = t.alloc(kListBytes);
  auto put_inside = [](uint64_t object, uint64_t bytes, uint64_t off, uint64_t v) {
    if (off <= bytes - 8) Tables::put(object + off, v);
  };
  put_inside(heap, kHeapBytes, hrm + regions + tbase, image_ptr());
  put_inside(heap, kHeapBytes, hrm + regions + tlen, in.near(8));
  put_inside(list, kListBytes, list_len, in.near(1));  // a u32 count: the low half
  put_inside(list, kListBytes, list_threads, image_ptr());

  const bool renamed = in.raw() & 1;  // JDK 23+ names for the region types
  const char* region = renamed ? "G1HeapRegion" : "HeapRegion";
  const char* region_type = renamed ? "G1HeapRegionType" : "HeapRegionType";
  const char* manager = renamed ? "G1HeapRegionManager" : "HeapRegionManager";
  // JDK 17's offsets.
  std::vector<Field> fields = {
      {"Universe", "_collectedHeap", true, global(heap)},
      {"G1CollectedHeap", "_hrm", false, hrm},
      {manager, "_regions", false, regions},
      {"G1HeapRegionTable", "_base", false, tbase},
      {"G1HeapRegionTable", "_length", false, tlen},
      {region, "_bottom", false, in.near(0)},
      {region, "_end", false, in.near(8)},
      {region, "_top", false, in.near(16)},
      {region, "_type", false, in.near(188)},
      {region_type, "_tag", false, in.near(0)},
      {region, "GrainBytes", true, global(in.power_of_two_near(20))},
      {"Klass", "_layout_helper", false, in.near(8)},
      {"Klass", "_name", false, in.near(24)},
      {"Symbol", "_length", false, in.near(4)},
      {"Symbol", "_body", false, in.near(6)},
      {"java_lang_Class", "_oop_size_offset", true, global(in.near(16))},
      {"CompressedKlassPointers", "_narrow_klass._base", true, global(in.near(base))},
      {"CompressedKlassPointers", "_narrow_klass._shift", true, global(in.near(0))},
      {"JVMFlag", "flags", true, global(flag_table)},
      {"JVMFlag", "numFlags", true, global(in.near(kFlags))},
      {"JVMFlag", "_name", false, flag_name},
      {"JVMFlag", "_addr", false, flag_addr},
      {"ThreadsSMRSupport", "_java_thread_list", true, global(list)},
      {"ThreadsList", "_length", false, list_len},
      {"ThreadsList", "_threads", false, list_threads},
      {"Thread", "_tlab", false, in.near(256)},
      {"ThreadLocalAllocBuffer", "_top", false, in.near(8)},
      {"ThreadLocalAllocBuffer", "_end", false, in.near(24)},
      {"ThreadLocalAllocBuffer", "_reserve_for_allocation_prefetch", true, global(in.near(0))},
      {"CollectedHeap", "_lab_alignment_reserve", true, global(in.near(0))},
  };
  // Now and then a field is static where it should not be, or the reverse.
  for (auto& f : fields)
    if ((in.raw() & 0xff) == 0xff) f.is_static = !f.is_static;
  std::vector<std::pair<std::string, uint64_t>> types = {
      {"G1CollectedHeap", 1464}, {manager, 248}, {"G1HeapRegionTable", 56}, {region, 296}, {region_type, 4},
      {"Klass", 208}, {"Symbol", 8}, {"JVMFlag", flag_size}, {"ThreadsList", 32}, {"Thread", 648},
      {"ThreadLocalAllocBuffer", 120}, {"CollectedHeap", 96}, {"Universe", 1}, {"java_lang_Class", 1},
      {"CompressedKlassPointers", 1}, {"ThreadsSMRSupport", 1}};
  for (auto& t : types) t.second = in.near(t.second);
  const char* tags[] = {"FreeTag", "StartsHumongousTag", "ContinuesHumongousTag"};
  uint64_t tag_values[] = {0, 4, 5};
  for (auto& v : tag_values) v = in.near(v);
  const uint64_t klass_shift = in.near(42);
  std::vector<std::pair<std::string, std::string>> supers;  // type -> superclass
  std::vector<std::pair<std::string, uint64_t>> int_constants;
  for (size_t i = 0; i < 3; ++i) int_constants.emplace_back(std::string(region_type) + "::" + tags[i], tag_values[i]);
  older_jdk_shapes(in, t, base, fields, types, supers, int_constants);
  // The heap's kind from the input's last byte, so that inputs of any
  // length reach the Serial and Parallel resolution and walks as often as
  // G1's (a word after all the values above was reached by few inputs).
  // 2 is G1: the recorded regression inputs (java_g1_heap_test.cpp) stay G1's.
  const unsigned heap_byte = data[size - 1] % 3u;
  const oomsnap::HeapKind kind = heap_byte == 0   ? oomsnap::HeapKind::kSerial
                                 : heap_byte == 1 ? oomsnap::HeapKind::kParallel
                                                  : oomsnap::HeapKind::kG1;
  if (kind != oomsnap::HeapKind::kG1) generational_shape(in, t, base, heap, kind, fields, types, supers);

  // The tables, with the real entry layouts (48, 40 and 16 bytes).
  const uint64_t structs = t.alloc(48 * (fields.size() + 1));
  for (size_t i = 0; i < fields.size(); ++i) {
    const uint64_t e = structs + 48 * i;
    Tables::put(e, t.str(fields[i].type)), Tables::put(e + 8, t.str(fields[i].name));
    Tables::put(e + 16, t.str("int")), Tables::put(e + 24, fields[i].is_static);
    // The value as both offset and address: a field flipped static (or not)
    // then has the same input value in the slot it is read from.
    Tables::put(e + 32, fields[i].value), Tables::put(e + 40, fields[i].value);
  }
  const size_t ntypes = types.size();
  const uint64_t type_table = t.alloc(40 * (ntypes + 1));
  for (size_t i = 0; i < ntypes; ++i) {
    Tables::put(type_table + 40 * i, t.str(types[i].first)), Tables::put(type_table + 40 * i + 32, types[i].second);
    for (const auto& [sub, super] : supers)
      if (sub == types[i].first) Tables::put(type_table + 40 * i + 8, t.str(super));
  }
  const uint64_t ints = t.alloc(16 * (int_constants.size() + 1));
  for (size_t i = 0; i < int_constants.size(); ++i)
    Tables::put(ints + 16 * i, t.str(int_constants[i].first)), Tables::put(ints + 16 * i + 8, int_constants[i].second);
  const uint64_t longs = t.alloc(16 * 2);
  Tables::put(longs, t.str("markWord::klass_shift")), Tables::put(longs + 8, klass_shift);
  oomsnap::HotSpotSymbols y;
  y.structs = t.var(structs), y.types = t.var(type_table), y.int_constants = t.var(ints);
  y.long_constants = t.var(longs);
  y.struct_type_name = t.var(0), y.struct_field_name = t.var(8), y.struct_type_string = t.var(16);
  y.struct_is_static = t.var(24), y.struct_offset = t.var(32), y.struct_address = t.var(40);
  y.struct_stride = t.var(48);
  y.type_type_name = t.var(0), y.type_size = t.var(32), y.type_stride = t.var(40);
  y.type_superclass_name = t.var(8);
  y.int_name = t.var(0), y.int_value = t.var(8), y.int_stride = t.var(16);
  y.long_name = t.var(0), y.long_value = t.var(8), y.long_stride = t.var(16);

  // The collector's sequence (JavaCollector::collect), each step on what the
  // one before accepted.
  oomsnap::RemoteMemory mem(getpid());
  oomsnap::ChunkCache cache(mem, oomsnap::read_maps(getpid()), 4096, 64 << 10);
  cache.set_read_limit(4 << 20);
  const oomsnap::Deadline deadline{std::chrono::milliseconds(200)};
  std::string err;
  auto vm = oomsnap::HotSpotVm::read(cache, y, deadline, err);
  if (!vm) return;
  auto flags = oomsnap::read_jvm_flags(cache, *vm, {kFlagNames[0], kFlagNames[1], kFlagNames[2], kFlagNames[3]},
                                       deadline, err);
  if (!flags) return;
  oomsnap::JavaHeapLayout L;
  uint64_t heap_addr = 0;
  if (kind == oomsnap::HeapKind::kG1 ? oomsnap::resolve_g1_layout(cache, *vm, *flags, L, heap_addr)
                                     : oomsnap::resolve_generational_layout(cache, *vm, *flags, kind, L, heap_addr))
    return;
  auto holes = oomsnap::read_tlab_holes(cache, *vm, deadline, err);
  if (!holes) return;
  L.holes = std::move(*holes);
  oomsnap::JavaHeapLimits lim;
  lim.max_walk_bytes = 1 << 20;
  oomsnap::walk_java_heap(cache, L, lim, deadline);
}

}  // namespace
}  // namespace java_fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 64) return 0;
  const uint64_t base = oomsnap_fuzz::load_hostile_image(data, size);
  java_fuzz::fuzz_small_layout(base);
  java_fuzz::fuzz_resolution(data, size, base);
  return 0;
}
