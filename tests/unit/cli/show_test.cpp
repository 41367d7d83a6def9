// `oomsnap show`: agent records rendered as text. Golden files under
// tests/golden/show/: NAME.jsonl (records as the agent writes them) and
// NAME.txt (the exact text expected). After a deliberate change of the text,
// rewrite the .txt files with
//   OOMSNAP_UPDATE_GOLDEN=1 build/tests/unit_tests --gtest_filter='*ShowGolden.*:ShowMemoryBar.*'
// and read the diff before committing it.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/record_text.h"
#include "cli/show_command.h"
#include "cli/terminal_text.h"
#include "temp_tree.h"

using namespace oomsnap;
using nlohmann::json;

namespace {

const std::string kGolden = std::string(OOMSNAP_SOURCE_DIR) + "/tests/golden/show/";

// Every kind of record the agent writes, one golden pair each.
const std::vector<std::string> kGoldenNames = {
    "go_collected",   "python_collected", "java_collected",           "java_partial",
    "failed_capture", "group_kill",       "oom_kill_without_snapshot", "process_exit",
    "go_recent",      "go_goroutines",    "explained",                "oom_kill_kernel_report",
    "node_collected"};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f) << "cannot read " << path;
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct Shown {
  int rc = -1;
  std::string out, err;
};

Shown show(const std::vector<std::string>& args, const std::string& stdin_text = "", bool terminal = false) {
  std::istringstream in(stdin_text);
  std::ostringstream out, err;
  Shown r;
  r.rc = run_show_command(args, in, out, err, terminal);
  r.out = out.str();
  r.err = err.str();
  return r;
}

// Nothing a terminal would act on: no C0 control but '\n', no DEL, no C1
// control (U+0080..U+009F, encoded C2 80..C2 9F), no bidi override.
void expect_terminal_safe(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    ASSERT_TRUE(c >= 0x20 || c == '\n') << "control byte " << int(c) << " at " << i;
    ASSERT_NE(c, 0x7F) << "DEL at " << i;
    if (c == 0xC2 && i + 1 < s.size()) {
      const auto d = static_cast<unsigned char>(s[i + 1]);
      ASSERT_FALSE(d >= 0x80 && d <= 0x9F) << "C1 control at " << i;
    }
  }
  EXPECT_EQ(s.find("\xE2\x80\xAE"), std::string::npos) << "U+202E right-to-left override";
}

}  // namespace

// ------------------------------------------------------------ golden files

class ShowGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ShowGolden, RendersExactly) {
  const std::string in = kGolden + GetParam() + ".jsonl", want = kGolden + GetParam() + ".txt";
  Shown r = show({in});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  if (std::getenv("OOMSNAP_UPDATE_GOLDEN")) {
    std::ofstream(want, std::ios::binary | std::ios::trunc) << r.out;
    GTEST_SKIP() << "rewrote " << want;
  }
  EXPECT_EQ(r.out, slurp(want)) << "got:\n" << r.out;
  expect_terminal_safe(r.out);
}

INSTANTIATE_TEST_SUITE_P(EveryRecordKind, ShowGolden, ::testing::ValuesIn(kGoldenNames),
                         [](const auto& info) { return info.param; });

// Where the memory went leads each incident, before the heap detail: block
// characters on a terminal (explained.terminal.txt), ASCII elsewhere
// (explained.txt, above).
TEST(ShowMemoryBar, LeadsWithBlocksOnATerminal) {
  const std::string want = kGolden + "explained.terminal.txt";
  Shown r = show({kGolden + "explained.jsonl"}, "", /*terminal=*/true);
  EXPECT_EQ(r.rc, 0) << r.err;
  if (std::getenv("OOMSNAP_UPDATE_GOLDEN")) {
    std::ofstream(want, std::ios::binary | std::ios::trunc) << r.out;
    GTEST_SKIP() << "rewrote " << want;
  }
  EXPECT_EQ(r.out, slurp(want)) << "got:\n" << r.out;
  expect_terminal_safe(r.out);
  const std::string ascii = show({kGolden + "explained.jsonl"}).out;
  EXPECT_EQ(ascii.substr(ascii.find('\n') + 1, 7), "memory ") << ascii;
  EXPECT_LT(ascii.find("memory "), ascii.find("snapshot ")) << ascii;
  EXPECT_TRUE(std::all_of(ascii.begin(), ascii.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }));
}

// The golden inputs are the agent's own shape: every line is a record.
TEST(ShowGoldenInputs, EveryLineIsAnAgentRecord) {
  for (const auto& name : kGoldenNames) {
    std::istringstream in(slurp(kGolden + name + ".jsonl"));
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      ++n;
      EXPECT_TRUE(is_agent_record(json::parse(line))) << name << ":" << n;
    }
    EXPECT_GT(n, 0) << name;
  }
}

// ------------------------------------------------------ selecting records

TEST(ShowSelect, StdinReadsLikeAFile) {
  Shown r = show({"-"}, slurp(kGolden + "go_collected.jsonl"));
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, slurp(kGolden + "go_collected.txt"));
}

TEST(ShowSelect, LastKeepsTheLastNRecords) {
  const std::string all = slurp(kGolden + "go_collected.jsonl") + slurp(kGolden + "python_collected.jsonl") +
                          slurp(kGolden + "process_exit.jsonl");  // 4 records, the last two exits
  Shown r = show({"-", "--last", "2"}, all);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, slurp(kGolden + "process_exit.txt"));

  // More than there are: all of them, in order.
  r = show({"--last", "100", "-"}, slurp(kGolden + "java_collected.jsonl") + slurp(kGolden + "java_partial.jsonl"));
  EXPECT_EQ(r.out, slurp(kGolden + "java_collected.txt") + "\n" + slurp(kGolden + "java_partial.txt"));
}

TEST(ShowSelect, ContainerMatchesCgroupPathPodAndContainerName) {
  std::string all;
  for (const auto& name : kGoldenNames) all += slurp(kGolden + name + ".jsonl");

  // Pod name: both Java records.
  Shown r = show({"-", "--container", "invoicer-"}, all);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, slurp(kGolden + "java_collected.txt") + "\n" + slurp(kGolden + "java_partial.txt"));
  // Cgroup path: the docker container only.
  r = show({"-", "--container", "/docker/"}, all);
  EXPECT_EQ(r.out, slurp(kGolden + "python_collected.txt"));
  // Container name ("jvm" is in no path or pod name), with --last after the filter.
  r = show({"-", "--container", "jvm", "--last", "1"}, all);
  EXPECT_EQ(r.out, slurp(kGolden + "java_partial.txt"));
  // The pod namespace is not matched ("billing" is only there).
  r = show({"-", "--container", "billing"}, all);
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "oomsnap show: no records with a container matching 'billing'\n");
}

// The agent's store: [storage] Path of the config, rotated files oldest first.
TEST(ShowSelect, DefaultInputIsTheStoreOldestFirst) {
  oomsnap_test::TempTree t;
  t.write("oomsnap.toml", "[storage]\nPath = \"" + t.root + "/store\"\n");
  t.write("store/oomsnap.jsonl.2", slurp(kGolden + "java_collected.jsonl"));
  t.write("store/oomsnap.jsonl.1", slurp(kGolden + "java_partial.jsonl"));
  t.write("store/oomsnap.jsonl", slurp(kGolden + "python_collected.jsonl"));
  Shown r = show({"--config", t.root + "/oomsnap.toml"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, slurp(kGolden + "java_collected.txt") + "\n" + slurp(kGolden + "java_partial.txt") + "\n" +
                       slurp(kGolden + "python_collected.txt"));

  r = show({"--config", t.root + "/oomsnap.toml", "--last", "1"});
  EXPECT_EQ(r.out, slurp(kGolden + "python_collected.txt"));

  // No store at all: the error names the file.
  t.write("empty.toml", "[storage]\nPath = \"" + t.root + "/nothing\"\nLocalFile = false\n");
  r = show({"--config", t.root + "/empty.toml"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "oomsnap show: cannot open '" + t.root +
                       "/nothing/oomsnap.jsonl': No such file or directory ([storage] LocalFile is off: the agent "
                       "writes no store)\n");
  // A bad config is a bad argument, as for `watch`.
  t.write("bad.toml", "[storage]\nPth = \"/x\"\n");
  r = show({"--config", t.root + "/bad.toml"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("Pth"), std::string::npos) << r.err;
}

// ---------------------------------------------------------- hostile text

TEST(ShowHostile, TerminalSafeKeepsUtf8AndReplacesControls) {
  const std::string r = std::string(kReplacementChar);
  EXPECT_EQ(terminal_safe("main.(*Cache).Grüße·日本🐹"), "main.(*Cache).Grüße·日本🐹");
  EXPECT_EQ(terminal_safe("a\x1b[2Jb"), "a" + r + "[2Jb");
  EXPECT_EQ(terminal_safe("tab\there\nnl\x7f"), "tab" + r + "here" + r + "nl" + r);
  EXPECT_EQ(terminal_safe(std::string("nul\0x", 5)), "nul" + r + "x");
  EXPECT_EQ(terminal_safe("c1\xc2\x9b" "31m"), "c1" + r + "31m");                // CSI as one C1 character
  EXPECT_EQ(terminal_safe("abc\xe2\x80\xaetxt.exe"), "abc" + r + "txt.exe");   // right-to-left override
  EXPECT_EQ(terminal_safe("bad\xff\xfe"), "bad" + r + r);                      // not UTF-8 at all
  EXPECT_EQ(terminal_safe("over\xc0\xaf"), "over" + r + r);                    // overlong '/'
  EXPECT_EQ(terminal_safe("sur\xed\xa0\x80"), "sur" + r + r + r);              // a UTF-16 surrogate
  EXPECT_EQ(terminal_safe("cut\xe6\x97"), "cut" + r + r);                      // sequence cut short
  // Cut at a character boundary, saying how much was left out.
  EXPECT_EQ(terminal_safe("日本語", 7), "日本...(+3 bytes)");
  EXPECT_EQ(terminal_safe("abc", 3), "abc");
  EXPECT_EQ(repair_utf8("ok\x1b\xff"), "ok\x1b" + r);
}

TEST(ShowHostile, RecordTextFromTheTargetCannotDriveTheTerminal) {
  json rec = json::parse(slurp(kGolden + "go_collected.jsonl"));
  const std::string osc = "\x1b]0;owned\x07";  // retitle the terminal window
  rec["comm"] = "\x1b[31mred\x1b[0m";
  rec["container"]["cgroup_path"] = "/evil\n== incident 99 at forged";
  rec["container"]["pod_name"] = "pod\xc2\x9b" "2J";
  auto& entries = rec["tracer_data"]["snapshot"]["entries"];
  entries[0]["name"] = osc + "main.evil\x1b[2J";
  entries[0]["stack"] = {osc + "main.evil\x1b[2J", "main.\xe2\x80\xaeretsiger"};
  entries[1]["name"] = std::string(100000, 'x');
  entries[1]["stack"] = {std::string(100000, 'x')};
  const std::string text = render_record(rec);
  expect_terminal_safe(text);
  const std::string r = std::string(kReplacementChar);
  EXPECT_NE(text.find(r + "]0;owned" + r + "main.evil" + r + "[2J <- main." + r + "retsiger"), std::string::npos)
      << text;
  EXPECT_NE(text.find("victim      pid 4242 " + r + "[31mred" + r + "[0m,"), std::string::npos) << text;
  EXPECT_NE(text.find("container   /evil" + r + "== incident 99 at forged\n"), std::string::npos) << text;
  EXPECT_NE(text.find("pod shop/pod" + r + "2J,"), std::string::npos) << text;
  // One header line only: the forged one stayed inside the path.
  EXPECT_EQ(text.find("\n=="), std::string::npos);
  // The 100,000-character name is cut, and says so.
  EXPECT_NE(text.find(std::string(160, 'x') + "...(+99840 bytes)\n"), std::string::npos);
  std::istringstream lines(text);
  for (std::string l; std::getline(lines, l);) EXPECT_LT(l.size(), 400u) << l.substr(0, 80);
}

// The goroutine census comes from the target too: function names, states
// and wait reasons are its bytes. Neutralised, cut, and a census of the wrong
// shape renders what it can.
TEST(ShowHostile, GoroutineCensusFromTheTargetCannotDriveTheTerminal) {
  json rec = json::parse(slurp(kGolden + "go_goroutines.jsonl"));
  auto& census = rec["tracer_data"]["snapshot"]["goroutines"];
  const std::string osc = "\x1b]0;owned\x07";
  census["reason"] = osc + "\n== incident 99";
  for (int i = 0; i < 40; ++i) census["by_state"]["s\x1b[" + std::to_string(i)] = i;
  auto& g0 = census["groups"][0];
  g0["state"] = std::string(10000, 's');
  g0["wait_reason"] = "\x1b[2J" + std::string(10000, 'w');
  g0["stack"] = {"runtime.gopark", osc + "main.evil", std::string(100000, 'x')};
  g0["created_by"] = "main.\xe2\x80\xaeretsiger" + std::string(100000, 'c');
  census["groups"][1]["stack"] = {1, 2, 3};
  census["groups"][2]["stack"] = "not a list";
  census["groups"][3]["count"] = -4;
  census["groups"][4] = "not a group";
  const std::string text = render_record(rec);
  expect_terminal_safe(text);
  const std::string r = std::string(kReplacementChar);
  EXPECT_NE(text.find(r + "]0;owned" + r + "main.evil <- xxx"), std::string::npos) << text;
  EXPECT_EQ(text.find("\n=="), std::string::npos) << text;
  std::istringstream lines(text);
  size_t states = 0;
  for (std::string l; std::getline(lines, l);) {
    EXPECT_LT(l.size(), 460u) << l.substr(0, 80);
    if (l.rfind("goroutines  ", 0) == 0) states = static_cast<size_t>(std::count(l.begin(), l.end(), ','));
  }
  EXPECT_LE(states, 20u);  // at most 16 states listed
}

// JSON escapes (\u001b) and raw bytes that are not UTF-8 in a line, through
// the whole command: the record shows, neutralised.
TEST(ShowHostile, EscapesAndInvalidUtf8InALine) {
  std::string line = slurp(kGolden + "go_collected.jsonl");
  const std::string name = "\"name\":\"main.(*sessionCache).add\"";
  ASSERT_NE(line.find(name), std::string::npos);
  line.replace(line.find(name), name.size(), "\"name\":\"\\u001b[2Jmain.wipe\xff\xfe\\u009b\"");
  Shown r = show({"-"}, line);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  expect_terminal_safe(r.out);
  const std::string rc = std::string(kReplacementChar);
  EXPECT_NE(r.out.find(rc + "[2Jmain.wipe" + rc + rc + rc + " <- main.handleCart"), std::string::npos) << r.out;
}

// -------------------------------------------------------------- bad input

TEST(ShowBadInput, BadLinesAreNotedByNumberAndSkipped) {
  const std::string exits = slurp(kGolden + "process_exit.jsonl");
  const std::string record = exits.substr(0, exits.find('\n') + 1);
  std::string in = "not json\n"                                 // 1
                   "\n"                                         // 2: blank, silently
                   "[1,2,3]\n"                                  // 3
                   "{\"incident_id\":1}\n"                      // 4: no trigger
                   "{\"incident_id\":\"x\",\"trigger\":{}}\n"   // 5: id not a number
                   + record +                                   // 6
                   std::string(100000, '[') + "\n"              // 7: deeply nested, no crash
                   + std::string(5u << 20, ' ') + "{}\n"        // 8: over 4 MiB
                   "{\"truncated\":\n";                         // 9
  Shown r = show({"-"}, in);
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.err,
            "oomsnap show: <stdin>:1: not a JSON object, skipped\n"
            "oomsnap show: <stdin>:3: not a JSON object, skipped\n"
            "oomsnap show: <stdin>:4: not an oomsnap record (no incident_id and trigger), skipped\n"
            "oomsnap show: <stdin>:5: not an oomsnap record (no incident_id and trigger), skipped\n"
            "oomsnap show: <stdin>:7: not a JSON object, skipped\n"
            "oomsnap show: <stdin>:8: longer than 4 MiB, not a record, skipped\n"
            "oomsnap show: <stdin>:9: not a JSON object, skipped\n");
  EXPECT_EQ(r.out, render_record(json::parse(record)));

  // Nothing but bad lines: exit 1.
  r = show({"-"}, "garbage\n{}\n");
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("<stdin>:2: not an oomsnap record"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("oomsnap show: no records\n"), std::string::npos) << r.err;

  // Empty input.
  r = show({"-"}, "");
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "oomsnap show: no records\n");
}

TEST(ShowBadInput, ManyBadLinesGiveBoundedNotes) {
  std::string in;
  for (int i = 0; i < 1000; ++i) in += "x\n";
  Shown r = show({"-"}, in + slurp(kGolden + "go_collected.jsonl"));
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.err.find("<stdin>:20: not a JSON object"), std::string::npos);
  EXPECT_EQ(r.err.find("<stdin>:21:"), std::string::npos);
  EXPECT_NE(r.err.find("oomsnap show: 980 more lines skipped\n"), std::string::npos) << r.err;
}

TEST(ShowBadInput, UnreadableFilesAreNamed) {
  Shown r = show({"/nonexistent/records.jsonl"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "oomsnap show: cannot open '/nonexistent/records.jsonl': No such file or directory\n");
  r = show({"/tmp"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "oomsnap show: cannot read '/tmp': is a directory\n");
}

TEST(ShowBadInput, BadOptionsGiveUsage) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--last"}, {"--last", "0"}, {"--last", "ten"}, {"--last", "-3"}, {"--container"},
        {"--container", ""}, {"--bogus"}, {"a.jsonl", "b.jsonl"}, {"a.jsonl", "--config", "c.toml"}}) {
    Shown r = show(args);
    EXPECT_EQ(r.rc, 2) << args[0];
    EXPECT_NE(r.err.find("usage: oomsnap show [FILE|-]"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
  Shown r = show({"--help"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("usage: oomsnap show"), std::string::npos);
}

// -------------------------------------------------------------- rendering

TEST(ShowRender, HumanBytes) {
  EXPECT_EQ(human_bytes(0), "0 B");
  EXPECT_EQ(human_bytes(1023), "1023 B");
  EXPECT_EQ(human_bytes(1024), "1.0 KiB");
  EXPECT_EQ(human_bytes(1536), "1.5 KiB");
  EXPECT_EQ(human_bytes((1u << 20) - 1), "1.0 MiB");
  EXPECT_EQ(human_bytes(268435456), "256.0 MiB");
  EXPECT_EQ(human_bytes(1795928064), "1.7 GiB");
  EXPECT_EQ(human_bytes(UINT64_MAX), "16.0 EiB");
}

// A damaged record (wrong types everywhere) renders what it can.
TEST(ShowRender, WrongFieldTypesDoNotThrow) {
  json rec = {{"incident_id", 5},
              {"trigger", {{"type", 3}, {"pid", "x"}}},
              {"container", "not an object"},
              {"victim_pid", "4242"},
              {"process_memory", {{"rss_bytes", -5}}},
              {"tracer_data", {{"snapshot", {{"entries", {1, "two", {{"name", 7}}}}}}}},
              {"collection", {{"status", nullptr}}},
              {"other_processes", {1, 2}},
              {"oom_kill", {{"killed", "all"}, {"group_kill", true}}},
              {"timeline", {{"trigger_ns", -1}, {"exit_ns", 1.5}}}};
  ASSERT_TRUE(is_agent_record(rec));
  std::string text;
  ASSERT_NO_THROW(text = render_record(rec));
  EXPECT_EQ(text.rfind("== incident 5\n", 0), 0u) << text;
}

// ------------------------------------------------------------ the binary

TEST(ShowBinary, RendersAGoldenFileAndFailsCleanly) {
  const std::string out = std::string(testing::TempDir()) + "/show_binary_out.txt";
  const std::string cmd = std::string("'") + OOMSNAP_BINARY + "' show '" + kGolden + "group_kill.jsonl' > '" + out + "'";
  int st = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
  EXPECT_EQ(slurp(out), slurp(kGolden + "group_kill.txt"));

  // stdin, through the binary's std::cin.
  const std::string piped = std::string("'") + OOMSNAP_BINARY + "' show --last 1 - < '" + kGolden +
                            "process_exit.jsonl' > '" + out + "'";
  st = std::system(piped.c_str());
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
  EXPECT_EQ(slurp(out).rfind("== incident 40 at", 0), 0u) << slurp(out);

  st = std::system((std::string("'") + OOMSNAP_BINARY + "' show /nonexistent 2>/dev/null").c_str());
  EXPECT_EQ(WEXITSTATUS(st), 1);
  st = std::system((std::string("'") + OOMSNAP_BINARY + "' show --bogus 2>/dev/null").c_str());
  EXPECT_EQ(WEXITSTATUS(st), 2);
  std::remove(out.c_str());
}
