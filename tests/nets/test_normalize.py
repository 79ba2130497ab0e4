"""Observation normalisation and reward scaling (rltrain.nets.normalize): the statistics against
plain references, observations of any rank, and their life cycle in a run (updated by training
collection only, frozen while testing, saved with the policy, restored on resume, applied
alike by eval and the ONNX graph)."""

from __future__ import annotations

import json
import logging
import signal

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

from algo_helpers import BOX, DISC, build
from conftest import (
    TESTS,
    command,
    learning_records,
    read_jsonl,
    resume_in_process,
    run_in_process,
    signal_when,
)
from rltrain.assembly.build import build_parts
from rltrain.assembly.checked_config import settings
from rltrain.assembly.registered_schemas import register_configs
from rltrain.commands import evaluate, export
from rltrain.common.types import Progress
from rltrain.nets.normalize import ObsNormalizer, RewardScaler, RunningMoments


# --------------------------------------------------------------------------- the statistics
def test_running_moments_match_numpy_over_all_batches():
    rng = np.random.default_rng(2)
    moments = RunningMoments((3,))
    seen = []
    for n in (1, 5, 17, 2, 40):
        x = rng.normal(3.0, 2.0, size=(n, 3))
        seen.append(x)
        moments.update(torch.from_numpy(x))
    every = np.concatenate(seen)
    np.testing.assert_allclose(moments.mean.numpy(), every.mean(0), rtol=1e-12)
    np.testing.assert_allclose(moments.var.numpy(), every.var(0), rtol=1e-10)
    assert int(moments.count) == len(every)


def test_obs_normalizer_normalises_and_clips():
    norm = ObsNormalizer(2, clip=5.0, epsilon=1e-8)
    x = torch.tensor([[10.0, -1.0], [12.0, 1.0], [14.0, 0.0]])
    norm.update(x)
    out = norm(x)
    torch.testing.assert_close(out.mean(0), torch.zeros(2), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.var(0, unbiased=False), torch.ones(2), atol=1e-4, rtol=0)
    assert norm(torch.tensor([[1e6, -1e6]])).tolist() == [[5.0, -5.0]]


def test_obs_normalizer_on_rank_2_observations_is_the_flattened_ones():
    """Observations of shape (4, 3) are normalised per feature exactly as their flattened
    12-vectors are, statistics and outputs alike, and keep their shape."""
    rng = np.random.default_rng(3)
    shaped, flat = ObsNormalizer(12, clip=3.0, epsilon=1e-8), ObsNormalizer(12, 3.0, 1e-8)
    for n in (1, 7, 30):
        x = torch.from_numpy(rng.normal(rng.normal(size=(4, 3)) * 5, 2.0, size=(n, 4, 3)))
        shaped.update(x)
        flat.update(x.reshape(n, 12))
    for key, value in shaped.state_dict().items():
        assert torch.equal(value, flat.state_dict()[key]), key
    x = torch.from_numpy(rng.normal(0, 10, size=(9, 4, 3)).astype(np.float32))
    out = shaped(x)
    assert out.shape == (9, 4, 3)
    assert torch.equal(out, flat(x.reshape(9, 12)).reshape(9, 4, 3))
    assert float(out.abs().max()) == 3.0  # clipped, too


def test_observe_folds_in_numpy_observations_of_any_rank_and_dtype():
    """observe() (the training collector's observer) equals update() on the same values, for
    float32, float64 and integer observations, read-only arrays included."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(16, 2, 3))
    readonly = x.astype(np.float32)
    readonly.flags.writeable = False
    for obs in (x.astype(np.float32), x, (x * 10).astype(np.int64), readonly):
        seen, ref = ObsNormalizer(6, 10.0, 1e-8), ObsNormalizer(6, 10.0, 1e-8)
        seen.observe(obs)
        ref.update(torch.as_tensor(np.array(obs), dtype=torch.float32).reshape(16, 6))
        for key, value in seen.state_dict().items():
            assert torch.equal(value, ref.state_dict()[key]), (obs.dtype, key)


def test_reward_scaler_tracks_the_discounted_return():
    """The statistic is over R_t = gamma R_{t-1} + r_t per env, reset at episode ends; lanes
    marked invalid (next-step reset steps) are left out."""
    scaler = RewardScaler(2, gamma=0.5, clip=10.0, epsilon=0.0)
    ones, no = np.ones(2), np.zeros(2, bool)
    scaler.observe(ones, no, None)  # R = [1, 1]
    scaler.observe(ones, np.array([True, False]), None)  # R = [1.5, 1.5], env 0 ends
    scaler.observe(np.array([4.0, 1.0]), no, np.array([False, True]))  # env 1: R = 1.75
    seen = np.array([1, 1, 1.5, 1.5, 1.75])
    np.testing.assert_allclose(scaler.moments.mean.numpy(), seen.mean())
    np.testing.assert_allclose(scaler.factor(), 1 / seen.std(), rtol=1e-9)
    assert scaler.returns.tolist() == [0.0, 1.75]
    assert scaler.scale(np.array([1e9]))[0] == 10.0


# --------------------------------------------------------------------------- who updates them
@pytest.mark.parametrize(("name", "info"), [("sac", BOX), ("ppo", DISC), ("dqn", DISC)])
def test_acting_applies_the_statistics_but_never_updates_them(name, info):
    """The policy a collector calls and act() normalise with the statistics as they are:
    only the training collector's observer folds observations in."""
    torch.manual_seed(0)
    algorithm = build(name, info)
    norm = ObsNormalizer(info.obs_dim, 10.0, 1e-8)
    norm.update(torch.randn(50, info.obs_dim) * 3 + 1)
    algorithm.set_normalizers(norm, None)
    before = {k: v.clone() for k, v in norm.state_dict().items()}
    obs = np.random.default_rng(5).normal(size=(8, *info.obs_shape)).astype(np.float32) * 4
    progress = Progress(0, 0, 0.0)
    with torch.inference_mode():
        algorithm.policy(progress)(obs)
        algorithm.policy(progress, deterministic=True)(obs)
    algorithm.act(obs, deterministic=False, progress=progress)
    for key, value in norm.state_dict().items():
        assert torch.equal(value, before[key]), key
    # and it is applied: other statistics, other network outputs for the same observations
    # (outputs, not greedy actions: three discrete actions may keep their argmax)
    with torch.no_grad():
        out = algorithm.actor()(algorithm._obs(obs)).clone()
        norm.shift.add_(5.0)
        assert not torch.equal(algorithm.actor()(algorithm._obs(obs)), out)


def test_the_build_makes_the_training_collector_update_the_statistics():
    """With env.normalize.obs=true the build registers the normaliser's observe() on the
    training collector, and on it only: a collection of n env steps adds n observations; a
    test collection adds none."""
    register_configs()
    with initialize_config_dir(config_dir=str(TESTS.parent / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["algo=ppo", "env=cartpole", "env.normalize.obs=true",
                                           "env.num_train_envs=2", "env.num_test_envs=2"])
    parts = build_parts(settings(cfg))
    try:
        norm = parts.algorithm.obs_norm
        assert norm is not None and parts.algorithm.reward_scaler is None
        assert parts.train_collector.on_obs == norm.observe
        assert parts.test_collector.on_obs is None
        policy = parts.algorithm.policy(Progress(0, 0, 0.0))
        with torch.inference_mode():
            episodes = parts.train_collector.collect(policy, n_steps=20)
            assert int(norm.moments.count) == episodes.n_steps == 20
            parts.test_collector.collect(policy, n_episodes=2)
        assert int(norm.moments.count) == 20
    finally:
        parts.close()


# --------------------------------------------------------------------------- runs
# a gradient step every 4 env steps, not every one (the update was 3/4 of a run's time): the
# normalisers see every env step whatever the gradient steps
NORM = ["env=pendulum", "env.normalize.obs=true", "env.normalize.reward=true",
        "algo.hidden_sizes=[32,32]", "trainer.epoch_num_steps=600",
        "trainer.random_warmup_env_steps=300", "trainer.test_step_num_episodes=2",
        "env.num_test_envs=2", "trainer.stop_score=null",
        "trainer.collection_step_num_env_steps=4",
        "trainer.update_step_num_gradient_steps_per_sample=0.25"]


def test_normalisers_frozen_in_tests_saved_with_the_policy_and_exported(tmp_path):
    """With observation normalisation on: the statistics count exactly the training env steps
    (warm-up included, no test step), the saved policy carries them, and rltrain-eval and the
    ONNX graph apply them: the exported graph matches torch (export's own check) and a
    policy evaluated with its statistics zeroed acts differently."""
    import onnxruntime as ort

    from rltrain.assembly.orchestrator import open_run

    run_dir = tmp_path / "run"
    run_in_process(run_dir, "algo=td3", *NORM, "trainer.max_epochs=2")
    summary = json.loads((run_dir / "summary.json").read_text())
    ckpt = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    modules = ckpt["algorithm"]["modules"]
    # every training env step, and nothing from the 2 x 2 test episodes of 200 steps
    assert int(modules["obs_norm.moments.count"]) == summary["env_step"]
    assert "reward_scaler.moments.var" in modules
    policy = torch.load(run_dir / "final" / "policy.pt", weights_only=True)["state_dict"]
    assert torch.equal(policy["obs_norm.shift"], modules["obs_norm.shift"])
    assert float(policy["obs_norm.shift"].abs().sum()) > 0  # statistics were learnt
    assert "reward_scaler.returns" not in policy  # training only

    res = command(export.main, run_dir, "--weights", "final", "--out", tmp_path / "p.onnx")
    assert res.returncode == 0, res.stderr
    assert "ONNX matches torch" in res.stdout

    loaded = open_run(run_dir, "final")
    obs = np.random.default_rng(0).uniform(-1, 1, size=(64, 3)).astype(np.float32)
    session = ort.InferenceSession(str(tmp_path / "p.onnx"), providers=["CPUExecutionProvider"])
    onnx_act = session.run(["action"], {"obs": obs})[0]
    np.testing.assert_allclose(onnx_act, loaded.act(obs), rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        loaded.policy.obs_norm.shift.zero_()
        loaded.policy.obs_norm.scale.fill_(1.0)
    assert not np.allclose(loaded.act(obs), onnx_act, atol=1e-3)

    res = command(evaluate.main, run_dir, "--weights", "final", "--episodes", "2")
    assert res.returncode == 0, res.stderr
    assert json.loads((run_dir / "eval.json").read_text())["episodes"] == 2


def test_eval_reproduces_the_test_step_with_normalised_observations(tmp_path):
    """rltrain-eval with the run's test seed and the final weights plays exactly the episodes
    of the last test step (same normalised observations, same action scaling)."""
    from rltrain.trainers import derived_seed

    run_dir = tmp_path / "run"
    run_in_process(run_dir, "algo=sac", *NORM, "trainer.max_epochs=1",
                   "trainer.test_step_num_episodes=4", "env.num_test_envs=4")
    last = read_jsonl(run_dir / "epochs.jsonl")[-1]
    test_seed = derived_seed(0 + 1, 0)  # env_seeds(seed=0, 1 train env): test base = 1
    res = command(evaluate.main, run_dir, "--weights", "final", "--episodes", "4",
                  "--seed", str(test_seed))
    assert res.returncode == 0, res.stderr
    report = json.loads((run_dir / "eval.json").read_text())
    assert report["return_mean"] == pytest.approx(last["test"]["return_mean"], rel=1e-9)


# the normalisers are the same parts for every off-policy algorithm: TD3 with the slow checks
@pytest.mark.parametrize("algo", ["sac", pytest.param("td3", marks=pytest.mark.slow)])
def test_exact_resume_with_normalisation(tmp_path, caplog, algo):
    """SIGTERM mid-epoch, resume: the records equal an unbroken run's, observation and reward
    statistics included (time fields aside)."""
    args = [f"algo={algo}", *NORM, "trainer.max_epochs=3", "trainer.checkpoint_every=1",
            "trainer.batch_size=64"]  # small batches: the resume is what is tested
    whole = tmp_path / "whole"
    run_in_process(whole, *args)
    broken = tmp_path / "broken"
    res = signal_when([*args, f"hydra.run.dir={broken}"], tmp_path,
                      lambda line: line.startswith("epoch   2/3"), signal.SIGTERM)
    assert res.returncode == 128 + signal.SIGTERM, res.stdout + res.stderr
    caplog.set_level(logging.INFO)
    assert resume_in_process(broken) == (0, [])
    assert any(m.endswith(" (exact)") for m in caplog.messages), caplog.messages
    assert learning_records(broken) == learning_records(whole)
    a = torch.load(whole / "checkpoints" / "last.pt", weights_only=True)["algorithm"]["modules"]
    b = torch.load(broken / "checkpoints" / "last.pt", weights_only=True)["algorithm"]["modules"]
    for key in ("obs_norm.moments.mean", "obs_norm.moments.count", "reward_scaler.moments.var",
                "reward_scaler.returns"):
        assert torch.equal(a[key], b[key]), key

