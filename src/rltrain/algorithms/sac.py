"""SAC: Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications"
(arXiv:1812.05905), the version with automatic entropy tuning.

A tanh-squashed Gaussian actor, twin Q critics with Polyak-averaged targets (the clipped double
Q of Fujimoto et al. 2018: the smaller of the two target values), and a temperature alpha
tuned so that the policy's entropy tracks a target (-|A| by default). Continuous actions in
the normalised space of :mod:`rltrain.spaces.actions`.
"""

from __future__ import annotations

import copy
import math
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
from rltrain.config.schemas import TDConfig, check_noise_beta, check_positive, check_unit_interval
from rltrain.data.batch import Batch
from rltrain.nets.actors_critics import QCritics, SquashedGaussianActor
from rltrain.nets.optim import Adam, flatten_parameters, soft_update


@dataclass
class SoftConfig(TDConfig):
    """What SAC and discrete SAC share: an actor, twin critics with target copies and an
    entropy temperature, each with its own Adam."""

    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    #: learning rate of log(alpha) (with autotune)
    alpha_lr: float = 3e-4
    #: Polyak coefficient of the target critics: target <- (1 - tau) target + tau critic
    #: (1 with a long target_update_interval: periodic copies, as CleanRL's sac_atari does)
    tau: float = 0.005
    #: update the target critics every this many gradient steps
    target_update_interval: int = 1
    #: the entropy temperature at the start (and throughout, without autotune)
    init_alpha: float = 1.0
    #: tune alpha so that the policy's entropy tracks its target
    autotune: bool = True
    #: clip the global gradient norm of each network (null: no clipping)
    max_grad_norm: float | None = None

    def check(self) -> None:
        super().check()
        check_unit_interval(self, "algo", "tau")
        check_positive(self, "algo", "actor_lr", "critic_lr", "alpha_lr", "tau", "init_alpha",
                       "target_update_interval", "max_grad_norm")


@dataclass
class SACConfig(SoftConfig):
    """Soft Actor-Critic (Haarnoja et al. 2018), off-policy, continuous actions."""

    name: str = "sac"
    #: the entropy target (null: -|A|, the number of action dimensions, negated)
    target_entropy: float | None = None
    #: update the actor (and alpha) every this many gradient steps
    policy_delay: int = 1
    #: colour of the policy's sampling noise along time while collecting: 0 white (i.i.d.,
    #: the usual), 1 pink, 2 red (rltrain.nets.noise; Eberhard et al. 2023)
    noise_beta: float = 0.0

    def check(self) -> None:
        super().check()
        check_positive(self, "algo", "policy_delay")
        check_noise_beta(self)


@dataclass(frozen=True)
class SACStats:
    critic_loss: Stat
    #: None on a gradient step that leaves the actor alone (policy_delay), as are alpha_loss
    #: and entropy
    actor_loss: Stat | None
    alpha_loss: Stat | None
    alpha: Stat
    #: the policy's entropy estimate, -mean log pi(a|s) over the batch
    entropy: Stat | None
    q_mean: Stat


class SoftActorCritic(TDAlgorithm):
    """The parts SAC and discrete SAC share: the target critics, the temperature and the
    optimisers (:meth:`build_nets`), the temperature's step and the target updates."""

    cfg: SoftConfig
    pi: nn.Module

    def build_nets(self, pi: nn.Module, critic: nn.Module, target_entropy: float) -> None:
        """Adopt the actor and the critics, make the target critics and the temperature, and
        the optimisers (after moving everything to the device)."""
        cfg = self.cfg
        self.pi, self.critic = pi, critic
        self.critic_target = copy.deepcopy(critic).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(cfg.init_alpha)),
                                      requires_grad=cfg.autotune)
        self.to(self.device)
        self.actor_optim = Adam(self.pi.parameters(), lr=cfg.actor_lr)
        self.critic_optim = Adam(self.critic.parameters(), lr=cfg.critic_lr)
        self.alpha_optim = Adam([self.log_alpha], lr=cfg.alpha_lr) if cfg.autotune else None
        # the target critics' parameters as one flat tensor, in the same order as the critic
        # optimiser's flat buffer: a Polyak update is then one kernel
        self.critic_target_flat = flatten_parameters(self.critic_target.parameters())
        self.target_entropy = target_entropy

    def actor(self) -> nn.Module:
        return self.pi

    def optimizers(self) -> dict[str, Adam]:
        optims = {"actor": self.actor_optim, "critic": self.critic_optim}
        if self.alpha_optim is not None:
            optims["alpha"] = self.alpha_optim
        return optims

    def temperature_step(self, entropy: torch.Tensor) -> torch.Tensor:
        """One step of the temperature towards the entropy target, given the policy's entropy
        (detached); returns its loss, -log(alpha) * (target - entropy). The loss's gradient
        with respect to log(alpha), entropy - target, is written out (no autograd pass):
        entropy above the target lowers alpha, below it raises alpha."""
        gap = self.target_entropy - entropy
        loss = -self.log_alpha.detach() * gap  # at the temperature before its step
        if self.alpha_optim is not None:
            self.alpha_optim.zero_grad()
            self.alpha_optim.grad.copy_(-gap.reshape(1))
            self.alpha_optim.step()
        return loss

    def update_targets(self, progress: Progress) -> None:
        """Polyak-average the target critics every target_update_interval gradient steps."""
        if (progress.gradient_step + 1) % self.cfg.target_update_interval == 0:
            soft_update(self.critic_target_flat, self.critic_optim.flat, self.cfg.tau)


class SAC(SoftActorCritic):
    cfg: SACConfig
    pi: SquashedGaussianActor
    critic: QCritics

    def __init__(self, cfg: SACConfig, info: SpaceInfo, device: torch.device, seed: int) -> None:
        super().__init__(cfg, info, device, seed)
        d = info.action_dim
        self.build_nets(
            SquashedGaussianActor(self.encoder(), cfg.hidden_sizes, d, cfg.activation),
            QCritics(self.encoder(), d, cfg.hidden_sizes, cfg.activation, n=2),
            -float(d) if cfg.target_entropy is None else float(cfg.target_entropy))

    def _act(self, obs: np.ndarray, *, deterministic: bool, progress: Progress) -> np.ndarray:
        noise = None if deterministic else self.exploration_noise(len(obs), self.cfg.noise_beta)
        act = acting(self, "action")(self._obs(obs), deterministic, noise)
        return act.reshape(len(obs), *self.info.action_shape).cpu().numpy()

    def action(self, x: torch.Tensor, deterministic: bool, noise: torch.Tensor | None
               ) -> torch.Tensor:
        """The action for observations ``x`` (as the networks take them): tanh of the mean, or
        one drawn with the standard normal ``noise`` (None: white noise, drawn here)."""
        return self.pi(x) if deterministic else self.pi.sample(x, noise)[0]

    def update(self, batch: Batch, *, progress: Progress) -> UpdateReport:
        cfg = self.cfg
        obs, act, rew, discount, next_obs = self.tensors(batch)
        weights = self.batch_weights(batch)
        alpha = self.log_alpha.detach().exp()
        # critics: regress both onto the soft TD target, each sample's squared error weighted
        # by its importance-sampling weight (prioritised replay; none under uniform sampling)
        critic_loss, q, td_error = compiled(self, "critic_loss")(obs, act, rew, discount,
                                                                 next_obs, alpha, weights)
        clip_and_step(critic_loss, self.critic_optim, cfg.max_grad_norm)
        actor_loss, alpha_loss, entropy = self.policy_and_targets(obs, alpha, progress)
        return UpdateReport(SACStats(self.stat(critic_loss), self.stat(actor_loss),
                                     self.stat(alpha_loss), self.stat(alpha), self.stat(entropy),
                                     self.stat(q.detach().mean())),
                            priorities=td_priorities(td_error))

    def critic_loss(self, obs: torch.Tensor, act: torch.Tensor, rew: torch.Tensor,
                    discount: torch.Tensor, next_obs: torch.Tensor, alpha: torch.Tensor,
                    weights: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor,
                                                           torch.Tensor]:
        """Both critics' loss against the soft TD target, each sample's squared error
        weighted by ``weights`` (prioritised replay; None: the plain mean); returns it, the
        critics' values at the batch's actions and their TD errors, ``(2, batch)``."""
        target = self.td_target(rew, discount, next_obs, alpha, entropy_bonus=True)
        q = self.critic(obs, act)
        td_error = q - target
        return weighted_mean(td_error.pow(2), weights).sum(), q, td_error

    def actor_loss(self, obs: torch.Tensor, alpha: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """alpha log pi(a|s) - min_i Q_i(s, a), a ~ pi(.|s), averaged; and the log pi(a|s)."""
        new_act, logp = self.pi.sample(obs)
        return (alpha * logp - self.critic(obs, new_act).min(0).values).mean(), logp

    def td_target(self, rew: torch.Tensor, discount: torch.Tensor, next_obs: torch.Tensor,
                  alpha: torch.Tensor, *, entropy_bonus: bool) -> torch.Tensor:
        """r + discount * (min_i Q'_i(s', a') - alpha log pi(a'|s')), a' ~ pi(.|s'): the smaller
        target critic's value of the policy's next action, with the entropy bonus of soft
        Q-learning (``entropy_bonus``; CQL may leave it out)."""
        with torch.no_grad():
            next_act, next_logp = self.pi.sample(next_obs)
            next_q = self.critic_target(next_obs, next_act).min(0).values
            return rew + discount * (next_q - alpha * next_logp if entropy_bonus else next_q)

    def policy_and_targets(self, obs: torch.Tensor, alpha: torch.Tensor, progress: Progress
                           ) -> tuple[torch.Tensor | None, ...]:
        """After the critics' step: the actor and the temperature every policy_delay gradient
        steps, the target critics every target_update_interval. Returns the actor's loss, the
        temperature's and the entropy estimate (None on steps without an actor update)."""
        cfg = self.cfg
        actor_loss = alpha_loss = entropy = None
        if progress.gradient_step % cfg.policy_delay == 0:
            with frozen(self.critic):  # the actor's loss needs no critic gradients
                actor_loss, logp = compiled(self, "actor_loss")(obs, alpha)
                clip_and_step(actor_loss, self.actor_optim, cfg.max_grad_norm)
            entropy = -logp.detach().mean()
            alpha_loss = self.temperature_step(entropy)
        self.update_targets(progress)
        return actor_loss, alpha_loss, entropy


register(AlgoSpec(
    name="sac", config=SACConfig, build=SAC, trainers=("offpolicy",), actions=(CONTINUOUS,),
    console=(("critic_loss", "q_loss"), ("actor_loss", "pi"), ("alpha", "alpha"),
             ("entropy", "ent")),
    bounded_actions=True,
    paper="Haarnoja et al. 2018, arXiv:1812.05905",
    prioritized=True, compiles=True,
))
