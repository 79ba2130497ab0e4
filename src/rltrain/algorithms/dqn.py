"""DQN: Mnih et al. 2015, "Human-level control through deep reinforcement learning".

With a target network, double Q-learning (van Hasselt et al. 2016, arXiv:1509.06461),
the Huber loss, n-step returns (rltrain.data.returns, in the batches it samples) and a linearly
annealed epsilon-greedy policy. Discrete actions only.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rltrain.algorithms.base import TDAlgorithm, UpdateReport, clip_and_step
from rltrain.algorithms.registry import DISCRETE, AlgoSpec, register
from rltrain.config import ConfigError, TDConfig, check_positive, check_unit_interval
from rltrain.core import Progress, SpaceInfo
from rltrain.data.buffers import Batch
from rltrain.encoders import Encoder
from rltrain.nets import EncodedMLP
from rltrain.optim import Adam


@dataclass
class DQNConfig(TDConfig):
    """Deep Q-Network (Mnih et al. 2015) with double Q (van Hasselt et al. 2016), off-policy."""

    name: str = "dqn"
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    lr: float = 1e-3
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
        super().check()
        check_unit_interval(self, "algo", "eps_start", "eps_end", "exploration_fraction")
        check_positive(self, "algo", "lr", "target_update_interval", "huber_delta",
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
    """Q(s, .) over the discrete actions."""

    def __init__(self, encoder: Encoder, cfg: DQNConfig, num_actions: int) -> None:
        super().__init__()
        self.net = EncodedMLP(encoder, cfg.hidden_sizes, num_actions, cfg.activation, 1.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


class DQN(TDAlgorithm):
    cfg: DQNConfig

    def __init__(self, cfg: DQNConfig, info: SpaceInfo, device: torch.device, seed: int) -> None:
        super().__init__(cfg, info, device, seed)
        self.num_actions = info.action_dim
        self.q = QNetwork(self.encoder(), cfg, info.action_dim)
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

    def td_target(self, rew: torch.Tensor, discount: torch.Tensor, next_obs: torch.Tensor
                  ) -> torch.Tensor:
        """r + discount * V(s'), V(s') from the target network at the action the online network
        picks (double Q) or at the target's own best action."""
        with torch.no_grad():
            next_q_target = self.q_target(next_obs)
            if self.cfg.double_q:
                next_act = self.q(next_obs).argmax(-1, keepdim=True)
                next_v = next_q_target.gather(1, next_act).squeeze(1)
            else:
                next_v = next_q_target.max(-1).values
            return rew + discount * next_v

    def follow_target(self, progress: Progress) -> None:
        """Copy the online network to the target every target_update_interval gradient steps."""
        if (progress.gradient_step + 1) % self.cfg.target_update_interval == 0:
            self.q_target.load_state_dict(self.q.state_dict())

    def update(self, batch: Batch, *, progress: Progress) -> UpdateReport:
        cfg = self.cfg
        obs, act, rew, discount, next_obs = self.tensors(batch)
        target = self.td_target(rew, discount, next_obs)
        q_sa = self.q(obs).gather(1, act.unsqueeze(1)).squeeze(1)
        loss = F.smooth_l1_loss(q_sa, target, beta=cfg.huber_delta)
        clip_and_step(loss, self.optim, cfg.max_grad_norm)
        self.follow_target(progress)
        return UpdateReport(DQNStats(float(loss.detach()), float(q_sa.detach().mean()),
                                     self.epsilon(progress.fraction)))

    def training_state(self) -> dict[str, Any]:
        return {**super().training_state(), "rng": self.rng.bit_generator.state}

    def load_training_state(self, state: dict[str, Any]) -> None:
        super().load_training_state(state)
        self.rng.bit_generator.state = state["rng"]


register(AlgoSpec(
    name="dqn", config=DQNConfig, build=DQN, trainers=("offpolicy",), actions=(DISCRETE,),
    console=(("loss", "loss"), ("q_mean", "q"), ("epsilon", "eps")),
    paper="Mnih et al. 2015, Nature 518:529-533",
))
