#include "python/python_heap.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "base/text.h"
#include "core/address_bitmap.h"
#include "core/address_set.h"
#include "base/checked_bytes.h"

#include "python/python_arena_table.h"
#include "python/python_walker.h"

namespace oomsnap {
namespace py_walk {

// Why a walk stops when a list's links disagree; a later walk may not.
constexpr const char* kListChanged = "GC list changed under the reader";

// sys.getsizeof of the object, from its first kObjView bytes `o`. Every
// count in it is the target's: the object (or the buffer it owns) must fit
// the readable mapping it lies in, else fits is false and only the fixed
// part is counted (a junk word read as an object claims terabytes).
uint64_t Walker::size_of(uint64_t obj, ByteView o, const TypeInfo& t, bool& fits) {
  const uint64_t basic = t.basicsize;
  const uint64_t n = abs64(i64(o, 16));  // ob_size for var objects
  uint64_t size = basic;
  // The memory the size says the target holds: inline (from obj) unless a
  // buffer of its own is named.
  uint64_t buf = obj, buf_len = basic;
  switch (t.kind) {
    case Kind::kList: {
      const uint64_t allocated = std::min<uint64_t>(u64(o, 32), kSaneBytes);
      size = basic + allocated * 8;
      if (allocated) buf = u64(o, 24), buf_len = allocated * 8;
      break;
    }
    case Kind::kInt: {
      const uint64_t ndigits = std::min(L_.long_has_lv_tag ? (u64(o, 16) >> 3) : n, kSaneBytes);
      size = buf_len = basic + std::max<uint64_t>(ndigits, L_.long_zero_has_digit ? 1 : 0) * 4;
      break;
    }
    case Kind::kStr: {
      const uint32_t state = u32(o, 32);
      const uint64_t kind = (state >> 2) & 7, len = std::min(u64(o, 16), kSaneBytes);
      if ((state >> 5) & 1) size = buf_len = ((state >> 6) & 1) ? L_.ascii_size + len + 1 : L_.compact_size + (len + 1) * kind;
      else size = basic + (len + 1) * kind;
      break;
    }
    case Kind::kByteArray: {
      const uint64_t alloc = std::min(u64(o, L_.bytearray_alloc), kSaneBytes);
      size = basic + alloc;
      if (alloc) buf = u64(o, L_.bytearray_alloc + 8), buf_len = alloc;  // ob_bytes follows ob_alloc
      break;
    }
    case Kind::kSet:
      if (u64(o, 40) != obj + 64) {
        const uint64_t table = (std::min(u64(o, 32), kSaneBytes) + 1) * 16;
        size = basic + table;
        buf = u64(o, 40), buf_len = table;
      }
      break;
    case Kind::kDict: {
      const uint64_t keys = u64(o, 32), values = u64(o, 40);
      auto k = is_static(keys) ? std::nullopt : read_keys(keys);
      if (k && values)  // split table: shared_keys_usable_size values (3.8-3.10: the usable fraction)
        size += (L_.dict_keys_v1 ? k->usable_fraction() : k->nentries + std::min(k->usable, kSaneBytes)) * 8;
      if (k && k->refcnt == 1) {  // keys owned by this dict
        size += k->bytes();
        buf = keys, buf_len = k->bytes();
      }
      break;
    }
    case Kind::kGen:
    case Kind::kFrame: {
      // gen_sizeof / frame_sizeof: the slots of the frame held inline (the
      // memory a frame object is allocated with, too).
      auto slots = frame_slots(obj, o, t.kind);
      if (!slots) {
        fits = false;
        return basic + t.preheader;
      }
      size = buf_len = static_cast<uint64_t>(static_cast<int64_t>(basic) + *slots * 8);  // basic is at least 16
      break;
    }
    default:
      // Like object.__sizeof__: 3.13+ inline attribute values are not counted.
      if (t.itemsize) size = buf_len = basic + std::min(n, kSaneBytes) * t.itemsize;
      break;
  }
  fits = size_fits(buf, buf_len) && (buf == obj || size_fits(obj, basic));
  if (!fits) size = basic;
  return size + t.preheader;
}

std::optional<uint64_t> Walker::tuple_len(uint64_t addr) {
  uint64_t type = 0, n = 0;
  if (!addr || !mem_.get(addr + 8, type) || type_info(type).kind != Kind::kTuple || !mem_.get(addr + 16, n) ||
      n >= (uint64_t{1} << 31))
    return std::nullopt;
  return n;
}

// Slots beyond basicsize: 3.11+ co_nlocalsplus + co_stacksize; 3.8-3.10
// frames the co_stacksize + co_nlocals + cells + free variables less the
// one slot sizeof(PyFrameObject) holds (so -1 for a code with none).
std::optional<int64_t> Walker::frame_slots(uint64_t obj, ByteView o, Kind kind) {
  uint64_t code = 0;
  if (L_.frame_f_code) {
    uint64_t code_type = 0;
    uint32_t stack = 0, nlocals = 0;
    code = u64(o, L_.frame_f_code);
    if (!code || !mem_.get(code + 8, code_type) || !type_info(code_type).is_code ||
        !mem_.get(code + L_.code_stacksize, stack) || !mem_.get(code + L_.code_nlocals, nlocals))
      return std::nullopt;
    uint64_t cells = 0, frees = 0;
    auto c = tuple_len(mem_.get(code + L_.code_cellvars, cells) ? cells : 0);
    auto f = tuple_len(mem_.get(code + L_.code_freevars, frees) ? frees : 0);
    if (!c || !f) return std::nullopt;
    return static_cast<int64_t>(uint64_t{stack} + nlocals + *c + *f) - 1;
  }
  if (kind == Kind::kGen) {
    if (!o.read_u64(L_.gen_code, code) && !mem_.get(obj + L_.gen_code, code)) return std::nullopt;
  } else {
    const uint64_t iframe = u64(o, L_.frame_iframe);
    if (!iframe || !mem_.get(iframe + L_.iframe_code, code)) return std::nullopt;
  }
  code &= ~uint64_t{7};  // 3.14's f_executable is a tagged _PyStackRef
  uint64_t code_type = 0;
  // Read unsigned: a negative count reads as ~4 G slots, which no mapping
  // holds (size_fits); the sum of two stays far from overflow.
  uint32_t stack = 0, nlocals = 0;
  if (!code || !mem_.get(code + 8, code_type) || !type_info(code_type).is_code ||
      !mem_.get(code + L_.code_stacksize, stack) || !mem_.get(code + L_.code_nlocalsplus, nlocals))
    return std::nullopt;
  return static_cast<int64_t>(uint64_t{stack} + nlocals);
}

// Marks addr seen; false when it was already. The marks live in 1 MiB
// bitmap regions up to AddressBitmap's region limit, then in its fallback
// hash set, which grows with every mark: bounded here by the object cap (a
// mark per object visited or reference followed, both within it).
bool Walker::mark(uint64_t addr) {
  if (!seen_.insert(addr)) return false;
  const uint64_t limit = 2 * in_.max_objects + 1024;
  if (++marks_ > limit) halt("seen-set limit of " + std::to_string(limit) + " addresses reached");
  return true;
}

// Remembers `count` records of `stride` words at addr whose word index is set
// in keep (bit 0 = first word of each record) for visit_refs: list and tuple
// items, {key, hash} set entries, {hash, key, value} dict entries. count is
// the target's: nothing is read or sized from it here.
void Walker::add_pointers(uint64_t addr, uint64_t count, unsigned stride, unsigned keep, const char* what) {
  if (!addr || count == 0 || stride == 0 || stride > kMaxStride) return;
  if (ranges_.size() >= kMaxPendingRanges) {
    refs_truncated_ = true;
    return;
  }
  ranges_.push_back({addr, std::min(count, kMaxItemsPerContainer), count, 0, stride, keep, what});
  peak_queue_bytes_ = std::max<uint64_t>(peak_queue_bytes_, refs_.capacity() * sizeof(uint64_t) +
                                                                ranges_.capacity() * sizeof(PendingRange));
}

// Pending pointers are bounded by kMaxPendingPointers and by the room the
// object cap leaves (more could not all be visited); past either, the
// pointer is left out and the snapshot is partial.
void Walker::add_pointer(uint64_t p) {
  if (!p || is_static(p) || seen_.contains(p)) return;
  const uint64_t room = in_.max_objects - std::min(visited_, in_.max_objects);
  if (refs_.size() >= std::min<uint64_t>(kMaxPendingPointers, room)) {
    refs_truncated_ = true;
    return;
  }
  refs_.push_back(p);
}

// Reads the next kBatchRecords records of the innermost range and keeps the
// pointers worth following (not null, not static, not already counted). An
// unreadable batch ends the range; where it starts in readable memory, the
// count ran past the end of it: a count that does not match the memory is
// worth a partial. (Unmapped items are a container freed while we read: the
// list walk says so.)
void Walker::expand_range() {
  PendingRange& g = ranges_.back();
  const uint64_t n = std::min<uint64_t>(g.count - g.done, kBatchRecords);
  const uint64_t at = g.addr + g.done * g.stride * 8;
  batch_.resize(kBatchRecords * kMaxStride);
  if (!mem_.read(at, batch_.data(), n * g.stride * 8)) {
    if (!mem_.read_limit_hit() && !mem_.target_gone() && mem_.mapped(at))
      stop(std::string("a ") + g.what + " at " + hex(g.addr) + " claims " + std::to_string(g.claimed) +
           " items, more than the memory it points at holds; " + std::to_string(g.done) + " were followed");
    ranges_.pop_back();
    return;
  }
  const uint64_t words = n * g.stride;
  for (uint64_t r = 0; r < words; ++r)
    if ((g.keep >> (r % g.stride)) & 1) add_pointer(batch_[r]);
  g.done += n;
  if (g.done < g.count) return;
  if (g.claimed > g.count)
    stop(std::string("a ") + g.what + " at " + hex(g.addr) + " claims " + std::to_string(g.claimed) +
         " items; the first " + std::to_string(g.count) + " were followed");
  ranges_.pop_back();
}

// The objects this tracked object references directly, as CPython's own
// tp_traverse would see them for the common containers and instances.
void Walker::collect_refs(uint64_t obj, ByteView o, const TypeInfo& t) {
  const uint64_t n = abs64(i64(o, 16));
  switch (t.kind) {
    case Kind::kList: add_pointers(u64(o, 24), std::min(n, u64(o, 32)), 1, 1, "list"); break;
    case Kind::kTuple: add_pointers(obj + L_.tuple_items, n, 1, 1, "tuple"); break;
    case Kind::kSet: {
      const uint64_t mask = u64(o, 32);
      if (mask < (1ull << 32)) add_pointers(u64(o, 40), mask + 1, 2, 0b01, "set");  // setentry {key, hash}
      break;
    }
    case Kind::kDict: {
      const uint64_t keys = u64(o, 32), values = u64(o, 40);
      auto k = is_static(keys) ? std::nullopt : read_keys(keys);
      if (!k) break;
      // PyDictKeyEntry {hash, key, value} or PyDictUnicodeEntry {key, value};
      // a split table keeps its values apart.
      if (k->kind == 0) add_pointers(keys + k->entries_offset(), k->nentries, 3, values ? 0b010 : 0b110, "dict");
      else add_pointers(keys + k->entries_offset(), k->nentries, 2, values ? 0b01 : 0b11, "dict");
      if (values) add_pointers(values + L_.dict_values_items, k->nentries, 1, 1, "dict");
      break;
    }
    default: break;
  }
  if (!(t.flags & kHeapType)) return;
  for (uint32_t off : t.slot_offsets) {
    uint64_t v = 0;
    if (!o.read_u64(off, v)) mem_.get(obj + off, v);  // beyond the bytes read with the header
    add_pointer(v);
  }
  if (L_.managed_dict == PyManagedDict::kNone) {
    // 3.8-3.10: the instance's __dict__ (untracked while it holds only
    // atomic values) at tp_dictoffset, inside the object's basic size.
    const int64_t off = t.dictoffset;
    uint64_t dict = 0;
    if (off >= 16 && static_cast<uint64_t>(off) + 8 <= t.basicsize && !o.read_u64(static_cast<uint64_t>(off), dict))
      mem_.get(obj + static_cast<uint64_t>(off), dict);
    add_pointer(dict);
    return;
  }
  if (!(t.flags & kManagedDict)) return;
  // Attribute values of a managed dict that was never materialised.
  uint64_t values = 0, dict = 0;
  switch (L_.managed_dict) {
    case PyManagedDict::kNone: break;
    case PyManagedDict::kValuesBeforeDict:
      mem_.get(obj - 32, values);
      mem_.get(obj - 24, dict);
      break;
    case PyManagedDict::kTaggedDictOrValues: {
      uint64_t dv = 0;
      mem_.get(obj - 24, dv);
      if (dv & 1) values = dv + 1;  // stored as values - 1 (_PyDictOrValues_SetValues)
      else dict = dv;
      break;
    }
    case PyManagedDict::kInlineValues: {
      mem_.get(obj - 24, dict);
      if (t.flags & kInlineValues) {
        uint8_t hdr[4];
        const uint64_t v = obj + t.basicsize;
        // PyDictValues: capacity, size, embedded, valid (0 once moved to a dict);
        // 3.13 asserts basicsize == sizeof(PyObject), 3.14 places them at basicsize.
        if (mem_.read(v, hdr, sizeof hdr) && hdr[3]) add_pointers(v + L_.dict_values_items, hdr[0]);
      }
      break;
    }
  }
  add_pointer(dict);
  if (values) add_pointers(values + L_.dict_values_items, t.shared_entries);
}

// Counts the untracked objects among the pending references, each once.
// Untracked containers (a tuple of str, a dict of str -> bytes: CPython stops
// tracking containers that can hold no cycle) are followed too, transitively,
// since what they hold is reachable from nothing the GC lists show. Depth
// first: pending pointers before the next batch of a container's items, so
// what is pending stays within the depth of the references being followed.
void Walker::visit_refs() {
  while (!halt_) {
    if ((++steps_ & 1023) == 0 && deadline_.expired()) {
      halt("deadline reached while following references");
      break;
    }
    if (mem_.read_limit_hit()) {
      halt("read budget exhausted while following references");
      break;
    }
    if (!refs_.empty()) {
      const uint64_t r = refs_.back();
      refs_.pop_back();
      if (!visit_ref(r)) break;
    } else if (!ranges_.empty()) {
      expand_range();
    } else {
      break;
    }
  }
  peak_queue_bytes_ = std::max<uint64_t>(peak_queue_bytes_, refs_.capacity() * sizeof(uint64_t) +
                                                                ranges_.capacity() * sizeof(PendingRange));
  refs_.clear();
  ranges_.clear();
}

bool Walker::visit_ref(uint64_t r) {
  if (!r || (r & 7) || is_static(r) || seen_.contains(r) || rejected(r)) return true;
  if (visited_ >= in_.max_objects) {
    refs_truncated_ = true;
    return false;
  }
  if (defer_ && !mem_.holds(r) && mem_.mapped(r) && deferred_.insert_if_room(r)) return true;
  // Marked only once it reads as an object of a valid type whose size fits
  // its memory: a reference is the target's word (a container's count can
  // run past its items into any memory), and marks cost the agent memory.
  uint8_t buf[kObjView];
  if (!load(r, buf)) return reject(r);
  const ByteView o(buf, sizeof buf);
  TypeInfo& t = type_info(u64(o, 8));
  if (!t.valid) return reject(r);
  if (t.flags & kHaveGc) {
    uint64_t next = 1;
    if (!mem_.get(r - kGcHead, next)) return reject(r);
    if (next != 0) {
      mark(r);  // tracked: counted from its list, now or later
      return true;
    }
  }
  bool fits = true;
  const uint64_t size = size_of(r, o, t, fits);
  if (!fits) return reject(r);
  mark(r);
  ++visited_;
  ++untracked_;
  ++t.objects;
  count_size(t, size);
  if (t.flags & kHaveGc) collect_refs(r, o, t);
  return true;
}

void Walker::visit_deferred() {
  defer_ = false;
  deferred_.for_each_in_regions([&](uint64_t r) {
    if ((++steps_ & 1023) == 0 && deadline_.expired()) return !halt("deadline reached while following references");
    if (seen_.contains(r)) return true;
    if (!visit_ref(r)) return false;  // the object cap
    visit_refs();
    return !halt_;
  });
}

void Walker::count_size(TypeInfo& t, uint64_t size) {
  t.bytes = sat_add(t.bytes, size);
  if (size > kPySmallRequestThreshold) {
    ++large_objects_;
    large_object_bytes_ = sat_add(large_object_bytes_, size);
  }
}

bool Walker::walk_list(uint64_t head) {
  uint8_t hb[16];
  if (!mem_.read(head, hb, sizeof hb)) return !halt(mem_.target_gone() ? "target exited during the walk" : "cannot read a GC list head");
  uint64_t prev = head;
  uint64_t g = u64(ByteView(hb, sizeof hb), 0) & kLinkMask;
  while (g != head) {
    if (over_budget()) return false;
    uint8_t buf[kGcHead + kObjView];
    if (g == 0 || (g & 7) || !load(g, buf)) {
      if (over_budget()) return false;  // the read failed for a budget or exit reason
      return !stop(std::string(kListChanged) + " (unreadable next link)");
    }
    const ByteView gh(buf, kGcHead), o(buf + kGcHead, kObjView);
    if ((u64(gh, 8) & kLinkMask) != prev) return !stop(std::string(kListChanged) + " (prev link mismatch)");
    const uint64_t obj = g + kGcHead;
    // Marked so that references to it are skipped without reading it again.
    mark(obj);
    TypeInfo& t = type_info(u64(o, 8));
    ++visited_;
    ++tracked_;
    ++t.objects;
    bool fits = true;
    count_size(t, size_of(obj, o, t, fits));
    implausible_sizes_ += !fits;
    collect_refs(obj, o, t);
    if (refs_.size() >= kFollowPointersAt || ranges_.size() >= kFollowRangesAt) visit_refs();
    if (halt_) return false;
    prev = g;
    g = u64(gh, 0) & kLinkMask;
  }
  return true;
}

// The list-head set of this GC state: the one generation0 points at when the
// layout has that pointer, else the first whose heads are all well-formed
// circular lists (re-checked a few times: the youngest list churns).
bool Walker::read_gc_state(uint64_t gc) {
  gc_buf_.resize(L_.gc_state_size);
  return mem_.read(gc, gc_buf_.data(), gc_buf_.size());
}

const std::vector<uint32_t>* Walker::pick_heads(uint64_t gc) {
  if (L_.gc_generation0) {
    uint64_t gen0 = 0;
    if (!read_gc_state(gc) || !ByteView(gc_buf_.data(), gc_buf_.size()).read_u64(L_.gc_generation0, gen0))
      return nullptr;
    for (const auto& set : L_.gc_head_sets)
      if (!set.empty() && gen0 == gc + set[0]) return &set;
    return nullptr;
  }
  for (int attempt = 0; attempt < 5; ++attempt) {
    for (const auto& set : L_.gc_head_sets) {
      bool ok = true;
      for (uint32_t off : set) {
        uint64_t h = gc + off, hn = 0, hp = 0, back = 0, fwd = 0;
        ok = mem_.get(h, hn) && mem_.get(h + 8, hp) && (hn &= kLinkMask, hp &= kLinkMask, true) &&
             (hn == h || (mem_.get(hn + 8, back) && (back & kLinkMask) == h)) &&
             (hp == h || (mem_.get(hp, fwd) && (fwd & kLinkMask) == h));
        if (!ok) break;
      }
      if (ok) return &set;
    }
  }
  return nullptr;
}

PyHeapResult Walker::run() {
  PyHeapResult res;
  if (auto bad = validate_py_layout(L_)) {
    res.reason = "unusable CPython layout: " + *bad;
    return res;
  }
  other_.valid = true;
  other_.name = "<other types>";
  uint64_t interp = 0;
  if (!mem_.get(in_.runtime_addr + L_.interpreters_head, interp) || interp == 0) {
    res.reason = mem_.target_gone() ? "target exited" : "cannot read _PyRuntime.interpreters.head";
    return res;
  }
  AddressSet interps;
  bool any = false;
  for (int i = 0; interp && i < 256 && interps.insert(interp); ++i) {
    ++res.interpreters;
    if (L_.runtime_gc && i > 0) {  // 3.8: the one GC state was walked with the first interpreter
      if (!mem_.get(interp + L_.interp_next, interp)) break;
      continue;
    }
    const uint64_t gc = py_gc_state(L_, in_.runtime_addr, interp);
    const std::vector<uint32_t>* heads = pick_heads(gc);
    if (!heads) {
      if (mem_.read_limit_hit()) halt("read budget exhausted");
      else if (mem_.target_gone()) halt("target exited during the walk");
      else stop("no well-formed GC generation lists at the interpreter's GC state");
    } else {
      any = true;
      for (size_t li = 0; li < heads->size(); ++li) {
        ++res.lists_total;
        const uint64_t before = tracked_;
        const bool complete = !halt_ && walk_list(gc + (*heads)[li]);
        if (complete) {
          ++res.lists_complete;
          continue;
        }
        // Cut short (or never started after a halt): how much is missing? The
        // oldest list holds nearly everything: the runtime counts it. The
        // youngest list's gc_generation.count (at +20) is its allocations since
        // the last collection; the middle and permanent lists are small and
        // have no count, so they add nothing.
        const uint64_t read = tracked_ - before;
        uint64_t expected = read;
        const bool state = read_gc_state(gc);
        const ByteView gv(gc_buf_.data(), state ? gc_buf_.size() : 0);
        if (li == 2) {
          uint64_t total = 0, pending = 0;
          if (L_.gc_long_lived_total && gv.read_u64(L_.gc_long_lived_total, total) &&
              gv.read_u64(L_.gc_long_lived_total + 8, pending) && total < (1ull << 40) && pending < (1ull << 40) &&
              total + pending > read)
            expected = total + pending;
          else
            unestimated_ = true;  // no count, or one the read already exceeds
        } else if (li == 0) {
          int32_t count = 0;
          if (gv.read_i32(uint64_t{(*heads)[li]} + 20, count) && count > 0) expected = static_cast<uint64_t>(count);
        }
        missing_ += std::max(expected, read) - read;
      }
    }
    if (halt_ || (!reason_.empty() && !any)) break;
    if (!mem_.get(interp + L_.interp_next, interp)) break;
  }
  if (!halt_) visit_refs();
  if (!halt_) visit_deferred();
  if (implausible_sizes_)
    stop(std::to_string(implausible_sizes_) +
         " GC-tracked objects claim sizes that do not fit the memory they lie in (counted at their fixed size)");
  res.tracked_objects = tracked_;
  res.untracked_objects = untracked_;
  res.implausible_sizes = implausible_sizes_;
  res.large_objects = large_objects_;
  res.large_object_bytes = large_object_bytes_;
  res.ref_queue_peak_bytes = std::max<uint64_t>(peak_queue_bytes_, refs_.capacity() * sizeof(uint64_t) +
                                                                       ranges_.capacity() * sizeof(PendingRange));
  res.addresses_marked = marks_;
  auto emit = [&](const TypeInfo& t) {
    if (t.objects) res.types.push_back({t.name, t.objects, t.bytes});
  };
  for (auto& [addr, t] : types_)
    if (t.valid) emit(t);
  emit(other_);
  emit(unknown_);
  res.scope = "gc_tracked+referenced_untracked";
  if (!any) {
    res.status = SnapshotStatus::kFailed;
    res.reason = reason_.empty() ? "no interpreter state could be read" : reason_;
    return res;
  }
  if (reason_.empty() && !refs_truncated_) {
    res.status = SnapshotStatus::kComplete;
    res.coverage = 1.0;
  } else {
    res.status = SnapshotStatus::kPartial;
    res.reason = reason_.empty() ? "object cap reached while following references" : reason_;
    if (!unestimated_)
      res.coverage = tracked_ + missing_ ? static_cast<double>(tracked_) / static_cast<double>(tracked_ + missing_) : 1.0;
    else
      res.coverage = res.lists_total ? static_cast<double>(res.lists_complete) / static_cast<double>(res.lists_total) : 0;
  }
  return res;
}

}  // namespace py_walk

PyHeapResult walk_python_heap(ChunkCache& mem, const PyLayout& layout, const PyHeapInput& in,
                              const Deadline& deadline) {
  PyHeapResult res;
  for (unsigned walk = 1;; ++walk) {
    const auto start = std::chrono::steady_clock::now();
    res = py_walk::Walker(mem, layout, in, deadline).run();
    res.walks = walk;
    const bool changed = res.status == SnapshotStatus::kPartial &&
                         res.reason.find(py_walk::kListChanged) != std::string::npos;
    if (!changed || !room_for_another_walk(deadline, std::chrono::steady_clock::now() - start, walk, in.max_walks))
      return res;
    mem.forget_contents();
    if (in.before_rewalk) in.before_rewalk();
  }
}

}  // namespace oomsnap
