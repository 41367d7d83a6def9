#!/usr/bin/env bash
# debian_mirror: prints the Debian archive URI this machine's apt already uses
# (users have their own mirrors and proxies; the project names none). Reads
# /etc/apt/sources.list.d/*.sources (deb822), then *.list and
# /etc/apt/sources.list (one-line style); the first `deb` entry whose suite is
# not a -security or -updates one wins. OOMSNAP_DEBIAN_MIRROR overrides.
debian_mirror() {
  if [ -n "${OOMSNAP_DEBIAN_MIRROR:-}" ]; then echo "$OOMSNAP_DEBIAN_MIRROR"; return 0; fi
  local f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    # Stanzas are separated by blank lines; keep the first URI of a deb stanza
    # whose suites include a plain release.
    uri=$(awk 'BEGIN { RS = ""; FS = "\n" }
      {
        types = ""; uris = ""; suites = ""
        for (i = 1; i <= NF; i++) {
          line = $i; sub(/^[ \t]+/, "", line)
          if (line ~ /^#/) continue
          if (tolower(line) ~ /^types:/) { sub(/^[^:]*:[ \t]*/, "", line); types = line }
          if (tolower(line) ~ /^uris:/) { sub(/^[^:]*:[ \t]*/, "", line); uris = line }
          if (tolower(line) ~ /^suites:/) { sub(/^[^:]*:[ \t]*/, "", line); suites = line }
        }
        if (types !~ /(^| )deb( |$)/ || uris == "") next
        n = split(suites, s, /[ \t]+/)
        for (j = 1; j <= n; j++) if (s[j] != "" && s[j] !~ /-(security|updates)$/) {
          split(uris, u, /[ \t]+/); print u[1]; exit
        }
      }' "$f")
    [ -n "$uri" ] && { echo "${uri%/}"; return 0; }
  done
  for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list; do
    [ -f "$f" ] || continue
    # deb [options] URI suite components...
    uri=$(awk '$1 == "deb" {
        i = 2
        if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
        if ($(i + 1) !~ /-(security|updates)$/) { print $i; exit }
      }' "$f")
    [ -n "$uri" ] && { echo "${uri%/}"; return 0; }
  done
  echo "no Debian archive found in this machine's apt sources (/etc/apt/sources.list.d/*.sources, /etc/apt/sources.list); set OOMSNAP_DEBIAN_MIRROR" >&2
  return 1
}
