"""The process's standard streams and its exit, for a command-line tool that others pipe.

- :class:`PipeSafe` keeps training going when the reader of stdout goes away
  (``rltrain ... | head -1``, or the terminal closed): output is dropped from then on,
  nothing is raised.
- :class:`ConsoleHandler` is the run's console logging: messages on stdout, fitted to the
  terminal's width; warnings and errors labelled on stderr, coloured on a terminal.
- :func:`echo` shows a value in a message (an array, a space, a long list or string) in one
  short line; :func:`clip_long_words` is the net under every message a command prints, so a
  value echoed whole somewhere still reaches the console short.
- :data:`FILE_ONLY` marks a log record for ``rltrain.log`` alone (detail behind a console
  line that says it in a user's terms).
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
from collections.abc import Callable
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
        written = self._unless_gone(self._stream.write, text)
        return len(text) if written is None else written

    def flush(self) -> None:
        self._unless_gone(self._stream.flush)

    def _unless_gone(self, op: Callable[..., Any], *args: Any) -> Any:
        """``op(*args)`` on the stream, or None once its reader has gone (a broken pipe, a
        reset connection, or an errno of ``_GONE``): from then on nothing is tried again."""
        if self._broken:
            return None
        try:
            return op(*args)
        except (BrokenPipeError, ConnectionResetError):
            self._broken = True
        except OSError as e:
            if e.errno not in _GONE:
                raise
            self._broken = True
        return None

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
        if getattr(record, FILE_ONLY_KEY, False):
            return  # detail for rltrain.log; the console has a line that sums it up
        try:
            message = clip_long_words(self.format(record))
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


#: ``log.info(detail, extra=FILE_ONLY)``: the record goes to rltrain.log, not the console
FILE_ONLY_KEY = "rltrain_file_only"
FILE_ONLY = {FILE_ONLY_KEY: True}

#: a word (no whitespace) longer than this in a message is shown clipped
LONG_WORD = 200
#: a bracketed value (an array's or a list's repr) longer than this, or spanning lines, is
#: shown shortened
LONG_BRACKETS = 120
#: what :func:`echo` aims at: a value echoed in a message takes about this many characters
ECHO_LIMIT = 80


def clip_long_words(message: str, limit: int = LONG_WORD) -> str:
    """``message`` with each word over ``limit`` characters shown as its start, its length and
    its end, and each bracketed value that spans lines or runs over :data:`LONG_BRACKETS`
    characters (numpy prints a (7, 7, 3) array in 55 lines) shortened to its first and last
    numbers and their count: an error that echoes a huge value stays one readable line."""

    def clip(m: re.Match[str]) -> str:
        word = m.group(0)
        return f"{word[:limit // 2]}...[{len(word):,} characters]...{word[-limit // 10:]}"

    return re.sub(rf"\S{{{limit + 1},}}", clip, _fold_brackets(message))


_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?inf|nan|True|False")
_SEPARATORS = re.compile(r"[\s,\[\]()]+")


def _fold_brackets(message: str) -> str:
    """Each outermost ``[...]`` of ``message`` that spans lines or is longer than
    :data:`LONG_BRACKETS`, shortened: ``[10 5 3 ... 10 5 3] (147 values)``."""
    if "[" not in message:
        return message
    out, depth, start, last = [], 0, 0, 0
    for i, char in enumerate(message):
        if char == "[":
            if depth == 0:
                start = i
            depth += 1
        elif char == "]" and depth:
            depth -= 1
            if depth == 0:
                span = message[start:i + 1]
                if "\n" in span or len(span) > LONG_BRACKETS:
                    out += [message[last:start], _short_brackets(span)]
                    last = i + 1
    return "".join(out) + message[last:] if out else message


def _short_brackets(span: str) -> str:
    tokens = [t for t in _SEPARATORS.split(span) if t]
    values = [t for t in tokens if _NUMBER.fullmatch(t)]
    if len(values) >= 2 and len(values) == len(tokens):
        if len(set(values)) == 1:
            return f"[{values[0]} ...] ({len(values):,} values, all {values[0]})"
        head, tail = " ".join(values[:3]), " ".join(values[-3:])
        return f"[{head} ... {tail}] ({len(values):,} values)"
    flat = " ".join(span.split())
    return _clip_middle(flat, LONG_BRACKETS)


def _clip_middle(text: str, limit: int) -> str:
    """``text`` cut in the middle to about ``limit`` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit // 2]}...[{len(text):,} characters]...{text[-(limit // 4):]}"


def echo(value: Any, limit: int = ECHO_LIMIT) -> str:
    """``value`` as a message echoes it: on one line, about ``limit`` characters at most.

    A gymnasium space by its kind, bounds (one number when every entry shares it, else their
    range), shape and dtype, as its repr would be without the arrays; an array by its shape,
    dtype and range; a long list, tuple or dict by its first items and its length; a long
    string by its ends and its length; anything else by its repr, on one line, cut in the
    middle. Standard library only: arrays and spaces are recognised by what they offer."""
    return _clip_middle(_echo(value, limit), 2 * max(limit, 40))


def _echo(value: Any, limit: int) -> str:
    if isinstance(value, str):
        return repr(value) if len(value) <= limit else repr(_clip_middle(value, limit))
    if _is_space(value):
        return _space(value, limit)
    if _is_array(value):
        return _array(value, limit)
    if isinstance(value, (list, tuple, dict)):
        return _collection(value, limit)
    return " ".join(repr(value).split())


def _is_array(value: Any) -> bool:
    return all(hasattr(value, a) for a in ("shape", "dtype", "ravel", "tolist"))


def _is_space(value: Any) -> bool:
    return any(c.__name__ == "Space" and c.__module__.startswith("gymnasium")
               for c in type(value).__mro__)


def _space(space: Any, limit: int) -> str:
    name = type(space).__name__
    subspaces = getattr(space, "spaces", None)
    if isinstance(subspaces, dict):
        inner = ", ".join(f"{k!r}: {_clip_middle(_echo(v, limit), limit)}"
                          for k, v in subspaces.items())
        return f"{name}({inner})"
    if isinstance(subspaces, tuple):
        return f"{name}({', '.join(_clip_middle(_echo(v, limit), limit) for v in subspaces)})"
    low, high = getattr(space, "low", None), getattr(space, "high", None)
    if _is_array(low) and _is_array(high):
        return f"{name}({_bound(low)}, {_bound(high)}, {tuple(space.shape)}, {space.dtype})"
    return " ".join(repr(space).split())


def _bound(array: Any) -> str:
    """Box bounds as gymnasium prints one shared by every entry; else their range."""
    flat = array.ravel()
    if flat.size == 0:
        return "[]"
    lo, hi = flat.min(), flat.max()
    return str(lo) if lo == hi else f"{lo} to {hi}"


def _array(array: Any, limit: int) -> str:
    text = " ".join(repr(array).split())
    if len(text) <= limit:
        return text
    try:
        range_ = f", {_bound(array)}" if array.size else ""
    except (TypeError, ValueError):  # not orderable (objects)
        range_ = ""
    return f"array of shape {tuple(array.shape)} {array.dtype}{range_}"


def _collection(value: list[Any] | tuple[Any, ...] | dict[Any, Any], limit: int) -> str:
    items = ([f"{_echo(k, limit)}: {_echo(v, limit)}" for k, v in value.items()]
             if isinstance(value, dict) else [_echo(v, limit) for v in value])
    opening, closing = ("{", "}") if isinstance(value, dict) else (
        ("[", "]") if isinstance(value, list) else ("(", ")"))
    whole = opening + ", ".join(items) + ("," if isinstance(value, tuple) and len(items) == 1
                                          else "") + closing
    if len(whole) <= limit:
        return whole
    shown: list[str] = []
    for item in items:
        if len(", ".join([*shown, item])) > limit // 2 and shown:
            break
        shown.append(item)
    return f"{opening}{', '.join(shown)}, ...{closing} ({len(items):,} items)"


def short(e: BaseException, limit: int = 160) -> str:
    """The first line of an exception's message, cut to ``limit`` characters."""
    text = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
