"""DDPG: Lillicrap et al. 2016, "Continuous control with deep reinforcement learning"
(arXiv:1509.02971).

A deterministic tanh actor explored with Gaussian noise, one Q(s, a) critic, and target copies
of both, Polyak-averaged. TD3 (``td3.py``) builds on this class. Continuous actions in the
normalised space of :mod:`rltrain.spaces.actions`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from rltrain.algorithms.base import (
    Stat,
    TDAlgorithm,
    UpdateReport,
    acting,
    clip_and_step,
    compiled,
    frozen,
    td_priorities,
    weighted_mean,
)
from rltrain.algorithms.registry import CONTINUOUS, AlgoSpec, register
from rltrain.common.types import Progress, SpaceInfo
from rltrain.config.schemas import (
    ConfigError,
    TDConfig,
    check_noise_beta,
    check_positive,
    check_unit_interval,
)
from rltrain.data.batch import Batch
from rltrain.nets.actors_critics import DeterministicActor, QCritics
from rltrain.nets.optim import Adam, flatten_parameters, soft_update


@dataclass
class DDPGConfig(TDConfig):
    """Deep Deterministic Policy Gradient (Lillicrap et al. 2016), off-policy."""

    name: str = "ddpg"
    actor_lr: float = 1e-3
    critic_lr: float = 1e-3
    #: Polyak coefficient of the targets: target <- (1 - tau) target + tau online
    tau: float = 0.005
    #: standard deviation of the Gaussian exploration noise, in the normalised action space
    #: (where the env's bounds are -1 and 1)
    exploration_noise: float = 0.1
    #: update the actor and the targets every this many gradient steps
    policy_delay: int = 1
    #: clip the global gradient norm of each network (null: no clipping)
    max_grad_norm: float | None = None
    #: colour of the exploration noise along time: 0 white (i.i.d., the usual), 1 pink,
    #: 2 red (rltrain.nets.noise; Eberhard et al. 2023)
    noise_beta: float = 0.0

    def check(self) -> None:
        super().check()
        check_noise_beta(self)
        check_unit_interval(self, "algo", "tau")
        check_positive(self, "algo", "actor_lr", "critic_lr", "tau", "policy_delay",
                       "max_grad_norm")
        if not self.exploration_noise >= 0:
            raise ConfigError(f"algo.exploration_noise must be >= 0, got "
                              f"{self.exploration_noise}")


@dataclass(frozen=True)
class DDPGStats:
    critic_loss: Stat
    #: None on a gradient step that leaves the actor alone (policy_delay)
    actor_loss: Stat | None
    q_mean: Stat


class DDPG(TDAlgorithm):
    cfg: DDPGConfig
    #: critics evaluated as one ensemble
    num_critics = 1

    def __init__(self, cfg: DDPGConfig, info: SpaceInfo, device: torch.device, seed: int
                 ) -> None:
        super().__init__(cfg, info, device, seed)
        d = info.action_dim
        self.pi = DeterministicActor(self.encoder(), cfg.hidden_sizes, d, cfg.activation)
        self.critic = QCritics(self.encoder(), d, cfg.hidden_sizes, cfg.activation,
                               n=self.num_critics)
        self.pi_target = copy.deepcopy(self.pi).requires_grad_(False)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.to(device)
        self.actor_optim = Adam(self.pi.parameters(), lr=cfg.actor_lr)
        self.critic_optim = Adam(self.critic.parameters(), lr=cfg.critic_lr)
        # the targets as flat tensors in their optimisers' order: one kernel per Polyak update
        self.pi_target_flat = flatten_parameters(self.pi_target.parameters())
        self.critic_target_flat = flatten_parameters(self.critic_target.parameters())

    def actor(self) -> nn.Module:
        return self.pi

    def optimizers(self) -> dict[str, Adam]:
        return {"actor": self.actor_optim, "critic": self.critic_optim}

    def _act(self, obs: np.ndarray, *, deterministic: bool, progress: Progress) -> np.ndarray:
        noise = None if deterministic else self.exploration_noise(len(obs), self.cfg.noise_beta)
        act = acting(self, "action")(self._obs(obs), deterministic, noise)
        return act.reshape(len(obs), *self.info.action_shape).cpu().numpy()

    def action(self, x: torch.Tensor, deterministic: bool, noise: torch.Tensor | None
               ) -> torch.Tensor:
        """The action for observations ``x`` (as the networks take them): the actor's, or with
        ``exploration_noise`` times the standard normal ``noise`` added (None: white noise,
        drawn here), clipped to [-1, 1]. Out of place: a compiled graph that wrote into its
        input would not replay as a CUDA graph."""
        act = self.pi(x)
        if deterministic:
            return act
        noise = torch.randn_like(act) if noise is None else noise.reshape(act.shape)
        return (act + noise * self.cfg.exploration_noise).clamp(-1.0, 1.0)

    def actor_step(self, obs: torch.Tensor) -> torch.Tensor:
        """The deterministic policy gradient: ascend the first critic's value of the actor's
        action, Q1(s, pi(s)); then the targets follow. Returns the actor's loss."""
        with frozen(self.critic):  # the actor's loss needs no critic gradients
            actor_loss = compiled(self, "actor_loss")(obs)
            clip_and_step(actor_loss, self.actor_optim, self.cfg.max_grad_norm)
        self.follow_targets()
        return actor_loss

    def actor_loss(self, obs: torch.Tensor) -> torch.Tensor:
        """-Q1(s, pi(s)), averaged over the batch."""
        return -self.critic(obs, self.pi(obs))[0].mean()

    def critic_loss(self, obs: torch.Tensor, act: torch.Tensor, rew: torch.Tensor,
                    discount: torch.Tensor, next_obs: torch.Tensor,
                    weights: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor,
                                                           torch.Tensor]:
        """The critic's loss against r + discount * Q'(s', pi'(s')) (both targets), each
        sample's squared error weighted by ``weights`` (prioritised replay; None: the plain
        mean); returns it, the critics' values at the batch's actions and their TD errors,
        both ``(critics, batch)``."""
        with torch.no_grad():
            target = rew + discount * self.critic_target(next_obs, self.pi_target(next_obs))[0]
        q = self.critic(obs, act)
        td_error = q - target
        return weighted_mean(td_error.pow(2), weights).sum(), q, td_error

    def follow_targets(self) -> None:
        soft_update(self.pi_target_flat, self.actor_optim.flat, self.cfg.tau)
        soft_update(self.critic_target_flat, self.critic_optim.flat, self.cfg.tau)

    def update(self, batch: Batch, *, progress: Progress) -> UpdateReport:
        cfg = self.cfg
        obs, act, rew, discount, next_obs = self.tensors(batch)
        critic_loss, q, td_error = compiled(self, "critic_loss")(
            obs, act, rew, discount, next_obs, self.batch_weights(batch))
        clip_and_step(critic_loss, self.critic_optim, cfg.max_grad_norm)
        # actor (and targets), every policy_delay gradient steps
        actor_loss = None
        if progress.gradient_step % cfg.policy_delay == 0:
            actor_loss = self.actor_step(obs)
        return UpdateReport(DDPGStats(self.stat(critic_loss), self.stat(actor_loss),
                                      self.stat(q.detach().mean())),
                            priorities=td_priorities(td_error))


register(AlgoSpec(
    name="ddpg", config=DDPGConfig, build=DDPG, trainers=("offpolicy",), actions=(CONTINUOUS,),
    console=(("critic_loss", "q_loss"), ("actor_loss", "pi"), ("q_mean", "q")),
    bounded_actions=True,
    paper="Lillicrap et al. 2016, arXiv:1509.02971",
    prioritized=True, compiles=True,
))
