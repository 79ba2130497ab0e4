"""TensorBoard: every numeric scalar of each epoch under ``tb/``, and the run's config as
text and as hyperparameters. On by default; ``logger.tensorboard=false`` turns it off.

The event file is written here, on the training thread, as each epoch ends: torch's
SummaryWriter hands events to a writer thread, whose error (a full disk) is printed as a
thread traceback and raised again only at some later call, as a bare OSError. Written here,
a failed write stops the run at the epoch it belongs to, naming the file, like any other
file of the run; a few kilobytes an epoch make no thread worth having.
"""

from __future__ import annotations

import io
import itertools
import logging
import math
import os
import socket
import time
from pathlib import Path
from typing import Any

import yaml

from rltrain.common.errors import SaveError
from rltrain.loggers.base import Logger
from rltrain.loggers.registry import LoggerContext, LoggerSpec, register
from rltrain.rundir.files import open_new_bytes

log = logging.getLogger("rltrain")

#: numbers the event files of one process, as TensorBoard's own writer does
_files = itertools.count()


def _hparams(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The config as TensorBoard hyperparameters: numbers, strings and booleans."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_hparams(value, f"{name}."))
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
        else:
            out[name] = str(value)
    return out


class EventFile:
    """One TensorBoard event file, written synchronously: records of TensorBoard's format
    (tensorboard's RecordWriter) in a file created afresh, never through a link."""

    def __init__(self, log_dir: Path) -> None:
        # imported here, when the logger is built: torch.utils.tensorboard and tensorboard
        # take 1.1 s alone (-X importtime), and this package is imported to read the logger
        # schema wherever a config is composed, with TensorBoard off or not at all
        from tensorboard.compat.proto.event_pb2 import (  # type: ignore[import-untyped]
            Event,
            SessionLog,
        )
        from tensorboard.summary.writer.record_writer import (  # type: ignore[import-untyped]
            RecordWriter,
        )

        self.Event, self.SessionLog = Event, SessionLog
        log_dir.mkdir(exist_ok=True)  # in the run directory, never a new one in its place
        # the name TensorBoard's own writer gives (it finds event files by "tfevents")
        self.path = log_dir / (f"events.out.tfevents.{int(time.time()):010d}."
                               f"{socket.gethostname()}.{os.getpid()}.{next(_files)}")
        self._file: io.BufferedWriter = open_new_bytes(self.path)
        self._records = RecordWriter(self._file)
        self.add(Event(wall_time=time.time(), file_version="brain.Event:2"))

    def add(self, event: Any) -> None:
        """Append ``event`` (buffered until :meth:`flush`)."""
        self._records.write(event.SerializeToString())

    def add_summary(self, summary: Any, step: int) -> None:
        self.add(self.Event(wall_time=time.time(), step=step, summary=summary))

    def purge_from(self, step: int) -> None:
        """Tell TensorBoard to drop the events at ``step`` and later in the older files of
        this directory (what SummaryWriter's ``purge_step`` writes)."""
        self.add(self.Event(step=step, file_version="brain.Event:2"))
        self.add(self.Event(step=step, session_log=self.SessionLog(
            status=self.SessionLog.START)))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        """Flush and close (the file is closed even when the flush fails: a full disk)."""
        self._file.close()


class TensorBoardLogger(Logger):
    """Every numeric scalar of the epoch record, at ``env_step``, under ``tb/``; the run's
    config as text and as hyperparameters (TensorBoard's HParams tab, whose metrics are the
    best and the last test return)."""

    #: the scalars the HParams tab shows for each run (their last values)
    METRICS = ("best/score", "test/return_mean")

    def __init__(self, log_dir: Path, purge_step: int | None = None,
                 config: dict[str, Any] | None = None) -> None:
        """:param purge_step: when resuming, events at this step and later (logged after the
            checkpoint) are discarded by TensorBoard, so curves continue without repeats.

        :raises SaveError: the event file cannot be written.
        """
        from torch.utils.tensorboard.summary import hparams, scalar, text

        self._scalar = scalar
        self._end = None
        #: a write failed: the run is stopping, and the file is not written again
        self._failed = False
        try:
            self.events = EventFile(log_dir)
            if purge_step is not None:
                self.events.purge_from(purge_step)
            if config is not None:
                dumped = yaml.safe_dump(config, sort_keys=False)
                self.events.add_summary(text("config", "```yaml\n" + dumped + "```"), 0)
                exp, ssi, self._end = hparams(_hparams(config),
                                              dict.fromkeys(self.METRICS, 0.0))
                self.events.add_summary(exp, 0)
                self.events.add_summary(ssi, 0)
            self.events.flush()
        except OSError as e:
            raise SaveError(f"could not write TensorBoard's event file in {log_dir}: "
                            f"{e.strerror or e}") from None

    def log_epoch(self, record: dict[str, Any]) -> None:
        step = int(record[self.step_key])
        try:
            for key, value in record.items():
                numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
                if numeric and key != self.step_key and math.isfinite(value):
                    self.events.add_summary(self._scalar(key, value), step)
            self.events.flush()
        except OSError as e:
            self._failed = True
            raise SaveError(f"could not write the TensorBoard events of epoch "
                            f"{record['epoch']} to {self.events.path}: {e.strerror or e}"
                            ) from None

    def finish(self, info: dict[str, Any]) -> None:
        try:
            if self._end is not None and not self._failed:
                self.events.add_summary(self._end, 0)
            self.events.close()
        except OSError as e:
            if not self._failed:  # a failure already stopped the run, and said so
                log.warning(f"could not write the end of {self.events.path}: "
                            f"{e.strerror or e}")


def build(on: bool, context: LoggerContext) -> TensorBoardLogger:
    """Under ``<run dir>/tb``; a resumed run drops the events logged after its checkpoint."""
    purge = None if context.resume_step is None else context.resume_step + 1
    return TensorBoardLogger(context.run_dir / "tb", purge_step=purge, config=context.config)


register(LoggerSpec(key="tensorboard", schema=bool, default=True, build=build,
                    package="tensorboard", doc="write TensorBoard event files under tb/"))
