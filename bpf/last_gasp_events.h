/* The last-gasp Go heap read (bpf/last_gasp.bpf.c) and user space
 * (userspace/agent/events/last_gasp.h): the armed processes and the records it
 * sends. Plain fixed-width types only, like oomsnap_events.h. */
#ifndef OOMSNAP_LAST_GASP_EVENTS_H
#define OOMSNAP_LAST_GASP_EVENTS_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Go's bucket: next, allnext, typ, hash, size, nstk (6 words), then nstk PCs,
 * then the counters (memRecord; its size is the Go version's). */
#define OOMSNAP_LG_BUCKET_HEADER 48
#define OOMSNAP_LG_MAX_STACK 256   /* PCs of one bucket: a deeper one ends the walk */
#define OOMSNAP_LG_MAX_RECORD 256  /* bytes after the PCs */
#define OOMSNAP_LG_MAX_BUCKET (OOMSNAP_LG_BUCKET_HEADER + OOMSNAP_LG_MAX_STACK * 8 + OOMSNAP_LG_MAX_RECORD)
/* bpf_loop's own limit on iterations (1 << 23) is far above any cap we set. */
#define OOMSNAP_LG_MAX_BUCKETS (1 << 22)

/* lg_targets: tgid -> what to read when it is killed. RUNTIME addresses in the
 * target, resolved by user space from its binary beforehand. */
struct oomsnap_lg_target {
	__u64 mbuckets;          /* &runtime.mbuckets */
	__u64 mem_profile_rate;  /* &runtime.MemProfileRate */
	__u64 mprof_cycle;       /* &runtime.mProfCycle; 0 when unknown */
	/* The process as armed: its start in clock ticks since boot, as field 22
	 * of /proc/PID/stat gives it (USER_HZ 100). A killed process whose start
	 * differs is another one with the pid reused: not read. 0: not checked. */
	__u64 start_ticks;
	__u32 record_bytes;      /* bytes after a bucket's PCs (<= OOMSNAP_LG_MAX_RECORD) */
	__u32 max_stack;         /* a bucket deeper than this ends the walk (<= OOMSNAP_LG_MAX_STACK) */
	__u32 max_buckets;       /* buckets sent per kill at most (<= OOMSNAP_LG_MAX_BUCKETS) */
	__u32 claimed;           /* 0 from user space; 1 once a thread of the group took the walk */
};

/* Why a walk ended (lg_control END). */
enum oomsnap_lg_end {
	OOMSNAP_LG_END_OF_LIST = 1,        /* allnext was 0: every bucket was sent */
	OOMSNAP_LG_END_BUCKET_CAP = 2,     /* max_buckets sent */
	OOMSNAP_LG_END_UNREADABLE = 3,     /* a bucket (at `at`) could not be read */
	OOMSNAP_LG_END_IMPLAUSIBLE = 4,    /* a bucket's nstk was 0 or above max_stack */
	OOMSNAP_LG_END_RING_FULL = 5,      /* lg_buckets had no room for the bucket at `at` */
	OOMSNAP_LG_END_NO_HEAD = 6,        /* runtime.mbuckets or MemProfileRate could not be read */
};

enum oomsnap_lg_control_type {
	OOMSNAP_LG_BEGIN = 1,  /* the globals, before the first bucket */
	OOMSNAP_LG_END = 2,    /* after the last bucket sent */
};

/* lg_control: BEGIN and END of one process's walk. The buckets go to
 * lg_buckets in between; user space drains lg_buckets before lg_control, so
 * every bucket of a walk is in by the time its END is read. */
struct oomsnap_lg_control {
	__u32 type;          /* enum oomsnap_lg_control_type */
	__u32 tgid;
	__u64 ktime_ns;      /* bpf_ktime_get_ns() */
	__u64 head;          /* BEGIN: runtime.mbuckets' value */
	__s64 rate;          /* BEGIN: runtime.MemProfileRate */
	__u32 cycle;         /* BEGIN: runtime.mProfCycle (when cycle_ok) */
	__u32 cycle_ok;      /* BEGIN */
	__u32 buckets;       /* END: buckets sent */
	__u32 end;           /* END: enum oomsnap_lg_end */
	__u64 at;            /* END: the bucket the walk stopped at (0 at the list's end) */
	__u64 walk_ns;       /* END: time from BEGIN */
	__u32 zero_tails;    /* END: buckets whose counters ran into a page not present, read as zeros */
	__u32 pad;
};

/* lg_buckets: one bucket, its `len` bytes as they are in the target at `addr`. */
struct oomsnap_lg_bucket {
	__u32 tgid;
	__u32 len;
	__u64 addr;
	/* Only len (<= OOMSNAP_LG_MAX_BUCKET) bytes are sent; the room after it
	 * lets the verifier see a split read of the counters stay inside. */
	__u8 data[OOMSNAP_LG_MAX_BUCKET + OOMSNAP_LG_MAX_RECORD];
};

#endif
