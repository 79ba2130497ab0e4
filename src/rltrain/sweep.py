"""Sweeps that survive a bad job and stop cleanly, whatever Hydra launcher runs them.

* A job that fails (a config error, a crash, a non-finite loss) is recorded in its own
  directory (``summary.json``: ``status``, ``error``) and the sweep goes on; Hydra marks
  the job failed. At the end, :func:`report` lists every job with its status, directory
  and message, and the sweep exits non-zero if any failed.
* SIGINT or SIGTERM to the sweep's main process (the one the user started) reaches the
  jobs: it writes a stop file into the sweep directory, so that no job starts after it,
  and sends SIGTERM to every job process that holds a run-directory lock there (joblib
  workers, submitit's local processes), so each finishes its step, checkpoints and says
  how to resume. Workers ignore the terminal's SIGINT: the main process speaks for it.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shlex
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.experimental.callback import Callback
from omegaconf import open_dict, read_write

from rltrain import batch_scheduler, rundir, signals
from rltrain.checkpoint import CheckpointError
from rltrain.config import ConfigError, job_number, overrides_as_typed
from rltrain.files import open_append, write_new
from rltrain.jobs import FINISHED, JobFailed, JobState, state
from rltrain.lifecycle import RunContext, resume_point
from rltrain.run import run
from rltrain.stats import InfoStats
from rltrain.stored import StoredDataError, read_yaml

STOP_FILE = ".rltrain-stop"
#: where a sweep's jobs record the jobs they refused (the path, set by the sweep's main process
#: and inherited by its workers): a refused job's directory, and its summary.json, are another
#: run's, so the sweep's report learns of the refusal from this file
REFUSED_ENV = "RLTRAIN_SWEEP_REFUSED"
#: the host of the sweep's main process: a worker on that host watches that the main process
#: (signals.SWEEP_PID_ENV) is alive (:func:`job_in_worker`)
HOST_ENV = "RLTRAIN_SWEEP_HOST"


@dataclass
class SweepState:
    """What this process learns of its Hydra command while Hydra runs it. Hydra builds the
    callback and the sweeper from the config itself, so they cannot be handed an object:
    they report here, through :func:`judge` and :class:`HydraCallback`, and the CLI reads it
    once Hydra returns (one Hydra command per process)."""

    #: the sweep directory, in the sweep's main process
    directory: Path | None = None
    #: set by a sweeper that judges the sweep itself (the Optuna sweeper: a study with failed
    #: trials still succeeds when one completed; 2: the sweep could not start); None: the
    #: sweep fails when any job failed
    outcome: int | None = None
    #: whether a single run's directory existed before Hydra made it: one the user made is
    #: never removed, even when a refused run leaves it empty
    run_dir_existed: bool = False
    #: the directories above a single run's that did not exist before it (``outputs/``...)
    made: list[Path] = field(default_factory=list)
    #: the command as the user typed it (``rltrain`` and its arguments), for the line that
    #: says how to finish an unfinished sweep
    command: list[str] | None = None
    #: when the sweep started (time.time()), in its main process
    started: float | None = None


STATE = SweepState()


def judge(code: int) -> None:
    """A sweeper's verdict on the whole sweep: the exit code of the command."""
    STATE.outcome = code


class HydraCallback(Callback):
    """rltrain's hooks into Hydra, installed by ``conf/config.yaml`` (``hydra.callbacks``)."""

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        """Check the run directory before Hydra creates it (a file there, a read-only place:
        Hydra's own ``mkdir`` would end in a traceback)."""
        HydraConfig.instance().set_config(config)  # as run_job does next: ${hydra:...} resolves
        path = Path(str(config.hydra.run.dir)).absolute()
        # what this run will create above its directory: removed again if it is refused
        STATE.made = [p for p in path.parents if not p.exists()]
        try:
            STATE.run_dir_existed = rundir.ensure_dir(path)
        except rundir.RunDirError as e:
            print(f"rltrain: error: {e}", file=sys.stderr)
            sys.exit(2)

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        path = Path(str(config.hydra.sweep.dir)).absolute()
        try:
            rundir.ensure_dir(path, "hydra.sweep.dir")
        except rundir.RunDirError as e:
            print(f"rltrain: error: {e}", file=sys.stderr)
            sys.exit(2)
        STATE.directory, STATE.started = path, time.time()
        name_jobs_by_what_differs(config)
        warn_repeated_jobs(config)
        if str(config.hydra.launcher.get("_target_", "")).startswith(
                "hydra_plugins.hydra_submitit_launcher."):
            from rltrain import launchers  # needs that plugin (extra: cluster)

            launchers.watched(config.hydra.launcher)  # a wait that says what happens
        (path / STOP_FILE).unlink(missing_ok=True)  # left by an earlier, stopped sweep
        os.environ[signals.SWEEP_PID_ENV] = str(os.getpid())
        os.environ[HOST_ENV] = socket.gethostname()
        # one per sweep command: two sweeps into one directory each count their own refusals
        refused = path / f".rltrain-refused-{socket.gethostname()}-{os.getpid()}.jsonl"
        refused.unlink(missing_ok=True)
        os.environ[REFUSED_ENV] = str(refused)
        signals.between_jobs(_stop_sweep)


def name_jobs_by_what_differs(config: Any) -> None:
    """Leave out of each job's directory name (``hydra.job.override_dirname``) the overrides
    every job of the sweep shares: the command line's overrides that sweep nothing, and the
    ``tune.*`` keys the Optuna sweeper gives its trials. What remains differs between jobs
    (the swept values, a search space's sampled ones). Each job's config is composed again
    from the sweep's ``hydra.overrides.hydra`` (whatever the launcher), so the exclusion is
    added there."""
    typed = overrides_as_typed(config.hydra.overrides.task)
    parsed = OverridesParser.create().parse_overrides(typed)
    constant = {o.key_or_group for o in parsed if not o.is_sweep_override()}
    constant |= {f"tune.{key}" for key in ("storage", "study", "trial", "objective", "last_k",
                                           "prune")}
    constant |= set(config.hydra.job.config.override_dirname.exclude_keys)
    quoted = ",".join("'" + key.replace("\\", "\\\\").replace("'", "\\'") + "'"
                      for key in sorted(constant))
    with read_write(config.hydra), open_dict(config.hydra):
        config.hydra.overrides.hydra.append(
            f"hydra.job.config.override_dirname.exclude_keys=[{quoted}]")
        config.hydra.job.config.override_dirname.exclude_keys = sorted(constant)


def warn_repeated_jobs(config: Any) -> None:
    """Hydra's basic sweeper runs a value given twice (``seed=0,0``, ``lr=1e-3,0.001``) as two
    jobs of one config, each in its own directory, without a word: say which jobs repeat
    which, that it costs only time, and how to give each value once."""
    if not str(config.hydra.sweeper.get("_target_", "")).endswith(".BasicSweeper"):
        return  # another sweeper makes its own jobs (Optuna: the study's trials)
    parser = OverridesParser.create()
    params = config.hydra.sweeper.get("params") or {}
    lines = [f"{k}={v}" for k, v in params.items()]
    try:
        parsed = parser.parse_overrides(lines + overrides_as_typed(config.hydra.overrides.task))
        jobs = BasicSweeper.split_arguments(parsed, None)[0]
    except Exception:  # noqa: BLE001 - what Hydra cannot split it refuses itself, next
        return
    first: dict[tuple[tuple[str, str], ...], int] = {}
    repeats: list[str] = []
    for num, job in enumerate(jobs):
        same = first.setdefault(_as_set(parser, job), num)
        if same != num:
            shown = " ".join(o for o in job if o.split("=", 1)[0] in _swept(parsed))
            repeats.append(f"job {num} repeats job {same}" + (f" ({shown})" if shown else ""))
    if not repeats:
        return
    once = [f"{o.get_key_element()}={','.join(dict.fromkeys(o.sweep_string_iterator()))}"
            for o in parsed if o.is_sweep_override() and o.is_discrete_sweep()
            and len(set(o.sweep_string_iterator())) < len(list(o.sweep_string_iterator()))]
    hint = f" ({' '.join(once)})" if once else ""
    print(f"rltrain: warning: {'; '.join(repeats)}: a value given twice runs the same config "
          "twice, each copy in its own directory (harmless: rltrain-report counts one run per "
          f"seed, but the time is spent twice); give each value once{hint} to run it once",
          file=sys.stderr, flush=True)


def _swept(parsed: list[Override]) -> set[str]:
    return {o.get_key_element() for o in parsed if o.is_sweep_override()}


def _as_set(parser: OverridesParser, job: list[str]) -> tuple[tuple[str, str], ...]:
    """A job's overrides as values, not text: ``seed=0`` and ``seed=00`` are one job."""
    return tuple(sorted((o.get_key_element(), f"{type(o.value()).__name__}:{o.value()!r}")
                        for o in parser.parse_overrides(job)))


def stop_requested(job_sweep_dir: Path) -> bool:
    """Whether this sweep was asked to stop (in this process, or by the main process)."""
    return signals.requested() is not None or (job_sweep_dir / STOP_FILE).exists()


def job_pids(path: Path) -> list[int]:
    """Processes (other than this one) that hold a run-directory lock under ``path``."""
    pids = []
    for lock in path.rglob(rundir.LOCK):
        pid = rundir.lock_holder_pid(lock.parent)
        if pid is not None and pid != os.getpid():
            pids.append(pid)
    return pids


def _stop_sweep(signum: int, frame: Any) -> None:
    """The sweep's main process: stop starting jobs, pass the signal on as SIGTERM."""
    again = signals.requested() is not None
    signals.record(signum)
    sweep_dir = STATE.directory
    if sweep_dir is None:
        return
    with contextlib.suppress(OSError):
        write_new(sweep_dir / STOP_FILE, signals.name(signum) + "\n")
    pids = sorted(set(job_pids(sweep_dir)))  # a worker holding several lanes' runs: once
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    what = "stopping them at once" if again else (
        "each finishes its step, saves and stops (send it again to stop them at once)")
    print(f"\nrltrain: {signals.name(signum)} received: the sweep starts no new job; "
          f"{len(pids)} running job(s) elsewhere: {what}", file=sys.stderr, flush=True)


def write_status(job_dir: Path, status: str, error: str | None = None,
                 extra: dict[str, Any] | None = None) -> None:
    """A ``summary.json`` for a job that did not train (failed before training, or not
    started): the sweep's report reads it; a later run may reuse the directory."""
    summary = {"status": status, "error": error, "interrupted": False, "run_dir": str(job_dir),
               **(extra or {})}
    try:
        job_dir.mkdir(parents=True, exist_ok=True)
        write_new(job_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    except OSError:
        pass


def refuse(job_dir: Path, message: str, *, lasting: bool = False) -> None:
    """Record that this sweep did not run a job because its directory is another run's
    (``lasting``: the same command would be refused again) or in use by another process
    (another sweep into the same ``hydra.sweep.dir``)."""
    ledger = os.environ.get(REFUSED_ENV)
    if not ledger:
        return
    with contextlib.suppress(OSError), open_append(ledger) as f:
        f.write(json.dumps({"job": str(job_dir), "error": message, "lasting": lasting}) + "\n")


def _refusals() -> dict[Path, tuple[str, bool]]:
    """The jobs this sweep refused (:func:`refuse`), each with its message and whether the
    refusal lasts, read once: the file is removed."""
    ledger = os.environ.get(REFUSED_ENV)
    if not ledger:
        return {}
    found: dict[Path, tuple[str, bool]] = {}
    with contextlib.suppress(OSError):
        for line in Path(ledger).read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError):
                record = json.loads(line)
                found[Path(record["job"])] = (str(record["error"]),
                                              record.get("lasting") is True)
    with contextlib.suppress(OSError):
        Path(ledger).unlink()
    return found


def _jobs(path: Path) -> list[Path]:
    found = {p.parent for p in path.rglob("summary.json")}
    found |= {p.parent for p in path.rglob(rundir.LOCK)}
    return sorted(found, key=lambda p: (len(p.parts), job_number(p.name) or 0, str(p)))


def jobs_ran(path: Path) -> bool:
    """Whether a job of this sweep has run in ``path`` (written its records since the sweep
    started; the directory may hold an earlier sweep's)."""
    return any(_ran_now(job) for job in _jobs(path))


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
    (failed or refused, interrupted or stopped, total). Each job's row is what its directory
    holds (:func:`rltrain.jobs.state`), whichever launcher ran it: a resume command only where
    a checkpoint is."""
    rows, counts = [], dict.fromkeys(("failed", "interrupted", "stopped", "refused"), 0)
    unfinished_now = 0
    refusals = _refusals()
    jobs = _jobs(path)
    jobs += sorted(set(refusals) - set(jobs))
    for job in jobs:
        # what a refused job's directory holds is another run's
        found = (JobState("refused", refusals[job][0].removeprefix(f"{job} "), {})
                 if job in refusals else state(job))
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
    refused_for_good = refused > 0 and all(lasting for _, lasting in refusals.values())
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
    ``stopped`` before their first (:func:`earlier_attempt`, :func:`continue_job`); or, when
    the only jobs of this sweep that did not finish were refused (their directories hold
    another sweep's runs), give the sweep a directory of its own, since the same command
    would be refused again. ``refused_for_good`` jobs refused so, beside others to finish:
    the line says that running the sweep again will not run those."""
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


# --------------------------------------------------------------------------- a job run again
#: overrides that do not make a job a different one (how it prints, not what it trains)
_NEUTRAL = ("logger.quiet=", "logger.progress_bar=", "logger.progress_interval_s=")


def _same_job(a: list[str], b: list[str]) -> bool:
    def key(overrides: list[str]) -> list[str]:
        return [o.removeprefix("++") for o in overrides if not o.startswith(_NEUTRAL)]

    return key(a) == key(b)


def earlier_attempt(job_dir: Path, overrides: list[str], label: str) -> dict[str, Any] | None:
    """A sweep job whose directory already holds a run (the sweep run again into its
    directory, or submitit requeueing the job after a timeout or preemption).

    The same job that finished (completed or pruned): its summary, and the job is skipped.
    The same job unfinished (interrupted, killed, preempted): None, and :func:`continue_job`
    resumes it from its checkpoint. A different job: :class:`JobFailed`, nothing touched.
    """
    try:  # bounded: the directory may hold anything (rltrain.stored)
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
    summary = rundir.read_summary(job_dir)
    status = summary.get("status")
    if status in FINISHED:
        print(f"rltrain: {label}already {status} in {job_dir}: skipped", flush=True)
        return summary
    return None


def continue_job(job_dir: Path, ctx: RunContext, label: str, consent: bool = False
                 ) -> InfoStats:
    """Resume an unfinished job in its own directory from its newest good checkpoint, with
    the config stored there (the resume path of ``rltrain resume=``); returns its InfoStats.
    ``consent``: the sweep command's ``trust=true`` (rltrain.trust); the code its config
    names was recorded as trusted when this command composed the job.

    A job stopped at once before its first checkpoint has nothing to resume and never comes
    here: its directory holds no run (:func:`rltrain.rundir.holds_run`), so the job runs
    again from the start, replacing what that attempt left and saying so, as any run does
    over an attempt without a checkpoint, and as the sweep's list said it would."""
    lock = rundir.RunDirLock(job_dir)
    lock.acquire()
    try:
        try:
            point = resume_point(job_dir, consent=consent,
                                 allow="trust=true on the sweep's command, or remove the job's "
                                 "directory")
        except CheckpointError as e:
            raise ConfigError(f"{job_dir} holds an unfinished run that cannot be resumed: "
                              f"{e} (to run the job again from the start, remove its "
                              "directory and finish the sweep)") from None
        except ConfigError as e:
            raise ConfigError(f"{job_dir} holds an unfinished run that cannot be resumed: "
                              f"{e}") from None
        for problem in point.problems:
            print(f"rltrain: warning: {label}{problem}", file=sys.stderr)
        print(f"rltrain: {label}resuming the unfinished run in {job_dir} from "
              f"{point.path.name}", flush=True)
        ctx.on_accept = None  # .hydra/ is the run's own, from its first attempt
        return run(point.cfg, ctx, resume=point)
    finally:
        lock.release()


# --------------------------------------------------------------------------- a job in a worker
def _submitit_job() -> bool:
    """Whether this process is a job of Hydra's submitit launcher: its output goes to a log
    file of its own, and it outlives the command that submitted it by design (submitit can
    reattach to it)."""
    return any(key.startswith("SUBMITIT_") for key in os.environ)


def parallel_job() -> bool:
    """Whether this job runs beside others that share the console (joblib's and Ray's worker
    processes): its lines are prefixed with the job (:func:`job_in_worker`)."""
    return signals.in_sweep_worker() and not _submitit_job()


@contextlib.contextmanager
def members_in_worker() -> Iterator[None]:
    """Run the members of a batched sweep's batch in a worker process (rltrain.batched,
    ``n_jobs`` > 1): the worker does not outlive the sweep, as for :func:`job_in_worker`;
    each member's lines carry its own prefix."""
    if not parallel_job():
        yield
        return
    _Orphaned.watch()
    _Orphaned.running.set()
    try:
        yield
    finally:
        _Orphaned.running.clear()


@contextlib.contextmanager
def job_in_worker(num: int) -> Iterator[None]:
    """Run sweep job ``num`` in a joblib or Ray worker process (anything else passes through):

    * every line the job prints, on stdout and stderr, starts with ``[job N]``, since jobs
      running side by side share the console;
    * the job does not outlive the sweep: a thread checks every second that the sweep's main
      process is alive, and when it is gone (killed, even with SIGKILL) it stops the job as
      SIGTERM does (the step finishes, checkpoint, summary.json says interrupted), then ends
      this worker process (:class:`_Orphaned`)."""
    if not parallel_job() or batch_scheduler.current() is not None:
        yield  # a member of a batch: its lines are prefixed, its worker watched, already
        return
    _Orphaned.watch()
    prefixed = _Prefixed.install(f"[job {num}] ")
    _Orphaned.running.set()
    try:
        yield
    finally:
        _Orphaned.running.clear()
        prefixed.remove()


class _Prefixed(io.TextIOBase):
    """A text stream that writes each whole line to ``stream`` with ``prefix`` before it, in
    one write (lines of processes sharing a pipe or terminal then never mix). It says it is
    no terminal, so that rich prints progress lines rather than live bars, which jobs side by
    side would draw over each other."""

    def __init__(self, stream: Any, prefix: str) -> None:
        super().__init__()
        self.stream, self.prefix = stream, prefix
        self._partial = ""
        self._lock = threading.Lock()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self.stream, "encoding", "utf-8"))

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with self._lock:
            *lines, self._partial = (self._partial + text).split("\n")
            if lines:
                self.stream.write("".join(f"{self.prefix}{line}\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.stream.flush()

    def finish(self) -> None:
        if self._partial:
            self.write("\n")
        self.flush()

    @classmethod
    def install(cls, prefix: str) -> _PrefixedStreams:
        """Prefix ``sys.stdout``, ``sys.stderr`` and the logging handlers that write to
        them, until :meth:`_PrefixedStreams.remove`."""
        streams = _PrefixedStreams({"stdout": sys.stdout, "stderr": sys.stderr}, {})
        wrapped = {id(raw): cls(raw, prefix) for raw in streams.raw.values()}
        for handler in logging.getLogger().handlers:
            stream = getattr(handler, "stream", None)
            if (isinstance(handler, logging.StreamHandler)
                    and not isinstance(handler, logging.FileHandler) and id(stream) in wrapped):
                streams.handlers[handler] = stream
                handler.setStream(wrapped[id(stream)])
        sys.stdout, sys.stderr = (wrapped[id(streams.raw[name])] for name in ("stdout",
                                                                              "stderr"))
        return streams


@dataclass
class _PrefixedStreams:
    raw: dict[str, Any]
    handlers: dict[logging.StreamHandler, Any]

    def remove(self) -> None:
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, _Prefixed):
                stream.finish()
        sys.stdout, sys.stderr = self.raw["stdout"], self.raw["stderr"]
        for handler, stream in self.handlers.items():
            handler.setStream(stream)


class _Orphaned:
    """The watch on the sweep's main process, one thread per worker process.

    A worker that outlived its sweep went on training its job unsupervised, and then sat idle,
    for as long as the job ran (loky's workers: 20 minutes and more after a SIGKILL). The
    worker is a child of the main process here, but need not be (Ray), and a parent-death
    signal (prctl PR_SET_PDEATHSIG) fires when the *thread* that started the child ends, which
    for loky is an executor thread of the main process, not the process: so the main process
    is watched by its pid and start time, on the same host only."""

    running = threading.Event()
    _thread: threading.Thread | None = None
    #: seconds the job is given to finish its step and save, before a second SIGTERM
    grace_s = 30.0

    @classmethod
    def watch(cls) -> None:
        if cls._thread is not None:
            return
        pid = os.environ.get(signals.SWEEP_PID_ENV, "")
        if os.environ.get(HOST_ENV) != socket.gethostname() or not pid.isdigit():
            return  # a worker on another host: the sweep's pid is not this host's
        started = _started(int(pid))
        if started is None:
            return  # gone already, or not to be seen from here
        cls._thread = threading.Thread(target=cls._run, args=(int(pid), started),
                                       name="rltrain-sweep-watch", daemon=True)
        cls._thread.start()

    @classmethod
    def _run(cls, pid: int, started: str) -> None:
        while _started(pid) == started:
            time.sleep(1.0)
        if cls.running.is_set():
            print(f"rltrain: the sweep's main process (pid {pid}) is gone: stopping this job "
                  "(it finishes its step and saves)", file=sys.stderr, flush=True)
            for _ in range(2):  # the second SIGTERM stops at once
                os.kill(os.getpid(), signal.SIGTERM)
                deadline = time.monotonic() + cls.grace_s
                while cls.running.is_set() and time.monotonic() < deadline:
                    time.sleep(0.2)
                if not cls.running.is_set():
                    break
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(128 + signal.SIGTERM)


def _started(pid: int) -> str | None:
    """A process's start time (its identity with its pid), or None if it is gone or a zombie
    (a killed process stays one until its parent reaps it). Without /proc, "alive"."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except OSError:
            pass
        return "alive"
    fields = stat[stat.rindex(")") + 2:].split()  # after the command name, which may hold spaces
    return None if fields[0] in ("Z", "X", "x") else fields[19]
