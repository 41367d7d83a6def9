// The CPython heap walk's parts, shared by its two files: the walker (GC
// lists, references, sizes: python_heap.cpp) and its reading of types and
// strings (python_types.cpp). Internal to python/.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/text.h"
#include "core/address_bitmap.h"
#include "core/address_set.h"
#include "base/checked_bytes.h"
#include "python/python_heap.h"

namespace oomsnap::py_walk {

// Py_TPFLAGS_* (Include/object.h; bits 2-4 only 3.11+, the rest the same 3.8-3.14).
constexpr uint64_t kInlineValues = 1ull << 2, kManagedWeakref = 1ull << 3, kManagedDict = 1ull << 4,
                   kHeapType = 1ull << 9, kHaveGc = 1ull << 14, kLongSub = 1ull << 24,
                   kListSub = 1ull << 25, kTupleSub = 1ull << 26, kBytesSub = 1ull << 27,
                   kUnicodeSub = 1ull << 28, kDictSub = 1ull << 29;
// PyGC_Head links carry two flag bits below the pointer (3.14's incremental
// GC keeps its space bit in _gc_next; _gc_prev has FINALIZED/COLLECTING).
// Only two: Debian's 3.13 aligns PyGC_Head to 4, so list heads inside the
// interpreter state may sit at 4 mod 8.
constexpr uint64_t kLinkMask = ~uint64_t{3};
constexpr uint64_t kGcHead = 16;
constexpr size_t kObjView = 64;           // object bytes read with its header
constexpr size_t kMaxTypes = 65536;       // distinct type addresses before "<other>"
constexpr int kMaxBaseDepth = 32;          // tp_base chain length followed
constexpr uint64_t kSaneBytes = 1ull << 40;
constexpr int kT_OBJECT = 6, kT_OBJECT_EX = 16;  // PyMemberDef.type
// Local limits on what the target's counts can make the reader do. A
// container's item count is the target's to choose: a container to follow
// is remembered as a range (address, count), never expanded up front; its
// items are read kBatchRecords at a time, only when nothing else is pending,
// and only the pointers worth following are kept, so what the walk holds
// grows with the depth of the references followed, never with a count or
// with the heap's size. At most kMaxItemsPerContainer records are read from
// one container (16 Mi: 128 MiB of list items, within the default read budget).
constexpr uint64_t kMaxItemsPerContainer = uint64_t{1} << 24;
constexpr size_t kBatchRecords = 1024;
// Pending work while references are followed (depth-first): pointers and
// container ranges (4 MiB and 2.5 MiB at most). Beyond these sizes (a chain
// of nested containers this deep), the rest is left out and the snapshot
// says so.
constexpr size_t kMaxPendingPointers = size_t{1} << 19;
constexpr size_t kMaxPendingRanges = size_t{1} << 16;
// The GC-list walk hands its references over in small batches, while the
// bytes they point at (an int allocated beside its instance) are likely
// still in the cache; what is not is put off (deferred_).
constexpr size_t kFollowPointersAt = 1024, kFollowRangesAt = 64;
// Words that did not read as an object are remembered in a small
// direct-mapped table (32 KiB), so a value repeated through junk memory
// costs one read, not one per occurrence, and never a seen mark.
constexpr size_t kRejectSlots = 4096;
// Bitmap regions (16 KiB, 1 MiB of heap each) for references put off until
// after the lists: 16 MiB for 1 GiB of heap at most.
constexpr size_t kMaxDeferredRegions = 1024;
constexpr unsigned kMaxStride = 3;
constexpr size_t kMaxSlots = 256;         // __slots__ members per type, bases included
constexpr size_t kMaxNameBytes = 1024;    // a type's name, marker included
constexpr std::string_view kTruncated = "[...]";
constexpr uint64_t kMaxDictKeys = 4096;   // entries of a type's __dict__ searched for __module__

// kGen: generator, coroutine, async generator; kFrame: frame object (3.11+,
// both with an interpreter frame inline).
enum class Kind { kOther, kList, kTuple, kDict, kSet, kStr, kInt, kBytes, kByteArray, kFloat, kGen, kFrame };

struct TypeInfo {
  bool valid = false;
  std::string name;
  uint64_t basicsize = 0, itemsize = 0, flags = 0, preheader = 0;
  int64_t dictoffset = 0;                // tp_dictoffset (3.8-3.10 instances: their __dict__ pointer)
  Kind kind = Kind::kOther;
  bool is_code = false;                  // the static type `code`
  uint64_t shared_entries = 0;           // heap types: dk_nentries of ht_cached_keys (attribute values in use)
  std::vector<uint32_t> slot_offsets;    // object members (__slots__) of this type and its bases
  uint64_t objects = 0, bytes = 0;
};

// Fields of bytes copied from the target, through the checked view: a field
// outside the bytes read reads as 0 (absent), never past the buffer.
inline uint64_t u64(ByteView v, uint64_t off) {
  uint64_t x = 0;
  v.read_u64(off, x);
  return x;
}
inline int64_t i64(ByteView v, uint64_t off) { return static_cast<int64_t>(u64(v, off)); }
inline uint32_t u32(ByteView v, uint64_t off) {
  uint32_t x = 0;
  v.read_u32(off, x);
  return x;
}
inline uint64_t abs64(int64_t v) { return v < 0 ? static_cast<uint64_t>(-(v + 1)) + 1 : static_cast<uint64_t>(v); }

// Byte totals of hostile sizes summed over millions of objects: stop at the
// top instead of wrapping.
inline uint64_t sat_add(uint64_t a, uint64_t b) { return a > ~uint64_t{0} - b ? ~uint64_t{0} : a + b; }

// At most kMaxNameBytes of `s`, cut at a UTF-8 character boundary and marked.
std::string capped_name(std::string s);

// PyDictKeysObject header fields, in the form both layouts share (3.8-3.10:
// dk_size and a 40-byte header; 3.11+: log2 sizes and a 32-byte header).
struct DictKeys {
  int64_t refcnt = 0;
  uint8_t log2_size = 0, kind = 0;  // kind 0: {hash, key, value} entries (always before 3.11)
  uint64_t header = 32, index_bytes = 0;
  uint64_t usable = 0, nentries = 0;
  bool sane() const { return log2_size < 40 && index_bytes < (1ull << 44) && nentries <= (1ull << log2_size); }
  uint64_t usable_fraction() const { return ((uint64_t{1} << log2_size) << 1) / 3; }
  uint64_t entry_size() const { return kind == 0 ? 24 : 16; }
  uint64_t entries_offset() const { return header + index_bytes; }
  // _PyDict_KeysSize (3.11+); sizeof(PyDictKeysObject) + DK_IXSIZE * dk_size +
  // entries of the usable fraction (3.8-3.10 _PyDict_SizeOf)
  uint64_t bytes() const { return entries_offset() + usable_fraction() * entry_size(); }
};

class Walker {
 public:
  Walker(ChunkCache& mem, const PyLayout& layout, const PyHeapInput& in, const Deadline& deadline)
      : mem_(mem), L_(layout), in_(in), deadline_(deadline) {
    unknown_.name = "<unreadable type>";
  }

  PyHeapResult run();

 private:
  // Copies the `want` bytes at addr into out, or fewer (zero-filled) near the
  // end of a mapping; false when not even 24 are readable. Inline for the
  // walk's fixed sizes: a call to memmove per object was a tenth of a walk.
  template <size_t N>
  bool load(uint64_t addr, uint8_t (&out)[N]) {
    if (const uint8_t* p = mem_.view(addr, N)) {
      std::memcpy(out, p, N);
      return true;
    }
    return load(addr, out, N);
  }
  bool load(uint64_t addr, uint8_t* out, size_t want);
  std::optional<DictKeys> read_keys(uint64_t addr);
  // depth: how far up a tp_base chain this lookup is (bounded).
  TypeInfo& type_info(uint64_t addr, int depth = 0);
  void fill_type(TypeInfo& t, uint64_t addr, int depth);
  std::optional<std::string> read_str(uint64_t addr);
  std::string read_c_string(uint64_t addr);
  uint64_t dict_lookup(uint64_t dict, std::string_view key);
  // sys.getsizeof of the object; fits: false when the size does not fit the
  // memory (then only its fixed part is returned).
  uint64_t size_of(uint64_t obj, ByteView o, const TypeInfo& t, bool& fits);
  // Adds an object's size to its type, and to the large objects' when it is one.
  void count_size(TypeInfo& t, uint64_t size);
  // co_nlocalsplus + co_stacksize of the code object a generator or frame
  // object runs; nullopt when that is no code object or its counts are not sane.
  std::optional<int64_t> frame_slots(uint64_t obj, ByteView o, Kind kind);
  // ob_size of a tuple object at addr (3.8-3.10 co_cellvars/co_freevars).
  std::optional<uint64_t> tuple_len(uint64_t addr);
  // what: the container's kind, for the reason when its count is cut.
  void add_pointers(uint64_t addr, uint64_t count, unsigned stride = 1, unsigned keep = 1, const char* what = "container");
  void add_pointer(uint64_t p);
  // Reads the next batch of the innermost pending container range.
  void expand_range();
  bool mark(uint64_t addr);
  void collect_refs(uint64_t obj, ByteView o, const TypeInfo& t);
  // Follows every pending reference (and what they reference) depth-first.
  void visit_refs();
  // Visits the references put off while the lists were walked (deferred_)
  // that no list reached since, in address order.
  void visit_deferred();
  // false: stop following (the object cap is reached).
  bool visit_ref(uint64_t r);
  // An object whose size, as its own fields give it, does not fit the
  // memory it (or its buffer) lies in: the fields are not what they claim.
  bool size_fits(uint64_t addr, uint64_t len) { return len <= mem_.readable_room(addr); }
  bool rejected(uint64_t r) const { return reject_[(r >> 3) & (kRejectSlots - 1)] == r; }
  bool reject(uint64_t r) {
    reject_[(r >> 3) & (kRejectSlots - 1)] = r;
    return true;
  }

  // Walks one generation list; false when it stopped early (reason set;
  // halt_ also set when nothing more should be read at all).
  bool walk_list(uint64_t head);
  const std::vector<uint32_t>* pick_heads(uint64_t gc);
  // The interpreter's GC state (gc_state_size bytes, every GC offset of the
  // layout inside them) into gc_buf_; false when unreadable.
  bool read_gc_state(uint64_t gc);
  bool is_static(uint64_t a) const {
    for (auto& [lo, hi] : in_.static_ranges)
      if (a >= lo && a < hi) return true;
    return false;
  }
  bool over_budget() {
    if (visited_ >= in_.max_objects) return halt("object cap of " + std::to_string(in_.max_objects) + " reached");
    if ((++steps_ & 1023) == 0 && deadline_.expired()) return halt("deadline reached");
    if (mem_.read_limit_hit()) return halt("read budget exhausted");
    if (mem_.target_gone()) return halt("target exited during the walk");
    return false;
  }
  // What ended the walk leads the reason; a list that broke earlier (the walk
  // went on with the other lists) follows it.
  bool halt(std::string why) {
    if (!halt_) reason_ = reason_.empty() ? std::move(why) : why + "; before that: " + reason_;
    halt_ = true;
    return true;
  }
  bool stop(std::string why) {
    if (reason_.empty()) reason_ = std::move(why);
    return true;
  }

  ChunkCache& mem_;
  const PyLayout& L_;
  const PyHeapInput& in_;
  const Deadline& deadline_;
  std::unordered_map<uint64_t, TypeInfo> types_;
  TypeInfo unknown_, other_;
  AddressBitmap seen_;
  uint64_t last_type_addr_ = ~uint64_t{0};
  TypeInfo* last_type_ = nullptr;
  // References pending while the GC lists are walked, followed once there
  // are kFollow*At of them, and after the lists.
  struct PendingRange {
    uint64_t addr, count, claimed, done;
    uint32_t stride, keep;
    const char* what;
  };
  std::vector<uint64_t> refs_;
  std::vector<PendingRange> ranges_;
  // References met while the lists are walked whose memory is not in the
  // cache: most are tracked objects a list reaches later (a list's items),
  // which would otherwise be read twice, once out of order. Put off in a
  // bitmap (bounded by its regions; past them a reference is visited at
  // once) and visited after the lists in address order (visit_deferred).
  AddressBitmap deferred_{kMaxDeferredRegions};
  bool defer_ = true;
  std::vector<uint64_t> reject_ = std::vector<uint64_t>(kRejectSlots, 0);
  uint64_t implausible_sizes_ = 0;
  // Objects over obmalloc's small-request threshold (malloc'd): count, bytes.
  uint64_t large_objects_ = 0, large_object_bytes_ = 0;
  std::vector<uint64_t> batch_;   // one batch of a container's records (kBatchRecords x stride words)
  std::vector<uint8_t> gc_buf_;  // the GC state being read (read_gc_state)
  uint64_t visited_ = 0, tracked_ = 0, untracked_ = 0, steps_ = 0, marks_ = 0;
  uint64_t peak_queue_bytes_ = 0;  // pending pointers + ranges, at their largest
  bool refs_truncated_ = false;
  bool halt_ = false;
  uint64_t missing_ = 0;      // estimated objects of incomplete lists not read
  bool unestimated_ = false;  // an incomplete list had no estimate
  std::string reason_;
};

}  // namespace oomsnap::py_walk
