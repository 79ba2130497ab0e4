"""PPO (rltrain.algorithms.ppo): its acting path, and the gradient steps an update reports,
which the on-policy trainer counts (its actors' maths is tested in test_nets.py)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

from algo_helpers import BOX, CPU, DISC, progress, random_rollout
from conftest import TESTS
from rltrain.algorithms import ALGORITHMS, UpdateReport
from rltrain.algorithms.ppo import PPO, PPOConfig
from rltrain.build import build_parts, build_trainer
from rltrain.catalogue import register_configs
from rltrain.core import Progress, SpaceInfo
from rltrain.data.buffers import Rollout
from rltrain.settings import settings
from rltrain.trainer import OnPolicyTrainer


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
    report = ppo.update(rollout, batch_size=batch_size, repetitions=repetitions,
                        progress=progress(0))
    assert isinstance(report, UpdateReport)
    assert report.gradient_steps == repetitions * minibatches == ppo.optim.steps - before


def test_update_reports_the_annealed_learning_rate():
    ppo = PPO(PPOConfig(hidden_sizes=[16], lr=1e-3), DISC, CPU, seed=0)
    stats = ppo.update(random_rollout(DISC), batch_size=8, repetitions=1,
                       progress=Progress(0, 0, 0.25)).stats
    assert stats.lr == pytest.approx(7.5e-4) and ppo.optim.lr == pytest.approx(7.5e-4)
    fixed = PPO(PPOConfig(hidden_sizes=[16], lr=1e-3, lr_annealing=False), DISC, CPU, seed=0)
    assert fixed.update(random_rollout(DISC), batch_size=8, repetitions=1,
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
    """Built and trained as a run is (composed config, rltrain.build, OnPolicyTrainer): the
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
