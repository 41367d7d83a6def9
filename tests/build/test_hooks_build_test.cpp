// The shipped oomsnap holds no test hook (userspace/cli/test_hooks.h): not the
// code that reads them and not their names, which a `strings` of the binary
// would show. oomsnap-test-hooks, built from the same sources with the hooks,
// holds every name: the search finds what it is looking for.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

namespace {

std::string bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Each variable read by cli/test_hooks.cpp's hook variant.
const char* const kHookNames[] = {"OOMSNAP_TEST_STALL_LOOP_ON_SIGUSR2", "OOMSNAP_CAPTURE_HELPER",
                                  "OOMSNAP_TEST_CAPTURE_IN_PROCESS", "OOMSNAP_TEST_CONFINEMENT_PROBE_PID",
                                  "OOMSNAP_TEST_KMSG_PATH"};

}  // namespace

TEST(TestHooksBuild, ShippedBinaryHoldsNoHookName) {
  const std::string shipped = bytes_of(OOMSNAP_BINARY);
  ASSERT_GT(shipped.size(), 1u << 20) << OOMSNAP_BINARY;
  for (const char* name : kHookNames) EXPECT_EQ(shipped.find(name), std::string::npos) << name << " in " OOMSNAP_BINARY;
}

TEST(TestHooksBuild, TestHooksBinaryHoldsEveryHookName) {
  const std::string hooked = bytes_of(OOMSNAP_TEST_HOOKS_BINARY);
  ASSERT_GT(hooked.size(), 1u << 20) << OOMSNAP_TEST_HOOKS_BINARY;
  for (const char* name : kHookNames)
    EXPECT_NE(hooked.find(name), std::string::npos) << name << " not in " OOMSNAP_TEST_HOOKS_BINARY;
}
