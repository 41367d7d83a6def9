// CPython's own accounting in process_memory.breakdown (issue #24 item 2), as
// `oomsnap snapshot` reports it, on the oldest and newest supported versions
// and on 3.11: ~150 MB of small objects are `heap` (obmalloc's arenas, their
// used pools, plus the objects too large for them), within 15 % of the bytes
// the interpreter's own sys._debugmallocstats() counts in allocated blocks; a
// touched 200 MiB anonymous mmap stays `native`; the kinds sum to VmRSS.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "breakdown_checks.h"
#include "test_process.h"

using namespace std::chrono_literals;
using nlohmann::json;
using oomsnap_test::check_breakdown;
using oomsnap_test::kMiB;
using oomsnap_test::names;
using oomsnap_test::Process;

namespace {

struct PyVersion {
  const char* name;
  const char* rootfs;  // under OOMSNAP_ROOTFS, or "" for the host
  const char* python;
};

// 3.8 and 3.11 as upstream builds them (pyenv: .symtab names obmalloc.c's
// arena table); 3.9 and 3.11 as Debian ships them (stripped: the table is
// found among the globals _PyObject_DebugMallocStats and
// _Py_GetAllocatedBlocks load); 3.14, the newest, as Debian ships it
// (stripped: the table is found through the interpreter state).
const PyVersion kVersions[] = {
    {"pyenv_3_8", "", "/root/.pyenv/versions/3.8.18/bin/python3.8"},
    {"pyenv_3_11", "", "/root/.pyenv/versions/3.11.7/bin/python3.11"},
    {"bullseye_3_9", "bullseye", "/usr/bin/python3.9"},
    {"bookworm_3_11", "", "/usr/bin/python3.11"},
    {"sid_3_14", "sid", "/usr/bin/python3.14"},
};

class PythonBreakdownLive : public ::testing::TestWithParam<PyVersion> {
 protected:
  // The fixture started with `args`, and its JSON line; null when the
  // interpreter is missing (the test fails: these are cached on CI).
  std::unique_ptr<Process> start(const std::vector<std::string>& args, json& line) {
    const PyVersion& v = GetParam();
    const std::string root = *v.rootfs ? std::string(OOMSNAP_ROOTFS) + "/" + v.rootfs : "";
    if (!std::filesystem::exists(root + v.python)) {
      ADD_FAILURE() << root + v.python << " is missing";
      return nullptr;
    }
    std::string src;
    oomsnap_test::read_file(std::string(OOMSNAP_SOURCE_DIR) + "/tests/fixtures/python/arena_heap.py", src);
    std::vector<std::string> argv;
    if (*v.rootfs) argv = {"/usr/sbin/chroot", root};
    argv.insert(argv.end(), {v.python, "-c", src});
    argv.insert(argv.end(), args.begin(), args.end());
    auto p = std::make_unique<Process>(argv);
    line = json::parse(p->read_line(120s), nullptr, false);
    if (line.is_discarded()) {
      ADD_FAILURE() << v.python << " fixture printed no JSON line";
      return nullptr;
    }
    return p;
  }
  // The breakdown in the record of the fixture started with `args`, checked:
  // the kinds sum to VmRSS, `largest` is the largest kind and there is no
  // reason (the arena table was read). Discarded when there is no record.
  json breakdown(const std::vector<std::string>& args, json& line, const std::string& largest) {
    auto p = start(args, line);
    if (!p) return json(json::value_t::discarded);
    const json snap = oomsnap_test::snapshot_of(p->pid());
    if (snap.is_discarded()) return snap;
    const json* b = nullptr;
    EXPECT_EQ(check_breakdown(snap, b), largest) << b->dump(1);
    EXPECT_FALSE(b->contains("reason")) << b->dump(1);
    return *b;
  }
};

}  // namespace

TEST_P(PythonBreakdownLive, SmallObjectsAreHeapAsObmallocCountsThem) {
  json stats;
  const json bd = breakdown({"objects", "150"}, stats, "heap");
  ASSERT_FALSE(bd.is_discarded());
  const json* b = &bd;
  const double truth = stats.at("allocated_blocks").get<double>();
  const double heap = b->at("heap").get<double>();
  EXPECT_NEAR(heap, truth, 0.15 * truth) << b->dump(1);
  uint64_t arenas = 0;
  EXPECT_TRUE(names(*b, "heap", "CPython obmalloc arenas (", &arenas)) << b->dump(1);
  EXPECT_TRUE(names(*b, "heap", "objects outside arenas (malloc)")) << b->dump(1);
  std::printf("[ info ] %s: heap %.1f MiB (arenas' used pools %.1f MiB), interpreter: %.1f MiB in allocated "
              "blocks, %.1f MiB in used pools; heap_free %.1f MiB, native %.1f MiB\n",
              stats.at("version").get<std::string>().c_str(), heap / kMiB, static_cast<double>(arenas) / kMiB,
              truth / kMiB, stats.at("used_pool_bytes").get<double>() / kMiB,
              b->at("heap_free").get<double>() / kMiB, b->at("native").get<double>() / kMiB);
}

TEST_P(PythonBreakdownLive, AnAnonymousMmapStaysNative) {
  json line;
  const json bd = breakdown({"mmap", "200"}, line, "native");
  ASSERT_FALSE(bd.is_discarded());
  const json* b = &bd;
  const double native = b->at("native").get<double>(), truth = 200.0 * kMiB;
  EXPECT_NEAR(native, truth, 0.15 * truth) << b->dump(1);
  EXPECT_TRUE(names(*b, "heap", "CPython obmalloc arenas (")) << b->dump(1);
  std::printf("[ info ] %s: native %.1f MiB of a 200 MiB mmap; heap %.1f MiB, heap_free %.1f MiB\n",
              line.at("version").get<std::string>().c_str(), native / kMiB, b->at("heap").get<double>() / kMiB,
              b->at("heap_free").get<double>() / kMiB);
}

INSTANTIATE_TEST_SUITE_P(Versions, PythonBreakdownLive, ::testing::ValuesIn(kVersions),
                         [](const auto& info) { return std::string(info.param.name); });

// Debian's 3.11 is stripped: obmalloc.c's arena table has no name, and is
// found through the code of the exported functions that read it; the
// objects too large for the arenas are claimed beside it.
TEST(PythonBreakdownLiveStripped, AStrippedInterpretersArenasAreFoundThroughItsExportedReaders) {
  Process p({"/usr/bin/python3.11", "-c", "import time\nx = [bytes(4096) for _ in range(1000)]\nprint('ready', flush=True)\ntime.sleep(120)\n"});
  ASSERT_EQ(p.read_line(30s), "ready");
  json snap = oomsnap_test::snapshot_of(p.pid());
  ASSERT_FALSE(snap.is_discarded());
  const json* b = nullptr;
  check_breakdown(snap, b);
  EXPECT_EQ(b->value("reason", "").find("obmalloc arenas not claimed"), std::string::npos) << b->dump(1);
  EXPECT_TRUE(names(*b, "heap", "CPython obmalloc arenas (")) << b->dump(1);
  // Claimed out of the unnamed anonymous memory and malloc's brk [heap]: the
  // 1,000 bytes objects (4,129 bytes each by sys.getsizeof) are all there,
  // with the interpreter's own objects over 512 bytes (module dicts, code:
  // a few hundred KiB at start).
  uint64_t large = 0;
  EXPECT_TRUE(names(*b, "heap", "objects outside arenas (malloc)", &large)) << b->dump(1);
  const uint64_t truth = 1000u * (4096 + 33);
  EXPECT_GE(large, truth) << b->dump(1);
  EXPECT_LE(large, truth + kMiB) << b->dump(1);
}
