#include "agent/config_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "agent/config.h"
#include "base/text.h"
#include "base/unique_fd.h"

namespace oomsnap {
namespace {

std::string mode_text(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// Far beyond any configuration (the documented one is ~6 KiB); a larger
// "config" is a mistake, not something to hold in memory.
constexpr size_t kMaxConfigBytes = 1 << 20;

}  // namespace

std::string config_file_refusal(const std::string& path, const struct stat& st, uid_t agent_uid) {
  const std::string head = "refusing '" + path + "' (mode " + mode_text(st.st_mode) + ", owner uid " +
                           std::to_string(st.st_uid) + "): ";
  if (st.st_uid != 0 && st.st_uid != agent_uid)
    return head + "it belongs to another user, and only root or the agent's uid (" + std::to_string(agent_uid) +
           ") may configure the agent; chown it";
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return head + ((st.st_mode & S_IWOTH) ? "everyone" : "its group") + " can write it; chmod go-w it";
  return "";
}

std::string read_config_file(const std::string& path) {
  // O_NONBLOCK: a FIFO put where the file should be fails the regular-file
  // check below instead of waiting for a writer.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (fd.get() < 0) throw ConfigError("config: cannot read '" + path + "': " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw ConfigError("config: cannot stat '" + path + "': " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) throw ConfigError("config: '" + path + "' is not a regular file");
  if (std::string why = config_file_refusal(path, st, ::geteuid()); !why.empty()) throw ConfigError("config: " + why);
  std::string text;
  char buf[16 * 1024];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw ConfigError("config: cannot read '" + path + "': " + errno_text(errno));
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxConfigBytes)
      throw ConfigError("config: '" + path + "' is over " + std::to_string(kMaxConfigBytes >> 20) + " MiB");
  }
  return text;
}

}  // namespace oomsnap
