"""The run's own record: ``epochs.jsonl`` (one JSON object per epoch, flushed as the epoch
ends) and ``summary.json`` at the end; always on. Its reader is here too, next to the
writer, so the two agree on the format.

``summary.json`` is written even when the disk is full: the space it takes is held from the
start of training (:data:`RESERVE` bytes in its temporary file), and given back just before it
is written. A run stopped before training began (a signal, a refusal) never held it, so leaves
no such file; the summary's own temporary file is removed on any failure, a signal included
(:func:`rltrain.rundir.files.replacing`). A run directory removed while the run trains
(:class:`rltrain.rundir.directory.RunDirWatch`) is not made again to hold a summary of nothing.

``epochs.jsonl`` is read a line at a time, each at most
:data:`rltrain.rundir.stored_data.MAX_RECORD_BYTES` (:func:`rltrain.rundir.stored_data.json_lines`):
a resume holds one record in memory, whatever the file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rltrain.common.errors import SaveError
from rltrain.common.stats import unflatten
from rltrain.loggers.base import Logger
from rltrain.rundir.directory import RunDirWatch
from rltrain.rundir.files import open_append, open_new, replacing, write_new
from rltrain.rundir.stored_data import StoredDataError, json_lines

log = logging.getLogger("rltrain")

#: bytes held for summary.json from the start of a run (a summary takes 1 to 10 KB)
RESERVE = 64 * 1024


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def read_records(path: Path, warn: Callable[[str], object] = log.warning
                 ) -> Iterator[dict[str, Any]]:
    """The epoch records of ``epochs.jsonl``, one at a time; a line that is not one (a torn
    last line, left by a full disk or a kill, or a line longer than any record rltrain
    writes) is dropped, and ``warn`` is called with the file, the line and why, not fatal.

    :raises StoredDataError: the file is not a regular file or cannot be read."""
    for line in json_lines(path):
        value = line.value
        if line.problem is None and isinstance(value, dict) and isinstance(
                value.get("epoch"), int):
            yield value
            continue
        what = ("a torn last record" if line.torn else
                f"not a valid record ({line.problem or 'no epoch number'})")
        warn(f"{line.where(path)} is {what}: dropped")


class JsonlLogger(Logger):
    """``epochs.jsonl`` (one nested JSON object per epoch, flushed at once) and
    ``summary.json`` at the end."""

    def __init__(self, run_dir: Path, keep_epochs: int | None = None,
                 extra_summary: dict[str, Any] | None = None, run_id: str | None = None
                 ) -> None:
        """:param keep_epochs: when resuming, the epochs already done: later records (logged
            after the checkpoint) and a torn last line are dropped, so the file continues
            without gap or repeat.
        :param run_id: the run's id (rltrain.rundir.directory.new_identity), in every record as
            ``run``: a record copied in from another run is told apart by it."""
        self.run_dir = run_dir
        self.run_id = run_id
        self.extra_summary = extra_summary if extra_summary is not None else {}
        self.path = run_dir / "epochs.jsonl"
        self._summary_tmp = run_dir / ".summary.json.tmp"
        try:
            if keep_epochs is not None and self.path.exists():
                self._keep(keep_epochs)
            self._file = open_append(self.path)
            self._watch = RunDirWatch(run_dir)
        except StoredDataError as e:
            raise SaveError(f"could not resume the record: {e}") from None
        except OSError as e:
            raise SaveError(f"could not write {self.path}: {e.strerror or e}") from None

    def _keep(self, keep_epochs: int) -> None:
        """Rewrite ``epochs.jsonl`` with the records of the epochs a resumed run has done,
        a record at a time (a file of any size costs one record of memory); an interrupted
        rewrite leaves the file as it was and no temporary one."""
        with replacing(self.path, ".epochs.jsonl.tmp") as tmp, open_new(tmp) as out:
            for row in read_records(self.path):
                if row["epoch"] <= keep_epochs:
                    out.write(json.dumps(row) + "\n")

    def start_run(self, plan: dict[str, Any]) -> None:
        super().start_run(plan)
        # held from here, where training begins: a run stopped before it never held the
        # space, so leaves no file. Written out (not a sparse file), so that the file system
        # counts the space as used
        with contextlib.suppress(OSError):  # no room even now: the summary will try anyway
            write_new(self._summary_tmp, " " * RESERVE)

    def log_epoch(self, record: dict[str, Any]) -> None:
        # a record written into a removed directory would be lost without a word
        self._watch.check(record["epoch"])
        row = unflatten({k: _json_safe(v) for k, v in record.items()})
        if self.run_id is not None:
            row["run"] = self.run_id
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
        try:
            # replacing() removes the reserve first: its space is free for the summary; on any
            # failure, a signal included, the temporary file goes too
            with replacing(self.run_dir / "summary.json", self._summary_tmp.name) as tmp:
                write_new(tmp, json.dumps(summary, indent=2) + "\n")
        except OSError as e:
            log.warning(f"could not write {self.run_dir / 'summary.json'}: {e.strerror or e}")
