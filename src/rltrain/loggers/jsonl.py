"""The run's own record: ``epochs.jsonl`` (one JSON object per epoch, flushed as the epoch
ends) and ``summary.json`` at the end; always on. Its reader is here too, next to the
writer, so the two agree on the format.

``summary.json`` is written even when the disk is full: the space it takes is held from the
start (:data:`RESERVE` bytes in its temporary file), and given back just before it is written.
A run directory removed while the run trains (:class:`rltrain.rundir.RunDirWatch`) is not
made again to hold a summary of nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from pathlib import Path
from typing import Any

from rltrain.errors import SaveError
from rltrain.files import open_append, write_new
from rltrain.loggers.base import Logger
from rltrain.rundir import RunDirWatch
from rltrain.stats import unflatten

log = logging.getLogger("rltrain")

#: bytes held for summary.json from the start of a run (a summary takes 1 to 10 KB)
RESERVE = 64 * 1024


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def read_records(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The epoch records of ``epochs.jsonl`` and what was wrong with the file: a torn last
    line (a write cut short by a full disk or a kill) is dropped and reported, not fatal."""
    problems: list[str] = []
    rows: list[dict[str, Any]] = []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict) or not isinstance(row.get("epoch"), int):
                raise ValueError("no epoch number")
        except ValueError:
            last = i == len(lines) - 1
            problems.append(f"{path.name} line {i + 1} is "
                            f"{'a torn last record' if last else 'not a valid record'}: dropped")
            continue
        rows.append(row)
    return rows, problems


class JsonlLogger(Logger):
    """``epochs.jsonl`` (one nested JSON object per epoch, flushed at once) and
    ``summary.json`` at the end."""

    def __init__(self, run_dir: Path, keep_epochs: int | None = None,
                 extra_summary: dict[str, Any] | None = None) -> None:
        """:param keep_epochs: when resuming, the epochs already done: later records (logged
            after the checkpoint) and a torn last line are dropped, so the file continues
            without gap or repeat."""
        self.run_dir = run_dir
        self.extra_summary = extra_summary if extra_summary is not None else {}
        self.path = run_dir / "epochs.jsonl"
        self._summary_tmp = run_dir / ".summary.json.tmp"
        try:
            if keep_epochs is not None and self.path.exists():
                rows, problems = read_records(self.path)
                for problem in problems:
                    log.warning(problem)
                kept = [json.dumps(r) + "\n" for r in rows if r["epoch"] <= keep_epochs]
                tmp = self.path.with_name(".epochs.jsonl.tmp")
                write_new(tmp, "".join(kept))
                tmp.replace(self.path)
            self._file = open_append(self.path)
            self._watch = RunDirWatch(run_dir)
        except OSError as e:
            raise SaveError(f"could not write {self.path}: {e.strerror or e}") from None
        # written out (not a sparse file), so that the file system counts the space as used
        with contextlib.suppress(OSError):  # no room even now: the summary will try anyway
            write_new(self._summary_tmp, " " * RESERVE)

    def log_epoch(self, record: dict[str, Any]) -> None:
        # a record written into a removed directory would be lost without a word
        self._watch.check(record["epoch"])
        row = unflatten({k: _json_safe(v) for k, v in record.items()})
        try:
            self._file.write(json.dumps(row) + "\n")
            self._file.flush()
        except OSError as e:
            raise SaveError(f"could not write the record of epoch {record['epoch']} to "
                            f"{self.path}: {e.strerror or e}") from None

    def finish(self, info: dict[str, Any]) -> None:
        # a failed flush: the record it held was reported when its write failed
        with contextlib.suppress(OSError):
            self._file.close()
        removed = self._watch.removed()
        self._watch.close()
        if removed:  # the run's failure says so; a summary would make a new, half directory
            return
        summary = unflatten({k: _json_safe(v) for k, v in info.items()})
        summary.update(self.extra_summary)
        tmp = self._summary_tmp
        try:
            # write_new removes the reserve first: its space is free for the summary
            write_new(tmp, json.dumps(summary, indent=2) + "\n")
            tmp.replace(self.run_dir / "summary.json")
        except OSError as e:
            tmp.unlink(missing_ok=True)
            log.warning(f"could not write {self.run_dir / 'summary.json'}: {e.strerror or e}")
