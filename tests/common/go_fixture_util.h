// Shared helpers for the ELF / buildinfo / pclntab unit tests: where the Go
// fixtures and toolchains live, and running the Go tools as oracles.
#pragma once
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "elf/elf_file.h"
#include "go_versions.h"

namespace oomsnap::testutil {

inline const std::vector<std::string>& go_versions() {
  static const std::vector<std::string> v(oomsnap_test::go_versions().begin(), oomsnap_test::go_versions().end());
  return v;
}
inline const std::vector<std::string>& go_modes() {
  static const std::vector<std::string> m = {"default", "pie", "stripped", "pie-stripped"};
  return m;
}
// The (version, mode) pairs tools/build-go-fixtures.sh produces.
struct GoFixture {
  std::string version, mode;
};
inline void PrintTo(const GoFixture& f, std::ostream* os) { *os << "go" << f.version << "/" << f.mode; }
inline std::vector<GoFixture> all_go_fixtures() {
  std::vector<GoFixture> out;
  for (const auto& v : go_versions())
    for (const auto& m : go_modes()) out.push_back({v, m});
  out.push_back({"1.26", "cgo"});
  return out;
}
inline std::string fixture_name(const testing::TestParamInfo<GoFixture>& i) {
  std::string s = "go" + i.param.version + "_" + i.param.mode;
  for (char& c : s)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

inline std::string fixtures_root() { return OOMSNAP_FIXTURES; }
inline std::string fixture_path(const std::string& v, const std::string& mode) {
  return fixtures_root() + "/go/" + v + "/" + mode + "/heapfixture";
}
// The cache dir holding fixtures/ and go/ (OOMSNAP_FIXTURES = $CACHE/fixtures).
inline std::string cache_root() {
  std::string f = fixtures_root();
  auto pos = f.find_last_of('/');
  return pos == std::string::npos ? "." : f.substr(0, pos);
}
inline std::string go_tool(const std::string& v) { return cache_root() + "/go/" + v + "/bin/go"; }

inline bool file_exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

// A missing fixture is a test FAILURE (not a skip).
#define OOMSNAP_REQUIRE_FIXTURE(path)                                                         \
  do {                                                                                        \
    if (!::oomsnap::testutil::file_exists(path)) {                                            \
      FAIL() << "missing Go fixture " << (path)                                               \
             << ": build the fixtures with tools/build-go-fixtures.sh (toolchains: "          \
                "tools/fetch-go-toolchains.sh)";                                              \
    }                                                                                         \
  } while (0)

// The unstripped sibling of a fixture (same code layout): the oracle for
// `go tool nm/objdump/addr2line` when the fixture itself has no symbols.
inline std::string symbolized_sibling_mode(const std::string& mode) {
  if (mode == "stripped") return "default";
  if (mode == "pie-stripped") return "pie";
  return mode;
}

inline std::unique_ptr<ElfFile> open_elf(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ElfError("cannot open " + path);
  auto e = ElfFile::open_fd(fd, path);
  ::close(fd);
  return e;
}

inline std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline std::string shell_quote(const std::string& s) {
  std::string r = "'";
  for (char c : s) {
    if (c == '\'')
      r += "'\\''";
    else
      r += c;
  }
  return r + "'";
}

// Runs `go tool ...` / `go version` of toolchain v; stdout, or "" on failure.
// stdin_text (if any) is fed through a temporary file.
inline std::string run_go(const std::string& v, const std::string& args,
                          const std::string& stdin_text = "") {
  std::string goroot = cache_root() + "/go/" + v;
  std::string cmd = "env GOROOT=" + shell_quote(goroot) +
                    " GOTOOLCHAIN=local GOPROXY=off GO111MODULE=off GOFLAGS= GOENV=off " +
                    shell_quote(go_tool(v)) + " " + args;
  std::string tmp;
  if (!stdin_text.empty()) {
    char name[] = "/tmp/oomsnap-gotool-XXXXXX";
    int fd = ::mkstemp(name);
    if (fd < 0) return "";
    tmp = name;
    (void)!::write(fd, stdin_text.data(), stdin_text.size());
    ::close(fd);
    cmd += " < " + shell_quote(tmp);
  }
  cmd += " 2>/dev/null";
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    std::array<char, 65536> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
    ::pclose(p);
  }
  if (!tmp.empty()) ::unlink(tmp.c_str());
  return out;
}

inline std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

// tests/fixtures/go/glayout run with toolchain v on its unstripped fixture:
// the runtime offsets the compiler laid out, as one JSON object (or what the
// run printed instead, for a failure message).
inline std::string go_dwarf_layout(const std::string& v) {
  const std::string root = cache_root();
  const std::string cmd = "env GOROOT=" + shell_quote(root + "/go/" + v) +
                          " GOTOOLCHAIN=local GOPROXY=off GO111MODULE=off GOFLAGS= GOENV=off GOCACHE=" +
                          shell_quote(root + "/gocache-" + v) + " " + shell_quote(go_tool(v)) + " run " +
                          shell_quote(std::string(OOMSNAP_SOURCE_DIR) + "/tests/fixtures/go/glayout/main.go") + " " +
                          shell_quote(fixture_path(v, "default")) + " 2>&1";
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    ::pclose(p);
  }
  return out;
}

}  // namespace oomsnap::testutil
