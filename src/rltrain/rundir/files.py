"""Writing files without following links.

A run or sweep directory may have been made by someone else, or changed since: a symbolic
link planted where rltrain writes (``rltrain.log`` -> ``~/.bashrc``) would have rltrain
truncate or append to the file it points to. Every file rltrain writes in a run or sweep
directory is opened here: a new file is created afresh (whatever was at its name, a link
included, is removed first, never followed), and a file appended to is opened with
``O_NOFOLLOW``, so a link there fails with :class:`LinkError` instead of being written through.

Imports the standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import os
from collections.abc import Iterator
from pathlib import Path

#: the files a run keeps its weights in, by the ``--weights`` name of rltrain-eval, -export
#: and -collect: the deployable policy at the best test score and at the end, and the whole
#: training state of the newest checkpoint
WEIGHT_FILES = {
    "best": Path("best") / "policy.pt",
    "final": Path("final") / "policy.pt",
    "last": Path("checkpoints") / "last.pt",
}


class LinkError(OSError):
    """A file rltrain would append to is a symbolic link."""


def link_target(link: Path) -> str:
    """Where a symbolic link points, for a message ("?" if it cannot be read)."""
    try:
        return os.readlink(link)
    except OSError:
        return "?"


def _link_error(path: Path) -> LinkError:
    return LinkError(errno.ELOOP, f"{path} is a symbolic link (to {link_target(path)}); "
                     "rltrain never writes through a link: remove it or put the file itself "
                     "there", str(path))


def _create(path: Path | str) -> int:
    return os.open(fresh(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)


def open_new(path: Path | str, *, encoding: str | None = "utf-8") -> io.TextIOWrapper:
    """Create ``path`` afresh for writing text: an old file or link of that name is removed
    first (not followed). For temporary files that are then renamed into place
    (``os.replace`` replaces a link itself, never its target)."""
    return open(_create(path), "w", encoding=encoding)  # noqa: SIM115 - the caller closes


def open_new_bytes(path: Path | str) -> io.BufferedWriter:
    """:func:`open_new` for bytes."""
    return open(_create(path), "wb")  # noqa: SIM115 - the caller closes


def open_append(path: Path | str, *, encoding: str | None = "utf-8") -> io.TextIOWrapper:
    """Open ``path`` for appending text (created if missing); LinkError if it is a link."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _link_error(path) from None
        raise
    return open(fd, "a", encoding=encoding)  # noqa: SIM115 - the caller closes


def fresh(path: Path | str) -> Path:
    """Remove whatever is at ``path`` (a link itself, not its target) so that a library that
    opens by name (h5py, onnx) creates a new file there."""
    path = Path(path)
    path.unlink(missing_ok=True)
    return path


def write_new(path: Path | str, text: str) -> None:
    """``path.write_text(text)``, without following a link at ``path``."""
    with open_new(path) as f:
        f.write(text)


@contextlib.contextmanager
def replacing(path: Path | str, tmp_name: str | None = None) -> Iterator[Path]:
    """A fresh temporary path beside ``path`` (``.NAME.tmp``, or ``tmp_name``) for the block
    to write, renamed over ``path`` when the block ends. On any way out of the block but its
    end (an error, a full disk, Ctrl-C, a signal turned into an exception) the temporary
    file is removed and ``path`` is as it was: nothing half-written is left, under any name.
    ``os.replace`` replaces a link at ``path`` itself, never its target."""
    path = Path(path)
    tmp = fresh(path.with_name(tmp_name or f".{path.name}.tmp"))
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


def links_among(paths: list[Path]) -> list[Path]:
    """The paths that are symbolic links, and the links directly inside those that are
    directories (rltrain writes no deeper in a run directory)."""
    found = []
    for path in paths:
        if path.is_symlink():
            found.append(path)
        elif path.is_dir():
            found.extend(p for p in sorted(path.iterdir()) if p.is_symlink())
    return found


class NoFollowFileHandler(logging.FileHandler):
    """A logging FileHandler that appends without following a link (LinkError instead)."""

    def _open(self) -> io.TextIOWrapper:
        return open_append(self.baseFilename, encoding=self.encoding)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            super().emit(record)
        except OSError:  # the file could not be opened (a link): logging's own report
            self.handleError(record)
