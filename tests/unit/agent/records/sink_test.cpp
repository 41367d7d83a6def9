// Record sinks: one line per record (SinkSet) and its time format.
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
#include "sink_records_util.h"

using namespace oomsnap;
using namespace sinktest;
namespace fs = std::filesystem;
using nlohmann::json;

// ------------------------------------------------------------------ SinkSet

TEST(SinkSet, InvalidUtf8IsReplacedNotThrown) {
  TempDir tmp;
  SinkSet set;
  set.add(file_sink(tmp.path(), 1 << 20, 2));
  json r{{"comm", std::string("ab\xff\xfe" "c")}, {"ok", "caf\xc3\xa9"}};
  std::vector<std::string> errors;
  EXPECT_NO_THROW(EXPECT_TRUE(set.write(r, errors)));
  auto lines = read_lines(tmp.path() + "/oomsnap.jsonl");
  ASSERT_EQ(lines.size(), 1u);
  ASSERT_TRUE(json::accept(lines[0])) << lines[0];
  json back = json::parse(lines[0]);
  EXPECT_EQ(back["comm"], "ab\xef\xbf\xbd\xef\xbf\xbd" "c");  // U+FFFD per bad byte
  EXPECT_EQ(back["ok"], "caf\xc3\xa9");                       // valid UTF-8 untouched
}

TEST(SinkSet, RecordLineIsCompactAndTerminated) {
  EXPECT_EQ(record_line(json{{"b", {1, 2}}, {"a", json::object()}}), "{\"a\":{},\"b\":[1,2]}\n");
}

TEST(SinkSet, EmptySetIsAnError) {
  SinkSet set;
  std::vector<std::string> errors;
  EXPECT_FALSE(set.write(json{{"a", 1}}, errors));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("no record sinks"), std::string::npos);
}

// ------------------------------------------------------------------ time

TEST(TimeFormat, Rfc3339Milliseconds) {
  using namespace std::chrono;
  using tp = system_clock::time_point;
  EXPECT_EQ(rfc3339_ms(tp{}), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(rfc3339_ms(tp{seconds(1795962111) + milliseconds(123)}), "2026-11-29T14:21:51.123Z");
  // Sub-millisecond parts are cut, never rounded up into the next second.
  EXPECT_EQ(rfc3339_ms(tp{seconds(951868799) + microseconds(999999)}), "2000-02-29T23:59:59.999Z");
  EXPECT_EQ(rfc3339_ms(tp{seconds(2147483648LL) + milliseconds(7)}), "2038-01-19T03:14:08.007Z");
  // Before the epoch the millisecond still counts forward within its second.
  EXPECT_EQ(rfc3339_ms(tp{milliseconds(-1)}), "1969-12-31T23:59:59.999Z");
}
