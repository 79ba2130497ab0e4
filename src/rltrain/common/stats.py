"""Stats records: plain frozen dataclasses, flattened generically for the loggers."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Episodes:
    """Raw result of a collection: counts plus the returns and lengths of finished episodes."""

    n_steps: int
    n_transitions: int
    returns: np.ndarray
    lengths: np.ndarray
    time: float
    #: of the episodes, how many a test step's cap cut (trainer.test_step_max_episode_steps)
    n_cut: int = 0

    @staticmethod
    def merge(parts: Iterable[Episodes]) -> Episodes:
        parts = list(parts)
        return Episodes(
            n_steps=sum(p.n_steps for p in parts),
            n_transitions=sum(p.n_transitions for p in parts),
            returns=np.concatenate([p.returns for p in parts]) if parts else np.zeros(0),
            lengths=np.concatenate([p.lengths for p in parts]) if parts else np.zeros(0),
            time=sum(p.time for p in parts),
            n_cut=sum(p.n_cut for p in parts),
        )

    def stats(self) -> CollectStats:
        n = len(self.returns)
        return CollectStats(
            n_steps=self.n_steps,
            n_episodes=n,
            return_mean=float(np.mean(self.returns)) if n else None,
            return_std=float(np.std(self.returns)) if n else None,
            return_min=float(np.min(self.returns)) if n else None,
            return_max=float(np.max(self.returns)) if n else None,
            length_mean=float(np.mean(self.lengths)) if n else None,
            collect_steps_per_s=self.n_steps / self.time if self.time > 0 else None,
            n_cut=self.n_cut,
        )


@dataclass(frozen=True)
class CollectStats:
    """Collection (train) or test statistics; episode fields are None when no episode ended."""

    n_steps: int
    n_episodes: int
    return_mean: float | None
    return_std: float | None
    return_min: float | None
    return_max: float | None
    length_mean: float | None
    #: env steps per second while collecting (not the run's rate: see EpochStats.steps_per_s)
    collect_steps_per_s: float | None
    #: episodes cut at trainer.test_step_max_episode_steps (a test step's; counted as they
    #: stood, in the returns above)
    n_cut: int = 0


@dataclass(frozen=True)
class Best:
    score: float | None
    epoch: int | None


@dataclass(frozen=True)
class Timing:
    """Seconds spent in each phase of an epoch."""

    collect: float = 0.0
    update: float = 0.0
    test: float = 0.0
    save: float = 0.0


@dataclass(frozen=True)
class EpochStats:
    epoch: int
    env_step: int
    gradient_step: int
    #: seconds since the trainer started
    time: float
    train: CollectStats
    test: CollectStats
    #: the algorithm's training stats, averaged over the epoch's update steps
    update: Mapping[str, float]
    best: Best
    timing: Timing
    #: training steps (collection + update) run in this epoch
    training_steps: int = 0
    #: the run's real rate: env steps of the epoch over its wall time (collecting, updating
    #: and testing), in this process (a resumed epoch counts from the resume)
    steps_per_s: float | None = None


@dataclass(frozen=True)
class InfoStats:
    """What a finished (or interrupted) run reports; written to summary.json."""

    best_score: float | None
    best_epoch: int | None
    solved: bool
    stopped_early: bool
    interrupted: bool
    epochs: int
    env_step: int
    gradient_step: int
    wall_time: float
    reward_threshold: float | None
    timing: Timing = field(default_factory=Timing)
    #: the signal that interrupted the run (1 SIGHUP, 2 SIGINT, 15 SIGTERM), if any
    interrupt_signal: int | None = None
    #: completed (every epoch, or stopped early at the stop score), interrupted, failed, or
    #: pruned (a tuning study's pruner stopped it after an epoch)
    status: str = "completed"
    #: why the run failed (status failed), in one line
    error: str | None = None
    #: where the run was when it failed, e.g. "epoch 3 (env step 4,096)"
    failed_at: str | None = None


def mean_stats(records: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Average each field of a list of records (the update stats, as dicts) over the records
    that hold it: an update leaves out what it did not measure (the actor's loss on a step
    that updates only the critics), so a stat is the mean of its real measurements."""
    names = dict.fromkeys(n for r in records for n in r)  # in order of first appearance
    return {n: float(np.mean([r[n] for r in records if n in r])) for n in names}


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Flatten nested dataclasses and mappings into ``{"a/b": value}``."""
    items: Iterable[tuple[Any, Any]]
    if dataclasses.is_dataclass(obj):
        items = ((f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj))
    elif isinstance(obj, Mapping):
        items = obj.items()
    else:
        return {prefix: obj}
    out: dict[str, Any] = {}
    for key, value in items:
        out.update(flatten(value, f"{prefix}/{key}" if prefix else str(key)))
    return out


def unflatten(record: Mapping[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`flatten`, used for the nested JSON lines."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        node = out
        *parents, leaf = key.split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out
