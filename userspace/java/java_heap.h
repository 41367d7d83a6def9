// Walks a live HotSpot heap from outside the JVM — G1's regions, or the
// spaces of a Serial or Parallel heap (generational_heap.h), each from bottom
// to top — sizing every object from its Klass, and builds a class histogram. No
// safepoint, no attach, no signal: the JVM keeps running, so the walk must
// survive what a running JVM does (TLABs with unformatted tails, objects
// being published, regions changing type): unusable headers are skipped by
// resynchronising on the next plausible object, and the share of the heap
// that parsed is reported.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/chunk_cache.h"
#include "core/collector.h"
#include "core/snapshot.h"
#include "java/hotspot_vmstructs.h"

namespace oomsnap {

// Which heap the layout describes: G1's region table, or the few
// contiguous spaces of a Serial (DefNew eden/from/to + tenured) or Parallel
// (PSYoungGen eden/from/to + PSOldGen) heap. Either way the walk parses
// ranges [bottom, top) from their bottoms with the same object rules.
enum class HeapKind : uint8_t { kG1, kSerial, kParallel };

// One space of a Serial or Parallel heap: where its record (a
// ContiguousSpace or MutableSpace) lies, and which VMStructs field led
// there, so that a reason can name what was implausible.
struct HeapSpaceRef {
  std::string name;   // "eden", "from", "to", "old"
  std::string field;  // e.g. "DefNewGeneration::_eden_space"
  uint64_t addr = 0;
};

// A named part of the heap and the range its objects use, [bottom, top) as
// read when the walk started: a Serial / Parallel space ("eden", "from",
// "to", "old") or a run of G1 regions of one type ("eden", "survivor",
// "old", "humongous", "other").
struct HeapSpaceUse {
  std::string name;
  AddressRange used;
  // A Serial / Parallel space's committed end (its _end): [used.end, end)
  // is committed and free. 0 for G1's runs (a region's free tail is not
  // named apart).
  uint64_t end = 0;
};

// Everything the walk needs, resolved from VMStructs and the JVM's flags.
struct JavaHeapLayout {
  HeapKind kind = HeapKind::kG1;
  // Serial / Parallel: the spaces, read (bottom, top, end at these offsets
  // in every space record) when the walk starts, since top moves.
  std::vector<HeapSpaceRef> spaces;
  uint32_t space_bottom = 0, space_end = 8, space_top = 16;

  uint64_t region_table = 0;  // HeapRegion** _base of the region table
  uint64_t region_count = 0;  // its _length
  uint64_t grain_bytes = 0;
  uint32_t region_bottom = 0, region_end = 8, region_top = 16, region_tag = 0;  // offsets in HeapRegion
  int64_t tag_free = 0, tag_starts_humongous = 0, tag_continues_humongous = 0;
  // The tags that say a region's generation (HeapRegionType::EdenTag,
  // SurvTag, OldMask), when VMStructs names them all (JDK 9+): the regions
  // in use are then named by type (g1_region_space).
  bool region_spaces = false;
  int64_t tag_eden = 0, tag_survivor = 0, old_mask = 0;
  // VMStructs describes the region's type (HeapRegion::_type, JDK 9+). JDK
  // 8's exports none: a region in use is then told humongous by its first
  // object (G1 allocates objects of half a region or more as humongous),
  // the regions that object covers are its continues-humongous ones, and
  // empty regions (free ones among them) are not counted.
  bool region_types = true;

  // Objects
  bool compact_headers = false;        // JDK 24+ -XX:+UseCompactObjectHeaders: klass in the mark word
  bool compressed_klass = true;        // narrowKlass at +8 (else Klass* at +8)
  uint64_t narrow_klass_base = 0;
  uint32_t narrow_klass_shift = 0;
  uint32_t mark_klass_shift = 42;      // markWord::klass_shift (compact headers)
  uint64_t object_alignment = 8;
  uint32_t array_length_offset = 12;   // 12 (compressed class pointers), 16, or 8 (compact headers)
  uint32_t klass_layout_helper = 8, klass_name = 24;  // offsets in Klass
  uint32_t symbol_length = 4, symbol_body = 6;        // offsets in Symbol
  // ObjArrayKlass::_bottom_klass (0: not described): the element class of
  // an array of hidden classes, whose name ends in that class's address.
  uint32_t objarray_bottom_klass = 0;
  // JDK 9-15's VM-anonymous classes (Unsafe.defineAnonymousClass: lambdas),
  // which Klass::external_name() and so jcmd name "Foo$$Lambda$14/0x" +
  // the InstanceKlass's address: InstanceKlass::_misc_flags and its
  // _misc_is_anonymous bit (0: not described, as before 9 and from 16 on).
  uint32_t instance_misc_flags = 0;
  uint32_t misc_is_anonymous = 0;
  int32_t mirror_size_offset = 0;      // java_lang_Class::_oop_size_offset (size in words)

  // [start, end) ranges not to parse: the unused tails of live TLABs.
  std::vector<std::pair<uint64_t, uint64_t>> holes;
  // [start, end) of the target's file-backed mappings, sorted: a Klass in
  // one was loaded from a CDS archive (Metaspace is anonymous memory), so a
  // hidden class there is named by its dump (see hotspot_hidden_class_name).
  std::vector<std::pair<uint64_t, uint64_t>> archive_ranges;
};

// Objects are only counted per class (no per-object state), so the walk is
// bounded by bytes (sampling above the budget), the read budget and the
// deadline, not by an object cap. Per class it keeps a fixed-size record (no
// name): its memory is bounded by the klass cap.
struct JavaHeapLimits {
  // Every distinct klass costs the walk under 64 bytes; 64 MiB of them.
  static constexpr size_t kMaxKlasses = size_t{1} << 20;
  // HeapRegions and JavaThreads are C-heap objects, always readable in a live
  // JVM: records that cannot be read mean a table that is not what it claims,
  // and each costs a failed read, so their scan gives up after this many.
  static constexpr int kMaxFailedRecordReads = 64;

  uint64_t max_walk_bytes = 1ull << 30;  // heaps using more are sampled
  // Classes named in JavaHeapWalk::classes: the first max_entries in the
  // order of Snapshot::sort_and_truncate (bytes, objects, name).
  size_t max_entries = SIZE_MAX;
  // Distinct klasses counted one by one (at most kMaxKlasses, whatever is
  // asked); the objects of the ones past it are counted together.
  size_t max_klasses = kMaxKlasses;
  // The cache's read limit (as ChunkCache::set_read_limit) while those
  // classes are named, at the end: above the walk's, so that a walk ended by
  // the read budget still names them. 0: the walk's limit.
  uint64_t name_read_limit = 0;
};

struct JavaClassTotal {
  std::string name;  // as Java prints it: java.lang.String, byte[], Foo$Bar[][]
  uint64_t objects = 0;
  uint64_t bytes = 0;
};

struct JavaHeapWalk {
  SnapshotStatus status = SnapshotStatus::kFailed;
  std::string reason;
  // The top JavaHeapLimits::max_entries of the classes counted, sorted as
  // Snapshot::sort_and_truncate sorts (bytes desc, objects desc, name asc).
  std::vector<JavaClassTotal> classes;
  uint64_t class_count = 0;  // distinct classes with objects counted (classes holds the top ones)
  // The klass cap was reached: objects of classes that found no room are
  // counted only here (scaled like the rest in a sampled walk).
  bool klass_cap_reached = false;
  uint64_t past_cap_objects = 0, past_cap_bytes = 0;
  // G1: regions in use and walked; Serial / Parallel: spaces (empty ones
  // included) and the non-empty ones walked.
  uint64_t regions = 0, regions_walked = 0;
  uint64_t used_bytes = 0;      // sum of top - bottom over the regions (spaces) in use
  // Where the objects are, by part of the heap: each Serial / Parallel
  // space, or each run of adjacent G1 regions of one type (when VMStructs
  // names the types, JavaHeapLayout::region_spaces). Empty otherwise.
  std::vector<HeapSpaceUse> spaces;
  uint64_t parsed_bytes = 0;    // bytes covered by objects read (incl. fillers) and skipped TLAB tails
  uint64_t unparsed_bytes = 0;  // bytes skipped by resynchronisation
  uint64_t objects = 0, filler_bytes = 0;
  uint64_t humongous_objects = 0, humongous_bytes = 0;  // always exact, also in sampled walks
  uint64_t sample_stride = 1;   // 1 = full walk; k = 1 of every k 64 KiB windows, counts scaled
  double coverage = 0;          // parsed / used over the regions walked
};

// Every offset and constant the walk needs, from VMStructs and the JVM's
// flags (read_jvm_flags). heap_addr: the G1CollectedHeap. nullopt when
// resolved, else the error, naming what is missing or does not fit.
std::optional<std::string> resolve_g1_layout(ChunkCache& mem, const HotSpotVm& vm,
                                             const std::map<std::string, uint64_t>& flags, JavaHeapLayout& layout,
                                             uint64_t& heap_addr);

// What every heap shares: the Klass and Symbol offsets, the klass pointer
// encoding, the object alignment and the mirror size offset, into L.
// nullopt when resolved, else the error naming what is missing.
std::optional<std::string> resolve_object_layout(ChunkCache& mem, const HotSpotVm& vm,
                                                 const std::map<std::string, uint64_t>& flags, JavaHeapLayout& L);

// The unused tails [top, hard end) of every Java thread's TLAB: unformatted
// memory inside regions, skipped by the walk (JavaHeapLayout::holes), sorted.
// Empty when VMStructs does not describe the threads' TLABs; nullopt + error
// when it describes them with offsets that do not fit their types.
std::optional<std::vector<std::pair<uint64_t, uint64_t>>> read_tlab_holes(ChunkCache& mem, const HotSpotVm& vm,
                                                                          const Deadline& deadline,
                                                                          std::string& error);

// The layout's own plausibility, whoever filled it: every offset (+ the
// bytes read there) below the record cap, shifts, alignment, region size and
// count (or the space count and their records' addresses) in range. nullopt when plausible, else the reason, naming the field.
// resolve_g1_layout ends with it, and the walk refuses a layout that fails it.
std::optional<std::string> check_heap_layout(const JavaHeapLayout& layout);
// The part of a G1 heap a region in use with this tag belongs to, as G1
// counts its generations: "eden", "survivor", "humongous", "old" (archive
// regions, where a JDK has them, are old ones too), or "other" for a tag
// none of those (a JDK's new type, or a crafted tag). Needs region_spaces.
const char* g1_region_space(const JavaHeapLayout& layout, int64_t tag);

// Never longer than the deadline, whatever the layout and the memory say:
// spaces are walked only when every one of them is plausible (bottom <= top
// <= end, aligned, bounded, none overlapping another), else the walk fails
// naming the space and its field; regions are believed only as large as GrainBytes, unreadable memory ends a
// region at once, and the region-table scan gives up on records that
// cannot be read. Past it, only the names of the top limits.max_entries
// classes are still read.
JavaHeapWalk walk_java_heap(ChunkCache& mem, const JavaHeapLayout& layout, const JavaHeapLimits& limits, const Deadline& deadline);

namespace java_walk {
class Walker;
}

// The same walk, which can be brought up to date after young collections
// at the cost of what they change. A young collection (Serial's, Parallel's,
// or one G1 pause) moves objects out of the young regions and appends them
// to old ones; what lay below an old region's top stays where it was. So
// after one, walk_young_again() keeps the counts of the old regions and the
// humongous objects as walked, walks what was appended to them since and
// every young region afresh: the same histogram as a whole new walk, in a
// fraction of its time. The caller must know that only young collections
// ran since the last walk (a full one compacts the old regions too; a mixed
// G1 pause evacuates some, which is seen here, but two pauses could reuse
// one): the JVM's counters say so, not the heap.
class JavaHeapWalker {
 public:
  // All four are referenced, not copied: layout's TLAB holes may be read
  // again between walks, limits' name_read_limit changed.
  JavaHeapWalker(ChunkCache& mem, const JavaHeapLayout& layout, const JavaHeapLimits& limits,
                 const Deadline& deadline);
  ~JavaHeapWalker();
  JavaHeapWalker(const JavaHeapWalker&) = delete;
  JavaHeapWalker& operator=(const JavaHeapWalker&) = delete;
  // The whole heap, as walk_java_heap.
  JavaHeapWalk walk();
  // The last walk brought up to date; nullopt when it cannot be (the last
  // walk was sampled or not complete, the heap is to be sampled now, or an
  // old region or humongous object walked is no longer there as it was):
  // then the heap is walked afresh, by a new walker.
  std::optional<JavaHeapWalk> walk_young_again();

 private:
  std::unique_ptr<java_walk::Walker> walker_;
};

// Klass names in the JVM's internal form to Java's: "java/lang/String" ->
// "java.lang.String", "[B" -> "byte[]", "[[Ljava/lang/Object;" -> "java.lang.Object[][]".
// hidden: the class (an array's element class) is a hidden class, whose
// name's last '+' is printed as '/', as Klass::external_name() and so jcmd
// GC.class_histogram print it: "Foo$$Lambda+0x00007f0001234567" ->
// "Foo$$Lambda/0x00007f0001234567". Any other '+' is kept.
std::string java_class_name(const std::string& internal, bool hidden = false);

// Whether a klass named `internal` is a hidden class (or an array of one).
// VMStructs exports no hidden flag, so it is told by the name HotSpot gives
// hidden classes (ClassFileParser::mangle_hidden_class_name): the class
// file's name, '+', and a suffix, at run time the InstanceKlass's own address
// (INTPTR_FORMAT: "0x" and 16 lowercase hex digits); for a class archived by
// a CDS dump, what that dump gave it (a counter in a static archive, "0x"
// and up to 16 hex digits). '+' is legal in ordinary class names (the class
// file format forbids only '.', ';', '[' and '/' in a name's parts), so the
// suffix alone proves nothing: it must be the address of `element_klass`
// (the klass itself, or an array's bottom klass), or `archived` (that klass
// lies in a CDS archive) and of the dump's form.
bool hotspot_hidden_class_name(std::string_view internal, uint64_t element_klass, bool archived);

}  // namespace oomsnap
