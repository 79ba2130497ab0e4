"""DQN: Mnih et al. 2015, "Human-level control through deep reinforcement learning".

With a target network, double Q-learning (van Hasselt et al. 2016, arXiv:1509.06461),
the Huber loss, n-step returns (computed by the buffer) and a linearly annealed
epsilon-greedy policy. Discrete actions only.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rltrain.algorithms.base import OffPolicyAlgorithm, Progress, clip_and_step
from rltrain.algorithms.registry import DISCRETE, AlgoSpec, register
from rltrain.config import (
    AlgoConfig,
    ConfigError,
    check_network,
    check_positive,
    check_unit_interval,
)
from rltrain.data.buffers import Batch
from rltrain.envs import SpaceInfo
from rltrain.nets import mlp
from rltrain.optim import Adam


@dataclass
class DQNConfig(AlgoConfig):
    """Deep Q-Network (Mnih et al. 2015) with double Q (van Hasselt et al. 2016), off-policy."""

    name: str = "dqn"
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    activation: str = "relu"
    lr: float = 1e-3
    gamma: float = 0.99
    #: n-step returns (1 = one-step TD)
    n_step: int = 1
    #: use the online network to pick the next action, the target network to value it
    double_q: bool = True
    #: copy the online network to the target every this many gradient steps
    target_update_interval: int = 500
    #: Huber loss threshold (smooth L1 beta)
    huber_delta: float = 1.0
    max_grad_norm: float | None = 10.0
    #: epsilon-greedy exploration, annealed linearly from start to end over
    #: exploration_fraction of the planned env steps
    eps_start: float = 1.0
    eps_end: float = 0.05
    exploration_fraction: float = 0.2

    def check(self) -> None:
        check_network(self)
        check_unit_interval(self, "algo", "gamma", "eps_start", "eps_end",
                            "exploration_fraction")
        check_positive(self, "algo", "lr", "n_step", "target_update_interval", "huber_delta",
                       "max_grad_norm")

    def check_plan(self, gradient_steps: float) -> None:
        if self.target_update_interval > gradient_steps:
            raise ConfigError(
                f"algo.target_update_interval={self.target_update_interval:,} is more than the "
                f"run's ~{gradient_steps:,.0f} gradient steps: the target network would never "
                "be updated; lower it or train longer")


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
        return self.net(obs)


class DQN(OffPolicyAlgorithm):
    def __init__(self, cfg: DQNConfig, info: SpaceInfo, device: torch.device, seed: int) -> None:
        super().__init__(cfg, info, device, seed)
        self.num_actions = info.action_dim
        self.q = QNetwork(cfg, info)
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.to(device)
        self.optim = Adam(self.q.parameters(), lr=cfg.lr)
        # exploration randomness, separate from torch's so that acting greedily
        # (testing) never shifts the training stream
        self.rng = np.random.default_rng(seed)

    def actor(self) -> nn.Module:
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
        greedy = self.q(self._obs(obs)).argmax(-1).cpu().numpy()
        if deterministic:
            return greedy
        explore = self.rng.random(len(obs)) < self.epsilon(progress.fraction)
        return np.where(explore, self.rng.integers(self.num_actions, size=len(obs)), greedy)

    def td_loss(self, q_sa: torch.Tensor, target: torch.Tensor, q_all: torch.Tensor
                ) -> torch.Tensor:
        """The loss of Q(s, a) at the batch's actions against the TD target: Huber. ``q_all``
        (batch, actions), every action's value, is for the penalties subclasses add (CQL)."""
        return F.smooth_l1_loss(q_sa, target, beta=self.cfg.huber_delta)

    def update(self, batch: Batch, *, progress: Progress) -> DQNStats:
        cfg = self.cfg
        obs, next_obs = self._obs(batch.obs), self._obs(batch.next_obs)
        act = self._tensor(batch.act, torch.long)
        with torch.no_grad():
            next_q_target = self.q_target(next_obs)
            if cfg.double_q:
                next_act = self.q(next_obs).argmax(-1, keepdim=True)
                next_v = next_q_target.gather(1, next_act).squeeze(1)
            else:
                next_v = next_q_target.max(-1).values
            target = self._tensor(self._rew(batch.rew)) + self._tensor(batch.discount) * next_v
        q_all = self.q(obs)
        q_sa = q_all.gather(1, act.unsqueeze(1)).squeeze(1)
        loss = self.td_loss(q_sa, target, q_all)
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


register(AlgoSpec(
    name="dqn", config=DQNConfig, cls=DQN, trainers=("offpolicy",), actions=(DISCRETE,),
    console=(("loss", "loss"), ("q_mean", "q"), ("epsilon", "eps")),
    paper="Mnih et al. 2015, Nature 518:529-533",
))
