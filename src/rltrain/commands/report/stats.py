"""The statistics: final scores, learning curves, interval estimates, normalisation.

Every confidence interval is a 95% percentile interval from rliable's stratified bootstrap
over seeds (``rliable.library.get_interval_estimates``), with rliable's metrics. rliable's
bootstraps draw from numpy's global generator (``np.random.choice``, whatever
``random_state`` says), so :func:`seeded` seeds it for each estimate and puts it back after:
the same runs give the same report.

rliable is imported where it is used: ``rliable.library`` takes 1.2 s to import (scipy, arch,
pandas) and ``rliable.metrics`` 0.6 s, which ``rltrain-report --help`` (it imports this module
for :class:`Reference`) should not pay; and it belongs to the ``report`` extra, whose absence
the command reports in one line before it computes anything.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TypeGuard

import numpy as np

from rltrain.commands.report.runs import Group, Run, natural

#: the metrics of a final-score table, in order
METRICS = ("mean", "median", "IQM", "optimality gap")
#: points of the common env-step grid of a task's learning curves
GRID_POINTS = 200
SEED = 0


@dataclasses.dataclass(frozen=True)
class Reference:
    """What a task's scores are normalised by: ``(score - low) / (high - low)``, so that
    ``high`` (the reward threshold, or the user's ``--reference``) maps to 1."""

    high: float
    low: float = 0.0
    source: str = "reward threshold"

    def normalise(self, scores: np.ndarray) -> np.ndarray:
        return (scores - self.low) / (self.high - self.low)

    def __str__(self) -> str:
        span = f"{self.low:g} to {self.high:g}" if self.low else f"{self.high:g}"
        return f"{span} ({self.source})"


@dataclasses.dataclass
class Estimate:
    """Point estimates of some metrics and their 95% CIs (``ci[0]`` low, ``ci[1]`` high)."""

    point: np.ndarray
    ci: np.ndarray


@dataclasses.dataclass
class Curve:
    """A group's mean test return over seeds on its task's grid, with a 95% CI band."""

    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    #: seeds that stopped early at the threshold and are carried forward with their last score
    carried: int
    #: seeds that end before the group's last env step without having stopped at the threshold
    #: (interrupted, still running): the curve past their end averages fewer seeds
    short: int


@contextlib.contextmanager
def seeded(seed: int = SEED) -> Iterator[None]:
    """Seed numpy's global generator (rliable's bootstraps draw from it), restore it after."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        with warnings.catch_warnings():
            # all-NaN columns of a curve resample (seeds that had ended) are NaN, as meant
            warnings.simplefilter("ignore", RuntimeWarning)
            yield
    finally:
        np.random.set_state(state)


def final_scores(runs: Sequence[Run], last: int) -> np.ndarray:
    """Each run's final score (the mean of its last ``last`` test returns), in order."""
    return np.array([r.final_score(last) for r in runs], dtype=float)


def score_metrics(gamma: float | None) -> Callable[[np.ndarray], np.ndarray]:
    """The table's metrics of an ``(n_seeds, 1)`` matrix of one task's final scores: mean,
    median (over seeds: rliable's median is over tasks, the mean for one task), IQM, and the
    optimality gap below ``gamma`` (the reference score, in the scores' own units)."""
    from rliable import metrics  # 0.6 s to import: see the module's text

    def compute(scores: np.ndarray) -> np.ndarray:
        gap = metrics.aggregate_optimality_gap(scores, gamma) if gamma is not None else np.nan
        return np.array([metrics.aggregate_mean(scores), np.median(scores),
                         metrics.aggregate_iqm(scores), gap])

    return compute


def aggregate_metrics(scores: np.ndarray) -> np.ndarray:
    """rliable's aggregates of an ``(n_runs, n_tasks)`` matrix of normalised scores."""
    from rliable import metrics  # 0.6 s to import: see the module's text

    return np.array([metrics.aggregate_mean(scores), metrics.aggregate_median(scores),
                     metrics.aggregate_iqm(scores), metrics.aggregate_optimality_gap(scores)])


def estimates(score_dict: Mapping[str, np.ndarray | tuple[np.ndarray, np.ndarray]],
              func: Callable[..., np.ndarray | float], reps: int) -> dict[str, Estimate]:
    """``get_interval_estimates`` on ``score_dict`` (name -> scores, or a pair of them) for
    the metrics ``func`` computes from one score matrix (or a pair)."""
    from rliable import library  # 1.2 s to import: see the module's text

    with seeded():
        points, cis = library.get_interval_estimates(score_dict, func, reps=reps)
    return {k: Estimate(np.atleast_1d(points[k]), np.asarray(cis[k]).reshape(2, -1))
            for k in score_dict}


def task_table(groups: Sequence[Group], last: int, gamma: float | None, reps: int
               ) -> dict[str, Estimate]:
    """Mean, median, IQM and optimality gap of each group's final scores, with 95% CIs."""
    scores = {g.name: final_scores(g.usable, last)[:, None] for g in groups}
    return estimates(scores, score_metrics(gamma), reps)


def probability_of_improvement(scores_x: np.ndarray, scores_y: np.ndarray) -> float:
    """rliable's ``metrics.probability_of_improvement`` (P(X > Y) per task, ties counting
    half, averaged over tasks), in numpy: rliable's calls scipy's ``mannwhitneyu``, about a
    millisecond a call, once per task per bootstrap resample, which made a pair of groups cost
    seconds; this gives the same numbers (the tests check it against rliable's)."""
    x, y = scores_x[:, None, :], scores_y[None, :, :]
    return float(np.mean(np.mean(x > y, axis=(0, 1)) + 0.5 * np.mean(x == y, axis=(0, 1))))


def improvement(groups: Sequence[Group], last: int, reps: int
                ) -> list[tuple[str, str, Estimate]]:
    """P(X > Y) for each pair of groups (rliable's probability of improvement: the
    Mann-Whitney U statistic over seeds, over the number of pairs), with its 95% CI."""
    pairs = list(itertools.combinations(groups, 2))
    if not pairs:
        return []
    scores = {f"{x.name} vs {y.name}": (final_scores(x.usable, last)[:, None],
                                        final_scores(y.usable, last)[:, None])
              for x, y in pairs}
    found = estimates(scores, probability_of_improvement, reps)
    return [(x.name, y.name, found[f"{x.name} vs {y.name}"]) for x, y in pairs]


def grid(groups: Sequence[Group], points: int = GRID_POINTS) -> np.ndarray:
    """The env steps where a task's curves are compared: its first test to its last one."""
    runs = [r for g in groups for r in g.usable]
    start = min(r.steps[0] for r in runs)
    end = max(r.steps[-1] for r in runs)
    return np.linspace(start, end, points) if end > start else np.array([start])


def resample(run: Run, at: np.ndarray) -> np.ndarray:
    """A run's test returns interpolated at env steps ``at``: NaN outside the steps it was
    tested at, except that a run which stopped early at the threshold keeps its last score."""
    steps, scores = np.asarray(run.steps), np.asarray(run.scores)
    values = np.interp(at, steps, scores)
    values[at < steps[0]] = np.nan
    if not run.stopped_early:
        values[at > steps[-1]] = np.nan
    return values


def curve(group: Group, at: np.ndarray, reps: int) -> Curve:
    """The mean over seeds of ``group``'s curves at ``at``, with a pointwise 95% CI from
    resampling whole seeds.

    rliable bootstraps each cell of a ``(runs, tasks, steps)`` array on its own, which gives a
    band that jitters from step to step; here it resamples seed numbers (an ``(n_seeds, 1)``
    array: one task) and each resampled seed brings its whole curve."""
    runs = group.usable
    curves = np.stack([resample(r, at) for r in runs])
    seeds = np.arange(len(runs), dtype=float)[:, None]
    found = estimates({"curve": seeds},
                      lambda s: np.nanmean(curves[s[:, 0].astype(int)], axis=0), reps)
    est = found["curve"]
    end = max(r.steps[-1] for r in runs)
    carried = sum(r.stopped_early and r.steps[-1] < at[-1] for r in runs)
    short = sum(not r.stopped_early and r.steps[-1] < end for r in runs)
    return Curve(est.point, est.ci[0], est.ci[1], carried, short)


def reference_for(runs: Sequence[Run], given: Reference | None) -> Reference | None:
    """The user's reference for a task, else the reward threshold its runs recorded (the most
    common one, should they differ)."""
    if given is not None:
        return given
    found = [r.threshold for r in runs if r.threshold is not None]
    if not found:
        return None
    return Reference(max(set(found), key=found.count))


def normalisable(reference: Reference | None) -> TypeGuard[Reference]:
    """Whether scores can be put on one scale with other tasks: a reference of a positive
    span (dividing by a threshold of zero or below would turn the order of scores around)."""
    return reference is not None and reference.high > reference.low


def cross_task_scores(tasks: dict[str, list[Group]], references: dict[str, Reference],
                      last: int) -> tuple[dict[str, np.ndarray], list[str]]:
    """Per group name, an ``(n_runs, n_tasks)`` matrix of normalised final scores over the
    normalisable tasks, for the names that have runs on every one of them; and notes on what
    was left out or cut (a matrix has as many runs per task as the task with fewest)."""
    names = sorted({g.name for groups in tasks.values() for g in groups if g.usable})
    matrices, notes = {}, []
    for name in names:
        columns = []
        for task, groups in tasks.items():
            group = next((g for g in groups if g.name == name and g.usable), None)
            if group is not None:
                runs = sorted(group.usable, key=lambda r: natural(r.seed))
                columns.append(references[task].normalise(final_scores(runs, last)))
        if len(columns) < len(tasks):
            notes.append(f"{name}: runs on {len(columns)} of the {len(tasks)} normalised tasks "
                         "only, so it is left out of the cross-task aggregates")
            continue
        n = min(len(c) for c in columns)
        if any(len(c) > n for c in columns):
            notes.append(f"{name}: the first {n} seeds of each task are used across tasks "
                         "(a task has only that many)")
        matrices[name] = np.stack([c[:n] for c in columns], axis=1)
    return matrices, notes


def profiles(matrices: dict[str, np.ndarray], reps: int
             ) -> tuple[np.ndarray, dict[str, Estimate]]:
    """rliable's performance profiles (the fraction of runs above each normalised score tau)
    with their 95% CIs, at taus spanning the scores and 1 (the reference)."""
    from rliable import library  # 1.2 s to import: see the module's text

    every = np.concatenate([m.ravel() for m in matrices.values()])
    taus = np.linspace(min(0.0, every.min()), max(1.0, every.max()) * 1.05, 101)
    with seeded():
        points, cis = library.create_performance_profile(matrices, taus, reps=reps)
    return taus, {k: Estimate(points[k], cis[k]) for k in matrices}
