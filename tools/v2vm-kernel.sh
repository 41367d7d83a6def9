#!/usr/bin/env bash
# v2vm-kernel.sh SERIES: which Debian kernel package the cgroup-v2 guest
# (../shared/v2vm/run-in-v2vm.sh) boots for a kernel series, and the apt
# configuration that reaches it. Prints shell assignments for the runner:
#
#   V2VM_KPKG=linux-image-5.10.0-NN-amd64
#   APT_CONFIG=/var/cache/oomsnap/apt-v2vm-bullseye/apt.conf   (empty: the host's apt)
#
# SERIES: 5.10 (bullseye), 6.1 (bookworm), 6.12 (bookworm-security/backports, the
# runner's default). The runner itself downloads the package on its first boot with
# `apt-get download` (honouring APT_CONFIG) and caches it under /var/cache/v2vm.
# bookworm's kernels come from the host's own apt lists; for bullseye a private apt
# configuration is written under $OOMSNAP_CACHE (default /var/cache/oomsnap) from the
# machine's own Debian mirror (tools/lib/debian-mirror.sh: never a mirror host name of
# ours) and its package lists are fetched once (again when older than a day).
# Exit 1 with a message when no package of the series can be found.
set -euo pipefail
SERIES=${1:?usage: $0 5.10|6.1|6.12}
CACHE=${OOMSNAP_CACHE:-/var/cache/oomsnap}
HERE=$(dirname "$(realpath "$0")")

# newest PATTERN: the highest-versioned package name matching the regex, or nothing.
newest() { apt-cache search --names-only "$1" 2>/dev/null | awk '{print $1}' | grep -E "$1" | sort -V | tail -1; }

# bullseye_apt_config: a private apt configuration for bullseye (+ bullseye-updates)
# on this machine's mirror; prints its path.
bullseye_apt_config() {
  # shellcheck source=tools/lib/debian-mirror.sh
  . "$HERE/lib/debian-mirror.sh"
  local dir=$CACHE/apt-v2vm-bullseye mirror keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  mirror=$(debian_mirror)
  mkdir -p "$dir"/{lists/partial,archives/partial,etc}
  : > "$dir/status"
  printf 'deb [signed-by=%s] %s bullseye main\ndeb [signed-by=%s] %s bullseye-updates main\n' \
    "$keyring" "$mirror" "$keyring" "$mirror" > "$dir/etc/sources.list.new"
  cat > "$dir/apt.conf" <<EOF
Dir::Etc::SourceList "$dir/etc/sources.list";
Dir::Etc::SourceParts "/dev/null";
Dir::Etc::Preferences "/dev/null";
Dir::Etc::PreferencesParts "/dev/null";
Dir::State::Lists "$dir/lists";
Dir::State::status "$dir/status";
Dir::Cache::Archives "$dir/archives";
Dir::Cache::pkgcache "$dir/pkgcache.bin";
Dir::Cache::srcpkgcache "$dir/srcpkgcache.bin";
APT::Architecture "amd64";
APT::Sandbox::User "root";
Acquire::Languages "none";
Debug::NoLocking "1";
EOF
  # Refresh the lists when the mirror changed, they are missing or older than a day.
  if ! cmp -s "$dir/etc/sources.list.new" "$dir/etc/sources.list" ||
     [ -z "$(find "$dir/lists" -maxdepth 1 -name '*_Packages*' -mtime -1 2>/dev/null | head -1)" ]; then
    mv "$dir/etc/sources.list.new" "$dir/etc/sources.list"
    APT_CONFIG=$dir/apt.conf apt-get -q update >&2 ||
      { echo "v2vm-kernel: apt-get update for bullseye on $mirror failed" >&2; return 1; }
  else
    rm -f "$dir/etc/sources.list.new"
  fi
  echo "$dir/apt.conf"
}

conf= pkg=
case $SERIES in
  5.10)
    conf=$(bullseye_apt_config)
    pkg=$(APT_CONFIG=$conf newest '^linux-image-5\.10\.0-[0-9]+-amd64$') ;;
  6.1)
    pkg=$(newest '^linux-image-6\.1\.0-[0-9]+-amd64$') ;;
  6.12)
    pkg=${V2VM_KPKG_6_12:-linux-image-6.12.117+deb12-amd64}  # the runner's own default (cached)
    [ -e "${V2VM_CACHE:-/var/cache/v2vm}/$pkg/.done" ] || apt-cache show "$pkg" >/dev/null 2>&1 ||
      pkg=$(newest '^linux-image-6\.12\.[0-9.]+\+deb12-amd64$') ;;
  *) echo "v2vm-kernel: unknown series '$SERIES' (5.10, 6.1 or 6.12)" >&2; exit 2 ;;
esac
[ -n "$pkg" ] || { echo "v2vm-kernel: no linux-image package of $SERIES found (apt-get update?)" >&2; exit 1; }
printf 'V2VM_KPKG=%s\nAPT_CONFIG=%s\n' "$pkg" "$conf"
