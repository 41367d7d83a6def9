#!/usr/bin/env bash
# Build the Java heap fixture (tests/fixtures/java/HeapFixture.java) with the
# host's javac (OpenJDK 17) at --release 17, so the same class files run on the
# host's JDK 17 and on JDK 21/25/26 in $OOMSNAP_CACHE/rootfs/{trixie,sid}-jdk,
# and at --release 8 for JDK 8 and 11 (rootfs sid-jdk).
#
# Usage: tools/build-java-fixtures.sh [--force]
# Output: $OOMSNAP_CACHE/fixtures/java/HeapFixture.class (+ HeapFixture$*.class)
#         $OOMSNAP_CACHE/fixtures/java8/ likewise (class file version 52)
#   host:   java -cp $OOMSNAP_CACHE/fixtures/java HeapFixture ...
#   rootfs: nothing is copied into the cached rootfs. A test starts the JVM in
#     a private mount namespace with proc on <rootfs>/proc (java needs it), a
#     tmpfs on <rootfs>/tmp (attach socket, hsperfdata) and this directory
#     bound read-only on <rootfs>/mnt; the mounts die with the JVM:
#     unshare -m --propagation private sh -c 'R=$1; F=$2; shift 2
#       mount -t proc proc "$R/proc" && mount -t tmpfs tmpfs "$R/tmp" &&
#       mount -o bind,ro "$F" "$R/mnt" &&
#       exec chroot "$R" /usr/bin/env -C /tmp "$@"' sh ROOTFS FIXTURES \
#       /usr/lib/jvm/java-21-openjdk-amd64/bin/java -cp /mnt HeapFixture ...
#     and reads it with the rootfs's own jcmd (the host's jcmd 17 looks for
#     the socket in its own /tmp when the pid namespace is the same):
#     unshare -m --propagation private sh -c 'R=$1; shift
#       mount -t proc proc "$R/proc" && exec chroot "$R" "$@"' sh ROOTFS \
#       /usr/lib/jvm/java-21-openjdk-amd64/bin/jcmd -J-XX:-UsePerfData \
#       PID GC.class_histogram -all   (-UsePerfData: no hsperfdata in <rootfs>/tmp)
# Rebuilt only when the source or this script changed (content stamp).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SELF=$ROOT/tools/build-java-fixtures.sh
CACHE=${OOMSNAP_CACHE:-/var/cache/oomsnap}
SRC=$ROOT/tests/fixtures/java/HeapFixture.java
OUT=$CACHE/fixtures/java
OUT8=$CACHE/fixtures/java8

force=0
for a in "$@"; do
  case "$a" in
    --force) force=1 ;;
    -h|--help) sed -n '2,26p' "$SELF"; exit 0 ;;
    *) echo "build-java-fixtures: unknown argument '$a'" >&2; exit 2 ;;
  esac
done

die() { echo "build-java-fixtures: error: $*" >&2; exit 1; }
[ -f "$SRC" ] || die "fixture source not found: $SRC"
command -v javac >/dev/null || die "javac missing (apt-get install openjdk-17-jdk-headless)"

mkdir -p "$OUT"
exec 9>"$OUT/.build.lock"
flock 9

main=$OUT/HeapFixture.class
# Up to date = built from exactly this source and script (a content stamp, not
# mtimes: several checkouts share the cache, and a clone's files are all new).
stamp=$(cat "$SRC" "$SELF" | sha256sum | cut -d' ' -f1)
if [ $force = 0 ] && [ -f "$main" ] && [ -f "$OUT8/HeapFixture.class" ] &&
   [ "$(cat "$OUT/.stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "build-java-fixtures: up to date ($OUT)"
  exit 0
fi

# Compile into a scratch directory and swap the class files in only when javac
# succeeded (a half-written set must not look up to date).
tmp=$(mktemp -d "$OUT/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
t0=$EPOCHREALTIME
mkdir -p "$tmp/17" "$tmp/8" "$OUT8"
javac --release 17 -Xlint:all -Werror -encoding UTF-8 -d "$tmp/17" "$SRC" ||
  die "javac --release 17 failed"
javac --release 8 -Xlint:all -Werror -encoding UTF-8 -d "$tmp/8" "$SRC" ||
  die "javac --release 8 failed"
# The main classes last, then the stamp: a half-swapped set is never up to date.
for pair in "17:$OUT" "8:$OUT8"; do
  rel=${pair%%:*} out=${pair#*:}
  rm -f "$out"/HeapFixture*.class
  for f in "$tmp/$rel"/HeapFixture\$*.class; do
    [ -e "$f" ] && mv -f "$f" "$out/"
  done
  mv -f "$tmp/$rel/HeapFixture.class" "$out/HeapFixture.class"
done
echo "$stamp" > "$OUT/.stamp"
awk -v a="$t0" -v b="$EPOCHREALTIME" -v o="$OUT" \
  'BEGIN { printf "build-java-fixtures: built in %.1fs (%s)\n", b - a, o }'
