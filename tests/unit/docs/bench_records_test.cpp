// The benchmark drivers keep their figures (issue #30: the readers' speed
// must not regress unnoticed again): every tools/bench-*.sh records through
// tools/lib/bench-record.sh and is run by tools/bench-all.sh; a record is one
// JSON line with the commit, the machine, the date and the figures; the
// comparison marks a figure more than 10 % worse than the one before. The
// benchmarks themselves are not run here (they are not timed tests).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "run_command.h"

namespace fs = std::filesystem;

namespace {

const std::string kSource = OOMSNAP_SOURCE_DIR;

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/oomsnap-bench-records-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string path;
};

TEST(BenchRecords, EveryDriverRecordsItsFiguresAndBenchAllRunsIt) {
  const std::string all = slurp(kSource + "/tools/bench-all.sh");
  int drivers = 0;
  for (const auto& e : fs::directory_iterator(kSource + "/tools")) {
    const std::string file = e.path().filename();
    if (file.rfind("bench-", 0) != 0 || e.path().extension() != ".sh" || file == "bench-all.sh") continue;
    const std::string name = file.substr(6, file.size() - 9);
    const std::string text = slurp(e.path());
    EXPECT_NE(text.find("bench_record_init " + name + "\n"), std::string::npos) << file;
    // Figures from the shell (bench_figure) or from its Python (into $BENCH_FIGURES).
    EXPECT_TRUE(text.find("bench_figure ") != std::string::npos || text.find("BENCH_FIGURES") != std::string::npos)
        << file;
    EXPECT_NE(text.find("bench_record_write"), std::string::npos) << file;
    EXPECT_TRUE(std::regex_search(all, std::regex("ALL=\\([^)]*\\b" + name + "\\b[^)]*\\)")))
        << file << " is not in bench-all.sh's list";
    ++drivers;
  }
  EXPECT_GE(drivers, 7);
}

// A record as a driver writes it: the figures given (one that measured
// nothing left out), the commit, the machine and the date.
TEST(BenchRecords, ARecordIsOneJsonLineWithCommitMachineDateAndFigures) {
  TempDir dir;
  const auto r = oomsnap_test::run_command(
      "cd " + kSource + " && BENCH_RECORD_DIR=" + dir.path +
      " bash -c '. tools/lib/bench-record.sh; bench_record_init demo; bench_figure \"walk speed\" 2.5 GiB/s higher;"
      " bench_figure \"snapshot\" 120.25 ms; bench_figure \"ratio\" n/a x; bench_record_write' 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  std::ifstream f(dir.path + "/demo.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(f, line));
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j.at("bench"), "demo");
  EXPECT_FALSE(j.at("commit").get<std::string>().empty());
  EXPECT_EQ(j.at("date").get<std::string>().size(), 20u);
  EXPECT_GE(j.at("machine").at("cpus").get<int>(), 1);
  EXPECT_FALSE(j.at("machine").at("kernel").get<std::string>().empty());
  const auto& fig = j.at("figures");
  EXPECT_EQ(fig.size(), 2u) << fig.dump();
  EXPECT_EQ(fig.at("walk speed").at("value"), 2.5);
  EXPECT_EQ(fig.at("walk speed").at("better"), "higher");
  EXPECT_EQ(fig.at("snapshot").at("unit"), "ms");
  EXPECT_FALSE(std::getline(f, line));
}

// The comparison: each figure of the newest record beside the one before,
// their ratio, and a mark where it is more than 10 % worse (a time that
// grew, a speed that fell).
TEST(BenchRecords, BenchAllComparesTheNewestRecordWithTheOneBefore) {
  TempDir dir;
  std::ofstream(dir.path + "/breakdown.jsonl")
      << R"({"bench":"breakdown","commit":"aaa","dirty":false,"date":"2026-12-01T00:00:00Z","machine":{"load1":0.5},)"
      << R"("figures":{"t":{"value":4.0,"unit":"ms","better":"lower"},"speed":{"value":2.0,"unit":"GiB/s","better":"higher"},)"
      << R"("same":{"value":10,"unit":"ms","better":"lower"}}})" << "\n"
      << R"({"bench":"breakdown","commit":"bbb","dirty":true,"date":"2026-12-05T00:00:00Z","machine":{"load1":1.5},)"
      << R"("figures":{"t":{"value":5.0,"unit":"ms","better":"lower"},"speed":{"value":1.5,"unit":"GiB/s","better":"higher"},)"
      << R"("same":{"value":10.5,"unit":"ms","better":"lower"},"new":{"value":1,"unit":"ms","better":"lower"}}})" << "\n";
  const auto r = oomsnap_test::run_command("BENCH_RECORD_DIR=" + dir.path + " " + kSource +
                                           "/tools/bench-all.sh --compare breakdown 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("| breakdown | t | 5 ms | 4 ms | 1.25 **worse** |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| breakdown | speed | 1.5 GiB/s | 2 GiB/s | 0.75 **worse** |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| breakdown | same | 10.5 ms | 10 ms | 1.05 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| breakdown | new | 1 ms | - |  |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bbb+ 2026-12-05T00:00"), std::string::npos) << r.out;
}

// The records kept in the tree parse, each with what the comparison needs.
TEST(BenchRecords, TheRecordsInTheTreeAreWellFormed) {
  int records = 0;
  for (const auto& e : fs::directory_iterator(kSource + "/docs/benchmarks")) {
    if (e.path().extension() != ".jsonl") continue;
    std::ifstream f(e.path());
    std::string line;
    while (std::getline(f, line)) {
      if (line.empty()) continue;
      const auto j = nlohmann::json::parse(line, nullptr, false);
      ASSERT_FALSE(j.is_discarded()) << e.path() << ": " << line;
      EXPECT_EQ(j.at("bench").get<std::string>() + ".jsonl", e.path().filename().string());
      for (const auto& [name, fig] : j.at("figures").items()) {
        EXPECT_TRUE(fig.at("value").is_number()) << name;
        EXPECT_TRUE(fig.at("better") == "lower" || fig.at("better") == "higher") << name;
      }
      ++records;
    }
  }
  EXPECT_GT(records, 0);
}

}  // namespace
