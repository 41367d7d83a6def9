/* Only for a static libcapstone 4.x (userspace/CMakeLists.txt): keeps every
 * architecture but x86 out of the oomsnap binary.
 *
 * oomsnap disassembles x86-64 only (go/go_stripped.cpp). libcapstone.a's cs.o
 * refers to each architecture's <Arch>_global_init and <Arch>_option, and the
 * linker pulls an architecture's whole disassembler in for them. Their tables
 * hold pointers, so in a PIE binary (issue #12) each pointer is a relative
 * relocation that ld.so applies at every start, dirtying the page it is on: ~66,000
 * of the ~78,000 are M68K's 64 Ki-entry opcode table alone. Defining the
 * symbols here, as an object on the link line ahead of the archive, means the
 * linker never takes those members from libcapstone.a. cs_open() for one of
 * these architectures then fails with CS_ERR_ARCH, as for an architecture
 * capstone was built without. tests/unit/capstone_trim/capstone_trim_test.cpp checks that x86
 * still disassembles, and tests/build/build_hardening_test.cpp bounds the
 * binary's relative relocations. */
#include <stddef.h>

#include <capstone/capstone.h>

#define OOMSNAP_NO_CAPSTONE_ARCH(arch)                                              \
  cs_err arch##_global_init(void *ud);                                              \
  cs_err arch##_option(void *handle, cs_opt_type type, size_t value);               \
  cs_err arch##_global_init(void *ud) { (void)ud; return CS_ERR_ARCH; }             \
  cs_err arch##_option(void *handle, cs_opt_type type, size_t value) {              \
    (void)handle; (void)type; (void)value;                                          \
    return CS_ERR_ARCH;                                                             \
  }

OOMSNAP_NO_CAPSTONE_ARCH(AArch64)
OOMSNAP_NO_CAPSTONE_ARCH(ARM)
OOMSNAP_NO_CAPSTONE_ARCH(EVM)
OOMSNAP_NO_CAPSTONE_ARCH(M680X)
OOMSNAP_NO_CAPSTONE_ARCH(M68K)
OOMSNAP_NO_CAPSTONE_ARCH(Mips)
OOMSNAP_NO_CAPSTONE_ARCH(PPC)
OOMSNAP_NO_CAPSTONE_ARCH(Sparc)
OOMSNAP_NO_CAPSTONE_ARCH(SystemZ)
OOMSNAP_NO_CAPSTONE_ARCH(TMS320C64x)
OOMSNAP_NO_CAPSTONE_ARCH(XCore)
