// The command line contract of `oomsnap snapshot` and of every subcommand,
// run as a real process.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "record_schema.h"
#include "test_process.h"

namespace {

struct CliRun {
  int status = -1;
  std::string out, err;
};

CliRun run_oomsnap(const std::string& args) {
  char errpath[] = "/tmp/oomsnap-cli-err-XXXXXX";
  int efd = mkstemp(errpath);
  close(efd);
  std::string cmd = std::string(OOMSNAP_BINARY) + " " + args + " 2>" + errpath;
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  oomsnap_test::read_file(errpath, r.err);
  // Every JSON document the command prints holds to the published schema.
  if (r.status == 0 && !r.out.empty() && r.out[0] == '{') {
    EXPECT_EQ(oomsnap_test::record_schema_errors(r.out, true), "") << args;
  }
  unlink(errpath);
  return r;
}

}  // namespace

TEST(SnapshotCli, BadArgumentsExit2WithMessage) {
  for (const char* args : {"snapshot", "snapshot --pid", "snapshot --pid abc", "snapshot --pid 1 --format xml",
                           "snapshot --pid 1 --max-entries 0", "snapshot --pid 1 --budget-ms -5",
                           "snapshot --pid 1 --bogus", "snapshot --pid 1 --recent-pprof",
                           "snapshot --pid 1 --recent-pprof -", "snapshot --pid 1 --profile cpu",
                           "snapshot --pid 1 --profile", "frobnicate"}) {
    CliRun r = run_oomsnap(args);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_FALSE(r.err.empty()) << args;
    EXPECT_TRUE(r.out.empty()) << args;
  }
}

TEST(SnapshotCli, MissingPidExit1) {
  CliRun r = run_oomsnap("snapshot --pid 999999999");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("no process"), std::string::npos) << r.err;
}

TEST(SnapshotCli, NonGoProcessIsUnknownLanguageExit0) {
  oomsnap_test::Process sleeper({"/bin/sleep", "30"});
  ASSERT_TRUE(sleeper.wait_exec(std::chrono::seconds(10)));
  CliRun r = run_oomsnap("snapshot --pid " + std::to_string(sleeper.pid()));
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["pid"], sleeper.pid());
  EXPECT_EQ(j["language"], "unknown");
  EXPECT_EQ(j["snapshot"]["status"], "unavailable");
  EXPECT_FALSE(j["snapshot"]["reason"].get<std::string>().empty());
  EXPECT_GT(j["process_memory"]["rss_bytes"].get<uint64_t>(), 0u);
  EXPECT_GT(j["start_time_ticks"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["comm"], "sleep");
  // pprof of a non-Go process: nothing to write, exit 1, and no file left behind.
  std::string out = "/tmp/oomsnap-cli-test.pb.gz";
  unlink(out.c_str());
  r = run_oomsnap("snapshot --pid " + std::to_string(sleeper.pid()) + " --format pprof -o " + out);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(access(out.c_str(), F_OK), 0);
  // --recent-pprof of a non-Go process: the JSON is still written, the recent
  // profile is not, exit 1 saying why.
  r = run_oomsnap("snapshot --pid " + std::to_string(sleeper.pid()) + " --recent-pprof " + out);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(nlohmann::json::parse(r.out)["language"], "unknown");
  EXPECT_NE(r.err.find("no recent-allocations profile"), std::string::npos) << r.err;
  EXPECT_NE(access(out.c_str(), F_OK), 0);
}

// -o to a device writes to it, never renames a file over it.
TEST(SnapshotCli, OutputToDevNullKeepsTheDevice) {
  oomsnap_test::Process sleeper({"/bin/sleep", "30"});
  CliRun r = run_oomsnap("snapshot --pid " + std::to_string(sleeper.pid()) + " -o /dev/null");
  EXPECT_EQ(r.status, 0) << r.err;
  struct stat st {};
  ASSERT_EQ(stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null was replaced";
}

// -o to a regular file: the whole record, and no temporary file left behind.
TEST(SnapshotCli, OutputFileIsWholeAndNoTempLeft) {
  oomsnap_test::Process sleeper({"/bin/sleep", "30"});
  std::string dir = "/tmp/oomsnap-cli-out-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  CliRun r = run_oomsnap("snapshot --pid " + std::to_string(sleeper.pid()) + " -o " + dir + "/rec.json");
  EXPECT_EQ(r.status, 0) << r.err;
  std::string text;
  ASSERT_TRUE(oomsnap_test::read_file(dir + "/rec.json", text));
  EXPECT_EQ(nlohmann::json::parse(text)["pid"], sleeper.pid());
  size_t files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);
  std::filesystem::remove_all(dir);
  // An unwritable destination is a clear error, exit 1.
  r = run_oomsnap("snapshot --pid " + std::to_string(sleeper.pid()) + " -o /nonexistent-dir/x.json");
  EXPECT_EQ(r.status, 1);
  EXPECT_FALSE(r.err.empty());
}

// A process may name itself with bytes that are not UTF-8: the snapshot is
// still written (the bad bytes replaced), never an abort.
TEST(SnapshotCli, CommThatIsNotUtf8IsReplacedNotFatal) {
  oomsnap_test::Process named({"/usr/bin/python3", "-c",
                               "import ctypes, sys, time\n"
                               "ctypes.CDLL(None).prctl(15, b'bad\\xff\\xfe', 0, 0, 0)\n"
                               "print('ready', flush=True)\ntime.sleep(60)\n"});
  ASSERT_EQ(named.read_line(std::chrono::seconds(20)), "ready");
  // Both where the capture process encodes the name and where the CLI does.
  for (const char* mode : {"", " --in-process"}) {
    SCOPED_TRACE(mode);
    CliRun r = run_oomsnap("snapshot --pid " + std::to_string(named.pid()) + mode);
    ASSERT_EQ(r.status, 0) << r.err;
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    EXPECT_EQ(j["comm"], "bad\xEF\xBF\xBD\xEF\xBF\xBD");  // U+FFFD twice
    EXPECT_EQ(j["language"], "python");
  }
}

// A Go program whose executable the ELF reader refuses (70,000 section
// headers, over its cap; the kernel runs it all the same, it never reads
// section headers): the snapshot says why the executable was not read, not
// only that no runtime was recognised.
TEST(SnapshotCli, RefusedExecutableSaysWhy) {
  const std::string src = std::string(OOMSNAP_FIXTURES) + "/go/1.26/default/heapfixture";
  if (access(src.c_str(), X_OK) != 0) GTEST_SKIP() << "no fixture at " << src << " (tools/build-go-fixtures.sh)";
  char dir[] = "/tmp/oomsnap-many-shdrs-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string exe = std::string(dir) + "/heapfixture";
  std::filesystem::copy_file(src, exe);
  {
    std::FILE* f = std::fopen(exe.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fseek(f, 0, SEEK_END), 0);
    const uint64_t shoff = (static_cast<uint64_t>(std::ftell(f)) + 7) & ~uint64_t{7};
    const uint64_t n = 70000;
    std::vector<char> shdrs(n * 64, 0);
    std::memcpy(&shdrs[32], &n, 8);  // extended numbering: shdr[0].sh_size is the count
    ASSERT_EQ(std::fseek(f, static_cast<long>(shoff), SEEK_SET), 0);
    ASSERT_EQ(std::fwrite(shdrs.data(), 1, shdrs.size(), f), shdrs.size());
    const uint16_t shnum = 0, shstrndx = 0xffff;  // SHN_XINDEX
    ASSERT_EQ(std::fseek(f, 0x28, SEEK_SET), 0);  // e_shoff
    std::fwrite(&shoff, 8, 1, f);
    ASSERT_EQ(std::fseek(f, 0x3c, SEEK_SET), 0);  // e_shnum, e_shstrndx
    std::fwrite(&shnum, 2, 1, f);
    std::fwrite(&shstrndx, 2, 1, f);
    ASSERT_EQ(std::fclose(f), 0);
  }
  oomsnap_test::Process target({exe, "-rate", "1"});
  ASSERT_NE(target.read_line(std::chrono::seconds(30)).find("\"ready\":true"), std::string::npos);
  CliRun r = run_oomsnap("snapshot --pid " + std::to_string(target.pid()));
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["snapshot"]["status"], "unavailable");
  const std::string reason = j["snapshot"]["reason"];
  EXPECT_NE(reason.find("the executable was not read: "), std::string::npos) << reason;
  EXPECT_NE(reason.find("70000 section headers"), std::string::npos) << reason;
  std::filesystem::remove_all(dir);
}

// Every subcommand reads its command line the same way (CLI11): help on
// stdout with exit 0, `--k=v` as `--k v`, usage errors exit 2 naming the
// option, with the command's usage.
TEST(CliConventions, HelpGoesToStdoutWithExitZero) {
  for (const char* args : {"--help", "-h", "snapshot --help", "show --help", "watch --help", "watch -h"}) {
    CliRun r = run_oomsnap(args);
    EXPECT_EQ(r.status, 0) << args;
    EXPECT_NE(r.out.find("usage: oomsnap"), std::string::npos) << args << ": " << r.out;
    EXPECT_TRUE(r.err.empty()) << args << ": " << r.err;
  }
}

TEST(CliConventions, EqualsFormTakesTheValueAsTheSpacedForm) {
  const std::string self = std::to_string(getpid());
  for (const std::string& form : {"--pid " + self + " --max-entries 2", "--pid=" + self + " --max-entries=2"}) {
    CliRun r = run_oomsnap("snapshot " + form + " --in-process");
    EXPECT_EQ(r.status, 0) << form << ": " << r.err;
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << form << ": " << r.out;
    EXPECT_EQ(j["pid"], getpid()) << form;
  }
  // A value that is not one, in the equals form too, is an error naming the option.
  for (const char* option : {"show --last=0", "watch --bpf-mode=fentry", "watch --log-level=loud",
                             "watch --http-listen=nope", "snapshot --pid=1 --format=xml"}) {
    CliRun r = run_oomsnap(option);
    EXPECT_EQ(r.status, 2) << option;
    const std::string args = option, name = args.substr(args.rfind("--"), args.rfind('=') - args.rfind("--"));
    EXPECT_NE(r.err.find(name + ":"), std::string::npos) << option << ": " << r.err;
    EXPECT_NE(r.err.find("usage: oomsnap"), std::string::npos) << option << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << option;
  }
}

TEST(CliConventions, UsageErrorsNameTheOptionAndExitTwo) {
  struct Case {
    const char *args, *names;
  };
  for (const Case& c : {Case{"snapshot", "--pid"}, Case{"snapshot --pid", "--pid"},
                        Case{"snapshot --pid 1 --bogus", "--bogus"}, Case{"show --container ''", "--container"},
                        Case{"show a.jsonl --config c.toml", "--config"}, Case{"watch --config", "--config"},
                        Case{"watch --frob", "--frob"}, Case{"watch --capture-in-process", "--capture-in-process"}}) {
    CliRun r = run_oomsnap(c.args);
    EXPECT_EQ(r.status, 2) << c.args;
    EXPECT_NE(r.err.find(c.names), std::string::npos) << c.args << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << c.args;
  }
}

// Capturing without the sandbox is a person's choice for one process
// (snapshot), never the agent's: watch refuses the switch, saying where it is.
TEST(CliConventions, CaptureInProcessOnlyInSnapshot) {
  const std::string self = std::to_string(getpid());
  for (const char* flag : {"--in-process", "--capture-in-process"}) {
    CliRun r = run_oomsnap("snapshot --pid " + self + " " + flag);
    EXPECT_EQ(r.status, 0) << flag << ": " << r.err;
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << flag << ": " << r.out;
    EXPECT_EQ(j["pid"], getpid()) << flag;
  }
  for (const char* args : {"watch --capture-in-process", "watch --config /nonexistent --capture-in-process",
                           "watch --capture-in-process=true"}) {
    CliRun r = run_oomsnap(args);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_NE(r.err.find("--capture-in-process is not an option of the agent"), std::string::npos) << args << ": " << r.err;
    EXPECT_NE(r.err.find("oomsnap snapshot --in-process"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("usage: oomsnap watch"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << args;
  }
}

TEST(CliConventions, VersionNamesTheReleaseTheCommitAndTheBpfModes) {
  CliRun r = run_oomsnap("--version");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind("oomsnap 0.", 0), 0u) << r.out;
  // The commit this binary was built from (a clean or dirty checkout's describe).
  EXPECT_NE(r.out.find("\ncommit "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("commit unknown"), std::string::npos) << "built from a git checkout: " << r.out;
  EXPECT_NE(r.out.find("bpf attach modes: raw_tp, tracepoint"), std::string::npos) << r.out;
}
