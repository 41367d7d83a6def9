#!/usr/bin/env bash
# Build, once, minimal Debian root file systems (debootstrap --variant=minbase)
# holding language runtimes bookworm does not ship: newer ones (they need a
# newer glibc) and bullseye's CPython 3.9, a distribution build unlike pyenv's;
# tests run them with chroot, like a container. (The name predates the JDK
# rootfs; tests and CI call it by this name.)
# Usage: tools/fetch-python-rootfs.sh [bullseye|trixie|sid|trixie-jdk|sid-jdk|bookworm-node|sid-node ...]
#        (default: all seven)
# Result: $OOMSNAP_CACHE/rootfs/bullseye/usr/bin/python3.9, /usr/include/python3.9
#         $OOMSNAP_CACHE/rootfs/trixie/usr/bin/python3.13
#         $OOMSNAP_CACHE/rootfs/sid/usr/bin/python3.14
#         $OOMSNAP_CACHE/rootfs/trixie-jdk/usr/lib/jvm/java-21-openjdk-amd64/bin/{java,jcmd}
#         $OOMSNAP_CACHE/rootfs/trixie-jdk/usr/lib/jvm/java-25-openjdk-amd64/bin/{java,jcmd}
#         $OOMSNAP_CACHE/rootfs/sid-jdk/usr/lib/jvm/java-{8,11,26}-openjdk-amd64/bin/{java,jcmd}
#   trixie-jdk: both JDKs are in trixie main (openjdk-25 since a trixie point
#   release), installed through debootstrap --include, which follows Depends
#   only (no Recommends: no fonts, cups, alsa). Its jmods (only jlink needs
#   them) are deleted after install. java needs /proc inside the rootfs (see
#   version_in); mount it in a private mount namespace (unshare -m), never on
#   the host's view of the cache.
#   sid-jdk: the JDKs only sid still (8, 11) or already (26) ships, likewise.
#   bookworm-node, sid-node: Debian's own Node.js (18 and 24), built unlike the
#   official binaries: the runtime in a shared libnode, its JavaScript
#   dependencies in /usr/share/nodejs, so it runs only in its own root.
#   Result: $OOMSNAP_CACHE/rootfs/{bookworm,sid}-node/usr/bin/node
# A rootfs is built in <root>.tmp and renamed when complete; it counts as
# complete only if its runtime(s) run under chroot.
set -euo pipefail
CACHE=${OOMSNAP_CACHE:-/var/cache/oomsnap}
# The machine's own Debian mirror, never a host name of ours.
# shellcheck source=tools/lib/debian-mirror.sh
. "$(dirname "$0")/lib/debian-mirror.sh"
MIRROR=$(debian_mirror)
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
ROOTS=("$@")
[ ${#ROOTS[@]} -gt 0 ] || ROOTS=(bullseye trixie sid trixie-jdk sid-jdk bookworm-node sid-node)
JVM=/usr/lib/jvm

# JDK rootfs -> its JDK feature versions: $JVM/java-N-openjdk-amd64.
jdks_of() {
  case "$1" in
    trixie-jdk) echo "21 25" ;;
    sid-jdk) echo "8 11 26" ;;
  esac
}

# rootfs -> "suite packages" (packages comma-separated, for debootstrap --include).
spec_of() {
  case "$1" in
    # Its headers too: the unit tests check the layout table against the
    # distribution's own struct offsets (tools/dump-cpython-offsets.sh).
    bullseye) echo "bullseye python3.9,libpython3.9-dev" ;;
    trixie) echo "trixie python3.13" ;;
    sid) echo "sid python3.14" ;;
    trixie-jdk) echo "trixie openjdk-21-jdk-headless,openjdk-25-jdk-headless" ;;
    sid-jdk) echo "sid openjdk-8-jdk-headless,openjdk-11-jdk-headless,openjdk-26-jdk-headless" ;;
    bookworm-node) echo "bookworm nodejs" ;;
    sid-node) echo "sid nodejs" ;;
    *) echo "usage: tools/fetch-python-rootfs.sh [bullseye|trixie|sid|trixie-jdk|sid-jdk|bookworm-node|sid-node ...] (unknown: $1)" >&2; return 1 ;;
  esac
}
for r in "${ROOTS[@]}"; do spec_of "$r" >/dev/null; done

ROOTFS=$CACHE/rootfs
mkdir -p "$ROOTFS"
# One builder at a time: a second run must not delete the first one's .tmp.
exec 9>"$ROOTFS/.lock"
flock 9

# version_in ROOT NAME PACKAGES: prints the runtime version(s), fails unless
# they run under chroot. CPython needs no /proc there; java does (the loader
# resolves its RPATH $ORIGIN through /proc/self/exe), so it runs in a private
# mount namespace with proc mounted on ROOT/proc, gone when the command exits.
version_in() {
  local n v out=
  case "$2" in
    *-jdk)
      for n in $(jdks_of "$2"); do
        # shellcheck disable=SC2016 # $1, $2 belong to the inner sh
        [ -x "$1$JVM/java-$n-openjdk-amd64/bin/java" ] &&
          [ -x "$1$JVM/java-$n-openjdk-amd64/bin/jcmd" ] &&
          v=$(unshare -m --propagation private sh -c \
                'mount -t proc proc "$1/proc" && exec chroot "$1" "$2" -XX:-UsePerfData -version' \
                sh "$1" "$JVM/java-$n-openjdk-amd64/bin/java" 2>&1) || return 1
        out+="${out:+; }$(sed -n 's/.*Runtime Environment (build \(.*\))$/\1/p' <<<"$v")"
      done
      echo "openjdk $out" ;;
    *-node)
      [ -x "$1/usr/bin/node" ] && v=$(chroot "$1" /usr/bin/node -e 'console.log(process.version)' 2>/dev/null) &&
        echo "node $v" ;;
    *)  # the first package is the interpreter's name: python3.N; a
        # libpython3.N-dev after it must have left its headers
      local py=${3%%,*}
      case ",$3," in
        *",lib$py-dev,"*) [ -f "$1/usr/include/$py/Python.h" ] && [ -f "$1/usr/include/x86_64-linux-gnu/$py/pyconfig.h" ] || return 1 ;;
      esac
      [ -x "$1/usr/bin/$py" ] && v=$(chroot "$1" "/usr/bin/$py" -c 'import sys; print(sys.version)' 2>/dev/null) &&
        echo "$py $v" ;;
  esac
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

for name in "${ROOTS[@]}"; do
  read -r suite pkgs <<<"$(spec_of "$name")"
  root=$ROOTFS/$name
  if v=$(version_in "$root" "$name" "$pkgs"); then
    echo "rootfs $name: $v (cached)"
    continue
  fi
  command -v debootstrap >/dev/null ||
    { echo "tools/fetch-python-rootfs.sh: debootstrap missing (tools/setup.sh installs it)" >&2; exit 1; }
  tmp=$root.tmp
  log=$ROOTFS/$name.log
  building=$tmp
  remove_tree "$tmp"
  start=$SECONDS
  # --include follows Depends, never Recommends.
  if ! debootstrap --variant=minbase --include="$pkgs" --keyring="$KEYRING" \
         "$suite" "$tmp" "$MIRROR" >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "tools/fetch-python-rootfs.sh: debootstrap $name ($suite) failed (log: $log)" >&2
    exit 1
  fi
  umount_under "$tmp"
  # Keep it small: the downloaded .debs and apt's package indices (~60 MB;
  # `apt-get update` inside the chroot brings them back) are not needed to run.
  rm -f "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/cache/apt/*.bin
  find "$tmp/var/lib/apt/lists" -maxdepth 1 -type f -delete
  # The JDKs' jmods (~420 MB of the ~1 GB) serve only jlink.
  case "$name" in *-jdk) rm -rf "$tmp"$JVM/java-*-openjdk-amd64/jmods ;; esac
  # Of a libpython3.N-dev only the headers are used: its static library
  # (~20 MB) links nothing here.
  rm -f "$tmp"/usr/lib/python3.*/config-*/libpython3.*.a "$tmp"/usr/lib/x86_64-linux-gnu/libpython3.*.a
  v=$(version_in "$tmp" "$name" "$pkgs") ||
    { echo "tools/fetch-python-rootfs.sh: $pkgs does not run in $tmp" >&2; exit 1; }
  remove_tree "$root"
  mv "$tmp" "$root"
  building=
  rm -f "$log"
  echo "rootfs $name: $v (built in $((SECONDS - start)) s, $(du -sh "$root" | cut -f1))"
done
