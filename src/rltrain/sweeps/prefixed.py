"""Console streams whose every line starts with a prefix (``[job N] ``): jobs that run side
by side share one console (a joblib or Ray worker's jobs, a batched sweep's members), so each
line says whose it is. Imports nothing of rltrain's.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import threading
from dataclasses import dataclass
from typing import Any


class PrefixedStream(io.TextIOBase):
    """A text stream that writes each whole line to ``stream`` with ``prefix`` before it, in
    one write (lines of processes sharing a pipe or terminal then never mix). It says it is
    no terminal, so that rich prints progress lines rather than live bars, which jobs side by
    side would draw over each other."""

    def __init__(self, stream: Any, prefix: str) -> None:
        super().__init__()
        self.stream, self.prefix = stream, prefix
        self._partial = ""
        self._lock = threading.Lock()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self.stream, "encoding", "utf-8"))

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with self._lock:
            *lines, self._partial = (self._partial + text).split("\n")
            if lines:
                self.stream.write("".join(f"{self.prefix}{line}\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.stream.flush()

    def finish(self) -> None:
        """End a line left unfinished, and flush."""
        if self._partial:
            self.write("\n")
        self.flush()


@dataclass
class PrefixedConsole:
    """The streams :func:`prefix_console` replaced, to put back with :meth:`remove`."""

    raw: dict[str, Any]
    handlers: dict[logging.StreamHandler, Any]

    def remove(self) -> None:
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, PrefixedStream):
                stream.finish()
        sys.stdout, sys.stderr = self.raw["stdout"], self.raw["stderr"]
        for handler, stream in self.handlers.items():
            handler.setStream(stream)


def prefix_console(prefix: str) -> PrefixedConsole:
    """Prefix ``sys.stdout``, ``sys.stderr`` and the logging handlers that write to them,
    until :meth:`PrefixedConsole.remove`."""
    streams = PrefixedConsole({"stdout": sys.stdout, "stderr": sys.stderr}, {})
    wrapped = {id(raw): PrefixedStream(raw, prefix) for raw in streams.raw.values()}
    for handler in logging.getLogger().handlers:
        stream = getattr(handler, "stream", None)
        if (isinstance(handler, logging.StreamHandler)
                and not isinstance(handler, logging.FileHandler) and id(stream) in wrapped):
            streams.handlers[handler] = stream
            handler.setStream(wrapped[id(stream)])
    sys.stdout, sys.stderr = (wrapped[id(streams.raw[name])] for name in ("stdout", "stderr"))
    return streams
