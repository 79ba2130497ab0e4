"""``rltrain resume=RUN_DIR [trainer.max_epochs=N] [trainer.stop_score=X|null]``: continue a run
in its directory, with the config stored in its checkpoint, through the one door into a run
(:func:`rltrain.assembly.orchestrator.resuming`, then :func:`rltrain.assembly.orchestrator.train`)
that a sweep job continuing itself takes too, and that says how the run ended as for any run.

Only extending the run may change: more epochs, or another stop score. Whatever else the
command line says is refused by name, and a run that is already complete is said to be.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rltrain.assembly.lifecycle import ResumePoint, RunContext
from rltrain.assembly.orchestrator import resuming, train
from rltrain.config.schemas import ConfigError
from rltrain.process import signals
from rltrain.process.streams import ConsoleHandler, clip_long_words
from rltrain.rundir import directory
from rltrain.rundir.checkpoint import CheckpointError
from rltrain.rundir.files import NoFollowFileHandler

#: the only overrides a resume accepts: extending the run
MAX_EPOCHS = "trainer.max_epochs"
#: a run that stopped early at its stop score may go on with a higher one (or none)
STOP_SCORE = "trainer.stop_score"
_UNSET: Any = object()


class ResumeRefused(Exception):
    """What the user asked of a resume cannot be done; the message says why."""


def parse(args: list[str]) -> tuple[Path, int | None, Any]:
    """(run directory, max_epochs or None, stop score, or _UNSET when not given)."""
    run_dir, max_epochs, stop_score = None, None, _UNSET
    for arg in args:
        key, _, value = arg.partition("=")
        if key == "resume":
            run_dir = Path(value).expanduser()
        elif key == MAX_EPOCHS:
            try:
                max_epochs = int(value)
            except ValueError:
                raise ResumeRefused(f"{MAX_EPOCHS}={value!r} is not an integer") from None
        elif key == STOP_SCORE:
            try:
                stop_score = None if value in ("null", "none", "None") else float(value)
            except ValueError:
                raise ResumeRefused(f"{STOP_SCORE}={value!r} is not a number or null") from None
            if stop_score is not None and not math.isfinite(stop_score):
                raise ResumeRefused(f"{STOP_SCORE} must be a finite number or null, got {value}")
        elif arg not in ("-q", "--quiet"):
            raise ResumeRefused(
                f"{arg!r} cannot change on resume: a resumed run keeps the config stored in its "
                f"checkpoint (only {MAX_EPOCHS}=N and {STOP_SCORE}=X|null may extend it); "
                "start a new run to change anything else")
    assert run_dir is not None  # main() sends here only arguments with resume=
    return run_dir, max_epochs, stop_score


def extend(point: ResumePoint, max_epochs: int | None, stop_score: Any) -> str | None:
    """Apply the extension to the point's config; returns why there is nothing to do (the run
    is complete), or None."""
    cfg, state = point.cfg, point.trainer
    old_max = int(cfg.trainer.max_epochs)
    done = point.epochs_complete
    if max_epochs is not None:
        if max_epochs < state["epoch"]:
            raise ResumeRefused(
                f"{MAX_EPOCHS}={max_epochs} is below the {state['epoch']} epochs this run has "
                f"{'started' if state['partial'] else 'done'}; a resume can only extend a run: "
                f"pass {MAX_EPOCHS}={max(state['epoch'], old_max)} or more")
        cfg.trainer.max_epochs = max_epochs
    new_max = int(cfg.trainer.max_epochs)
    raised = False  # a stop score moved past the best score reached lets an early stop go on
    if stop_score is not _UNSET:
        old_stop = cfg.trainer.stop_score
        cfg.trainer.stop_score = stop_score
        best = state["best_score"]
        raised = stop_score != old_stop and (stop_score is None or best is None
                                             or best < stop_score)
    finished = state["partial"] is None and (
        done >= new_max or (state["stopped_early"] and new_max <= old_max and not raised))
    if not finished:
        return None
    return (f"it stopped early at epoch {done}, reaching the stop score"
            if state["stopped_early"] and done < new_max else f"{done} of {new_max} epochs")


def resume(args: list[str], *, say: Callable[[str], None], started: float,
           full_error: bool) -> int:
    """Run the resume command; returns the exit code (messages go through ``say``)."""
    def error(message: str, code: int = 2) -> int:
        say(f"error: {clip_long_words(message)}")
        return code

    consent = "--trust" in args  # run what the checkpoint's config names (rltrain.rundir.trust)
    try:
        run_dir, max_epochs, stop_score = parse([a for a in args if a != "--trust"])
    except ResumeRefused as e:
        return error(str(e))
    try:
        found, checkpoints = run_dir.is_dir(), (run_dir / "checkpoints").is_dir()
    except OSError as e:  # a name too long for the file system, a directory not readable
        return error(f"resume={run_dir}: cannot be read: {e.strerror}")
    if not found:
        return error(f"resume={run_dir}: no such run directory")
    if not checkpoints:
        return error(f"resume={run_dir}: no checkpoints/ there, so nothing to resume (is it a "
                     "run directory written by rltrain?)")
    allow = f"{directory.resume_command(run_dir)} --trust"
    try:
        with resuming(run_dir, consent=consent, allow=allow) as point:
            return _continue(point, run_dir, max_epochs, stop_score, say=say, started=started,
                             full_error=full_error)
    except (directory.RunDirError, CheckpointError, ConfigError) as e:
        return error(f"resume={run_dir}: {e}")


def _continue(point: ResumePoint, run_dir: Path, max_epochs: int | None, stop_score: Any, *,
              say: Callable[[str], None], started: float, full_error: bool) -> int:
    """The run extended as asked, then trained on from ``point`` through the one door into a
    run; returns the exit code."""
    for problem in point.problems:
        say(f"warning: {problem}")
    if point.path.name != "last.pt":
        say(f"warning: resuming from the older checkpoint {point.path}")
    try:
        complete = extend(point, max_epochs, stop_score)
    except ResumeRefused as e:
        say(f"error: {clip_long_words(str(e))}")
        return 2
    if complete is not None:
        more = max(point.epochs_complete, int(point.cfg.trainer.max_epochs)) + 10
        print(f"rltrain: the run in {run_dir} is already complete ({complete}); nothing to "
              f"do. Extend it with: {directory.resume_command(run_dir, f'{MAX_EPOCHS}={more}')}")
        return 0
    _log_to(run_dir, bool(point.cfg.logger.quiet))
    ctx = RunContext(run_dir, started=started)
    try:
        ended = train(point.cfg, ctx, resume=point, label=f"resume={run_dir}: ",
                      full_error=full_error)
    except signals.EarlyStop as e:
        say(f"{signals.name(e.signum)} received before training resumed: stopped; the run "
            f"is as it was: resume it again with: {directory.resume_command(run_dir)}")
        return 128 + e.signum
    if ended.message:
        say(ended.message)
    elif not point.cfg.logger.quiet:
        print(directory.next_step(run_dir), flush=True)
    return ended.code


def _log_to(run_dir: Path, quiet: bool) -> None:
    """A resume runs outside Hydra: its log lines go to the console and rltrain.log as a
    Hydra run's do."""
    console = ConsoleHandler()  # as a run's: warnings labelled on stderr
    console.setLevel(logging.WARNING if quiet else logging.INFO)
    file = NoFollowFileHandler(run_dir / "rltrain.log", delay=True)
    file.setFormatter(logging.Formatter("[%(asctime)s][%(levelname)s] %(message)s"))
    logging.basicConfig(level=logging.INFO, format="%(message)s", handlers=[console, file])
