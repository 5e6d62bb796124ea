"""Build errors a user can act on, as one line: the rule or file and field, what is wrong and
what to do (the messages of ConfigError, Refused, CacheError and CompileError say so). The
traceback only when asked: WINO_TRACEBACK=1."""

from __future__ import annotations

import contextlib
import functools
import os
import sys

from doit.exceptions import TaskFailed

from ..cache import CacheError
from ..config import ConfigError
from ..refusals import Refused
from .toolchains import CompileError

#: What wino raises with a message meant for the user (anything else is a bug: traceback).
USER_ERRORS = (ConfigError, Refused, CacheError, CompileError, FileNotFoundError)
TRACEBACK_HINT = "(WINO_TRACEBACK=1 shows the traceback)"


def traceback_wanted() -> bool:
    return os.environ.get("WINO_TRACEBACK", "") not in ("", "0")


def one_line(action):
    """Decorate a doit python-action: a user error becomes TaskFailed with its message."""

    @functools.wraps(action)
    def run(*args, **kwargs):
        try:
            return action(*args, **kwargs)
        except USER_ERRORS as err:
            if traceback_wanted():
                raise
            return TaskFailed(f"wino: {err} {TRACEBACK_HINT}")

    return run


@contextlib.contextmanager
def loading():
    """Around dodo.py's planning: a user error prints one line and exits 2 (doit would print
    the traceback of loading dodo.py)."""
    try:
        yield
    except USER_ERRORS as err:
        if traceback_wanted():
            raise
        print(f"wino: error: {err} {TRACEBACK_HINT}", file=sys.stderr)
        raise SystemExit(2) from None
