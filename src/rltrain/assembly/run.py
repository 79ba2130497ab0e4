"""The run: settings, then the parts, then a trainer with its lifecycle, then training.

Every check that can refuse a run (:mod:`rltrain.assembly.checked_config`,
:mod:`rltrain.assembly.build`) passes before the first file of the run is written, so a bad config
leaves nothing behind. Once training runs, nothing fails silently: a non-finite value, a file that
cannot be written or a crash in an env stops the run with ``summary.json`` saying why, and the last
good checkpoint stays the point to resume from (:mod:`rltrain.assembly.lifecycle`).
"""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

from rltrain.assembly.build import Parts, build_parts, build_trainer, log_build, run_loggers
from rltrain.assembly.checked_config import Settings, settings
from rltrain.assembly.lifecycle import Lifecycle, ResumePoint, RunContext, check_same_dataset
from rltrain.assembly.optuna_trial import TrialReporter
from rltrain.common.errors import TrainingError
from rltrain.common.stats import InfoStats, flatten
from rltrain.loggers import Logger
from rltrain.process import gc_pause, signals
from rltrain.process.system import system_info
from rltrain.rundir.directory import IDENTITY, new_identity, resume_command, write_identity
from rltrain.rundir.files import open_append
from rltrain.trainers import Trainer


def run(cfg: DictConfig, ctx: RunContext, resume: ResumePoint | None = None) -> InfoStats:
    """Build everything from ``cfg`` and train; ``ctx.run_dir`` receives every file.

    With ``resume`` (:func:`rltrain.assembly.lifecycle.resume_point` of this run), continue exactly
    where it stopped, or, where that cannot be exact, say so and continue from a seeded reset.
    """
    s = settings(cfg)
    with signals.building(_stopped_message(ctx.run_dir, resume is not None)):
        parts = build_parts(s)
    try:
        if resume is not None:
            check_same_dataset(resume, parts)
        return _train(cfg, s, ctx, parts, resume)
    finally:
        parts.close()


def _stopped_message(run_dir: Path, resuming: bool) -> Callable[[int], str]:
    """What a signal that stops the process while the run is built says."""
    if not resuming:
        return signals.stopped_before_training
    return lambda signum: (f"{signals.name(signum)} received before training resumed: "
                           "stopped; the run is as it was: resume it again with: "
                           f"{resume_command(run_dir)}")


def _train(cfg: DictConfig, s: Settings, ctx: RunContext, parts: Parts,
           resume: ResumePoint | None) -> InfoStats:
    if s.tune.trial is not None:
        ctx.trial = TrialReporter(s.tune, s.trainer.max_epochs)
    if ctx.on_accept is not None:
        ctx.on_accept()

    # ---- from here on, files are written
    # a run config is a mapping of string keys (OmegaConf types any container)
    config = cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=True))
    history: dict[str, Any] = dict(resume.state.get("history") or {}) if resume else {}
    history.setdefault("resumes", [])
    identity = _identity(s, ctx.run_dir, resume)
    summary: dict[str, Any] = {
        "run": identity,
        "run_dir": str(ctx.run_dir),
        "system": system_info(ctx.command, ctx.overrides),
        "env_state": {"exact": True, "not_captured": []},
        "resumes": history["resumes"],
        "checkpoint": None,
    }
    if parts.storage.dataset is not None:
        summary["dataset"] = parts.storage.dataset
    loggers = run_loggers(s, ctx.run_dir, config=config, summary=summary,
                          resumed_at=None if resume is None else resume.trainer,
                          started=ctx.started, run_id=identity["id"])
    if ctx.trial is not None and resume is not None:
        ctx.trial.load_scores(ctx.run_dir)
    life = Lifecycle(ctx, s, parts, config, summary, history, identity)
    try:
        return _run_trainer(s, ctx, parts, loggers, life, resume)
    finally:
        life.close()


def _identity(s: Settings, run_dir: Path, resume: ResumePoint | None) -> dict[str, Any]:
    """The run's identity (rltrain.rundir.directory.new_identity): a resumed run's own, checked
    against its directory by the resume (:func:`rltrain.assembly.lifecycle.resume_point`), else a
    new one; written to ``run.json`` where the directory has none yet (a new run, or one made before
    runs had ids)."""
    identity = resume.identity if resume is not None else new_identity(
        s.algo.name, s.env.id, s.seed, run_dir)
    if resume is None or not (run_dir / IDENTITY).exists():
        write_identity(run_dir, identity)
    return identity


def _run_trainer(s: Settings, ctx: RunContext, parts: Parts, loggers: list[Logger],
                 life: Lifecycle, resume: ResumePoint | None) -> InfoStats:
    trainer = build_trainer(s, parts, loggers=loggers, callbacks=life.callbacks())
    life.attach(trainer)
    if resume is not None:
        life.restore(resume)
    if s.env.kwargs:
        # a crash in the env's own code (its step): its arguments are the usual suspect
        trainer.crash_hint = f" (the env was made with env.kwargs={dict(s.env.kwargs)})"
    log_build(s, parts, trainer, ctx.run_dir)
    life.summary["startup_time"] = time.perf_counter() - ctx.started
    gc_pause.release()  # start-up done: its objects frozen, collection back on
    try:
        with signals.training(trainer.request_stop):
            result = trainer.run()
    except signals.StopNow as e:
        trainer.interrupted = True
        _finish_loggers(loggers, trainer)
        raise StoppedAtOnce(e.signum, ctx.checkpoint) from None
    if trainer.failure is not None:
        _log_traceback(ctx.run_dir, trainer.failure)
    return result


class StoppedAtOnce(Exception):
    """A second signal stopped training at once; ``summary.json`` has been written."""

    def __init__(self, signum: int, checkpoint: dict[str, Any] | None) -> None:
        super().__init__(signals.name(signum))
        self.signum, self.checkpoint = signum, checkpoint


def _finish_loggers(loggers: list[Logger], trainer: Trainer) -> None:
    info = trainer.info()
    for logger in loggers:
        with contextlib.suppress(Exception):
            logger.finish(flatten(info))


def _log_traceback(run_dir: Path, error: BaseException) -> None:
    """The traceback of a failure, for whoever debugs it: in rltrain.log, not the console."""
    if isinstance(error, TrainingError):
        return
    try:
        with open_append(run_dir / "rltrain.log") as f:
            f.write("The run failed with this traceback:\n")
            traceback.print_exception(error, file=f)
    except OSError:
        pass
