#include "elf/x86_code.h"

#include <capstone/capstone.h>

namespace oomsnap {
namespace {

static_assert(sizeof(csh) == sizeof(size_t), "capstone's handle is a size_t");

Insn classify(const cs_insn& in) {
  Insn r;
  r.addr = in.address;
  if (!in.detail) return r;
  const cs_x86& x = in.detail->x86;
  const auto rip_relative = [&](const cs_x86_op& op) {
    return op.type == X86_OP_MEM && op.mem.base == X86_REG_RIP && op.mem.index == X86_REG_INVALID;
  };
  const auto load_of = [&](uint8_t size) {
    return in.id == X86_INS_MOV && x.op_count == 2 && x.operands[0].type == X86_OP_REG &&
           x.operands[0].size == size && rip_relative(x.operands[1]) && x.operands[1].size == size &&
           x.operands[1].mem.segment == X86_REG_INVALID;
  };
  const auto rip_target = [&] { return in.address + in.size + static_cast<uint64_t>(x.operands[1].mem.disp); };
  if (load_of(8)) {
    r.kind = Insn::kLoad64;
    r.target = rip_target();
  } else if (load_of(4)) {
    r.kind = Insn::kLoad32;
    r.target = rip_target();
  } else if (in.id == X86_INS_LEA && x.op_count == 2 && rip_relative(x.operands[1])) {
    r.kind = Insn::kLea;
    r.target = rip_target();
  } else if (in.id == X86_INS_CALL && x.op_count == 1 && x.operands[0].type == X86_OP_IMM) {
    r.kind = Insn::kCall;
    r.target = static_cast<uint64_t>(x.operands[0].imm);
  }
  return r;
}

}  // namespace

Disassembler::Disassembler() {
  csh h = 0;
  if (cs_open(CS_ARCH_X86, CS_MODE_64, &h) != CS_ERR_OK) return;
  if (cs_option(h, CS_OPT_DETAIL, CS_OPT_ON) != CS_ERR_OK) {
    cs_close(&h);
    return;
  }
  h_ = h;
}

Disassembler::~Disassembler() {
  if (!h_) return;
  csh h = h_;
  cs_close(&h);
}

std::vector<Insn> Disassembler::decode(uint64_t entry, std::span<const uint8_t> code) const {
  std::vector<Insn> out;
  if (!h_) return out;
  cs_insn* insn = cs_malloc(h_);
  if (!insn) return out;
  const uint8_t* p = code.data();
  size_t left = code.size();
  uint64_t addr = entry;
  while (left > 0 && cs_disasm_iter(h_, &p, &left, &addr, insn)) out.push_back(classify(*insn));
  cs_free(insn, 1);
  return out;
}

}  // namespace oomsnap
