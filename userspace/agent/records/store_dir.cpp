#include "agent/records/store_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "agent/records/sink_io.h"
#include "base/text.h"

namespace oomsnap::store_dir {

using sink_io::octal_mode;

namespace {

bool trusted_owner(uid_t uid) { return uid == 0 || uid == ::geteuid(); }

std::vector<std::string> path_components(const std::string& path) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    if (j > i) parts.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  return parts;
}

// Who could replace `path` (a directory on the way to the store, or the
// store itself) or put files into it. Empty when only root/we can.
std::string untrusted_dir(const std::string& path, const struct stat& st, bool is_store) {
  if (!trusted_owner(st.st_uid))
    return "'" + path + "' is owned by uid " + std::to_string(st.st_uid);
  const mode_t w = st.st_mode & (S_IWGRP | S_IWOTH);
  if (w == 0) return {};
  // Sticky: others may add entries but not rename or remove root's, so an
  // ancestor like /tmp cannot be used to swap our directory. The store
  // itself would still let them plant files next to the records.
  if (!is_store && (st.st_mode & S_ISVTX)) return {};
  std::string who = (w & S_IWOTH) ? "everyone" : "group " + std::to_string(st.st_gid);
  return "'" + path + "' is writable by " + who + " (mode " + octal_mode(st.st_mode) + ")";
}

}  // namespace

// Resolves `dir` from "/" one component at a time, following symlinks by
// hand, and checks every directory passed and every symlink followed (see
// make_rotating_file_sink in sink.h). Missing directories are created 0700.
// On success `out` holds the store directory opened O_DIRECTORY.
bool open_store_dir(const std::string& dir, UniqueFd& out, std::string& error) {
  std::string abs = dir;
  if (abs.empty() || abs[0] != '/') {
    char cwd[4096];
    if (!::getcwd(cwd, sizeof cwd)) {
      error = "getcwd: " + errno_text(errno);
      return false;
    }
    abs = std::string(cwd) + "/" + abs;
  }
  const auto refuse = [&](const std::string& why) {
    error = "refusing to keep records in '" + dir + "': " + why +
            "; whoever can write there can read or redirect the records (make it owned by root and "
            "not group/other-writable)";
    return false;
  };
  auto parts = path_components(abs);
  std::deque<std::string> todo(parts.begin(), parts.end());
  std::string cur;  // resolved so far, no symlinks; "" is "/"
  struct stat st{};
  if (::lstat("/", &st) != 0) {
    error = "stat '/': " + errno_text(errno);
    return false;
  }
  if (auto why = untrusted_dir("/", st, todo.empty()); !why.empty()) return refuse(why);
  int links = 0;
  while (!todo.empty()) {
    const std::string comp = todo.front();
    todo.pop_front();
    if (comp == ".") continue;
    if (comp == "..") {
      cur = cur.substr(0, cur.rfind('/'));  // cur is resolved: its parent is lexical
      continue;
    }
    const std::string path = cur + "/" + comp;
    if (::lstat(path.c_str(), &st) != 0) {
      if (errno != ENOENT) {
        error = "stat '" + path + "': " + errno_text(errno);
        return false;
      }
      if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
        error = "mkdir '" + path + "': " + errno_text(errno);
        return false;
      }
      if (::lstat(path.c_str(), &st) != 0) {
        error = "stat '" + path + "': " + errno_text(errno);
        return false;
      }
    }
    if (S_ISLNK(st.st_mode)) {
      if (!trusted_owner(st.st_uid))
        return refuse("'" + path + "' is a symbolic link owned by uid " + std::to_string(st.st_uid));
      if (++links > 40) {
        error = "resolving '" + dir + "': " + errno_text(ELOOP);
        return false;
      }
      std::string target(4096, '\0');
      const ssize_t n = ::readlink(path.c_str(), target.data(), target.size());
      if (n < 0 || static_cast<size_t>(n) >= target.size()) {
        error = "readlink '" + path + "': " + errno_text(n < 0 ? errno : ENAMETOOLONG);
        return false;
      }
      target.resize(static_cast<size_t>(n));
      const auto more = path_components(target);
      todo.insert(todo.begin(), more.begin(), more.end());
      if (!target.empty() && target[0] == '/') cur.clear();
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      error = todo.empty() ? "'" + dir + "' exists but is not a directory"
                           : "'" + path + "': " + errno_text(ENOTDIR);
      return false;
    }
    if (auto why = untrusted_dir(path, st, todo.empty()); !why.empty()) return refuse(why);
    cur = path;
  }
  const std::string resolved = cur.empty() ? "/" : cur;
  const int fd = ::open(resolved.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    error = "open directory '" + resolved + "': " + errno_text(errno);
    return false;
  }
  out.reset(fd);
  struct stat opened{};
  if (::fstat(fd, &opened) != 0 || opened.st_dev != st.st_dev || opened.st_ino != st.st_ino) {
    error = "directory '" + resolved + "' changed while it was being checked";
    return false;
  }
  return true;
}

// "pid 1234 (comm)" for the process holding an flock on the file `fd` is
// open on, from /proc/locks; "another process" when it does not say.
std::string lock_holder(int fd) {
  struct stat st{};
  if (::fstat(fd, &st) != 0) return "another process";
  std::ifstream in("/proc/locks");
  std::string line;
  while (std::getline(in, line)) {
    // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; waiters have "->".
    std::istringstream f(line);
    std::string id, type, advisory, mode, pid, where;
    if (!(f >> id >> type) || type == "->" || type != "FLOCK") continue;
    if (!(f >> advisory >> mode >> pid >> where)) continue;
    unsigned maj = 0, min = 0;
    unsigned long long ino = 0;
    if (std::sscanf(where.c_str(), "%x:%x:%llu", &maj, &min, &ino) != 3) continue;
    if (maj != major(st.st_dev) || min != minor(st.st_dev) || ino != st.st_ino) continue;
    if (pid == "0" || pid.empty()) break;  // holder not visible in our pid namespace
    std::string comm;
    std::ifstream c("/proc/" + pid + "/comm");
    std::getline(c, comm);
    return "pid " + pid + (comm.empty() ? "" : " (" + comm + ")");
  }
  return "another process";
}

}  // namespace oomsnap::store_dir
