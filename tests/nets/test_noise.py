"""Coloured exploration noise (rltrain.nets.noise): unit marginal variance, the spectral slope it
promises, state that resumes exactly, and its use by the off-policy algorithms (the range of
noise_beta is checked with the other schema fields, in test_config.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rltrain.algorithms.ddpg import DDPG, DDPGConfig
from rltrain.algorithms.sac import SAC, SACConfig
from rltrain.common.types import Progress, SpaceInfo
from rltrain.nets.noise import ColoredNoise, colored_noise

BOX = SpaceInfo((3,), None, (2,), -np.ones(2, np.float32), np.ones(2, np.float32), None, "t",
                max_episode_steps=200)


def lag1(x: np.ndarray) -> float:
    """Mean lag-1 autocorrelation of the streams along the last axis."""
    x = x - x.mean(-1, keepdims=True)
    return float(((x[..., 1:] * x[..., :-1]).mean(-1) / x.var(-1)).mean())


@pytest.mark.parametrize("beta", [0.0, 1.0, 2.0])
def test_marginal_variance_is_one_and_the_spectrum_falls_as_one_over_f_to_beta(beta):
    x = colored_noise(beta, (400,), 1024, np.random.default_rng(0))
    assert x.shape == (400, 1024)
    # every step is marginally N(0, 1): the variance over streams, averaged over time
    assert abs(float(x.var(0).mean()) - 1.0) < 0.1
    # the log-log slope of the mean periodogram (above the lowest frequencies) is -beta
    power = (np.abs(np.fft.rfft(x, axis=-1)) ** 2).mean(0)
    f = np.fft.rfftfreq(1024)
    keep = slice(4, 400)
    slope = np.polyfit(np.log(f[keep]), np.log(power[keep]), 1)[0]
    assert slope == pytest.approx(-beta, abs=0.1)


def test_coloured_noise_keeps_its_direction_longer_than_white():
    rng = np.random.default_rng(1)
    white = lag1(colored_noise(0.0, (200,), 512, rng))
    pink = lag1(colored_noise(1.0, (200,), 512, rng))
    red = lag1(colored_noise(2.0, (200,), 512, rng))
    assert abs(white) < 0.02
    assert 0.3 < pink < red
    assert red > 0.9


def test_noise_streams_resume_exactly_across_chunks():
    noise = ColoredNoise(1.0, (3, 2), 16, seed=5)
    first = [noise() for _ in range(10)]
    state = noise.state_dict()
    rest = [noise() for _ in range(30)]  # crosses into two new chunks
    resumed = ColoredNoise.from_state_dict(state)
    assert all(np.array_equal(a, b) for a, b in zip(rest, [resumed() for _ in range(30)],
                                                    strict=True))
    assert first[0].shape == (3, 2) and first[0].dtype == np.float32
    # a new seed gives other streams
    assert not np.array_equal(first[0], ColoredNoise(1.0, (3, 2), 16, seed=6)())


@pytest.mark.parametrize("make", [
    lambda beta: SAC(SACConfig(hidden_sizes=[8], noise_beta=beta), BOX, torch.device("cpu"), 0),
    lambda beta: DDPG(DDPGConfig(hidden_sizes=[8], noise_beta=beta, exploration_noise=0.3),
                      BOX, torch.device("cpu"), 0),
])
def test_algorithms_explore_with_correlated_noise_and_checkpoint_it(make):
    """With noise_beta=2 successive training actions for the same observation stay close
    (white noise would jump); the noise's state is in the training state and resumes."""
    obs = np.zeros((4, 3), np.float32)
    progress = Progress(0, 0, 0.0)
    red, white = make(2.0), make(0.0)
    acts_red = np.stack([red.act(obs, deterministic=False, progress=progress)
                         for _ in range(64)])
    acts_white = np.stack([white.act(obs, deterministic=False, progress=progress)
                           for _ in range(64)])
    step_red = np.abs(np.diff(acts_red, axis=0)).mean()
    step_white = np.abs(np.diff(acts_white, axis=0)).mean()
    assert step_red < 0.3 * step_white
    state = red.training_state()
    assert state["noise"] is not None and white.training_state()["noise"] is None
    after = [red.act(obs, deterministic=False, progress=progress) for _ in range(5)]
    other = make(2.0)
    other.load_training_state(state)
    torch.manual_seed(0)  # SAC's head samples nothing else from torch here: the noise decides
    assert all(np.allclose(a, other.act(obs, deterministic=False, progress=progress))
               for a in after)
    # deterministic actions draw no noise
    before = red.noise.position
    red.act(obs, deterministic=True, progress=progress)
    assert red.noise.position == before
