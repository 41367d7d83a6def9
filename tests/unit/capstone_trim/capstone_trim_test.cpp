// capstone linked statically is trimmed to x86 (userspace/capstone_trim/): the
// other architectures' tables would cost ~75,000 relocations at every start of
// the PIE binary. x86-64 must still disassemble exactly; the others must be
// refused (CS_ERR_ARCH), which is also what shows their code was left out.
#include <capstone/capstone.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace {

// Whether this test binary carries capstone itself (libcapstone.a) rather than
// calling a shared libcapstone, where nothing is trimmed.
bool capstone_is_static() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cs_open), &info) == 0 || info.dli_fname == nullptr) return false;
  return std::string(info.dli_fname).find("libcapstone") == std::string::npos;
}

TEST(CapstoneTrim, X86_64StillDisassembles) {
  csh h = 0;
  ASSERT_EQ(cs_open(CS_ARCH_X86, CS_MODE_64, &h), CS_ERR_OK);
  ASSERT_EQ(cs_option(h, CS_OPT_DETAIL, CS_OPT_ON), CS_ERR_OK);
  // lea rax, [rip + 0x10] ; mov rcx, qword ptr [rax + 8] ; ret
  const uint8_t code[] = {0x48, 0x8d, 0x05, 0x10, 0x00, 0x00, 0x00, 0x48, 0x8b, 0x48, 0x08, 0xc3};
  cs_insn* insn = nullptr;
  size_t n = cs_disasm(h, code, sizeof code, 0x1000, 0, &insn);
  ASSERT_EQ(n, 3u);
  EXPECT_EQ(insn[0].id, static_cast<unsigned>(X86_INS_LEA));
  EXPECT_STREQ(insn[0].op_str, "rax, [rip + 0x10]");
  ASSERT_NE(insn[0].detail, nullptr);
  EXPECT_EQ(insn[0].detail->x86.operands[1].mem.base, X86_REG_RIP);
  EXPECT_EQ(insn[0].detail->x86.operands[1].mem.disp, 0x10);
  EXPECT_EQ(insn[1].id, static_cast<unsigned>(X86_INS_MOV));
  EXPECT_EQ(insn[2].id, static_cast<unsigned>(X86_INS_RET));
  cs_free(insn, n);
  EXPECT_EQ(cs_close(&h), CS_ERR_OK);
}

TEST(CapstoneTrim, OtherArchitecturesAreLeftOut) {
  if (!capstone_is_static()) GTEST_SKIP() << "shared libcapstone: nothing is trimmed";
  int major = 0, minor = 0;
  cs_version(&major, &minor);
  if (major != 4) GTEST_SKIP() << "the trim is only for capstone 4.x, this is " << major << "." << minor;
  const struct {
    cs_arch arch;
    cs_mode mode;
    const char* name;
  } others[] = {
      {CS_ARCH_ARM, CS_MODE_ARM, "ARM"},         {CS_ARCH_ARM64, CS_MODE_LITTLE_ENDIAN, "ARM64"},
      {CS_ARCH_MIPS, CS_MODE_MIPS32, "MIPS"},    {CS_ARCH_PPC, CS_MODE_64, "PPC"},
      {CS_ARCH_SPARC, CS_MODE_BIG_ENDIAN, "SPARC"}, {CS_ARCH_SYSZ, CS_MODE_BIG_ENDIAN, "SystemZ"},
      {CS_ARCH_XCORE, CS_MODE_BIG_ENDIAN, "XCore"}, {CS_ARCH_M68K, CS_MODE_M68K_040, "M68K"},
      {CS_ARCH_TMS320C64X, CS_MODE_BIG_ENDIAN, "TMS320C64x"}, {CS_ARCH_M680X, CS_MODE_M680X_6809, "M680X"},
      {CS_ARCH_EVM, CS_MODE_LITTLE_ENDIAN, "EVM"},
  };
  for (const auto& o : others) {
    csh h = 0;
    EXPECT_EQ(cs_open(o.arch, o.mode, &h), CS_ERR_ARCH) << o.name;
    EXPECT_EQ(h, 0u) << o.name;
  }
}

}  // namespace
