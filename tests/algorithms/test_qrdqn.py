"""QR-DQN (rltrain.algorithms.qrdqn): the quantile Huber loss by hand, quantile regression
finding quantiles, the update's loss, weights and priorities, the deployable and exported
policies' expected values (the quantiles' mean)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from algo_helpers import CPU, DISC, SMALL, progress, random_batch
from conftest import command, run_in_process
from rltrain.algorithms.qrdqn import QRDQN, QRDQNConfig, quantile_huber_loss, quantile_midpoints
from rltrain.assembly.orchestrator import open_run
from rltrain.commands import export
from rltrain.config.schemas import ConfigError

THETA = torch.tensor([[0.0, 1.0]])
TAUS = torch.tensor([0.25, 0.75])
TARGET = torch.tensor([[0.5, -2.0, 1.0]])


@pytest.mark.parametrize(("kappa", "expected"), [
    # theta_0 = 0 (tau 1/4): u = [0.5, -2, 1], Huber [0.125, 1.5, 0.5], weights [1/4, 3/4, 1/4]
    #   -> [0.03125, 1.125, 0.125], mean 1.28125 / 3
    # theta_1 = 1 (tau 3/4): u = [-0.5, -3, 0], Huber [0.125, 2.5, 0], weights [1/4, 1/4, 3/4]
    #   -> [0.03125, 0.625, 0], mean 0.65625 / 3
    (1.0, (1.28125 + 0.65625) / 3),
    # kappa 2: Huber [0.125, 2, 0.5] and [0.125, 4, 0] -> 1.65625 / 3 + 1.03125 / 3
    (2.0, (1.65625 + 1.03125) / 3),
])
def test_quantile_huber_loss_by_hand(kappa, expected):
    loss = quantile_huber_loss(THETA, TARGET, TAUS, kappa)
    assert loss.shape == (1,)
    assert float(loss[0]) == pytest.approx(expected, rel=1e-6)


def test_quantile_huber_loss_per_sample():
    """Each row's loss is its own: a batch of two is the two rows' losses."""
    theta = torch.cat((THETA, THETA + 1))
    target = torch.cat((TARGET, TARGET * 2))
    both = quantile_huber_loss(theta, target, TAUS, 1.0)
    for i in range(2):
        torch.testing.assert_close(both[i:i + 1],
                                   quantile_huber_loss(theta[i:i + 1], target[i:i + 1], TAUS, 1.0))


def test_midpoints():
    torch.testing.assert_close(quantile_midpoints(4), torch.tensor([0.125, 0.375, 0.625, 0.875]))


def test_minimising_the_loss_finds_the_quantiles_of_the_samples():
    """Gradient descent on the loss against fixed samples moves each theta_i to the
    tau_i-quantile of the samples (within the Huber zone's smoothing)."""
    samples = torch.arange(100, dtype=torch.float32)[None]  # 0..99
    taus = quantile_midpoints(4)
    theta = torch.zeros(1, 4, requires_grad=True)
    opt = torch.optim.SGD([theta], lr=20.0)
    for _ in range(3000):
        opt.zero_grad()
        quantile_huber_loss(theta, samples, taus, 1.0).sum().backward()
        opt.step()
    # the 12.5%, 37.5%, 62.5%, 87.5% points of 0..99
    np.testing.assert_allclose(theta.detach()[0].numpy(), [12, 37, 62, 87], atol=1.0)


def detuned(algo: QRDQN) -> QRDQN:
    with torch.no_grad():
        for p in algo.q_target.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return algo


@pytest.mark.parametrize("double_q", [True, False])
def test_update_loss_against_the_target_quantiles(double_q):
    """Target quantiles r + discount * theta'(s', a*), a* greedy in the quantiles' mean (double
    Q: the online network's choice); the reported loss is their batch mean, the priorities the
    per-sample losses."""
    torch.manual_seed(0)
    qr = detuned(QRDQN(QRDQNConfig(quantiles=8, double_q=double_q, **SMALL), DISC, CPU, 0))
    batch = random_batch(DISC, seed=1)
    obs, act, rew, discount, next_obs = (torch.from_numpy(x) for x in (
        batch.obs, batch.act, batch.rew, batch.discount, batch.next_obs))
    rows = torch.arange(len(act))
    with torch.no_grad():
        target_next = qr.q_target(next_obs)
        online_mean = qr.q(next_obs).mean(-1)
        pick = (online_mean if double_q else target_next.mean(-1)).argmax(-1)
        target = rew[:, None] + discount[:, None] * target_next[rows, pick]
        theta = qr.q(obs)[rows, act]
        per_sample = quantile_huber_loss(theta, target, quantile_midpoints(8), 1.0)
    assert not torch.equal(online_mean.argmax(-1), target_next.mean(-1).argmax(-1))
    report = qr.update(batch, progress=progress(0))
    assert report.stats.loss == pytest.approx(float(per_sample.mean()), rel=1e-5)
    assert report.stats.q_mean == pytest.approx(float(theta.mean()), rel=1e-5)
    assert report.priorities is not None
    torch.testing.assert_close(report.priorities, per_sample)


def test_importance_weights_weight_the_loss():
    batch = random_batch(DISC, seed=2)
    weights = np.linspace(0.1, 2.0, len(batch.rew)).astype(np.float32)
    reports = []
    for w in (weights, None):
        torch.manual_seed(3)
        qr = QRDQN(QRDQNConfig(quantiles=8, **SMALL), DISC, CPU, 0)
        reports.append(qr.update(dataclasses.replace(batch, weights=w), progress=progress(0)))
    weighted, plain = reports
    assert plain.priorities is not None
    assert weighted.stats.loss == pytest.approx(
        float((torch.from_numpy(weights) * plain.priorities).mean()), rel=1e-5)


def test_deployable_policy_argmaxes_the_quantiles_mean():
    torch.manual_seed(4)
    qr = QRDQN(QRDQNConfig(quantiles=8, dueling=True, noisy=True, **SMALL), DISC, CPU, 0)
    obs = torch.from_numpy(np.random.default_rng(0).normal(size=(256, 3)).astype(np.float32))
    with torch.no_grad():
        mean = qr.q(obs).mean(-1)
        torch.testing.assert_close(qr.actor()(obs), mean)
        deployed = qr.deployable()(obs).numpy()
    np.testing.assert_array_equal(deployed, mean.argmax(-1).numpy())
    np.testing.assert_array_equal(qr.act(obs.numpy(), deterministic=True, progress=progress(0)),
                                  deployed)


@pytest.mark.parametrize("dueling", [False, True])
def test_one_quantile_is_a_distribution_of_one_atom(dueling):
    """N = 1 learns the median return (tau 1/2): the network keeps its quantile axis, so the
    expected values are per action and every action is one of the env's (a squeezed axis once
    made the mean run over the actions, and the argmax picked out-of-range actions)."""
    torch.manual_seed(5)
    qr = QRDQN(QRDQNConfig(quantiles=1, dueling=dueling, **SMALL), DISC, CPU, 0)
    obs = np.random.default_rng(1).normal(size=(64, 3)).astype(np.float32)
    with torch.no_grad():
        assert qr.q(torch.from_numpy(obs)).shape == (64, 3, 1)
    for deterministic in (True, False):
        actions = qr.act(obs, deterministic=deterministic, progress=progress(0))
        assert actions.shape == (64,) and set(actions.tolist()) <= {0, 1, 2}
    report = qr.update(random_batch(DISC, seed=3), progress=progress(0))
    assert np.isfinite(report.stats.loss) and report.priorities is not None
    assert report.priorities.shape == (len(random_batch(DISC, seed=3).rew),)


def test_bad_settings_are_refused_by_name():
    with pytest.raises(ConfigError, match=r"algo.quantiles must be at least 1, got 0"):
        QRDQNConfig(quantiles=0).check()
    with pytest.raises(ConfigError, match=r"algo.kappa must be > 0"):
        QRDQNConfig(kappa=0.0).check()


def test_the_exported_policy_argmaxes_the_quantiles_mean(tmp_path):
    import onnxruntime as ort

    run = tmp_path / "run"
    run_in_process(run, "experiment=smoke", "logger.tensorboard=false", "algo=qrdqn")
    out = tmp_path / "policy.onnx"
    res = command(export.main, run, "--out", out)
    assert res.returncode == 0, res.stderr
    assert "identical on 256/256" in res.stdout
    algorithm = open_run(run, "best").algorithm
    obs = np.random.default_rng(2).uniform(-2, 2, size=(512, 4)).astype(np.float32)
    with torch.no_grad():
        expected = algorithm.q(torch.from_numpy(obs)).mean(-1).argmax(-1)
    (act,) = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(
        None, {"obs": obs})
    np.testing.assert_array_equal(act, expected.numpy())
