#include "agent/cgroup/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <deque>
#include <sstream>

#include "core/proc_info.h"

namespace oomsnap {
namespace {

std::optional<std::string> read_real_file(const std::string& path) {
  std::string text;
  if (!read_text_file(path, text)) return std::nullopt;
  return text;
}

bool path_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

bool list_contains(const std::string& comma_list, const std::string& word) {
  for (const auto& item : split(comma_list, ',')) {
    if (item == word) return true;
  }
  return false;
}

// mountinfo escapes space, tab, newline and backslash in paths as \ooo.
std::string unescape_octal(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() &&
        std::isdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isdigit(static_cast<unsigned char>(s[i + 2])) &&
        std::isdigit(static_cast<unsigned char>(s[i + 3]))) {
      out.push_back(static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// "/a/b/" → "/a/b", "" → "/": one spelling per cgroup so prefixes compare.
std::string strip_trailing_slashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p.empty() ? "/" : p;
}

std::optional<uint64_t> read_value(const std::string& dir, const char* name) {
  auto text = read_real_file(dir + "/" + name);
  if (!text) return std::nullopt;
  return parse_memcg_value(*text);
}

bool is_hex64(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// "<prefix><64hex>.scope" → the hex id, else empty.
std::string scope_id(const std::string& component, const std::string& prefix) {
  const std::string suffix = ".scope";
  if (component.size() != prefix.size() + 64 + suffix.size()) return "";
  if (!component.starts_with(prefix)) return "";
  if (component.compare(component.size() - suffix.size(), suffix.size(), suffix) != 0) return "";
  std::string id = component.substr(prefix.size(), 64);
  return is_hex64(id) ? id : "";
}

bool is_pod_uid(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c)) && c != '-') return false;
  }
  return true;
}

// Pod UID from "kubepods[-<qos>]-pod<uid_with_underscores>.slice" (systemd
// driver) or "pod<uid>" (cgroupfs driver, only meaningful under kubepods).
std::string pod_uid_of(const std::string& component, bool under_kubepods) {
  std::string uid;
  const std::string slice = ".slice";
  auto pos = component.rfind("-pod");
  if (component.starts_with("kubepods") && pos != std::string::npos &&
      component.size() > slice.size() &&
      component.compare(component.size() - slice.size(), slice.size(), slice) == 0) {
    uid = component.substr(pos + 4, component.size() - slice.size() - pos - 4);
    // systemd reserves '-' as the slice hierarchy separator, so the kubelet writes '_'.
    for (char& c : uid) {
      if (c == '_') c = '-';
    }
  } else if (under_kubepods && component.starts_with("pod")) {
    uid = component.substr(3);
  }
  return is_pod_uid(uid) ? uid : "";
}

}  // namespace

std::optional<CgroupFs> find_memory_cgroupfs(const std::string& mountinfo_text, std::string root_override,
                                             const FileReader& read_file) {
  if (!root_override.empty()) {
    while (root_override.size() > 1 && root_override.back() == '/') root_override.pop_back();
    if (path_exists(root_override + "/memory.usage_in_bytes")) return CgroupFs{1, root_override, "/"};
    if (path_exists(root_override + "/memory.current")) return CgroupFs{2, root_override, "/"};
    return std::nullopt;
  }
  const FileReader& reader = read_file ? read_file : FileReader(read_real_file);
  // The same hierarchy can be mounted more than once (e.g. a bind mount of a
  // subtree next to the full one); the mount with the shortest root shows the
  // most cgroups, so it wins, the first one on a tie.
  auto better = [](const std::optional<CgroupFs>& best, const std::string& root) {
    return !best || root.size() < best->root.size();
  };
  std::optional<CgroupFs> v1, v2;
  std::istringstream in(mountinfo_text);
  std::string line;
  while (std::getline(in, line)) {
    // "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS"
    auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream head(line.substr(0, dash));
    std::istringstream tail(line.substr(dash + 3));
    std::string id, parent, dev, root, mountpoint, fstype, source, superopts;
    if (!(head >> id >> parent >> dev >> root >> mountpoint)) continue;
    if (!(tail >> fstype >> source >> superopts)) continue;
    mountpoint = unescape_octal(mountpoint);
    root = strip_trailing_slashes(unescape_octal(root));
    if (fstype == "cgroup" && list_contains(superopts, "memory")) {
      if (better(v1, root)) v1 = CgroupFs{1, mountpoint, root};
    } else if (fstype == "cgroup2" && !v1 && better(v2, root)) {
      // Controllers bound to v1 hierarchies are absent from cgroup2's list
      // (and once a v1 memory mount is known, cgroup2 cannot have it).
      auto controllers = reader(mountpoint + "/cgroup.controllers");
      if (controllers) {
        std::istringstream words(*controllers);
        std::string w;
        while (words >> w) {
          if (w == "memory") {
            v2 = CgroupFs{2, mountpoint, root};
            break;
          }
        }
      }
    }
  }
  // A v1 memory mount means the controller is bound there and cgroup2 cannot
  // have it, whatever a (stale or faked) cgroup.controllers says.
  return v1 ? v1 : v2;
}

std::optional<std::string> memcg_path_of(const std::string& text, int version) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    // "ID:CONTROLLERS:PATH"; the path itself may contain ':'.
    auto c1 = line.find(':');
    if (c1 == std::string::npos) continue;
    auto c2 = line.find(':', c1 + 1);
    if (c2 == std::string::npos) continue;
    std::string hid = line.substr(0, c1), controllers = line.substr(c1 + 1, c2 - c1 - 1);
    std::string path = line.substr(c2 + 1);
    if (path.empty()) continue;
    if (version == 1 && list_contains(controllers, "memory")) return path;
    if (version == 2 && hid == "0" && controllers.empty()) return path;
  }
  return std::nullopt;
}

std::optional<uint64_t> parse_memcg_value(const std::string& text) {
  std::istringstream in(text);
  std::string word;
  if (!(in >> word) || word == "max") return std::nullopt;
  if (!std::isdigit(static_cast<unsigned char>(word[0]))) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(word.c_str(), &end, 10);
  if (errno != 0 || !end || *end != '\0') return std::nullopt;
  return static_cast<uint64_t>(v);
}

std::map<std::string, uint64_t> parse_flat_keyed(const std::string& text) {
  std::map<std::string, uint64_t> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key, value;
    if (!(fields >> key >> value)) continue;
    if (auto v = parse_memcg_value(value)) out[key] = *v;
  }
  return out;
}

namespace {

// v1 has no "max" keyword: unlimited reads as PAGE_COUNTER_MAX * PAGE_SIZE
// (≈ 2^63, rounded down to the page size), so anything ≥ 2^62 is no limit.
std::optional<uint64_t> v1_limit(const std::string& dir) {
  auto v = read_value(dir, "memory.limit_in_bytes");
  if (v && *v >= (uint64_t{1} << 62)) v.reset();
  return v;
}

}  // namespace

MemcgStats read_memcg(const CgroupFs& fs, const std::string& rel_path) {
  MemcgStats s;
  const std::string dir = memcg_dir(fs, rel_path);
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) s.inode = st.st_ino;
  if (fs.version == 1) {
    s.usage_bytes = read_value(dir, "memory.usage_in_bytes");
    s.limit_bytes = v1_limit(dir);
    // v1 only reports swap folded into memsw.usage; the split is not exact, so none.
    if (auto oom = read_real_file(dir + "/memory.oom_control")) s.events = parse_flat_keyed(*oom);
  } else if (fs.version == 2) {
    s.usage_bytes = read_value(dir, "memory.current");
    s.limit_bytes = read_value(dir, "memory.max");
    s.high_bytes = read_value(dir, "memory.high");
    s.swap_bytes = read_value(dir, "memory.swap.current");
    if (auto ev = read_real_file(dir + "/memory.events")) s.events = parse_flat_keyed(*ev);
  }
  return s;
}

MemcgStats read_memcg_limits(const CgroupFs& fs, const std::string& rel_path) {
  MemcgStats s;
  const std::string dir = memcg_dir(fs, rel_path);
  if (fs.version == 1) {
    s.limit_bytes = v1_limit(dir);
  } else if (fs.version == 2) {
    s.limit_bytes = read_value(dir, "memory.max");
    s.high_bytes = read_value(dir, "memory.high");
  }
  return s;
}

MemcgStats read_memcg_usage(const CgroupFs& fs, const std::string& rel_path) {
  MemcgStats s;
  const std::string dir = memcg_dir(fs, rel_path);
  s.usage_bytes = read_value(dir, fs.version == 1 ? "memory.usage_in_bytes" : "memory.current");
  return s;
}

std::vector<pid_t> cgroup_pids(const CgroupFs& fs, const std::string& rel_path) {
  std::vector<pid_t> pids;
  auto text = read_real_file(memcg_dir(fs, rel_path) + "/cgroup.procs");
  if (!text) return pids;
  std::istringstream in(*text);
  std::string word;
  while (in >> word) {
    if (auto v = parse_memcg_value(word); v && *v > 0 && *v <= 0x7fffffffu) {
      pids.push_back(static_cast<pid_t>(*v));
    }
  }
  return pids;
}

std::optional<ContainerRef> container_of(const std::string& cgroup_path) {
  std::optional<ContainerRef> found;
  std::string pod_uid;
  bool under_kubepods = false;
  std::string prev;
  for (const auto& c : split(cgroup_path, '/')) {
    if (c.empty()) continue;
    if (c == "kubepods" || c.starts_with("kubepods")) under_kubepods = true;
    if (auto uid = pod_uid_of(c, under_kubepods); !uid.empty()) pod_uid = uid;
    ContainerRef ref;
    if (auto id = scope_id(c, "docker-"); !id.empty()) ref = {"docker", id, ""};
    else if (auto id = scope_id(c, "cri-containerd-"); !id.empty()) ref = {"containerd", id, ""};
    else if (auto id = scope_id(c, "crio-"); !id.empty()) ref = {"cri-o", id, ""};
    else if (is_hex64(c) && prev == "docker") ref = {"docker", c, ""};
    // cgroupfs driver: a bare id under the pod directory; the runtime is not named.
    else if (is_hex64(c) && !pod_uid.empty()) ref = {"", c, ""};
    // Innermost match wins (e.g. docker-in-docker nests /docker/<id>/docker/<id>).
    if (!ref.id.empty()) found = ref;
    prev = c;
  }
  if (found && under_kubepods) found->pod_uid = pod_uid;
  return found;
}

std::optional<double> usage_ratio(const MemcgStats& s) {
  if (!s.usage_bytes || !s.limit_bytes || *s.limit_bytes == 0) return std::nullopt;
  return static_cast<double>(*s.usage_bytes) / static_cast<double>(*s.limit_bytes);
}

std::string memcg_dir(const CgroupFs& fs, const std::string& rel_path) {
  std::string dir = fs.mount;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (rel_path.empty() || rel_path == "/") return dir;
  if (rel_path.front() != '/') dir.push_back('/');
  return dir + rel_path;
}

std::optional<std::string> to_mount_relative(const CgroupFs& fs, const std::string& proc_cgroup_path) {
  if (proc_cgroup_path.empty() || proc_cgroup_path.front() != '/') return std::nullopt;
  for (const auto& c : split(proc_cgroup_path, '/')) {
    if (c == "..") return std::nullopt;
  }
  const std::string path = strip_trailing_slashes(proc_cgroup_path);
  const std::string root = strip_trailing_slashes(fs.root);
  if (root == "/") return path;
  if (path == root) return std::string("/");
  // A whole-component prefix: root "/a/b" must not match "/a/bc".
  if (path.size() > root.size() && path.starts_with(root) && path[root.size()] == '/') {
    return path.substr(root.size());
  }
  return std::nullopt;
}

std::optional<std::string> memcg_rel_path_of(const CgroupFs& fs, const std::string& proc_cgroup_text) {
  auto path = memcg_path_of(proc_cgroup_text, fs.version);
  if (!path) return std::nullopt;
  return to_mount_relative(fs, *path);
}

std::string parent_of(const std::string& rel_path) {
  const std::string p = strip_trailing_slashes(rel_path);
  auto slash = p.rfind('/');
  if (slash == std::string::npos || slash == 0) return "/";
  return p.substr(0, slash);
}

std::vector<MemcgNode> list_memcgs(const CgroupFs& fs, const std::string& under_rel_path, size_t max_nodes,
                                   int max_depth) {
  std::vector<MemcgNode> out;
  if (max_nodes == 0) return out;
  struct Pending {
    std::string rel_path;
    int depth;
  };
  std::deque<Pending> queue{{strip_trailing_slashes(under_rel_path.empty() ? "/" : under_rel_path), 0}};
  while (!queue.empty() && out.size() < max_nodes) {
    Pending cur = std::move(queue.front());
    queue.pop_front();
    // O_NOFOLLOW: the last component was seen as a directory in its parent's
    // listing, but it may have been swapped for a symlink since (or be one at
    // the start); refusing it keeps the walk inside the tree.
    int dfd = ::open(memcg_dir(fs, cur.rel_path).c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) continue;  // removed meanwhile, or not a directory: nothing to list
    struct stat st;
    if (::fstat(dfd, &st) != 0) {
      ::close(dfd);
      continue;
    }
    out.push_back({cur.rel_path, static_cast<uint64_t>(st.st_ino)});
    if (cur.depth >= max_depth) {
      ::close(dfd);
      continue;
    }
    DIR* dir = ::fdopendir(dfd);  // owns dfd from here on
    if (!dir) {
      ::close(dfd);
      continue;
    }
    std::vector<std::string> children;
    while (struct dirent* e = ::readdir(dir)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      bool is_dir = e->d_type == DT_DIR;
      if (e->d_type == DT_UNKNOWN) {  // file systems without d_type: ask, without following links
        struct stat cst;
        is_dir = ::fstatat(::dirfd(dir), e->d_name, &cst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(cst.st_mode);
      }
      if (is_dir) children.push_back(name);
    }
    ::closedir(dir);
    std::sort(children.begin(), children.end());
    const std::string prefix = cur.rel_path == "/" ? "" : cur.rel_path;
    for (auto& c : children) {
      // Never queue more than could be returned: one directory with a
      // million children must not cost a million strings.
      if (out.size() + queue.size() >= max_nodes) break;
      queue.push_back({prefix + "/" + c, cur.depth + 1});
    }
  }
  return out;
}

}  // namespace oomsnap
