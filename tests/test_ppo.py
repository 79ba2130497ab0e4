"""PPO's acting path (its actors' maths is tested in test_nets.py)."""

import numpy as np
import torch

from rltrain.algorithms.ppo import PPOConfig
from rltrain.envs import SpaceInfo


def test_act_takes_float64_and_reversed_observations():
    """The per-step tensor fast path falls back for arrays torch cannot share (negative
    strides) and converts dtypes; the actions equal those for a plain float32 copy."""
    from rltrain.algorithms import Progress
    from rltrain.algorithms.ppo import PPO

    torch.manual_seed(5)
    info = SpaceInfo((3,), 4, (), None, None, None, "x")
    ppo = PPO(PPOConfig(), info, torch.device("cpu"), seed=0)
    obs = np.random.default_rng(0).normal(size=(6, 3))[::-1]  # float64, negative stride
    got = ppo.act(obs, deterministic=True, progress=Progress(0, 0, 0.0))
    want = ppo.act(np.ascontiguousarray(obs, np.float32), deterministic=True,
                   progress=Progress(0, 0, 0.0))
    np.testing.assert_array_equal(got, want)
    assert got.shape == (6,)
