// The record sinks' tests' shared helpers (tests/unit/*sink*_test.cpp): the
// records in a store directory, and test records of known content.
#pragma once

#include <gtest/gtest.h>
#include <fcntl.h>
#include <pty.h>
#include <signal.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "agent/records/record_limit.h"
#include "agent/records/sink.h"
#include "agent/records/time_format.h"
#include "sink_test_util.h"


namespace sinktest {

using namespace oomsnap;
namespace fs = std::filesystem;
using nlohmann::json;

inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Record files in `dir`, oldest first: oomsnap.jsonl.N ... .1, oomsnap.jsonl.
inline std::vector<std::string> record_files(const std::string& dir) {
  std::map<int, std::string> numbered;  // number -> path
  bool live = false;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (n == kRecordFileName) {
      live = true;
    } else if (n.rfind(std::string(kRecordFileName) + ".", 0) == 0) {
      numbered[std::stoi(n.substr(std::strlen(kRecordFileName) + 1))] = e.path().string();
    } else {
      ADD_FAILURE() << "unexpected file " << n;
    }
  }
  std::vector<std::string> files;
  for (auto it = numbered.rbegin(); it != numbered.rend(); ++it) files.push_back(it->second);
  if (live) files.push_back(dir + "/" + kRecordFileName);
  return files;
}

// All lines of all record files, oldest first.
inline std::vector<std::string> all_lines(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& f : record_files(dir)) {
    auto l = read_lines(f);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

inline json rec(int writer, int seq, size_t pad) {
  return json{{"writer", writer}, {"seq", seq}, {"pad", std::string(pad, 'x')}};
}

inline std::unique_ptr<RecordSink> file_sink(const std::string& dir, uint64_t max_bytes, int max_files) {
  std::string err;
  auto s = make_rotating_file_sink(dir, max_bytes, max_files, err);
  EXPECT_TRUE(s) << err;
  return s;
}

// Checks that every line is a record and each writer's seqs 0..n-1 each appear
// exactly once (no loss, no duplicates, no torn lines).
inline void expect_complete(const std::vector<std::string>& lines, int writers, int per_writer) {
  std::map<int, std::set<int>> seen;
  size_t bad = 0;
  for (const auto& l : lines) {
    if (!json::accept(l)) {
      if (++bad <= 3) ADD_FAILURE() << "torn line: " << l.substr(0, 200);
      continue;
    }
    json j = json::parse(l);
    EXPECT_TRUE(seen[j.at("writer").get<int>()].insert(j.at("seq").get<int>()).second)
        << "duplicate " << l.substr(0, 80);
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(lines.size(), static_cast<size_t>(writers) * per_writer);
  ASSERT_EQ(seen.size(), static_cast<size_t>(writers));
  for (const auto& [w, seqs] : seen) {
    EXPECT_EQ(seqs.size(), static_cast<size_t>(per_writer)) << "writer " << w;
    EXPECT_EQ(*seqs.begin(), 0);
    EXPECT_EQ(*seqs.rbegin(), per_writer - 1);
  }
}


}  // namespace sinktest
