// The last gasp's wire forms (capture/last_gasp_capture.h, capture_wire.h):
// the plan comes back from a capture process that read a hostile target, and
// the image goes to one as a descriptor: both round-trip exactly, and every
// malformed field or piece is refused, never indexed.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "base/unique_fd.h"
#include "capture/capture_wire.h"
#include "capture/last_gasp_wire.h"

using namespace oomsnap;
using json = nlohmann::json;

namespace {

GoLastGaspPlan sample_plan() {
  GoLastGaspPlan p;
  p.arm = {0x653ad8, 0x6400a0, 0x653b00, 128, 130};
  p.version = *GoVersion::parse("go1.26.1");
  p.load_bias = 0x5500000000;
  p.mappings = {{0x400000, 0x500000, 0, "/app/server", "abc"}};
  return p;
}

LastGaspDecodeRequest sample_request() {
  LastGaspDecodeRequest r;
  r.plan = sample_plan();
  r.identity.pid = 4242;
  r.identity.start_time_ticks = 777;
  r.identity.comm = "server";
  r.walk.ktime_ns = 5;
  r.walk.walk_ns = 310000;
  r.walk.buckets_sent = 175;
  r.walk.buckets_received = 175;
  r.walk.zero_tails = 1;
  r.walk.status = SnapshotStatus::kPartial;
  r.walk.reason = "bucket cap reached after 175 buckets";
  return r;
}

int memfd_with(const std::vector<uint8_t>& bytes) {
  int fd = memfd_create("t", MFD_CLOEXEC);
  EXPECT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  return fd;
}

std::vector<uint8_t> image_bytes(const std::vector<std::pair<uint64_t, uint64_t>>& pieces, uint64_t count,
                                 size_t trailing = 0) {
  std::vector<uint8_t> b = {'O', 'O', 'M', 'S', 'N', 'A', 'P', 'I'};
  auto put = [&b](uint64_t v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + 8);
  };
  put(count);
  for (auto [addr, len] : pieces) {
    put(addr);
    put(len);
    b.insert(b.end(), std::min<uint64_t>(len, 64), 0xab);
  }
  b.insert(b.end(), trailing, 0);
  return b;
}

}  // namespace

TEST(LastGaspWire, ADecodeRequestRoundTrips) {
  CaptureRequest req{4242, CaptureOptions{}, CaptureKind::kLastGaspDecode, sample_request()};
  std::string why;
  std::string line = encode_request(req);
  auto back = decode_request(line.substr(0, line.size() - 1), why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->kind, CaptureKind::kLastGaspDecode);
  ASSERT_TRUE(back->last_gasp);
  const LastGaspDecodeRequest& r = *back->last_gasp;
  EXPECT_EQ(r.identity.pid, 4242);
  EXPECT_EQ(r.identity.start_time_ticks, 777u);
  EXPECT_EQ(r.identity.comm, "server");
  EXPECT_EQ(r.plan.arm.mbuckets, 0x653ad8u);
  EXPECT_EQ(r.plan.arm.record_bytes, 128u);
  EXPECT_EQ(r.plan.version.text, "go1.26.1");
  EXPECT_EQ(r.plan.load_bias, 0x5500000000u);
  ASSERT_EQ(r.plan.mappings.size(), 1u);
  EXPECT_EQ(r.plan.mappings[0].file, "/app/server");
  EXPECT_EQ(r.walk.status, SnapshotStatus::kPartial);
  EXPECT_EQ(r.walk.reason, "bucket cap reached after 175 buckets");
  EXPECT_EQ(r.walk.buckets_sent, 175u);
  EXPECT_EQ(r.walk.zero_tails, 1u);
  EXPECT_EQ(r.walk.pid, 4242);
  EXPECT_LT(line.size(), kMaxRequestLine);

  CaptureRequest plan{17, CaptureOptions{}, CaptureKind::kLastGaspPlan, std::nullopt};
  line = encode_request(plan);
  back = decode_request(line.substr(0, line.size() - 1), why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->kind, CaptureKind::kLastGaspPlan);
  EXPECT_FALSE(back->last_gasp);
}

TEST(LastGaspWire, AReplysPlanRoundTripsAndAHostileOneIsRefused) {
  CaptureReply reply;
  reply.record.emplace();
  reply.record->identity.pid = 17;
  reply.record->result.language = "go";
  reply.record->result.snapshot.set_status(SnapshotStatus::kComplete, "");
  reply.record->process_memory.status = "ok";
  reply.last_gasp_plan = sample_plan();
  std::string why;
  auto back = decode_reply(encode_reply(reply), CaptureOptions{}, why);
  ASSERT_TRUE(back) << why;
  ASSERT_TRUE(back->last_gasp_plan);
  EXPECT_EQ(back->last_gasp_plan->arm.max_stack, 130u);
  EXPECT_EQ(back->last_gasp_plan->mappings[0].build_id, "abc");

  auto refused = [&](auto mutate, const char* what) {
    json j = to_json(sample_plan());
    mutate(j);
    std::string w;
    EXPECT_FALSE(last_gasp_plan_from_json(j, w)) << what;
    EXPECT_FALSE(w.empty()) << what;
  };
  refused([](json& j) { j["record_bytes"] = 257; }, "record past the kernel's cap");
  refused([](json& j) { j["record_bytes"] = 0; }, "no record");
  refused([](json& j) { j["max_stack"] = 100000; }, "stack past the kernel's cap");
  refused([](json& j) { j["mbuckets"] = 0; }, "no list head");
  refused([](json& j) { j["go_version"] = "go1.18.3"; }, "too old");
  refused([](json& j) { j["go_version"] = "python3"; }, "not a version");
  refused([](json& j) { j["mappings"] = json::array({1, 2, 3, 4, 5}); }, "too many mappings");
  refused([](json& j) { j["mappings"] = json::array({{{"start", -1}}}); }, "a malformed mapping");
  refused([](json& j) { j["load_bias"] = "x"; }, "a string bias");

  // A last_gasp object in a request of another kind is refused.
  json req = json::parse(encode_request({17, CaptureOptions{}, CaptureKind::kCapture, sample_request()}));
  EXPECT_FALSE(decode_request(req.dump(), why));
}

TEST(LastGaspWire, TheImageRoundTripsThroughAMemfd) {
  MemoryImage img;
  ASSERT_TRUE(img.add(0x1000, std::vector<uint8_t>(48, 7)));
  ASSERT_TRUE(img.add(0x2000, std::vector<uint8_t>(8, 9)));
  std::string why;
  UniqueFd fd(image_to_memfd(img, why));
  ASSERT_GE(fd.get(), 0) << why;
  EXPECT_EQ(write(fd.get(), "x", 1), -1) << "the image is sealed";
  auto back = image_from_fd(fd.get(), 1 << 20, why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->pieces(), 2u);
  EXPECT_EQ(back->bytes(), 56u);
  uint8_t b = 0;
  ASSERT_TRUE(back->read(0x1000 + 47, &b, 1));
  EXPECT_EQ(b, 7);
  EXPECT_FALSE(image_from_fd(fd.get(), 16, why)) << "over the cap";
  EXPECT_NE(why.find("over the cap"), std::string::npos);
}

TEST(LastGaspWire, AMalformedImageIsRefused) {
  std::string why;
  auto refused = [&](const std::vector<uint8_t>& bytes, const char* what) {
    UniqueFd fd(memfd_with(bytes));
    EXPECT_FALSE(image_from_fd(fd.get(), 1 << 20, why)) << what;
    EXPECT_FALSE(why.empty()) << what;
  };
  refused({'n', 'o', 'p', 'e'}, "no header");
  refused(image_bytes({}, 1u << 30), "a count past what the bytes can hold");
  refused(image_bytes({{0x1000, 1u << 20}}, 1), "a piece larger than a bucket can be");
  refused(image_bytes({{0x1000, 64}}, 1, 5), "bytes after the last piece");
  refused(image_bytes({{UINT64_MAX - 8, 64}}, 1), "a piece that wraps the address space");
  auto short_piece = image_bytes({{0x1000, 64}}, 1);
  short_piece.resize(short_piece.size() - 1);
  refused(short_piece, "a piece cut short");
  refused(image_bytes({{0x1000, 64}, {0x1020, 64}}, 2), "a piece overlapping another");
  UniqueFd ok(memfd_with(image_bytes({{0x1000, 64}}, 1)));
  EXPECT_TRUE(image_from_fd(ok.get(), 1 << 20, why)) << why;
}
