// Which pod and container a memory cgroup belongs to, by name, without an
// API server: the kubelet keeps one log directory per pod,
//   <root>/pods/<namespace>_<pod-name>_<pod-uid>/<container-name>/
// and one symlink per container,
//   <root>/containers/<pod-name>_<namespace>_<container-name>-<container-id>.log
// (root = /var/log). The cgroup path gives the pod uid and the container id
// (cgroup.h container_of); these directories give the names.
//
// Hostile input: pod names, namespaces and container names are chosen by
// whoever may create pods, and a container with a hostPath mount may plant
// entries here. So directories are opened only relative to an opened root
// with O_DIRECTORY | O_NOFOLLOW (a symlink or a FIFO is refused, never
// followed or waited on), the /containers symlinks are parsed by name and
// never opened, each name is checked against the Kubernetes rules before it
// is used, and one lookup reads at most kPodLogMaxEntries directory entries.
#pragma once
#include <cstddef>
#include <optional>
#include <string>

namespace oomsnap {

struct PodIdentity {
  std::string pod_namespace;
  std::string pod_name;
  // nullopt when the pod's log directory does not say which of its
  // containers this is (see lookup_pod_identity).
  std::optional<std::string> container_name;
};

// Directory entries one lookup reads, all directories together: the cost of
// a lookup stays fixed however many entries a directory holds.
constexpr size_t kPodLogMaxEntries = 20000;

// What a lookup did, for the agent's debug log and for tests.
struct PodLookupNotes {
  size_t entries_read = 0;  // directory entries read (<= kPodLogMaxEntries)
  std::string why;          // why nothing (or no container name) was found, when notable; target-controlled
                            // names may appear in it: escape before logging
};

// The pod with uid `pod_uid` (the cgroup's spelling: a UUID, or 32 hex digits
// for a static pod) under log_root_fd, the directory holding kubelet's pods/
// and containers/. container_name is decided by `container_id` (64 hex
// digits): the containers/ entry with that id naming this pod; without one,
// the pod's only container directory, unless containers/ lists this pod under
// other ids (then the cgroup is a container without logs, e.g. the pod's
// sandbox). nullopt when no single valid pod directory has this uid.
std::optional<PodIdentity> lookup_pod_identity(int log_root_fd, const std::string& pod_uid,
                                               const std::string& container_id, PodLookupNotes* notes = nullptr);

// The same, opening log_root (the configured directory, e.g. "/var/log",
// trusted as the administrator's: followed if it is a symlink) first.
std::optional<PodIdentity> lookup_pod_identity(const std::string& log_root, const std::string& pod_uid,
                                               const std::string& container_id, PodLookupNotes* notes = nullptr);

// The Kubernetes name rules the lookup checks, exposed for tests:
// a DNS label (namespace, container name): 1..63 of [a-z0-9-], alphanumeric
// at both ends; a DNS subdomain (pod name): 1..253, dot-separated DNS labels.
bool is_dns_label(const std::string& s);
bool is_dns_subdomain(const std::string& s);

}  // namespace oomsnap
