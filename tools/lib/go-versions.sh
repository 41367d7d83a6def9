# Sourced: GO_VERSIONS=(...) from tools/go-versions (the one list of tested Go toolchains).
mapfile -t GO_VERSIONS < <(grep -Ev '^\s*(#|$)' "$(dirname "${BASH_SOURCE[0]}")/../go-versions")
