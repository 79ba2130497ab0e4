"""Optuna as a Hydra sweeper: ``rltrain --multirun hydra/sweeper=optuna hparams_search=X``.

Hydra's own Optuna sweeper (1.3) pins ``optuna<3``; this one is written for current Optuna
(4 and 5) and for rltrain's runs: each trial is a run that reports its score after every
epoch, so the study's pruner can stop it (the run then ends ``pruned``, its directory
complete), and a trial that is invalid or crashes is recorded as failed while the study goes
on.

The loop: ask the study for up to ``n_jobs`` trials, turn each into a job's overrides (the
fixed overrides, the trial's parameters, and ``tune.*`` naming the study and trial), let the
configured launcher run them (basic: one after the other; joblib, submitit, Ray: in
parallel), tell the study each job's outcome, until the study holds ``n_trials`` finished
trials. Re-running the same command with the same storage continues the study: finished
trials count, and a trial a killed sweep left running is marked failed and asked again.

Several sweeps may share one study (the same ``storage`` and ``study_name``, on one machine or
many): each asks only for the trials the study still lacks (``n_trials`` less those finished
and those running, whoever runs them), waits for the others' trials when none is left to ask,
and ends once the study holds ``n_trials`` finished trials, each counted once. A sweep proves
that it is alive with a heartbeat: every ``heartbeat_interval`` seconds, for as long as a
trial it asked for runs, its own process (which asks and tells, whichever launcher runs the
job) records one in the study's storage (Optuna's heartbeat table in an RDB storage; a trial
attribute in a journal file). A running trial whose heartbeat is more than ``grace_period``
seconds old was left by a sweep that died (killed, its machine lost): the next sweep to look
marks it failed (``interrupted``, not counted) and asks for its parameters again. A live
trial is never taken, however long it trains.

At the end, in the sweep directory: ``trials.csv``, the best parameters as a ready tuned
file (``conf/tuned/<algo>_<env>.yaml``) and as an experiment to use at once
(``conf/experiment/tuned_<algo>_<env>.yaml``), and Optuna's plots as PNG files.

Hydra imports this module whenever it looks for plugins: at every start of rltrain, and of any
other Hydra app installed beside it. So what only a sweep needs is imported when a sweep starts:
Optuna (0.18 s, and the ``tune`` extra, which an app without it must not need) and rltrain's
run modules (``rltrain.catalogue`` imports torch: 1.1 s).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import datetime
import itertools
import logging
import math
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import HydraException
from omegaconf import OmegaConf

from rltrain import signals
from rltrain.config import OBJECTIVES
from rltrain.stored import read_json, read_yaml
from rltrain.tune import (
    HEARTBEAT_ATTR,
    PRUNER_ATTR,
    Heartbeats,
    StudyLock,
    make_pruner,
    open_storage,
)

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution

log = logging.getLogger(__name__)

SAMPLERS = ("tpe", "random", "cmaes", "grid")
PRUNERS = ("median", "halving", "none")
DIRECTIONS = ("maximize", "minimize")


@dataclass
class SamplerConf:
    #: tpe (default), random, cmaes or grid
    name: str = "tpe"
    #: the sampler's seed; a continued study adds the number of trials it holds, so it does
    #: not propose the same points again
    seed: int | None = 0
    #: TPE: random trials before it models the space
    n_startup_trials: int = 5


@dataclass
class PrunerConf:
    #: median (stop a trial below the median of earlier trials at the same epoch),
    #: halving (successive halving) or none
    name: str = "median"
    #: median: trials that finish before any is pruned
    n_startup_trials: int = 4
    #: median: epochs a trial runs before it can be pruned
    n_warmup_steps: int = 2
    #: halving: the epochs of the first rung, and how many trials each rung keeps (1 in r)
    min_resource: int = 2
    reduction_factor: int = 3


@dataclass
class OptunaSweeperConf:
    _target_: str = "hydra_plugins.rltrain_optuna_sweeper.optuna_sweeper.OptunaSweeper"
    direction: str = "maximize"
    #: the study's name in its storage; default: rltrain-<algo>-<env>
    study_name: str | None = None
    #: an RDB URL (postgresql://..., sqlite:///PATH) or journal:PATH (Optuna's journal file,
    #: shared by processes without a server); default: sqlite:///<sweep dir>/optuna.db
    storage: str | None = None
    #: finished trials (complete, pruned or failed) the study should hold at the end
    n_trials: int = 20
    #: trials launched at once, in parallel when the launcher runs jobs in parallel
    n_jobs: int = 2
    sampler: SamplerConf = field(default_factory=SamplerConf)
    pruner: PrunerConf = field(default_factory=PrunerConf)
    #: a trial's score: auc, last_k, best or final (rltrain.tune)
    objective: str = "auc"
    last_k: int = 3
    #: seconds between two heartbeats of each trial this sweep runs (see the module's text):
    #: recorded by the sweep's own process for the whole trial, whichever launcher runs it
    heartbeat_interval: float = 10.0
    #: seconds without a heartbeat after which another sweep into the study takes a running
    #: trial for one whose sweep died: failed (interrupted) and its parameters asked again.
    #: More than heartbeat_interval (3 times or more leaves room for a slow storage); an RDB
    #: storage counts whole seconds; a journal file shared by machines compares their clocks
    grace_period: float = 60.0
    #: the search space: key -> Hydra sweep syntax (interval(0.9, 0.999),
    #: tag(log, interval(1e-4, 1e-2)), range(1, 10), choice(a, b), a,b,c) or an Optuna
    #: distribution ({type: float|int|categorical, low, high, log, step, choices})
    params: dict[str, Any] = field(default_factory=dict)


ConfigStore.instance().store(group="hydra/sweeper", name="optuna", node=OptunaSweeperConf,
                             provider="rltrain")


class SweepError(Exception):
    """A sweep that cannot start (a bad search space, sampler or storage): one line."""


class OptunaSweeperImpl:
    """What the plugin's ``OptunaSweeper`` (a Hydra Sweeper, which Hydra wants defined in
    the ``hydra_plugins`` package) does."""

    def __init__(self, **kwargs: Any) -> None:
        conf = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(OptunaSweeperConf),
                                                   kwargs))
        assert isinstance(conf, OptunaSweeperConf)  # a structured config's object is its class
        self.conf = conf
        self.config: Any = None
        self.launcher: Any = None
        self.hydra_context: Any = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        self.config, self.hydra_context = config, hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    # ------------------------------------------------------------------ the sweep
    def sweep(self, arguments: list[str]) -> Any:
        try:
            return self._sweep(arguments)
        except SweepError as e:
            from rltrain.sweeps.command import judge  # with the sweep: the module's text

            print(f"rltrain: error: {e}", file=sys.stderr)
            judge(2)
            return None

    def _sweep(self, arguments: list[str]) -> Any:
        import optuna  # the tune extra, 0.18 s: see the module's text

        from rltrain.sweeps.stopping import stop_requested  # with the sweep: see the module's text

        c = self.conf
        _check_conf(c)
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).absolute()
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        fixed, space = search_space(arguments, c.params)
        algo = str(self.config.algo.name)
        env = str(self.config.env.name)
        _check_keys(space, algo)
        storage_url = c.storage or f"sqlite:///{sweep_dir / 'optuna.db'}"
        study_name = c.study_name or f"rltrain-{algo}-{env}"
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        try:
            storage = open_storage(storage_url)
            pruner = dataclasses.asdict(c.pruner)
            study = optuna.create_study(
                study_name=study_name, storage=storage, load_if_exists=True,
                direction=optuna.study.StudyDirection[c.direction.upper()],
                pruner=make_pruner(pruner))
            # Optuna's storage keeps no pruner: the trials' runs build this one from it
            study.set_user_attr(PRUNER_ATTR, pruner)
            heartbeats = Heartbeats(storage_url, storage, c.heartbeat_interval, c.grace_period)
            lock = StudyLock(storage_url)
        except Exception as e:  # noqa: BLE001 - a bad URL, a server that is not there
            hint = (" (PostgreSQL needs its driver: pip install -e \".[postgres]\")"
                    if isinstance(e, ImportError) and storage_url.startswith("postgres") else "")
            raise SweepError(f"the study's storage {storage_url} cannot be used: "
                             f"{type(e).__name__}: {str(e).splitlines()[0]}{hint}") from None
        n_trials = c.n_trials
        grid = _grid(space) if c.sampler.name == "grid" else None
        if grid is not None:
            size = math.prod(len(v) for v in grid.values())
            if n_trials > size:
                log.info(f"the grid has {size} points: the study runs {size} trials, "
                         f"not {n_trials}")
                n_trials = size
        shared = SharedStudy(study, storage, heartbeats, c)
        try:
            with lock:
                shared.take_stale()
                if grid is not None:
                    _enqueue_grid(study, grid)
                tally = shared.tally()
        except OSError as e:  # the lock file beside the storage
            raise SweepError(str(e)) from None
        running = f", {len(tally.running)} running" if tally.running else ""
        print(f"rltrain: study {study_name!r} in {storage_url}: {tally.finished} of {n_trials} "
              f"trials finished{running}; searching {', '.join(space) or 'nothing'}"
              + (f"; fixed {' '.join(fixed)}" if fixed else ""), flush=True)
        waiting: tuple[int, ...] = ()
        try:
            while not stop_requested(sweep_dir):
                with lock:  # count and ask as one step: sweeps started together ask no more
                    shared.take_stale()
                    tally = shared.tally()
                    if tally.finished >= n_trials:
                        break
                    wanted = min(c.n_jobs, n_trials - tally.finished - len(tally.running))
                    if wanted > 0:
                        seed = None if c.sampler.seed is None else c.sampler.seed + tally.total
                        study.sampler = _sampler(c.sampler, seed, space)
                        batch = [shared.ask(space) for _ in range(wanted)]
                if wanted <= 0:  # the study's last trials run in other sweeps: wait for them
                    numbers = tuple(sorted(t.number for t in tally.running))
                    if numbers != waiting:
                        waiting = numbers
                        print(f"rltrain: waiting for trial(s) {', '.join(map(str, numbers))}, "
                              "run by another sweep (taken over if its heartbeat stops for "
                              f"{shared.grace:g} s)", flush=True)
                    time.sleep(min(1.0, c.heartbeat_interval))
                    continue
                waiting = ()
                jobs = [self._overrides(fixed, trial, storage_url, study_name) for trial in batch]
                returns = self.launcher.launch(jobs, initial_job_idx=batch[0].number)
                for trial, ret in zip(batch, returns, strict=True):
                    shared.done(trial)
                    self._tell(study, trial, ret)
                if signals.requested() is not None:
                    break
        finally:
            shared.close()
        return self._finish(study, sweep_dir, storage_url, algo, env, fixed, space)

    def _overrides(self, fixed: list[str], trial: optuna.Trial, storage_url: str,
                   study_name: str) -> list[str]:
        from rltrain.catalogue import free_form_prefixes  # 1.1 s (torch): see the module's text

        free = tuple(free_form_prefixes())
        params = [("++" if not key.startswith("+") and key.startswith(free) else "")
                  + f"{key}={encode(value)}" for key, value in trial.params.items()]
        c = self.conf
        tune = [f"tune.storage={encode(storage_url)}", f"tune.study={encode(study_name)}",
                f"tune.trial={trial.number}", f"tune.objective={c.objective}",
                f"tune.last_k={c.last_k}", f"tune.prune={str(c.pruner.name != 'none').lower()}"]
        return [*fixed, *params, *tune]

    def _tell(self, study: optuna.Study, trial: optuna.Trial, ret: JobReturn) -> None:
        from optuna.exceptions import UpdateFinishedTrialError  # the tune extra

        try:
            self._tell_outcome(study, trial, ret)
        except UpdateFinishedTrialError:
            # another sweep took it for stale: this process's heartbeats stopped for longer
            # than the grace period (a stalled machine, a storage that kept them waiting)
            log.warning(f"trial {trial.number} was taken over by another sweep, which found "
                        f"its heartbeat more than {self.conf.grace_period:g} s old: its "
                        "result is not recorded (its parameters are run again); a longer "
                        "hydra.sweeper.grace_period avoids this")

    def _tell_outcome(self, study: optuna.Study, trial: optuna.Trial, ret: JobReturn) -> None:
        from optuna.trial import TrialState  # the tune extra: see the module's text

        run_dir = _job_dir(ret)
        trial.set_user_attr("run_dir", run_dir)
        if ret.status != JobStatus.COMPLETED:
            error = _job_error(run_dir) or str(getattr(ret, "_return_value", "") or "failed")
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

    def _finish(self, study: optuna.Study, sweep_dir: Path, storage_url: str, algo: str,
                env: str, fixed: list[str], space: dict[str, BaseDistribution]) -> None:
        from optuna.trial import TrialState  # the tune extra: see the module's text

        from rltrain.sweeps.command import judge  # with the sweep: see the module's text

        trials = study.get_trials(deepcopy=False)
        counts = {s: sum(t.state == s and not _interrupted(t) for t in trials) for s in
                  (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)}
        interrupted = sum(map(_interrupted, trials))
        others = [f"{sum(t.state == s for t in trials)} {s.name.lower()}"
                  for s in (TrialState.RUNNING, TrialState.WAITING)
                  if any(t.state == s for t in trials)]
        write_trials_csv(sweep_dir / "trials.csv", trials)
        print(f"rltrain: study {study.study_name!r}: {len(trials)} trials: "
              f"{counts[TrialState.COMPLETE]} complete, {counts[TrialState.PRUNED]} pruned, "
              f"{counts[TrialState.FAIL]} failed"
              + (f", {interrupted} interrupted (not counted)" if interrupted else "")
              + "".join(f", {o}" for o in others)
              + f"; trials.csv in {sweep_dir}", flush=True)
        if not counts[TrialState.COMPLETE]:
            print("rltrain: error: no trial completed, so there is no best one",
                  file=sys.stderr)
            judge(1)
            return
        best = study.best_trial
        params = " ".join(f"{k}={encode(v)}" for k, v in best.params.items())
        print(f"rltrain: best trial {best.number}: {self.conf.objective} {best.value:.6g} "
              f"({best.user_attrs.get('run_dir', '')}): {params}", flush=True)
        try:
            budget = self._budget(best, algo, env)
            tuned, experiment = write_tuned(sweep_dir, best, algo, env, study.study_name,
                                            budget)
            print(f"rltrain: tuned file: {tuned} (copy it to rltrain's conf/tuned/); "
                  f"to train with it now: rltrain --config-dir {sweep_dir / 'conf'} "
                  f"experiment={experiment.stem}", flush=True)
            print(f"rltrain: {budget.said()}", file=sys.stdout if budget.source else sys.stderr,
                  flush=True)
        except (OSError, ValueError) as e:
            log.warning(f"the tuned file could not be written: {e}")
        for name in write_plots(study, sweep_dir):
            print(f"rltrain: plot: {sweep_dir / name}", flush=True)
        if storage_url.startswith("sqlite"):
            print(f"rltrain: browse the study with: optuna-dashboard {storage_url}", flush=True)
        judge(0)


    def _budget(self, best: optuna.trial.FrozenTrial, algo: str, env: str) -> Budget:
        """The budget the tuned settings are to be trained with: :data:`BUDGET`'s keys as
        ``rltrain algo=A env=E`` composes them for the best trial's algorithm and env (the
        shipped tuned file's, else the defaults), but for a key the search itself searched."""
        run_dir = Path(best.user_attrs.get("run_dir", ""))
        trial = read_yaml(run_dir / ".hydra" / "config.yaml")
        tried = (trial.get("trainer") or {}) if isinstance(trial, dict) else {}
        choices = _trial_choices(run_dir / ".hydra" / "hydra.yaml")
        picks = [f"algo={choices.get('algo', algo)}", f"env={choices.get('env', env)}"]
        keys = [k for k in BUDGET if f"trainer.{k}" not in best.params]
        try:
            from hydra.types import RunMode

            cfg = self.hydra_context.config_loader.load_configuration(
                config_name=str(self.config.hydra.job.config_name), overrides=picks,
                run_mode=RunMode.RUN)
            base = OmegaConf.to_container(cfg.trainer, resolve=True)
            assert isinstance(base, dict)  # a config group's node
            tuned = OmegaConf.select(cfg, "hydra.runtime.choices.tuned", default=None)
            # an optional default names its choice whether or not the file is there
            if tuned not in self.hydra_context.config_loader.get_group_options("tuned"):
                tuned = None
        except Exception as e:  # noqa: BLE001 - a config that composed for the trials
            return Budget({k: tried[k] for k in keys if k in tried}, "", {},
                          f"{' '.join(picks)} did not compose ({type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''})")
        source = (f"the budget rltrain {' '.join(picks)} trains with ("
                  + (f"tuned/{tuned}.yaml)" if tuned else "no tuned file: the defaults)"))
        values = {k: base[k] for k in keys if k in base}
        return Budget(values, source, {k: tried[k] for k in values
                                       if k in tried and tried[k] != values[k]})


# ---------------------------------------------------------------------- search space
def search_space(arguments: list[str], params: dict[str, Any]
                 ) -> tuple[list[str], dict[str, BaseDistribution]]:
    """The fixed overrides and the search space (key -> Optuna distribution) from the
    command line's overrides and the sweeper's ``params``; a command-line sweep
    (``algo.lr=interval(...)``, ``seed=0,1``) joins the space and replaces a param."""
    parser = OverridesParser.create()
    space: dict[str, BaseDistribution] = {}
    for key, value in params.items():
        if isinstance(value, dict) or hasattr(value, "keys"):
            space[key] = _optuna_distribution(key, dict(value))
            continue
        text = value if isinstance(value, str) else encode(value)
        try:
            override = parser.parse_override(f"{key}={text}")
        except HydraException as e:
            raise SweepError(f"hydra.sweeper.params.{key}={text} is not a search space: "
                             f"{str(e).splitlines()[0]}") from None
        space[key] = _checked(override) if override.is_sweep_override() else _fixed_value(
            override)
    fixed: list[str] = []
    for override in parser.parse_overrides(arguments):
        if override.is_sweep_override():
            space[override.get_key_element()] = _checked(override)
        else:
            space.pop(override.get_key_element(), None)
            space.pop(override.key_or_group, None)
            assert override.input_line is not None  # the parser keeps the text it parsed
            fixed.append(override.input_line)
    return fixed, space


def _checked(override: Override) -> BaseDistribution:
    """:func:`distribution`, with Optuna's refusal (``low > high``, a log range from 0) as
    one line naming the key."""
    try:
        return distribution(override)
    except ValueError as e:
        raise SweepError(f"the search space {override.input_line}: {e}") from None


def _fixed_value(override: Override) -> BaseDistribution:
    from optuna.distributions import CategoricalDistribution  # the tune extra

    return CategoricalDistribution([_choice(override.value())])


def distribution(override: Override) -> BaseDistribution:
    """An Optuna distribution from a Hydra sweep override."""
    from optuna.distributions import (  # the tune extra: see the module's text
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    key = override.get_key_element()
    value = override.value()
    tags = set(getattr(value, "tags", ()) or ())
    if isinstance(value, IntervalSweep):
        low, high = value.start, value.end
        if low is None or high is None:  # Hydra's grammar gives an interval both ends
            raise SweepError(f"{key}: an interval needs both ends ({override.input_line})")
        if "int" in tags:
            return IntDistribution(int(low), int(high), log="log" in tags)
        return FloatDistribution(float(low), float(high), log="log" in tags)
    if isinstance(value, RangeSweep):
        start, stop, step = value.start, value.stop, value.step
        if (isinstance(start, int) and isinstance(stop, int) and isinstance(step, int)
                and step > 0):
            high = start + step * ((stop - 1 - start) // step)
            return IntDistribution(start, high, step=step)
        return CategoricalDistribution([_choice(v) for v in override.sweep_iterator()])
    if isinstance(value, ChoiceSweep) or override.is_sweep_override():
        return CategoricalDistribution([_choice(v) for v in override.sweep_iterator()])
    raise SweepError(f"{key}: not a search space ({override.input_line})")


def _choice(value: Any) -> None | bool | int | float | str:
    """A categorical choice as Optuna stores it: a list or dict as its override text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return encode(value)


def _optuna_distribution(key: str, spec: dict[str, Any]) -> BaseDistribution:
    from optuna.distributions import (  # the tune extra: see the module's text
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    kind = spec.get("type")
    try:
        if kind == "float":
            return FloatDistribution(float(spec["low"]), float(spec["high"]),
                                     log=bool(spec.get("log", False)), step=spec.get("step"))
        if kind == "int":
            return IntDistribution(int(spec["low"]), int(spec["high"]),
                                   log=bool(spec.get("log", False)),
                                   step=int(spec.get("step", 1)))
        if kind == "categorical":
            return CategoricalDistribution([_choice(v) for v in spec["choices"]])
    except (KeyError, TypeError, ValueError) as e:
        raise SweepError(f"hydra.sweeper.params.{key}: {type(e).__name__}: {e} (a float or "
                         "int takes low and high, a categorical takes choices)") from None
    raise SweepError(f"hydra.sweeper.params.{key}: type must be float, int or categorical, "
                     f"got {kind!r}")


def encode(value: Any) -> str:
    """A value as an override's text (Hydra's grammar)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        simple = value and all(ch.isalnum() or ch in "_-./:@+" for ch in value) and \
            not value[0].isdigit() and value not in ("null", "true", "false")
        if simple or (value.startswith("[") and value.endswith("]")):
            return value
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list | tuple):
        return "[" + ",".join(encode(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{encode(v)}" for k, v in value.items()) + "}"
    return str(value)


# ---------------------------------------------------------------------- checks, parts
def _check_conf(c: OptunaSweeperConf) -> None:
    problems = []
    if c.direction not in DIRECTIONS:
        problems.append(f"hydra.sweeper.direction must be maximize or minimize, got "
                        f"{c.direction!r}")
    if c.sampler.name not in SAMPLERS:
        problems.append(f"hydra.sweeper.sampler.name must be one of {', '.join(SAMPLERS)}, "
                        f"got {c.sampler.name!r}")
    if c.pruner.name not in PRUNERS:
        problems.append(f"hydra.sweeper.pruner.name must be one of {', '.join(PRUNERS)}, "
                        f"got {c.pruner.name!r}")
    if c.objective not in OBJECTIVES:
        problems.append(f"hydra.sweeper.objective must be one of {', '.join(OBJECTIVES)}, "
                        f"got {c.objective!r}")
    for name in ("n_trials", "n_jobs", "last_k"):
        if not getattr(c, name) > 0:
            problems.append(f"hydra.sweeper.{name} must be > 0, got {getattr(c, name)}")
    for name in ("heartbeat_interval", "grace_period"):
        value = getattr(c, name)
        if not (math.isfinite(value) and value > 0):
            problems.append(f"hydra.sweeper.{name} must be a finite number of seconds > 0, "
                            f"got {value}")
    if not problems and not c.grace_period > c.heartbeat_interval:
        problems.append(f"hydra.sweeper.grace_period ({c.grace_period:g}) must be more than "
                        f"hydra.sweeper.heartbeat_interval ({c.heartbeat_interval:g}): a live "
                        "trial would look stale between two heartbeats (3 times or more is safe)")
    if problems:
        raise SweepError(problems[0])


def _check_keys(space: dict[str, BaseDistribution], algo: str) -> None:
    from rltrain.catalogue import key_problem  # 1.1 s (torch): see the module's text

    for key in space:
        problem = key_problem(key.removeprefix("++").removeprefix("+"), [algo])
        if problem is not None:
            raise SweepError(f"the search space: {problem}")
        if key.startswith("tune."):
            raise SweepError(f"the search space cannot set {key}: the sweeper sets tune.*")
    if not space:
        raise SweepError("the search space is empty: give hydra.sweeper.params (an "
                         "hparams_search=... file) or a sweep such as algo.lr=interval(1e-4,1e-2)")


def _sampler(conf: SamplerConf, seed: int | None, space: dict[str, BaseDistribution]
             ) -> optuna.samplers.BaseSampler:
    import optuna  # the tune extra, 0.18 s: see the module's text

    if conf.name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if conf.name == "cmaes":
        try:
            import cmaes  # noqa: F401 - whether it is installed (optional: the tune extra)
        except ImportError:
            raise SweepError("hydra.sweeper.sampler.name=cmaes needs the cmaes package: "
                             "pip install -e \".[tune]\"") from None
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    if conf.name == "grid":
        # the grid's points are enqueued (_enqueue_grid): Optuna's GridSampler ends a study
        # with Study.stop, which only works inside Study.optimize, not with ask and tell
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=conf.n_startup_trials)


def _grid(space: dict[str, BaseDistribution]) -> dict[str, list[Any]]:
    from optuna.distributions import CategoricalDistribution, IntDistribution  # the tune extra

    grid: dict[str, list[Any]] = {}
    for key, dist in space.items():
        if isinstance(dist, CategoricalDistribution):
            grid[key] = list(dist.choices)
        elif isinstance(dist, IntDistribution) and not dist.log:
            grid[key] = list(range(dist.low, dist.high + 1, dist.step))
        else:
            raise SweepError(f"hydra.sweeper.sampler.name=grid needs a finite set of values: "
                             f"{key} is an interval (use choice(...) or range(...))")
    return grid


def _enqueue_grid(study: optuna.Study, grid: dict[str, list[Any]]) -> None:
    """Queue every point of the grid the study has not tried (or queued) yet."""
    keys = list(grid)
    # a queued trial holds its point as fixed_params until it is asked (another sweep's
    # queue, a retried trial's parameters)
    seen = {tuple(repr((t.params or t.system_attrs.get("fixed_params", {})).get(k))
                  for k in keys)
            for t in study.get_trials(deepcopy=False) if not _interrupted(t)}
    for point in itertools.product(*(grid[k] for k in keys)):
        if tuple(repr(v) for v in point) not in seen:
            study.enqueue_trial(dict(zip(keys, point, strict=True)), skip_if_exists=False)


def _interrupted(trial: optuna.trial.FrozenTrial) -> bool:
    """A failed trial that does not count: its run was interrupted, or its sweep died."""
    return bool(trial.user_attrs.get("interrupted"))


@dataclass
class Tally:
    #: finished trials (complete, pruned or failed), each once: an interrupted one is not
    finished: int
    #: the running trials, whichever sweep runs them
    running: list[optuna.trial.FrozenTrial]
    #: every trial the study holds
    total: int


class SharedStudy:
    """A study as one of several sweeps sees it: its tally, the trials this sweep asked for
    and keeps alive with a heartbeat thread, and the trials whose sweep died."""

    def __init__(self, study: optuna.Study, storage: optuna.storages.BaseStorage,
                 heartbeats: Heartbeats, conf: OptunaSweeperConf) -> None:
        self.study, self.storage, self.heartbeats = study, storage, heartbeats
        self.study_id = storage.get_study_id_from_name(study.study_name)
        self.mark = {"interval": conf.heartbeat_interval, "grace": conf.grace_period}
        #: the grace period the last look for stale trials used (see take_stale)
        self.grace = conf.grace_period
        self._mine: dict[int, int] = {}  # trial id -> number, of the trials this sweep runs
        self._guard = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tally(self) -> Tally:
        from optuna.trial import TrialState  # the tune extra: see the module's text

        trials = self.study.get_trials(deepcopy=False)
        return Tally(
            finished=sum(t.state.is_finished() and not _interrupted(t) for t in trials),
            running=[t for t in trials if t.state == TrialState.RUNNING], total=len(trials))

    def ask(self, space: dict[str, BaseDistribution]) -> optuna.Trial:
        """A trial for this sweep, its first heartbeat recorded before any other sweep can
        see it without one, then beating every interval until :meth:`done`."""
        trial = self.study.ask(space)
        trial_id = self.storage.get_trial_id_from_study_id_trial_number(self.study_id,
                                                                         trial.number)
        self.heartbeats.record(trial_id)
        # the mark says it beats, and how often: a trial without it never had a heartbeat
        self.storage.set_trial_system_attr(trial_id, HEARTBEAT_ATTR, self.mark)
        with self._guard:
            self._mine[trial_id] = trial.number
        if self._thread is None:
            self._thread = threading.Thread(target=self._beat, name="rltrain-heartbeat",
                                            daemon=True)
            self._thread.start()
        return trial

    def done(self, trial: optuna.Trial) -> None:
        """The trial's job has ended: no more heartbeats (it is told next)."""
        with self._guard:
            self._mine = {k: v for k, v in self._mine.items() if v != trial.number}

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _beat(self) -> None:
        """The heartbeat thread: alive in this (the sweep's) process for as long as it runs
        trials, so a trial's heartbeat stops exactly when its sweep dies, whichever launcher
        (in this process, joblib's workers, a cluster) runs its job."""
        failing = False
        while not self._stop.wait(self.heartbeats.interval):
            with self._guard:
                mine = dict(self._mine)
            try:
                for trial_id in mine:
                    self.heartbeats.record(trial_id)
                failing = False
            except Exception as e:  # noqa: BLE001 - a busy or lost storage: try again next beat
                if not failing:
                    log.warning(f"the heartbeat of trial(s) {', '.join(map(str, mine.values()))} "
                                f"could not be recorded ({type(e).__name__}: "
                                f"{str(e).splitlines()[0] if str(e) else ''}); trying again "
                                f"every {self.heartbeats.interval:g} s")
                failing = True

    def take_stale(self) -> None:
        """Running trials whose sweep died: failed (interrupted, not counted), their
        parameters asked again. Stale is a heartbeat more than the grace period old (the
        longest any running trial's sweep declared, so sweeps with other settings never take
        a live one), or, for a trial that never had a heartbeat (an older rltrain, another
        program), a start that long ago."""
        import datetime as dt

        from optuna.exceptions import UpdateFinishedTrialError  # the tune extra
        from optuna.trial import TrialState  # the tune extra: see the module's text

        running = self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if not running:
            return
        self.grace = grace = max([self.heartbeats.grace] + [
            float(mark["grace"]) for t in running
            if isinstance(mark := t.system_attrs.get(HEARTBEAT_ATTR), dict)
            and isinstance(mark.get("grace"), int | float)])
        stale = set(self.heartbeats.stale(self.study_id, grace))
        now = dt.datetime.now()
        for t in running:
            trial_id = self.storage.get_trial_id_from_study_id_trial_number(self.study_id,
                                                                             t.number)
            if trial_id in stale:
                why = f"no heartbeat for more than {grace:g} s"
            elif (HEARTBEAT_ATTR not in t.system_attrs and t.datetime_start is not None
                  and (now - t.datetime_start).total_seconds() > grace):
                why = f"running for more than {grace:g} s without a heartbeat"
            else:
                continue
            try:  # marked first: a finished trial takes no attribute
                self.storage.set_trial_user_attr(trial_id, "interrupted", True)
                self.storage.set_trial_user_attr(
                    trial_id, "error", f"interrupted: {why} (its sweep was stopped or killed)")
                if not self.storage.set_trial_state_values(trial_id, TrialState.FAIL):
                    continue
            except UpdateFinishedTrialError:
                continue  # told by its sweep after all, or taken by another sweep
            self.study.enqueue_trial(t.params, user_attrs={"retry_of": t.number},
                                     skip_if_exists=False)
            log.warning(f"trial {t.number} was left running by a sweep that is gone ({why}): "
                        "marked failed (interrupted); its parameters are tried again")


def _job_dir(ret: JobReturn) -> str:
    with contextlib.suppress(Exception):  # a job whose config lacks it
        if ret.hydra_cfg is not None:
            return str(ret.hydra_cfg.hydra.runtime.output_dir)
    return str(ret.working_dir or "")  # a job that never got its config


def _job_error(run_dir: str) -> str | None:
    try:
        summary = read_json(Path(run_dir) / "summary.json")  # bounded, as every reader's
    except (OSError, ValueError):
        return None
    return summary.get("error") if isinstance(summary, dict) else None


# ---------------------------------------------------------------------- results
def write_trials_csv(path: Path, trials: list[optuna.trial.FrozenTrial]) -> None:
    keys = sorted({k for t in trials for k in t.params})
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["number", "state", "value", "duration_s", *keys, "run_dir", "error"])
        for t in trials:
            duration = t.duration.total_seconds() if t.duration is not None else ""
            value = t.value if t.value is not None else (
                t.intermediate_values[max(t.intermediate_values)]
                if t.intermediate_values else "")
            w.writerow([t.number, t.state.name.lower(), value, duration,
                        *[encode(t.params[k]) if k in t.params else "" for k in keys],
                        t.user_attrs.get("run_dir", ""), t.user_attrs.get("error", "")])


#: the trainer keys that set a run's budget (how long it trains, how it is tested, when it
#: stops): a search shortens them for its trials (an hparams_search file's max_epochs,
#: experiment=smoke, trainer.max_epochs=2 on the command line), which says nothing of the
#: budget to train the tuned settings with
BUDGET = ("max_epochs", "epoch_num_steps", "stop_score", "test_step_num_episodes")


@dataclass(frozen=True)
class Budget:
    """The budget the tuned files carry (:data:`BUDGET`'s keys), and where it comes from."""

    #: trainer key -> value
    values: dict[str, Any]
    #: where the values come from ("the budget rltrain algo=ppo env=cartpole trains with
    #: (tuned/ppo_cartpole.yaml)"); empty when only the trials' own could be had
    source: str
    #: the trials' values of the keys that differ from ``values``
    trials: dict[str, Any]
    #: why the trials' own budget is kept
    failed: str = ""

    def keys(self, values: dict[str, Any]) -> str:
        return " ".join(f"trainer.{k}={encode(v)}" for k, v in values.items())

    def said(self) -> str:
        """The line that says which budget the tuned files carry."""
        if not self.source:
            return (f"warning: the tuned files keep the best trial's budget "
                    f"({self.keys(self.values)}): {self.failed}; set those keys on the "
                    "command line for the budget to train with")
        than = f", not the trials' ({self.keys(self.trials)})" if self.trials else ""
        return (f"the tuned files carry {self.source}: {self.keys(self.values)}{than}; set "
                "those keys on the command line for another")

    def comment(self) -> str:
        """The tuned files' line on their budget (a YAML comment)."""
        if not self.source:
            return f"# budget: the best trial's ({self.failed})\n"
        than = f"; the trials trained {self.keys(self.trials)}" if self.trials else ""
        return f"# budget: {self.source}{than}\n"


def write_tuned(sweep_dir: Path, best: optuna.trial.FrozenTrial, algo: str, env: str,
                study: str, budget: Budget | None = None) -> tuple[Path, Path]:
    """The best trial's settings (its composed algo, trainer and buffer, and any env key the
    search set) as a tuned file and as an experiment file; with ``budget``, its trainer keys
    in place of the trial's (a trial trains a search's short budget)."""
    config = Path(best.user_attrs.get("run_dir", "")) / ".hydra" / "config.yaml"
    cfg = read_yaml(config)  # bounded (rltrain.stored); its StoredDataError is a ValueError
    if not isinstance(cfg, dict):
        raise ValueError(f"{config} holds no config")
    body: dict[str, Any] = {k: cfg[k] for k in ("algo", "trainer", "buffer") if k in cfg}
    if budget is not None and isinstance(body.get("trainer"), dict):
        body["trainer"] = {**body["trainer"], **budget.values}
    env_keys = {k.split(".", 1)[1]: v for k, v in best.params.items() if k.startswith("env.")}
    if env_keys:
        body["env"] = {}
        for dotted in env_keys:
            node, src = body["env"], cfg["env"]
            *parents, leaf = dotted.split(".")
            for p in parents:
                node, src = node.setdefault(p, {}), src[p]
            node[leaf] = src[leaf]
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    params = ", ".join(f"{k}={encode(v)}" for k, v in best.params.items())
    class Dumper(yaml.SafeDumper):  # mappings as blocks, lists in one line: [64, 64]
        pass

    Dumper.add_representer(list, lambda d, v: d.represent_sequence(
        "tag:yaml.org,2002:seq", v, flow_style=True))
    text = yaml.dump(body, Dumper=Dumper, sort_keys=False, default_flow_style=False)
    # the experiment file also picks the trial's algorithm and env (the groups' options, from
    # its .hydra/hydra.yaml) and, for env=gym, the env itself: on its own it trains what the
    # trial trained; the tuned file is picked by the algorithm and env, so it holds no choice
    choices = _trial_choices(config.parent / "hydra.yaml")
    algo_choice, env_choice = choices.get("algo", algo), choices.get("env", env)
    experiment: dict[str, Any] = {"defaults": [{"override /algo": algo_choice},
                                               {"override /env": env_choice}]}
    if env_choice == "gym":
        experiment["env"] = {k: cfg["env"][k] for k in ("id", "kwargs", "imports", "wrappers",
                                                         "max_episode_steps")
                             if k in cfg.get("env", {})}
    head = yaml.dump(experiment, Dumper=Dumper, sort_keys=False, default_flow_style=False)
    said = budget.comment() if budget is not None else ""
    out = []
    for sub, name, extra in (("tuned", f"{algo}_{env}", ""),
                             ("experiment", f"tuned_{algo}_{env}", head)):
        path = sweep_dir / "conf" / sub / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# @package _global_\n# {algo} on {env}: the best trial ({best.number}, "
                        f"score {best.value:.6g}) of the Optuna study {study!r}, {stamp}\n"
                        f"# searched: {params}\n{said}{extra}{text}", encoding="utf-8")
        out.append(path)
    return out[0], out[1]


def _trial_choices(path: Path) -> dict[str, str]:
    """The config groups' options a trial was composed with (``hydra.runtime.choices``)."""
    try:
        node = OmegaConf.create(read_yaml(path))
        choices = OmegaConf.select(node, "hydra.runtime.choices", default=None)
    except Exception:  # noqa: BLE001 - a trial without Hydra's record: the config's names
        return {}
    if choices is None:
        return {}
    return {str(k): str(v) for k, v in OmegaConf.to_container(choices).items()  # type: ignore[union-attr]
            if v is not None}


def write_plots(study: optuna.Study, sweep_dir: Path) -> list[str]:
    """Optuna's optimisation history and parameter importances as PNG files (needs
    matplotlib; importances need two complete trials)."""
    try:  # the tune extra; 0.8 s with Optuna's plots, paid at the end of a sweep only
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.figure import Figure
        from optuna.visualization import matplotlib as ov
    except ImportError:
        log.warning("no plots: matplotlib is not installed (pip install -e \".[tune]\")")
        return []
    written = []
    for name, plot in (("optimization_history.png", ov.plot_optimization_history),
                       ("param_importances.png", ov.plot_param_importances)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Optuna marks its matplotlib plots experimental
                ax = plot(study)
            fig = ax.figure
            assert isinstance(fig, Figure)  # each of Optuna's plots makes a figure of its own
            fig.set_size_inches(8, 5)
            fig.tight_layout()
            fig.savefig(sweep_dir / name, dpi=100)
            plt.close(fig)
            written.append(name)
        except Exception as e:  # noqa: BLE001 - e.g. importances of a one-trial study
            log.warning(f"{name} not drawn: {type(e).__name__}: {str(e).splitlines()[0]}")
    return written
