"""A sweep job as its directory shows it: what the sweep's list says of it, and what running
the sweep again does with it, both read from the same files.

A job's ``summary.json`` says how its run ended, but only its checkpoints say whether it can
be resumed: a run stopped at once by a second signal before its first checkpoint says
``interrupted`` and holds nothing to resume. The list once offered such a job's resume
command, which then failed. So every launcher's jobs (basic, joblib, batched, submitit, Ray)
are judged here, from the files: an interrupted job with a checkpoint resumes; one without is
*stopped*, and running the sweep again starts it afresh (:mod:`rltrain.sweeps.attempts`).

This module is the sweeps' common ground: the sweep's list (:mod:`rltrain.sweeps.outcome`),
the re-attempts and the watched submitit launcher all import it. It imports nothing of the
package; of rltrain, :mod:`rltrain.rundir.directory` (which reads summary.json bounded).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.errors import CompactHydraException

from rltrain.rundir.directory import read_summary, resume_command

#: the statuses of a job that needs nothing more
FINISHED = ("completed", "pruned")


class JobFailed(CompactHydraException):
    """A sweep job failed; Hydra records it failed and prints this one line."""


@dataclass(frozen=True)
class JobState:
    """One job of a sweep, as its files show it."""

    #: completed, pruned, interrupted (resumable), stopped (interrupted before its first
    #: checkpoint), failed, not started or unknown (no summary: killed?)
    status: str
    #: what the sweep's list says after the status (a score, a resume command, an error)
    detail: str
    summary: dict[str, Any]

    @property
    def unfinished(self) -> bool:
        """Interrupted or stopped: running the sweep again finishes it."""
        return self.status in ("interrupted", "stopped")


def has_checkpoint(job_dir: Path) -> bool:
    """Whether ``job_dir`` holds a checkpoint file a resume could start from (whether it
    loads is the resume's to say: reading every checkpoint to list a sweep would cost
    seconds)."""
    ckpts = job_dir / "checkpoints"
    return ckpts.is_dir() and any(p.suffix == ".pt" and not p.name.startswith(".")
                                  for p in ckpts.iterdir())


def score(value: Any) -> str:
    """A score as the console shows it (one decimal), '-' when there is none."""
    return f"{value:.1f}" if isinstance(value, (int, float)) else "-"


def state(job_dir: Path) -> JobState:
    """What ``job_dir`` holds, and what finishing the sweep does with it."""
    summary = read_summary(job_dir) or None  # {}: none that reads as one
    saved = has_checkpoint(job_dir)
    if summary is None:
        then = ("its checkpoint is resumed when the sweep is finished" if saved else
                "no checkpoint: finishing the sweep runs it again from the start")
        return JobState("unknown", f"no summary.json (killed?); {then}", {})
    status = str(summary.get("status") or ("interrupted" if summary.get("interrupted")
                                           else "completed"))
    if status in FINISHED:
        detail = f"best {score(summary.get('best_score'))}" + (
            f" (pruned after epoch {summary.get('epochs')})" if status == "pruned" else "")
        return JobState(status, detail, summary)
    if status == "interrupted" and saved:
        return JobState(status, f"resume with: {resume_command(job_dir)}", summary)
    if status == "interrupted":
        return JobState("stopped", "stopped at once before its first checkpoint: nothing to "
                        "resume; finishing the sweep runs it again from the start", summary)
    return JobState(status, str(summary.get("error") or ""), summary)
