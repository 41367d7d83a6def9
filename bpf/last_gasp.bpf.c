// SPDX-License-Identifier: GPL-2.0
/* The last-gasp Go heap read: when an armed Go process is killed (SIGKILL, as
 * the OOM killer sends it), read its heap profile's buckets (runtime.mbuckets)
 * in its own context, before its memory is torn down, into a ring buffer.
 *
 *   signal:signal_deliver, sig 9, tgid in lg_targets
 *     -> lg_control BEGIN (the globals), lg_buckets (one record per bucket,
 *        its bytes as they are in the target), lg_control END (why it ended)
 *
 * Why at signal delivery: a SIGKILLed task delivers the signal to itself on
 * its way out (get_signal), with its mm still whole, so bpf_probe_read_user
 * reads its memory as the task itself would (the pages are its own and
 * resident: the bucket list is touched on every profiled allocation). Every
 * thread of the group delivers it; the first one claims the walk (lg_targets'
 * `claimed`), the others return at once. Each process of a group kill has its
 * own entry, so every Go process of the group is read, not only the first.
 *
 * Bounded: bpf_loop (5.17+; user space probes it and does not load this
 * program without it) runs at most max_buckets steps; one step reads one
 * bucket (two probe reads) and sends it. ~0.7 µs per bucket were measured on
 * this program's first probe (100,168 buckets in 69.7 ms), in the dying task
 * with preemption off, so the cap, not the list, decides the time.
 *
 * Two program variants, as in agent.bpf.c: raw_tp (no tracefs) and tp
 * (fallback; needs tracefs). User space loads exactly one. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "last_gasp_events.h"

char LICENSE[] SEC("license") = "GPL";

#define SIGKILL_NR 9
/* /proc/PID/stat's start time: task->start_boottime in ns / (NSEC_PER_SEC / USER_HZ). */
#define NS_PER_USER_TICK 10000000ULL

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct oomsnap_lg_target);
} lg_targets SEC(".maps");

/* 16 MiB: ~40,000 buckets of a typical depth (~400 bytes each). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 * 1024 * 1024);
} lg_buckets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} lg_control SEC(".maps");

/* One bucket record being built (too big for the BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct oomsnap_lg_bucket);
} lg_scratch SEC(".maps");

__u64 lg_control_dropped = 0;  /* BEGIN/END records lg_control had no room for */

struct walk {
	__u64 addr;        /* the next bucket; 0 at the list's end */
	__u32 tgid;
	__u32 sent;
	__u32 record_bytes;
	__u32 max_stack;
	__u32 end;         /* enum oomsnap_lg_end once stopped */
	__u32 zero_tails;
};

static long walk_step(__u64 i, void *ctx)
{
	struct walk *w = ctx;
	__u32 zero = 0;
	struct oomsnap_lg_bucket *b;
	__u64 nstk, len, addr = w->addr;

	if (addr == 0) {
		w->end = OOMSNAP_LG_END_OF_LIST;
		return 1;
	}
	b = bpf_map_lookup_elem(&lg_scratch, &zero);
	if (!b)
		return 1;
	if (bpf_probe_read_user(b->data, OOMSNAP_LG_BUCKET_HEADER, (void *)addr)) {
		w->end = OOMSNAP_LG_END_UNREADABLE;
		return 1;
	}
	nstk = ((__u64 *)b->data)[5];
	if (nstk == 0 || nstk > w->max_stack || nstk > OOMSNAP_LG_MAX_STACK) {
		w->end = OOMSNAP_LG_END_IMPLAUSIBLE;
		return 1;
	}
	len = OOMSNAP_LG_BUCKET_HEADER + nstk * 8 + (w->record_bytes & (OOMSNAP_LG_MAX_RECORD - 1));
	if (len > OOMSNAP_LG_MAX_BUCKET) {
		w->end = OOMSNAP_LG_END_IMPLAUSIBLE;
		return 1;
	}
	if (bpf_probe_read_user(b->data, len, (void *)addr)) {
		/* The newest bucket's counters may run into the next page of its
		 * persistentalloc chunk, which nothing has written yet: never
		 * faulted in, so a probe read (which cannot fault) fails there,
		 * though it holds zeros. So the header and PCs (written when the
		 * bucket was made) must read; the counters past the page boundary
		 * that follows them are read alone, and when that fails the helper
		 * has zeroed them: counted, and said in the snapshot. */
		__u64 fixed = OOMSNAP_LG_BUCKET_HEADER + nstk * 8;
		__u64 split = ((addr + fixed + 4095) & ~4095ULL) - addr;
		__u64 rest;

		if (split < fixed || split >= len || split > OOMSNAP_LG_MAX_BUCKET ||
		    bpf_probe_read_user(b->data, split, (void *)addr)) {
			w->end = OOMSNAP_LG_END_UNREADABLE;
			return 1;
		}
		rest = len - split;
		if (rest > OOMSNAP_LG_MAX_RECORD) {
			w->end = OOMSNAP_LG_END_UNREADABLE;
			return 1;
		}
		if (bpf_probe_read_user(b->data + split, rest, (void *)(addr + split)))
			w->zero_tails++;
	}
	b->tgid = w->tgid;
	b->len = len;
	b->addr = addr;
	if (bpf_ringbuf_output(&lg_buckets, b, offsetof(struct oomsnap_lg_bucket, data) + len, 0)) {
		w->end = OOMSNAP_LG_END_RING_FULL;
		return 1;
	}
	w->sent++;
	w->addr = ((__u64 *)b->data)[1];  /* allnext */
	return 0;
}

static void send_control(struct oomsnap_lg_control *c)
{
	if (bpf_ringbuf_output(&lg_control, c, sizeof(*c), 0))
		__sync_fetch_and_add(&lg_control_dropped, 1);
}

static int on_sigkill(int sig)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct oomsnap_lg_target *t;
	struct oomsnap_lg_control c = {};
	struct walk w = {};
	__u64 t0;

	if (sig != SIGKILL_NR)
		return 0;
	t = bpf_map_lookup_elem(&lg_targets, &tgid);
	if (!t)
		return 0;
	/* The pid reused since it was armed (user space disarms at its next scan):
	 * the addresses are another program's. */
	if (t->start_ticks) {
		struct task_struct *task = (struct task_struct *)bpf_get_current_task();

		if (BPF_CORE_READ(task, group_leader, start_boottime) / NS_PER_USER_TICK != t->start_ticks)
			return 0;
	}
	if (__sync_val_compare_and_swap(&t->claimed, 0, 1) != 0)
		return 0;
	t0 = bpf_ktime_get_ns();
	c.type = OOMSNAP_LG_BEGIN;
	c.tgid = tgid;
	c.ktime_ns = t0;
	if (bpf_probe_read_user(&c.head, sizeof(c.head), (void *)t->mbuckets) ||
	    bpf_probe_read_user(&c.rate, sizeof(c.rate), (void *)t->mem_profile_rate)) {
		send_control(&c);
		c.type = OOMSNAP_LG_END;
		c.end = OOMSNAP_LG_END_NO_HEAD;
		send_control(&c);
		return 0;
	}
	if (t->mprof_cycle && bpf_probe_read_user(&c.cycle, sizeof(c.cycle), (void *)t->mprof_cycle) == 0)
		c.cycle_ok = 1;
	send_control(&c);

	w.addr = c.head;
	w.tgid = tgid;
	w.record_bytes = t->record_bytes;
	w.max_stack = t->max_stack;
	bpf_loop(t->max_buckets < OOMSNAP_LG_MAX_BUCKETS ? t->max_buckets : OOMSNAP_LG_MAX_BUCKETS, walk_step, &w, 0);
	if (!w.end)
		w.end = w.addr ? OOMSNAP_LG_END_BUCKET_CAP : OOMSNAP_LG_END_OF_LIST;

	c.type = OOMSNAP_LG_END;
	c.buckets = w.sent;
	c.end = w.end;
	c.at = w.end == OOMSNAP_LG_END_OF_LIST ? 0 : w.addr;
	c.walk_ns = bpf_ktime_get_ns() - t0;
	c.zero_tails = w.zero_tails;
	send_control(&c);
	return 0;
}

/* raw: TP_PROTO(int sig, struct kernel_siginfo *info, struct k_sigaction *ka) */
SEC("raw_tp/signal_deliver")
int BPF_PROG(lg_signal_deliver_raw, int sig)
{
	return on_sigkill(sig);
}

SEC("tp/signal/signal_deliver")
int lg_signal_deliver_tp(struct trace_event_raw_signal_deliver *ctx)
{
	return on_sigkill(ctx->sig);
}
