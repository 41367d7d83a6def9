// The memory cgroup of a process: where the controller is mounted (v1 or v2),
// which cgroup a pid is in, what that cgroup's counters say, and which
// container/pod it belongs to.
#pragma once
#include <sys/types.h>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace oomsnap {

struct CgroupFs {
  int version = 0;     // 1 or 2
  std::string mount;   // e.g. "/sys/fs/cgroup/memory" (v1) or "/sys/fs/cgroup" (v2)
  // Which cgroup of the hierarchy the mount shows at its top (mountinfo field
  // 4): "/" normally; inside a container whose cgroupfs is a bind mount of its
  // own subtree, e.g. "/kubepods/burstable/pod.../<id>". /proc/PID/cgroup
  // paths are relative to the hierarchy (or cgroup namespace), not to this.
  std::string root = "/";
};

// Returns a file's contents, or nullopt when it cannot be read. Injected so
// tests can fake the v2 cgroup.controllers check without a real cgroupfs.
using FileReader = std::function<std::optional<std::string>(const std::string& path)>;

// Finds the memory controller from /proc/self/mountinfo text. A v1 "cgroup"
// mount with "memory" in its super options wins (a v2 mount then cannot have
// the controller bound); otherwise a "cgroup2" mount whose cgroup.controllers
// lists "memory". root_override skips mountinfo and uses that directory,
// detecting the version from the files present there. read_file defaults to
// reading the real file system.
std::optional<CgroupFs> find_memory_cgroupfs(const std::string& mountinfo_text,
                                             std::string root_override = "",
                                             const FileReader& read_file = {});

// The memory cgroup path from /proc/PID/cgroup text (starting with '/'): v1
// the line whose controller list holds "memory", v2 the "0::" line. It is the
// path within the hierarchy, which is the path below the mount only when the
// mount's root is "/"; to_mount_relative / memcg_rel_path_of make it so.
std::optional<std::string> memcg_path_of(const std::string& proc_cgroup_text, int version);

// A hierarchy path (as /proc/PID/cgroup prints it) made relative to the mount
// by stripping fs.root: root "/kubepods/x" turns "/kubepods/x/y" into "/y" and
// "/kubepods/x" into "/". nullopt when the cgroup is not visible below this
// mount: outside its root, not absolute, or containing ".." (what the kernel
// prints for cgroups outside the reader's cgroup namespace; joining it to
// the mount would point outside the cgroupfs).
std::optional<std::string> to_mount_relative(const CgroupFs& fs, const std::string& proc_cgroup_path);

// memcg_path_of + to_mount_relative: the path to pass to read_memcg & co.
std::optional<std::string> memcg_rel_path_of(const CgroupFs& fs, const std::string& proc_cgroup_text);

// The directory of a cgroup: fs.mount joined with rel_path ("/" = the mount).
std::string memcg_dir(const CgroupFs& fs, const std::string& rel_path);

// The parent of a mount-relative path: "/a/b" → "/a", "/a" → "/", "/" → "/".
std::string parent_of(const std::string& rel_path);

struct MemcgNode {
  std::string rel_path;  // relative to the mount, starts with '/'
  uint64_t inode = 0;    // st_ino of the directory = the cgroup id BPF reports
};

// The cgroup at under_rel_path and every cgroup below it, breadth first
// (parents before children, siblings by name), so a cap keeps the shallow
// part of a huge tree. Directories are opened with O_NOFOLLOW and symlinks
// are not entered, so a crafted tree cannot loop. Stops after max_nodes
// nodes (a result of exactly max_nodes may be truncated) and does not
// descend below max_depth levels under the start (the start is depth 0).
// Empty if the start cannot be opened. On v2 a directory is listed even when
// the memory controller is not enabled for it (no memory.current): its pages
// are charged to the nearest ancestor that has one.
std::vector<MemcgNode> list_memcgs(const CgroupFs& fs, const std::string& under_rel_path,
                                   size_t max_nodes = 100000, int max_depth = 32);

// Counters of one memory cgroup. A file that is missing or unparsable leaves
// its field empty, never zero; an unlimited limit/high is also empty.
struct MemcgStats {
  std::optional<uint64_t> usage_bytes, limit_bytes, high_bytes, swap_bytes;
  // v2: memory.events ("low", "high", "max", "oom", "oom_kill", ...).
  // v1: memory.oom_control ("oom_kill_disable", "under_oom", "oom_kill").
  std::map<std::string, uint64_t> events;
  uint64_t inode = 0;  // st_ino of the cgroup directory (0 if it cannot be stat'ed);
                       // identifies the cgroup for BPF (bpf_get_current_cgroup_id)
};

// Parse helpers take file contents so unit tests can feed text directly.
// A counter file: a decimal number, or "max" (→ nullopt, meaning unlimited).
std::optional<uint64_t> parse_memcg_value(const std::string& text);
// "key N" lines (memory.events, memory.oom_control, memory.stat).
std::map<std::string, uint64_t> parse_flat_keyed(const std::string& text);

MemcgStats read_memcg(const CgroupFs& fs, const std::string& rel_path);
// Only limit_bytes (and high_bytes on v2): what the agent's periodic rescan
// needs, one or two reads per cgroup instead of five.
MemcgStats read_memcg_limits(const CgroupFs& fs, const std::string& rel_path);
// Only usage_bytes: one read (the agent's v2 usage poll).
MemcgStats read_memcg_usage(const CgroupFs& fs, const std::string& rel_path);

// Pids in cgroup.procs (empty if unreadable).
std::vector<pid_t> cgroup_pids(const CgroupFs& fs, const std::string& rel_path);

struct ContainerRef {
  std::string runtime;  // "docker", "containerd", "cri-o"; empty when the path does not say
  std::string id;       // 64 hex chars
  std::string pod_uid;  // Kubernetes pod UID with dashes; empty outside kubepods
};

// Recognises docker, containerd, cri-o and kubepods cgroup path layouts
// (systemd and cgroupfs drivers). nullopt unless a container id is found.
std::optional<ContainerRef> container_of(const std::string& cgroup_path);

// usage / limit; nullopt when either is unknown or there is no finite limit.
std::optional<double> usage_ratio(const MemcgStats& s);

}  // namespace oomsnap
