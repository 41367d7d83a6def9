// V8 page headers and owner spaces as byte images (V8 12.4's layout): what
// is taken for a page and what is not.
#include "node/v8_pages.h"

#include "node/v8_heap_walk.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "core/memory_image.h"

using namespace oomsnap;

namespace {

constexpr uint64_t kPage = 0x7f0000040000, kHeap = 0x21800ea0, kOwner = 0x2175a720;

const V8HeapLayout& layout() {
  const V8HeapLayout* l = v8_heap_layout_for(12, 4);
  EXPECT_NE(l, nullptr);
  return *l;
}

struct Header {
  std::vector<uint8_t> b = std::vector<uint8_t>(0x50, 0);
  void set(uint32_t at, uint64_t v) { std::memcpy(b.data() + at, &v, 8); }
  ByteView view() const { return ByteView(b.data(), b.size()); }
};

// An old-space page of 256 KiB with its area after a 0x1140-byte header.
Header old_page() {
  const auto& l = layout();
  Header h;
  h.set(l.flags_at, 0x4);
  h.set(*l.self_at, kPage);
  h.set(l.size_at, 0x40000);
  h.set(l.heap_at, kHeap);
  h.set(l.area_start_at, kPage + 0x1140);
  h.set(l.area_end_at, kPage + 0x40000);
  h.set(l.owner_at, kOwner);
  return h;
}

TEST(V8Pages, AConsistentHeaderIsAPage) {
  auto p = decode_v8_page(layout(), kPage, old_page().view(), {});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->size, 0x40000u);
  EXPECT_EQ(p->heap, kHeap);
  EXPECT_EQ(p->owner, kOwner);
  EXPECT_EQ(p->area_start, kPage + 0x1140);
}

TEST(V8Pages, InconsistentHeadersAreNotPages) {
  const auto& l = layout();
  struct Case {
    const char* what;
    uint32_t at;
    uint64_t value;
  };
  const Case cases[] = {
      {"another page's address", *l.self_at, kPage + 0x40000},
      {"a size of 0", l.size_at, 0},
      {"a size that is no whole OS page", l.size_at, 0x40008},
      {"a size past the cap", l.size_at, uint64_t{1} << 40},
      {"an area before the page's first words", l.area_start_at, kPage + 8},
      {"an area that ends past the page", l.area_end_at, kPage + 0x40008},
      {"an area that ends before it starts", l.area_end_at, kPage + 0x1000},
      {"a heap that is no pointer", l.heap_at, 0x21800ea1},
      {"no owner", l.owner_at, 0},
      {"an owner past user space", l.owner_at, uint64_t{1} << 48},
  };
  for (const auto& c : cases) {
    Header h = old_page();
    h.set(c.at, c.value);
    EXPECT_FALSE(decode_v8_page(l, kPage, h.view(), {})) << c.what;
  }
  Header h = old_page();
  EXPECT_FALSE(decode_v8_page(l, kPage, ByteView(h.b.data(), 0x30), {})) << "a header cut short";
}

TEST(V8Pages, AnOwnerMustNameThePagesHeapAndAKnownSpace) {
  const auto& l = layout();
  std::vector<uint8_t> b(0x20, 0);
  auto set = [&b](uint32_t at, uint64_t v, size_t n = 8) { std::memcpy(b.data() + at, &v, n); };
  set(l.space_heap_at, kHeap);
  set(l.space_id_at, 2, 4);
  set(l.space_committed_at, 15253504);
  auto s = decode_v8_space(l, kOwner, kHeap, ByteView(b.data(), b.size()));
  ASSERT_TRUE(s);
  EXPECT_STREQ(s->name->name, "old_space");
  EXPECT_EQ(s->committed, 15253504u);
  EXPECT_FALSE(decode_v8_space(l, kOwner, kHeap + 8, ByteView(b.data(), b.size()))) << "another heap's space";
  set(l.space_id_at, 99, 4);
  EXPECT_FALSE(decode_v8_space(l, kOwner, kHeap, ByteView(b.data(), b.size()))) << "an id this version lacks";
  EXPECT_FALSE(decode_v8_space(l, kOwner, kHeap, ByteView(b.data(), 0x10))) << "bytes cut short";
}

TEST(V8Pages, UnknownVersionsHaveNoLayout) {
  EXPECT_EQ(v8_heap_layout_for(9, 9), nullptr);
  EXPECT_NE(known_v8_heap_layouts().find("12.4"), std::string::npos);
}

}  // namespace

namespace {

// A target's memory as an image: pages of 12.4's layout at 256 KiB-aligned
// addresses of one anonymous mapping, their owners in another.
struct Heap {
  std::shared_ptr<MemoryImage> image = std::make_shared<MemoryImage>();
  std::vector<Mapping> maps;
  static constexpr uint64_t kBase = 0x7f0000000000, kSpaces = 0x5000;

  explicit Heap(int pages, bool with_owner = true, uint32_t space_id = 2, uint64_t flags = 0x4) {
    maps.push_back({kBase, kBase + uint64_t(pages) * 0x40000, 0, "rw-p", 0, ""});
    for (int i = 0; i < pages; ++i) {
      Header h = old_page();
      const uint64_t addr = kBase + uint64_t(i) * 0x40000;
      h.set(layout().flags_at, flags);
      h.set(*layout().self_at, addr);
      h.set(layout().area_start_at, addr + 0x1140);
      h.set(layout().area_end_at, addr + 0x40000);
      h.set(layout().owner_at, kSpaces);
      EXPECT_TRUE(image->add(addr, h.b));
    }
    if (with_owner) {
      std::vector<uint8_t> space(0x20, 0);
      const uint64_t heap = kHeap, id = space_id, committed = uint64_t(pages) * 0x40000;
      std::memcpy(space.data() + layout().space_heap_at, &heap, 8);
      std::memcpy(space.data() + layout().space_id_at, &id, 4);
      std::memcpy(space.data() + layout().space_committed_at, &committed, 8);
      EXPECT_TRUE(image->add(kSpaces, space));
    }
    maps.push_back({kSpaces & ~uint64_t{0xfff}, (kSpaces & ~uint64_t{0xfff}) + 0x1000, 0, "rw-p", 0, "[heap]"});
  }
  V8PageScan scan(const V8PageScanLimits& limits = {}) {
    RemoteMemory mem(image);
    return scan_v8_pages(mem, maps, layout(), Deadline(std::chrono::seconds(5)), limits);
  }
};

TEST(V8PageScan, PagesGroupIntoTheirHeapAndSpace) {
  Heap h(3);
  auto s = h.scan();
  EXPECT_TRUE(s.cut.empty()) << s.cut;
  EXPECT_EQ(s.candidates, 3u);
  ASSERT_EQ(s.heaps.size(), 1u);
  EXPECT_EQ(s.heaps[0].heap, kHeap);
  ASSERT_EQ(s.heaps[0].spaces.size(), 1u);
  EXPECT_STREQ(s.heaps[0].spaces[0].name->name, "old_space");
  EXPECT_EQ(s.heaps[0].spaces[0].pages.size(), 3u);
  EXPECT_EQ(s.heaps[0].spaces[0].committed, 3u * 0x40000);
}

TEST(V8PageScan, PagesWhoseOwnerIsNoSpaceOfTheirHeapAreDropped) {
  Heap h(2, /*with_owner=*/false);
  EXPECT_TRUE(h.scan().heaps.empty());
}

TEST(V8PageScan, EachLimitCutsTheScanAndSaysWhy) {
  Heap h(4);
  V8PageScanLimits candidates;
  candidates.max_candidates = 2;
  auto s = h.scan(candidates);
  EXPECT_NE(s.cut.find("candidate"), std::string::npos) << s.cut;
  EXPECT_EQ(s.candidates, 2u);
  V8PageScanLimits pages;
  pages.max_pages = 3;
  s = h.scan(pages);
  EXPECT_NE(s.cut.find("heap pages"), std::string::npos) << s.cut;
  V8PageScanLimits owners;
  owners.max_owners = 0;
  s = h.scan(owners);
  EXPECT_NE(s.cut.find("owner spaces"), std::string::npos) << s.cut;
  EXPECT_TRUE(s.heaps.empty());
}

TEST(V8PageScan, AnExpiredDeadlineStopsIt) {
  Heap h(2);
  RemoteMemory mem(h.image);
  auto s = scan_v8_pages(mem, h.maps, layout(), Deadline(std::chrono::milliseconds(0)));
  EXPECT_NE(s.cut.find("deadline"), std::string::npos) << s.cut;
}

}  // namespace

// A collection flags the new space's pages otherwise (or frees them) between
// the scan and the end of the walk, and the walk says so, to be done again.
TEST(V8HeapWalk, ACollectionReflaggingTheNewSpacesPagesIsSeen) {
  const auto& l = layout();
  Heap h(2, true, /*new_space=*/1, l.to_page_flag);
  auto s = h.scan();
  ASSERT_EQ(s.heaps.size(), 1u);
  ASSERT_TRUE(s.heaps[0].spaces[0].name->is_new);
  RemoteMemory mem(h.image);
  EXPECT_FALSE(v8_new_pages_reflagged(mem, s.heaps[0], l));
  // The second page, still in the to-semispace, is below the age mark now
  // (moved there whole by a full collection); then it is the one evacuated
  // from.
  Header flipped = old_page();
  const uint64_t second = Heap::kBase + 0x40000;
  flipped.set(l.flags_at, l.to_page_flag | (1u << 18));
  flipped.set(*l.self_at, second);
  flipped.set(l.area_start_at, second + 0x1140);
  flipped.set(l.area_end_at, second + 0x40000);
  flipped.set(l.owner_at, Heap::kSpaces);
  ASSERT_TRUE(h.image->add(second, flipped.b));
  RemoteMemory aged(h.image);
  EXPECT_TRUE(v8_new_pages_reflagged(aged, s.heaps[0], l));
  flipped.set(l.flags_at, l.from_page_flag);
  ASSERT_TRUE(h.image->add(second, flipped.b));
  RemoteMemory after(h.image);
  EXPECT_TRUE(v8_new_pages_reflagged(after, s.heaps[0], l));
  // A page no longer readable (released) counts as a swap too.
  auto gone = std::make_shared<MemoryImage>();
  RemoteMemory none(gone);
  EXPECT_TRUE(v8_new_pages_reflagged(none, s.heaps[0], l));
}
