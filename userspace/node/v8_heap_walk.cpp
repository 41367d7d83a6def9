#include "node/v8_heap_walk.h"

#include <algorithm>
#include <set>

namespace oomsnap {
namespace {

struct Lab {
  uint64_t start = 0, top = 0, limit = 0;
};

// Follows one LAB path from its base; nullopt when a step cannot be read or
// the three words are not a LAB (start <= top <= limit, top set).
std::optional<Lab> read_lab(ChunkCache& cache, const V8HeapLayout& l, const V8HeapLayout::LabPath& path,
                            uint64_t isolate, uint64_t heap) {
  using Base = V8HeapLayout::LabPath::Base;
  uint64_t addr = 0;
  switch (path.base) {
    case Base::kNone:
      return std::nullopt;
    case Base::kIsolate:
      addr = isolate;
      break;
    case Base::kHeap:
      addr = heap;
      break;
    case Base::kSpace:
      if (path.space_id > 64 || !cache.get(heap + l.space_array_at + 8 * uint64_t{path.space_id}, addr) || !addr)
        return std::nullopt;
      break;
  }
  for (uint8_t i = 0; i < path.nsteps; ++i) {
    addr += path.steps[i];
    if (i + 1 < path.nsteps && (!cache.get(addr, addr) || !addr || addr % 8 != 0)) return std::nullopt;
  }
  Lab lab;
  if (!cache.get(addr, lab.start) || !cache.get(addr + 8, lab.top) || !cache.get(addr + 16, lab.limit))
    return std::nullopt;
  if (lab.top == 0 || lab.start > lab.top || lab.top > lab.limit) return std::nullopt;
  return lab;
}

// The to-semispace's pages in list order up to its current page (those
// after it hold stale objects), from the semispace that owns them.
std::optional<std::set<uint64_t>> new_space_pages_in_use(ChunkCache& cache, const V8HeapLayout& l, uint64_t semispace,
                                                         uint64_t max_pages) {
  auto page_of = [&](uint64_t entry) -> std::optional<uint64_t> {
    if (!l.metadata_at) return entry;
    uint64_t page = 0;  // a metadata record names its page
    if (!l.self_at || !cache.get(entry + *l.self_at, page)) return std::nullopt;
    return page;
  };
  uint64_t current = 0, entry = 0;
  if (!cache.get(semispace + l.semispace_current_at, current) || !cache.get(semispace + l.list_front_at, entry))
    return std::nullopt;
  std::set<uint64_t> out;
  for (uint64_t i = 0; entry != 0 && i < max_pages; ++i) {
    const auto page = page_of(entry);
    if (!page || !out.insert(*page).second) return std::nullopt;  // unreadable, or a cycle
    if (entry == current) return out;
    if (!cache.get(entry + l.page_next_at, entry)) return std::nullopt;
  }
  return std::nullopt;  // the current page was not on the list
}

std::string hex(uint64_t v) {
  char b[24];
  snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace

bool v8_new_pages_reflagged(RemoteMemory& mem, const V8HeapPages& heap, const V8HeapLayout& layout) {
  std::vector<const V8Page*> pages;
  for (const auto& space : heap.spaces)
    if (space.name->is_new && !space.name->is_large)
      for (uint32_t i : space.pages) pages.push_back(&heap.pages[i]);
  std::vector<uint64_t> flags(pages.size());
  std::vector<RemoteMemory::Request> reqs;
  for (size_t i = 0; i < pages.size(); ++i) reqs.push_back({pages[i]->addr + layout.flags_at, &flags[i], 8, false});
  mem.read_batch(std::span(reqs));
  for (size_t i = 0; i < pages.size(); ++i)
    if (!reqs[i].ok || flags[i] != pages[i]->flags) return true;
  return false;
}

V8HeapWalk walk_v8_heap(RemoteMemory& mem, ChunkCache& cache, const V8HeapPages& heap, const V8HeapLayout& layout,
                        V8MapReader& maps, const Deadline& deadline, const V8WalkLimits& limits) {
  V8HeapWalk out;
  // The allocation areas, from the Isolate the Heap is part of.
  std::vector<Lab> labs;
  std::vector<std::optional<Lab>> by_path;
  const uint64_t isolate = heap.heap - layout.heap_in_isolate;
  uint64_t back = 0;
  if (!layout.heap_in_isolate || !cache.get(heap.heap + layout.heap_isolate_at, back) || back != isolate) {
    out.labs_why = "the Heap at " + hex(heap.heap) + " does not name its Isolate where V8 " + layout.version() +
                   " keeps it";
  } else {
    for (const auto& path : layout.labs) {
      by_path.push_back(read_lab(cache, layout, path, isolate, heap.heap));
      if (by_path.back()) labs.push_back(*by_path.back());
    }
    out.labs_found = true;
  }

  // What to walk of each page: [area_start, end).
  struct Job {
    const V8Page* page;
    const V8Space* space;
    uint64_t end;
    bool large;
  };
  std::vector<Job> jobs;
  for (const auto& space : heap.spaces) {
    std::optional<std::set<uint64_t>> in_use;
    if (space.name->is_new && !space.name->is_large && out.labs_found)
      in_use = new_space_pages_in_use(cache, layout, space.owner, limits.max_list_pages);
    for (uint32_t i : space.pages) {
      const V8Page& p = heap.pages[i];
      if (space.name->is_new && !space.name->is_large) {
        // The semispace being evacuated from holds only stale copies; of the
        // other, the pages after its current one too.
        if ((p.flags & layout.from_page_flag) || (in_use && !in_use->count(p.addr))) {
          ++out.pages_skipped;
          continue;
        }
      }
      uint64_t end = p.area_end;
      for (const Lab& lab : labs)
        if (lab.top >= p.area_start && lab.top <= p.area_end) end = std::min(end, lab.top);
      jobs.push_back({&p, &space, end, space.name->is_large});
      out.area_bytes += end - p.area_start;
    }
  }
  if (!out.labs_found) out.stops.push_back("allocation areas unknown: " + out.labs_why);

  const auto lookup = [&maps](uint64_t w) { return maps.lookup(w); };
  // V8 11.3: an InstructionStream's size is its Code object's: a 16-byte
  // header, the instructions and the metadata, in 64-byte units
  // (node-layouts.md 4.2).
  const auto remote = [&cache](const V8MapInfo&, uint64_t, ByteView object) -> std::optional<uint64_t> {
    uint64_t code = 0;
    int32_t instructions = 0, metadata = 0;
    if (!object.read_u64(8, code) || (code & 3) != 1 || !cache.get(code - 1 + 0x38, instructions) ||
        !cache.get(code - 1 + 0x3c, metadata) || instructions < 0 || metadata < 0)
      return std::nullopt;
    const uint64_t size = 16 + uint64_t(instructions) + uint64_t(metadata);
    return (size + 63) / 64 * 64;
  };
  auto stopped = [&](const V8Page& p, const V8RunWalk& r) {
    if (out.stops.size() < limits.max_stops)
      out.stops.push_back("page " + hex(p.addr) + " stopped at " + hex(r.stopped_at) + ": " + r.why);
  };
  // A page's share of the tally: what it added since `before` (the tally's
  // counts when its walk began).
  auto count = [&](const Job& j, const V8SpaceUse& before, const V8RunWalk& r) {
    V8SpaceUse& use = out.by_space[j.space->name->name];
    use.objects += out.tally.objects - before.objects;
    use.bytes += out.tally.bytes - before.bytes;
    use.free_bytes += out.tally.free_bytes - before.free_bytes;
    ++out.pages;
    out.area_bytes_walked += r.stopped_at - j.page->area_start;
    if (r.complete) ++out.pages_complete;
    else stopped(*j.page, r);
  };

  const auto now = [&out] { return V8SpaceUse{out.tally.objects, out.tally.bytes, out.tally.free_bytes}; };

  // Large-object pages: one object each, sized from its first words.
  std::vector<uint8_t> head(256);
  for (const Job& j : jobs) {
    if (!j.large || j.end <= j.page->area_start) continue;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(head.size(), j.end - j.page->area_start));
    V8RunWalk r;
    r.stopped_at = j.page->area_start;
    uint64_t map_word = 0;
    const V8MapInfo* info = nullptr;
    if (!mem.read(j.page->area_start, head.data(), n) || !ByteView(head.data(), n).read_u64(0, map_word)) {
      r.why = "unreadable";
    } else if (!(info = maps.lookup(map_word))) {
      r.why = "no map where its object starts";
    } else {
      // Its size, from the header; the bytes past `n` are not needed.
      const uint64_t room = j.end - j.page->area_start;
      const auto size = v8_object_size(*info, ByteView(head.data(), n), room);
      if (!size || *size > room || *size < 8) {
        r.why = "its object's size cannot be read";
      } else {
        const V8SpaceUse before = now();
        out.tally.add(*info, *size);
        r.complete = true;
        r.stopped_at = j.end;
        count(j, before, r);
        continue;
      }
    }
    count(j, now(), r);
  }

  // Regular pages, a batch at a time.
  std::vector<uint8_t> buf(limits.batch_bytes);
  std::vector<RemoteMemory::Request> reqs;
  std::vector<const Job*> batch;
  uint64_t read_total = 0;
  size_t next = 0;
  while (next < jobs.size()) {
    if (deadline.expired()) {
      out.cut = "the deadline passed after " + std::to_string(out.pages) + " pages";
      break;
    }
    reqs.clear();
    batch.clear();
    size_t used = 0;
    for (; next < jobs.size(); ++next) {
      const Job& j = jobs[next];
      if (j.large) continue;
      const uint64_t len = j.end - j.page->area_start;
      if (len == 0) continue;
      if (len > buf.size()) continue;  // never: regular pages are 256 KiB
      if (used + len > buf.size()) break;
      reqs.push_back({j.page->area_start, buf.data() + used, static_cast<size_t>(len), false});
      batch.push_back(&j);
      used += len;
    }
    if (batch.empty()) continue;
    if (read_total + used > limits.max_read_bytes) {
      out.cut = "the read budget of " + std::to_string(limits.max_read_bytes >> 20) + " MiB was spent after " +
                std::to_string(out.pages) + " pages";
      break;
    }
    read_total += used;
    mem.read_batch(std::span(reqs));
    for (size_t k = 0; k < batch.size(); ++k) {
      const Job& j = *batch[k];
      const V8SpaceUse before = now();
      V8RunWalk r;
      if (!reqs[k].ok) {
        r.stopped_at = j.page->area_start;
        r.why = "unreadable";
      } else {
        const ByteView bytes(static_cast<const uint8_t*>(reqs[k].buf), reqs[k].len);
        r = walk_v8_run(bytes, j.page->area_start, j.page->area_start, j.end, lookup, out.tally, remote);
        // A LAB no path above leads to (a background thread's) stops the
        // walk at its top, where stale words or none follow: objects resume
        // at the first word from which the rest of the page walks exactly to
        // its end.
        if (!r.complete) {
          const uint64_t gap_start = r.stopped_at;
          if (auto at = find_v8_resume(bytes, j.page->area_start, gap_start, j.end, lookup, remote)) {
            r = walk_v8_run(bytes, j.page->area_start, *at, j.end, lookup, out.tally, remote);
            ++out.unlocated_areas;
            out.unlocated_area_bytes += *at - gap_start;
          }
        }
      }
      count(j, before, r);
    }
  }
  // A collection ran meanwhile when the new space's pages are flagged
  // otherwise, or its allocation area went back (read afresh).
  out.collection_ran = v8_new_pages_reflagged(mem, heap, layout);
  const auto new_page_of = [&](uint64_t top) -> uint64_t {
    for (const auto& space : heap.spaces)
      if (space.name->is_new && !space.name->is_large)
        for (uint32_t i : space.pages)
          if (top >= heap.pages[i].area_start && top <= heap.pages[i].area_end) return heap.pages[i].addr;
    return 0;
  };
  cache.forget_contents();
  for (size_t i = 0; i < by_path.size() && !out.collection_ran; ++i) {
    const uint64_t page = by_path[i] ? new_page_of(by_path[i]->top) : 0;
    if (!page) continue;
    const auto now = read_lab(cache, layout, layout.labs[i], isolate, heap.heap);
    out.collection_ran = now && now->top < by_path[i]->top && new_page_of(now->top) == page;
  }
  if (maps.over_limit() && out.stops.size() < limits.max_stops)
    out.stops.push_back("more than " + std::to_string(V8MapReader::kMaxMaps) + " distinct maps");
  return out;
}

}  // namespace oomsnap
