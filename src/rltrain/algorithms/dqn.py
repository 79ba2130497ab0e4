"""DQN: Mnih et al. 2015, "Human-level control through deep reinforcement learning".

With a target network, double Q-learning (van Hasselt et al. 2016, arXiv:1509.06461),
the Huber loss, n-step returns (computed by the buffer) and a linearly annealed
epsilon-greedy policy. Discrete actions only.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rltrain.algorithms.base import OffPolicyAlgorithm, Progress, clip_and_step
from rltrain.config import DQNConfig
from rltrain.data.buffers import Batch
from rltrain.envs import SpaceInfo
from rltrain.nets import mlp
from rltrain.optim import Adam


@dataclass(frozen=True)
class DQNStats:
    loss: float
    q_mean: float
    epsilon: float


class QNetwork(nn.Module):
    def __init__(self, cfg: DQNConfig, info: SpaceInfo) -> None:
        super().__init__()
        self.net = mlp(info.obs_dim, cfg.hidden_sizes, info.action_dim, cfg.activation, 1.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs.flatten(1))


class DQN(OffPolicyAlgorithm):
    def __init__(self, cfg: DQNConfig, info: SpaceInfo, device: torch.device, seed: int) -> None:
        super().__init__(device)
        self.cfg = cfg
        self.num_actions = info.action_dim
        self.q = QNetwork(cfg, info)
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.to(device)
        self.optim = Adam(self.q.parameters(), lr=cfg.lr)
        # exploration randomness, separate from torch's so that acting greedily
        # (testing) never shifts the training stream
        self.rng = np.random.default_rng(seed)

    def policy_module(self) -> nn.Module:
        return self.q

    def optimizers(self) -> dict[str, Adam]:
        return {"optim": self.optim}

    def epsilon(self, fraction: float) -> float:
        cfg = self.cfg
        if cfg.exploration_fraction <= 0:
            return cfg.eps_end
        t = min(fraction / cfg.exploration_fraction, 1.0)
        return cfg.eps_start + t * (cfg.eps_end - cfg.eps_start)

    def _act(self, obs: np.ndarray, *, deterministic: bool, progress: Progress) -> np.ndarray:
        greedy = self.q(self._tensor(obs)).argmax(-1).cpu().numpy()
        if deterministic:
            return greedy
        explore = self.rng.random(len(obs)) < self.epsilon(progress.fraction)
        return np.where(explore, self.rng.integers(self.num_actions, size=len(obs)), greedy)

    def update(self, batch: Batch, *, progress: Progress) -> DQNStats:
        cfg = self.cfg
        obs, next_obs = self._tensor(batch.obs), self._tensor(batch.next_obs)
        act = self._tensor(batch.act, torch.long)
        with torch.no_grad():
            next_q_target = self.q_target(next_obs)
            if cfg.double_q:
                next_act = self.q(next_obs).argmax(-1, keepdim=True)
                next_v = next_q_target.gather(1, next_act).squeeze(1)
            else:
                next_v = next_q_target.max(-1).values
            target = self._tensor(batch.rew) + self._tensor(batch.discount) * next_v
        q_sa = self.q(obs).gather(1, act.unsqueeze(1)).squeeze(1)
        loss = F.smooth_l1_loss(q_sa, target, beta=cfg.huber_delta)
        clip_and_step(loss, self.optim, cfg.max_grad_norm)
        if (progress.gradient_step + 1) % cfg.target_update_interval == 0:
            self.q_target.load_state_dict(self.q.state_dict())
        q_mean = float(q_sa.detach().mean())
        return DQNStats(float(loss.detach()), q_mean, self.epsilon(progress.fraction))

    def training_state(self) -> dict[str, Any]:
        return {**super().training_state(), "rng": self.rng.bit_generator.state}

    def load_training_state(self, state: dict[str, Any]) -> None:
        super().load_training_state(state)
        self.rng.bit_generator.state = state["rng"]
