// x86-64 code as the readers of stripped binaries need it: each instruction
// classified as a RIP-relative load (8 or 4 bytes), a RIP-relative lea, a
// direct call, or other, with the address it names. The Go reader finds
// runtime globals this way (go/go_stripped.cpp), the CPython reader
// obmalloc.c's arena table (python/python_runtime.cpp). Code is the
// target's bytes: capstone decodes it, nothing here trusts it.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace oomsnap {

struct Insn {
  enum Kind { kLoad64, kLoad32, kLea, kCall, kOther };
  uint64_t addr = 0;
  Kind kind = kOther;
  uint64_t target = 0;  // RIP-relative load target, or direct call target
};

class Disassembler {
 public:
  Disassembler();
  ~Disassembler();
  Disassembler(const Disassembler&) = delete;
  Disassembler& operator=(const Disassembler&) = delete;
  bool ok() const { return h_ != 0; }

  // Linear sweep from entry (the address of code[0]); stops at the first
  // undecodable byte (the end of the function, data, or garbage).
  std::vector<Insn> decode(uint64_t entry, std::span<const uint8_t> code) const;

 private:
  size_t h_ = 0;  // capstone's csh
};

}  // namespace oomsnap
