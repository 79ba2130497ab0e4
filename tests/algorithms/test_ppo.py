"""PPO (rltrain.algorithms.ppo): its acting path, and the gradient steps an update reports,
which the on-policy trainer counts (its actors' maths is tested in test_nets.py)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

from algo_helpers import BOX, CPU, DISC, learnable, progress, random_rollout
from conftest import TESTS
from rltrain.algorithms import ALGORITHMS, UpdateReport
from rltrain.algorithms.ppo import PPO, PPOConfig
from rltrain.assembly.build import build_parts, build_trainer
from rltrain.assembly.checked_config import settings
from rltrain.assembly.registered_schemas import register_configs
from rltrain.common.types import Progress, SpaceInfo
from rltrain.data.batch import Rollout
from rltrain.data.reading import rollout_record
from rltrain.data.transforms.gae import gae
from rltrain.trainers import OnPolicyTrainer


def test_act_takes_float64_and_reversed_observations():
    """The per-step tensor fast path falls back for arrays torch cannot share (negative
    strides) and converts dtypes; the actions equal those for a plain float32 copy."""
    torch.manual_seed(5)
    info = SpaceInfo((3,), 4, (), None, None, None, "x")
    ppo = PPO(PPOConfig(), info, CPU, seed=0)
    obs = np.random.default_rng(0).normal(size=(6, 3))[::-1]  # float64, negative stride
    got = ppo.act(obs, deterministic=True, progress=Progress(0, 0, 0.0))
    want = ppo.act(np.ascontiguousarray(obs, np.float32), deterministic=True,
                   progress=Progress(0, 0, 0.0))
    np.testing.assert_array_equal(got, want)
    assert got.shape == (6,)


@pytest.mark.parametrize("info", [DISC, BOX], ids=["discrete", "box"])
@pytest.mark.parametrize(("batch_size", "repetitions", "minibatches"), [
    (16, 3, 4),  # 59 transitions: 16 + 16 + 16 + 11
    (None, 2, 1),  # the whole rollout at once
    (100, 1, 1),  # a minibatch larger than the rollout is the rollout
    (59, 2, 1),
    (10, 1, 6),
])
def test_update_reports_repetitions_times_minibatches(info, batch_size, repetitions,
                                                      minibatches):
    """An update of a rollout of 59 valid transitions (5 of its 64 slots empty) takes one
    optimiser step per minibatch of each repetition, and reports exactly that."""
    torch.manual_seed(0)
    ppo = PPO(PPOConfig(hidden_sizes=[16]), info, CPU, seed=0)
    rollout = random_rollout(info, lanes=2, steps=32, invalid=5)
    assert rollout.num_transitions == 59
    before = ppo.optim.steps
    report = ppo.update(learnable(ppo, rollout), batch_size=batch_size,
                        repetitions=repetitions, progress=progress(0))
    assert isinstance(report, UpdateReport)
    assert report.gradient_steps == repetitions * minibatches == ppo.optim.steps - before


def test_update_reports_the_annealed_learning_rate():
    ppo = PPO(PPOConfig(hidden_sizes=[16], lr=1e-3), DISC, CPU, seed=0)
    stats = ppo.update(learnable(ppo, random_rollout(DISC)), batch_size=8, repetitions=1,
                       progress=Progress(0, 0, 0.25)).stats
    assert stats.lr == pytest.approx(7.5e-4) and ppo.optim.lr == pytest.approx(7.5e-4)
    fixed = PPO(PPOConfig(hidden_sizes=[16], lr=1e-3, lr_annealing=False), DISC, CPU, seed=0)
    assert fixed.update(learnable(fixed, random_rollout(DISC)), batch_size=8, repetitions=1,
                        progress=Progress(0, 0, 0.25)).stats.lr == 1e-3


# --------------------------------------------------------------------------- through the trainer
class OneStepPPO(PPO):
    """A PPO whose update takes one gradient step per rollout, on the whole of it, whatever
    the trainer's minibatch size and repetitions."""

    def update(self, rollout: Rollout, *, batch_size: int | None, repetitions: int,
               progress: Progress) -> UpdateReport:
        report = super().update(rollout, batch_size=None, repetitions=1, progress=progress)
        assert report.gradient_steps == 1
        return report


#: 4 rollouts of 64 env steps (2 envs x 32), 10 repetitions of minibatches of 16
RUN = ["algo=ppo", "env=cartpole", "experiment=smoke", "algo.hidden_sizes=[16]",
       "trainer.max_epochs=1", "trainer.epoch_num_steps=256",
       "trainer.collection_step_num_env_steps=64", "trainer.batch_size=16",
       "trainer.update_step_num_repetitions=10", "env.num_train_envs=2",
       "trainer.test_step_num_episodes=1", "env.num_test_envs=1"]


@pytest.mark.parametrize(("build", "per_rollout"), [(OneStepPPO, 1), (PPO, None)],
                         ids=["one-step", "ppo"])
def test_the_on_policy_trainer_counts_the_gradient_steps_the_update_reports(
        monkeypatch, build, per_rollout):
    """Built and trained as a run is (composed config, rltrain.assembly.build, OnPolicyTrainer): the
    trainer's gradient step grows by what each update reports, one per rollout for the
    one-step subclass, repetitions x minibatches for PPO (each rollout holds at most 64
    transitions: 4 minibatches of 16 or fewer)."""
    monkeypatch.setitem(ALGORITHMS, "ppo", dataclasses.replace(ALGORITHMS["ppo"], build=build))
    register_configs()
    with initialize_config_dir(config_dir=str(TESTS.parent / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=RUN)
    s = settings(cfg)
    parts = build_parts(s)
    try:
        assert type(parts.algorithm) is build
        trainer = build_trainer(s, parts)
        assert isinstance(trainer, OnPolicyTrainer)
        reports: list[UpdateReport] = []
        update = parts.algorithm.update

        def recorded(*args: Any, **kwargs: Any) -> UpdateReport:
            reports.append(update(*args, **kwargs))
            return reports[-1]

        monkeypatch.setattr(parts.algorithm, "update", recorded)
        info = trainer.run()
    finally:
        parts.close()
    assert info.env_step == 256 and len(reports) == 4
    if per_rollout is not None:
        assert [r.gradient_steps for r in reports] == [per_rollout] * 4
    else:  # next-step autoreset may leave a rollout fewer than 64 transitions
        assert all(10 * 3 <= r.gradient_steps <= 10 * 4 for r in reports), reports
    assert trainer.gradient_step == info.gradient_step == sum(r.gradient_steps for r in reports)
    assert parts.algorithm.optim.steps == trainer.gradient_step
    assert math.isfinite(info.wall_time)


def test_the_trainer_hands_the_update_gae_by_the_critic_as_it_is_at_the_update(monkeypatch):
    """Built and trained as a run is, the observations and rewards normalised (the
    normaliser moves during each collection): every rollout the update receives carries the
    advantages, returns and values of GAE by the critic and normalisers as they are when the
    update begins (recomputed there, before it changes anything, they are equal bit for bit),
    and the shared by-products of the values' pass are none for a vector PPO."""
    register_configs()
    with initialize_config_dir(config_dir=str(TESTS.parent / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[*RUN, "trainer.max_epochs=1",
                                           "env.normalize.obs=true", "env.normalize.reward=true"])
    s = settings(cfg)
    parts = build_parts(s)
    try:
        trainer = build_trainer(s, parts)
        algorithm = parts.algorithm
        assert isinstance(algorithm, PPO)
        seen: list[Rollout] = []
        update = algorithm.update

        def checked(rollout: Rollout, **kwargs: Any) -> UpdateReport:
            got = algorithm.rollout_values(rollout_record(rollout))
            adv = gae(algorithm.learning_rewards(rollout.rew), got["values"], got["next_values"],
                      rollout.terminated, rollout.dones, rollout.valid, algorithm.cfg.gamma,
                      algorithm.cfg.gae_lambda)
            assert rollout.values is not None and rollout.advantages is not None
            np.testing.assert_array_equal(rollout.values, got["values"])
            np.testing.assert_array_equal(rollout.advantages, adv)
            np.testing.assert_array_equal(rollout.returns, adv + got["values"])
            np.testing.assert_array_equal(rollout.learn, rollout.valid)
            assert "features" not in rollout.fields
            seen.append(rollout)
            return update(rollout, **kwargs)

        monkeypatch.setattr(algorithm, "update", checked)
        trainer.run()
    finally:
        parts.close()
    assert len(seen) == 4


def chained_rollout(info: SpaceInfo, lanes: int, steps: int, seed: int = 0) -> Rollout:
    """A rollout as the collector writes it: each slot's next observation is the next slot's
    observation, except where an episode ended (its own last state; the next slot starts a new
    episode) and at each lane's last slot."""
    rng = np.random.default_rng(seed)
    shape = (lanes, steps)
    space = info.obs_space

    def observations(*lead: int) -> np.ndarray:
        if space is None:
            return rng.normal(size=(*lead, *info.obs_shape)).astype(np.float32)
        return rng.integers(0, 256, size=(*lead, *info.obs_shape), dtype=np.uint8)

    states = observations(lanes, steps + 1)
    terminated = rng.random(shape) < 0.15
    truncated = ~terminated & (rng.random(shape) < 0.1)
    next_obs = states[:, 1:].copy()
    ended = terminated | truncated
    next_obs[ended] = observations(int(ended.sum()))
    return Rollout(obs=states[:, :-1], act=rng.integers(info.num_actions or 2, size=shape),
                   rew=rng.normal(size=shape).astype(np.float32), next_obs=next_obs,
                   terminated=terminated, truncated=truncated, valid=np.ones(shape, bool))


IMAGE = SpaceInfo((10, 10, 3), 4, (), None, None, None, "test",
                  obs_space=gym.spaces.Box(0, 255, (10, 10, 3), np.uint8))


@pytest.mark.parametrize("info", [DISC, IMAGE], ids=["vector", "image-shared-encoder"])
def test_rollout_values_evaluate_each_distinct_next_observation_once(info):
    """V(s') of a slot whose s' is the next slot's s is that slot's V(s): the pass runs over
    the slots' s and only the other s' (episode ends and each lane's last slot), and every
    value equals the critic's on that observation alone."""
    torch.manual_seed(0)
    ppo = PPO(PPOConfig(hidden_sizes=[16]), info, CPU, seed=0)
    rollout = chained_rollout(info, lanes=3, steps=20)
    rows: list[int] = []
    first = ppo.pi.encoder if ppo.shared else ppo.critic
    hook = first.register_forward_pre_hook(lambda _m, args: rows.append(len(args[0])))
    try:
        got = ppo.rollout_values(rollout_record(rollout))
    finally:
        hook.remove()
    values, next_values = got["values"], got["next_values"]
    fresh = int(rollout.dones[:, :-1].sum()) + 3
    assert rows == [3 * 20 + fresh]
    assert ("features" in got) == ppo.shared

    def alone(obs: np.ndarray) -> float:
        with torch.no_grad():
            return float(ppo.value(ppo._obs(obs[None]))[0])

    for lane in range(3):
        for t in range(20):
            assert values[lane, t] == pytest.approx(alone(rollout.obs[lane, t]), abs=1e-5)
            assert next_values[lane, t] == pytest.approx(alone(rollout.next_obs[lane, t]),
                                                         abs=1e-5)


def test_rollout_values_of_one_step_lanes():
    """A rollout one slot long: every s' is its own (nothing to share)."""
    ppo = PPO(PPOConfig(hidden_sizes=[16]), DISC, CPU, seed=0)
    rollout = chained_rollout(DISC, lanes=2, steps=1)
    got = ppo.rollout_values(rollout_record(rollout))
    values, next_values = got["values"], got["next_values"]
    with torch.no_grad():
        want = ppo.value(ppo._obs(rollout.next_obs.reshape(2, -1))).numpy()
    np.testing.assert_allclose(next_values.reshape(-1), want, atol=1e-6)
    assert values.shape == next_values.shape == (2, 1)
