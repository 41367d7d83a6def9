// SPDX-License-Identifier: GPL-2.0
/* OOM kill events: oom:mark_victim as a raw tracepoint (tp_btf/fentry are
 * refused on our target kernels; raw_tp needs no tracefs). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "oomsnap_events.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

/* Ring-buffer reservations that failed, read by user space. */
__u64 dropped_events = 0;

static __always_inline __u64 rss_pages(struct mm_struct *mm, int member)
{
	/* mm->rss_stat is an array of percpu_counter since 6.2. */
	struct percpu_counter *c = &mm->rss_stat[member];
	return (__u64)BPF_CORE_READ(c, count);
}

/* TP_PROTO(struct task_struct *task, uid_t uid) on 6.x kernels. */
SEC("raw_tp/mark_victim")
int handle_mark_victim(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *task = (struct task_struct *)ctx->args[0];
	struct oomsnap_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(&dropped_events, 1);
		return 0;
	}
	e->type = OOMSNAP_EV_OOM_KILL;
	e->tgid = BPF_CORE_READ(task, tgid);
	e->ktime_ns = bpf_ktime_get_ns();
	e->cgroup_id = BPF_CORE_READ(task, cgroups, subsys[memory_cgrp_id], cgroup, kn, id);
	struct mm_struct *mm = BPF_CORE_READ(task, mm);
	e->rss_anon_pages = mm ? rss_pages(mm, MM_ANONPAGES) : 0;
	e->rss_file_pages = mm ? rss_pages(mm, MM_FILEPAGES) : 0;
	e->rss_shmem_pages = mm ? rss_pages(mm, MM_SHMEMPAGES) : 0;
	BPF_CORE_READ_STR_INTO(&e->comm, task, comm);
	bpf_ringbuf_submit(e, 0);
	return 0;
}
