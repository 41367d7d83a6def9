/* SPDX-License-Identifier: GPL-2.0 */
/* Every kernel layout difference the programs in agent.bpf.c meet, in one place
 * (as libbpf-tools' core_fixes.bpf.h). vmlinux.h describes one kernel (see
 * vmlinux/README.md: the newest layouts); for each older layout there is a
 * `___old`-flavoured struct (libbpf ignores the suffix when it matches types
 * against the running kernel's BTF) and a bpf_core_field_exists() test that
 * libbpf resolves to a constant at load time, so the branch that does not
 * apply is dead code the verifier never walks.
 *
 * Supported: 5.10 (Debian 11) to the newest. The floor is set by the BPF ring
 * buffer (5.8) and BTF in /sys/kernel/btf/vmlinux (5.4, CONFIG_DEBUG_INFO_BTF),
 * both probed by user space before loading (userspace/agent/events/bpf_events.cpp).
 *
 *   difference                          changed in  upstream commit
 *   mm_struct.rss_stat                  6.2         f1a7941243c1 "mm: convert mm's rss stats into percpu_counter"
 *   oom:mark_victim: TP_PROTO(int pid)  6.8         "mm: update mark_victim tracepoints fields"
 *     -> (struct task_struct *, uid_t),             (Carlos Galo; also backported to some
 *     entry pid only -> + comm, rss, ...            stable trees: test the kernel, not its version)
 *   mark_victim's pid: a thread id      always      the entry has task->pid (see oom_victim_tgid)
 *   BPF atomics cmpxchg/xchg            5.12        5ffa25502b5a "bpf: Add instructions for atomic_[cmp]xchg"
 *     (not a layout: 5.10's verifier refuses any program holding one, "BPF_STX uses
 *     reserved fields", dead code or not; the rate-limited programs have *_old
 *     variants without them, agent.bpf.c rate_admit, chosen by a user-space probe)
 *
 * Checked and the same on every supported kernel (no fix needed):
 * kernfs_node.id is a u64 since 5.5 ("kernfs: convert
 * kernfs_node->id from union kernfs_node_id to u64"); the memory controller's
 * index in css_set.subsys[] depends on the config, so it is an enum
 * relocation (task_memcg_id); signal_struct.live, task_struct.exit_code,
 * start_time, tgid; the vmscan memcg_reclaim_begin entry (order, gfp_flags);
 * sched_process_exit's first raw argument (6.16 added a second, unused);
 * kmem:rss_stat's first raw argument (the mm; since 5.5, its third, the count,
 * went in 6.2, unused) and its entry's curr; css.parent, and mem_cgroup.memory,
 * the page_counter whose usage is memory.usage_in_bytes / memory.current. */
#ifndef OOMSNAP_CORE_FIXES_BPF_H
#define OOMSNAP_CORE_FIXES_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_core_read.h>

/* ---- mm_struct.rss_stat (6.2: f1a7941243c1) ------------------------------
 * Before 6.2:  struct mm_rss_stat { atomic_long_t count[NR_MM_COUNTERS]; } rss_stat;
 *              (with SPLIT_RSS_COUNTING each thread caches up to 64 updates in
 *              task->rss_stat before folding them in: the mm's value lags)
 * Since 6.2:   struct percpu_counter rss_stat[NR_MM_COUNTERS];
 *              (->count is the folded value; each CPU holds back less than
 *              the counter's batch) */
struct mm_rss_stat___old {
	atomic_long_t count[4];
} __attribute__((preserve_access_index));

struct mm_struct___old {
	struct mm_rss_stat___old rss_stat;
} __attribute__((preserve_access_index));

/* The mm counter `member` (enum MM_ANONPAGES... of the running kernel), in
 * pages, clamped at 0. */
static __always_inline __u64 mm_rss_pages(struct mm_struct *mm, int member)
{
	struct mm_struct___old *old = (void *)mm;
	__s64 v;

	if (member < 0 || member >= 4)
		return 0;
	if (bpf_core_field_exists(old->rss_stat.count)) {
		/* < 6.2: rss_stat is a struct holding the atomic array */
		v = BPF_CORE_READ(old, rss_stat.count[member].counter);
	} else {
		struct percpu_counter *c = &mm->rss_stat[member];
		v = BPF_CORE_READ(c, count);
	}
	return v > 0 ? (__u64)v : 0;
}

/* The counters' indices (MM_FILEPAGES 0, MM_ANONPAGES 1, MM_SWAPENTS 2,
 * MM_SHMEMPAGES 3) are vmlinux.h's constants: the enum is anonymous (no CO-RE
 * enum relocation possible) and has the same values on every supported kernel. */

/* ---- oom:mark_victim (6.8: "mm: update mark_victim tracepoints fields")
 * Before:  TP_PROTO(int pid), called with tsk->pid (a thread id);
 *          entry: int pid;
 * Since:   TP_PROTO(struct task_struct *task, uid_t uid);
 *          entry: int pid; __data_loc char[] comm; unsigned long total_vm,
 *          anon_rss, file_rss, shmem_rss (kB); uid_t uid; unsigned long
 *          pgtables; short oom_score_adj
 * vmlinux.h has the newer ones. The one commit changed both, so the entry's
 * comm field tells what the raw tracepoint's first argument is (CO-RE cannot
 * test a function prototype's arguments; bpf_core_type_matches on the
 * btf_trace_mark_victim typedef would, but needs clang 15). The extra entry
 * fields are read only where they exist (oom_kill_tp). */
static __always_inline bool mark_victim_has_task(void)
{
	return bpf_core_field_exists(((struct trace_event_raw_mark_victim *)0)->__data_loc_comm);
}

/* ---- the pid of a mark_victim --------------------------------------------
 * Since 6.8 the raw tracepoint's argument is the task: its tgid is exact. The
 * classic trace entry (and the raw tracepoint before 6.8) only has task->pid,
 * the id of the *thread* the OOM killer
 * marked: the group leader as a rule (find_lock_task_mm starts there), but a
 * thread when the leader had no mm any more, and `current` itself when
 * out_of_memory() marks an already dying current (task_will_free_mem: e.g. a
 * thread of a process a group kill just killed, allocating once more). When
 * the marked thread is current, its tgid is current's; otherwise the entry's
 * pid is passed on as it is and user space resolves it at once
 * (/proc/PID/status Tgid). The event says which (OOMSNAP_PID_*). */
static __always_inline __u32 oom_victim_tgid(__u32 entry_pid, __u32 *source)
{
	__u64 cur = bpf_get_current_pid_tgid();

	if (entry_pid == (__u32)cur) {
		*source = OOMSNAP_PID_CURRENT;
		return cur >> 32;
	}
	*source = OOMSNAP_PID_ENTRY;
	return entry_pid;
}

#endif
