// SPDX-License-Identifier: GPL-2.0
/* The agent's kernel side: three events into two ring buffers.
 *
 *   OOMSNAP_EV_OOM_KILL        oom:mark_victim                               -> oom_events
 *   OOMSNAP_EV_MEMCG_PRESSURE  vmscan:mm_vmscan_memcg_reclaim_begin
 *                              (rate-limited per memcg)                      -> events
 *   OOMSNAP_EV_PROCESS_EXIT    sched:sched_process_exit (whole group dead; by signal or tracked):
 *                              tracked processes                             -> oom_events
 *                              others (rate-limited per memcg)               -> events
 *   OOMSNAP_EV_USAGE_THRESHOLD kmem:rss_stat, when a watched container's usage
 *                              crossed its threshold (once per crossing,
 *                              rate-limited per container)                   -> events
 *
 * Why two buffers: pressure and exit traffic is driven by what containers do
 * (a container can kill its own processes thousands of times a second), so it
 * shares `events` and may fill it; an OOM kill must never be lost to that, so
 * it has `oom_events`, which nothing a container does at will can fill: OOM
 * kills (bounded by how fast the kernel's OOM killer runs) and the exits of
 * tracked processes (at most one per entry of `tracked`, which only user
 * space and mark_victim fill). A tracked exit travels with the kills so that
 * the exit of an OOM victim always arrives after its kill.
 *
 * Every event has two program variants: SEC("raw_tp/...") (preferred: no
 * tracefs, the tracepoint's raw arguments) and SEC("tp/<category>/<name>")
 * (fallback: the formatted trace entry, needs tracefs). tp_btf/fentry are
 * refused on our target kernels. The rate-limited events (pressure, exit) have
 * each of them twice more, *_old, without the BPF cmpxchg/xchg instructions
 * that kernels before 5.12 refuse (core_fixes.bpf.h). User space loads exactly
 * one variant per event (bpf_program__set_autoload) — see
 * userspace/agent/events/bpf_events.cpp.
 *
 * Everything that reads kernel structures goes through BPF_CORE_READ (probe
 * reads with CO-RE relocations) against the committed vmlinux/vmlinux.h; where
 * a supported kernel (5.10 and later) lays a structure out differently, the
 * fix is in core_fixes.bpf.h. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "oomsnap_events.h"
#include "core_fixes.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* Pressure events and the exits of untracked processes. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

/* OOM kills and the exits of tracked processes only (see the top): 128 KiB
 * holds ~1100 events, far more than the OOM killer produces between two
 * reads of user space. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 128 * 1024);
} oom_events SEC(".maps");

/* Processes whose exit is always reported — even when they exit normally,
 * past the exit rate limit, in oom_events: tgid → 1. Filled by user space
 * (the victims it snapshotted) and by mark_victim (every OOM victim); an
 * entry is removed here once its process is dead (the tgid may be reused).
 * They bypass the rate limit because their exits complete incidents (the
 * snapshotted victim died, the OOM victim is gone): losing one would leave a
 * record without its ending. A container cannot use this to flood: it
 * cannot add entries, and each entry yields at most one event. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} tracked SEC(".maps");

/* Processes whose exit was reported, so the group's exit is sent once: see
 * handle_exit. Keyed by tgid + the group leader's start time (a process
 * identity that survives pid reuse); entries only need to live for the
 * microseconds in which a group's threads exit together, so LRU eviction is
 * harmless. */
struct exit_key {
	__u32 tgid;
	__u32 pad;
	__u64 start_time_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, struct exit_key);
	__type(value, __u8);
} exit_seen SEC(".maps");

/* Thread ids that mark_victim named and BPF could not resolve (source
 * OOMSNAP_PID_ENTRY) → the tgid, filled in by the exit program when that
 * thread exits (0 until then). The thread leaves /proc only after its exit
 * tracepoint, so user space finds the tgid in /proc/TID/status or, once that
 * is gone, here (OOMSNAP_PID_THREAD_EXIT). User space deletes what it read. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u32);
} marked_tids SEC(".maps");

/* Per-memcg rate limits of pressure events and of (untracked) exit events,
 * keyed by memcg inode. LRU maps: a node with more memcgs than entries
 * forgets the least recently active ones (their next event is sent at once; a
 * pending suppressed count is lost). */
struct rate_state {
	__u64 last_sent_ns;  /* ktime of the last event sent (or claimed) */
	__u64 suppressed;    /* events not sent since then */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct rate_state);
} pressure_limit SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct rate_state);
} exit_limit SEC(".maps");

/* At most one pressure event per memcg per this many ns (0: no limit). Set
 * by user space between open and load. */
const volatile __u64 pressure_min_interval_ns = 100000000;

/* At most one exit event of an untracked process per memcg per this many ns
 * (0: no limit). A container that kills its own processes in a loop gets
 * ten events a second, each carrying the count of the exits suppressed
 * before it. Set by user space between open and load. */
const volatile __u64 exit_min_interval_ns = 100000000;

/* Ring-buffer reservations that failed, per buffer, read by user space. */
__u64 dropped_events = 0;      /* events */
__u64 dropped_oom_events = 0;  /* oom_events */

/* ---- helpers ---------------------------------------------------------- */

/* `rb` is &events or &oom_events, `dropped` its counter (inlined, so the
 * verifier sees a constant map). */
static __always_inline struct oomsnap_event *reserve_in(void *rb, __u64 *dropped, __u32 type)
{
	struct oomsnap_event *e = bpf_ringbuf_reserve(rb, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(dropped, 1);
		return NULL;
	}
	/* Ring-buffer memory is not zeroed; fields an event does not fill are 0. */
	__builtin_memset(e, 0, sizeof(*e));
	e->type = type;
	e->ktime_ns = bpf_ktime_get_ns();
	return e;
}

static __always_inline struct oomsnap_event *reserve_event(__u32 type)
{
	return reserve_in(&events, &dropped_events, type);
}

static __always_inline struct oomsnap_event *reserve_oom_event(__u32 type)
{
	return reserve_in(&oom_events, &dropped_oom_events, type);
}

/* An OOM victim's exit is always reported (in oom_events, after its kill):
 * it ends the kill's record. A full map only loses that guarantee: the exit
 * is then reported like any other death by a signal. */
static __always_inline void track_victim(__u32 tgid)
{
	__u8 one = 1;

	if (tgid)
		bpf_map_update_elem(&tracked, &tgid, &one, BPF_ANY);
}

/* The task's memory cgroup (its css), or NULL. The controller's index in
 * css_set->subsys[] depends on the kernel config, so it is a CO-RE enum
 * relocation, not vmlinux.h's constant. */
static __always_inline struct cgroup_subsys_state *task_memcg_css(struct task_struct *task)
{
	struct cgroup_subsys_state *css = NULL;
	struct css_set *cgroups;
	int idx;

	if (!bpf_core_enum_value_exists(enum cgroup_subsys_id, memory_cgrp_id))
		return NULL;
	idx = bpf_core_enum_value(enum cgroup_subsys_id, memory_cgrp_id);
	if (idx < 0 || idx >= bpf_core_enum_value(enum cgroup_subsys_id, CGROUP_SUBSYS_COUNT))
		return NULL;
	cgroups = BPF_CORE_READ(task, cgroups);
	if (!cgroups)
		return NULL;
	bpf_core_read(&css, sizeof(css), &cgroups->subsys[idx]);
	return css;
}

/* A memcg's kernfs id (= st_ino of its directory, v1 and v2), 0 for NULL. */
static __always_inline __u64 css_memcg_id(struct cgroup_subsys_state *css)
{
	return css ? BPF_CORE_READ(css, cgroup, kn, id) : 0;
}

static __always_inline __u64 task_memcg_id(struct task_struct *task)
{
	return css_memcg_id(task_memcg_css(task));
}

/* ---- OOM kill: oom:mark_victim ---------------------------------------- */

/* A mark_victim known only by the marked thread's id (the classic entry, and
 * the raw tracepoint before 6.8): the process id as oom_victim_tgid finds it,
 * the memcg of current (the task whose charge hit the limit: the OOM-ing
 * memcg's hierarchy), and when the victim is current its name and rss from it
 * (else user space reads the name from /proc; rss stays 0 unless the entry
 * has it). Returns the reserved event, not yet submitted, or NULL. */
static __always_inline struct oomsnap_event *oom_kill_of_pid(__u32 pid)
{
	struct task_struct *cur = (struct task_struct *)bpf_get_current_task();
	__u32 source, tgid = oom_victim_tgid(pid, &source);
	struct oomsnap_event *e;

	/* An unresolved entry pid is tracked as it is (as a rule the group
	 * leader: right); user space re-keys it when it turns out a thread id. */
	track_victim(tgid);
	if (source == OOMSNAP_PID_ENTRY) {
		__u32 unknown = 0;

		bpf_map_update_elem(&marked_tids, &tgid, &unknown, BPF_ANY);
	}
	e = reserve_oom_event(OOMSNAP_EV_OOM_KILL);
	if (!e)
		return NULL;
	e->tgid = tgid;
	e->pid_source = source;
	e->oom_invoker = (__u32)bpf_get_current_pid_tgid();
	e->cgroup_id = task_memcg_id(cur);
	if (source == OOMSNAP_PID_CURRENT) {
		struct mm_struct *mm = BPF_CORE_READ(cur, mm);

		BPF_CORE_READ_STR_INTO(&e->comm, cur, group_leader, comm);
		if (mm) {
			e->rss_anon_pages = mm_rss_pages(mm, MM_ANONPAGES);
			e->rss_file_pages = mm_rss_pages(mm, MM_FILEPAGES);
			e->rss_shmem_pages = mm_rss_pages(mm, MM_SHMEMPAGES);
		}
	}
	return e;
}

/* TP_PROTO(struct task_struct *task, uid_t uid) since 6.8, TP_PROTO(int pid)
 * before (core_fixes.bpf.h mark_victim_has_task). */
SEC("raw_tp/mark_victim")
int oom_kill_raw(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *task = (struct task_struct *)ctx->args[0];
	struct oomsnap_event *e;
	struct mm_struct *mm;
	__u32 tgid;

	if (!mark_victim_has_task()) {
		e = oom_kill_of_pid((__u32)ctx->args[0]);
		if (e)
			bpf_ringbuf_submit(e, 0);
		return 0;
	}
	tgid = BPF_CORE_READ(task, tgid);
	track_victim(tgid);
	e = reserve_oom_event(OOMSNAP_EV_OOM_KILL);
	if (!e)
		return 0;
	e->tgid = tgid;
	e->pid_source = OOMSNAP_PID_TASK;
	e->oom_invoker = (__u32)bpf_get_current_pid_tgid();
	e->cgroup_id = task_memcg_id(task);
	mm = BPF_CORE_READ(task, mm);
	if (mm) {
		e->rss_anon_pages = mm_rss_pages(mm, MM_ANONPAGES);
		e->rss_file_pages = mm_rss_pages(mm, MM_FILEPAGES);
		e->rss_shmem_pages = mm_rss_pages(mm, MM_SHMEMPAGES);
	}
	BPF_CORE_READ_STR_INTO(&e->comm, task, comm);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* The formatted entry has the pid of the thread the OOM killer marked (see
 * oom_kill_of_pid) and, since 6.8, the victim's rss in kB and its comm, which
 * are taken from the entry when there. */
SEC("tp/oom/mark_victim")
int oom_kill_tp(struct trace_event_raw_mark_victim *ctx)
{
	struct oomsnap_event *e = oom_kill_of_pid(BPF_CORE_READ(ctx, pid));

	if (!e)
		return 0;
	if (bpf_core_field_exists(ctx->anon_rss)) {
		/* kB → pages (PAGE_SIZE is 4 KiB on x86-64). */
		e->rss_anon_pages = BPF_CORE_READ(ctx, anon_rss) / 4;
		e->rss_file_pages = BPF_CORE_READ(ctx, file_rss) / 4;
		e->rss_shmem_pages = BPF_CORE_READ(ctx, shmem_rss) / 4;
	}
	if (bpf_core_field_exists(ctx->__data_loc_comm)) {
		/* __data_loc: low 16 bits = offset of the string in the entry. */
		__u32 loc = BPF_CORE_READ(ctx, __data_loc_comm);
		bpf_probe_read_kernel_str(&e->comm, sizeof(e->comm), (void *)ctx + (loc & 0xffff));
	}
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* ---- per-memcg rate limit (pressure and exit events) ------------------ */

/* Decides whether an event of memcg `id` is sent, at most one per
 * `interval_ns` per memcg; `limit` is &pressure_limit or &exit_limit (inlined,
 * so the verifier sees a constant map). Returns 1 to send, with *suppressed =
 * the events of this memcg not sent since the last one; 0 when it is counted
 * as suppressed instead.
 *
 * Races (two CPUs with events of the same memcg): the slot is claimed with a
 * compare-and-swap of last_sent_ns, so only one of them sends per interval;
 * the loser counts itself as suppressed. The winner takes the count with an
 * atomic exchange, so an increment lands either in this event or in the next
 * one, never in neither. Counts are lost only when the LRU map evicts a
 * memcg's entry (more than 4096 memcgs active) or when the event cannot be
 * reserved (then the buffer's dropped counter says so). First event of a
 * memcg: two CPUs may both miss the lookup; BPF_NOEXIST lets only one insert,
 * the other counts as suppressed. */
static __always_inline int rate_admit(void *limit, __u64 interval_ns, __u64 id, __u64 now,
				      __u32 *suppressed, const bool atomics)
{
	struct rate_state *st, fresh = { .last_sent_ns = now, .suppressed = 0 };
	__u64 last, n;

	*suppressed = 0;
	if (interval_ns == 0)
		return 1;
	st = bpf_map_lookup_elem(limit, &id);
	if (!st) {
		if (bpf_map_update_elem(limit, &id, &fresh, BPF_NOEXIST) == 0)
			return 1;
		st = bpf_map_lookup_elem(limit, &id);
		if (st)
			__sync_fetch_and_add(&st->suppressed, 1);
		return 0;
	}
	last = st->last_sent_ns;
	/* Signed: another CPU may have claimed the slot with a ktime later than
	 * the `now` read here; that is inside its interval, not 2^64 ns after. */
	if ((__s64)(now - last) < (__s64)interval_ns) {
		__sync_fetch_and_add(&st->suppressed, 1);
		return 0;
	}
	if (!atomics) {
		/* Before 5.12 (see core_fixes.bpf.h): a plain store claims the slot,
		 * so two CPUs may both send in one interval; taking the count stays
		 * lossless: subtract what was read (an XADD). */
		st->last_sent_ns = now;
		n = st->suppressed;
		__sync_fetch_and_add(&st->suppressed, -n);
		*suppressed = n > 0xffffffffULL ? 0xffffffffU : (__u32)n;
		return 1;
	}
	if (__sync_val_compare_and_swap(&st->last_sent_ns, last, now) != last) {
		__sync_fetch_and_add(&st->suppressed, 1);
		return 0;
	}
	n = __sync_lock_test_and_set(&st->suppressed, 0);
	*suppressed = n > 0xffffffffULL ? 0xffffffffU : (__u32)n;
	return 1;
}

/* The event could not be reserved: give the taken count back so the next
 * event carries it (the event itself is counted as dropped). */
static __always_inline void rate_unadmit(void *limit, __u64 id, __u32 suppressed)
{
	struct rate_state *st;

	if (!suppressed)
		return;
	st = bpf_map_lookup_elem(limit, &id);
	if (st)
		__sync_fetch_and_add(&st->suppressed, suppressed);
}

/* ---- memcg pressure: vmscan:mm_vmscan_memcg_reclaim_begin -------------- */

static __always_inline int handle_pressure(__u32 order, __u32 gfp_flags, const bool atomics)
{
	struct task_struct *cur = (struct task_struct *)bpf_get_current_task();
	__u64 id = task_memcg_id(cur);
	__u64 now = bpf_ktime_get_ns();
	struct oomsnap_event *e;
	__u32 suppressed;

	if (!rate_admit(&pressure_limit, pressure_min_interval_ns, id, now, &suppressed, atomics))
		return 0;
	e = reserve_event(OOMSNAP_EV_MEMCG_PRESSURE);
	if (!e) {
		rate_unadmit(&pressure_limit, id, suppressed);
		return 0;
	}
	e->ktime_ns = now;
	e->tgid = bpf_get_current_pid_tgid() >> 32;
	e->cgroup_id = id;
	e->order = order;
	e->gfp_flags = gfp_flags;
	e->suppressed = suppressed;
	bpf_get_current_comm(&e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* TP_PROTO(int order, gfp_t gfp_flags) */
SEC("raw_tp/mm_vmscan_memcg_reclaim_begin")
int pressure_raw(struct bpf_raw_tracepoint_args *ctx)
{
	return handle_pressure((__u32)ctx->args[0], (__u32)ctx->args[1], true);
}

SEC("raw_tp/mm_vmscan_memcg_reclaim_begin")
int pressure_raw_old(struct bpf_raw_tracepoint_args *ctx)
{
	return handle_pressure((__u32)ctx->args[0], (__u32)ctx->args[1], false);
}

/* Event class mm_vmscan_direct_reclaim_begin_template: order, gfp_flags. */
SEC("tp/vmscan/mm_vmscan_memcg_reclaim_begin")
int pressure_tp(struct trace_event_raw_mm_vmscan_direct_reclaim_begin_template *ctx)
{
	return handle_pressure((__u32)BPF_CORE_READ(ctx, order), (__u32)BPF_CORE_READ(ctx, gfp_flags), true);
}

SEC("tp/vmscan/mm_vmscan_memcg_reclaim_begin")
int pressure_tp_old(struct trace_event_raw_mm_vmscan_direct_reclaim_begin_template *ctx)
{
	return handle_pressure((__u32)BPF_CORE_READ(ctx, order), (__u32)BPF_CORE_READ(ctx, gfp_flags), false);
}

/* ---- process exit: sched:sched_process_exit ---------------------------- */

/* The tracepoint fires in do_exit after signal->live was decremented and
 * exit_code set, so live == 0 means the whole group is dead: this thread or
 * one exiting at the same time was the last. (The group_dead argument exists
 * only since 6.16.) When a group dies all at once (a fatal signal wakes every
 * thread), several threads routinely read 0 — one decremented before another
 * reached the tracepoint — so the first of them to insert the process into
 * exit_seen (BPF_NOEXIST: atomic) sends the event and the others stay quiet.
 *
 * Then: a tracked process is sent in oom_events, unlimited (see `tracked`);
 * any other goes through the per-memcg exit rate limit into `events`, the
 * number of exits of its memcg suppressed before it in `suppressed`. The
 * de-duplication comes first so that a group's threads count as one exit. */
static __always_inline int handle_exit(struct task_struct *task, const bool atomics)
{
	struct exit_key key = {};
	struct oomsnap_event *e;
	__u32 tgid, code, suppressed = 0;
	__u64 memcg, now;
	__u8 one = 1;
	int live, tracked_exit;
	__u32 tid = BPF_CORE_READ(task, pid), *marked;

	/* A thread mark_victim named by its id: its process, for user space. */
	marked = bpf_map_lookup_elem(&marked_tids, &tid);
	if (marked)
		*marked = BPF_CORE_READ(task, tgid);
	live = BPF_CORE_READ(task, signal, live.counter);
	if (live != 0)
		return 0;
	tgid = BPF_CORE_READ(task, tgid);
	code = BPF_CORE_READ(task, exit_code);
	tracked_exit = bpf_map_lookup_elem(&tracked, &tgid) != NULL;
	if ((code & 0x7f) == 0 && !tracked_exit)
		return 0;
	key.tgid = tgid;
	key.start_time_ns = BPF_CORE_READ(task, group_leader, start_time);
	if (bpf_map_update_elem(&exit_seen, &key, &one, BPF_NOEXIST) != 0)
		return 0;  /* another thread of the group reported it */
	memcg = task_memcg_id(task);
	now = bpf_ktime_get_ns();
	if (tracked_exit) {
		/* Dead now: a later process with the same tgid is not tracked. */
		bpf_map_delete_elem(&tracked, &tgid);
		e = reserve_oom_event(OOMSNAP_EV_PROCESS_EXIT);
	} else {
		if (!rate_admit(&exit_limit, exit_min_interval_ns, memcg, now, &suppressed, atomics))
			return 0;
		e = reserve_event(OOMSNAP_EV_PROCESS_EXIT);
		if (!e)
			rate_unadmit(&exit_limit, memcg, suppressed);
	}
	if (!e)
		return 0;
	e->ktime_ns = now;
	e->tgid = tgid;
	e->exit_code = code;
	e->cgroup_id = memcg;
	e->suppressed = suppressed;
	/* The process's name: the group leader's comm (the last thread to exit
	 * may be a worker thread with its own name). */
	BPF_CORE_READ_STR_INTO(&e->comm, task, group_leader, comm);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* TP_PROTO(struct task_struct *p [, bool group_dead since 6.16]) */
SEC("raw_tp/sched_process_exit")
int exit_raw(struct bpf_raw_tracepoint_args *ctx)
{
	return handle_exit((struct task_struct *)ctx->args[0], true);
}

SEC("raw_tp/sched_process_exit")
int exit_raw_old(struct bpf_raw_tracepoint_args *ctx)
{
	return handle_exit((struct task_struct *)ctx->args[0], false);
}

/* The formatted entry (pid, comm, prio) lacks exit_code; current is the
 * exiting task. */
SEC("tp/sched/sched_process_exit")
int exit_tp(void *ctx)
{
	return handle_exit((struct task_struct *)bpf_get_current_task(), true);
}

SEC("tp/sched/sched_process_exit")
int exit_tp_old(void *ctx)
{
	return handle_exit((struct task_struct *)bpf_get_current_task(), false);
}

/* ---- usage thresholds in the kernel: kmem:rss_stat ---------------------- */

/* Memcgs whose charges are watched: memcg inode -> its limited container.
 * Filled by user space (every memcg of its scope below a limit); a memcg not
 * in it costs one lookup. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct oomsnap_usage_watch);
} usage_watch SEC(".maps");

/* Containers' thresholds and whether each is armed: container inode -> state. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct oomsnap_usage_threshold);
} usage_thresholds SEC(".maps");

/* rss_stat fires at every page fault of every process on the node, and the
 * whole check (the task's memcg and a map lookup: ~6 probe reads) cost ~120
 * ns per event here, ~220 ns for a watched memcg, against a ~3 us fault
 * (measured with kernel.bpf_stats_enabled, net of an empty program's ~105).
 * So each CPU checks one event in usage_check_every, and the first event of
 * each new tick (jiffy): a process faulting 4 KiB pages is checked every ~64
 * KiB of its growth, one faulting 2 MiB huge pages (every ~2 ms at 1 GB/s) at
 * least every tick. That costs ~10-40 ns per event. Per CPU, so the counts
 * need no atomics. */
struct usage_sampling {
	__u64 last_check_jiffies;
	__u32 since_check;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct usage_sampling);
} usage_sampling SEC(".maps");

const volatile __u32 usage_check_every = 16;

/* Is this event one to check (see usage_sampling)? Jiffies, not ktime:
 * reading the clock costs as much as the check saves on a VM's kvm-clock,
 * and a tick (1-4 ms) is fine enough. */
static __always_inline bool usage_check_due(void)
{
	__u32 zero = 0;
	struct usage_sampling *s = bpf_map_lookup_elem(&usage_sampling, &zero);
	__u64 now;

	if (!s)
		return false;
	now = bpf_jiffies64();
	if (++s->since_check < usage_check_every && now == s->last_check_jiffies)
		return false;
	s->since_check = 0;
	s->last_check_jiffies = now;
	return true;
}

/* At most one USAGE_THRESHOLD event per container per this many ns, however
 * fast its usage swings across the threshold and back below the re-arm level
 * (a container can do that at will). Set by user space between open and load. */
const volatile __u64 threshold_min_interval_ns = 100000000;

/* Why here: cgroup v2 has no usage-threshold notification, so without this
 * the agent learns of a climb by polling memory.current, at most every 10 ms.
 * rss_stat fires whenever a process's mm counters change: every page-fault
 * batch of a growing heap, in the faulting task (current), whose memcg is
 * charged. The container's page_counter is read right there, so the crossing
 * is seen within one charge batch of the kernel's own accounting. What this
 * does not see: usage that grows without touching an mm counter (page cache
 * of read()/write(), kernel memory); the poll and pressure events stay for
 * those.
 *
 * Races: `armed` and `last_sent_ns` are plain stores, so two CPUs crossing
 * together may both send (user space merges triggers of one container); the
 * rate limit bounds what that can cost. */
static __always_inline int handle_rss_stat(void)
{
	struct task_struct *cur = (struct task_struct *)bpf_get_current_task();
	struct cgroup_subsys_state *css = task_memcg_css(cur);
	struct oomsnap_usage_threshold *t;
	struct oomsnap_usage_watch *w;
	struct mem_cgroup *memcg;
	struct oomsnap_event *e;
	__u64 id, usage, now;
	__u32 hops;
	int i;

	id = css_memcg_id(css);
	w = bpf_map_lookup_elem(&usage_watch, &id);
	if (!w)
		return 0;
	hops = w->hops;
	id = w->container_id;
	for (i = 0; i < OOMSNAP_MAX_WATCH_HOPS; i++) {
		if ((__u32)i >= hops || !css)
			break;
		css = BPF_CORE_READ(css, parent);
	}
	/* The map may be stale (a container removed, its inode reused): the
	 * memcg reached must be the container named. */
	if (!css || css_memcg_id(css) != id)
		return 0;
	t = bpf_map_lookup_elem(&usage_thresholds, &id);
	if (!t)
		return 0;
	memcg = (struct mem_cgroup *)((void *)css - bpf_core_field_offset(struct mem_cgroup, css));
	usage = (__u64)BPF_CORE_READ(memcg, memory.usage.counter);
	if (usage < t->threshold_pages) {
		if (!t->armed && usage < t->rearm_pages)
			t->armed = 1;
		return 0;
	}
	if (!t->armed)
		return 0;
	now = bpf_ktime_get_ns();
	if (t->last_sent_ns && (__s64)(now - t->last_sent_ns) < (__s64)threshold_min_interval_ns)
		return 0;
	t->armed = 0;
	t->last_sent_ns = now;
	e = reserve_event(OOMSNAP_EV_USAGE_THRESHOLD);
	if (!e) {
		/* Counted as dropped; the crossing is tried again after the
		 * interval rather than lost until usage falls and climbs back. */
		t->armed = 1;
		return 0;
	}
	e->ktime_ns = now;
	e->tgid = bpf_get_current_pid_tgid() >> 32;
	e->cgroup_id = id;
	e->usage_pages = usage;
	e->threshold_pages = t->threshold_pages;
	BPF_CORE_READ_STR_INTO(&e->comm, cur, group_leader, comm);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* TP_PROTO(struct mm_struct *mm, int member[, long count before 6.2]).
 * Counters of another process's mm (e.g. one being torn down by its last
 * user) charge nobody now: only current's own count. */
SEC("raw_tp/rss_stat")
int usage_raw(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *cur = (struct task_struct *)bpf_get_current_task();

	if (!usage_check_due() || (void *)ctx->args[0] != (void *)BPF_CORE_READ(cur, mm))
		return 0;
	return handle_rss_stat();
}

/* The entry says whether the mm is current's (curr). */
SEC("tp/kmem/rss_stat")
int usage_tp(struct trace_event_raw_rss_stat *ctx)
{
	if (!usage_check_due() || !BPF_CORE_READ(ctx, curr))
		return 0;
	return handle_rss_stat();
}
