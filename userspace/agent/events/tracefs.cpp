#include "agent/events/tracefs.h"

#include <errno.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include "base/text.h"

namespace oomsnap {

bool ensure_tracefs(std::string& note, std::string& error, int& err) {
  struct stat st {};
  const std::string events = std::string(kTracefs) + "/events";
  if (stat(events.c_str(), &st) == 0) return true;
  if (errno != ENOENT) {  // there but not usable (e.g. EACCES): mounting would not help
    err = errno;
    error = "tracefs at " + events + " is not usable: " + errno_text(err);
    return false;
  }
  if (::mount("tracefs", kTracefs, "tracefs", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
    err = errno;
    if (stat(events.c_str(), &st) == 0) return true;  // mounted concurrently by someone else
    error = std::string("mounting tracefs at ") + kTracefs + " failed: " + errno_text(err);
    return false;
  }
  note = std::string("tracefs mounted at ") + kTracefs;
  return true;
}

}  // namespace oomsnap
