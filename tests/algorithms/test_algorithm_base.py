"""The interface every algorithm keeps (rltrain.algorithms.base): an update reports what it
measured and how many gradient steps it took, keeps nothing between calls but the learnt
state, and the training state restores exactly; off-policy algorithms make their own batches."""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any

import numpy as np
import pytest
import torch

from algo_helpers import (
    ALGORITHM_SPACE_IDS,
    ALGORITHM_SPACES,
    DISC,
    OBS_DIM,
    assert_same_report,
    build,
    filled_buffer,
    progress,
    stats_dict,
    update,
)
from rltrain.algorithms import ALGORITHMS, Algorithm, TDAlgorithm, UpdateReport
from rltrain.data.reading import read
from rltrain.data.transforms.nstep import NStepReturns

#: the algorithms that do not learn by temporal differences
NOT_TD = ("bc", "ppo", "ppo_lstm", "a2c", "reinforce")
TD = [(n, i) for n, i in ALGORITHM_SPACES if n not in NOT_TD]
TD_IDS = [id_ for (n, _), id_ in zip(ALGORITHM_SPACES, ALGORITHM_SPACE_IDS, strict=True)
          if n not in NOT_TD]


def delayed(name: str) -> dict[str, Any]:
    """Settings under which an update may leave stats unmeasured and targets alone: the actor
    every second step, the targets copied every second step."""
    fields = {f.name for f in dataclasses.fields(ALGORITHMS[name].config)}
    return {k: 2 for k in ("policy_delay", "target_update_interval",
                           "discrete_target_update_interval") if k in fields}


@pytest.mark.parametrize(("name", "info"), ALGORITHM_SPACES, ids=ALGORITHM_SPACE_IDS)
def test_update_reports_its_stats_and_one_gradient_step(name, info):
    """An off-policy update is one gradient step: each optimiser steps at most once, and
    gradient_steps says 1 (PPO's count is in test_ppo.py). On a step that updates everything
    every stat the console shows is measured, a finite number."""
    algorithm = build(name, info)
    optimizers = algorithm.optimizers()
    before = {k: o.steps for k, o in optimizers.items()}
    report = update(algorithm, info, seed=0, step=0)
    assert isinstance(report, UpdateReport)
    stats = stats_dict(report)
    spec = ALGORITHMS[name]
    assert {key for key, _ in spec.console} <= stats.keys()
    assert all(v is not None and math.isfinite(float(v)) for v in stats.values()), stats
    steps = {k: o.steps - before[k] for k, o in optimizers.items()}
    if "onpolicy" in spec.trainers:
        assert steps == {"optim": report.gradient_steps}
    else:
        assert report.gradient_steps == 1
        assert set(steps.values()) <= {0, 1} and 1 in steps.values(), steps


@pytest.mark.parametrize(("name", "info"), ALGORITHM_SPACES, ids=ALGORITHM_SPACE_IDS)
def test_the_training_state_restores_exactly(name, info):
    """A copy built from another seed, given the training state, acts exactly as the original;
    the deployable policy acts in the env's space."""
    algorithm = build(name, info)
    update(algorithm, info, seed=0, step=0)
    obs = np.random.default_rng(0).normal(size=(5, OBS_DIM)).astype(np.float32)
    act = algorithm.act(obs, deterministic=True, progress=progress(0))
    assert act.shape == (5, *info.action_shape)
    with torch.no_grad():
        env_act = algorithm.deployable()(torch.from_numpy(obs)).numpy()
    if info.discrete:
        np.testing.assert_array_equal(env_act, act)
    else:
        assert (env_act >= info.action_low).all() and (env_act <= info.action_high).all()
    other = build(name, info, seed=1)
    other.load_training_state(copy.deepcopy(algorithm.training_state()))
    np.testing.assert_array_equal(other.act(obs, deterministic=True, progress=progress(0)), act)


@pytest.mark.parametrize(("name", "info"), ALGORITHM_SPACES, ids=ALGORITHM_SPACE_IDS)
def test_an_update_depends_on_the_learnt_state_and_its_arguments_only(name, info):
    """Copy A updates twice. Copy B (other weights) updates on other data, ending with a step
    that measures everything, then takes A's training state after its first update and the
    same RNG state: its update on A's second batch reports exactly what A's did. A stat kept
    from an earlier call (the actor's loss of the last step that had one) would differ."""
    fields = delayed(name)
    torch.manual_seed(0)
    a = build(name, info, seed=0, **fields)
    update(a, info, seed=10, step=0)
    state = copy.deepcopy(a.training_state())
    rng = torch.get_rng_state()
    second = update(a, info, seed=11, step=1)

    torch.manual_seed(1)
    b = build(name, info, seed=1, **fields)
    for step in range(3):
        update(b, info, seed=20 + step, step=step)
    b.load_training_state(state)
    torch.set_rng_state(rng)
    assert_same_report(update(b, info, seed=11, step=1), second)


def _held(value: Any) -> Any:
    """What an attribute holds: containers copied (their items held), anything else itself."""
    if isinstance(value, dict):
        return {k: _held(v) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_held(v) for v in value)
    return value


def _same(a: Any, b: Any) -> bool:
    """Plain values compare by value, containers item by item, anything else (tensors,
    modules, optimisers: learnt state, changed in place) by identity."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if type(a) in (list, tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, (bool, int, float, str, type(None))):
        return type(a) is type(b) and (a == b or (a != a and b != b))
    return a is b


def attributes(algorithm: Algorithm) -> dict[tuple[str, str], Any]:
    """Every attribute of the algorithm and of each of its modules."""
    return {(name, key): _held(value) for name, module in algorithm.named_modules()
            for key, value in vars(module).items()}


@pytest.mark.parametrize(("name", "info"), ALGORITHM_SPACES, ids=ALGORITHM_SPACE_IDS)
def test_updates_keep_no_state_in_attributes(name, info):
    """Across updates, no attribute of the algorithm or its modules is added, dropped or
    replaced, and no plain value (a stat, a counter, a flag) changes; parameters, buffers and
    optimisers are the same objects, changed in place."""
    algorithm = build(name, info, **delayed(name))
    before = attributes(algorithm)
    assert any(key.startswith("_") for _, key in before)  # nn.Module's own, at least
    for step in range(3):
        update(algorithm, info, seed=step, step=step)
        after = attributes(algorithm)
        assert after.keys() == before.keys(), after.keys() ^ before.keys()
        changed = [k for k in before if not _same(before[k], after[k])]
        assert changed == [], (step, changed)


def test_the_attribute_check_sees_a_stat_kept_between_calls():
    """The check above is not blind: a hidden stat set by an update is caught."""
    algorithm = build("dqn", DISC)
    before = attributes(algorithm)
    algorithm._last_loss = 0.5
    assert attributes(algorithm).keys() != before.keys()
    before = attributes(algorithm)
    algorithm._last_loss = 0.25
    after = attributes(algorithm)
    assert not _same(before[("", "_last_loss")], after[("", "_last_loss")])


# --------------------------------------------------------------------------- batches
@pytest.mark.parametrize(("name", "info"), TD, ids=TD_IDS)
def test_td_algorithms_declare_their_own_n_step_returns(name, info):
    """A TD learner declares n-step returns with its own n_step and gamma: the batch the
    read path makes with its transforms carries them."""
    algorithm = build(name, info, n_step=3, gamma=0.9)
    buffer = filled_buffer(info)
    lanes, positions = np.array([0, 1, 0, 1, 0]), np.array([0, 3, 5, 9, 11])
    got = read(buffer, lanes, positions, algorithm.transforms())
    want = read(buffer, lanes, positions, [NStepReturns(3, 0.9)])
    for f in dataclasses.fields(got):
        np.testing.assert_array_equal(getattr(got, f.name), getattr(want, f.name), f.name)
    one_step = read(buffer, lanes, positions, [NStepReturns(1, 0.9)])
    assert not np.array_equal(got.rew, one_step.rew)  # the n_step setting was used


@pytest.mark.parametrize(("name", "info"), ALGORITHM_SPACES, ids=ALGORITHM_SPACE_IDS)
def test_which_algorithms_learn_by_td(name, info):
    assert isinstance(build(name, info), TDAlgorithm) == (name not in NOT_TD)
