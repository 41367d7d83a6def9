#!/usr/bin/env bash
# Build, once, minimal Debian root file systems (debootstrap --variant=minbase)
# holding newer CPython interpreters than bookworm ships; they need a newer
# glibc, so tests run them with chroot, like a container.
# Usage: tools/fetch-python-rootfs.sh [trixie|sid ...]   (default: both)
# Result: $OOMSNAP_CACHE/rootfs/trixie/usr/bin/python3.13
#         $OOMSNAP_CACHE/rootfs/sid/usr/bin/python3.14
# A rootfs is built in <root>.tmp and renamed when complete; it counts as
# complete only if its interpreter runs under chroot.
set -euo pipefail
CACHE=${OOMSNAP_CACHE:-/var/cache/oomsnap}
MIRROR=http://deb.debian.org/debian
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
RELEASES=("$@")
[ ${#RELEASES[@]} -gt 0 ] || RELEASES=(trixie sid)

# release -> the python3.N it carries (the package and /usr/bin name).
python_of() {
  case "$1" in
    trixie) echo python3.13 ;;
    sid) echo python3.14 ;;
    *) echo "usage: tools/fetch-python-rootfs.sh [trixie|sid ...] (unknown: $1)" >&2; return 1 ;;
  esac
}
for r in "${RELEASES[@]}"; do python_of "$r" >/dev/null; done

ROOTFS=$CACHE/rootfs
mkdir -p "$ROOTFS"
# One builder at a time: a second run must not delete the first one's .tmp.
exec 9>"$ROOTFS/.lock"
flock 9

version_in() {  # version_in ROOT PYTHON: prints sys.version, fails unless it runs
  [ -x "$1/usr/bin/$2" ] && chroot "$1" "/usr/bin/$2" -c 'import sys; print(sys.version)' 2>/dev/null
}

# Unmount whatever is mounted at or below $1 (deepest first): debootstrap mounts
# /proc and /sys in the target during its second stage and only unmounts them
# if it exits normally.
umount_under() {
  local dir m
  dir=$(realpath -m "$1")
  awk -v d="$dir" '{ gsub(/\\040/, " ", $5); if ($5 == d || index($5, d "/") == 1) print $5 }' \
      /proc/self/mountinfo | sort -r | while IFS= read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m"
  done
}
remove_tree() { umount_under "$1"; rm -rf --one-file-system "$1"; }

building=
trap '[ -z "$building" ] || umount_under "$building"' EXIT

for rel in "${RELEASES[@]}"; do
  py=$(python_of "$rel")
  root=$ROOTFS/$rel
  if v=$(version_in "$root" "$py"); then
    echo "rootfs $rel: $py $v (cached)"
    continue
  fi
  command -v debootstrap >/dev/null ||
    { echo "tools/fetch-python-rootfs.sh: debootstrap missing (tools/setup.sh installs it)" >&2; exit 1; }
  tmp=$root.tmp
  log=$ROOTFS/$rel.log
  building=$tmp
  remove_tree "$tmp"
  start=$SECONDS
  if ! debootstrap --variant=minbase --include="$py" --keyring="$KEYRING" \
         "$rel" "$tmp" "$MIRROR" >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "tools/fetch-python-rootfs.sh: debootstrap $rel failed (log: $log)" >&2
    exit 1
  fi
  umount_under "$tmp"
  # Keep it small: the downloaded .debs and apt's package indices (~60 MB;
  # `apt-get update` inside the chroot brings them back) are not needed to run.
  rm -f "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/cache/apt/*.bin
  find "$tmp/var/lib/apt/lists" -maxdepth 1 -type f -delete
  v=$(version_in "$tmp" "$py") ||
    { echo "tools/fetch-python-rootfs.sh: $py does not run in $tmp" >&2; exit 1; }
  remove_tree "$root"
  mv "$tmp" "$root"
  building=
  rm -f "$log"
  echo "rootfs $rel: $py $v (built in $((SECONDS - start)) s, $(du -sh "$root" | cut -f1))"
done
