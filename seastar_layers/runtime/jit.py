"""Build generated source into a small shared library, cached on disk by a hash of what determines it.

The key covers the source (which spells out the program and its specialisation), the compiler's
own version, and the toolchain: its compiler, flags and the CPU or GPU architecture the code is
built for (runtime/toolchain.py). Builds happen in a
private temp dir and are renamed into place, so concurrent builds of one kernel are safe; each
library has a checksum file written after it, so a truncated or corrupt entry is rebuilt.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from .. import __version__
from ..errors import BuildError
from . import config, toolchain

_lock = threading.Lock()
build_count = 0  # tests read it to prove the cache works


def cache_key(source: str, tools: toolchain.Toolchain = toolchain.CPU) -> str:
    h = hashlib.sha256()
    for part in (__version__, tools.identity(), source):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def _checksum(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_library(source: str, stem: str = "program", tools: toolchain.Toolchain = toolchain.CPU) -> ctypes.CDLL:
    """The compiled library for `source`, from the cache or freshly built with `tools`."""
    if not config.jit_enabled():
        raise BuildError("SEASTAR_NO_JIT=1 is set, so custom programs cannot be compiled; "
                         "unset it, or use only the prebuilt layers")
    key = cache_key(source, tools)
    directory = config.cache_dir()
    lib_path = directory / f"{stem}-{key}.so"
    ok_path = directory / f"{stem}-{key}.sha256"
    with _lock:
        if not config.force_rebuild() and _valid(lib_path, ok_path):
            return ctypes.CDLL(str(lib_path))
        _build(source, tools, directory, lib_path, ok_path)
        return ctypes.CDLL(str(lib_path))


def _valid(lib_path: Path, ok_path: Path) -> bool:
    try:
        return ok_path.read_text().strip() == _checksum(lib_path)
    except OSError:
        return False


def _build(source: str, tools: toolchain.Toolchain, directory: Path, lib_path: Path, ok_path: Path) -> None:
    global build_count
    directory.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=directory))
    try:
        src = work / f"program{tools.suffix}"
        src.write_text(source)
        out = work / "program.so"
        cmd = tools.command(src, out)
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            kept = directory / f"failed-{lib_path.stem}{tools.suffix}"
            shutil.copy(src, kept)
            raise BuildError(f"compiling a generated kernel failed (this is a bug in seastar_layers; please report "
                             f"it with {kept}):\n{' '.join(cmd)}\n{result.stderr[-4000:]}")
        # a new inode each time: a process that already loaded the old library keeps its mapping
        os.replace(out, lib_path)
        tmp_ok = work / "ok"
        tmp_ok.write_text(_checksum(lib_path))
        os.replace(tmp_ok, ok_path)
        build_count += 1
        if config.debug():
            print(f"[seastar] built {lib_path}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
