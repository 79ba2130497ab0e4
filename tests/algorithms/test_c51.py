"""C51 and Rainbow (rltrain.algorithms.c51): the categorical projection by hand (a terminal
transition, targets beyond the support), the cross-entropy loss, importance weights and
priorities, double-Q selection, Rainbow as C51 with other defaults (and the prioritized buffer
from its YAML), the deployable and exported policies' expected values, and an exact resume of a
noisy network (a signal through a real `rltrain`, the resume in this process)."""

from __future__ import annotations

import dataclasses
import json
import signal

import numpy as np
import pytest
import torch

from algo_helpers import CPU, DISC, SMALL, progress, random_batch
from conftest import (
    command,
    compose_run,
    learning_records,
    resume_in_process,
    run_in_process,
    signal_when,
)
from rltrain.algorithms import ALGORITHMS
from rltrain.algorithms.c51 import (
    C51,
    C51Config,
    RainbowConfig,
    categorical_projection,
    check_support,
)
from rltrain.assembly.orchestrator import open_run
from rltrain.commands import export
from rltrain.config.schemas import ConfigError

SUPPORT = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0])
PROBS = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.0])


@pytest.mark.parametrize(("rew", "discount", "expected"), [
    # Tz = 0.5 + 0.5 z = [0.5, 1, 1.5, 2, 2.5]: 0.1 split 0.05/0.05 between z0 and z1, 0.2 on
    # z1, 0.3 split 0.15/0.15 between z1 and z2, 0.4 on z2
    (0.5, 0.5, [0.05, 0.4, 0.55, 0.0, 0.0]),
    # terminal (discount 0): everything at r = 2.25, a quarter of the way from z2 to z3
    (2.25, 0.0, [0.0, 0.0, 0.75, 0.25, 0.0]),
    # beyond v_max: Tz = [3, 4, 5, 6, 7] clipped to [3, 4, 4, 4, 4]
    (3.0, 1.0, [0.0, 0.0, 0.0, 0.1, 0.9]),
    # below v_min: all clipped to z0
    (-10.0, 0.9, [1.0, 0.0, 0.0, 0.0, 0.0]),
    # straddling both ends: Tz = -1.5 + 2 z = [-1.5, 0.5, 2.5, 4.5, 6.5] -> [0, .5, 2.5, 4, 4]
    (-1.5, 2.0, [0.1 + 0.1, 0.1, 0.15, 0.15, 0.4]),
])
def test_projection_by_hand(rew, discount, expected):
    got = categorical_projection(PROBS[None], torch.tensor([rew]), torch.tensor([discount]),
                                 SUPPORT)
    torch.testing.assert_close(got, torch.tensor([expected]))


def test_projection_keeps_the_mass_and_the_mean_inside_the_support():
    """On random distributions, rewards and discounts: the projection is a distribution, and
    where no atom is clipped it keeps the mean (the linear split preserves it)."""
    rng = torch.Generator().manual_seed(0)
    support = torch.linspace(-10, 10, 51)
    probs = torch.rand(64, 51, generator=rng).softmax(-1)
    rew = torch.rand(64, generator=rng) * 2 - 1
    discount = torch.rand(64, generator=rng) * 0.8
    m = categorical_projection(probs, rew, discount, support)
    assert torch.all(m >= 0)
    torch.testing.assert_close(m.sum(-1), torch.ones(64))
    # |r| <= 1 and discount <= 0.8 keep 1 + 0.8 * 10 inside [-10, 10]: nothing is clipped
    torch.testing.assert_close((m * support).sum(-1), rew + discount * (probs * support).sum(-1))


def detuned(algo: C51) -> C51:
    with torch.no_grad():
        for p in algo.q_target.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return algo


def tensors(batch):
    return tuple(torch.from_numpy(x) for x in (batch.obs, batch.act, batch.rew, batch.discount,
                                               batch.next_obs))


@pytest.mark.parametrize("double_q", [True, False])
def test_loss_is_the_cross_entropy_to_the_projected_target(double_q):
    """The target distribution is the target network's at the next action (double Q: the
    online network's greedy one in expected values) projected by hand's rule; the loss is
    mean_b -sum_j m_j log p_j(s, a); the priorities are the per-sample cross-entropies."""
    torch.manual_seed(0)
    cfg = C51Config(double_q=double_q, atoms=11, v_min=-2.0, v_max=2.0, **SMALL)
    c51 = detuned(C51(cfg, DISC, CPU, 0))
    batch = random_batch(DISC, seed=1)
    obs, act, rew, discount, next_obs = tensors(batch)
    rows = torch.arange(len(act))
    with torch.no_grad():
        z = torch.linspace(-2, 2, 11)
        online_next = (c51.q(next_obs).softmax(-1) * z).sum(-1)
        target_next = c51.q_target(next_obs).softmax(-1)
        pick = (online_next if double_q else (target_next * z).sum(-1)).argmax(-1)
        m = categorical_projection(target_next[rows, pick], rew, discount, z)
        log_p = c51.q(obs)[rows, act].log_softmax(-1)
        per_sample = -(m * log_p).sum(-1)
        q_sa = (log_p.exp() * z).sum(-1)
    # the two selection rules disagree here: the test tells them apart
    assert not torch.equal(online_next.argmax(-1), (target_next * z).sum(-1).argmax(-1))
    report = c51.update(batch, progress=progress(0))
    assert report.stats.loss == pytest.approx(float(per_sample.mean()), rel=1e-5)
    assert report.stats.q_mean == pytest.approx(float(q_sa.mean()), rel=1e-5)
    assert report.priorities is not None and not report.priorities.requires_grad
    torch.testing.assert_close(report.priorities, per_sample)


def test_importance_weights_weight_the_loss_and_all_ones_is_the_plain_update():
    batch = random_batch(DISC, seed=2)
    n = len(batch.rew)
    weights = np.linspace(0.1, 2.0, n).astype(np.float32)
    runs = []
    for w in (weights, None, np.ones(n, np.float32)):
        torch.manual_seed(3)
        c51 = C51(C51Config(**SMALL), DISC, CPU, 0)
        runs.append((c51.update(dataclasses.replace(batch, weights=w), progress=progress(0)),
                     c51.state_dict()))
    (weighted, _), (plain, state), (ones, state_ones) = runs
    assert plain.priorities is not None
    expected = float((torch.from_numpy(weights) * plain.priorities).mean())
    assert weighted.stats.loss == pytest.approx(expected, rel=1e-5)
    assert plain.stats.loss == pytest.approx(float(plain.priorities.mean()), rel=1e-6)
    assert plain.stats == ones.stats and torch.equal(plain.priorities, ones.priorities)
    assert all(torch.equal(state[k], state_ones[k]) for k in state)


def test_c51_learns_a_one_step_return_distribution():
    """Every transition terminal with reward 1 or 3 (even odds) from one state: the learnt
    distribution of that action puts about half its mass at each."""
    torch.manual_seed(4)
    c51 = C51(C51Config(atoms=5, v_min=0.0, v_max=4.0, lr=1e-2, **SMALL), DISC, CPU, 0)
    n = 64
    rng = np.random.default_rng(0)
    obs = np.zeros((n, 3), np.float32)
    for step in range(300):
        batch = random_batch(DISC, n=n, seed=step)
        batch = dataclasses.replace(batch, obs=obs, act=np.zeros(n, np.int64),
                                    rew=rng.choice([1.0, 3.0], n).astype(np.float32),
                                    discount=np.zeros(n, np.float32))
        c51.update(batch, progress=progress(step, 300))
    with torch.no_grad():
        p = c51.q(torch.zeros(1, 3))[0, 0].softmax(-1)
    np.testing.assert_allclose(p.numpy(), [0, 0.5, 0, 0.5, 0], atol=0.08)


def test_bad_settings_are_refused_by_name():
    with pytest.raises(ConfigError, match=r"algo.atoms must be at least 2"):
        C51Config(atoms=1).check()
    with pytest.raises(ConfigError, match=r"algo.v_min=5.0 must be below algo.v_max=5.0"):
        C51Config(v_min=5.0, v_max=5.0).check()
    with pytest.raises(ConfigError, match=r"algo.noisy_sigma0 must be > 0"):
        RainbowConfig(noisy_sigma0=0.0).check()


@pytest.mark.parametrize(("bounds", "atoms", "dtype", "message"), [
    ((-1e300, 1e300), 51, torch.float32, r"must fit in float32"),
    ((-1e308, 1e308), 51, torch.float64, r"span \(inf\) must fit in float64"),
    ((-3e38, 3e38), 51, torch.float32, r"span \(6e\+38\) must fit"),
    ((0.0, 100.0), 100_000_000, torch.float32, r"algo.atoms=100,000,000 .* finer than float32"),
])
def test_a_support_the_precision_cannot_hold_is_refused_before_building(bounds, atoms, dtype,
                                                                        message):
    cfg = C51Config(atoms=atoms, v_min=bounds[0], v_max=bounds[1], **SMALL)
    cfg.check()  # each value is in range on its own
    with pytest.raises(ConfigError, match=message):
        check_support(cfg, dtype)


def test_a_wide_support_that_fits_builds_finite_and_increasing():
    cfg = C51Config(atoms=51, v_min=-1e38, v_max=1e38, **SMALL)
    check_support(cfg, torch.float32)
    support = C51(cfg, DISC, CPU, 0).support
    assert torch.isfinite(support).all() and (support.diff() > 0).all()


def test_rainbow_is_c51_with_every_option_on():
    spec = ALGORITHMS["rainbow"]
    assert spec.build is C51 and spec.config.__mro__[1] is C51Config and spec.prioritized
    cfg = RainbowConfig()
    differ = {f.name for f in dataclasses.fields(C51Config)
              if getattr(cfg, f.name) != getattr(C51Config(), f.name)}
    assert differ == {"name", "adam_eps", "n_step", "dueling", "noisy", "eps_start", "eps_end"}
    assert cfg.double_q and cfg.dueling and cfg.noisy and cfg.n_step == 3


def test_rainbow_composes_with_the_prioritized_buffer():
    shown = compose_run("algo=rainbow")
    assert shown.buffer.sampler == "prioritized" and shown.algo.dueling is True
    assert compose_run("algo=rainbow", "buffer=replay").buffer.sampler == "uniform"


def test_a_noisy_network_acts_greedily_with_its_mean_weights_and_explores_with_noise():
    torch.manual_seed(5)
    c51 = C51(RainbowConfig(**SMALL), DISC, CPU, 0)
    obs = np.random.default_rng(0).normal(size=(256, 3)).astype(np.float32)
    greedy = [c51.act(obs, deterministic=True, progress=progress(0)) for _ in range(2)]
    noisy = [c51.act(obs, deterministic=False, progress=progress(0)) for _ in range(2)]
    np.testing.assert_array_equal(greedy[0], greedy[1])
    assert (noisy[0] != noisy[1]).any()  # epsilon 0: the difference is the weight noise
    with torch.no_grad():
        expected = c51.actor()(torch.from_numpy(obs))
        np.testing.assert_array_equal(c51.deployable()(torch.from_numpy(obs)).numpy(),
                                      expected.argmax(-1).numpy())
    np.testing.assert_array_equal(greedy[0], expected.argmax(-1).numpy())


def test_the_training_state_holds_the_weight_noise():
    """A copy given the training state draws the same noise as the original from then on."""
    torch.manual_seed(6)
    a = C51(RainbowConfig(**SMALL), DISC, CPU, 0)
    a.update(random_batch(DISC, seed=0), progress=progress(0))
    b = C51(RainbowConfig(**SMALL), DISC, CPU, 1)
    b.load_training_state(a.training_state())
    obs = np.random.default_rng(1).normal(size=(64, 3)).astype(np.float32)
    np.testing.assert_array_equal(a.act(obs, deterministic=False, progress=progress(1)),
                                  b.act(obs, deterministic=False, progress=progress(1)))
    ra = a.update(random_batch(DISC, seed=1), progress=progress(1))
    rb = b.update(random_batch(DISC, seed=1), progress=progress(1))
    assert ra.stats == rb.stats


SMOKE = ["experiment=smoke", "logger.tensorboard=false", "trainer.epoch_num_steps=1024"]


@pytest.mark.parametrize("algo", ["c51", "rainbow"])
def test_the_exported_policy_argmaxes_the_expected_values(tmp_path, algo):
    """rltrain-export writes the deployable policy; its ONNX actions are the argmax of the
    expected values sum_j p_j z_j computed here from the loaded network (mean weights)."""
    import onnxruntime as ort

    run = tmp_path / "run"
    run_in_process(run, *SMOKE, f"algo={algo}")
    out = tmp_path / "policy.onnx"
    res = command(export.main, run, "--out", out)
    assert res.returncode == 0, res.stderr
    assert "identical on 256/256" in res.stdout
    loaded = open_run(run, "best")
    algorithm = loaded.algorithm
    obs = np.random.default_rng(2).uniform(-2, 2, size=(512, 4)).astype(np.float32)
    with torch.no_grad():
        logits = algorithm.q(torch.from_numpy(obs))
        expected = (logits.softmax(-1) * algorithm.support).sum(-1)
    (act,) = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(
        None, {"obs": obs})
    np.testing.assert_array_equal(act, expected.argmax(-1).numpy())


def test_sigterm_then_resume_of_a_noisy_c51_equals_the_unbroken_run(tmp_path):
    """Weight noise, epsilon's stream, priorities and the buffer resume bit for bit: Rainbow
    (noisy, prioritized) interrupted mid-epoch 2 and resumed writes the unbroken run's
    records."""
    args = ["algo=rainbow", "trainer.max_epochs=3", "trainer.epoch_num_steps=1024",
            "trainer.random_warmup_env_steps=256", "algo.target_update_interval=32",
            "trainer.update_step_num_gradient_steps_per_sample=0.25",
            "trainer.stop_score=null", "seed=1", "logger.progress_bar=false",
            "env.num_test_envs=2", "trainer.test_step_num_episodes=2",
            "logger.tensorboard=false", "trainer.batch_size=32"]
    full, broken = tmp_path / "full", tmp_path / "broken"
    run_in_process(full, *args)
    res = signal_when([*args, f"hydra.run.dir={broken}"], tmp_path,
                      lambda line: line.startswith("epoch   1/"), signal.SIGTERM)
    assert res.returncode == 143, res.stderr
    summary = json.loads((broken / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["env_step"] < 256 + 3 * 1024
    assert resume_in_process(broken) == (0, [])
    assert learning_records(broken) == learning_records(full)
