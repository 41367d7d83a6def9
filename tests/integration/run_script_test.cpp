// tools/run.sh, the main job: its stdout carries the agent's records and
// nothing else (a log pipeline reads it as JSON lines); every setup and build
// message goes to stderr, on the default path and with --demo.
//
// Two runs, each bounded by timeout(1):
//  - a copy of run.sh in a scratch tree whose setup and build steps and agent
//    are stubs that write to both stdout and stderr (seconds, both paths):
//    only the agent's line may reach stdout, the steps' lines reach stderr;
//  - the real run.sh (the real setup, build and agent; this build directory
//    as OOMSNAP_BUILD, so the build step finds oomsnap up to date) with a
//    config that does not exist: the agent refuses it at once, and stdout is
//    empty.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace fs = std::filesystem;

namespace {

const std::string kSource = OOMSNAP_SOURCE_DIR;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_script(const fs::path& p, const std::string& body) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << "#!/bin/sh\n" << body;
  fs::permissions(p, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                         fs::perms::others_read | fs::perms::others_exec);
}

struct ScriptRun {
  int status = -1;  // exit code; 124: timed out
  std::string out, err;
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// `env... script args...` under timeout(1) (SIGKILL 5 s after the TERM), stdin
// from /dev/null, stdout and stderr into files of `dir`.
ScriptRun run_script(const fs::path& dir, const std::string& env, const std::string& script, const std::string& args,
        int timeout_s) {
  const fs::path out = dir / "stdout", err = dir / "stderr";
  const std::string cmd = "env " + env + " timeout -k 5 " + std::to_string(timeout_s) + " " + quote(script) + " " +
                          args + " </dev/null >" + quote(out) + " 2>" + quote(err);
  const int st = std::system(cmd.c_str());
  ScriptRun r;
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

class RunScript : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "tools/run.sh runs as root";
    char tmpl[] = "/tmp/oomsnap-run-sh-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  // A copy of tools/run.sh in dir_/tree, every step it runs a stub that
  // writes "<step> on stdout" to stdout and "<step> on stderr" to stderr; the
  // agent stub says ready on stderr, writes one record on stdout and exits
  // 3 (default path: exec'd, so run.sh's status) after `agent_secs`.
  fs::path stub_tree(int agent_secs) {
    const fs::path t = dir_ / "tree";
    fs::create_directories(t / "tools");
    fs::copy_file(kSource + "/tools/run.sh", t / "tools/run.sh");
    fs::permissions(t / "tools/run.sh", fs::perms::owner_all);
    for (const char* step : {"setup.sh", "build.sh", "fetch-go-toolchains.sh", "build-go-fixtures.sh"})
      write_script(t / "tools" / step, std::string("echo '") + step + " on stdout'\necho '" + step +
                                           " on stderr' >&2\n");
    write_script(t / "build/oomsnap", "echo \"agent ready: $*\" >&2\necho '{\"record\":\"stub\"}'\nsleep " +
                                          std::to_string(agent_secs) + "\nexit 3\n");
    // --demo's leaker: exits at once.
    write_script(dir_ / "cache/fixtures/go/1.26/default/heapfixture", "exit 0\n");
    return t;
  }
  std::string stub_env(const fs::path& t) const {
    return "OOMSNAP_BUILD=" + quote((t / "build").string()) + " OOMSNAP_CACHE=" + quote((dir_ / "cache").string());
  }
  fs::path dir_;
};

}  // namespace

TEST_F(RunScript, SetupMessagesGoToStderrNotStdout) {
  const fs::path t = stub_tree(0);
  ScriptRun r = run_script(dir_, stub_env(t), (t / "tools/run.sh").string(), "--config /nonexistent", 60);
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_EQ(r.out, "{\"record\":\"stub\"}\n") << "stdout must hold the agent's records only";
  // What the steps print is still shown, on stderr (build.sh's stdout is
  // discarded, as before).
  for (const char* line : {"setup.sh on stdout", "setup.sh on stderr", "build.sh on stderr",
                           "agent ready: watch --config /nonexistent"})
    EXPECT_NE(r.err.find(line), std::string::npos) << line << " missing from stderr:\n" << r.err;
  EXPECT_EQ(r.err.find("fetch-go-toolchains.sh"), std::string::npos) << "no Go toolchain without --demo";
}

TEST_F(RunScript, DemoSetupMessagesGoToStderrNotStdout) {
  if (!fs::is_directory("/sys/fs/cgroup/memory")) GTEST_SKIP() << "--demo needs the cgroup v1 memory controller";
  const fs::path t = stub_tree(1);
  ScriptRun r = run_script(dir_, stub_env(t), (t / "tools/run.sh").string(), "--demo --config /nonexistent", 60);
  EXPECT_NE(r.status, 124) << "timed out:\n" << r.err;
  EXPECT_EQ(r.out, "{\"record\":\"stub\"}\n") << "stdout must hold the agent's records only";
  for (const char* line : {"setup.sh on stdout", "fetch-go-toolchains.sh on stdout",
                           "fetch-go-toolchains.sh on stderr", "build-go-fixtures.sh on stderr",
                           "agent ready: watch --config /nonexistent", "# demo: a Go program leaking"})
    EXPECT_NE(r.err.find(line), std::string::npos) << line << " missing from stderr:\n" << r.err;
}

// The real scripts, warm (packages installed, this build directory built):
// `go toolchains cached`, cmake and the like must not reach stdout.
TEST_F(RunScript, RealRunWritesNothingButRecordsToStdout) {
  const std::string build = fs::path(OOMSNAP_BINARY).parent_path().string();
  if (!fs::exists(build + "/CMakeCache.txt")) GTEST_SKIP() << "oomsnap is not at the top of a build directory";
  ScriptRun r = run_script(dir_, "OOMSNAP_BUILD=" + quote(build), kSource + "/tools/run.sh", "--config /nonexistent", 240);
  ASSERT_NE(r.status, 124) << "tools/run.sh did not finish in 240 s (is the build directory up to date?):\n"
                           << r.err;
  EXPECT_NE(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "") << "stdout must hold the agent's records only; stderr:\n" << r.err;
  EXPECT_NE(r.err.find("/nonexistent"), std::string::npos) << r.err;
}

// `tools/test.sh --quick`: which tests a change selects (QUICK_PRINT prints
// the ctest regexes instead of building and running them).
TEST_F(RunScript, QuickTestsSelectTheSuitesOfWhatTheChangeTouched) {
  auto selected = [&](const std::string& files) {
    ScriptRun r = run_script(dir_, "QUICK_PRINT=1 QUICK_FILES=" + quote(files), kSource + "/tools/test.sh", "--quick", 30);
    EXPECT_EQ(r.status, 0) << r.err;
    return r.out;
  };
  // A changed test file: the suites it defines; a source folder: its suites.
  EXPECT_EQ(selected("tests/unit/agent/incident/incident_book_test.cpp userspace/python/python_heap.cpp"),
            "IncidentBook|Python\nexcluding: AgentCgroupV2\n");
  // The guest-kernel tests only when their own file changed.
  EXPECT_EQ(selected("tests/integration/agent_v2vm_test.cpp"), "AgentCgroupV2\nexcluding: ^$\n");
  // The build itself: everything.
  EXPECT_EQ(selected("userspace/CMakeLists.txt"), ".\nexcluding: AgentCgroupV2\n");
  // Prose selects nothing but the unit tests.
  EXPECT_EQ(selected("README.md"), "\nexcluding: AgentCgroupV2\n");
}
