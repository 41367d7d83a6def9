// memory.stat in one vocabulary: v1's hierarchical total_* keys and v2's
// keys mapped to the same kinds, from the text each kernel writes.
#include <gtest/gtest.h>

#include <string>

#include "agent/cgroup/memory_stat.h"

using namespace oomsnap;

namespace {

// A v1 memcg with a child (this machine's 6.18 kernel's layout): the
// cgroup's own keys count only its own pages, the total_* ones the subtree.
const char* kV1 =
    "cache 4096\nrss 8192\nrss_huge 0\nshmem 0\nmapped_file 0\ndirty 0\nwriteback 0\n"
    "workingset_refault_anon 0\nswap 0\npgpgin 67231\npgfault 126787\n"
    "inactive_anon 8192\nactive_anon 0\ninactive_file 4096\nactive_file 0\nunevictable 0\n"
    "hierarchical_memory_limit 268435456\nhierarchical_memsw_limit 9223372036854771712\n"
    "total_cache 31072256\ntotal_rss 201326592\ntotal_rss_huge 0\ntotal_shmem 25165824\n"
    "total_mapped_file 311296\ntotal_dirty 229376\ntotal_writeback 4096\ntotal_swap 1048576\n"
    "total_pgpgin 67231\ntotal_pgfault 126787\ntotal_inactive_anon 190000000\ntotal_active_anon 11326592\n"
    "total_inactive_file 19578880\ntotal_active_file 11493376\ntotal_unevictable 0\n";

// A v2 memcg on 6.1 (has "kernel") and on 5.10 (does not).
const char* kV2 =
    "anon 104857600\nfile 52428800\nkernel 3145728\nkernel_stack 262144\npagetables 524288\n"
    "sec_pagetables 0\npercpu 1024\nsock 0\nvmalloc 0\nshmem 20971520\nzswap 0\nfile_mapped 1048576\n"
    "file_dirty 8192\nfile_writeback 0\nswapcached 0\nanon_thp 0\ninactive_anon 100000000\n"
    "active_anon 4857600\ninactive_file 30000000\nactive_file 22428800\nunevictable 0\n"
    "slab_reclaimable 1000000\nslab_unreclaimable 1000000\nslab 2000000\npgfault 5000\n";
const char* kV2Kernel510 =
    "anon 1000\nfile 2000\nkernel_stack 16384\npercpu 512\nsock 4096\nshmem 0\nfile_mapped 0\n"
    "file_dirty 0\nfile_writeback 0\nslab 65536\n";

}  // namespace

TEST(MemoryStat, V1UsesTheSubtreesTotals) {
  MemoryStat s = parse_memory_stat(1, kV1, 5u << 20, std::nullopt);
  EXPECT_TRUE(s.error.empty());
  EXPECT_EQ(s.bytes.at("anon"), 201326592u);
  EXPECT_EQ(s.bytes.at("file"), 31072256u);
  EXPECT_EQ(s.bytes.at("shmem"), 25165824u);
  EXPECT_EQ(s.bytes.at("file_mapped"), 311296u);
  EXPECT_EQ(s.bytes.at("file_dirty"), 229376u);
  EXPECT_EQ(s.bytes.at("file_writeback"), 4096u);
  EXPECT_EQ(s.bytes.at("swap"), 1048576u);
  EXPECT_EQ(s.bytes.at("inactive_anon"), 190000000u);
  EXPECT_EQ(s.bytes.at("active_file"), 11493376u);
  EXPECT_EQ(s.bytes.at("kernel"), 5u << 20);  // memory.kmem.usage_in_bytes
  // Every key the kernel wrote, as it wrote it.
  EXPECT_EQ(s.raw.at("rss"), 8192u);
  EXPECT_EQ(s.raw.at("total_pgfault"), 126787u);
  EXPECT_EQ(s.raw.size(), 33u);
}

TEST(MemoryStat, V1WithoutHierarchyUsesTheCgroupsOwnKeys) {
  MemoryStat s = parse_memory_stat(1, "cache 4096\nrss 8192\nshmem 0\nswap 0\n", std::nullopt, std::nullopt);
  EXPECT_EQ(s.bytes.at("anon"), 8192u);
  EXPECT_EQ(s.bytes.at("file"), 4096u);
  EXPECT_EQ(s.bytes.at("shmem"), 0u);
  EXPECT_FALSE(s.bytes.count("kernel"));  // no kmem counter: not reported, not 0
}

TEST(MemoryStat, V2KeysAndSwapFromItsOwnFile) {
  MemoryStat s = parse_memory_stat(2, kV2, std::nullopt, 7u << 20);
  EXPECT_EQ(s.bytes.at("anon"), 104857600u);
  EXPECT_EQ(s.bytes.at("file"), 52428800u);
  EXPECT_EQ(s.bytes.at("shmem"), 20971520u);
  EXPECT_EQ(s.bytes.at("kernel"), 3145728u);
  EXPECT_EQ(s.bytes.at("file_mapped"), 1048576u);
  EXPECT_EQ(s.bytes.at("file_dirty"), 8192u);
  EXPECT_EQ(s.bytes.at("swap"), 7u << 20);  // memory.swap.current
  EXPECT_EQ(s.bytes.at("active_anon"), 4857600u);
  EXPECT_EQ(s.raw.at("pgfault"), 5000u);
}

TEST(MemoryStat, V2BeforeTheKernelKeySumsItsParts) {
  MemoryStat s = parse_memory_stat(2, kV2Kernel510, std::nullopt, std::nullopt);
  EXPECT_EQ(s.bytes.at("kernel"), 16384u + 512 + 4096 + 65536);
  EXPECT_FALSE(s.bytes.count("swap"));  // no swap controller: absent
}

TEST(MemoryStat, BothVersionsNameTheSameKinds) {
  auto kinds = [](const MemoryStat& s) {
    std::string k;
    for (const auto& [name, v] : s.bytes) k += name + " ";
    return k;
  };
  EXPECT_EQ(kinds(parse_memory_stat(1, kV1, 1, std::nullopt)), kinds(parse_memory_stat(2, kV2, std::nullopt, 1)));
}

TEST(MemoryStat, RawKeysAreBoundedAndOddLinesSkipped) {
  std::string text = "anon 1\nnot-a-number x\nlonely\n" + std::string(100, 'k') + " 5\n";
  for (int i = 0; i < 1000; ++i) text += "key" + std::to_string(i) + " " + std::to_string(i) + "\n";
  MemoryStat s = parse_memory_stat(2, text, std::nullopt, std::nullopt);
  EXPECT_EQ(s.raw.size(), MemoryStat::kMaxRawKeys);
  EXPECT_TRUE(s.raw_truncated);
  EXPECT_EQ(s.bytes.at("anon"), 1u);
  EXPECT_FALSE(s.raw.count("not-a-number"));
  EXPECT_FALSE(s.raw.count(std::string(100, 'k')));
  EXPECT_EQ(to_json(s)["raw_truncated"], true);
}

TEST(MemoryStat, JsonHasTheKindsTheRawKeysOrTheError) {
  auto j = to_json(parse_memory_stat(2, kV2, std::nullopt, std::nullopt));
  EXPECT_EQ(j["anon"], 104857600u);
  EXPECT_EQ(j["raw"]["slab"], 2000000u);
  EXPECT_FALSE(j.contains("error"));
  CgroupFs none;
  auto e = to_json(read_memory_stat(none, "/x"));
  EXPECT_FALSE(e["error"].get<std::string>().empty());
  EXPECT_FALSE(e.contains("raw"));
}
