#include "core/runtime_module.h"

#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <set>

namespace oomsnap {

bool find_runtime_module(
    Target& target, const std::function<bool(const Mapping&)>& is_library,
    const std::function<bool(const ElfFile& elf, uint64_t inode, const std::string& path)>& inspect) {
  std::set<uint64_t> tried;
  if (target.exe_fd() >= 0) {
    struct stat st {};
    if (fstat(target.exe_fd(), &st) == 0) {
      tried.insert(st.st_ino);
      std::string path;
      for (const auto& m : target.maps())
        if (m.inode == st.st_ino) {
          path = m.path;
          break;
        }
      if (path.empty()) path = "/proc/" + std::to_string(target.pid()) + "/exe";
      if (const ElfFile* elf = target.exe_elf(); elf && inspect(*elf, st.st_ino, path)) return true;
    }
  }
  for (const auto& m : target.maps()) {
    if (!is_library(m) || tried.count(m.inode)) continue;
    tried.insert(m.inode);
    int fd = target.open_mapping(m);
    if (fd < 0) continue;
    std::unique_ptr<ElfFile> elf;
    try {
      elf = ElfFile::open_fd(fd, m.path);
    } catch (const std::exception&) {
      // not a readable ELF file: not the runtime
    }
    ::close(fd);
    if (elf && inspect(*elf, m.inode, m.path)) return true;
  }
  return false;
}

}  // namespace oomsnap
