# Sourced by the build scripts: ccache's cache outside the checkout, and
# paths below the checkout hashed relative to it (CCACHE_BASEDIR, and
# CCACHE_NOHASHDIR so -g's working directory is not hashed), so a fresh clone
# in another folder reuses what an earlier build compiled. An environment that
# sets these already keeps its own.
export CCACHE_DIR=${CCACHE_DIR:-${OOMSNAP_CACHE:-/var/cache/oomsnap}/ccache}
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(pwd -P)}
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
