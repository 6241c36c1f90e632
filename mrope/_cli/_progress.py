"""Progress on stderr for long commands: on a terminal a bar (tqdm when installed, else a plain one), kept
visible when the terminal reports no width (some ptys, CI runners and editor shells say 0 columns, where
tqdm would draw nothing); elsewhere (a log file, a pipe) a plain line every :data:`LINE_EVERY_S` seconds;
nothing with ``--quiet``. Messages written through the bar appear above it."""

from __future__ import annotations

import os
import shutil
import sys
import time
from typing import Any, TextIO

LINE_EVERY_S = 10.0
"""Seconds between progress lines when stderr is not a terminal."""

FALLBACK_COLUMNS = 80
"""The bar's width when the terminal reports none."""


def terminal_size(stream: TextIO) -> tuple[int, int] | None:
    """The terminal's ``(columns, lines)``, or ``None`` when it reports no usable size (0 columns or 0
    lines: tqdm then draws nothing at all)."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):
        size = shutil.get_terminal_size((0, 0))
    return (size.columns, size.lines) if size.columns >= 20 and size.lines >= 1 else None


class Progress:
    """No bar: :meth:`write` prints the line, :meth:`update` does nothing."""

    def __init__(self, total: int, desc: str, stream: TextIO) -> None:
        self.total, self.desc, self.stream, self.done = total, desc, stream, 0

    def update(self, n: int = 1) -> None:
        self.done += n

    def write(self, line: str) -> None:
        print(line, file=self.stream, flush=True)

    def close(self) -> None:
        pass

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class PlainBar(Progress):
    """``desc [#######.......] 12/40  3.1/s`` redrawn in place with ``\\r``, at most 10 times a second."""

    WIDTH = 30

    def __init__(self, total: int, desc: str, stream: TextIO) -> None:
        super().__init__(total, desc, stream)
        self.start = self.last = time.monotonic()
        self.shown = False
        self._draw()

    def _draw(self) -> None:
        frac = self.done / self.total if self.total else 1.0
        filled = int(frac * self.WIDTH)
        rate = self.done / max(time.monotonic() - self.start, 1e-9)
        bar = "#" * filled + "." * (self.WIDTH - filled)
        self.stream.write(f"\r{self.desc} [{bar}] {self.done}/{self.total} {rate:.1f}/s")
        self.stream.flush()
        self.shown = True

    def update(self, n: int = 1) -> None:
        super().update(n)
        now = time.monotonic()
        if now - self.last >= 0.1 or self.done >= self.total:
            self.last = now
            self._draw()

    def write(self, line: str) -> None:
        self.stream.write("\r\x1b[2K" + line + "\n")
        self._draw()

    def close(self) -> None:
        if self.shown:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()
            self.shown = False


class LineProgress(Progress):
    """Not a terminal: ``desc: 120/400 (30%)`` on its own line at most every ``every_s`` seconds."""

    def __init__(self, total: int, desc: str, stream: TextIO, every_s: float = LINE_EVERY_S) -> None:
        super().__init__(total, desc, stream)
        self.every_s = every_s
        self.last = time.monotonic()

    def update(self, n: int = 1) -> None:
        super().update(n)
        now = time.monotonic()
        if now - self.last >= self.every_s and self.done < self.total:
            self.last = now
            pct = 100.0 * self.done / self.total if self.total else 100.0
            print(f"{self.desc}: {self.done}/{self.total} ({pct:.0f}%)", file=self.stream, flush=True)


class TqdmBar(Progress):
    """The same interface over ``tqdm``."""

    def __init__(self, total: int, desc: str, stream: TextIO, tqdm: Any) -> None:
        super().__init__(total, desc, stream)
        self._tqdm = tqdm
        size = {"dynamic_ncols": True} if terminal_size(stream) else {"ncols": FALLBACK_COLUMNS, "nrows": 24}
        self._bar = tqdm(total=total, desc=desc, file=stream, unit="sample", **size)

    def update(self, n: int = 1) -> None:
        super().update(n)
        self._bar.update(n)

    def write(self, line: str) -> None:
        self._tqdm.write(line, file=self.stream)

    def close(self) -> None:
        self._bar.close()


def progress(total: int, desc: str, *, quiet: bool = False, stream: TextIO | None = None) -> Progress:
    """The bar for ``total`` steps: tqdm if importable, else :class:`PlainBar`, when ``stream`` (default
    stderr) is a terminal; a :class:`LineProgress` when it is not; none (a :class:`Progress` that only
    prints messages) when ``quiet``."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    if quiet:
        return Progress(total, desc, stream)
    if not (callable(isatty) and isatty()):
        return LineProgress(total, desc, stream)
    try:
        from tqdm import tqdm
    except ImportError:
        return PlainBar(total, desc, stream)
    return TqdmBar(total, desc, stream, tqdm)
