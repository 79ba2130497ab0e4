"""A sweep job whose directory already holds a run: the sweep run again into its directory
(to finish it), or submitit requeueing the job after a timeout or preemption.

:func:`earlier_attempt` judges what is there: the same job finished (skipped), the same job
unfinished (resumed), or a different job (refused, nothing touched). :func:`continue_job`
resumes an unfinished one through the door ``rltrain resume=`` takes
(:func:`rltrain.assembly.orchestrator.resuming`, then :func:`rltrain.assembly.orchestrator.train`),
with the config stored in its checkpoint. A job that was stopped before its first checkpoint holds
no run (:func:`rltrain.rundir.directory.holds_run`) and never comes here: it runs again from the
start.

Imports :mod:`~rltrain.sweeps.status` and :mod:`~rltrain.sweeps.jobs` of the package, the one door
into a run (:mod:`rltrain.assembly.orchestrator`: torch) and the ground floor.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rltrain.assembly.lifecycle import RunContext
from rltrain.assembly.orchestrator import Ended, resuming, train
from rltrain.config.schemas import ConfigError
from rltrain.process.streams import clip_long_words
from rltrain.rundir import directory
from rltrain.rundir.checkpoint import CheckpointError
from rltrain.rundir.stored_data import StoredDataError, read_yaml
from rltrain.sweeps.jobs import FINISHED, JobFailed
from rltrain.sweeps.status import refuse

#: overrides that do not make a job a different one (how it prints, not what it trains)
_NEUTRAL = ("logger.quiet=", "logger.progress_bar=", "logger.progress_interval_s=")


def _same_job(a: list[str], b: list[str]) -> bool:
    def key(overrides: list[str]) -> list[str]:
        return [o.removeprefix("++") for o in overrides if not o.startswith(_NEUTRAL)]

    return key(a) == key(b)


def earlier_attempt(job_dir: Path, overrides: list[str], label: str) -> dict[str, Any] | None:
    """What to do with the run ``job_dir`` already holds.

    The same job that finished (completed or pruned): its summary, and the job is skipped.
    The same job unfinished (interrupted, killed, preempted): None, and :func:`continue_job`
    resumes it from its checkpoint. A different job: :class:`JobFailed`, nothing touched.
    """
    try:  # bounded: the directory may hold anything (rltrain.rundir.stored_data)
        stored = read_yaml(job_dir / ".hydra" / "overrides.yaml") or []
    except StoredDataError:
        stored = None
    if not isinstance(stored, list) or not all(isinstance(o, str) for o in stored) \
            or not _same_job(stored, list(overrides)):
        refuse(job_dir, f"holds a different run (overrides {stored}); nothing was overwritten",
               lasting=True)
        print(f"rltrain: error: {label}{job_dir} already holds a different run "
              f"(overrides {stored}); nothing was overwritten: give the sweep a new "
              "hydra.sweep.dir", file=sys.stderr)
        raise JobFailed(f"rltrain: {label}failed ({job_dir} holds another run)")
    summary = directory.read_summary(job_dir)
    status = summary.get("status")
    if status in FINISHED:
        print(f"rltrain: {label}already {status} in {job_dir}: skipped", flush=True)
        return summary
    return None


def continue_job(job_dir: Path, ctx: RunContext, label: str, consent: bool = False, *,
                 full_error: bool = False) -> Ended:
    """Resume an unfinished job in its own directory from its newest good checkpoint, with
    the config stored there, through the one door into a run (:mod:`rltrain.assembly.orchestrator`,
    as ``rltrain resume=`` does); says how it ended. ``consent``: the sweep command's
    ``trust=true`` (rltrain.rundir.trust); the code its config names was recorded as trusted when
    this command composed the job.

    A job stopped at once before its first checkpoint has nothing to resume and never comes
    here: its directory holds no run (:func:`rltrain.rundir.directory.holds_run`), so the job runs
    again from the start, replacing what that attempt left and saying so, as any run does
    over an attempt without a checkpoint, and as the sweep's list said it would.

    :raises rltrain.rundir.directory.RunDirError: another process holds the directory.
    """
    allow = "trust=true on the sweep's command, or remove the job's directory"
    trains = False
    try:
        with resuming(job_dir, consent=consent, allow=allow) as point:
            trains = True
            for problem in point.problems:
                print(f"rltrain: warning: {label}{problem}", file=sys.stderr)
            print(f"rltrain: {label}resuming the unfinished run in {job_dir} from "
                  f"{point.path.name}", flush=True)
            ctx.on_accept = None  # .hydra/ is the run's own, from its first attempt
            return train(point.cfg, ctx, resume=point, label=label, full_error=full_error)
    except CheckpointError as e:
        if trains:  # HYDRA_FULL_ERROR=1: what failed while the run trained, as it is
            raise
        refused = ConfigError(f"{job_dir} holds an unfinished run that cannot be resumed: {e} "
                              "(to run the job again from the start, remove its directory and "
                              "finish the sweep)")
    except ConfigError as e:
        if trains:
            raise
        refused = ConfigError(f"{job_dir} holds an unfinished run that cannot be resumed: {e}")
    if full_error:
        raise refused
    return Ended(2, f"error: {label}{clip_long_words(str(refused))}", error=refused)
