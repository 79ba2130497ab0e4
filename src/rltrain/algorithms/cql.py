"""CQL: Kumar et al. 2020, "Conservative Q-Learning for Offline Reinforcement Learning"
(arXiv:2006.04779), the CQL(H) variant with a fixed weight alpha (no Lagrange tuning).

Q-learning from a fixed dataset overestimates the actions the data never took. CQL adds to the
critic's loss a term that pushes Q down on actions drawn from a broad distribution (a soft
maximum, logsumexp, over actions) and up on the dataset's actions:

    cql_alpha * (logsumexp_a Q(s, a) - Q(s, a_data)).mean()

- Continuous actions, on SAC (``sac.py``): the logsumexp over a continuous space is estimated by
  importance sampling, as in the paper's appendix F and its official code (min_q_version=3):
  N actions uniform in [-1, 1]^d, N from pi(.|s) and N from pi(.|s'), all evaluated at s, each
  Q value less the log density of the distribution its action came from:
  logsumexp_i (Q(s, a_i) - log mu(a_i)). The estimator's constant 1/(3N) is left out, as in the
  official code (a constant: no gradient). One penalty per twin critic, summed as their TD
  losses are.
- Discrete actions, on DQN (``dqn.py``): the logsumexp over the actions is exact.

One registry name, ``algo=cql``, for both: :func:`build_cql` builds :class:`ContinuousCQL` or
:class:`DiscreteCQL` from the env's action space, with one config schema holding both kinds'
fields. Offline only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from rltrain.algorithms.base import Algorithm, Stat, UpdateReport, clip_and_step, squared_td_error
from rltrain.algorithms.dqn import DQN, DQNConfig
from rltrain.algorithms.registry import CONTINUOUS, DISCRETE, AlgoSpec, register
from rltrain.algorithms.sac import SAC, SACConfig, SACStats
from rltrain.common.types import Progress, SpaceInfo
from rltrain.config.schemas import ConfigError, check_positive
from rltrain.data.batch import Batch


@dataclass
class CQLConfig(SACConfig):
    """Conservative Q-Learning (Kumar et al. 2020), offline; discrete and continuous actions.

    Continuous actions use every field of SAC (the actor, temperature and Polyak target ones
    included) and num_sampled_actions. Discrete actions use hidden_sizes, activation,
    critic_lr (the Q-network's), gamma, n_step and max_grad_norm, and the discrete_* fields
    (DQN's double_q, huber_delta and target_update_interval). cql_alpha applies to both.
    """

    name: str = "cql"
    #: the official code's Gym-MuJoCo settings (policy_lr 1e-4, also the temperature's)
    actor_lr: float = 1e-4
    alpha_lr: float = 1e-4
    #: weight of the conservative penalty; null: 5.0 for continuous actions (the official
    #: code's README for Gym-MuJoCo, min_q_weight 5 or 10), 1.0 for discrete ones (its Atari
    #: README, for 10% of the data; 4.0 for 1%); 0 is plain SAC or DQN
    cql_alpha: float | None = None
    #: continuous: actions per state from each of the three proposals (uniform, pi(.|s),
    #: pi(.|s')) in the logsumexp estimate (num_random in the official code)
    num_sampled_actions: int = 10
    #: continuous: keep SAC's entropy bonus in the TD target; the official code's default
    #: (backup_entropy) is false, which keeps the critic's values on the reward's scale
    backup_entropy: bool = False
    #: discrete: double Q-learning targets
    discrete_double_q: bool = True
    #: discrete: Huber loss threshold of the TD error
    discrete_huber_delta: float = 1.0
    #: discrete: copy the Q-network to its target every this many gradient steps
    discrete_target_update_interval: int = 500

    def check(self) -> None:
        super().check()
        if self.cql_alpha is not None and not self.cql_alpha >= 0:
            raise ConfigError(f"algo.cql_alpha must be >= 0 (or null), got {self.cql_alpha}")
        check_positive(self, "algo", "num_sampled_actions", "discrete_huber_delta",
                       "discrete_target_update_interval")

    def penalty_weight(self, discrete: bool) -> float:
        """cql_alpha, or its default for the action space."""
        if self.cql_alpha is not None:
            return float(self.cql_alpha)
        return 1.0 if discrete else 5.0

    def dqn_config(self) -> DQNConfig:
        """DQN's settings for discrete actions (greedy: no exploration offline)."""
        return DQNConfig(
            name=self.name, hidden_sizes=list(self.hidden_sizes), activation=self.activation,
            encoder=self.encoder, lr=self.critic_lr, gamma=self.gamma, n_step=self.n_step,
            double_q=self.discrete_double_q,
            target_update_interval=self.discrete_target_update_interval,
            huber_delta=self.discrete_huber_delta, max_grad_norm=self.max_grad_norm,
            eps_start=0.0, eps_end=0.0, exploration_fraction=0.0)


@dataclass(frozen=True)
class CQLStats(SACStats):
    #: the conservative term added to critic_loss (critic_loss includes it): cql_alpha times
    #: (logsumexp estimate - Q at the data action), batch mean, summed over the twin critics
    cql_penalty: Stat


@dataclass(frozen=True)
class DiscreteCQLStats:
    #: Huber TD loss plus the conservative penalty
    critic_loss: Stat
    #: the conservative term added to critic_loss: cql_alpha * mean(logsumexp_a Q(s, a) -
    #: Q(s, a_data))
    cql_penalty: Stat
    q_mean: Stat


class ContinuousCQL(SAC):
    """CQL(H) on SAC; see the module's docstring."""

    cfg: CQLConfig

    def __init__(self, cfg: CQLConfig, info: SpaceInfo, device: torch.device, seed: int
                 ) -> None:
        super().__init__(cfg, info, device, seed)
        self.cql_alpha = cfg.penalty_weight(discrete=False)
        #: log density of the uniform distribution on [-1, 1]^d
        self.log_uniform_density = -info.action_dim * math.log(2.0)

    def proposal_actions(self, obs: torch.Tensor, next_obs: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor]:
        """The actions the logsumexp is estimated over, ``(batch, 3N, action_dim)``: N uniform,
        N from pi(.|s), N from pi(.|s'), and the log density of each under the distribution it
        was drawn from, ``(batch, 3N)``. No gradient reaches the actor."""
        n, b, d = self.cfg.num_sampled_actions, len(obs), self.info.action_dim
        with torch.no_grad():
            uniform = torch.rand(b, n, d, device=obs.device).mul_(2.0).sub_(1.0)
            # one actor pass over n copies of each s, then of each s'
            policy_act, policy_logp = self.pi.sample(torch.cat((obs, next_obs))
                                                     .repeat_interleave(n, 0))

        def per_state(x: torch.Tensor) -> torch.Tensor:  # (2 b n, ...) -> (b, 2 n, ...)
            return x.unflatten(0, (2, b, n)).transpose(0, 1).flatten(1, 2)

        acts = torch.cat((uniform, per_state(policy_act)), 1)
        log_density = torch.cat((uniform.new_full((b, n), self.log_uniform_density),
                                 per_state(policy_logp)), 1)
        return acts, log_density

    def penalty(self, q: torch.Tensor, obs: torch.Tensor, acts: torch.Tensor,
                log_density: torch.Tensor) -> torch.Tensor:
        """cql_alpha * (logsumexp_i (Q(s, a_i) - log mu(a_i)) - Q(s, a_data)), the batch mean,
        summed over the critics; ``q`` (critics, batch) are the values at the data actions."""
        b, m, d = acts.shape
        q_sampled = self.critic(obs.repeat_interleave(m, 0), acts.reshape(b * m, d))
        logsumexp = (q_sampled.reshape(-1, b, m) - log_density).logsumexp(-1)
        return self.cql_alpha * (logsumexp - q).mean(1).sum()

    def update(self, batch: Batch, *, progress: Progress) -> UpdateReport:
        cfg = self.cfg
        obs, act, rew, discount, next_obs = self.tensors(batch)
        alpha = self.log_alpha.detach().exp()
        # critics: SAC's TD target (its entropy bonus only with backup_entropy), plus the
        # conservative penalty
        target = self.td_target(rew, discount, next_obs, alpha, entropy_bonus=cfg.backup_entropy)
        q = self.critic(obs, act)
        penalty = self.penalty(q, obs, *self.proposal_actions(obs, next_obs))
        critic_loss = squared_td_error(q, target) + penalty
        clip_and_step(critic_loss, self.critic_optim, cfg.max_grad_norm)
        # the actor, the temperature and the targets as in SAC
        actor_loss, alpha_loss, entropy = self.policy_and_targets(obs, alpha, progress)
        return UpdateReport(CQLStats(self.stat(critic_loss), self.stat(actor_loss),
                                     self.stat(alpha_loss), self.stat(alpha), self.stat(entropy),
                                     self.stat(q.detach().mean()), self.stat(penalty)))


class DiscreteCQL(DQN):
    """CQL(H) on (double) DQN; see the module's docstring."""

    def __init__(self, cfg: CQLConfig, info: SpaceInfo, device: torch.device, seed: int
                 ) -> None:
        super().__init__(cfg.dqn_config(), info, device, seed)
        self.cql_alpha = cfg.penalty_weight(discrete=True)

    def update(self, batch: Batch, *, progress: Progress) -> UpdateReport:
        cfg = self.cfg
        obs, act, rew, discount, next_obs = self.tensors(batch)
        target = self.td_target(rew, discount, next_obs)  # DQN's (double Q)
        q_all = self.q(obs)
        q_sa = q_all.gather(1, act.unsqueeze(1)).squeeze(1)
        # the conservative penalty: the exact logsumexp over the actions, less Q at the data's
        penalty = self.cql_alpha * (q_all.logsumexp(-1) - q_sa).mean()
        loss = F.smooth_l1_loss(q_sa, target, beta=cfg.huber_delta) + penalty
        clip_and_step(loss, self.optim, cfg.max_grad_norm)
        self.follow_target(progress)
        return UpdateReport(DiscreteCQLStats(self.stat(loss), self.stat(penalty),
                                             self.stat(q_sa.detach().mean())))


def build_cql(cfg: CQLConfig, info: SpaceInfo, device: torch.device, seed: int) -> Algorithm:
    """What the registry builds for ``algo=cql``: :class:`DiscreteCQL` for discrete actions,
    else :class:`ContinuousCQL`."""
    kind = DiscreteCQL if info.discrete else ContinuousCQL
    return kind(cfg, info, device, seed)


register(AlgoSpec(
    name="cql", config=CQLConfig, build=build_cql,
    trainers=("offline",), actions=(DISCRETE, CONTINUOUS),
    # stats both kinds report (the continuous one adds SAC's actor and temperature stats)
    console=(("critic_loss", "q_loss"), ("cql_penalty", "cql"), ("q_mean", "q")),
    bounded_actions=True,
    paper="Kumar et al. 2020, arXiv:2006.04779",
))
