// The V8 object walk on byte images: sizes from maps and lengths, free space
// apart from objects, and every way a crafted run is refused.
#include "node/v8_object_walk.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <vector>

using namespace oomsnap;

namespace {

constexpr uint64_t kBase = 0x10000;
// Map addresses (tagged, as an object's first word holds them).
constexpr uint64_t kObjectMap = 0x5001, kArrayMap = 0x6001, kStringMap = 0x7001, kFreeMap = 0x8001;

struct Image {
  std::vector<uint8_t> bytes;
  uint64_t end() const { return kBase + bytes.size(); }
  void word(uint64_t v) {
    size_t at = bytes.size();
    bytes.resize(at + 8);
    std::memcpy(bytes.data() + at, &v, 8);
  }
  void words(size_t n, uint64_t v = 0) {
    for (size_t i = 0; i < n; ++i) word(v);
  }
  static uint64_t smi(int64_t v) { return static_cast<uint64_t>(v) << 32; }
};

std::map<uint64_t, V8MapInfo> maps() {
  std::map<uint64_t, V8MapInfo> m;
  m[kObjectMap] = V8MapInfo{.instance_type = 1057, .instance_size = 40, .rule = {}, .name = 0, .is_free = false};
  V8MapInfo array{.instance_type = 2, .instance_size = 0, .rule = {}, .name = 1, .is_free = false};
  array.rule = {V8SizeRule::Kind::kLengthTimes, 16, 8, 8, 8, 0};  // FixedArray: Smi length at 8
  m[kArrayMap] = array;
  V8MapInfo str{.instance_type = 8, .instance_size = 0, .rule = {}, .name = 2, .is_free = false};
  str.rule = {V8SizeRule::Kind::kLengthTimes, 16, 12, 4, 1, 0};  // SeqOneByteString: int32 length at 12
  m[kStringMap] = str;
  V8MapInfo free_space{.instance_type = 99, .instance_size = 0, .rule = {}, .name = 3, .is_free = true};
  free_space.rule = {V8SizeRule::Kind::kLengthTimes, 0, 8, 8, 1, 0};  // FreeSpace: its size as a Smi
  m[kFreeMap] = free_space;
  return m;
}

V8RunWalk walk(const Image& img, V8WalkTally& t) {
  auto m = maps();
  return walk_v8_run(ByteView(img.bytes.data(), img.bytes.size()), kBase, kBase, img.end(),
                     [&m](uint64_t w) -> const V8MapInfo* {
                       auto it = m.find(w);
                       return it == m.end() ? nullptr : &it->second;
                     },
                     t);
}

TEST(V8ObjectWalk, FixedAndVariableSizesAndFreeSpace) {
  Image img;
  img.word(kObjectMap);  // a 40-byte object
  img.words(4);
  img.word(kArrayMap);  // FixedArray of 3: 16 + 24
  img.word(Image::smi(3));
  img.words(3);
  img.word(kStringMap);  // "hello": 16 + 5, rounded to 24
  img.word(uint64_t{5} << 32);
  img.word(0x6f6c6c6568);
  img.word(kFreeMap);  // 32 bytes of free space
  img.word(Image::smi(32));
  img.words(2);
  V8WalkTally t;
  auto r = walk(img, t);
  EXPECT_TRUE(r.complete) << r.why;
  EXPECT_EQ(t.objects, 3u);
  EXPECT_EQ(t.bytes, 40u + 40u + 24u);
  EXPECT_EQ(t.free_bytes, 32u);
  ASSERT_GE(t.by_name.size(), 3u);
  EXPECT_EQ(t.by_name[1].bytes, 40u);
  EXPECT_EQ(t.by_name[2].objects, 1u);
}

TEST(V8ObjectWalk, AWordThatIsNoMapStopsTheRunWhereItIs) {
  Image img;
  img.word(kObjectMap);
  img.words(4);
  img.word(0xdead);  // not a map
  img.words(3);
  V8WalkTally t;
  auto r = walk(img, t);
  EXPECT_FALSE(r.complete);
  EXPECT_EQ(r.stopped_at, kBase + 40);
  EXPECT_NE(r.why.find("not a map"), std::string::npos) << r.why;
  EXPECT_EQ(t.objects, 1u) << "what came before is kept";
}

TEST(V8ObjectWalk, CraftedLengthsAreRefused) {
  for (uint64_t length_word : {Image::smi(-1), Image::smi(1) | 1, Image::smi(0x7fffffff), Image::smi(100)}) {
    Image img;
    img.word(kArrayMap);
    img.word(length_word);
    img.words(2);
    V8WalkTally t;
    auto r = walk(img, t);
    EXPECT_FALSE(r.complete) << std::hex << length_word;
    EXPECT_EQ(r.stopped_at, kBase);
    EXPECT_EQ(t.objects, 0u);
  }
  Image neg_string;
  neg_string.word(kStringMap);
  neg_string.word(uint64_t{0x80000000} << 32);  // int32 length -2^31
  V8WalkTally t;
  EXPECT_FALSE(walk(neg_string, t).complete);
}

TEST(V8ObjectWalk, ARunEndingInsideAnObjectOrOutsideTheBytesIsRefused) {
  Image img;
  img.word(kObjectMap);
  img.words(2);  // 24 of its 40 bytes
  V8WalkTally t;
  auto r = walk(img, t);
  EXPECT_FALSE(r.complete);
  EXPECT_NE(r.why.find("past the run"), std::string::npos) << r.why;

  auto m = maps();
  auto lookup = [&m](uint64_t w) -> const V8MapInfo* { return m.count(w) ? &m[w] : nullptr; };
  r = walk_v8_run(ByteView(img.bytes.data(), img.bytes.size()), kBase, kBase, kBase + 4096, lookup, t);
  EXPECT_FALSE(r.complete);
  EXPECT_NE(r.why.find("outside the bytes"), std::string::npos) << r.why;
  r = walk_v8_run(ByteView(img.bytes.data(), img.bytes.size()), kBase, kBase - 8, kBase + 8, lookup, t);
  EXPECT_FALSE(r.complete);
}

TEST(V8ObjectWalk, AnUnknownKindStopsTheWalkInsteadOfGuessing) {
  std::map<uint64_t, V8MapInfo> m{{0x9001, V8MapInfo{.instance_type = 7, .instance_size = 0, .rule = {}, .name = 0,
                                                     .is_free = false}}};
  Image img;
  img.word(0x9001);
  img.words(3);
  V8WalkTally t;
  auto r = walk_v8_run(ByteView(img.bytes.data(), img.bytes.size()), kBase, kBase, img.end(),
                       [&m](uint64_t w) -> const V8MapInfo* { return m.count(w) ? &m[w] : nullptr; }, t);
  EXPECT_FALSE(r.complete);
  EXPECT_NE(r.why.find("cannot be read"), std::string::npos) << r.why;
}

TEST(V8ObjectWalk, AHashAboveTheLengthIsMaskedOff) {
  V8MapInfo property_array{.instance_type = 3, .instance_size = 0, .rule = {}, .name = 0, .is_free = false};
  property_array.rule = {V8SizeRule::Kind::kLengthTimes, 16, 8, 8, 8, 10};
  std::vector<uint8_t> b(64, 0);
  const uint64_t w = Image::smi((12345 << 10) | 3);  // hash 12345, length 3
  std::memcpy(b.data() + 8, &w, 8);
  EXPECT_EQ(v8_object_size(property_array, ByteView(b.data(), b.size())), 40u);
}

}  // namespace

// A background thread's allocation area no path leads to: its top is followed
// by stale objects, whose chain overruns into the live ones after it. The
// walk resumes at the first live object, however many stale maps come first,
// and judges each word once.
TEST(V8ObjectWalk, ResumesAfterAStaleAreaAtTheFirstWordThatWalksToTheEnd) {
  Image img;
  img.word(kObjectMap);  // a live object, then the area's top
  img.words(4);
  const uint64_t gap = img.end();
  img.word(0);
  for (int i = 0; i < 199; ++i) {  // stale 40-byte objects
    img.word(kObjectMap);
    img.words(4);
  }
  img.word(kObjectMap);  // the last stale one, cut short by the live data
  img.words(2);
  const uint64_t live = img.end();
  img.word(kArrayMap);  // FixedArray of 3, where the stale chain lands inside
  img.word(Image::smi(3));
  img.words(3);
  img.word(kObjectMap);
  img.words(4);
  auto m = maps();
  size_t lookups = 0;
  auto lookup = [&](uint64_t w) -> const V8MapInfo* {
    ++lookups;
    auto it = m.find(w);
    return it == m.end() ? nullptr : &it->second;
  };
  auto no_remote = [](const V8MapInfo&, uint64_t, ByteView) -> std::optional<uint64_t> { return std::nullopt; };
  const ByteView bytes(img.bytes.data(), img.bytes.size());
  V8WalkTally t;
  auto r = walk_v8_run(bytes, kBase, kBase, img.end(), lookup, t, no_remote);
  ASSERT_FALSE(r.complete);
  EXPECT_EQ(r.stopped_at, gap);
  lookups = 0;
  auto at = find_v8_resume(bytes, kBase, gap, img.end(), lookup, no_remote);
  ASSERT_TRUE(at);
  EXPECT_EQ(*at, live);
  EXPECT_LE(lookups, (img.end() - gap) / 8) << "a word judged more than once";
}

TEST(V8ObjectWalk, NoResumeWhereNothingWalksToTheEnd) {
  Image img;
  img.word(kObjectMap);
  img.words(4);
  const uint64_t gap = img.end();
  img.words(3);
  img.word(kArrayMap);  // a FixedArray whose length runs past the end
  img.word(Image::smi(100));
  img.words(8);
  auto m = maps();
  auto lookup = [&](uint64_t w) -> const V8MapInfo* {
    auto it = m.find(w);
    return it == m.end() ? nullptr : &it->second;
  };
  auto no_remote = [](const V8MapInfo&, uint64_t, ByteView) -> std::optional<uint64_t> { return std::nullopt; };
  const ByteView bytes(img.bytes.data(), img.bytes.size());
  EXPECT_FALSE(find_v8_resume(bytes, kBase, gap, img.end(), lookup, no_remote));
  EXPECT_FALSE(find_v8_resume(bytes, kBase, gap, gap, lookup, no_remote)) << "an empty run";
  EXPECT_FALSE(find_v8_resume(bytes, kBase, gap, img.end() + 8, lookup, no_remote)) << "past the bytes";
}

// An ArrayBuffer's backing store counts once however many buffers name it
// (views, a pool's slices), and a forged length beyond any address space
// not at all.
TEST(V8ObjectWalk, ArrayBufferStoresCountOnceAndForgedLengthsNot) {
  constexpr uint64_t kBufferMap = 0x9001;
  auto m = maps();
  V8MapInfo buffer{.instance_type = 1059, .instance_size = 48, .rule = {}, .name = 4, .is_free = false};
  buffer.buffer_length_at = 16, buffer.buffer_store_at = 24;
  m[kBufferMap] = buffer;
  Image img;
  auto add = [&](uint64_t length, uint64_t store) {
    img.word(kBufferMap);
    img.word(0);
    img.word(length);
    img.word(store);
    img.words(2);
  };
  add(1 << 20, 0x7f0000100000);
  add(8192, 0x7f0000200000);
  add(8192, 0x7f0000200000);  // the same pool
  add(uint64_t{1} << 60, 0x7f0000300000);  // forged
  add(4096, 0);  // detached: no store
  V8WalkTally t;
  auto r = walk_v8_run(ByteView(img.bytes.data(), img.bytes.size()), kBase, kBase, img.end(),
                       [&m](uint64_t w) -> const V8MapInfo* {
                         auto it = m.find(w);
                         return it == m.end() ? nullptr : &it->second;
                       },
                       t);
  ASSERT_TRUE(r.complete) << r.why;
  EXPECT_EQ(t.objects, 5u);
  EXPECT_EQ(t.buffers, 2u);
  EXPECT_EQ(t.buffer_bytes, (1u << 20) + 8192u);
}
