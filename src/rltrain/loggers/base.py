"""The logger protocol: what the trainer calls on every logger of a run.

A logger receives flat records (``{"test/return_mean": 475.0, ...}``) and writes them;
nothing else in rltrain writes log files. The helpers below serve the loggers that keep a
tracker's run (W&B, MLflow).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


class Logger:
    """The logger protocol; every hook is optional."""

    #: the record's count that curves are plotted against: ``env_step``, or ``gradient_step``
    #: for an offline run (set from the plan by :meth:`start_run`)
    step_key = "env_step"

    def start_run(self, plan: dict[str, Any]) -> None:
        """Training begins: ``plan`` has ``step_key`` (what an epoch's steps count: env_step
        or, offline, gradient_step), ``planned_steps`` (the run's budget in those, 0 if not
        known), ``step`` (where it starts: 0, or a resumed run's count), ``max_epochs``, and
        the env-step figures ``planned_env_steps`` and ``env_step``. Subclasses that override
        this call it."""
        self.step_key = str(plan.get("step_key") or "env_step")

    def start_warmup(self, num_steps: int) -> None:
        """The random warm-up before the first epoch begins: ``num_steps`` env steps, reported
        by :meth:`advance` like an epoch's (an off-policy run with
        ``trainer.random_warmup_env_steps``)."""

    def start_epoch(self, epoch: int, num_steps: int, done: int = 0) -> None:
        """An epoch of ``num_steps`` steps begins (``done`` of them before a resume)."""

    def advance(self, num_steps: int) -> None:
        """``num_steps`` more steps of the current epoch (or of the warm-up) are done."""

    def start_test(self, epoch: int, num_episodes: int) -> None:
        """The epoch's test step begins."""

    def test_progress(self, steps: int, episodes: int) -> None:
        """Where the epoch's test step stands: ``steps`` env steps taken and ``episodes``
        episodes counted so far (called after every vector step: keep it cheap)."""

    def log_epoch(self, record: dict[str, Any]) -> None:
        """An epoch ended; ``record`` is its flattened EpochStats."""

    def finish(self, info: dict[str, Any]) -> None:
        """The run ended; ``info`` is the flattened InfoStats plus run facts."""


def numeric_values(record: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of a flat record (booleans, strings, NaN and infinities left out)."""
    out = {}
    for key, value in record.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            out[key] = float(value)
    return out


def read_run_id(run_dir: Path, name: str) -> str | None:
    """A tracker's run id kept in the run directory (``.wandb_id``) by an earlier start of
    this run, so that a resume continues the same tracker run; None if there is none."""
    try:
        return (run_dir / name).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None
