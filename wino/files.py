"""File modes: what wino publishes through a temp file and a rename (mkstemp makes it 0600)
gets the mode a plain ``open()`` would have given it, 0666 less the process umask."""

from __future__ import annotations

import os


def umask() -> int:
    """The process umask (read by setting it and putting it back)."""
    current = os.umask(0o022)
    os.umask(current)
    return current


def open_mode() -> int:
    """The mode ``open(path, "w")`` creates a file with: 0666 less the umask."""
    return 0o666 & ~umask()


def chmod_as_open(fd: int) -> None:
    """Give a temp file (from mkstemp) the mode ``open()`` would have given it."""
    os.fchmod(fd, open_mode())
