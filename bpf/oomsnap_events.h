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
	OOMSNAP_EV_OOM_KILL = 1, /* oom:mark_victim */
};

struct oomsnap_event {
	__u32 type;         /* enum oomsnap_event_type */
	__u32 tgid;         /* the victim's tgid */
	__u64 ktime_ns;     /* bpf_ktime_get_ns() at the event */
	__u64 cgroup_id;    /* memcg inode of the task (v1 and v2) */
	__u64 rss_anon_pages;
	__u64 rss_file_pages;
	__u64 rss_shmem_pages;
	char comm[OOMSNAP_COMM_LEN];
};

#endif
