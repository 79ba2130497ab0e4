"""TensorBoard: every numeric scalar of each epoch under ``tb/``, and the run's config as
text and as hyperparameters. On by default; ``logger.tensorboard=false`` turns it off."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from rltrain.loggers.base import Logger
from rltrain.loggers.registry import LoggerContext, LoggerSpec, register


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


class TensorBoardLogger(Logger):
    """Every numeric scalar of the epoch record, at ``env_step``, under ``tb/``; the run's
    config as text and as hyperparameters (TensorBoard's HParams tab, whose metrics are the
    best and the last test return)."""

    #: the scalars the HParams tab shows for each run (their last values)
    METRICS = ("best/score", "test/return_mean")

    def __init__(self, log_dir: Path, purge_step: int | None = None,
                 config: dict[str, Any] | None = None) -> None:
        """:param purge_step: when resuming, events at this step and later (logged after the
            checkpoint) are discarded by TensorBoard, so curves continue without repeats."""
        # imported here, when the logger is built: torch.utils.tensorboard takes 0.1 s on top
        # of torch and 1.1 s alone (-X importtime), and this package is imported to read the
        # logger schema wherever a config is composed, with TensorBoard off or not at all
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams

        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)
        self._end = None
        if config is not None:
            text = yaml.safe_dump(config, sort_keys=False)
            self.writer.add_text("config", "```yaml\n" + text + "```", 0)
            exp, ssi, self._end = hparams(_hparams(config), dict.fromkeys(self.METRICS, 0.0))
            # SummaryWriter.__init__ sets file_writer to None, unannotated, before creating it,
            # so mypy takes its type to be None (a torch 2.x typing bug): here (and until
            # close()) it is the FileWriter
            self.writer.file_writer.add_summary(exp)  # type: ignore[attr-defined]
            self.writer.file_writer.add_summary(ssi)  # type: ignore[attr-defined]
            self.writer.flush()

    def log_epoch(self, record: dict[str, Any]) -> None:
        step = int(record[self.step_key])
        for key, value in record.items():
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            if numeric and key != self.step_key and math.isfinite(value):
                self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def finish(self, info: dict[str, Any]) -> None:
        if self._end is not None:
            # file_writer typed None by mypy: see __init__
            self.writer.file_writer.add_summary(self._end)  # type: ignore[attr-defined]
        self.writer.close()


def build(on: bool, context: LoggerContext) -> TensorBoardLogger:
    """Under ``<run dir>/tb``; a resumed run drops the events logged after its checkpoint."""
    purge = None if context.resume_step is None else context.resume_step + 1
    return TensorBoardLogger(context.run_dir / "tb", purge_step=purge, config=context.config)


register(LoggerSpec(key="tensorboard", schema=bool, default=True, build=build,
                    package="tensorboard", doc="write TensorBoard event files under tb/"))
