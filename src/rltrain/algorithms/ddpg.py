"""DDPG: Lillicrap et al. 2016, "Continuous control with deep reinforcement learning"
(arXiv:1509.02971).

A deterministic tanh actor explored with Gaussian noise, one Q(s, a) critic, and target copies
of both, Polyak-averaged. TD3 (``td3.py``) builds on this class. Continuous actions in the
normalised space of :mod:`rltrain.actions`.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from rltrain.algorithms.base import OffPolicyAlgorithm, Progress, clip_and_step
from rltrain.algorithms.registry import CONTINUOUS, AlgoSpec, register
from rltrain.config import (
    AlgoConfig,
    ConfigError,
    check_network,
    check_noise_beta,
    check_positive,
    check_unit_interval,
)
from rltrain.data.buffers import Batch
from rltrain.envs import SpaceInfo
from rltrain.nets import DeterministicActor, QCritics
from rltrain.optim import Adam, flatten_parameters, soft_update


@dataclass
class DDPGConfig(AlgoConfig):
    """Deep Deterministic Policy Gradient (Lillicrap et al. 2016), off-policy."""

    name: str = "ddpg"
    #: hidden layer sizes of the actor and of the critic
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])
    activation: str = "relu"
    actor_lr: float = 1e-3
    critic_lr: float = 1e-3
    gamma: float = 0.99
    #: Polyak coefficient of the targets: target <- (1 - tau) target + tau online
    tau: float = 0.005
    #: n-step returns (1 = one-step TD)
    n_step: int = 1
    #: standard deviation of the Gaussian exploration noise, in the normalised action space
    #: (where the env's bounds are -1 and 1)
    exploration_noise: float = 0.1
    #: update the actor and the targets every this many gradient steps
    policy_delay: int = 1
    #: clip the global gradient norm of each network (null: no clipping)
    max_grad_norm: float | None = None
    #: colour of the exploration noise along time: 0 white (i.i.d., the usual), 1 pink,
    #: 2 red (rltrain.noise; Eberhard et al. 2023)
    noise_beta: float = 0.0

    def check(self) -> None:
        check_noise_beta(self)
        check_network(self)
        check_unit_interval(self, "algo", "gamma", "tau")
        check_positive(self, "algo", "actor_lr", "critic_lr", "tau", "n_step", "policy_delay",
                       "max_grad_norm")
        if not self.exploration_noise >= 0:
            raise ConfigError(f"algo.exploration_noise must be >= 0, got "
                              f"{self.exploration_noise}")


@dataclass(frozen=True)
class DDPGStats:
    critic_loss: float
    actor_loss: float
    q_mean: float


class DDPG(OffPolicyAlgorithm):
    #: critics evaluated as one ensemble; the target is the smallest of their values
    num_critics = 1

    def __init__(self, cfg: DDPGConfig, info: SpaceInfo, device: torch.device, seed: int
                 ) -> None:
        super().__init__(cfg, info, device, seed)
        d = info.action_dim
        self.pi = DeterministicActor(info.obs_dim, cfg.hidden_sizes, d, cfg.activation)
        self.critic = QCritics(info.obs_dim, d, cfg.hidden_sizes, cfg.activation,
                               n=self.num_critics)
        self.pi_target = copy.deepcopy(self.pi).requires_grad_(False)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.to(device)
        self.actor_optim = Adam(self.pi.parameters(), lr=cfg.actor_lr)
        self.critic_optim = Adam(self.critic.parameters(), lr=cfg.critic_lr)
        # the targets as flat tensors in their optimisers' order: one kernel per Polyak update
        self.pi_target_flat = flatten_parameters(self.pi_target.parameters())
        self.critic_target_flat = flatten_parameters(self.critic_target.parameters())
        self._actor_loss = math.nan

    def actor(self) -> nn.Module:
        return self.pi

    def optimizers(self) -> dict[str, Adam]:
        return {"actor": self.actor_optim, "critic": self.critic_optim}

    def _act(self, obs: np.ndarray, *, deterministic: bool, progress: Progress) -> np.ndarray:
        act = self.pi(self._obs(obs))
        if not deterministic:
            noise = self.exploration_noise(len(obs), self.cfg.noise_beta)
            noise = torch.randn_like(act) if noise is None else noise.reshape(act.shape)
            act = (act + noise.mul_(self.cfg.exploration_noise)).clamp_(-1.0, 1.0)
        return act.reshape(len(obs), *self.info.action_shape).cpu().numpy()

    def target_action(self, next_obs: torch.Tensor) -> torch.Tensor:
        """The action the TD target evaluates at the next state."""
        return self.pi_target(next_obs)

    def actor_loss(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """The actor's objective on a batch of states (and the batch's actions, which TD3+BC
        regresses onto): ascend the first critic's value of the actor's action."""
        return -self.critic(obs, self.pi(obs))[0].mean()

    def update(self, batch: Batch, *, progress: Progress) -> DDPGStats:
        cfg = self.cfg
        obs, next_obs = self._obs(batch.obs), self._obs(batch.next_obs)
        act = self._tensor(batch.act).reshape(len(obs), -1)

        # critic(s): regress onto the TD target of the (smallest) target critic
        with torch.no_grad():
            next_q = self.critic_target(next_obs, self.target_action(next_obs)).min(0).values
            target = (self._tensor(self._rew(batch.rew))
                      + self._tensor(batch.discount) * next_q)
        q = self.critic(obs, act)
        critic_loss = (q - target).pow(2).mean(1).sum()
        clip_and_step(critic_loss, self.critic_optim, cfg.max_grad_norm)

        # actor: its objective (actor_loss); then the targets follow
        if progress.gradient_step % cfg.policy_delay == 0:
            self.critic.requires_grad_(False)  # the actor's loss needs no critic gradients
            actor_loss = self.actor_loss(obs, act)
            clip_and_step(actor_loss, self.actor_optim, cfg.max_grad_norm)
            self.critic.requires_grad_(True)
            soft_update(self.pi_target_flat, self.actor_optim.flat, cfg.tau)
            soft_update(self.critic_target_flat, self.critic_optim.flat, cfg.tau)
            self._actor_loss = float(actor_loss.detach())
        return DDPGStats(float(critic_loss.detach()), self._actor_loss,
                         float(q.detach().mean()))


register(AlgoSpec(
    name="ddpg", config=DDPGConfig, cls=DDPG, trainers=("offpolicy",), actions=(CONTINUOUS,),
    console=(("critic_loss", "q_loss"), ("actor_loss", "pi"), ("q_mean", "q")),
    bounded_actions=True,
    paper="Lillicrap et al. 2016, arXiv:1509.02971",
))
