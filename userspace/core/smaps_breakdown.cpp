#include "core/smaps_breakdown.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <string_view>
#include <unordered_map>

#include "base/log_escape.h"
#include "base/text.h"
#include "base/unique_fd.h"

namespace oomsnap {
namespace {

using std::string_view;

// A thread stack's guard: glibc's page, the JVM's red/yellow/reserved zones
// (4 pages). Less than HotSpot's 64 KiB metaspace commit granule, so that an
// uncommitted granule below a committed one is not taken for a guard.
constexpr uint64_t kMaxGuardBytes = 32 * 1024;

bool hex_u64(string_view s, uint64_t& v) {
  if (s.empty() || s.size() > 16) return false;
  v = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  return true;
}

bool dec_u64(string_view s, uint64_t& v) {
  if (s.empty() || s.size() > 19) return false;  // 19 digits cannot overflow
  v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return true;
}

// Splits off the next field separated by one or more spaces.
string_view next_field(string_view& s) {
  size_t b = s.find_first_not_of(' ');
  if (b == string_view::npos) return s = {}, string_view{};
  s.remove_prefix(b);
  size_t e = s.find(' ');
  string_view f = s.substr(0, e);
  s.remove_prefix(e == string_view::npos ? s.size() : e);
  return f;
}

bool parse_device(string_view s, int base, DeviceNumber& d) {
  size_t colon = s.find(':');
  if (colon == string_view::npos) return false;
  uint64_t major = 0, minor = 0;
  bool ok = base == 16 ? hex_u64(s.substr(0, colon), major) && hex_u64(s.substr(colon + 1), minor)
                       : dec_u64(s.substr(0, colon), major) && dec_u64(s.substr(colon + 1), minor);
  if (!ok || major > 0xffffffffu || minor > 0xffffffffu) return false;
  d = {static_cast<uint32_t>(major), static_cast<uint32_t>(minor)};
  return true;
}

struct Header {
  uint64_t start = 0, end = 0;
  string_view perms, name;
  DeviceNumber dev{};
  uint64_t inode = 0;
};

// "start-end perms offset major:minor inode [name]"
bool parse_header(string_view line, Header& h) {
  string_view rest = line;
  string_view range = next_field(rest), offset, dev, inode;
  size_t dash = range.find('-');
  if (dash == string_view::npos || !hex_u64(range.substr(0, dash), h.start) ||
      !hex_u64(range.substr(dash + 1), h.end) || h.start >= h.end)
    return false;
  h.perms = next_field(rest);
  if (h.perms.size() != 4) return false;
  uint64_t off = 0;
  offset = next_field(rest);
  dev = next_field(rest);
  inode = next_field(rest);
  if (!hex_u64(offset, off) || !parse_device(dev, 16, h.dev) || !dec_u64(inode, h.inode)) return false;
  size_t b = rest.find_first_not_of(' ');
  h.name = b == string_view::npos ? string_view{} : rest.substr(b);
  return true;
}

// Files the kernel keeps on its internal shm mount (not in any mount table):
// memfd_create, SysV shared memory, shared anonymous mappings.
bool internal_shmem_name(string_view name) {
  return name.rfind("/memfd:", 0) == 0 || name.rfind("/SYSV", 0) == 0 || name == "/dev/zero (deleted)" ||
         name.rfind("[anon_shmem:", 0) == 0;
}

std::string kib_text(uint64_t bytes) { return std::to_string(bytes / 1024) + " kB"; }

}  // namespace

bool TmpfsDevices::contains(DeviceNumber d) const { return std::binary_search(devices.begin(), devices.end(), d); }

namespace {

// A mount point as mountinfo escapes it (space, tab, newline and backslash
// as \ooo), undone.
std::string unescape_mount_point(string_view s) {
  std::string out;
  out.reserve(s.size());
  auto octal = [](char c, char top) { return c >= '0' && c <= top; };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && s.size() - i >= 4 && octal(s[i + 1], '3') && octal(s[i + 2], '7') && octal(s[i + 3], '7')) {
      out.push_back(static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// Calls fn(device, mount point as escaped, fstype) for each well-formed line
// of a /proc/PID/mountinfo text, at most kMaxMountEntries of them; returns
// the reason when the table was cut there.
template <typename Fn>
std::string for_each_mount(string_view text, Fn fn) {
  size_t entries = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    string_view line = text.substr(0, nl);
    text.remove_prefix(nl == string_view::npos ? text.size() : nl + 1);
    if (++entries > kMaxMountEntries) return "mount table cut at " + std::to_string(kMaxMountEntries) + " entries";
    // "id parent major:minor root mountpoint options [optional...] - fstype source super"
    string_view rest = line;
    next_field(rest);
    next_field(rest);
    DeviceNumber dev{};
    if (!parse_device(next_field(rest), 10, dev)) continue;
    next_field(rest);
    const string_view point = next_field(rest);
    size_t sep = rest.find(" - ");
    if (point.empty() || point[0] != '/' || sep == string_view::npos) continue;
    rest.remove_prefix(sep + 3);
    fn(dev, point, next_field(rest));
  }
  return {};
}

}  // namespace

TmpfsDevices parse_tmpfs_devices(string_view text) {
  TmpfsDevices t;
  t.reason = for_each_mount(text, [&t](DeviceNumber dev, string_view, string_view fstype) {
    if (fstype == "tmpfs" || fstype == "devtmpfs") t.devices.push_back(dev);
  });
  std::sort(t.devices.begin(), t.devices.end());
  t.devices.erase(std::unique(t.devices.begin(), t.devices.end()), t.devices.end());
  return t;
}

TmpfsMountTable parse_tmpfs_mounts(string_view text) {
  TmpfsMountTable t;
  std::vector<DeviceNumber> seen;
  t.reason = for_each_mount(text, [&](DeviceNumber dev, string_view point, string_view fstype) {
    std::string p = unescape_mount_point(point);
    if (fstype == "tmpfs" && std::find(seen.begin(), seen.end(), dev) == seen.end()) {
      seen.push_back(dev);
      t.tmpfs.push_back({p, dev});
    }
    t.all_points.push_back(std::move(p));
  });
  std::sort(t.all_points.begin(), t.all_points.end());
  return t;
}

namespace {

// smaps, line by line, so that it can be read in chunks of a fixed buffer
// (a 10,000-mapping smaps is 7 MiB of text: never held whole).
class SmapsParser {
  // Past kReserveAfter mappings, room for as many as may be read, at once:
  // growing by doubling copied a 10,000-mapping table ~14 times into fresh
  // pages (a third of the maps read's time). Pages never reached are never
  // touched; a small process (or a fuzzer's input) reserves nothing.
  static constexpr size_t kReserveAfter = 1024, kMaxReserved = 1u << 16;

 public:
  // maps_only: /proc/PID/maps, the same header lines without the fields
  // (no page walk): resident bytes are left for the pagemap scan to add.
  SmapsParser(const SmapsLimits& limits, const TmpfsDevices& tmpfs, bool maps_only = false)
      : limits_(limits), tmpfs_(tmpfs), maps_only_(maps_only), file_(maps_only ? "maps" : "smaps") {}
  // One line without its '\n'; false once the read is over (cut or refused).
  bool line(string_view line);
  // At the end of the text, or where the byte bound or a short read stopped
  // it (whole = false: the last mapping may be incomplete and is left out).
  SmapsRead finish(bool whole);

 private:
  bool refuse(string_view why, string_view line) {
    r_.error = std::string(file_) + " line " + std::to_string(line_no_) + " " + std::string(why) + ": '" +
               printable(line.substr(0, 80)) + "'";
    r_.mappings.clear();
    return false;
  }
  bool header(string_view line);

  const SmapsLimits& limits_;
  const TmpfsDevices& tmpfs_;
  const bool maps_only_;
  const char* const file_;
  SmapsRead r_;
  size_t line_no_ = 0;
  bool have_rss_ = true;     // of the mapping being read (true before the first: nothing pending)
  bool have_flags_ = false;  // its VmFlags, the last line the kernel writes for it
  uint64_t prev_start_ = 0, prev_end_ = 0;  // the mapping before, for the thread-stack guard
  bool prev_anon_none_ = false;
};

bool kb_value(string_view rest, uint64_t& bytes) {
  string_view n = next_field(rest), unit = next_field(rest);
  uint64_t kb = 0;
  if (unit != "kB" || !next_field(rest).empty() || !dec_u64(n, kb) || kb > (uint64_t{1} << 50)) return false;
  bytes = kb * 1024;
  return true;
}

bool SmapsParser::header(string_view line) {
  if (!have_rss_) return refuse("ends a mapping that had no Rss", line);
  if (r_.mappings.size() >= limits_.max_mappings) {
    r_.cut = true;
    r_.reason = std::string(file_) + " cut at " + std::to_string(limits_.max_mappings) + " mappings";
    return false;
  }
  if ((r_.mappings.size() & 255) == 255 && std::chrono::steady_clock::now() >= limits_.deadline) {
    r_.cut = true;
    r_.reason = std::string(file_) + " cut at its deadline after " + std::to_string(r_.mappings.size()) + " mappings";
    return false;
  }
  Header h;
  if (!parse_header(line, h)) return refuse("is neither a mapping nor a field", line);
  if (!r_.mappings.empty() && h.start < r_.mappings.back().end) return refuse("is out of address order", line);
  SmapsMapping m;
  m.start = h.start;
  m.end = h.end;
  const bool shmem = (h.inode != 0 && tmpfs_.contains(h.dev)) || internal_shmem_name(h.name) ||
                     (tmpfs_.devices.empty() && h.name.rfind("/dev/shm/", 0) == 0);
  m.rest_kind = shmem ? MemoryKind::kShmem : MemoryKind::kFile;
  // The kernel's own names (a file's name starts with '/', an anonymous
  // one's with "[anon"): the vDSO data pages are mapped by pfn, present in
  // the page tables but no process's RSS.
  m.not_rss = h.name == "[vvar]" || h.name == "[vvar_vclock]";
  m.vsyscall = h.name == "[vsyscall]";
  // The kernel's special mappings ([vdso], [vvar], [uprobes]) hold pages
  // that are not anonymous: only unnamed, heap, stack and named anonymous
  // memory is taken as such.
  m.anon_only = h.inode == 0 && h.perms.size() == 4 && h.perms[3] == 'p' &&
                (h.name.empty() || h.name == "[heap]" || h.name == "[stack]" || h.name.rfind("[anon", 0) == 0);
  const bool guard_below = prev_anon_none_ && prev_end_ == h.start && prev_end_ - prev_start_ <= kMaxGuardBytes;
  if (h.name == "[stack]") {
    m.anon_kind = MemoryKind::kStacks;
  } else if (h.name.empty() && h.inode == 0 && h.perms.substr(0, 2) == "rw" && guard_below) {
    m.anon_kind = MemoryKind::kStacks;
    ++r_.thread_stacks;
  }
  if (!h.name.empty()) {
    std::string kept(h.name.substr(0, limits_.max_name));
    if (h.name.size() > limits_.max_name) kept += "...";
    if (r_.names.back() != kept) r_.names.push_back(std::move(kept));
    m.name = static_cast<uint32_t>(r_.names.size() - 1);
  }
  prev_anon_none_ = h.inode == 0 && h.name.empty() && h.perms.substr(0, 3) == "---";
  prev_start_ = h.start;
  prev_end_ = h.end;
  if (r_.mappings.size() == kReserveAfter) r_.mappings.reserve(std::min(limits_.max_mappings, kMaxReserved));
  r_.mappings.push_back(m);
  have_rss_ = maps_only_;
  have_flags_ = maps_only_;
  return true;
}

bool SmapsParser::line(string_view line) {
  ++line_no_;
  if (line.empty()) return true;
  size_t colon = line.find(':');
  size_t space = line.find(' ');
  // A field line is "Key: value"; a header starts with "start-end ".
  const bool field = colon != string_view::npos && (space == string_view::npos || colon < space);
  if (!field) return header(line);
  if (maps_only_) return refuse("is a field, not a mapping", line);
  if (r_.mappings.empty()) return refuse("is a field before any mapping", line);
  string_view key = line.substr(0, colon), rest = line.substr(colon + 1);
  for (char c : key)
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
      return refuse("has a key that is not a word", line);
  SmapsMapping& m = r_.mappings.back();
  if (key == "Rss") {
    // A second Rss could undercut the Anonymous checked against the first.
    if (have_rss_) return refuse("is a second Rss of one mapping", line);
    if (!kb_value(rest, m.rss) || m.rss > m.end - m.start) return refuse("has an Rss that does not fit", line);
    have_rss_ = true;
  } else if (key == "Anonymous") {
    if (!kb_value(rest, m.anonymous) || !have_rss_ || m.anonymous > m.rss)
      return refuse("has an Anonymous that does not fit", line);
  } else if (key == "VmFlags") {
    have_flags_ = true;
  }
  return true;
}

SmapsRead SmapsParser::finish(bool whole) {
  if (r_.error.empty() && !whole && !r_.mappings.empty() && !have_flags_) {
    r_.mappings.pop_back();  // cut in two by the bound: leave it out
    have_rss_ = true;
  }
  if (r_.error.empty() && !r_.cut && !have_rss_) refuse("ends a mapping that had no Rss", "");
  return std::move(r_);
}

}  // namespace

namespace {

SmapsRead parse_text(string_view text, const SmapsLimits& limits, const TmpfsDevices& tmpfs, bool maps_only) {
  SmapsParser p(limits, tmpfs, maps_only);
  while (!text.empty()) {
    size_t nl = text.find('\n');
    string_view line = text.substr(0, nl);
    text.remove_prefix(nl == string_view::npos ? text.size() : nl + 1);
    if (!p.line(line)) break;
  }
  return p.finish(true);
}

}  // namespace

SmapsRead parse_smaps(string_view text, const SmapsLimits& limits, const TmpfsDevices& tmpfs) {
  return parse_text(text, limits, tmpfs, false);
}

SmapsRead parse_maps(string_view text, const SmapsLimits& limits, const TmpfsDevices& tmpfs) {
  return parse_text(text, limits, tmpfs, true);
}

namespace {

// The claim's ranges sorted and merged: a range given twice (a crafted
// runtime structure) is counted once.
std::vector<AddressRange> merged(std::vector<AddressRange> ranges) {
  std::sort(ranges.begin(), ranges.end(), [](const auto& x, const auto& y) { return x.start < y.start; });
  std::vector<AddressRange> out;
  for (const AddressRange& r : ranges) {
    if (r.end <= r.start) continue;
    if (!out.empty() && r.start <= out.back().end) out.back().end = std::max(out.back().end, r.end);
    else out.push_back(r);
  }
  return out;
}

}  // namespace

MemoryBreakdown build_breakdown(const SmapsRead& read, const std::vector<MemoryClaim>& claims,
                                const ProcessMemory& status, const ResidentAnonFn& resident_anon) {
  MemoryBreakdown b;
  if (!read.error.empty()) {
    b.reason = read.error;
    return b;
  }
  b.mappings = read.mappings.size();
  b.source = read.source;
  // Native bytes per mapping, from which the claims take theirs.
  std::vector<uint64_t> native(read.mappings.size());
  for (size_t i = 0; i < read.mappings.size(); ++i) {
    const SmapsMapping& m = read.mappings[i];
    b.at(m.rest_kind) += m.rss - m.anonymous;
    b.at(m.anon_kind) += m.anonymous;
    if (m.anon_kind == MemoryKind::kNative) native[i] = m.anonymous;
  }
  bool by_span = false;
  for (const MemoryClaim& c : claims) {
    const uint64_t most = c.max_bytes.value_or(UINT64_MAX);
    uint64_t taken = 0;
    if (c.ranges.empty() && c.max_bytes) {
      // A count without addresses: from the unnamed anonymous memory and
      // malloc's brk heap (large objects malloc'd there are the runtime's).
      for (size_t j = 0; j < read.mappings.size() && taken < most; ++j) {
        if (read.mappings[j].name && read.names[read.mappings[j].name] != "[heap]") continue;
        const uint64_t t = std::min(native[j], most - taken);
        native[j] -= t;
        taken += t;
      }
    }
    size_t mi = 0;
    for (const AddressRange& r : merged(c.ranges)) {
      if (taken >= most) break;
      while (mi < read.mappings.size() && read.mappings[mi].end <= r.start) ++mi;
      for (size_t j = mi; j < read.mappings.size() && read.mappings[j].start < r.end && taken < most; ++j) {
        if (!native[j]) continue;
        const uint64_t lo = std::max(r.start, read.mappings[j].start), hi = std::min(r.end, read.mappings[j].end);
        std::optional<uint64_t> resident = resident_anon ? resident_anon(lo, hi) : std::nullopt;
        if (!resident) by_span = true;
        const uint64_t t = std::min({resident.value_or(hi - lo), hi - lo, native[j], most - taken});
        native[j] -= t;
        taken += t;
      }
    }
    b.at(MemoryKind::kNative) -= taken;
    b.at(c.kind) += taken;
    if (taken) b.add_detail(c.kind, c.what, taken);
  }
  // Detail: files and named anonymous memory by name, unnamed native memory
  // by mapping, thread stacks together.
  std::unordered_map<uint64_t, uint64_t> by_name;  // (name << 8 | kind) -> bytes
  uint64_t thread_stack_bytes = 0;
  // Unnamed anonymous mappings: only the largest can be in the detail, so
  // only those are kept and named (by address range): naming every one
  // cost a 10,000-mapping process ~2 ms, and a list of all of them ~1 ms of
  // page faults in a fresh capture process.
  struct Unnamed {
    uint64_t bytes;
    size_t i;
  };
  // Largest first, then by kind and address (the detail's own order).
  auto before = [&](const Unnamed& x, const Unnamed& y) {
    const SmapsMapping &mx = read.mappings[x.i], &my = read.mappings[y.i];
    return std::tie(y.bytes, mx.anon_kind, mx.start) < std::tie(x.bytes, my.anon_kind, my.start);
  };
  constexpr size_t kMost = MemoryBreakdown::kMaxDetail;
  std::vector<Unnamed> largest;  // at most kMost, in that order
  largest.reserve(kMost + 1);
  for (size_t i = 0; i < read.mappings.size(); ++i) {
    const SmapsMapping& m = read.mappings[i];
    const uint64_t rest = m.rss - m.anonymous;
    if (rest && m.name) by_name[uint64_t{m.name} << 8 | static_cast<uint64_t>(m.rest_kind)] += rest;
    const uint64_t anon = m.anon_kind == MemoryKind::kNative ? native[i] : m.anonymous;
    if (!anon) continue;
    if (m.anon_kind == MemoryKind::kStacks && !m.name) thread_stack_bytes += anon;
    else if (m.name) by_name[uint64_t{m.name} << 8 | static_cast<uint64_t>(m.anon_kind)] += anon;
    else if (const Unnamed u{anon, i}; largest.size() < kMost || before(u, largest.back())) {
      largest.insert(std::upper_bound(largest.begin(), largest.end(), u, before), u);
      if (largest.size() > kMost) largest.pop_back();
    }
  }
  for (const Unnamed& u : largest) {
    const SmapsMapping& m = read.mappings[u.i];
    b.add_detail(m.anon_kind, "anonymous mapping " + hex(m.start) + "-" + hex(m.end), u.bytes);
  }
  for (const auto& [key, bytes] : by_name)
    b.add_detail(static_cast<MemoryKind>(key & 0xff), read.names[key >> 8], bytes);
  if (thread_stack_bytes)
    b.add_detail(MemoryKind::kStacks, "thread stacks (" + std::to_string(read.thread_stacks) + ")",
                 thread_stack_bytes);
  b.status = "complete";
  if (read.cut) {
    // What the status counters hold beyond what was read, by the kernel's split.
    b.status = "partial";
    auto rest = [](std::optional<uint64_t> counted, uint64_t read_bytes) {
      return counted && *counted > read_bytes ? *counted - read_bytes : 0;
    };
    uint64_t anon_read = 0;
    for (const SmapsMapping& m : read.mappings) anon_read += m.anonymous;
    const uint64_t more_anon = rest(status.rss_anon_bytes, anon_read);
    const uint64_t more_file = rest(status.rss_file_bytes, b.at(MemoryKind::kFile));
    const uint64_t more_shmem = rest(status.rss_shmem_bytes, b.at(MemoryKind::kShmem));
    b.at(MemoryKind::kNative) += more_anon;
    b.at(MemoryKind::kFile) += more_file;
    b.at(MemoryKind::kShmem) += more_shmem;
    if (more_anon) b.add_detail(MemoryKind::kNative, "anonymous memory in mappings not read", more_anon);
    b.reason = read.reason + "; the mappings not read are counted from /proc/PID/status (" +
               kib_text(more_anon + more_file + more_shmem) + ")";
  } else if (!read.reason.empty()) {
    b.reason = read.reason;
  }
  if (by_span) {
    const std::string note = "runtime claims counted by address span where pagemap could not say what is resident";
    b.reason = b.reason.empty() ? note : b.reason + "; " + note;
  }
  b.finish_detail();
  return b;
}

namespace {

SmapsRead read_chunked(int fd, const SmapsLimits& limits, const TmpfsDevices& tmpfs, bool maps_only) {
  const std::string file = maps_only ? "maps" : "smaps";
  // In chunks of one buffer, line by line: the text is never held whole (a
  // 10,000-mapping smaps is 7 MiB, and fresh pages for it cost more than
  // the parse).
  SmapsRead r;
  SmapsParser parser(limits, tmpfs, maps_only);
  std::vector<char> buf(kSmapsChunk);
  size_t have = 0, total = 0;
  bool whole = false, going = true, past_deadline = false;
  while (going) {
    if (total >= limits.max_bytes) break;
    if (std::chrono::steady_clock::now() >= limits.deadline) {
      past_deadline = true;
      break;
    }
    const size_t want = std::min(buf.size() - have, limits.max_bytes - total);
    const ssize_t n = ::read(fd, buf.data() + have, want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      r.error = "cannot read " + file + ": " + errno_text(err);
      return r;
    }
    if (n == 0) {
      whole = true;
      if (have) going = parser.line(string_view(buf.data(), have));  // a last line without '\n'
      have = 0;
      break;
    }
    total += static_cast<size_t>(n);
    have += static_cast<size_t>(n);
    size_t from = 0;
    for (size_t nl; going && (nl = string_view(buf.data() + from, have - from).find('\n')) != string_view::npos;
         from += nl + 1)
      going = parser.line(string_view(buf.data() + from, nl));
    if (!going) break;
    std::memmove(buf.data(), buf.data() + from, have - from);
    have -= from;
    if (have == buf.size()) {  // one line longer than the buffer: not smaps
      r.error = file + " holds a line longer than " + std::to_string(kSmapsChunk) + " bytes";
      return r;
    }
  }
  r = parser.finish(whole || !going);
  if (r.error.empty() && !r.cut && !whole && going) {
    r.cut = true;
    r.reason = past_deadline ? file + " cut at its deadline after " + std::to_string(r.mappings.size()) + " mappings"
                             : file + " cut at " + kib_text(limits.max_bytes) + " of text (" +
                                   std::to_string(r.mappings.size()) + " mappings)";
  }
  return r;
}

}  // namespace

SmapsRead read_smaps_fd(int fd, const SmapsLimits& limits, const TmpfsDevices& tmpfs) {
  return read_chunked(fd, limits, tmpfs, false);
}

SmapsRead read_maps_fd(int fd, const SmapsLimits& limits, const TmpfsDevices& tmpfs) {
  return read_chunked(fd, limits, tmpfs, true);
}

MountInfoText read_mountinfo(const ProcFiles& proc, std::chrono::steady_clock::time_point deadline) {
  MountInfoText m;
  if (!proc.read(ProcFile::kMountinfo, m.text, kMaxMountinfoBytes, deadline, m.cut))
    m.error = "cannot read " + proc.path(ProcFile::kMountinfo);
  return m;
}

TmpfsDevices tmpfs_devices_of(const MountInfoText& mountinfo) {
  TmpfsDevices tmpfs;
  if (!mountinfo.error.empty()) {
    tmpfs.reason = mountinfo.error + " (tmpfs files taken from /dev/shm only)";
  } else {
    tmpfs = parse_tmpfs_devices(mountinfo.text);
    if (mountinfo.cut && tmpfs.reason.empty()) tmpfs.reason = "mount table cut at " + kib_text(kMaxMountinfoBytes);
  }
  return tmpfs;
}

TmpfsDevices read_tmpfs_devices(const ProcFiles& proc, std::chrono::steady_clock::time_point deadline) {
  return tmpfs_devices_of(read_mountinfo(proc, deadline));
}

SmapsRead read_smaps(const ProcFiles& proc, const SmapsLimits& limits) {
  return read_smaps(proc, limits, read_tmpfs_devices(proc, limits.deadline));
}

SmapsRead read_smaps(const ProcFiles& proc, const SmapsLimits& limits, const TmpfsDevices& tmpfs) {
  const int fd = proc.fd_at_start(ProcFile::kSmaps);
  const int err = errno;
  SmapsRead r;
  if (fd < 0) r.error = "cannot read " + proc.path(ProcFile::kSmaps) + ": " + errno_text(err);
  else r = read_smaps_fd(fd, limits, tmpfs);
  if (!tmpfs.reason.empty()) r.reason = r.reason.empty() ? tmpfs.reason : r.reason + "; " + tmpfs.reason;
  return r;
}

}  // namespace oomsnap
