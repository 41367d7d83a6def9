// A capture-process binary for tests only (never installed): the real
// capture child, plus misbehaviour chosen by the target's comm, so tests can
// make a capture process crash, hog memory, hang or answer garbage and check
// that the agent and the CLI report it and carry on. A target is given such a
// comm by starting it through a symlink of that name.
//   hook-segv     SIGSEGV            hook-abort    abort() (SIGABRT)
//   hook-hog      allocate and touch memory until the cap stops it
//   hook-stop     SIGSTOP itself (its watchdog cannot run: the hard kill must)
//   hook-garbage  a result that is not a frame      hook-huge  a result over the cap
//   hook-syscall  a system call outside the allow-list (SIGSYS)
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "capture/capture_child.h"
#include "core/proc_info.h"

namespace {

void misbehave(const oomsnap::CaptureRequest& req) {
  auto id = oomsnap::read_identity(req.pid);
  if (!id) return;
  const std::string& c = id->comm;
  if (c == "hook-segv") {
    volatile int* p = nullptr;
    *p = 1;
  } else if (c == "hook-abort") {
    std::abort();
  } else if (c == "hook-hog") {
    std::vector<char*> keep;
    for (;;) {
      char* b = new char[16 << 20];
      std::memset(b, 0x5a, 16 << 20);
      keep.push_back(b);
    }
  } else if (c == "hook-stop") {
    raise(SIGSTOP);
  } else if (c == "hook-garbage") {
    const char junk[] = "OOMSNAPR\xff\xff\xff\x7f garbage that is not a result";
    [[maybe_unused]] auto n = write(oomsnap::kCaptureResultFd, junk, sizeof junk);
    _exit(0);
  } else if (c == "hook-huge") {
    std::string big(1 << 20, 'x');
    for (int i = 0; i < 256; ++i)
      if (write(oomsnap::kCaptureResultFd, big.data(), big.size()) < 0) break;
    _exit(0);
  } else if (c == "hook-syscall") {
    [[maybe_unused]] int s = socket(AF_INET, SOCK_STREAM, 0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] != oomsnap::kCaptureChildCommand) return 2;
  args.erase(args.begin());
  return oomsnap::run_capture_child(args, misbehave);
}
