// The test binaries start no process unless a test asks for one. ctest runs
// every test in a process of its own (~1,600 of them), so whatever a static
// object does at start-up or at exit is paid that many times: a javac run by
// a static object's destructor once cost each integration test ~0.8 s and the
// suite ~7 minutes. Each binary here runs with a filter that matches no test,
// in a pids cgroup that allows one task: any fork it attempts fails and is
// counted in pids.events.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// This process's pids cgroup directory on a v1 pids hierarchy, if mounted.
std::optional<std::string> own_pids_cgroup() {
  std::istringstream mounts(slurp("/proc/self/mountinfo"));
  std::string mount_point;
  for (std::string line; std::getline(mounts, line);) {
    // ... mount_point ... - cgroup cgroup rw,pids
    const auto dash = line.find(" - cgroup ");
    if (dash == std::string::npos) continue;
    const std::string opts = line.substr(line.rfind(' ') + 1);
    if (("," + opts + ",").find(",pids,") == std::string::npos) continue;
    std::istringstream fields(line);
    std::string f;
    for (int i = 0; i < 5 && fields >> f; ++i) mount_point = f;
    break;
  }
  if (mount_point.empty()) return std::nullopt;
  std::istringstream groups(slurp("/proc/self/cgroup"));
  for (std::string line; std::getline(groups, line);) {
    // 8:pids:/some/path
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    if (("," + line.substr(a + 1, b - a - 1) + ",").find(",pids,") == std::string::npos) continue;
    const std::string rel = line.substr(b + 1);
    return mount_point + (rel == "/" ? "" : rel);
  }
  return std::nullopt;
}

uint64_t forks_refused(const std::string& dir) {
  std::istringstream events(slurp(dir + "/pids.events"));
  for (std::string key; events >> key;) {
    uint64_t n = 0;
    events >> n;
    if (key == "max") return n;
  }
  return 0;
}

// `binary` run with no test selected inside a pids cgroup of one task: its
// exit status and how many forks it attempted.
struct StartupRun {
  int status = -1;
  uint64_t forks = 0;
};

StartupRun run_selecting_no_test(const std::string& cgroup_dir, const std::string& binary) {
  StartupRun r;
  const pid_t pid = fork();
  if (pid == 0) {
    std::ofstream(cgroup_dir + "/cgroup.procs") << getpid() << std::flush;
    const char* argv[] = {binary.c_str(), "--gtest_filter=NoTestHasThisName.AtAll", nullptr};
    execv(binary.c_str(), const_cast<char**>(argv));
    _exit(127);
  }
  int st = 0;
  if (pid > 0 && waitpid(pid, &st, 0) == pid) r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.forks = forks_refused(cgroup_dir);
  return r;
}

TEST(TestBinaries, StartNoProcessWhenNoTestRuns) {
  const auto own = own_pids_cgroup();
  ASSERT_TRUE(own) << "no v1 pids cgroup hierarchy in /proc/self/mountinfo";
  const std::string integration_tests = std::filesystem::read_symlink("/proc/self/exe");
  for (const std::string& binary : {integration_tests, std::string(OOMSNAP_UNIT_TESTS)}) {
    const std::string dir = *own + "/oomsnap-test-startup-" + std::to_string(getpid());
    ASSERT_EQ(mkdir(dir.c_str(), 0755), 0) << dir;
    std::ofstream(dir + "/pids.max") << "1" << std::flush;
    const StartupRun run = run_selecting_no_test(dir, binary);
    for (int i = 0; i < 100 && rmdir(dir.c_str()) != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(run.status, 0) << binary;
    EXPECT_EQ(run.forks, 0u) << binary << " tried to start a process with no test selected: a static object's "
                                          "constructor or destructor does a test's work";
  }
}

}  // namespace
