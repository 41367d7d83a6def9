// Test helper: a real memory cgroup created below this test process's own
// memcg (the only place tests may create cgroups on this machine), with a
// limit; on scope exit every process still in it is killed and it is removed.
#pragma once
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "agent/cgroup/cgroup.h"

namespace oomsnap_test {

// The memory cgroup file system and this process's memcg path in it.
struct OwnMemcg {
  oomsnap::CgroupFs fs;
  std::string rel_path;  // relative to fs.mount, starts with '/'
  std::string dir() const { return fs.mount + (rel_path == "/" ? "" : rel_path); }
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline OwnMemcg own_memcg() {
  auto fs = oomsnap::find_memory_cgroupfs(slurp("/proc/self/mountinfo"));
  if (!fs) throw std::runtime_error("no memory cgroup controller mounted");
  auto rel = oomsnap::memcg_rel_path_of(*fs, slurp("/proc/self/cgroup"));
  if (!rel) throw std::runtime_error("own memcg not found in /proc/self/cgroup");
  return {*fs, *rel};
}

inline bool write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  f.flush();
  return static_cast<bool>(f);
}

class TestMemcg {
 public:
  // limit_bytes 0 = unlimited. name gets the pid and a counter appended so
  // parallel tests never collide.
  explicit TestMemcg(const std::string& name, uint64_t limit_bytes = 0) : TestMemcg(nullptr, name, limit_bytes) {}
  // A child of another test memcg (e.g. containers inside an agent's scope).
  TestMemcg(const TestMemcg& parent, const std::string& name, uint64_t limit_bytes = 0)
      : TestMemcg(&parent, name, limit_bytes) {}
  TestMemcg(const TestMemcg* parent, const std::string& name, uint64_t limit_bytes) : own_(own_memcg()) {
    static std::atomic<int> counter{0};
    const std::string base = parent ? parent->rel_path() : (own_.rel_path == "/" ? "" : own_.rel_path);
    rel_path_ = base + "/oomsnap-test-" + name + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
    dir_ = own_.fs.mount + rel_path_;
    if (mkdir(dir_.c_str(), 0755) != 0) throw std::runtime_error("mkdir " + dir_ + " failed");
    if (limit_bytes) set_limit(limit_bytes);
  }
  ~TestMemcg() {
    // Kill what is left, wait for the cgroup to empty, then remove it.
    for (int i = 0; i < 200; ++i) {
      std::istringstream procs(slurp(dir_ + "/cgroup.procs"));
      bool any = false;
      for (pid_t p; procs >> p;) {
        ::kill(p, SIGKILL);
        any = true;
      }
      if (!any && rmdir(dir_.c_str()) == 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    rmdir(dir_.c_str());
  }
  TestMemcg(const TestMemcg&) = delete;
  TestMemcg& operator=(const TestMemcg&) = delete;

  void set_limit(uint64_t bytes) {
    const std::string file = own_.fs.version == 1 ? "/memory.limit_in_bytes" : "/memory.max";
    if (!write_text(dir_ + file, std::to_string(bytes)))
      throw std::runtime_error("cannot set " + dir_ + file);
  }
  // v2 only: memory.high.
  void set_high(uint64_t bytes) {
    if (!write_text(dir_ + "/memory.high", std::to_string(bytes)))
      throw std::runtime_error("cannot set " + dir_ + "/memory.high");
  }
  const std::string& dir() const { return dir_; }            // absolute directory
  const std::string& rel_path() const { return rel_path_; }  // relative to the mount
  const oomsnap::CgroupFs& fs() const { return own_.fs; }
  uint64_t inode() const {
    struct stat st {};
    return stat(dir_.c_str(), &st) == 0 ? st.st_ino : 0;
  }

 private:
  OwnMemcg own_;
  std::string rel_path_, dir_;
};

}  // namespace oomsnap_test
