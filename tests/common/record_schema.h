// Validation against docs/record.schema.json, the contract log pipelines get:
// every record and `oomsnap snapshot` output the tests produce goes through it
// (tools/validate-record.py, Debian's python3-jsonschema), so a renamed or
// undescribed field fails the test that produced it.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "run_command.h"

namespace oomsnap_test {

// "" when `json_text` (one JSON document; for a record store, one per line) is
// valid, else the validator's report. snapshot: as `oomsnap snapshot` output.
inline std::string record_schema_errors(const std::string& json_text, bool snapshot = false) {
  char path[] = "/tmp/oomsnap-schema-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) return "record_schema_errors: mkstemp failed";
  const std::string text = json_text.empty() || json_text.back() == '\n' ? json_text : json_text + "\n";
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  std::string out;
  if (written) {
    const CommandRun r = run_command(std::string("/usr/bin/python3 '") + OOMSNAP_SOURCE_DIR +
                                     "/tools/validate-record.py' " + (snapshot ? "--snapshot " : "") + path);
    if (r.status != 0) out = r.out.empty() ? "validator failed (status " + std::to_string(r.status) + ")" : r.out;
  } else {
    out = "record_schema_errors: cannot write " + std::string(path);
  }
  ::unlink(path);
  return out;
}

}  // namespace oomsnap_test
