// docs/record.schema.json, the record's contract: the golden records hold to
// it, and a renamed field, an undescribed one or a value outside its set fails
// (the schema lists every field an object may hold).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "record_schema.h"

using nlohmann::json;
using oomsnap_test::record_schema_errors;

namespace {

const std::string kGolden = std::string(OOMSNAP_SOURCE_DIR) + "/tests/golden/show/";

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

json golden(const std::string& name) {
  const std::string text = slurp(kGolden + name + ".jsonl");
  return json::parse(text.substr(0, text.find('\n')));
}

}  // namespace

TEST(RecordSchema, EveryGoldenRecordHoldsToIt) {
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(kGolden)) {
    if (e.path().extension() != ".jsonl") continue;
    ++files;
    EXPECT_EQ(record_schema_errors(slurp(e.path())), "") << e.path();
  }
  EXPECT_GE(files, 10u);
}

TEST(RecordSchema, ARenamedOrUndescribedFieldFails) {
  json r = golden("java_collected");
  ASSERT_EQ(record_schema_errors(r.dump()), "");
  json renamed = r;
  renamed["container"]["usage"] = renamed["container"]["usage_bytes"];
  renamed["container"].erase("usage_bytes");
  EXPECT_NE(record_schema_errors(renamed.dump()).find("'usage' was unexpected"), std::string::npos);
  json extra = r;
  extra["victim"] = 77;
  EXPECT_NE(record_schema_errors(extra.dump()).find("'victim' was unexpected"), std::string::npos);
  json entry = r;
  entry["tracer_data"]["snapshot"]["entries"][0]["size"] = 1;
  EXPECT_NE(record_schema_errors(entry.dump()).find("'size' was unexpected"), std::string::npos);
}

TEST(RecordSchema, ValuesOutsideTheirSetFail) {
  const json r = golden("java_collected");
  json status = r;
  status["tracer_data"]["snapshot"]["status"] = "done";
  EXPECT_NE(record_schema_errors(status.dump()), "");
  json trigger = r;
  trigger["trigger"]["type"] = "oom";
  EXPECT_NE(record_schema_errors(trigger.dump()), "");
  json time = r;
  time["time"] = "2026-11-29 16:40:03";
  EXPECT_NE(record_schema_errors(time.dump()), "");
  json missing = r;
  missing.erase("collection");
  EXPECT_NE(record_schema_errors(missing.dump()).find("'collection' is a required property"), std::string::npos);
}

TEST(RecordSchema, SnapshotCommandOutputIsItsOwnShape) {
  const json r = golden("go_collected");
  json out = {{"pid", 12}, {"comm", "server"}, {"start_time_ticks", 5}, {"language", "go"},
              {"process_memory", r["process_memory"]}, {"snapshot", r["tracer_data"]["snapshot"]}};
  EXPECT_EQ(record_schema_errors(out.dump(), true), "");
  EXPECT_NE(record_schema_errors(out.dump()), "");  // not a record
  out["node"] = "n";
  EXPECT_NE(record_schema_errors(out.dump(), true), "");
}
