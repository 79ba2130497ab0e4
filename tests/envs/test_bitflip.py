"""Bit flipping (rltrain.envs.bitflip): gymnasium's own checks, the task as the HER paper sets
it (reward, success, the goal within n flips, start never the goal), a vectorised
compute_reward, its config (the time limit follows n) and a run on it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from conftest import compose_run, read_jsonl, refusal, run_in_process
from rltrain.envs.bitflip import ENV_ID, BitFlipEnv


def test_gymnasiums_checker_passes_and_the_id_is_registered():
    check_env(BitFlipEnv(6), skip_render_check=True)
    env = gym.make(ENV_ID)
    assert env.spec is not None and env.spec.max_episode_steps == 15
    assert env.unwrapped.n_bits == 15


@pytest.mark.parametrize("n", [1, 2, 15])
def test_flipping_the_differing_bits_meets_the_goal_within_n_steps(n):
    env = BitFlipEnv(n)
    for seed in range(20):
        obs, info = env.reset(seed=seed)
        assert info == {"is_success": False}
        differ = np.flatnonzero(obs["achieved_goal"] != obs["desired_goal"])
        assert 1 <= len(differ) <= n  # never starts at its goal
        for k, bit in enumerate(differ):
            obs, reward, terminated, truncated, info = env.step(bit)
            last = k == len(differ) - 1
            assert (reward, terminated, truncated, info["is_success"]) == (
                (0.0, True, False, True) if last else (-1.0, False, False, False))
            np.testing.assert_array_equal(obs["observation"], obs["achieved_goal"])
        np.testing.assert_array_equal(obs["achieved_goal"], obs["desired_goal"])


def test_a_wrong_flip_costs_a_step_and_the_same_seed_gives_the_same_task():
    env = BitFlipEnv(8)
    first, _ = env.reset(seed=3)
    same = first["achieved_goal"] == first["desired_goal"]
    if same.any():  # flip a bit that is already right: one step further from the goal
        obs, reward, terminated, _, _ = env.step(int(np.flatnonzero(same)[0]))
        assert reward == -1.0 and not terminated
    again, _ = BitFlipEnv(8).reset(seed=3)
    for key in first:
        np.testing.assert_array_equal(first[key], again[key])
    other, _ = BitFlipEnv(8).reset(seed=4)
    assert any(not np.array_equal(first[k], other[k]) for k in first)


def test_compute_reward_is_vectorised_and_refuses_goals_of_another_length():
    env = BitFlipEnv(5)
    rng = np.random.default_rng(0)
    achieved = rng.integers(0, 2, (3, 7, 5)).astype(np.float32)
    desired = achieved.copy()
    desired[0, :4, 2] = 1 - desired[0, :4, 2]
    got = env.compute_reward(achieved, desired, None)
    assert got.shape == (3, 7) and got.dtype == np.float32
    expected = np.array([[-1.0 if not np.array_equal(a, d) else 0.0
                          for a, d in zip(row_a, row_d, strict=True)]
                         for row_a, row_d in zip(achieved, desired, strict=True)])
    np.testing.assert_array_equal(got, expected)
    assert (got[0, :4] == -1).all() and (got[1:] == 0).all()
    with pytest.raises(ValueError, match="goals of 5 bits, both of one shape"):
        env.compute_reward(achieved[..., :4], desired[..., :4], None)
    with pytest.raises(ValueError, match="goals of 5 bits"):
        env.compute_reward(achieved, desired[0], None)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "15"])
def test_a_wrong_number_of_bits_is_refused(bad):
    with pytest.raises(ValueError, match="BitFlip needs n_bits, an integer >= 1"):
        BitFlipEnv(bad)
    with pytest.raises(ValueError, match="actions are 0..3"):
        BitFlipEnv(4).step(4)


def test_the_config_ties_the_time_limit_to_n_and_a_bad_n_is_one_line(tmp_path):
    cfg = compose_run("env=bitflip", "env.kwargs.n_bits=7")
    assert cfg.env.max_episode_steps == 7 and cfg.env.id == ENV_ID
    # the time limit follows n, and is checked first
    message = refusal(tmp_path / "bad", "algo=dqn", "env=bitflip", "env.kwargs.n_bits=0")
    assert message == "env.max_episode_steps must be > 0, got 0", message
    # with a time limit of its own, the env's refusal is the one line
    message = refusal(tmp_path / "worse", "algo=dqn", "env=bitflip", "env.kwargs.n_bits=-2",
                      "env.max_episode_steps=5")
    assert "BitFlip needs n_bits, an integer >= 1, got -2" in message, message
    assert "\n" not in message and "Traceback" not in message


def test_dqn_trains_on_it_through_the_dict_encoder(tmp_path):
    info = run_in_process(tmp_path / "run", "experiment=smoke", "algo=dqn", "env=bitflip",
                          "env.kwargs.n_bits=4", "trainer.random_warmup_env_steps=256")
    assert info.status == "completed" and info.epochs == 2 and info.gradient_step > 0
    records = read_jsonl(tmp_path / "run" / "epochs.jsonl")
    # every return is a count of wasted flips: -4 (never met) to 0 (met at once)
    assert all(-4.0 <= r["test"]["return_mean"] <= 0.0 for r in records)
