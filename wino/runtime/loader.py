"""Load a host kernel's shared object from the bytes whose sha256 was checked, never from its
path again: a file swapped in the cache between the check and the load is not what runs.

The bytes go to an anonymous, sealed memory file (``os.memfd_create``; no write, grow or
shrink once sealed) that ``dlopen`` opens as ``/proc/self/fd/N``. The descriptor stays open as
long as the process (a library is never unloaded): glibc finds an already loaded library by
its path string first, so a closed and reused descriptor number would hand back the old one.
Where memfd is unavailable (not Linux, or a sandbox that forbids it) the bytes go to a fresh
file in a private folder (mode 0700) instead; where neither works, ``LoaderError`` says so.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import tempfile
import threading

#: Every image loaded: the descriptor (or private file) that keeps its path unique, and the
#: library.
_LOADED: list[tuple[int | str, ctypes.CDLL]] = []
_LOCK = threading.Lock()
_SEALS = ("F_SEAL_SHRINK", "F_SEAL_GROW", "F_SEAL_WRITE", "F_SEAL_SEAL")


class LoaderError(RuntimeError):
    """No way to load checked bytes here: what failed and what to do."""


def load_shared_object(image: bytes, name: str) -> ctypes.CDLL:
    """``dlopen`` exactly ``image`` (a shared object's bytes, already checked); ``name`` labels
    the memory file (it shows in /proc/PID/maps) and the errors."""
    with _LOCK:
        try:
            handle, path = _memfd(image, name)
        except (AttributeError, OSError) as memfd_error:
            handle, path = _private_file(image, name, memfd_error)
        library = ctypes.CDLL(path)
        _LOADED.append((handle, library))
        return library


def _memfd(image: bytes, name: str) -> tuple[int, str]:
    fd = os.memfd_create(f"wino-{name}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        _write_all(fd, image)
        seals = 0
        for seal in _SEALS:
            seals |= getattr(fcntl, seal, 0)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    except BaseException:
        os.close(fd)
        raise
    return fd, f"/proc/self/fd/{fd}"


def _private_file(image: bytes, name: str, why: BaseException) -> tuple[str, str]:
    try:
        folder = tempfile.mkdtemp(prefix="wino-load-")  # mode 0700: only this user
        path = os.path.join(folder, f"{name}.so")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o500)
        try:
            _write_all(fd, image)
        finally:
            os.close(fd)
    except OSError as err:
        raise LoaderError(
            f"cannot load kernel {name} from its checked bytes: memfd_create is unavailable "
            f"({why}) and a private temporary file failed too ({err}); set TMPDIR to a "
            "writable folder"
        ) from err
    return path, path


def _write_all(fd: int, image: bytes) -> None:
    view = memoryview(image)
    while view:
        view = view[os.write(fd, view) :]
