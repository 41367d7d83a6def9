/* Event records shared by the BPF programs and user space: defined once here.
 * Plain fixed-width types only, so the same header compiles against vmlinux.h
 * (BPF side) and <linux/types.h> (user side). */
#ifndef OOMSNAP_EVENTS_H
#define OOMSNAP_EVENTS_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define OOMSNAP_COMM_LEN 16

enum oomsnap_event_type {
	OOMSNAP_EV_OOM_KILL = 1,       /* oom:mark_victim: the kernel chose tgid (own ring buffer, never rate-limited) */
	OOMSNAP_EV_MEMCG_PRESSURE = 2, /* vmscan:mm_vmscan_memcg_reclaim_begin (rate-limited per memcg) */
	OOMSNAP_EV_PROCESS_EXIT = 3,   /* sched:sched_process_exit, whole thread group, by signal or tracked
	                                  (rate-limited per memcg unless tracked) */
	OOMSNAP_EV_USAGE_THRESHOLD = 4, /* kmem:rss_stat saw a watched container's memcg usage at or above its
	                                   threshold (once per crossing, rate-limited per container) */
};

/* OOM_KILL: how `tgid` was obtained (the event carries a process id, never a
 * thread id; see bpf/core_fixes.bpf.h oom_victim_tgid). */
enum oomsnap_pid_source {
	OOMSNAP_PID_TASK = 1,     /* raw_tp: task->tgid of the marked task (exact) */
	OOMSNAP_PID_CURRENT = 2,  /* tracepoint: the entry's pid is current's thread id; tgid = current's */
	OOMSNAP_PID_ENTRY = 3,    /* tracepoint: the entry's pid (task->pid, a thread id unless it is the
	                             group leader) as is: user space resolves it (/proc/PID/status Tgid)
	                             before any handler sees the event, into one of: */
	OOMSNAP_PID_PROC_STATUS = 4,  /* (user space) the Tgid of /proc/<entry pid>/status */
	OOMSNAP_PID_UNRESOLVED = 5,   /* (user space) the entry's pid as is: neither source had it */
	OOMSNAP_PID_THREAD_EXIT = 6,  /* (user space) /proc/<pid> gone: the tgid the exit program saw for
	                                 that thread (map marked_tids) */
};

/* One record per event; fields an event type does not fill are zero. */
struct oomsnap_event {
	__u32 type;         /* enum oomsnap_event_type */
	__u32 tgid;         /* OOM_KILL: the victim; PRESSURE: the reclaiming task; EXIT: the exiting process */
	__u64 ktime_ns;     /* bpf_ktime_get_ns() (CLOCK_MONOTONIC) at the event */
	__u64 cgroup_id;    /* memory-cgroup inode of the task (v1 and v2; st_ino of its directory) */
	__u64 rss_anon_pages;   /* OOM_KILL: the victim's mm counters */
	__u64 rss_file_pages;
	__u64 rss_shmem_pages;
	__u32 exit_code;    /* EXIT: task->exit_code (signal in the low 7 bits, status << 8) */
	__u32 order;        /* PRESSURE: allocation order of the charge that started reclaim */
	__u32 gfp_flags;    /* PRESSURE: its gfp flags */
	__u32 suppressed;   /* PRESSURE, EXIT: events of this type and memcg dropped by the rate limit
	                       since the last one sent (saturates at 2^32-1); 0 for a tracked EXIT */
	__u32 oom_invoker;  /* OOM_KILL: thread that ran the OOM killer (current): every mark of one
	                       OOM invocation (a group kill) comes from it, in one call */
	char comm[OOMSNAP_COMM_LEN];
	__u32 pid_source;   /* OOM_KILL: enum oomsnap_pid_source */
	__u32 pad;
	__u64 usage_pages;      /* USAGE_THRESHOLD: the container's memcg usage (page_counter) when seen */
	__u64 threshold_pages;  /* USAGE_THRESHOLD: the threshold it was compared with */
};

/* Usage thresholds kept in the kernel (USAGE_THRESHOLD), filled by user space.
 * A charge is seen in the memcg of the task that makes it, which may be a
 * child of the container whose limit counts: usage_watch maps every watched
 * memcg (by inode) to that container, `hops` parents up. */
#define OOMSNAP_MAX_WATCH_HOPS 8

struct oomsnap_usage_watch {
	__u64 container_id;  /* memcg inode of the limited container (the key itself when hops is 0) */
	__u32 hops;          /* parents between the key's memcg and the container (<= OOMSNAP_MAX_WATCH_HOPS) */
	__u32 pad;
};

/* usage_thresholds: container memcg inode -> its threshold and state. */
struct oomsnap_usage_threshold {
	__u64 threshold_pages;  /* fire when usage >= this ... */
	__u64 rearm_pages;      /* ... once, until usage fell below this (hysteresis) */
	__u64 last_sent_ns;     /* ktime of the last event (BPF's; 0 from user space) */
	__u32 armed;            /* 1: the next crossing fires (user space inserts it armed) */
	__u32 pad;
};

#endif
