"""The sweep's outcome, as its main process prints it once Hydra returns: every job with its
status, directory and what its directory says (:func:`report`), the counts the exit code
follows, and the next command in one line (:func:`next_step`).

Each job's row is what its directory holds (:func:`rltrain.sweeps.jobs.state`), whichever
launcher ran it, or the refusal the sweep's ledger holds for it
(:func:`rltrain.sweeps.status.refusals`). Imports :mod:`~rltrain.sweeps.command`,
:mod:`~rltrain.sweeps.status` and :mod:`~rltrain.sweeps.jobs` of the package, and the
ground floor. (Not ``rltrain-report``, the statistics over runs, which the next line names.)
"""

from __future__ import annotations

import contextlib
import shlex
import sys
from pathlib import Path

from rltrain.config.schemas import job_number
from rltrain.process import signals
from rltrain.rundir import directory
from rltrain.sweeps.command import STATE
from rltrain.sweeps.jobs import JobState, state
from rltrain.sweeps.status import refusals


def job_dirs(path: Path) -> list[Path]:
    """The directories under ``path`` that a job wrote into (a summary, or a lock), in job
    order."""
    found = {p.parent for p in path.rglob("summary.json")}
    found |= {p.parent for p in path.rglob(directory.LOCK)}
    return sorted(found, key=lambda p: (len(p.parts), job_number(p.name) or 0, str(p)))


def jobs_ran(path: Path) -> bool:
    """Whether a job of this sweep has run in ``path`` (written its records since the sweep
    started; the directory may hold an earlier sweep's)."""
    return any(_ran_now(job) for job in job_dirs(path))


def _ran_now(job: Path) -> bool:
    """Whether ``job`` has written its records since this sweep started (else it is an
    earlier sweep's, left in the same directory)."""
    since = STATE.started or 0.0
    for name in ("epochs.jsonl", "summary.json"):
        with contextlib.suppress(OSError):
            if (job / name).stat().st_mtime >= since:
                return True
    return False


def report(path: Path, quiet: bool = False) -> tuple[int, int, int]:
    """Print every job of the sweep with its status, then what to do next in one line (on
    stdout if all completed, only that line then if ``quiet``; else on stderr); return
    (failed or refused, interrupted or stopped, total). A resume command shows only where a
    checkpoint is."""
    rows, counts = [], dict.fromkeys(("failed", "interrupted", "stopped", "refused"), 0)
    unfinished_now = 0
    refused_jobs = refusals()
    jobs = job_dirs(path)
    jobs += sorted(set(refused_jobs) - set(jobs))
    for job in jobs:
        # what a refused job's directory holds is another run's
        found = (JobState("refused", refused_jobs[job][0].removeprefix(f"{job} "), {})
                 if job in refused_jobs else state(job))
        if found.unfinished:
            counts[found.status] += 1
            unfinished_now += _ran_now(job)
        elif found.status == "refused":
            counts["refused"] += 1
        elif found.status in ("failed", "unknown"):
            counts["failed"] += 1
        num = job_number(job.name)
        rows.append(f"  {'' if num is None else num:>4}  {found.status:<11}  {job}  "
                    f"{found.detail}")
    total, refused = len(rows), counts["refused"]
    failed, interrupted = counts["failed"] + refused, counts["interrupted"] + counts["stopped"]
    said = (f"{total} job(s): {counts['failed']} failed, {counts['interrupted']} interrupted"
            + (f", {counts['stopped']} stopped before their first checkpoint"
               if counts["stopped"] else "")
            + (f", {refused} refused" if refused else ""))
    clean = not failed and not interrupted and signals.requested() is None
    out = sys.stdout if clean else sys.stderr
    if not (clean and quiet):
        print(f"rltrain: sweep {path}: {said}", file=out)
        for row in rows:
            print(row, file=out)
    # refused for good: the same command would be refused again. When nothing else of this
    # sweep is left to finish (the interrupted jobs listed, if any, are an earlier sweep's,
    # which this command would not resume), the way on is a directory of its own
    refused_for_good = refused > 0 and all(lasting for _, lasting in refused_jobs.values())
    only_refused = refused_for_good and failed == refused and not unfinished_now
    print(next_step(path, clean, failed > refused, only_refused,
                    refused if refused_for_good else 0, stopped=counts["stopped"] > 0),
          file=out, flush=True)
    return failed, interrupted, total


def next_step(path: Path, clean: bool, failed: bool = False, only_refused: bool = False,
              refused_for_good: int = 0, stopped: bool = False) -> str:
    """What to do after the sweep, in one line: compare its runs; or, when jobs did not
    finish, run the same sweep into its directory again, which skips the finished jobs,
    resumes the unfinished ones from their checkpoints and runs again from the start those
    ``stopped`` before their first (:mod:`rltrain.sweeps.attempts`); or, when the only jobs
    of this sweep that did not finish were refused (their directories hold another sweep's
    runs), give the sweep a directory of its own, since the same command would be refused
    again. ``refused_for_good`` jobs refused so, beside others to finish: the line says that
    running the sweep again will not run those."""
    compare = "rltrain-report " + shlex.quote(str(path))
    if only_refused:
        return (f"next: run this sweep with a new hydra.sweep.dir (the refused jobs' "
                f"directories in {path} hold another sweep's runs, left as they were)")
    if clean or STATE.command is None or STATE.outcome is not None:
        return f"next: {compare}"
    args = [a for a in STATE.command[1:]
            if not a.startswith(("hydra.sweep.dir=", "++hydra.sweep.dir="))]
    again = shlex.join(["rltrain", *args, f"hydra.sweep.dir={path}"])
    first = ", once what failed is fixed" if failed else ""
    afresh = ", those stopped before their first run again from the start" if stopped else ""
    refused = (f" ({refused_for_good} refused job(s) will be refused again: their "
               f"directories hold another sweep's runs; give those a new hydra.sweep.dir)"
               if refused_for_good else "")
    return (f"next: finish the sweep{first} (finished jobs are skipped, unfinished ones "
            f"resume from their checkpoints{afresh}): {again}{refused}; then {compare}")
