"""The progress bar (stderr, one line, only on a terminal or when asked) and the host timer."""

from __future__ import annotations

import io

import pytest

from wino.bench.progress import Progress
from wino.bench.timing import HostTimer, Settings


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_shows_the_case_and_the_count():
    stream = io.StringIO()
    bar = Progress(4, enabled=True, stream=stream)
    bar.advance()
    bar.show("fp16 N64 C64")
    assert stream.getvalue() == "\r\x1b[K[######..................] 1/4 fp16 N64 C64"
    bar.clear()
    assert stream.getvalue().endswith("\r\x1b[K")


def test_say_clears_the_bar_and_draws_it_again(capsys):
    stream = io.StringIO()
    bar = Progress(2, enabled=True, stream=stream)
    bar.show("case a")
    bar.say("a line")
    assert capsys.readouterr().out == "a line\n"
    assert stream.getvalue().endswith("\r\x1b[K\r\x1b[K[" + "." * 24 + "] 0/2 case a")


def test_only_on_a_terminal_unless_asked():
    quiet, tty = io.StringIO(), Terminal()
    Progress(1, stream=quiet).show("x")
    Progress(1, stream=tty).show("x")
    assert quiet.getvalue() == "" and tty.getvalue().endswith("] 0/1 x")


def test_host_timer_warms_up_then_takes_the_median():
    calls = []
    timer = HostTimer(Settings(warmup=2, repeats=5))
    assert timer.time_us(calls.append, sets=3) >= 0
    assert calls == [0, 1, 0, 1, 2, 0, 1]  # warm-up, then repeats rotating through the sets


@pytest.mark.parametrize(("warmup", "repeats"), [(-1, 1), (0, 0)])
def test_bad_settings(warmup, repeats):
    with pytest.raises(ValueError):
        Settings(warmup, repeats)
