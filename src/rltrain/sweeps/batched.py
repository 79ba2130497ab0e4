"""``hydra/launcher=batched``: a sweep's jobs that differ only in their seed (or in settings the
algorithm takes per member, such as PPO's learning rate) train side by side in one process,
as the members of a batch, their updates stacked into one computation
(:mod:`rltrain.sweeps.batch_scheduler`, :mod:`rltrain.common.stacking`).

``rltrain --multirun seed=0,1,2,3,4,5,6,7,8,9 hydra/launcher=batched`` composes each job as
Hydra's basic launcher does and runs it with Hydra's own ``run_job``, so each job's run
directory, config snapshot, logs, checkpoints, ``best/``, ``final/`` and summary are those of
the same job under the basic launcher, and ``rltrain-report``, ``rltrain-eval`` and resume
read them unchanged. What differs is that the jobs of one group run as the members of a
batch, each in a thread of its own, taking turns, and the updates of an algorithm registered
with ``batched=True`` (PPO) run as one computation over stacked parameters.

* Jobs group when their configs are equal but for ``seed``, the Optuna trial's number and
  the settings the algorithm takes per member (``AlgoSpec.member_fields``; PPO: its learning
  rate and schedule, discount, GAE lambda, clip ratio, value clip, loss coefficients,
  gradient clipping, initial log-std and number of passes), so a sweep over those stacks as
  a sweep over seeds does. A job alone in its group, or one whose algorithm has no batched
  update, runs as an ordinary job, and a line says why (what parts it from the nearest other
  job).
* A job that stops early (its seed solved the task) leaves its batch; the others go on in a
  smaller batch.
* SIGINT/SIGTERM: every member finishes its step, checkpoints and stops, as a run alone does;
  the same command resumes every job of the sweep from its checkpoint (``rltrain.sweeps``).
* Each member's lines on the console start with ``[job N]``.
* ``hydra.launcher.n_jobs=N`` deals a group's members into N batches, each in a worker process
  of its own (-1, the default: one per CPU); the jobs that run alone go to the workers too.
  On Linux the workers are forked from this process, so they start with its modules
  imported and its jobs composed; elsewhere, or where this process runs another Python
  thread, whose locks a fork could copy held, they are loky's (as Hydra's joblib
  launcher), which import and compose again.

Global state a member has its own copy of, swapped on each turn: the RNGs (torch, numpy,
Python), the root logger's handlers, Hydra's job config and the console streams.
"""

from __future__ import annotations

import copy
import logging
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from hydra._internal.config_loader_impl import get_overrides_dirname
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, configure_log, run_job, setup_globals
from omegaconf import DictConfig, OmegaConf, open_dict

from rltrain.algorithms import ALGORITHMS
from rltrain.algorithms.registry import AlgoSpec
from rltrain.process import signals
from rltrain.sweeps.batch_scheduler import Member, RNGs, Scheduler, Swap
from rltrain.sweeps.prefixed import PrefixedStream as _Prefixed
from rltrain.sweeps.workers import members_in_worker


@dataclass
class _Job:
    num: int
    overrides: list[str]
    cfg: DictConfig


class _Logging(Swap):
    """The root logger's handlers and level."""

    def get(self) -> Any:
        root = logging.getLogger()
        return list(root.handlers), root.level

    def put(self, state: Any) -> None:
        root = logging.getLogger()
        root.handlers[:] = state[0]
        root.setLevel(state[1])


class _HydraJob(Swap):
    """Hydra's config of the job running now (``HydraConfig.get()``)."""

    def get(self) -> Any:
        return HydraConfig.instance().cfg

    def put(self, state: Any) -> None:
        HydraConfig.instance().cfg = state


class _Console(Swap):
    """``sys.stdout`` and ``sys.stderr``: a member's are prefixed with its job."""

    def get(self) -> Any:
        return sys.stdout, sys.stderr

    def put(self, state: Any) -> None:
        sys.stdout, sys.stderr = state


def shared_view(cfg: DictConfig) -> dict[str, Any]:
    """A job's config as dotted keys and values, but for what the members of one batch may
    differ in: its seed, its Optuna trial's number (``tune.trial``) and its algorithm's
    settings per member (``AlgoSpec.member_fields``: e.g. PPO's learning rate). Jobs with
    equal views can be members of one batch."""
    plain = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(plain, dict)
    plain.pop("hydra", None)
    spec = ALGORITHMS.get(str(OmegaConf.select(cfg, "algo.name", default="")))
    free = {"seed", "tune.trial", *(spec.member_fields if spec is not None and spec.batched
                                    else ())}
    return {k: v for k, v in _dotted(plain).items() if k not in free}


def _dotted(tree: dict[Any, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(_dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def group_key(view: dict[str, Any]) -> str:
    """Jobs with equal keys can be members of one batch (``view``: :func:`shared_view`)."""
    return repr(sorted(view.items(), key=lambda item: item[0]))


def why_alone(view: dict[str, Any], group_size: int,
              others: Sequence[tuple[int, dict[str, Any]]] = ()) -> str | None:
    """Why a job runs as an ordinary job (None: it is a member of a batch), from its
    :func:`shared_view`; ``others``: the number and view of each job of the sweep in another
    group, to name what parts this one from the nearest of them."""
    name = str(view.get("algo.name", ""))
    spec = ALGORITHMS.get(name)
    if spec is None or not spec.batched:
        batched = ", ".join(sorted(n for n, s in ALGORITHMS.items() if s.batched))
        return f"algo={name} has no batched update yet (batched: {batched})"
    if group_size > 1:
        return None
    same_algo = [(num, view) for num, view in others if view.get("algo.name") == name]
    if not same_algo:
        return f"no other job of the sweep runs algo={name}"
    nearest, keys = -1, list[str]()
    for num, theirs in same_algo:
        differ = sorted(k for k in view.keys() | theirs.keys() if view.get(k) != theirs.get(k))
        if nearest < 0 or len(differ) < len(keys):
            nearest, keys = num, differ
    return (f"it differs from job {nearest} in {', '.join(keys)} (the members of a batch "
            f"may differ only in {member_differences(spec)})")


def member_differences(spec: AlgoSpec) -> str:
    """What the members of one batch of ``spec``'s jobs may differ in, for a line."""
    return ", ".join(["seed", *spec.member_fields])


def launch(launcher: Any, job_overrides: Sequence[Sequence[str]],
           initial_job_idx: int) -> list[JobReturn]:
    """Hydra's ``Launcher.launch`` for ``hydra/launcher=batched``: the jobs' results in order.

    The jobs are dealt into units: the jobs of a group that can be members of a batch, split into
    ``n_jobs`` batches (each in a worker process of its own when ``n_jobs`` > 1), and each
    other job alone. Units run one after another here, or side by side in ``n_jobs`` worker
    processes."""
    setup_globals()
    config, context = launcher.config, launcher.hydra_context
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    Path(str(config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    n_jobs = worker_count(int(launcher.n_jobs))
    jobs = compose_jobs(context, config, [(initial_job_idx + i, list(overrides))
                                          for i, overrides in enumerate(job_overrides)])
    views = {job.num: shared_view(job.cfg) for job in jobs}
    groups: dict[str, list[_Job]] = {}
    for job in jobs:
        groups.setdefault(group_key(views[job.num]), []).append(job)
    quiet = bool(OmegaConf.select(config, "logger.quiet", default=False))
    units: list[list[_Job]] = []
    fork = n_jobs > 1 and forkable()
    for group in groups.values():
        inside = {job.num for job in group}
        others = [(num, view) for num, view in views.items() if num not in inside]
        alone = why_alone(views[group[0].num], len(group), others)
        if alone is not None:
            for job in group:
                print(f"rltrain: job {job.num} runs alone: {alone}", flush=True)
                units.append([job])
            continue
        parts = min(n_jobs, len(group))
        batches = [group[p::parts] for p in range(parts)]
        if not quiet:
            where = ("in this process" if n_jobs == 1 else
                     f"in {parts} worker processes{', forked' if fork else ''}")
            shown = "; ".join(", ".join(str(j.num) for j in b) for b in batches)
            print(f"rltrain: jobs {shown} run as {parts} batch(es) of members ({where})",
                  flush=True)
        units += batches
    if n_jobs == 1 or len(units) == 1:  # one unit: no worker to start for it
        results: dict[int, JobReturn] = {}
        for unit in units:
            results.update(_run_unit(launcher, unit, quiet))
            configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    else:
        workers = min(n_jobs, len(units))
        run = _in_forked_workers if fork else _in_loky_workers
        results = {num: ret for part in run(launcher, units, quiet, workers)
                   for num, ret in part.items()}
    return [results[job.num] for job in jobs]


def _in_forked_workers(launcher: Any, units: list[list[_Job]], quiet: bool,
                       workers: int) -> list[dict[int, JobReturn]]:
    """Each unit in a worker forked from this process. Forked workers start with every module
    this process imported (torch, Hydra, rltrain) and the jobs' composed configs, where a loky
    worker imports them again and composes each job (about 1.8 s of the 2-core VM per worker
    before its first job). The pool forks its workers before it starts its own management
    thread, so no Python thread's lock is inherited held; the units stay in this process's
    memory, which the workers inherit, and only their indices and the jobs' results cross
    the pipe."""
    global _FORKED
    _FORKED = (launcher, units, quiet)
    for stream in (sys.stdout, sys.stderr):  # or a child would write it out again
        stream.flush()
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"),
                                 initializer=_forked_worker) as pool:
            return [f.result() for f in [pool.submit(_forked_unit, i)
                                         for i in range(len(units))]]
    finally:
        _FORKED = None


def _in_loky_workers(launcher: Any, units: list[list[_Job]], quiet: bool,
                     workers: int) -> list[dict[int, JobReturn]]:
    """Each unit in a fresh loky worker (as Hydra's joblib launcher runs jobs), which
    composes its jobs again from their overrides."""
    from joblib import Parallel, delayed  # type: ignore[import-untyped]

    state = Singleton.get_state()
    return list(Parallel(n_jobs=workers, backend="loky")(
        delayed(_unit_in_worker)(launcher.hydra_context, launcher.config,
                                 launcher.task_function, [(j.num, j.overrides) for j in unit],
                                 state, quiet)
        for unit in units))


def worker_count(n_jobs: int) -> int:
    """``hydra.launcher.n_jobs`` as a number of processes: -1 is one per CPU this process may
    run on."""
    if n_jobs == -1:
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except AttributeError:  # no affinity API (macOS)
            return max(1, os.cpu_count() or 1)
    if n_jobs < 1:
        raise ValueError(f"hydra.launcher.n_jobs must be >= 1, or -1 for one per CPU; got "
                         f"{n_jobs}")
    return n_jobs


def forkable() -> bool:
    """Whether the workers may be forked: on Linux (macOS's system libraries are not safe to
    use in a forked child, and Windows has no fork), from a process that runs no Python
    thread but the main one. Native threads may exist: numpy's OpenBLAS starts its pool at
    import and shuts it down around a fork itself (pthread_atfork); torch's pools have run
    nothing yet when a sweep launches."""
    return sys.platform.startswith("linux") and threading.active_count() == 1


#: what a forked pool's workers run (set while the pool runs): the launcher, the units of
#: jobs, whether the console is quiet
_FORKED: tuple[Any, list[list[_Job]], bool] | None = None


def _forked_unit(index: int) -> dict[int, JobReturn]:
    """Unit ``index`` of the sweep in a forked worker (the jobs composed by the main
    process, Hydra's globals inherited from it)."""
    assert _FORKED is not None  # set before the pool forked this worker
    launcher, units, quiet = _FORKED
    with members_in_worker():
        return _run_unit(launcher, units[index], quiet)


def _forked_worker() -> None:
    """A forked worker's signals as a fresh process's would be, but for the terminal's SIGINT
    and SIGHUP, which the sweep's main process answers for its workers (:mod:`rltrain.sweeps`):
    the handlers the main process had when it forked are not the worker's to run."""
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def compose_jobs(context: Any, config: DictConfig,
                 jobs: list[tuple[int, list[str]]]) -> list[_Job]:
    """Each job's config, as Hydra's basic launcher composes it.

    Hydra composes a config in about 0.1 s on the 2-core VM, as long as a whole PPO CartPole
    epoch: a job whose overrides differ from an earlier job's only in an integer ``seed=N``
    gets a copy of that job's config with the seed set the way Hydra's composing sets it
    (:func:`_reseeded`; ``tests/test_batched.py`` checks the copies equal Hydra's own). A
    seed is a plain value, not a config group, so it cannot change what is composed."""
    out: list[_Job] = []
    parser = OverridesParser.create()
    for num, overrides in jobs:
        base = next((job for job in out if _only_seed_differs(parser, job.overrides,
                                                               overrides)), None)
        cfg = (_compose(context, config, overrides, num) if base is None
               else _reseeded(parser, base.cfg, overrides, num))
        out.append(_Job(num, overrides, cfg))
    return out


def _int_seed(parser: OverridesParser, line: str) -> Override | None:
    """``line`` parsed, when it is a plain ``seed=<int>`` (not a sweep, not ``+``/``~``)."""
    if not line.startswith("seed="):
        return None
    override = parser.parse_override(line)
    value = override.value()
    if (override.type is not OverrideType.CHANGE or override.is_hydra_override()
            or override.is_sweep_override() or type(value) is not int):
        return None
    return override


def _only_seed_differs(parser: OverridesParser, a: list[str], b: list[str]) -> bool:
    """Whether overrides ``a`` and ``b`` are the same but for one plain ``seed=<int>``."""
    if len(a) != len(b) or sum(line.startswith("seed=") for line in b) != 1:
        return False
    differ = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
    return (len(differ) == 1 and _int_seed(parser, a[differ[0]]) is not None
            and _int_seed(parser, b[differ[0]]) is not None)


def _reseeded(parser: OverridesParser, base: DictConfig, overrides: list[str],
              num: int) -> DictConfig:
    """``base`` (a composed job) for the job whose overrides are ``overrides``: the same
    but for ``seed``, which is what Hydra's composing writes from the overrides (the value,
    ``hydra.overrides.task``, ``hydra.job.override_dirname``) and the job's number."""
    cfg = copy.deepcopy(base)
    OmegaConf.copy_cache(from_config=base, to_config=cfg)  # ${now:} as the sweep resolved it
    app = [o for o in parser.parse_overrides(overrides) if not o.is_hydra_override()]
    seed = next(o for o in app if o.key_or_group == "seed")
    OmegaConf.update(cfg, "seed", seed.value(), merge=True)
    naming = cfg.hydra.job.config.override_dirname
    with open_dict(cfg):
        cfg.hydra.overrides.task = [o.input_line for o in app]
        cfg.hydra.job.override_dirname = get_overrides_dirname(
            overrides=app, kv_sep=naming.kv_sep, item_sep=naming.item_sep,
            exclude_keys=naming.exclude_keys)
        cfg.hydra.job.id = num
        cfg.hydra.job.num = num
    return cfg


def _compose(context: Any, config: DictConfig, overrides: list[str], num: int) -> DictConfig:
    cfg = context.config_loader.load_sweep_config(config, overrides)
    with open_dict(cfg):
        cfg.hydra.job.id = num
        cfg.hydra.job.num = num
    return cfg


def _unit_in_worker(context: Any, config: DictConfig, task_function: Any,
                    jobs: list[tuple[int, list[str]]], singleton_state: dict[Any, Any],
                    quiet: bool) -> dict[int, JobReturn]:
    """A unit of jobs in a worker process (``n_jobs`` > 1), as Hydra's joblib launcher runs
    one job there."""
    setup_globals()
    Singleton.set_state(singleton_state)
    unit = compose_jobs(context, config, jobs)
    launcher = _Worker(config, context, task_function)
    with members_in_worker():
        return _run_unit(launcher, unit, quiet)


@dataclass
class _Worker:
    """What a worker needs of the launcher."""

    config: DictConfig
    hydra_context: Any
    task_function: Any


def _run_unit(launcher: Any, unit: list[_Job], quiet: bool) -> dict[int, JobReturn]:
    if len(unit) == 1:
        return {unit[0].num: _run(launcher, unit[0])}
    return _run_members(launcher, unit, quiet)


def _run(launcher: Any, job: _Job) -> JobReturn:
    return run_job(hydra_context=launcher.hydra_context, task_function=launcher.task_function,
                   config=job.cfg, job_dir_key="hydra.sweep.dir",
                   job_subdir_key="hydra.sweep.subdir")


def _job_runner(launcher: Any, job: _Job) -> Callable[[], JobReturn]:
    return lambda: _run(launcher, job)


def _run_members(launcher: Any, group: list[_Job], quiet: bool) -> dict[int, JobReturn]:
    # the stacked updates run on this thread: as many torch threads as each job's own
    # (torch_threads; OpenMP's count is per thread, and each member sets only its own). Left
    # at torch's default (one per core), two workers' OpenMP threads spun against each
    # other on the 2-core VM: 5 PPO CartPole seeds took 7.7-9.7 s instead of 2.5-3.5
    torch.set_num_threads(int(group[0].cfg.torch_threads))
    raw = (sys.stdout, sys.stderr)
    swaps = [RNGs(), _Logging(), _HydraJob(), _Console()]
    ran: list[Member] = []
    for job in group:
        prefix = f"[job {job.num}] "
        console = (_Prefixed(raw[0], prefix), _Prefixed(raw[1], prefix))
        ran.append(Member(str(job.num), _job_runner(launcher, job), swaps,
                          initial=[None, None, None, console]))
    scheduler = Scheduler(ran)

    def stop_now(signum: int) -> None:  # the second signal: each member stops at its next meet
        scheduler.stop_now(signals.StopNow(signum))

    with signals.training(signals.stop_threads, stop_now):
        scheduler.run()
    for member in ran:
        for stream in member.states()[3] or ():
            stream.finish()
    if not quiet:
        jobs = ", ".join(str(job.num) for job in group)
        print(f"rltrain: the batch of jobs {jobs} ran {scheduler.works} updates as "
              f"{scheduler.batches} stacked computations", flush=True)
    out: dict[int, JobReturn] = {}
    for job, member in zip(group, ran, strict=True):
        if member.error is not None:
            raise member.error
        out[job.num] = member.returned
    return out
