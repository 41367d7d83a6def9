#include "agent/cgroup/pod_identity.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "base/text.h"

namespace oomsnap {

namespace {

// A directory below the root, never a symlink to one (O_NOFOLLOW: ELOOP),
// and never anything else: with O_DIRECTORY the kernel refuses a FIFO or a
// device (ENOTDIR) before its open would run, so a FIFO planted under a pod
// directory's name cannot make the agent wait for a writer.
constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

// Pod directories with the wanted uid that are opened. Kubelet makes one; a
// second is planted (or stale) and makes the answer ambiguous either way.
constexpr size_t kMaxPodDirCandidates = 4;

struct Budget {
  size_t used = 0;
  bool ran_out = false;
};

// One directory's entries, read through an fd it owns.
class Dir {
 public:
  Dir(int parent_fd, const char* name) {
    const int fd = ::openat(parent_fd, name, kDirFlags);
    if (fd < 0) {
      error_ = errno;
      return;
    }
    dir_ = ::fdopendir(fd);
    if (!dir_) {
      error_ = errno;
      ::close(fd);
    }
  }
  ~Dir() {
    if (dir_) ::closedir(dir_);
  }
  Dir(const Dir&) = delete;
  Dir& operator=(const Dir&) = delete;

  bool ok() const { return dir_ != nullptr; }
  int error() const { return error_; }
  int fd() const { return ::dirfd(dir_); }

  // fn(name, d_type) for every entry but "." and "..", each counted against
  // the budget (those two as well: they are read too). false when the budget
  // ran out before the end of the directory. A read error ends the listing
  // as if the directory ended there.
  template <class Fn>
  bool each(Budget& budget, Fn&& fn) {
    while (true) {
      if (budget.used >= kPodLogMaxEntries) {
        budget.ran_out = true;
        return false;
      }
      const struct dirent* e = ::readdir(dir_);
      if (!e) return true;
      ++budget.used;
      const std::string_view name(e->d_name);
      if (name == "." || name == "..") continue;
      fn(name, e->d_type);
    }
  }

 private:
  DIR* dir_ = nullptr;
  int error_ = 0;
};

bool is_lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool is_lower_hex(char c) { return (c >= 'a' && c <= 'f') || (c >= '0' && c <= '9'); }

bool all_lower_hex(std::string_view s) {
  for (char c : s)
    if (!is_lower_hex(c)) return false;
  return true;
}

bool label_ok(std::string_view s) {
  if (s.empty() || s.size() > 63 || !is_lower_alnum(s.front()) || !is_lower_alnum(s.back())) return false;
  for (char c : s)
    if (!is_lower_alnum(c) && c != '-') return false;
  return true;
}

bool subdomain_ok(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (true) {
    const size_t dot = s.find('.', start);
    if (!label_ok(s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start)))
      return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

// What the kubelet names a pod by: the API server's UUID, or for a static
// pod (a manifest file on the node: etcd, kube-apiserver, ...) the 32 hex
// digits of its manifest's hash. Both lower case, as the kubelet writes them.
bool is_pod_uid(std::string_view s) {
  if (s.size() == 32) return all_lower_hex(s);
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? s[i] != '-' : !is_lower_hex(s[i])) return false;
  }
  return true;
}

bool is_container_id(std::string_view s) { return s.size() == 64 && all_lower_hex(s); }

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// "<namespace>_<pod-name>_<uid>" for this uid → namespace and pod name. Names
// have no '_' (the rules exclude it), so the split is exact.
std::optional<std::pair<std::string, std::string>> parse_pod_dir(std::string_view name, const std::string& uid) {
  const std::string tail = "_" + uid;
  if (!ends_with(name, tail)) return std::nullopt;
  const std::string_view rest = name.substr(0, name.size() - tail.size());
  const size_t sep = rest.find('_');
  if (sep == std::string_view::npos) return std::nullopt;
  const std::string_view ns = rest.substr(0, sep), pod = rest.substr(sep + 1);
  if (!label_ok(ns) || !subdomain_ok(pod)) return std::nullopt;
  return std::make_pair(std::string(ns), std::string(pod));
}

// "<prefix><container-name>-<64 hex>.log" → container name and id.
std::optional<std::pair<std::string, std::string>> parse_container_link(std::string_view name,
                                                                        std::string_view prefix) {
  constexpr std::string_view kLog = ".log";
  constexpr size_t kIdLen = 64;
  if (name.substr(0, prefix.size()) != prefix || !ends_with(name, kLog)) return std::nullopt;
  const std::string_view rest = name.substr(prefix.size(), name.size() - prefix.size() - kLog.size());
  if (rest.size() < kIdLen + 2 || rest[rest.size() - kIdLen - 1] != '-') return std::nullopt;
  const std::string_view container = rest.substr(0, rest.size() - kIdLen - 1);
  const std::string_view id = rest.substr(rest.size() - kIdLen);
  if (!label_ok(container) || !is_container_id(id)) return std::nullopt;
  return std::make_pair(std::string(container), std::string(id));
}

bool is_directory_entry(int dir_fd, std::string_view name, unsigned char d_type) {
  if (d_type != DT_UNKNOWN) return d_type == DT_DIR;
  // File systems without d_type: ask, without following a symlink.
  struct stat st;
  return ::fstatat(dir_fd, std::string(name).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

// The container name of `container_id` in pod `id`, whose log directory is
// pod_dir; nullopt (with notes->why) when it cannot be decided.
std::optional<std::string> container_name_of(int log_root_fd, Dir& pod_dir, const std::string& pod_dir_name,
                                             const PodIdentity& id, const std::string& container_id,
                                             Budget& budget, std::string& why) {
  std::set<std::string> dirs;
  const bool dirs_complete = pod_dir.each(budget, [&](std::string_view name, unsigned char type) {
    if (label_ok(name) && is_directory_entry(pod_dir.fd(), name, type)) dirs.emplace(name);
  });

  // containers/ entries are symlinks into pods/: their names are all that is
  // read; they are never opened or followed.
  std::set<std::string> named_by_id;
  bool pod_listed = false;
  bool links_complete = false;
  Dir links(log_root_fd, "containers");
  if (links.ok()) {
    // Pod names and namespaces have no '_': this prefix is this pod's alone.
    const std::string prefix = id.pod_name + "_" + id.pod_namespace + "_";
    links_complete = links.each(budget, [&](std::string_view name, unsigned char) {
      if (name.substr(0, prefix.size()) != prefix) return;
      // Listed, even when the rest does not parse: kubelet cuts names longer
      // than 255 bytes, id and all.
      pod_listed = true;
      if (auto parsed = parse_container_link(name, prefix); parsed && parsed->second == container_id)
        named_by_id.insert(std::move(parsed->first));
    });
  } else if (links.error() != ENOENT) {
    why = "containers/ not read: " + errno_text(links.error());
  }

  if (named_by_id.size() == 1) {
    const std::string& name = *named_by_id.begin();
    if (dirs.count(name)) return name;
    why = "containers/ names container '" + name + "' for this id, but pods/" + pod_dir_name +
          "/ has no such directory";
    return std::nullopt;
  }
  if (named_by_id.size() > 1) {
    why = "containers/ names " + std::to_string(named_by_id.size()) + " containers for this id";
    return std::nullopt;
  }
  // No entry for this id. With every entry read and none for this pod, the
  // pod's only container directory is it; when containers/ lists the pod
  // under other ids, this cgroup is one without logs (the pod's sandbox).
  if (!dirs_complete || (links.ok() && !links_complete)) {
    why = "directory entry budget (" + std::to_string(kPodLogMaxEntries) + ") ran out";
    return std::nullopt;
  }
  if (!pod_listed && dirs.size() == 1) return *dirs.begin();
  if (why.empty())
    why = pod_listed ? "containers/ lists the pod, not this container id"
                     : "pods/" + pod_dir_name + "/ has " + std::to_string(dirs.size()) +
                           " container directories and containers/ names none of them for this id";
  return std::nullopt;
}

}  // namespace

bool is_dns_label(const std::string& s) { return label_ok(s); }
bool is_dns_subdomain(const std::string& s) { return subdomain_ok(s); }

std::optional<PodIdentity> lookup_pod_identity(int log_root_fd, const std::string& pod_uid,
                                               const std::string& container_id, PodLookupNotes* notes) {
  PodLookupNotes local;
  PodLookupNotes& out = notes ? *notes : local;
  out = {};
  // The uid is compared with directory names, never used to build a path;
  // checking it keeps a malformed one from matching anything.
  if (!is_pod_uid(pod_uid)) {
    out.why = "not a pod uid";
    return std::nullopt;
  }
  Budget budget;
  Dir pods(log_root_fd, "pods");
  if (!pods.ok()) {
    out.why = "pods/ not read: " + errno_text(pods.error());
    return std::nullopt;
  }
  struct Candidate {
    std::string dir_name;
    PodIdentity id;
  };
  std::vector<Candidate> candidates;
  const bool complete = pods.each(budget, [&](std::string_view name, unsigned char) {
    if (candidates.size() >= kMaxPodDirCandidates) return;
    if (auto parsed = parse_pod_dir(name, pod_uid))
      candidates.push_back({std::string(name), {std::move(parsed->first), std::move(parsed->second), std::nullopt}});
  });

  // Only a real directory counts: a symlink or anything else under a pod
  // directory's name was not made by the kubelet.
  std::optional<Candidate> match;
  std::unique_ptr<Dir> match_dir;
  size_t real = 0;
  for (auto& c : candidates) {
    auto dir = std::make_unique<Dir>(pods.fd(), c.dir_name.c_str());
    if (!dir->ok()) {
      out.why = "pods/" + c.dir_name + " skipped: " + errno_text(dir->error());
      continue;
    }
    if (++real == 1) {
      match = std::move(c);
      match_dir = std::move(dir);
    }
  }
  out.entries_read = budget.used;
  if (real > 1) {
    out.why = std::to_string(real) + " pod directories have this uid";
    return std::nullopt;
  }
  if (!match) {
    if (!complete) out.why = "directory entry budget (" + std::to_string(kPodLogMaxEntries) + ") ran out in pods/";
    return std::nullopt;
  }

  PodIdentity id = std::move(match->id);
  std::string why;
  if (is_container_id(container_id))
    id.container_name = container_name_of(log_root_fd, *match_dir, match->dir_name, id, container_id, budget, why);
  else
    why = "no container id";
  out.entries_read = budget.used;
  if (!id.container_name) out.why = why;
  return id;
}

std::optional<PodIdentity> lookup_pod_identity(const std::string& log_root, const std::string& pod_uid,
                                               const std::string& container_id, PodLookupNotes* notes) {
  if (notes) *notes = {};
  // The root is the administrator's configuration, not a target's: it may be
  // a symlink. Everything below it is opened relative to this fd.
  const int fd = ::open(log_root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    if (notes) notes->why = log_root + " not opened: " + errno_text(errno);
    return std::nullopt;
  }
  auto id = lookup_pod_identity(fd, pod_uid, container_id, notes);
  ::close(fd);
  return id;
}

}  // namespace oomsnap
