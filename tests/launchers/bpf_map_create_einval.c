// bpf_map_create_einval CMD [ARGS...]: runs CMD with every bpf(BPF_MAP_CREATE)
// answered EINVAL by a seccomp filter — what a kernel before 5.8 answers for
// the ring buffer's map type, the first map the agent creates (its start-up
// probe). seccomp cannot look into bpf()'s attribute struct, so this refuses
// every map type; the probe runs first, so the agent sees the kernel it tests.
#include <errno.h>
#include <linux/bpf.h>
#include <seccomp.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s CMD [ARGS...]\n", argv[0]);
    return 2;
  }
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx || seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EINVAL), SCMP_SYS(bpf), 1,
                               SCMP_A0(SCMP_CMP_EQ, BPF_MAP_CREATE)) != 0 ||
      seccomp_load(ctx) != 0) {
    fprintf(stderr, "%s: cannot install the seccomp filter\n", argv[0]);
    return 2;
  }
  seccomp_release(ctx);
  execvp(argv[1], argv + 1);
  perror(argv[1]);
  return 127;
}
