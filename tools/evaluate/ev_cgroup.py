"""Memory cgroups for the evaluation runs (cgroup v1 or v2), created and removed by us.

v1 (this host): the memory controller at /sys/fs/cgroup/memory; everything is created below
this process's own memcg (read from /proc/self/cgroup) unless a parent is given.
v2: the unified hierarchy at /sys/fs/cgroup; below the given parent (default the root), with
+memory enabled in the subtree_control of every directory we create.
"""
import os
import signal
import time


class CgroupError(RuntimeError):
    pass


def _read(path, default=None):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def _write(path, text):
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise CgroupError(f"cannot write {text.strip()!r} to {path}: {e.strerror}") from e


class MemoryCgroupFs:
    """Where the memory controller lives and which version it is."""

    def __init__(self, version, mount):
        self.version = version
        self.mount = mount

    @staticmethod
    def detect():
        mounts = _read("/proc/self/mountinfo", "")
        v1 = None
        v2 = None
        for line in mounts.splitlines():
            parts = line.split(" - ")
            if len(parts) != 2:
                continue
            pre, post = parts[0].split(), parts[1].split()
            mnt, fstype, opts = pre[4], post[0], post[2] if len(post) > 2 else ""
            if fstype == "cgroup" and "memory" in opts.split(","):
                v1 = v1 or mnt
            elif fstype == "cgroup2":
                ctrl = _read(os.path.join(mnt, "cgroup.controllers"), "")
                if "memory" in ctrl.split():
                    v2 = v2 or mnt
        if v1:
            return MemoryCgroupFs(1, v1)
        if v2:
            return MemoryCgroupFs(2, v2)
        raise CgroupError("no memory cgroup controller mounted (neither v1 'memory' nor cgroup2 with memory)")

    def own_path(self):
        """This process's cgroup path relative to the mount ('/' for the root)."""
        for line in _read("/proc/self/cgroup", "").splitlines():
            hid, ctrls, path = line.split(":", 2)
            if self.version == 1 and "memory" in ctrls.split(","):
                return path or "/"
            if self.version == 2 and hid == "0" and ctrls == "":
                return path or "/"
        raise CgroupError("own memory cgroup not found in /proc/self/cgroup")

    def abspath(self, rel):
        return self.mount + ("" if rel in ("", "/") else rel)

    # File names that differ between versions.
    @property
    def usage_file(self):
        return "memory.usage_in_bytes" if self.version == 1 else "memory.current"

    @property
    def limit_file(self):
        return "memory.limit_in_bytes" if self.version == 1 else "memory.max"


class Cgroup:
    """One directory we created; remove() kills what is left in it and rmdirs it."""

    def __init__(self, fs, rel, enable_memory_below=False):
        self.fs = fs
        self.rel = rel
        self.dir = fs.abspath(rel)
        try:
            os.mkdir(self.dir, 0o755)
        except OSError as e:
            raise CgroupError(f"mkdir {self.dir}: {e.strerror}") from e
        if fs.version == 2 and enable_memory_below:
            _write(os.path.join(self.dir, "cgroup.subtree_control"), "+memory")

    def path(self, name):
        return os.path.join(self.dir, name)

    def write(self, name, value):
        _write(self.path(name), f"{value}\n")

    def read(self, name, default=None):
        return _read(self.path(name), default)

    def read_int(self, name):
        v = self.read(name)
        if v is None:
            return None
        v = v.strip()
        if v == "max":
            return None
        try:
            return int(v)
        except ValueError:
            return None

    def flat_keyed(self, name):
        """memory.events / memory.oom_control style 'key value' lines as a dict."""
        out = {}
        for line in (self.read(name) or "").splitlines():
            kv = line.split()
            if len(kv) == 2:
                try:
                    out[kv[0]] = int(kv[1])
                except ValueError:
                    pass
        return out

    def procs(self):
        return [int(p) for p in (self.read("cgroup.procs") or "").split()]

    def inode(self):
        try:
            return os.stat(self.dir).st_ino
        except OSError:
            return None

    def remove(self, timeout_s=10.0):
        """SIGKILL every process still inside, wait for it to empty, rmdir. True when gone."""
        end = time.monotonic() + timeout_s
        while True:
            if not os.path.isdir(self.dir):
                return True
            left = self.procs()
            for p in left:
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
            if not left:
                try:
                    os.rmdir(self.dir)
                    return True
                except FileNotFoundError:
                    return True
                except OSError:
                    pass  # EBUSY while the last task is still exiting
            if time.monotonic() > end:
                return False
            time.sleep(0.02)


    def remove_tree(self, timeout_s=10.0):
        """remove() for every directory below (deepest first), then this one."""
        ok = True
        for root, dirs, _ in sorted(os.walk(self.dir), key=lambda x: -x[0].count("/")):
            if root == self.dir:
                continue
            sub = Cgroup.__new__(Cgroup)
            sub.fs, sub.dir, sub.rel = self.fs, root, root[len(self.fs.mount):]
            ok = sub.remove(timeout_s) and ok
        return self.remove(timeout_s) and ok


class UsageReader:
    """Cheap repeated reads of one counter file (pread at offset 0 on a kept fd)."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    def read(self):
        try:
            return int(os.pread(self.fd, 64, 0))
        except (OSError, ValueError):
            return None

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
