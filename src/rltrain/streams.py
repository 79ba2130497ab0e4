"""The process's standard streams and its exit, for a command-line tool that others pipe.

- :class:`PipeSafe` keeps training going when the reader of stdout goes away
  (``rltrain ... | head -1``, or the terminal closed): output is dropped from then on,
  nothing is raised.
- :class:`ConsoleHandler` is the run's console logging: messages on stdout, fitted to the
  terminal's width; warnings and errors labelled on stderr, coloured on a terminal.
- :func:`clip_long_words` keeps an error line readable when it echoes a huge value.
- :func:`fast_exit` ends the process without the interpreter's teardown, which costs about
  0.3 s once torch is loaded (a sixth of a short run), after running what a normal exit runs.

Ground floor: the standard library only.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import logging
import os
import re
import shutil
import sys
import textwrap
from typing import Any, NoReturn

#: errno values of a reader that went away: a pipe's or socket's, or a terminal that was
#: closed (EIO, after SIGHUP)
_GONE = (5, 32, 104)  # EIO, EPIPE, ECONNRESET


class PipeSafe(io.TextIOBase):
    """A standard stream that survives its reader going away: once writing fails with a
    broken pipe, output is dropped and training goes on."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._broken = False

    def write(self, text: str) -> int:
        if not self._broken:
            try:
                return self._stream.write(text)
            except (BrokenPipeError, ConnectionResetError):
                self._broken = True
            except OSError as e:
                if e.errno not in _GONE:
                    raise
                self._broken = True
        return len(text)

    def flush(self) -> None:
        if not self._broken:
            try:
                self._stream.flush()
            except (BrokenPipeError, ConnectionResetError):
                self._broken = True
            except OSError as e:
                if e.errno not in _GONE:
                    raise
                self._broken = True

    def isatty(self) -> bool:
        return not self._broken and self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._stream.encoding

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guard_streams() -> None:
    """Make stdout and stderr pipe-safe (once)."""
    if not isinstance(sys.stdout, PipeSafe):
        sys.stdout = PipeSafe(sys.stdout)
    if not isinstance(sys.stderr, PipeSafe):
        sys.stderr = PipeSafe(sys.stderr)


#: a word (no whitespace) longer than this in an error message is shown clipped
def terminal_width(stream: Any) -> int | None:
    """The width of the terminal ``stream`` writes to, or None when it is not a terminal (a
    log file, a pipe: lines are kept whole there, for grep)."""
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError, OSError):
        return None
    return shutil.get_terminal_size().columns


def fit(message: str, width: int | None, indent: str = "    ") -> str:
    """``message`` folded to ``width`` columns at spaces only (never inside a number, a path
    or a name), the continuation lines indented; unchanged when ``width`` is None."""
    if width is None or len(message) <= width or "\n" in message:
        return message
    return textwrap.fill(message, width=max(width, 40), subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False)


class ConsoleHandler(logging.Handler):
    """The console's log handler: INFO and below on stdout, folded to the terminal's width
    (see :func:`fit`); WARNING and above on stderr, labelled ``warning:`` or ``error:``, in
    colour when stderr is a terminal (and ``NO_COLOR`` is not set). The streams are looked up
    at each message, so the pipe-safe ones :func:`guard_streams` installs are used."""

    _LABELS = ((logging.ERROR, "error", "31"), (logging.WARNING, "warning", "33"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)
            if record.levelno < logging.WARNING:
                stream = sys.stdout
                text = fit(message, terminal_width(stream))
            else:
                stream = sys.stderr
                label, colour = next((name, c) for level, name, c in self._LABELS
                                     if record.levelno >= level)
                if terminal_width(stream) is not None and "NO_COLOR" not in os.environ:
                    label = f"\x1b[{colour}m{label}:\x1b[0m"
                else:
                    label += ":"
                text = f"{label} {message}"
            stream.write(text + "\n")
            stream.flush()
        except RecursionError:
            raise
        except Exception:  # noqa: BLE001 - logging's own contract: report, never raise
            self.handleError(record)


LONG_WORD = 200


def clip_long_words(message: str, limit: int = LONG_WORD) -> str:
    """``message`` with each word over ``limit`` characters shown as its start, its length and
    its end: an error that echoes a 100,000-character value stays one readable line."""

    def clip(m: re.Match[str]) -> str:
        word = m.group(0)
        return f"{word[:limit // 2]}...[{len(word):,} characters]...{word[-limit // 10:]}"

    return re.sub(rf"\S{{{limit + 1},}}", clip, message)


def os_error_text(e: OSError) -> str:
    """An OSError in one line: the path it met and what the system said (``/x: File name too
    long``), clipped like any error line."""
    what = e.strerror or str(e)
    where = f"{e.filename}: " if e.filename is not None else ""
    return clip_long_words(f"{where}{what}")


def fast_exit(code: int) -> NoReturn:
    """End the process with ``code``. Everything the run writes is closed by then; ``atexit``
    handlers (coverage, trackers, a user's env clean-up) run first, as on a normal exit, then
    logs and streams are flushed; the interpreter's own teardown is skipped."""
    try:
        atexit._run_exitfuncs()
    finally:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)
