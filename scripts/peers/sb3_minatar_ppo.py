"""Stable-Baselines3's PPO on MinAtar with rltrain's tuned MinAtar settings and test protocol:
the reference run that docs/images.md sets beside rltrain's MinAtar PPO curve, where no paper
or library states a MinAtar PPO return at 1M frames as a number.

The settings are conf/tuned/ppo_minatar.yaml's (CleanRL's ppo_atari settings on the MinAtar
network): 8 envs x 128 steps, 4 passes in minibatches of 256, lr 2.5e-4 annealed linearly to 0
over the run, clip 0.1, value clip 0.1, entropy 0.01, value coefficient 0.5, gradient norm
0.5, gamma 0.99, GAE 0.95; the network is Young & Tian 2019's (one 16-channel 3x3 convolution,
a 128-unit layer), shared by the policy and the value heads, the 0/1 channels not rescaled.
The env is conf/env/minatar.yaml's: ``MinAtar/<Game>-v1`` (the minimal action set), sticky
actions 0.1, difficulty ramping, episodes capped at 10,000 steps, observations as uint8,
moved to channels first for the convolution. One torch thread.

Every 10,240 env steps (rltrain's epoch) the deterministic policy plays 10 episodes on 10
test envs (seeded 10,000 + the test's index): one JSON line per test (env steps, mean return,
seconds), appended to ``--out``.

    .venv/bin/python scripts/peers/sb3_minatar_ppo.py --game Breakout --seed 0 --out sb3.jsonl

Needs the minatar and bench extras: pip install -e ".[minatar,bench]".
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from rltrain.envs.wrappers import register_minatar

EPOCH = 10_240


class ChannelsFirst(gym.ObservationWrapper):
    """MinAtar's (10, 10, n) uint8 observation as (n, 10, 10)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        h, w, c = env.observation_space.shape
        self.observation_space = gym.spaces.Box(0, 1, (c, h, w), np.uint8)

    def observation(self, obs: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(obs.transpose(2, 0, 1))


class MinAtarTorso(BaseFeaturesExtractor):
    """Young & Tian 2019's network up to its 128-unit layer."""

    def __init__(self, space: gym.spaces.Box) -> None:
        super().__init__(space, features_dim=128)
        c, h, w = space.shape
        self.net = nn.Sequential(nn.Conv2d(c, 16, 3), nn.ReLU(), nn.Flatten(),
                                 nn.Linear(16 * (h - 2) * (w - 2), 128), nn.ReLU())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


def make(game: str):
    def build() -> gym.Env:
        env = gym.make(f"MinAtar/{game}-v1", sticky_action_prob=0.1, difficulty_ramping=True,
                       max_episode_steps=10_000)
        return ChannelsFirst(gym.wrappers.DtypeObservation(env, np.uint8))
    return build


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--game", default="Breakout")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=100 * EPOCH)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    register_minatar()
    torch.set_num_threads(1)
    env = make_vec_env(make(args.game), n_envs=8, seed=args.seed)
    model = PPO("CnnPolicy", env, n_steps=128, batch_size=256, n_epochs=4,
                learning_rate=lambda remaining: 2.5e-4 * remaining, clip_range=0.1,
                clip_range_vf=0.1, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5, gamma=0.99,
                gae_lambda=0.95, seed=args.seed, device="cpu", verbose=0,
                policy_kwargs=dict(features_extractor_class=MinAtarTorso, normalize_images=False,
                                   net_arch=dict(pi=[], vf=[])))
    start, tested = time.perf_counter(), [0.0]

    def test(k: int) -> None:
        t0 = time.perf_counter()
        tenv = make_vec_env(make(args.game), n_envs=10, seed=10_000 + k)
        mean, std = evaluate_policy(model, tenv, n_eval_episodes=10, deterministic=True)
        tenv.close()
        tested[0] += time.perf_counter() - t0
        row = {"game": args.game, "seed": args.seed, "env_step": model.num_timesteps,
               "test_return": float(mean), "test_std": float(std),
               "seconds": time.perf_counter() - start, "test_seconds": tested[0]}
        with args.out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)

    class Tests(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next = EPOCH

        def _on_step(self) -> bool:
            if self.model.num_timesteps >= self.next:
                test(self.next // EPOCH)
                self.next += EPOCH
            return True

    model.learn(args.steps, callback=Tests())


if __name__ == "__main__":
    main()
