"""Build generated source into a small shared library, cached on disk by a hash of what determines it.

The key covers the source (which spells out the program and its specialisation), the compiler's
own version, and the toolchain: its compiler, flags and the CPU or GPU architecture the code is
built for (runtime/toolchain.py). Builds happen in a
private temp dir and are renamed into place, so concurrent builds of one kernel are safe; each
library has a checksum file written after it, so a truncated or corrupt entry is rebuilt.

A cached library runs with the rights of whoever loads it, so nothing is loaded that anyone but
the current user (or root) could have written: the cache directory and each file must be owned by
them and not writable by group or others, or loading stops with an error saying why and how to
fix it (a shared cache cannot be trusted; OpenSSH's StrictModes and git's safe.directory refuse
the same way). Every step goes through file descriptors: the directory is opened and checked once,
files are opened relative to it without following symlinks, checked, hashed and loaded from the
same descriptor (/proc/self/fd), and the compiler runs inside the checked build directory, so
renaming or replacing a path along the way cannot substitute another file.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import secrets
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

from ..base import __version__
from ..errors import BuildError
from .. import config
from . import toolchain

# -ffp-contract=off: a value recomputed in backward must equal, bit for bit, what forward computed
# (max/min gradients find the winning edges by equality), so no kernel may fuse a*b+c differently
_lock = threading.Lock()
build_count = 0  # tests read it to prove the cache works


def cache_key(source: str, tools: toolchain.Toolchain = toolchain.CPU) -> str:
    h = hashlib.sha256()
    for part in (__version__, tools.identity(), source):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def load_library(source: str, stem: str = "program", tools: toolchain.Toolchain = toolchain.CPU,
                 announce: str | None = None) -> ctypes.CDLL:
    """The compiled library for `source`, from the cache or freshly built with `tools` (printing
    `announce` to stderr first, where given). Raises PermissionError, saying why, when the cache
    directory or an entry in it could have been written by another user."""
    if not config.jit_enabled():
        raise BuildError("SEASTAR_NO_JIT=1 is set, so custom programs cannot be compiled; "
                         "unset it, or use only the prebuilt layers")
    name = f"{stem}-{cache_key(source, tools)}"
    directory = config.cache_dir()
    with _lock:
        if (directory, name) in _loaded and not config.force_rebuild():
            return _loaded[directory, name]
        dir_fd = _open_private_dir(directory)
        try:
            lib = None if config.force_rebuild() else _load(dir_fd, directory, name)
            if lib is None:
                if announce:
                    print(announce, file=sys.stderr)
                _build(source, tools, dir_fd, directory, name)
                lib = _load(dir_fd, directory, name)
            if lib is None:
                raise BuildError(f"internal: the kernel just built as {directory / name}.so fails its checksum")
            _loaded[directory, name] = lib
            return lib
        finally:
            os.close(dir_fd)


_loaded: dict[tuple[Path, str], ctypes.CDLL] = {}
# a library loaded as /proc/self/fd/N is known to the dynamic loader by that name: its descriptor
# stays open so that N, and the name, are never reused for another library
_library_fds: list[int] = []


def _untrusted(st: os.stat_result) -> str | None:
    """Why a file or directory with this status could have been written by someone other than the
    current user or root, or None."""
    if st.st_uid not in (os.geteuid(), 0):
        return f"it is owned by uid {st.st_uid}, not by you (uid {os.geteuid()}) or root"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = "others" if st.st_mode & stat.S_IWOTH else "its group"
        return f"it is writable by {who} ({stat.filemode(st.st_mode)})"
    return None


def _open_private_dir(directory: Path) -> int:
    """A descriptor of the cache directory (created 0700 when missing), checked to be trusted."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise BuildError(f"cannot use the kernel cache {directory} ({e}); set SEASTAR_CACHE_DIR to a directory "
                         "you own") from None
    problem = _untrusted(os.fstat(fd))
    if problem:
        os.close(fd)
        raise PermissionError(f"refusing to use the kernel cache {directory}: {problem}, so another user could replace "
                              "a library there and it would run with your rights. Use a directory only you can write: "
                              f"`chmod go-w {directory}` if it is yours and you trust its contents, or set "
                              "SEASTAR_CACHE_DIR to a private one (the default, ~/.cache/seastar_layers, is created "
                              "0700)")
    return fd


def _open_trusted(dir_fd: int, directory: Path, filename: str) -> int | None:
    """A descriptor of a regular file in the cache, or None if there is none; refuses one that is not trusted."""
    try:
        fd = os.open(filename, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as e:  # ELOOP: a symbolic link
        problem = f"it cannot be opened as a plain file ({e.strerror})"
    else:
        st = os.fstat(fd)
        problem = _untrusted(st) or (None if stat.S_ISREG(st.st_mode) else "it is not a regular file")
        if not problem:
            return fd
        os.close(fd)
    raise PermissionError(f"refusing to load {directory / filename}: {problem}, so it may not be what seastar_layers "
                          f"built. Delete it (it is rebuilt on the next call): rm {directory / filename}")


def _load(dir_fd: int, directory: Path, name: str) -> ctypes.CDLL | None:
    """The cached library `name`, if present and matching its checksum."""
    lib_fd = _open_trusted(dir_fd, directory, f"{name}.so")
    if lib_fd is None:
        return None
    ok_fd = _open_trusted(dir_fd, directory, f"{name}.sha256")
    try:
        if ok_fd is None or _read(ok_fd).decode(errors="replace").strip() != hashlib.sha256(_read(lib_fd)).hexdigest():
            os.close(lib_fd)
            return None
        lib = ctypes.CDLL(f"/proc/self/fd/{lib_fd}")  # the very file checked and hashed above
    finally:
        if ok_fd is not None:
            os.close(ok_fd)
    _library_fds.append(lib_fd)
    return lib


def _read(fd: int) -> bytes:
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _write(dir_fd: int, filename: str, data: bytes, mode: int) -> None:
    fd = os.open(filename, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _build(source: str, tools: toolchain.Toolchain, dir_fd: int, directory: Path, name: str) -> None:
    global build_count
    work = f".build-{secrets.token_hex(8)}"
    os.mkdir(work, 0o700, dir_fd=dir_fd)
    work_fd = os.open(work, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        program = f"program{tools.suffix}"
        _write(work_fd, program, source.encode(), 0o600)
        cmd = tools.command(Path(program), Path("program.so"))
        # the compiler runs in the build directory through its descriptor, not its path
        result = subprocess.run(cmd, cwd=f"/proc/self/fd/{work_fd}", pass_fds=(work_fd,), capture_output=True,
                                text=True)
        if result.returncode != 0:
            kept = f"failed-{name}{tools.suffix}"
            os.replace(program, kept, src_dir_fd=work_fd, dst_dir_fd=dir_fd)
            raise BuildError(f"compiling a generated kernel failed (this is a bug in seastar_layers; please report "
                             f"it with {directory / kept}):\n{' '.join(cmd)}\n{result.stderr[-4000:]}")
        built = os.open("program.so", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=work_fd)
        try:
            os.fchmod(built, 0o700)  # whatever mode the umask let the linker give
            checksum = hashlib.sha256(_read(built)).hexdigest()
        finally:
            os.close(built)
        # a new inode each time: a process that already loaded the old library keeps its mapping
        os.replace("program.so", f"{name}.so", src_dir_fd=work_fd, dst_dir_fd=dir_fd)
        _write(work_fd, "ok", checksum.encode(), 0o600)
        os.replace("ok", f"{name}.sha256", src_dir_fd=work_fd, dst_dir_fd=dir_fd)
        build_count += 1
        if config.debug():
            print(f"[seastar] built {directory / name}.so", file=sys.stderr)
    finally:
        os.close(work_fd)
        shutil.rmtree(work, dir_fd=dir_fd, ignore_errors=True)
