// V8 page headers and owner spaces as byte images (V8 12.4's layout): what
// is taken for a page and what is not.
#include "node/v8_pages.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

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
