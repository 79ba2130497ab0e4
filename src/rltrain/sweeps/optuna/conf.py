"""The Optuna sweeper's settings (``hydra.sweeper.*``): the structured config registered as
``hydra/sweeper=optuna``, the checks a sweep makes of it before it starts, and
:class:`SweepError`, the one error of a sweep that cannot start.

The bottom of the package: imported by Hydra's plugin discovery at every start and by
``rltrain.commands.command_line`` (which checks ``hydra.sweeper.*`` keys before Hydra composes), so
it imports neither Optuna nor torch; of rltrain, only ``rltrain.config.schemas``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore

from rltrain.config.schemas import OBJECTIVES

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
    #: a trial's score: auc, last_k, best or final (rltrain.assembly.optuna_trial)
    objective: str = "auc"
    last_k: int = 3
    #: seconds between two heartbeats of each trial this sweep runs (rltrain.sweeps.optuna.
    #: shared): recorded by the sweep's own process for the whole trial, whichever launcher
    #: runs it
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


def check_conf(c: OptunaSweeperConf) -> None:
    """The settings' values, each named in the first problem found (:class:`SweepError`)."""
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
