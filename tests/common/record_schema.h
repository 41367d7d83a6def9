// Validation against docs/record.schema.json, the contract log pipelines get:
// every record and `oomsnap snapshot` output the tests produce goes through it
// (tools/validate-record.py, Debian's python3-jsonschema), so a renamed or
// undescribed field fails the test that produced it.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

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
    const std::string cmd = std::string("/usr/bin/python3 '") + OOMSNAP_SOURCE_DIR + "/tools/validate-record.py' " +
                            (snapshot ? "--snapshot " : "") + path + " 2>&1";
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
      char buf[4096];
      for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
      const int st = ::pclose(p);
      if (WIFEXITED(st) && WEXITSTATUS(st) == 0) out.clear();
      else if (out.empty()) out = "validator failed (status " + std::to_string(st) + ")";
    } else {
      out = "record_schema_errors: cannot run tools/validate-record.py";
    }
  } else {
    out = "record_schema_errors: cannot write " + std::string(path);
  }
  ::unlink(path);
  return out;
}

}  // namespace oomsnap_test
