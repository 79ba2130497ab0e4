"""A trial as a job, and back: the overrides a trial's job runs with (the fixed overrides,
the trial's parameters, ``tune.*`` naming the study and trial for
``rltrain.assembly.optuna_trial``), and the job's outcome told to the study (complete with its
score, pruned, or failed with its error).

Imports :mod:`.conf` and :mod:`.space` of this package and ``rltrain.rundir.stored_data``; Optuna
and ``rltrain.assembly.registered_schemas`` (torch) only inside functions (see the package's
text)."""

from __future__ import annotations

import contextlib
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING

from hydra.core.utils import JobReturn, JobStatus

from rltrain.rundir.stored_data import read_json
from rltrain.sweeps.optuna.conf import OptunaSweeperConf
from rltrain.sweeps.optuna.space import encode

if TYPE_CHECKING:
    import optuna

log = logging.getLogger(__name__)


def job_overrides(fixed: list[str], trial: optuna.Trial, storage_url: str, study_name: str,
              c: OptunaSweeperConf) -> list[str]:
    """The job's overrides: ``fixed``, the trial's parameters (``++`` before a free-form
    key, which no schema declares) and the ``tune.*`` keys its run reports with."""
    # 1.1 s (torch): see the package's text
    from rltrain.assembly.registered_schemas import free_form_prefixes

    free = tuple(free_form_prefixes())
    params = [("++" if not key.startswith("+") and key.startswith(free) else "")
              + f"{key}={encode(value)}" for key, value in trial.params.items()]
    tune = [f"tune.storage={encode(storage_url)}", f"tune.study={encode(study_name)}",
            f"tune.trial={trial.number}", f"tune.objective={c.objective}",
            f"tune.last_k={c.last_k}", f"tune.prune={str(c.pruner.name != 'none').lower()}"]
    return [*fixed, *params, *tune]


def tell(study: optuna.Study, trial: optuna.Trial, ret: JobReturn, grace_period: float) -> None:
    """The job's outcome told to the study, unless another sweep took the trial over."""
    from optuna.exceptions import UpdateFinishedTrialError  # the tune extra

    try:
        _tell_outcome(study, trial, ret)
    except UpdateFinishedTrialError:
        # another sweep took it for stale: this process's heartbeats stopped for longer
        # than the grace period (a stalled machine, a storage that kept them waiting)
        log.warning(f"trial {trial.number} was taken over by another sweep, which found "
                    f"its heartbeat more than {grace_period:g} s old: its "
                    "result is not recorded (its parameters are run again); a longer "
                    "hydra.sweeper.grace_period avoids this")


def _tell_outcome(study: optuna.Study, trial: optuna.Trial, ret: JobReturn) -> None:
    from optuna.trial import TrialState  # the tune extra: see the package's text

    run_dir = job_dir(ret)
    trial.set_user_attr("run_dir", run_dir)
    if ret.status != JobStatus.COMPLETED:
        error = job_error(run_dir) or str(getattr(ret, "_return_value", "") or "failed")
        trial.set_user_attr("error", error)
        study.tell(trial, state=TrialState.FAIL)
        log.warning(f"trial {trial.number} failed: {error}")
        return
    result = ret.return_value
    if not isinstance(result, dict):  # interrupted, or stopped before it began
        trial.set_user_attr("interrupted", True)
        trial.set_user_attr("error", "interrupted before it finished")
        study.tell(trial, state=TrialState.FAIL)
        return
    value = result["value"]
    if result["status"] == "pruned":
        study.tell(trial, state=TrialState.PRUNED)
    elif value is None or not math.isfinite(value):
        trial.set_user_attr("error", f"its score is not a finite number ({value})")
        study.tell(trial, state=TrialState.FAIL)
    else:
        study.tell(trial, value)


def job_dir(ret: JobReturn) -> str:
    """The run directory of a job."""
    with contextlib.suppress(Exception):  # a job whose config lacks it
        if ret.hydra_cfg is not None:
            return str(ret.hydra_cfg.hydra.runtime.output_dir)
    return str(ret.working_dir or "")  # a job that never got its config


def job_error(run_dir: str) -> str | None:
    """The error a failed job's run recorded in its ``summary.json``, if any."""
    try:
        summary = read_json(Path(run_dir) / "summary.json")  # bounded, as every reader's
    except (OSError, ValueError):
        return None
    return summary.get("error") if isinstance(summary, dict) else None
