"""Progress that suits where it goes: a tqdm bar on a terminal, plain lines in a log.

A bar redrawn with ``\\r`` becomes one line per redraw in a redirected log (hundreds of
them), and a log with no line for half an hour looks like a hang. :func:`progress` gives a
tqdm bar when ``stream`` is a terminal, otherwise a :class:`LineProgress`: one line every
``every_s`` seconds and one at the end, each with the count, the elapsed time and an
estimate of the time left::

    epoch 1/2: 20/63 batches (32%), 0:14 elapsed, ~0:30 left, loss=2.301

Both answer the part of tqdm's interface fastload uses (``update``, ``set_postfix``,
``close``, a context manager), so a loop calls one object whichever it got.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

__all__ = ["LineProgress", "format_duration", "is_terminal", "progress"]


def format_duration(seconds: float | None) -> str:
    """``75.2`` -> ``'1:15'``, ``3725`` -> ``'1:02:05'``; ``'?'`` for None or a negative."""
    if seconds is None or seconds < 0 or seconds != seconds:  # NaN
        return "?"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def is_terminal(stream: TextIO | None) -> bool:
    """Whether ``stream`` is an interactive terminal (False for a file, a pipe, or None)."""
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class LineProgress:
    """tqdm's interface, written as plain lines: one every ``every_s`` seconds (the first
    after ``every_s``) and one at :meth:`close` when anything was counted. ``disable=True``
    writes nothing."""

    def __init__(self, total: int | None = None, desc: str = "", unit: str = "it", *,
                 initial: int = 0, every_s: float = 30.0, stream: TextIO | None = None,
                 disable: bool = False, clock=time.monotonic) -> None:
        if every_s <= 0:
            raise ValueError(f"every_s should be a positive number of seconds, but got "
                             f"every_s={every_s}")
        self.total, self.desc, self.unit = total, desc, unit
        self.n = self._initial = initial
        self.disable = disable
        self._every_s = every_s
        self._stream = stream
        self._clock = clock
        self._start = self._last = clock()
        self._postfix = ""
        self._closed = False

    def update(self, n: int = 1) -> None:
        self.n += n
        if not self.disable and self._clock() - self._last >= self._every_s:
            self._write()

    def set_postfix(self, refresh: bool = True, **values: Any) -> None:
        self._postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def set_description(self, desc: str, refresh: bool = True) -> None:
        self.desc = desc

    def refresh(self) -> None:
        """Nothing to redraw: the next line shows the count (tqdm's redraw)."""

    def line(self) -> str:
        """The line this progress would write now."""
        elapsed = self._clock() - self._start
        done = self.n - self._initial
        parts = [f"{self.n}/{self.total} {self.unit}" if self.total else f"{self.n} {self.unit}"]
        if self.total:
            parts[0] += f" ({100 * self.n / self.total:.0f}%)"
        parts.append(f"{format_duration(elapsed)} elapsed")
        if self.total and done > 0:
            left = elapsed / done * max(self.total - self.n, 0)
            parts.append(f"~{format_duration(left)} left")
        if self._postfix:
            parts.append(self._postfix)
        return (f"{self.desc}: " if self.desc else "") + ", ".join(parts)

    def _write(self) -> None:
        stream = self._stream if self._stream is not None else sys.stderr
        print(self.line(), file=stream, flush=True)
        self._last = self._clock()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self.disable and self.n > self._initial:
            self._write()

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress(total: int | None = None, desc: str = "", unit: str = "it", *, initial: int = 0,
             disable: bool = False, every_s: float = 30.0, stream: TextIO | None = None,
             leave: bool = True):
    """A tqdm bar on ``stream`` (default stderr) when it is a terminal, else a
    :class:`LineProgress` writing a line every ``every_s`` seconds and one at the end."""
    stream = stream if stream is not None else sys.stderr
    if is_terminal(stream):
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, unit=unit, initial=initial, disable=disable,
                    file=stream, leave=leave)
    return LineProgress(total, desc, unit, initial=initial, every_s=every_s, stream=stream,
                        disable=disable)
