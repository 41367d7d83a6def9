// The pipe protocol between the agent and its capture process: what the
// child writes round-trips exactly, and anything malformed or oversized is an
// error naming what is wrong, never a crash.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <type_traits>
#include <variant>

#include <nlohmann/json.hpp>

#include "capture/capture_wire.h"

using namespace oomsnap;

namespace {

CaptureRecord sample_record() {
  CaptureRecord r;
  r.identity.pid = 4242;
  r.identity.start_time_ticks = 987654;
  r.identity.comm = "server";
  r.process_memory.status = "ok";
  r.process_memory.rss_bytes = 123 << 20;
  r.process_memory.swap_bytes = 0;
  r.result.language = "go";
  Snapshot& s = r.result.snapshot;
  s.runtime_version = "go1.26.10";
  s.set_status(SnapshotStatus::kPartial, "deadline after 3 of 4 buckets");
  s.duration_ms = 12.5;
  s.sample_rate = 524288;
  s.output_truncated = true;
  s.read_syscalls = 7;
  s.bytes_read = 1 << 20;
  s.scope = "gc_tracked";
  s.coverage = 0.75;
  s.totals = {{"objects", 10}, {"bytes", 4096}};
  s.entries.push_back({"allocation_site", "main.leak", 1 << 20, 16, {"main.leak", "main.main"}, 65536});
  s.entries.push_back({"allocation_site", "main.other", 4096, 1, {"main.other"}, std::nullopt});
  r.result.pprof = std::string("\x1f\x8b binary \0 bytes", 18);
  return r;
}

std::string frame_with_json(const std::string& text, const std::string& blob = "") {
  std::string f = "OOMSNAPR";
  for (uint32_t v : {static_cast<uint32_t>(text.size()), static_cast<uint32_t>(blob.size())})
    for (int i = 0; i < 4; ++i) f.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return f + text + blob;
}

CaptureOptions bounds(size_t max_entries = 10) {
  CaptureOptions o;
  o.max_entries = max_entries;
  return o;
}

}  // namespace

TEST(CaptureWire, RecordRoundTripsExactly) {
  CaptureReply in;
  in.record = sample_record();
  std::string why;
  auto out = decode_reply(encode_reply(in), bounds(), why);
  ASSERT_TRUE(out) << why;
  ASSERT_EQ(out->kind, CaptureReply::Kind::kRecord);
  // What the JSON record says is what was sent.
  EXPECT_EQ(to_json(*out->record), to_json(*in.record));
  EXPECT_EQ(out->record->result.pprof, in.record->result.pprof);
  EXPECT_TRUE(out->record->process_failure.empty());
}

TEST(CaptureWire, StalledAndNoTargetRoundTrip) {
  std::string why;
  CaptureReply st;
  st.kind = CaptureReply::Kind::kStalled;
  st.message = "target read stalled: process_vm_readv at 0x1000";
  st.language = "python";
  st.stalled_addr = 0x7f4011bb6000;
  auto a = decode_reply(encode_reply(st), bounds(), why);
  ASSERT_TRUE(a) << why;
  EXPECT_EQ(a->kind, CaptureReply::Kind::kStalled);
  EXPECT_EQ(a->message, st.message);
  EXPECT_EQ(a->language, "python");
  EXPECT_EQ(a->stalled_addr, 0x7f4011bb6000u);
  CaptureReply nt;
  nt.kind = CaptureReply::Kind::kNoTarget;
  nt.message = "no process with pid 7";
  auto b = decode_reply(encode_reply(nt), bounds(), why);
  ASSERT_TRUE(b) << why;
  EXPECT_EQ(b->kind, CaptureReply::Kind::kNoTarget);
  EXPECT_EQ(b->message, nt.message);
}

TEST(CaptureWire, RequestRoundTrips) {
  CaptureRequest r;
  r.pid = 77;
  r.options.max_entries = 3;
  r.options.budget = std::chrono::milliseconds(1500);
  r.options.want_pprof = true;
  r.options.max_objects = 5;
  r.options.stall_after = std::chrono::milliseconds(250);
  r.options.skip_ranges = {{0x1000, 0x2000}, {0x7f0000000000, 0x7f0000004000}};
  std::string why;
  auto back = decode_request(encode_request(r), why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->pid, 77);
  EXPECT_EQ(back->options.max_entries, 3u);
  EXPECT_EQ(back->options.budget.count(), 1500);
  EXPECT_TRUE(back->options.want_pprof);
  EXPECT_EQ(back->options.max_objects, 5u);
  EXPECT_EQ(back->options.stall_after.count(), 250);
  ASSERT_EQ(back->options.skip_ranges.size(), 2u);
  EXPECT_EQ(back->options.skip_ranges[1].start, 0x7f0000000000u);
  EXPECT_EQ(back->options.skip_ranges[1].end, 0x7f0000004000u);
  auto bad_skip = nlohmann::json::parse(encode_request(r));
  bad_skip["skip"][0] = {5, 5};  // empty range
  EXPECT_FALSE(decode_request(bad_skip.dump(), why));
  bad_skip["skip"] = std::vector<std::vector<uint64_t>>(65, {1, 2});  // too many
  EXPECT_FALSE(decode_request(bad_skip.dump(), why));
  EXPECT_FALSE(decode_request("{\"pid\":0}", why));
  EXPECT_FALSE(decode_request("not json", why));
}

TEST(CaptureWire, MalformedFramesAreErrors) {
  std::string why;
  const std::string good = encode_reply(CaptureReply{CaptureReply::Kind::kRecord, sample_record(), "", ""});
  EXPECT_FALSE(decode_reply("", bounds(), why));
  EXPECT_EQ(why, "no result");
  EXPECT_FALSE(decode_reply("OOMSNAP", bounds(), why));
  EXPECT_FALSE(decode_reply("XXXXXXXX" + good.substr(8), bounds(), why));
  EXPECT_NE(why.find("frame header"), std::string::npos);
  EXPECT_FALSE(decode_reply(good.substr(0, good.size() - 1), bounds(), why));  // cut short
  EXPECT_NE(why.find("does not match its header"), std::string::npos) << why;
  EXPECT_FALSE(decode_reply(good + "x", bounds(), why));  // trailing bytes
  EXPECT_FALSE(decode_reply(frame_with_json("{not json"), bounds(), why));
  EXPECT_EQ(why.rfind("result: not JSON (at byte ", 0), 0u) << why;
  EXPECT_FALSE(decode_reply(frame_with_json("[1,2]"), bounds(), why));
  EXPECT_FALSE(decode_reply(frame_with_json("{\"kind\":\"other\"}"), bounds(), why));
  EXPECT_FALSE(decode_reply(frame_with_json("{\"kind\":\"stalled\",\"message\":\"x\",\"language\":\"go\"}", "blob"),
                            bounds(), why));
}

TEST(CaptureWire, HostileRecordFieldsAreRefused) {
  auto with = [](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = {{"kind", "record"}, {"record", to_json(sample_record())}, {"pprof", false}};
    edit(j);
    return frame_with_json(j.dump());
  };
  std::string why;
  EXPECT_TRUE(decode_reply(with([](auto&) {}), bounds(), why)) << why;
  EXPECT_FALSE(decode_reply(with([](auto& j) { j["record"]["pid"] = -1; }), bounds(), why));
  EXPECT_FALSE(decode_reply(with([](auto& j) { j["record"]["pid"] = "12"; }), bounds(), why));
  EXPECT_FALSE(decode_reply(with([](auto& j) { j["record"]["language"] = "cobol"; }), bounds(), why));
  EXPECT_FALSE(decode_reply(with([](auto& j) { j["record"]["snapshot"]["status"] = "great"; }), bounds(), why));
  EXPECT_FALSE(decode_reply(with([](auto& j) { j["record"]["snapshot"]["entries"][0]["bytes"] = -5; }), bounds(), why));
  EXPECT_FALSE(decode_reply(with([](auto& j) { j["record"]["snapshot"]["entries"][0]["kind"] = "x"; }), bounds(), why));
  EXPECT_FALSE(decode_reply(with([](auto& j) { j["record"]["snapshot"]["entries"][0]["stack"] = 3; }), bounds(), why));
  EXPECT_FALSE(decode_reply(with([](auto& j) { j["record"].erase("snapshot"); }), bounds(), why));
  EXPECT_NE(why.find("missing snapshot"), std::string::npos) << why;
  // More entries than were asked for, an over-long name, too many frames.
  EXPECT_FALSE(decode_reply(with([](auto&) {}), bounds(1), why));
  EXPECT_NE(why.find("at most 1"), std::string::npos) << why;
  EXPECT_FALSE(decode_reply(
      with([](auto& j) { j["record"]["snapshot"]["entries"][0]["name"] = std::string(100000, 'n'); }), bounds(), why));
  EXPECT_FALSE(decode_reply(with([](auto& j) {
                              j["record"]["snapshot"]["entries"][0]["stack"] = std::vector<std::string>(9000, "f");
                            }),
                            bounds(), why));
  EXPECT_FALSE(decode_reply(with([](auto& j) { j["record"]["snapshot"]["totals"]["x"] = "y"; }), bounds(), why));
  // The only source is the last gasp's.
  EXPECT_TRUE(decode_reply(with([](auto& j) { j["record"]["snapshot"]["source"] = "last_gasp"; }), bounds(), why))
      << why;
  EXPECT_FALSE(decode_reply(with([](auto& j) { j["record"]["snapshot"]["source"] = "psychic"; }), bounds(), why));
  EXPECT_NE(why.find("unknown source"), std::string::npos) << why;
}

// snapshot.recent (Go) crosses the pipe with the record, bounded like the
// entries, and its pprof file rides in the blob after the heap profile.
TEST(CaptureWire, RecentRoundTripsAndIsBounded) {
  CaptureRecord rec = sample_record();
  SnapshotRecent recent;
  recent.bytes = 48000;
  recent.objects = 1000;
  recent.entries.push_back({"allocation_site", "main.allocRecent", 48000, 1000,
                            {"main.allocRecent", "main.main"}, 48});
  rec.result.snapshot.recent = recent;
  rec.result.recent_pprof = std::string("\x1f\x8b recent \0", 11);
  std::string why;
  auto out = decode_reply(encode_reply(CaptureReply{CaptureReply::Kind::kRecord, rec, "", ""}), bounds(), why);
  ASSERT_TRUE(out) << why;
  EXPECT_EQ(to_json(*out->record), to_json(rec));
  ASSERT_TRUE(out->record->result.snapshot.recent);
  EXPECT_EQ(out->record->result.snapshot.recent->objects, 1000u);
  EXPECT_EQ(out->record->result.snapshot.recent->entries.at(0).stack.size(), 2u);
  EXPECT_EQ(out->record->result.pprof, rec.result.pprof);
  EXPECT_EQ(out->record->result.recent_pprof, rec.result.recent_pprof);
  // The recent profile alone (JSON output with --recent-pprof).
  rec.result.pprof.reset();
  out = decode_reply(encode_reply(CaptureReply{CaptureReply::Kind::kRecord, rec, "", ""}), bounds(), why);
  ASSERT_TRUE(out) << why;
  EXPECT_FALSE(out->record->result.pprof);
  EXPECT_EQ(out->record->result.recent_pprof, rec.result.recent_pprof);
  // Without recent: absent, not empty.
  rec.result.snapshot.recent.reset();
  rec.result.recent_pprof.reset();
  out = decode_reply(encode_reply(CaptureReply{CaptureReply::Kind::kRecord, rec, "", ""}), bounds(), why);
  ASSERT_TRUE(out) << why;
  EXPECT_FALSE(out->record->result.snapshot.recent);
  EXPECT_FALSE(to_json(out->record->result.snapshot).contains("recent"));

  auto with = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& blob = "") {
    CaptureRecord r = sample_record();
    r.result.snapshot.recent = recent;
    nlohmann::json j = {{"kind", "record"}, {"record", to_json(r)}, {"pprof", false}};
    edit(j);
    return frame_with_json(j.dump(), blob);
  };
  EXPECT_TRUE(decode_reply(with([](auto&) {}), bounds(), why)) << why;
  auto rj = [](nlohmann::json& j) -> nlohmann::json& { return j["record"]["snapshot"]["recent"]; };
  EXPECT_FALSE(decode_reply(with([&](auto& j) { rj(j) = 5; }), bounds(), why));
  EXPECT_FALSE(decode_reply(with([&](auto& j) { rj(j)["bytes"] = -1; }), bounds(), why));
  EXPECT_FALSE(decode_reply(with([&](auto& j) { rj(j).erase("objects"); }), bounds(), why));
  EXPECT_FALSE(decode_reply(with([&](auto& j) { rj(j).erase("entries"); }), bounds(), why));
  EXPECT_FALSE(decode_reply(with([&](auto& j) { rj(j)["entries"][0]["kind"] = "object_type"; }), bounds(), why));
  EXPECT_FALSE(decode_reply(with([&](auto& j) { rj(j)["entries"][0]["stack"] = std::vector<std::string>(9000, "f"); }),
                            bounds(), why));
  EXPECT_FALSE(decode_reply(with([&](auto& j) {
                              auto one = rj(j)["entries"][0];
                              rj(j)["entries"] = std::vector<nlohmann::json>(11, one);
                            }),
                            bounds(10), why));
  EXPECT_NE(why.find("recent.entries is not an array of at most 10"), std::string::npos) << why;
  // A recent profile length the blob cannot hold, or a blob nobody declared.
  EXPECT_FALSE(decode_reply(with([](auto& j) { j["recent_pprof_bytes"] = 5; }, "abc"), bounds(), why));
  EXPECT_NE(why.find("recent_pprof_bytes"), std::string::npos) << why;
  EXPECT_FALSE(decode_reply(with([](auto& j) { j["recent_pprof_bytes"] = 2; }, "abc"), bounds(), why));
  EXPECT_FALSE(decode_reply(with([](auto& j) { j["recent_pprof_bytes"] = "3"; }, "abc"), bounds(), why));
  EXPECT_TRUE(decode_reply(with([](auto& j) { j["recent_pprof_bytes"] = 3; }, "abc"), bounds(), why)) << why;
}

namespace {

// A record with a goroutine census (snapshot.goroutines).
CaptureRecord census_record(size_t groups) {
  CaptureRecord r = sample_record();
  GoroutineCensus c;
  c.status = SnapshotStatus::kPartial;
  c.reason = "3 parked goroutines changed state while being read";
  c.total = 16003;
  c.system = 5;
  c.by_state = {{"runnable", 1}, {"running", 2}, {"waiting", 16000}};
  for (size_t i = 0; i < groups; ++i)
    c.groups.push_back({10000 - i, "waiting", "chan receive",
                        {"runtime.gopark", "runtime.chanrecv", "main.parkChanRecv"}, "main.runGoroutines",
                        "main.parkChanRecv"});
  c.groups.push_back({2, "running", "", {}, "main.runGoroutines", "main.spin"});
  c.groups_truncated = true;
  c.stacks_reread = 12;
  r.result.snapshot.goroutines = std::move(c);
  return r;
}

}  // namespace

TEST(CaptureWire, GoroutineCensusRoundTrips) {
  CaptureReply in;
  in.record = census_record(3);
  std::string why;
  auto out = decode_reply(encode_reply(in), bounds(), why);
  ASSERT_TRUE(out) << why;
  ASSERT_TRUE(out->record->result.snapshot.goroutines);
  const GoroutineCensus& c = *out->record->result.snapshot.goroutines;
  EXPECT_EQ(c.total, 16003u);
  EXPECT_EQ(c.system, 5u);
  ASSERT_EQ(c.groups.size(), 4u);
  EXPECT_EQ(c.groups[0].stack.back(), "main.parkChanRecv");
  EXPECT_TRUE(c.groups[3].stack.empty());
  EXPECT_EQ(c.groups[3].start, "main.spin");
  EXPECT_EQ(c.stacks_reread, 12u);
  EXPECT_EQ(to_json(*out->record), to_json(*in.record));
}

TEST(CaptureWire, GoroutineCensusIsBounded) {
  std::string why;
  // More groups than the agent asked for (its 5): refused, naming the field.
  {
    CaptureReply in;
    in.record = census_record(6);
    CaptureOptions b = bounds();
    b.max_goroutine_groups = 5;
    EXPECT_FALSE(decode_reply(encode_reply(in), b, why));
    EXPECT_NE(why.find("groups"), std::string::npos) << why;
  }
  auto tamper = [&](auto edit) {
    CaptureReply in;
    in.record = census_record(1);
    nlohmann::json j = to_json(*in.record);
    edit(j["snapshot"]["goroutines"]);
    nlohmann::json reply = {{"kind", "record"}, {"record", j}, {"pprof", false}};
    return decode_reply(frame_with_json(reply.dump()), bounds(), why).has_value();
  };
  EXPECT_FALSE(tamper([](nlohmann::json& g) { g["total"] = -1; }));
  EXPECT_FALSE(tamper([](nlohmann::json& g) { g["stacks_reread"] = "many"; }));
  EXPECT_FALSE(tamper([](nlohmann::json& g) { g.erase("stacks_reread"); }));
  EXPECT_FALSE(tamper([](nlohmann::json& g) { g["status"] = "fine"; }));
  EXPECT_FALSE(tamper([](nlohmann::json& g) { g["groups"][0]["stack"] = nlohmann::json::array({1, 2}); }));
  EXPECT_FALSE(tamper([](nlohmann::json& g) {
    g["groups"][0]["stack"] = std::vector<std::string>(bounds().max_stack_depth * 8 + 1, "f");
  }));
  EXPECT_FALSE(tamper([](nlohmann::json& g) { g["groups"][0]["created_by"] = std::string(70000, 'x'); }));
  EXPECT_FALSE(tamper([](nlohmann::json& g) {
    for (int i = 0; i < 65; ++i) g["by_state"]["s" + std::to_string(i)] = 1;
  }));
  EXPECT_FALSE(tamper([](nlohmann::json& g) { g.erase("groups"); }));
  EXPECT_TRUE(tamper([](nlohmann::json&) {}));
}

TEST(CaptureWire, RequestCarriesGoroutineOptions) {
  CaptureRequest r;
  r.pid = 77;
  r.options.max_goroutine_groups = 5;
  r.options.max_goroutines = 1234;
  r.options.profile = ProfileKind::kGoroutine;
  std::string why;
  auto out = decode_request(encode_request(r), why);
  ASSERT_TRUE(out) << why;
  EXPECT_EQ(out->options.max_goroutine_groups, 5u);
  EXPECT_EQ(out->options.max_goroutines, 1234u);
  EXPECT_EQ(out->options.profile, ProfileKind::kGoroutine);
}

// snapshot.block / snapshot.mutex (oomsnap snapshot --profile block|mutex)
// round-trip, and are held to the same bounds as the heap entries.
TEST(CaptureWire, ContentionProfilesRoundTripBounded) {
  CaptureRecord rec = sample_record();
  ContentionProfile block;
  block.status = SnapshotStatus::kComplete;
  block.rate = 3;
  block.cycles_per_second = 2'096'034'721;
  block.total_contentions = 15;
  block.total_delay_ns = 308'000'000;
  block.records = 4;
  block.entries.push_back({"runtime.chanrecv1", {"runtime.chanrecv1", "main.blockOnChan"}, 8, 176'227'157});
  block.entries.push_back({"sync.(*Mutex).Lock", {"sync.(*Mutex).Lock", "main.contendMutex"}, 6, 131'874'038});
  block.entries.push_back({"sync.(*WaitGroup).Wait", {"sync.(*WaitGroup).Wait", "main.main"}, 1, 409'034});
  ContentionProfile mutex;
  mutex.status = SnapshotStatus::kUnavailable;
  mutex.reason = "runtime.mutexprofilerate is 0 and there are no mutex profile buckets";
  mutex.rate = 0;
  rec.result.snapshot.block = block;
  rec.result.snapshot.mutex = mutex;
  CaptureReply in;
  in.record = rec;
  std::string why;
  auto out = decode_reply(encode_reply(in), bounds(), why);
  ASSERT_TRUE(out) << why;
  EXPECT_EQ(to_json(*out->record), to_json(*in.record));
  ASSERT_TRUE(out->record->result.snapshot.block);
  EXPECT_EQ(out->record->result.snapshot.block->entries[0].stack[1], "main.blockOnChan");
  EXPECT_EQ(out->record->result.snapshot.block->cycles_per_second, 2'096'034'721);
  EXPECT_EQ(out->record->result.snapshot.mutex->status, SnapshotStatus::kUnavailable);
  // The default heap snapshot has neither.
  EXPECT_FALSE(to_json(sample_record().result.snapshot).contains("block"));

  auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = {{"kind", "record"}, {"record", to_json(rec)}, {"pprof", false}};
    edit(j);
    return frame_with_json(j.dump());
  };
  EXPECT_TRUE(decode_reply(with([](auto&) {}), bounds(), why)) << why;
  EXPECT_FALSE(decode_reply(with([](auto&) {}), bounds(2), why));  // two heap entries fit, three block ones do not
  EXPECT_NE(why.find("snapshot.block"), std::string::npos) << why;
  EXPECT_FALSE(decode_reply(with([](auto& j) { j["record"]["snapshot"]["block"]["status"] = "fine"; }), bounds(), why));
  EXPECT_FALSE(decode_reply(with([](auto& j) { j["record"]["snapshot"]["block"]["entries"][0]["delay_ns"] = "x"; }),
                            bounds(), why));
  EXPECT_FALSE(decode_reply(with([](auto& j) { j["record"]["snapshot"]["mutex"]["entries"] = 3; }), bounds(), why));
  EXPECT_FALSE(decode_reply(with([](auto& j) {
                              j["record"]["snapshot"]["block"]["entries"][0]["stack"] =
                                  std::vector<std::string>(9000, "f");
                            }),
                            bounds(), why));
  EXPECT_FALSE(decode_reply(
      with([](auto& j) { j["record"]["snapshot"]["block"]["entries"][0]["name"] = std::string(100000, 'n'); }),
      bounds(), why));
  EXPECT_FALSE(decode_reply(with([](auto& j) { j["record"]["snapshot"]["block"].erase("entries"); }), bounds(), why));
}

TEST(CaptureWire, RequestCarriesTheProfileKind) {
  CaptureRequest r;
  r.pid = 9;
  for (ProfileKind k : {ProfileKind::kHeap, ProfileKind::kBlock, ProfileKind::kMutex}) {
    r.options.profile = k;
    std::string why;
    auto back = decode_request(encode_request(r), why);
    ASSERT_TRUE(back) << why;
    EXPECT_EQ(back->options.profile, k);
  }
  auto j = nlohmann::json::parse(encode_request(r));
  j["profile"] = "cpu";
  std::string why;
  EXPECT_FALSE(decode_request(j.dump(), why));
  EXPECT_NE(why.find("unknown profile"), std::string::npos) << why;
}

// The option table drives the request both ways: every row, set to a value
// no default has, comes back; every row is required on the wire; names are
// unique. A field added to CaptureOptions without a row is not sent, and
// this is where its row goes.
TEST(CaptureWire, EveryOptionInTheTableRoundTripsAndIsRequired) {
  CaptureRequest r;
  r.pid = 4242;
  uint64_t n = 1000;
  for (const CaptureOptionField& field : kCaptureOptionFields) {
    std::visit(
        [&](auto member) {
          auto& v = r.options.*member;
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::chrono::milliseconds>) v = std::chrono::milliseconds(++n);
          else if constexpr (std::is_same_v<T, ProfileKind>) v = ProfileKind::kMutex;
          else if constexpr (std::is_same_v<T, bool>) v = !v;
          else v = ++n;
        },
        field.member);
  }
  std::string why;
  auto back = decode_request(encode_request(r), why);
  ASSERT_TRUE(back) << why;
  std::set<std::string> names;
  for (const CaptureOptionField& field : kCaptureOptionFields) {
    EXPECT_TRUE(names.insert(field.wire_name).second) << "two rows named " << field.wire_name;
    std::visit([&](auto member) { EXPECT_EQ(back->options.*member, r.options.*member) << field.wire_name; },
               field.member);
    auto j = nlohmann::json::parse(encode_request(r));
    ASSERT_TRUE(j.contains(field.wire_name)) << field.wire_name;
    j.erase(field.wire_name);
    EXPECT_FALSE(decode_request(j.dump(), why)) << field.wire_name << " missing was taken";
    EXPECT_NE(why.find(field.wire_name), std::string::npos) << why;
  }
  // What the request carries is the table, pid and skip: nothing else.
  EXPECT_EQ(nlohmann::json::parse(encode_request(r)).size(), std::size(kCaptureOptionFields) + 2);
}

namespace {

// How decode_reply ended in a child process whose address space may grow by
// at most `headroom` bytes beyond what it held at the start.
enum class Bounded { kRefused = 0, kDecoded = 1, kOutOfMemory = 3, kCrashed = 4 };

Bounded decode_within(const std::string& frame, const CaptureOptions& b, size_t headroom) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::ifstream status("/proc/self/status");
    std::string line;
    size_t vm_kib = 0;
    while (std::getline(status, line))
      if (line.rfind("VmSize:", 0) == 0) vm_kib = std::stoull(line.substr(7));
    const rlimit limit{vm_kib * 1024 + headroom, vm_kib * 1024 + headroom};
    if (vm_kib == 0 || setrlimit(RLIMIT_AS, &limit) != 0) _exit(5);
    try {
      std::string why;
      _exit(decode_reply(frame, b, why) ? 1 : 0);
    } catch (const std::bad_alloc&) {
      _exit(3);
    }
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return Bounded::kCrashed;
  return static_cast<Bounded>(WEXITSTATUS(st));
}

// A record frame whose snapshot.entries (or, with key, another field of the
// snapshot) is the given text.
std::string frame_around(const std::string& text, const char* key = "entries") {
  nlohmann::json j = {{"kind", "record"}, {"record", to_json(sample_record())}, {"pprof", false}};
  j["record"]["snapshot"][key] = "@@";
  std::string s = j.dump();
  s.replace(s.find("\"@@\""), 4, text);
  return frame_with_json(s);
}

std::string repeated(const std::string& open, const std::string& item, const std::string& close, size_t bytes) {
  std::string s = open;
  while (s.size() < bytes) s += item + ",";
  s.back() = close.empty() ? ' ' : close[0];
  return s;
}

}  // namespace

// A capture process a target has taken over can send any 4 MiB: decoded as
// one tree, these cost the agent 65 to 151 MiB. Streamed, each costs its
// size or is refused early; an honest 50,000-type histogram still decodes.
TEST(CaptureWire, CraftedResultsDecodeWithinABoundedHeap) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan reserves its shadow as address space, so RLIMIT_AS cannot bound it; the plain build runs this";
#endif
  constexpr size_t kText = 4 << 20, kHeadroom = 32 << 20;
  const std::string deep = std::string(kText / 2, '[') + std::string(kText / 2, ']');
  const std::string empty_objects = repeated("[", "{}", "]", kText);
  const std::string zeros = repeated("[", "0", "]", kText);
  const std::string empty_strings = repeated("[", "\"\"", "]", kText);
  std::string many_keys = "{";
  for (size_t i = 0; many_keys.size() < kText; ++i) many_keys += "\"k" + std::to_string(i) + "\":0,";
  many_keys.back() = '}';
  const std::string entry = R"({"kind":"allocation_site","name":"","bytes":1,"objects":1,"average_bytes":1,"stack":)";
  const std::string deep_stacks = repeated("[", entry + repeated("[", "\"\"", "]", 24000) + "}", "]", kText);
  struct Case {
    const char* what;
    std::string frame;
  } cases[] = {
      {"entries of empty objects", frame_around(empty_objects)},
      {"entries of zeros", frame_around(zeros)},
      {"an unknown key holding empty objects", frame_around(empty_objects, "junk")},
      {"an unknown key holding empty strings", frame_around(empty_strings, "junk")},
      {"an object of 400,000 keys", frame_around(many_keys, "totals")},
      {"2 Mi nested arrays", frame_around(deep, "junk")},
      {"stacks of 8,000 empty frames", frame_around(deep_stacks)},
  };
  for (const Case& c : cases) EXPECT_EQ(decode_within(c.frame, bounds(), kHeadroom), Bounded::kRefused) << c.what;

  CaptureReply honest;
  honest.record = sample_record();
  honest.record->result.language = "python";
  honest.record->result.pprof.reset();
  auto& entries = honest.record->result.snapshot.entries;
  entries.clear();
  for (int i = 0; i < 50000; ++i)
    entries.push_back({"object_type", "module.Type" + std::to_string(i), 56, 1, {}, std::nullopt});
  EXPECT_EQ(decode_within(encode_reply(honest), bounds(50000), kHeadroom), Bounded::kDecoded);
}
