#include "node/v8_pages.h"

#include <algorithm>
#include <map>

namespace oomsnap {
namespace {

constexpr uint64_t kOsPage = 4096;
// A large-object page holds one object; V8 caps objects far below this.
constexpr uint64_t kMaxPageSize = uint64_t{1} << 36;
constexpr size_t kBatch = 1024;  // requests per read_batch (one process_vm_readv at IOV_MAX)

bool aligned_pointer(uint64_t p) { return p != 0 && p % 8 == 0 && p < (uint64_t{1} << 47); }

bool is_anonymous_rw(const Mapping& m) {
  return m.perms.size() >= 2 && m.perms[0] == 'r' && m.perms[1] == 'w' && m.inode == 0 &&
         (m.path.empty() || m.path.rfind("[anon:", 0) == 0);
}

}  // namespace

std::optional<V8Page> decode_v8_page(const V8HeapLayout& layout, uint64_t addr, ByteView page_head,
                                     ByteView metadata) {
  V8Page p;
  p.addr = addr;
  const ByteView fields = layout.metadata_at ? metadata : page_head;
  if (!page_head.read_u64(layout.flags_at, p.flags)) return std::nullopt;
  if (layout.self_at) {
    uint64_t self = 0;
    if (!fields.read_u64(*layout.self_at, self) || self != addr) return std::nullopt;
  }
  if (!fields.read_u64(layout.size_at, p.size) || !fields.read_u64(layout.heap_at, p.heap) ||
      !fields.read_u64(layout.area_start_at, p.area_start) || !fields.read_u64(layout.area_end_at, p.area_end) ||
      !fields.read_u64(layout.owner_at, p.owner))
    return std::nullopt;
  if (p.size == 0 || p.size % kOsPage != 0 || p.size > kMaxPageSize) return std::nullopt;
  if (!aligned_pointer(p.heap) || !aligned_pointer(p.owner)) return std::nullopt;
  // The area lies inside the page, after its first words.
  if (p.area_start < addr + 16 || p.area_start > p.area_end || p.area_end - addr > p.size) return std::nullopt;
  return p;
}

std::optional<V8Space> decode_v8_space(const V8HeapLayout& layout, uint64_t owner, uint64_t heap, ByteView bytes) {
  uint64_t space_heap = 0, committed = 0;
  uint32_t id = 0;
  if (!bytes.read_u64(layout.space_heap_at, space_heap) || !bytes.read_u32(layout.space_id_at, id) ||
      !bytes.read_u64(layout.space_committed_at, committed))
    return std::nullopt;
  if (space_heap != heap) return std::nullopt;
  const V8SpaceName* name = layout.space(id);
  if (!name) return std::nullopt;
  V8Space s;
  s.owner = owner;
  s.name = name;
  s.committed = committed;
  return s;
}

V8PageScan scan_v8_pages(RemoteMemory& mem, const std::vector<Mapping>& maps, const V8HeapLayout& layout,
                         const Deadline& deadline, const V8PageScanLimits& limits) {
  V8PageScan out;
  const uint64_t align = layout.page_size;
  // The candidates: every aligned address with a header's room before the
  // mapping's end.
  std::vector<uint64_t> candidates;
  for (const auto& m : maps) {
    if (!is_anonymous_rw(m) || align == 0) continue;
    for (uint64_t a = (m.start + align - 1) / align * align; a >= m.start && a < m.end && m.end - a >= layout.header_bytes;
         a += align) {
      if (candidates.size() >= limits.max_candidates) {
        out.cut = "more than " + std::to_string(limits.max_candidates) + " candidate page addresses";
        break;
      }
      candidates.push_back(a);
    }
    if (!out.cut.empty()) break;
  }
  out.candidates = candidates.size();

  // Headers, then (13.6+) the metadata records they point to, in batches.
  std::vector<V8Page> pages;
  std::vector<uint8_t> heads(kBatch * layout.header_bytes), metas(kBatch * layout.header_bytes);
  std::vector<RemoteMemory::Request> reqs(kBatch), meta_reqs;
  for (size_t first = 0; first < candidates.size(); first += kBatch) {
    if (deadline.expired()) {
      out.cut = "the deadline passed while looking for pages";
      break;
    }
    const size_t n = std::min(kBatch, candidates.size() - first);
    for (size_t i = 0; i < n; ++i)
      reqs[i] = {candidates[first + i], heads.data() + i * layout.header_bytes, layout.header_bytes, false};
    mem.read_batch(std::span(reqs.data(), n));
    meta_reqs.clear();
    std::vector<size_t> meta_of(n, SIZE_MAX);
    if (layout.metadata_at) {
      for (size_t i = 0; i < n; ++i) {
        uint64_t md = 0;
        ByteView head(heads.data() + i * layout.header_bytes, layout.header_bytes);
        if (!reqs[i].ok || !head.read_u64(*layout.metadata_at, md) || !aligned_pointer(md)) continue;
        meta_of[i] = meta_reqs.size();
        meta_reqs.push_back({md, metas.data() + meta_reqs.size() * layout.header_bytes, layout.header_bytes, false});
      }
      mem.read_batch(std::span(meta_reqs));
    }
    for (size_t i = 0; i < n; ++i) {
      if (!reqs[i].ok) continue;
      ByteView head(heads.data() + i * layout.header_bytes, layout.header_bytes), meta;
      if (layout.metadata_at) {
        if (meta_of[i] == SIZE_MAX || !meta_reqs[meta_of[i]].ok) continue;
        meta = ByteView(metas.data() + meta_of[i] * layout.header_bytes, layout.header_bytes);
      }
      if (auto p = decode_v8_page(layout, candidates[first + i], head, meta)) {
        if (pages.size() >= limits.max_pages) {
          out.cut = "more than " + std::to_string(limits.max_pages) + " heap pages";
          break;
        }
        pages.push_back(*p);
      }
    }
    if (!out.cut.empty()) break;
  }

  // The owners: each read once; a page whose owner is not a space of its
  // heap is dropped.
  std::map<std::pair<uint64_t, uint64_t>, std::optional<V8Space>> owners;  // (owner, heap)
  for (const auto& p : pages) owners.emplace(std::make_pair(p.owner, p.heap), std::nullopt);
  if (owners.size() > limits.max_owners) {
    out.cut = std::to_string(owners.size()) + " distinct owner spaces, more than " +
              std::to_string(limits.max_owners);
    return out;
  }
  const uint32_t space_bytes = std::max({layout.space_heap_at, layout.space_id_at, layout.space_committed_at}) + 8;
  std::vector<uint8_t> space_buf(owners.size() * space_bytes);
  std::vector<RemoteMemory::Request> space_reqs;
  for (const auto& [key, unused] : owners)
    space_reqs.push_back({key.first, space_buf.data() + space_reqs.size() * space_bytes, space_bytes, false});
  for (size_t first = 0; first < space_reqs.size(); first += kBatch)
    mem.read_batch(std::span(space_reqs.data() + first, std::min(kBatch, space_reqs.size() - first)));
  size_t k = 0;
  for (auto& [key, space] : owners) {
    if (space_reqs[k].ok)
      space = decode_v8_space(layout, key.first, key.second, ByteView(space_buf.data() + k * space_bytes, space_bytes));
    ++k;
  }
  std::map<uint64_t, V8HeapPages> heaps;
  for (const auto& p : pages) {
    if (!owners[{p.owner, p.heap}]) continue;
    auto& h = heaps[p.heap];
    h.heap = p.heap;
    h.pages.push_back(p);
  }
  for (auto& [heap, h] : heaps) {
    // Pages are in address order already (candidates were); spaces by id.
    std::map<std::pair<uint32_t, uint64_t>, V8Space> spaces;
    for (uint32_t i = 0; i < h.pages.size(); ++i) {
      const V8Page& p = h.pages[i];
      const V8Space& s = *owners[{p.owner, p.heap}];
      auto [it, fresh] = spaces.try_emplace({s.name->id, p.owner}, s);
      it->second.pages.push_back(i);
    }
    for (auto& [key, s] : spaces) h.spaces.push_back(std::move(s));
    out.heaps.push_back(std::move(h));
  }
  std::sort(out.heaps.begin(), out.heaps.end(),
            [](const V8HeapPages& a, const V8HeapPages& b) { return a.pages.size() > b.pages.size(); });
  return out;
}

}  // namespace oomsnap
