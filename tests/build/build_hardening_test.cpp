// The built oomsnap carries the hardening of issue #12 (top-level CMakeLists.txt):
// PIE, full RELRO (GNU_RELRO + BIND_NOW), stack protector, FORTIFY and
// -fcf-protection, checked with readelf on the binary and, per translation unit,
// in the DWARF producer strings and compile_commands.json. Also that capstone's
// trim (userspace/capstone_trim/) keeps the PIE start cheap.
//
// The binary, compile database and source directory default to this build's;
// OOMSNAP_HARDENING_BINARY / _COMPILE_COMMANDS / _SOURCE_DIR point the checks at
// another build (e.g. to see them fail on an older one).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string setting(const char* env, const char* fallback) {
  const char* v = std::getenv(env);
  return v != nullptr && *v != '\0' ? v : fallback;
}
std::string binary() { return setting("OOMSNAP_HARDENING_BINARY", OOMSNAP_BINARY); }
std::string compile_commands() {
  return setting("OOMSNAP_HARDENING_COMPILE_COMMANDS", OOMSNAP_BUILD_DIR "/compile_commands.json");
}
std::string source_dir() { return setting("OOMSNAP_HARDENING_SOURCE_DIR", OOMSNAP_SOURCE_DIR); }

std::string readelf(const std::string& options) {
  std::string cmd = "readelf -W " + options + " '" + binary() + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) ADD_FAILURE() << "cannot run " << cmd;
  std::string out;
  char buf[65536];
  size_t n;
  while (p != nullptr && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = p != nullptr ? pclose(p) : -1;
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << cmd << ":\n" << out.substr(0, 2000);
  return out;
}

std::vector<std::string> lines_matching(const std::string& text, const std::regex& re) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (std::regex_search(line, re)) out.push_back(line);
  return out;
}

std::set<std::string> undefined_chk_symbols() {
  std::set<std::string> out;
  // "UND __memcpy_chk@GLIBC_2.3.4 (26)": an imported __*_chk or __stack_chk_fail.
  std::regex sym(R"(\bUND\s+(__\w+_chk(_fail)?)(@|\s|$))");
  std::istringstream in(readelf("--dyn-syms"));
  std::smatch m;
  for (std::string line; std::getline(in, line);)
    if (std::regex_search(line, m, sym)) out.insert(m[1]);
  return out;
}

TEST(BuildHardening, PositionIndependentExecutable) {
  std::string h = readelf("-h");
  EXPECT_TRUE(std::regex_search(h, std::regex(R"(Type:\s+DYN\b)"))) << "ELF type is not DYN (built -no-pie?):\n" << h;
  // DYN is also what a shared library is; the PIE flag says it is an executable.
  auto flags1 = lines_matching(readelf("-d"), std::regex(R"(\(FLAGS_1\))"));
  ASSERT_EQ(flags1.size(), 1u) << "no FLAGS_1 entry";
  EXPECT_TRUE(std::regex_search(flags1[0], std::regex(R"(\bPIE\b)"))) << flags1[0];
}

TEST(BuildHardening, FullRelro) {
  EXPECT_EQ(lines_matching(readelf("-l"), std::regex(R"(^\s*GNU_RELRO\s)")).size(), 1u) << "no GNU_RELRO segment";
  std::string d = readelf("-d");
  bool now = !lines_matching(d, std::regex(R"(\(FLAGS\).*\bBIND_NOW\b)")).empty() ||
             !lines_matching(d, std::regex(R"(\(FLAGS_1\).*\bNOW\b)")).empty();
  EXPECT_TRUE(now) << "not linked -z now (no BIND_NOW / FLAGS_1 NOW):\n" << d;
}

TEST(BuildHardening, StackProtectorAndFortifyReferenced) {
  auto chk = undefined_chk_symbols();
  EXPECT_EQ(chk.count("__stack_chk_fail"), 1u) << "__stack_chk_fail not referenced";
#ifdef OOMSNAP_SANITIZE
  GTEST_SKIP() << "FORTIFY is left out of sanitizer builds (top-level CMakeLists.txt)";
#endif
  chk.erase("__stack_chk_fail");
  EXPECT_FALSE(chk.empty()) << "no __*_chk (FORTIFY) function referenced";
}

// The symbols above could come from Debian's static libraries alone, so each of
// our own translation units in the binary is checked too: GCC records the code
// generation options in DW_AT_producer (-D is not among them: FORTIFY is
// checked in compile_commands.json below).
// Whether a compilation unit's DW_AT_name is one of ours: absolute below the
// source or build dir, or relative as ccache's CCACHE_BASEDIR makes it
// (tools/ccache-env.sh: "../../userspace/cli/main.cpp", relative to a build
// dir that may be another clone's) naming a file of this source tree.
bool our_unit(const std::string& unit, const std::string& src, const std::string& bld) {
  if (unit.rfind(src, 0) == 0 || unit.rfind(bld, 0) == 0) return true;
  if (unit.rfind("../", 0) != 0) return false;
  std::string rest = unit;
  while (rest.rfind("../", 0) == 0) rest.erase(0, 3);
  if (rest.rfind("userspace/", 0) != 0 && rest.rfind("tests/", 0) != 0) return false;
  return std::ifstream(src + rest).good();
}

TEST(BuildHardening, EveryProjectUnitHasStackProtectorAndCfProtection) {
  std::string info = readelf("--debug-dump=info --dwarf-depth=1");
  // "DW_AT_name : (line_strp) (offset: 0x1d): /path/file.cpp" (readelf -W; without
  // -W "(indirect line string, offset: 0x1d): ...")
  std::regex producer(R"(DW_AT_producer\s*:\s*(?:\([^)]*\):?\s*)*(.*)$)"),
      name(R"(DW_AT_name\s*:\s*(?:\([^)]*\):?\s*)*(.*)$)");
  std::string cur_producer, src = source_dir() + "/", bld = std::string(OOMSNAP_BUILD_DIR) + "/";
  int ours = 0;
  std::istringstream in(info);
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (line.find("Compilation Unit @") != std::string::npos) cur_producer.clear();
    if (std::regex_search(line, m, producer)) cur_producer = m[1];
    if (!std::regex_search(line, m, name) || cur_producer.empty()) continue;
    std::string unit = m[1];
    if (!our_unit(unit, src, bld)) continue;  // a library's or the C runtime's
    ++ours;
    EXPECT_NE(cur_producer.find("-fstack-protector-strong"), std::string::npos) << unit << ": " << cur_producer;
    EXPECT_NE(cur_producer.find("-fcf-protection"), std::string::npos) << unit << ": " << cur_producer;
    EXPECT_EQ(cur_producer.find("-fno-stack-protector"), std::string::npos) << unit << ": " << cur_producer;
    cur_producer.clear();
  }
  if (ours == 0) GTEST_SKIP() << "no debug information for " << src << " in " << binary() << " (a Release build)";
  EXPECT_GT(ours, 10) << "too few of our compilation units found";
}

// Every object the build compiles (binary, tests, helpers) gets the flags.
// FORTIFY only works with optimisation, so no unit may be built at -O0 (or with
// no -O, which is -O0).
TEST(BuildHardening, EveryCompileCommandHasTheFlags) {
  std::ifstream f(compile_commands());
  ASSERT_TRUE(f) << "cannot read " << compile_commands();
  auto db = nlohmann::json::parse(f);
  ASSERT_TRUE(db.is_array());
  ASSERT_FALSE(db.empty());
  std::regex opt(R"((^|\s)-O(\S*))");
  for (const auto& e : db) {
    std::string file = e.value("file", ""), cmd = e.value("command", "");
    if (cmd.empty() && e.contains("arguments"))
      for (const auto& a : e["arguments"]) cmd += " " + a.get<std::string>();
    EXPECT_NE(cmd.find("-fstack-protector-strong"), std::string::npos) << file;
    EXPECT_NE(cmd.find("-fcf-protection"), std::string::npos) << file;
#ifndef OOMSNAP_SANITIZE
    // The last of -U/-D _FORTIFY_SOURCE wins; ours come after any default.
    auto d = cmd.rfind("-D_FORTIFY_SOURCE=3"), u = cmd.rfind("-U_FORTIFY_SOURCE");
    EXPECT_TRUE(d != std::string::npos && (u == std::string::npos || u < d)) << file << ": " << cmd;
    std::string last = "0";
    for (std::sregex_iterator it(cmd.begin(), cmd.end(), opt), end; it != end; ++it) last = (*it)[2];
    EXPECT_NE(last, "0") << file << " is built without optimisation, where FORTIFY does nothing: " << cmd;
#endif
  }
}

// Start-up cost of PIE: ld.so applies every relative relocation and dirties the
// page it is on at each start of `oomsnap snapshot` and of its capture process.
// With capstone trimmed to x86 the binary has ~2,900 (78,000 with all of
// capstone's architectures, ~7 ms CPU per start measured under load).
TEST(BuildHardening, FewRelativeRelocations) {
  std::string d = readelf("-d");
  if (!lines_matching(d, std::regex(R"(\(NEEDED\).*libcapstone)")).empty())
    GTEST_SKIP() << "capstone is linked shared: its relocations are the library's";
  auto rel = lines_matching(readelf("-r"), std::regex(R"(R_X86_64_RELATIVE)"));
  auto relr = lines_matching(d, std::regex(R"(\(RELRSZ\))"));
  ASSERT_TRUE(relr.empty()) << "packed relative relocations: count them another way";
  EXPECT_LT(rel.size(), 20000u) << "relative relocations: is capstone linked with all its architectures?";
}

// Start-up cost of shared libraries: each costs every start its mappings, its
// symbol lookups under -z now and its relocated pages. Debian's shared libbpf,
// libelf, zlib, libseccomp, libcap, libsystemd (and the five it needs), spdlog,
// fmt, toml++ and libstdc++ cost ~7 ms CPU per start of an empty program here;
// the shipped binary takes their archives or headers instead and opens
// libsystemd only under systemd (userspace/CMakeLists.txt).
TEST(BuildHardening, OnlyTheCLibraryIsLoadedAtStart) {
  auto needed = lines_matching(readelf("-d"), std::regex(R"(\(NEEDED\))"));
  const std::regex allowed(R"(\[(libc\.so\.6|libm\.so\.6|ld-linux-x86-64\.so\.2)\])");
  for (const auto& line : needed) EXPECT_TRUE(std::regex_search(line, allowed)) << line;
  EXPECT_FALSE(needed.empty()) << "no NEEDED entry at all: is the binary static?";
}

}  // namespace
