"""REINFORCE (rltrain.algorithms.reinforce): Monte-Carlo advantages against hand-computed
returns, the unfinished episode a rollout ends with left out of the update (changing it
changes nothing), whole episodes collected by default and counted by the trainer, and an
exact resume after SIGTERM."""

from __future__ import annotations

import copy
import signal
from typing import Any

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

from algo_helpers import BOX, CPU, DISC, learnable, progress, random_rollout
from conftest import TESTS, learning_records, resume_in_process, run_in_process, signal_when
from rltrain.algorithms.reinforce import Reinforce, ReinforceConfig, ReinforceStats
from rltrain.assembly.build import build_parts, build_trainer
from rltrain.assembly.checked_config import settings
from rltrain.assembly.registered_schemas import register_configs
from rltrain.data.batch import Rollout
from rltrain.data.transforms.finished import finished


def compose_run(*overrides: str) -> Any:
    register_configs()
    with initialize_config_dir(config_dir=str(TESTS.parent / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def lane(terminated: list[int], truncated: list[int]) -> Rollout:
    """A lane of 5 transitions, rewards 1 to 5."""
    n = len(terminated)
    z = np.zeros((1, n, 3), np.float32)
    return Rollout(obs=z, act=np.zeros((1, n), np.int64),
                   rew=np.arange(1, n + 1, dtype=np.float32)[None],
                   next_obs=z, terminated=np.array([terminated], bool),
                   truncated=np.array([truncated], bool), valid=np.ones((1, n), bool))


@pytest.mark.parametrize(("terminated", "truncated", "returns", "learn"), [
    # an episode ends at t = 2; t = 3, 4 begin one still running: left out
    ([0, 0, 1, 0, 0], [0] * 5, [2.75, 3.5, 3.0, None, None], [1, 1, 1, 0, 0]),
    # cut by its time limit at t = 2: its return is completed with V(s'_2) = 40
    ([0] * 5, [0, 0, 1, 0, 0], [7.75, 13.5, 23.0, None, None], [1, 1, 1, 0, 0]),
    # the lane starts mid-episode (its beginning was in the last rollout): known returns
    ([1, 0, 0, 0, 1], [0] * 5, [1.0, 2 + 0.5 * (3 + 0.5 * (4 + 0.5 * 5)), 3 + 0.5 * (4 + 2.5),
                                4 + 2.5, 5.0], [1] * 5),
])
def test_advantages_are_monte_carlo_returns_minus_the_baseline(monkeypatch, terminated,
                                                               truncated, returns, learn):
    """G_t - V(s_t), G_t the discounted rewards to the episode's end (gamma 0.5, rewards 1 to
    5, V(s_t) = 10 t + 10, V(s'_t) = 10 t + 20), hand-computed; no bootstrap but at a
    truncation; through the transforms REINFORCE declares, its critic's values given."""
    algo = Reinforce(ReinforceConfig(gamma=0.5, hidden_sizes=[8]), DISC, CPU, seed=0)
    values = np.array([[10.0, 20.0, 30.0, 40.0, 50.0]], np.float32)
    next_values = values + 10
    monkeypatch.setattr(algo, "rollout_values",
                        lambda record: {"values": values, "next_values": next_values})
    got = learnable(algo, lane(terminated, truncated))
    assert got.advantages is not None and got.learn is not None
    np.testing.assert_array_equal(got.learn[0], np.array(learn, bool))
    for t, g in enumerate(returns):
        if g is not None:
            assert got.advantages[0, t] == pytest.approx(g - values[0, t]), t


@pytest.mark.parametrize("info", [DISC, BOX], ids=["discrete", "box"])
def test_the_unfinished_episode_is_not_learnt_from(info):
    """Two updates from the same state on rollouts that differ only in the transitions after
    each lane's last episode end (observations, actions, rewards) leave identical networks,
    and report the fraction learnt from."""
    torch.manual_seed(0)
    rollout = random_rollout(info, lanes=2, steps=16, seed=3)
    learn = finished(rollout.dones, rollout.valid)
    assert learn.any() and not learn.all()
    rng = np.random.default_rng(9)
    tail = ~learn
    other = copy.deepcopy(rollout)
    other.obs[tail] = rng.normal(size=other.obs[tail].shape)
    other.next_obs[tail] = rng.normal(size=other.next_obs[tail].shape)
    other.rew[tail] = rng.normal(size=int(tail.sum())) * 100
    first, second = (Reinforce(ReinforceConfig(hidden_sizes=[8]), info, CPU, seed=0)
                     for _ in range(2))
    second.load_state_dict(first.state_dict())
    reports = [a.update(learnable(a, r), batch_size=None, repetitions=1, progress=progress(0))
               for a, r in ((first, rollout), (second, other))]
    for a, b in zip(first.parameters(), second.parameters(), strict=True):
        assert torch.equal(a, b)
    stats = reports[0].stats
    assert isinstance(stats, ReinforceStats) and reports[0].gradient_steps == 1
    assert stats.learnt_fraction == pytest.approx(learn.sum() / rollout.num_transitions)


def test_an_update_with_no_finished_episode_takes_no_step():
    rollout = random_rollout(DISC, lanes=1, steps=4)
    rollout = Rollout(**{**vars(rollout), "terminated": np.zeros((1, 4), bool),
                         "truncated": np.zeros((1, 4), bool)})
    algo = Reinforce(ReinforceConfig(hidden_sizes=[8]), DISC, CPU, seed=0)
    report = algo.update(learnable(algo, rollout), batch_size=None, repetitions=1,
                         progress=progress(0))
    assert report.gradient_steps == 0 and algo.optim.steps == 0
    assert report.stats.pg_loss is None and report.stats.learnt_fraction == 0.0


def test_algo_reinforce_collects_whole_episodes_by_default():
    s = settings(compose_run("algo=reinforce", "env=gym", "env.id=Acrobot-v1"))
    assert (s.trainer.collection_step_num_env_steps, s.trainer.collection_step_num_episodes,
            s.trainer.batch_size, s.trainer.update_step_num_repetitions) == (None, 16, None, 1)


def test_one_env_learns_from_every_transition_and_the_trainer_counts_the_steps(monkeypatch):
    """Built and trained as a run is, with one train env: a collection of episodes stops at
    an episode's end, so every update learns from all it collected, in one gradient step."""
    cfg = compose_run("algo=reinforce", "env=cartpole", "experiment=smoke",
                      "algo.hidden_sizes=[16]", "env.num_train_envs=1", "trainer.max_epochs=1",
                      "trainer.epoch_num_steps=300", "trainer.collection_step_num_episodes=4",
                      "trainer.test_step_num_episodes=1", "env.num_test_envs=1")
    s = settings(cfg)
    parts = build_parts(s)
    try:
        trainer = build_trainer(s, parts)
        reports = []
        update = parts.algorithm.update

        def recorded(*args: Any, **kwargs: Any) -> Any:
            reports.append(update(*args, **kwargs))
            return reports[-1]

        monkeypatch.setattr(parts.algorithm, "update", recorded)
        info = trainer.run()
    finally:
        parts.close()
    assert reports and all(r.stats.learnt_fraction == 1.0 for r in reports)
    assert info.gradient_step == len(reports) == parts.algorithm.optim.steps
    assert info.env_step >= 300


def test_sigterm_then_resume_equals_unbroken_run(tmp_path):
    """Episodes span the collection steps (the running ones are in the checkpoint's collector
    state): a run stopped mid-epoch and resumed writes the unbroken run's records."""
    full, broken = tmp_path / "full", tmp_path / "broken"
    args = ["algo=reinforce", "env=cartpole", "trainer.max_epochs=3",
            "trainer.epoch_num_steps=6000", "trainer.stop_score=null", "seed=1",
            "logger.progress_bar=false", "env.num_test_envs=5",
            "trainer.test_step_num_episodes=5", "logger.tensorboard=false"]
    run_in_process(full, *args)
    res = signal_when([*args, f"hydra.run.dir={broken}"], tmp_path,
                      lambda line: line.startswith("epoch   1/"), signal.SIGTERM)
    assert res.returncode == 143, res.stderr
    assert resume_in_process(broken) == (0, [])
    assert learning_records(broken) == learning_records(full)
