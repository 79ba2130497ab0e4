"""Small shared pieces of the algorithm tests: the spaces they build on, random batches and
rollouts, a one-step offline problem, and comparisons of update reports."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch

from rltrain.algorithms import ALGORITHMS, CONTINUOUS, DISCRETE, Algorithm, UpdateReport
from rltrain.common.types import Progress, SpaceInfo
from rltrain.data.batch import Batch, Rollout
from rltrain.data.reading import transformed
from rltrain.data.storage import ReplayBuffer

CPU = torch.device("cpu")
OBS_DIM = 3
#: two action dimensions with uneven bounds (the deployable policy must scale into them)
BOX = SpaceInfo((OBS_DIM,), None, (2,), np.array([-2, -1], np.float32),
                np.array([2, 3], np.float32), None, "test")
BOX1 = SpaceInfo((OBS_DIM,), None, (1,), np.array([-1], np.float32), np.array([1], np.float32),
                 None, "test")
DISC = SpaceInfo((OBS_DIM,), 3, (), None, None, None, "test")
#: small networks: fast, and enough for the one-step problems below
SMALL = {"hidden_sizes": [32, 32]}


def progress(step: int, steps: int = 1) -> Progress:
    """Gradient step ``step`` of ``steps`` planned."""
    return Progress(0, step, step / steps)


def make_batch(obs: np.ndarray, act: np.ndarray, rew: np.ndarray | None = None,
               discount: float = 0.99, seed: int = 0) -> Batch:
    """A batch of the given states and actions; rewards (unless given) and next states are
    standard normal."""
    n = len(obs)
    rng = np.random.default_rng(seed)
    return Batch(obs=obs.astype(np.float32), act=act,
                 rew=(rng.normal(size=n) if rew is None else rew).astype(np.float32),
                 next_obs=rng.normal(size=obs.shape).astype(np.float32),
                 discount=np.full(n, discount, np.float32), lanes=np.zeros(n, np.int64),
                 positions=np.arange(n))


def random_actions(info: SpaceInfo, shape: tuple[int, ...], rng: np.random.Generator
                   ) -> np.ndarray:
    """Actions of ``info``'s space (continuous ones in [-1, 1]) for a batch of ``shape``."""
    if info.discrete:
        return rng.integers(info.action_dim, size=shape)
    return rng.uniform(-1, 1, size=(*shape, *info.action_shape)).astype(np.float32)


def random_batch(info: SpaceInfo, n: int = 32, seed: int = 0) -> Batch:
    """Standard normal states, uniform actions, standard normal rewards, discount 0.99."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, *info.obs_shape))
    return make_batch(obs, random_actions(info, (n,), rng), seed=seed + 1)


def random_rollout(info: SpaceInfo, lanes: int = 2, steps: int = 16, seed: int = 0,
                   invalid: int = 0) -> Rollout:
    """A rollout of random transitions, episodes ending now and then; the last ``invalid``
    slots of lane 0 hold no transition."""
    rng = np.random.default_rng(seed)
    shape = (lanes, steps)
    terminated = rng.random(shape) < 0.1
    truncated = ~terminated & (rng.random(shape) < 0.05)
    valid = np.ones(shape, bool)
    if invalid:
        valid[0, steps - invalid:] = False
    return Rollout(obs=rng.normal(size=(*shape, *info.obs_shape)).astype(np.float32),
                   act=random_actions(info, shape, rng),
                   rew=rng.normal(size=shape).astype(np.float32),
                   next_obs=rng.normal(size=(*shape, *info.obs_shape)).astype(np.float32),
                   terminated=terminated, truncated=truncated, valid=valid)


def learnable(algorithm: Algorithm, rollout: Rollout) -> Rollout:
    """``rollout`` as the on-policy trainer's read path hands it to ``algorithm``'s update
    (rltrain.data.reading.transformed): with what the transforms it declares compute (GAE, by
    its critic as it is now). A rollout's transforms read its record alone: the storage
    beside it is an empty one of its shapes. The fields the algorithm declares
    (``AlgoSpec.stored``) that ``rollout`` lacks are zeros, as a random rollout has no
    acting time to take them from (a recurrent policy's state: every lane starts afresh)."""
    lanes, t = rollout.valid.shape
    declared = ALGORITHMS[algorithm.cfg.name].stored_fields(algorithm.cfg, algorithm.info)
    missing = {f.name: np.zeros((lanes, t, *f.shape), f.dtype) for f in declared
               if f.name not in rollout.fields}
    if missing:
        rollout = dataclasses.replace(rollout, fields={**rollout.fields, **missing})
    storage = ReplayBuffer(lanes, max(t, 1), rollout.obs.shape[2:], rollout.act.shape[2:],
                           rollout.act.dtype, obs_dtype=rollout.obs.dtype, circular=False)
    return transformed(rollout, algorithm.transforms(), storage)


def kind(info: SpaceInfo) -> str:
    return DISCRETE if info.discrete else CONTINUOUS


#: every registered algorithm on every action space it accepts, as pytest parameters
ALGORITHM_SPACES = [(name, info) for name in sorted(ALGORITHMS) for info in (BOX, DISC)
                    if kind(info) in ALGORITHMS[name].actions]
ALGORITHM_SPACE_IDS = [f"{name}-{kind(info)}" for name, info in ALGORITHM_SPACES]


def build(name: str, info: SpaceInfo, seed: int = 0, **fields: Any) -> Algorithm:
    """The registered algorithm ``name``, small, built as the composition root builds it."""
    spec = ALGORITHMS[name]
    return spec.build(spec.config(**{**SMALL, **fields}), info, CPU, seed)


def update(algorithm: Algorithm, info: SpaceInfo, seed: int, step: int) -> UpdateReport:
    """One update on random data: a rollout (on-policy) or a batch, at gradient step
    ``step``."""
    if "onpolicy" in ALGORITHMS[algorithm.cfg.name].trainers:
        return algorithm.update(learnable(algorithm, random_rollout(info, seed=seed)),
                                batch_size=8, repetitions=2, progress=progress(step, 10))
    return algorithm.update(random_batch(info, seed=seed), progress=progress(step, 10))


def stats_dict(report: UpdateReport) -> dict[str, Any]:
    return dataclasses.asdict(report.stats)


def assert_same_report(a: UpdateReport, b: UpdateReport) -> None:
    """Equal gradient steps and stats, value for value (None where not measured; NaN equal to
    NaN)."""
    assert a.gradient_steps == b.gradient_steps
    assert type(a.stats) is type(b.stats)
    sa, sb = stats_dict(a), stats_dict(b)
    for key, value in sa.items():
        other = sb[key]
        same = (value is None and other is None) or (
            value is not None and other is not None
            and (value == other or (math.isnan(value) and math.isnan(other))))
        assert same, (key, value, other)


def bandit_learns(algo: Algorithm, info: SpaceInfo, steps: int, seed: int) -> np.ndarray:
    """Train on a one-step dataset (every transition terminal): continuous, actions -0.5
    (reward 0) and 0.5 (reward 1); discrete, actions 0 (reward 0) and 1 (reward 1) and never 2.
    Returns the deterministic actions at fresh states."""
    rng = np.random.default_rng(seed)
    n = 512
    obs = rng.normal(size=(n, OBS_DIM)).astype(np.float32)
    good = rng.random(n) < 0.5
    if info.discrete:
        act = good.astype(np.int64)
    else:
        act = np.where(good, 0.5, -0.5).astype(np.float32)[:, None]
    rew = good.astype(np.float32)
    for step in range(steps):
        idx = rng.integers(n, size=64)
        algo.update(make_batch(obs[idx], act[idx], rew=rew[idx], discount=0.0, seed=step),
                    progress=progress(step, steps))
    test_obs = rng.normal(size=(128, OBS_DIM)).astype(np.float32)
    return algo.act(test_obs, deterministic=True, progress=progress(steps, steps))


def filled_buffer(info: SpaceInfo, lanes: int = 2, steps: int = 12, seed: int = 0
                  ) -> ReplayBuffer:
    """A replay buffer of random transitions, episodes ending now and then."""
    rng = np.random.default_rng(seed)
    buffer = ReplayBuffer(lanes, 32, info.obs_shape, info.action_shape,
                          np.int64 if info.discrete else np.float32)
    obs = rng.normal(size=(lanes, *info.obs_shape)).astype(np.float32)
    for t in range(steps):
        next_obs = rng.normal(size=obs.shape).astype(np.float32)
        act = random_actions(info, (lanes,), rng)
        terminated = rng.random(lanes) < 0.2
        truncated = ~terminated & ((rng.random(lanes) < 0.1) | (t == 5))
        buffer.add(obs, act, rng.normal(size=lanes).astype(np.float32), next_obs, terminated,
                   truncated)
        obs = next_obs
    return buffer
