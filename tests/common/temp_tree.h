// A temporary directory tree for fake cgroupfs / proc files, removed at scope exit.
#pragma once
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>

namespace oomsnap_test {

struct TempTree {
  std::string root;
  TempTree() {
    char tmpl[] = "/tmp/oomsnap-tree-XXXXXX";
    const char* dir = ::mkdtemp(tmpl);
    if (!dir) throw std::runtime_error("mkdtemp failed");
    root = dir;
  }
  ~TempTree() {
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }
  TempTree(const TempTree&) = delete;
  TempTree& operator=(const TempTree&) = delete;
  // Truncate and rewrite, as the kernel's counters change in place.
  void write(const std::string& rel, const std::string& text) const {
    std::filesystem::path p = std::filesystem::path(root) / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
};

}  // namespace oomsnap_test
