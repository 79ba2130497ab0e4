"""Hydra's submitit launcher (``hydra/launcher=submitit_local``, ``submitit_slurm``), watched.

Hydra's launcher submits the jobs and then waits on them in silence: the README's example
(one-minute slots, a DQN run of several minutes) printed nothing for minutes and ended with
submitit's one line, "timed-out too many times", as "the sweep could not run" (exit 2). rltrain
runs the same launcher (the plugin's classes do the job's side: composing its config, and
the checkpoint that requeues it) with a wait of its own, :meth:`Watched.launch`:

* the console says, as it happens, where each job's output goes, when it times out and is
  requeued, when it resumes and at which epoch, how far it is (every 30 s) and how it ended;
* submitit's local executor restarts a job at most 6 times, whatever ``max_num_timeout``
  says (its controller's own limit): a job it gave up on with requeues left is submitted
  again, and resumes from its checkpoint;
* a job that ends without a result (out of requeues, killed) is a failed job of the sweep,
  named with the reason (exit 1, and the sweep's list gives its resume command); the other
  jobs are still waited for.

The classes are ``hydra_plugins.rltrain_submitit_launcher``'s (Hydra takes plugin classes
from that package only; it imports its modules whenever it looks for plugins, so this module
imports the run's modules only where it needs them).
:class:`rltrain.sweeps.callback.HydraCallback` puts them in the place of the plugin's when a
sweep starts (:func:`watched`), and gives the local executor ``max_num_timeout`` =
:data:`LOCAL_MAX_NUM_TIMEOUT` unless the command sets it (``+hydra.launcher.max_num_timeout=N``:
the plugin's local schema has no such key). What is read of a job: submitit's own log lines in
the job's output files, and the run directory (``epochs.jsonl``, ``summary.json``).

Imports :mod:`rltrain.sweeps.jobs` of the package (a job's state, as the sweep's list says it)
and :mod:`rltrain.rundir.stored_data`; and Hydra's submitit plugin (extra: cluster), which only a
submitit sweep imports this module with.

What breaks when the plugin changes: the classes subclassed here and ``BaseQueueConf``
(checked against hydra-submitit-launcher 1.2.0, submitit 1.5); :func:`watched` leaves a
launcher it does not know alone, so Hydra's own wait runs then.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra.errors import HydraException
from hydra_plugins.hydra_submitit_launcher import (  # type: ignore[import-untyped]
    submitit_launcher as plugin,
)
from hydra_plugins.hydra_submitit_launcher.config import (  # type: ignore[import-untyped]
    BaseQueueConf,
)
from omegaconf import OmegaConf, open_dict, read_write

from rltrain.rundir.stored_data import read_json
from rltrain.sweeps.jobs import JobFailed, state

#: requeues after a timeout, for the local executor unless the command says otherwise: one
#: per slot, so a run of 20 slots (20 minutes with timeout_min=1) finishes
LOCAL_MAX_NUM_TIMEOUT = 20
#: seconds between two progress lines of a job
PROGRESS_EVERY_S = 30.0
#: how often the jobs are looked at
POLL_S = 1.0

_PLUGIN = "hydra_plugins.hydra_submitit_launcher.submitit_launcher."
#: Hydra takes plugin classes from the hydra_plugins package only: rltrain's are there
_OURS = "hydra_plugins.rltrain_submitit_launcher.submitit_launcher."
#: a line of submitit's own logger, in a job's output files
_SUBMITIT_LINE = re.compile(r"^submitit \w+ \([^)]*\) - (.*)$")
_STARTING = re.compile(r"^Starting with JobEnvironment")
_CAUGHT = re.compile(r"Caught signal \w+ on .*: this job is (timed-out|preempted)")
_REQUEUED = re.compile(r"^Requeued job \S+ \((\d+) remaining timeouts\)")
_NOT_REQUEUED = re.compile(r"^Job not requeued because: (.*?)\.?$")
#: rltrain's own line when a run continues from its checkpoint (rltrain.assembly.lifecycle)
_RESUMED = re.compile(r"^resumed at epoch (\d+)")


def watched(launcher: Any) -> None:
    """Put rltrain's watched classes in the place of the submitit plugin's in a sweep's
    ``hydra.launcher`` config (any other launcher is left as it is)."""
    target = str(launcher.get("_target_", ""))
    ours = {_PLUGIN + "LocalLauncher": _OURS + "LocalLauncher",
            _PLUGIN + "SlurmLauncher": _OURS + "SlurmLauncher"}.get(target)
    if ours is None:
        return
    with read_write(launcher), open_dict(launcher):
        launcher._target_ = ours
        if target.endswith("LocalLauncher") and "max_num_timeout" not in launcher:
            launcher.max_num_timeout = LOCAL_MAX_NUM_TIMEOUT


class Watched(plugin.BaseSubmititLauncher):
    """Submit every job, then watch them all until each has a result (the module docstring)."""

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.config is not None and self.hydra_context is not None
        executor = self._executor()
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        arguments = [(list(overrides), "hydra.sweep.dir", initial_job_idx + i,
                      f"job_id_for_{initial_job_idx + i}", Singleton.get_state())
                     for i, overrides in enumerate(job_overrides)]
        quiet = bool(OmegaConf.select(self.config, "logger.quiet", default=False))
        limit = self.params.get("max_num_timeout")
        jobs = executor.map_array(self, *zip(*arguments, strict=True))
        watches = [_Job(args, job, self._job_dir(args), executor, self, quiet,
                        None if limit is None else int(limit))
                   for args, job in zip(arguments, jobs, strict=True)]
        for watch in watches:
            watch.submitted()
        while not all(watch.result is not None for watch in watches):
            for watch in watches:
                if watch.result is None:
                    watch.poll()
            time.sleep(POLL_S)
        return [watch.result for watch in watches if watch.result is not None]

    def _executor(self) -> Any:
        """submitit's executor for this launcher's settings: ``max_num_timeout`` is the
        executor's own, the queue settings every executor knows go by name, the rest with
        the executor's prefix (``local_...``, ``slurm_...``)."""
        import submitit  # here: Hydra imports launchers when it lists plugins

        params = dict(self.params)
        folder = params.pop("submitit_folder")
        kind = self._EXECUTOR
        own = {f"{kind}_max_num_timeout": params.pop("max_num_timeout")} \
            if "max_num_timeout" in params else {}
        executor = submitit.AutoExecutor(cluster=kind, folder=folder, **own)
        shared = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{key if key in shared else f"{kind}_{key}": value
                                      for key, value in params.items()})
        return executor

    def _job_dir(self, args: tuple[Any, ...]) -> Path | None:
        """The run directory a job will use, composed as the job composes it."""
        assert self.config is not None and self.hydra_context is not None
        try:
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, args[0])
            with open_dict(cfg.hydra.job):
                cfg.hydra.job.num = args[2]
            return (Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir)).absolute()
        except Exception:  # noqa: BLE001 - the job's own output still tells what happens
            return None


@dataclass
class _Job:
    """One submitted sweep job: what it printed so far, and what was said of it."""

    args: tuple[Any, ...]
    job: Any
    run_dir: Path | None
    executor: Any
    launcher: Watched
    quiet: bool
    #: max_num_timeout: requeues allowed after a timeout (None: submitit's default)
    limit: int | None
    result: JobReturn | None = None
    #: attempts that began (submitit's "Starting with" line), over every submission
    started: int = 0
    #: how each requeue came (timed-out, preempted), as submitit says it
    why: str = "timed-out"
    verdict: str | None = None
    #: submitit's last word was that it requeued the job (and no attempt has started since)
    requeued: bool = False
    #: the timeouts submitit still requeues the job after, as it said last
    timeouts_left: int | None = None
    _read: dict[str, int] = field(default_factory=dict)
    _epoch: int = 0
    _said_at: float = 0.0
    _max_epochs: int | None = None

    @property
    def num(self) -> int:
        return int(self.args[2])

    def say(self, text: str, error: bool = False) -> None:
        if error or not self.quiet:
            print(f"rltrain: job {self.num}: {text}", file=sys.stderr if error else sys.stdout,
                  flush=True)

    def submitted(self) -> None:
        out = getattr(getattr(self.job, "paths", None), "stdout", None)
        where = f"; its output: {out}" if out is not None else ""
        shown = " ".join(filter_overrides(self.args[0]))
        self.say(f"{shown}: submitted ({self.launcher._EXECUTOR} job {self.job.job_id}){where}")
        self._said_at = time.monotonic()

    # ------------------------------------------------------------------ what it printed
    def _lines(self) -> list[str]:
        """The lines its output files gained since the last look."""
        paths = getattr(self.job, "paths", None)
        lines: list[str] = []
        for path in (getattr(paths, "stdout", None), getattr(paths, "stderr", None)):
            if path is None:
                continue
            key = str(path)
            try:
                with open(path, "rb") as f:
                    f.seek(self._read.get(key, 0))
                    data = f.read()
            except OSError:
                continue
            whole = data[:data.rfind(b"\n") + 1]  # a line still being written waits
            self._read[key] = self._read.get(key, 0) + len(whole)
            lines += whole.decode("utf-8", "replace").splitlines()
        return lines

    def poll(self) -> None:
        for line in self._lines():
            said = _SUBMITIT_LINE.match(line)
            if said is not None:
                self._submitit(said.group(1))
            elif (resumed := _RESUMED.match(line)) is not None:
                self.say(f"resumed at epoch {resumed.group(1)} (attempt {self.attempt})")
        self._progress()
        if self.job.done():
            self._finish()

    @property
    def attempt(self) -> int:
        """The attempt running now (or the last one)."""
        return max(self.started, 1)

    def _submitit(self, text: str) -> None:
        if _STARTING.match(text):
            self.started += 1
            self.requeued = False
        elif (caught := _CAUGHT.search(text)) is not None:
            self.why = caught.group(1)
        elif (requeued := _REQUEUED.match(text)) is not None:
            self.requeued, self.timeouts_left = True, int(requeued.group(1))
            how = "timed out" if self.why == "timed-out" else "preempted"
            self.say(f"{how} at epoch {self._stopped_at()}, requeued (attempt "
                     f"{self.started + 1}; timeouts left: {self.timeouts_left})")
            self._said_at = time.monotonic()  # its progress again once it has resumed
        elif (refused := _NOT_REQUEUED.match(text)) is not None:
            self.verdict = refused.group(1)

    def _summary(self) -> dict[str, Any]:
        if self.run_dir is None:
            return {}
        # bounded: rltrain.rundir.stored_data.read_json
        with contextlib.suppress(OSError, ValueError):
            summary = read_json(self.run_dir / "summary.json")
            return summary if isinstance(summary, dict) else {}
        return {}

    def _stopped_at(self) -> str:
        epochs = self._summary().get("epochs")
        return str(epochs) if isinstance(epochs, int) else "?"

    def _progress(self) -> None:
        """A line on how far the job is, at most every PROGRESS_EVERY_S, when it moved."""
        now = time.monotonic()
        if self.run_dir is None or now - self._said_at < PROGRESS_EVERY_S:
            return
        try:
            with open(self.run_dir / "epochs.jsonl", "rb") as f:
                f.seek(max(0, f.seek(0, 2) - 65536))
                last = json.loads(f.read().strip().splitlines()[-1])
        except (OSError, ValueError, IndexError):
            return
        epoch = last.get("epoch") if isinstance(last, dict) else None
        if not isinstance(epoch, int) or epoch == self._epoch:
            return
        self._epoch, self._said_at = epoch, now
        if self._max_epochs is None:
            with contextlib.suppress(Exception):
                stored = OmegaConf.load(self.run_dir / ".hydra" / "config.yaml")
                self._max_epochs = int(stored.trainer.max_epochs)
        best = (last.get("best") or {}).get("score")
        shown = f", best {best:.1f}" if isinstance(best, (int, float)) else ""
        total = f"/{self._max_epochs}" if self._max_epochs else ""
        self.say(f"epoch {epoch}{total} done{shown}")

    # ------------------------------------------------------------------ its end
    def _finish(self) -> None:
        try:
            returned = self.job.results()[0]
        except Exception as e:  # noqa: BLE001 - submitit's verdict on a job without a result
            self._without_result(e)
            return
        if not isinstance(returned, JobReturn):
            self._fail(f"submitit returned {type(returned).__name__}, not the job's result")
            return
        summary = self._summary()
        error = returned._return_value
        if returned.status == JobStatus.COMPLETED:
            best = summary.get("best_score")
            shown = f", best {best:.1f}" if isinstance(best, (int, float)) else ""
            self.say(f"{summary.get('status') or 'completed'}{shown} "
                     f"({summary.get('epochs', '?')} epochs, {self.attempt} attempt(s))")
        elif not isinstance(error, HydraException):
            # raised in the job by submitit itself (its signal handler, out of requeues) and
            # recorded by Hydra as the job's failure: submitit's verdict, as above
            self._without_result(error)
            return
        else:  # rltrain's own failure of the job (it said why in its output)
            self.say(f"failed: {summary.get('error') or error}", error=True)
        self.result = returned

    def _without_result(self, error: Exception) -> None:
        """Out of requeues, killed, or stopped by the local controller's own limit."""
        if self.requeued and self.launcher._EXECUTOR == "local":
            # requeued by submitit, but not started again: the local controller starts a job
            # 6 times at most. Submitted again, with the timeouts it has left
            inner = getattr(self.executor, "_executor", None)
            if inner is not None and hasattr(inner, "max_num_timeout"):
                inner.max_num_timeout = self.timeouts_left or 0
            self.job = self.executor.submit(self.launcher, *self.args)
            self._read.clear()
            self.requeued = False
            self.say(f"submitted again (attempt {self.started + 1}, local job "
                     f"{self.job.job_id}): submitit's local controller starts a job 6 times "
                     "at most")
            return
        reason = self.verdict or (str(error).strip().splitlines() or [type(error).__name__])[0]
        if self.verdict == "timed-out too many times":
            key = ("+" if self.launcher._EXECUTOR == "local" else "") + \
                "hydra.launcher.max_num_timeout"
            reason = (f"{self.why.replace('-', ' ')} at epoch {self._stopped_at()}, with no "
                      f"requeue left ({key}={self.limit}; attempt {self.attempt})")
        found = state(self.run_dir) if self.run_dir is not None else None
        # what its directory holds, as the sweep's list says it: a resume command only where
        # a checkpoint is
        then = f"; {found.detail}" if found is not None and found.unfinished else ""
        self._fail(f"{reason}{then}")

    def _fail(self, message: str) -> None:
        self.say(f"failed: {message}", error=True)
        ret = JobReturn(overrides=list(self.args[0]), status=JobStatus.FAILED,
                        working_dir=None if self.run_dir is None else str(self.run_dir))
        ret.return_value = JobFailed(f"rltrain: job {self.num}: failed: {message}")
        self.result = ret
