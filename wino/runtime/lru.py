"""A bounded map in insertion order (a plain dict): ``put`` makes a key the most recently
used and drops the least recently used past ``slots``. The plan's remembered calls and its
run graphs keep their entries this way."""

from __future__ import annotations

from typing import Any


def put(entries: dict, key: Any, value: Any, slots: int) -> None:
    entries.pop(key, None)
    entries[key] = value  # the most recently used last
    while len(entries) > slots:
        entries.pop(next(iter(entries)))
