"""A one-line progress bar on stderr for long sweeps (no dependency): shown when stderr is a
terminal or when asked (``--progress``). ``say`` prints a line to stdout without tearing the
bar."""

from __future__ import annotations

import sys
from typing import TextIO

WIDTH = 24


class Progress:
    def __init__(self, total: int, enabled: bool | None = None, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.total, self.done = total, 0
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._shown = False
        self._label = ""

    def line(self, label: str) -> str:
        filled = WIDTH * self.done // max(self.total, 1)
        bar = "#" * filled + "." * (WIDTH - filled)
        return f"[{bar}] {self.done}/{self.total} {label}"

    def show(self, label: str) -> None:
        """Show the bar with the case now running."""
        self._label = label
        if self.enabled:
            self.stream.write("\r\x1b[K" + self.line(label))
            self.stream.flush()
            self._shown = True

    def advance(self) -> None:
        self.done += 1

    def clear(self) -> None:
        if self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._shown = False

    def say(self, text: str) -> None:
        """A line on stdout; the bar is cleared first and drawn again below it."""
        shown = self._shown
        self.clear()
        print(text, flush=True)
        if shown:
            self.show(self._label)
