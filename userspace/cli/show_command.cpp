#include "cli/show_command.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "agent/config.h"
#include "agent/records/sink.h"
#include "cli/command_line.h"
#include "cli/record_text.h"
#include "cli/terminal_text.h"

namespace oomsnap {
namespace {

constexpr const char* kUsage =
    "usage: oomsnap show [FILE|-] [--last N] [--container SUBSTR] [--config F]\n"
    "  Agent records (JSON lines, as `oomsnap watch` writes them) as text, one block per incident.\n"
    "  FILE, or - for stdin; by default the agent's store: oomsnap.jsonl in [storage] Path of the\n"
    "  configuration (--config F, else the defaults: /var/log/oomsnap), rotated files oldest first.\n"
    "  --last N            only the last N records (after --container)\n"
    "  --container SUBSTR  only records whose cgroup path, pod name or container name contains SUBSTR\n";

// A record is at most 1 MiB (agent/record_limit); four times that is
// not a record, and reading it whole would let any file cost any memory.
constexpr size_t kMaxLineBytes = 4u << 20;
// Past this many notes about bad lines, only their count is reported: a
// file of garbage should not bury the records in notes.
constexpr size_t kMaxNotes = 20;
// Rotated files are numbered from 1 without gaps (agent/records/sink.cpp); this
// only bounds the search.
constexpr int kMaxRotated = 10000;

struct Options {
  std::optional<std::string> file;  // "-" = stdin
  std::optional<size_t> last;
  std::string container;
  std::optional<std::string> config_path;
};

struct Input {
  std::string name;  // for notes: the path, or "<stdin>"
  std::unique_ptr<std::ifstream> file;
  std::istream* stream = nullptr;
};

enum class LineRead { kLine, kTooLong, kEnd };

// The next line without its '\n'. Bytes past `max_bytes` are read and
// dropped (kTooLong), so memory stays bounded whatever the input. Reads
// through the stream buffer a byte at a time so a pipe from `oomsnap watch`
// shows each record as it arrives.
LineRead next_line(std::istream& in, std::string& line, size_t max_bytes) {
  line.clear();
  std::streambuf* sb = in.rdbuf();
  bool any = false, too_long = false;
  for (;;) {
    const int c = sb->sbumpc();
    if (c == std::char_traits<char>::eof()) {
      in.setstate(std::ios::eofbit);
      if (!any) return LineRead::kEnd;
      break;
    }
    any = true;
    if (c == '\n') break;
    if (line.size() < max_bytes) line.push_back(static_cast<char>(c));
    else too_long = true;
  }
  return too_long ? LineRead::kTooLong : LineRead::kLine;
}

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r") == std::string::npos; }

bool contains(const nlohmann::json& obj, const char* key, const std::string& needle) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() && it->get_ref<const std::string&>().find(needle) != std::string::npos;
}

bool matches_container(const nlohmann::json& rec, const std::string& needle) {
  if (needle.empty()) return true;
  auto c = rec.find("container");
  if (c == rec.end() || !c->is_object()) return false;
  return contains(*c, "cgroup_path", needle) || contains(*c, "pod_name", needle) ||
         contains(*c, "container_name", needle);
}

// nullopt, or the exit status of a help or bad command line (printed).
std::optional<int> parse_args(const std::vector<std::string>& args, Options& o, std::ostream& out,
                              std::ostream& err) {
  CLI::App app("", "oomsnap show");
  size_t last = 0;
  std::string file, config;
  // A file named like an option goes after "--" ("-" alone is stdin).
  auto* file_opt = app.add_option("FILE", file)->check(file_name(true));
  auto* last_opt = app.add_option("--last", last)->check(CLI::Range(size_t{1}, size_t{1'000'000}));
  app.add_option("--container", o.container)->check(CLI::Validator(
      [](const std::string& v) { return v.empty() ? std::string("needs a non-empty SUBSTR") : std::string(); },
      "SUBSTR"));
  // --config selects the record store; it does not go with FILE.
  auto* config_opt = app.add_option("--config", config)->excludes(file_opt);
  if (auto rc = parse_command_line(app, args, kUsage, out, err)) return rc;
  if (file_opt->count()) o.file = file;
  if (config_opt->count()) o.config_path = config;
  if (last_opt->count()) o.last = last;
  return std::nullopt;
}

// Opens `path` or says why not, naming it.
std::optional<Input> open_input(const std::string& path, std::string& error) {
  const std::string shown = "'" + terminal_safe(path, 1024) + "'";
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    error = "cannot read " + shown + ": is a directory";
    return std::nullopt;
  }
  Input in;
  in.name = terminal_safe(path, 1024);
  in.file = std::make_unique<std::ifstream>(path, std::ios::binary);
  if (!*in.file) {
    const int e = errno;
    error = "cannot open " + shown + ": " + (e ? std::strerror(e) : "unknown error");
    if (e == EACCES) error += " (the record store is root's alone)";
    return std::nullopt;
  }
  in.stream = in.file.get();
  return in;
}

// The agent's store: the rotated files oldest first (the highest number),
// then the live file, so records come out in the order they were written.
// Returns 0, or the exit status: 2 a bad configuration (as for `watch`), 1 a
// store that cannot be read.
int open_store(const std::string& config_path, std::vector<Input>& inputs, std::ostream& err) {
  AgentConfig config;
  try {
    config = load_config(config_path);
  } catch (const ConfigError& e) {
    err << "oomsnap show: " << terminal_safe(e.what(), 4096) << "\n";
    return 2;
  }
  const std::string live = config.storage_path + "/" + kRecordFileName;
  int rotated = 0;
  struct stat st {};
  while (rotated < kMaxRotated && ::stat((live + "." + std::to_string(rotated + 1)).c_str(), &st) == 0) ++rotated;
  std::string error;
  for (int i = rotated; i >= 1; --i) {
    auto in = open_input(live + "." + std::to_string(i), error);
    if (!in) return err << "oomsnap show: " << error << "\n", 1;
    inputs.push_back(std::move(*in));
  }
  // Just after a rotation there may be no live file yet; the rotated ones
  // are the store then.
  if (rotated > 0 && ::stat(live.c_str(), &st) != 0 && errno == ENOENT) return 0;
  auto in = open_input(live, error);
  if (!in) {
    err << "oomsnap show: " << error;
    if (!config.file_sink) err << " ([storage] LocalFile is off: the agent writes no store)";
    err << "\n";
    return 1;
  }
  inputs.push_back(std::move(*in));
  return 0;
}

}  // namespace

int run_show_command(const std::vector<std::string>& args, std::istream& stdin_stream, std::ostream& out,
                     std::ostream& err, bool terminal) {
  Options o;
  if (auto rc = parse_args(args, o, out, err)) return *rc;

  std::vector<Input> inputs;
  if (o.file && *o.file == "-") {
    inputs.push_back(Input{"<stdin>", nullptr, &stdin_stream});
  } else if (o.file) {
    std::string error;
    auto in = open_input(*o.file, error);
    if (!in) return err << "oomsnap show: " << error << "\n", 1;
    inputs.push_back(std::move(*in));
  } else if (int rc = open_store(o.config_path.value_or(""), inputs, err)) {
    return rc;
  }

  size_t shown = 0, notes = 0;
  auto note = [&](const Input& in, size_t line_no, const char* what) {
    if (++notes <= kMaxNotes) err << "oomsnap show: " << in.name << ":" << line_no << ": " << what << ", skipped\n";
  };
  auto show = [&](const nlohmann::json& rec) {
    out << (shown++ ? "\n" : "") << render_record(rec, RenderOptions{.unicode = terminal});
    out.flush();  // one block at a time for a pipe from `oomsnap watch`
  };
  // With --last N only N parsed records are held, never the whole input.
  std::deque<nlohmann::json> kept;
  std::string line;
  for (Input& in : inputs) {
    size_t line_no = 0;
    for (LineRead r; (r = next_line(*in.stream, line, kMaxLineBytes)) != LineRead::kEnd;) {
      ++line_no;
      if (r == LineRead::kTooLong) {
        note(in, line_no, "longer than 4 MiB, not a record");
        continue;
      }
      if (blank(line)) continue;
      // Invalid UTF-8 inside a string would make the whole line unparseable;
      // repaired, the record shows with U+FFFD where the bad bytes were.
      auto rec = nlohmann::json::parse(repair_utf8(line), nullptr, /*allow_exceptions=*/false);
      if (rec.is_discarded() || !rec.is_object()) {
        note(in, line_no, "not a JSON object");
        continue;
      }
      if (!is_agent_record(rec)) {
        note(in, line_no, "not an oomsnap record (no incident_id and trigger)");
        continue;
      }
      if (!matches_container(rec, o.container)) continue;
      if (!o.last) {
        show(rec);
        continue;
      }
      kept.push_back(std::move(rec));
      if (kept.size() > *o.last) kept.pop_front();
    }
    if (in.stream->bad()) err << "oomsnap show: " << in.name << ": read error after line " << line_no << "\n";
  }
  for (const auto& rec : kept) show(rec);

  if (notes > kMaxNotes) err << "oomsnap show: " << notes - kMaxNotes << " more lines skipped\n";
  if (shown == 0) {
    err << "oomsnap show: no records";
    if (!o.container.empty()) err << " with a container matching '" << terminal_safe(o.container, 512) << "'";
    err << "\n";
    return 1;
  }
  return 0;
}

}  // namespace oomsnap
