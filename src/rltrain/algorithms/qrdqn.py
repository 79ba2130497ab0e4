"""QR-DQN: Dabney, Rowland, Bellemare and Munos 2018, "Distributional Reinforcement Learning
with Quantile Regression" (AAAI; arXiv:1710.10044).

Per action, the network outputs N quantiles of the return at the fixed quantile midpoints
``tau_i = (2 i + 1) / (2 N)``: where C51 fixes the support and learns probabilities, QR-DQN
fixes the probabilities (1/N each) and learns the support. The target quantiles are
``r + discount * theta_j(s', a*)``, ``a*`` greedy in the expected values (the mean of the
quantiles; under double Q, the online network's choice valued by the target network); the
loss is the quantile Huber loss (:func:`quantile_huber_loss`), which moves each quantile
towards the tau-quantile of the target samples. Priorities for prioritised replay are the
per-sample losses.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from rltrain.algorithms.base import UpdateReport, clip_and_step, weighted_mean
from rltrain.algorithms.dqn import DQNStats, QConfig, QLearning
from rltrain.algorithms.registry import DISCRETE, AlgoSpec, register
from rltrain.common.types import Progress, SpaceInfo
from rltrain.config.schemas import ConfigError, check_positive
from rltrain.data.batch import Batch
from rltrain.nets.q_networks import QuantileQ


@dataclass
class QRDQNConfig(QConfig):
    """Quantile regression DQN (Dabney et al. 2018), off-policy."""

    name: str = "qrdqn"
    #: Dabney et al.'s Adam epsilon, 0.01 / 32 (their batch size)
    adam_eps: float = 0.01 / 32
    #: quantiles per action, N (the paper's Atari networks and sb3-contrib's default: 200)
    quantiles: int = 200
    #: the quantile Huber loss's threshold kappa (the paper's: 1)
    kappa: float = 1.0

    def check(self) -> None:
        super().check()
        if self.quantiles < 1:
            raise ConfigError(f"algo.quantiles must be at least 1, got {self.quantiles}")
        check_positive(self, "algo", "kappa")


def quantile_midpoints(n: int, device: torch.device | None = None) -> torch.Tensor:
    """tau_i = (2 i + 1) / (2 N), i = 0..N-1: the quantile levels whose values minimise the
    1-Wasserstein distance of an N-atom uniform distribution (Dabney et al., lemma 2)."""
    # worked out on the CPU and moved (no decomposition of the arithmetic on the meta device,
    # where rltrain.assembly.footprint sizes a run's networks)
    taus = (torch.arange(n, dtype=torch.get_default_dtype(), device="cpu") * 2 + 1) / (2 * n)
    return taus if device is None else taus.to(device)


def quantile_huber_loss(theta: torch.Tensor, target: torch.Tensor, taus: torch.Tensor,
                        kappa: float) -> torch.Tensor:
    """The per-sample loss ``(batch,)`` of predicted quantiles ``theta`` (batch, N) at levels
    ``taus`` (N,) against target samples ``target`` (batch, M) (Dabney et al., eq. 10 and
    algorithm 1): ``sum_i mean_j rho_tau_i(target_j - theta_i)``, with ``rho_tau(u) = |tau -
    1{u < 0}| * L_kappa(u)`` and ``L_kappa`` the Huber loss (0.5 u^2 within kappa, linear with
    slope kappa outside). An over-estimate (u < 0) weighs 1 - tau, an under-estimate tau."""
    u = target.unsqueeze(1) - theta.unsqueeze(2)  # (batch, i, j)
    # torch's fused Huber kernels and a where() for the weight: about 3.5x faster than the
    # formulas written out, on the (batch, N, M) pairs that dominate the update's cost
    huber = F.huber_loss(u, u.new_zeros(()).expand_as(u), reduction="none", delta=kappa)
    tau = taus.unsqueeze(-1)
    weight = torch.where(u.detach() < 0, 1.0 - tau, tau)
    return (weight * huber).mean(2).sum(1)


class QRDQN(QLearning):
    cfg: QRDQNConfig
    #: the quantile levels tau_i; follow from the config, so not in the state_dict
    taus: torch.Tensor

    def __init__(self, cfg: QRDQNConfig, info: SpaceInfo, device: torch.device, seed: int
                 ) -> None:
        super().__init__(cfg, info, device, seed, atoms=cfg.quantiles)
        self.register_buffer("taus", quantile_midpoints(cfg.quantiles, device), persistent=False)

    def expected(self, out: torch.Tensor) -> torch.Tensor:
        return out.mean(-1)

    def actor(self) -> nn.Module:
        return QuantileQ(self.q)

    def target_quantiles(self, rew: torch.Tensor, discount: torch.Tensor,
                         next_obs: torch.Tensor) -> torch.Tensor:
        """``r + discount * theta_j(s', a*)``, ``(batch, N)``."""
        with torch.no_grad():
            next_quantiles, next_act = self.next_actions(next_obs)
            index = next_act.unsqueeze(-1).expand(-1, -1, self.cfg.quantiles)
            next_theta = next_quantiles.gather(1, index).squeeze(1)
            return rew.unsqueeze(-1) + discount.unsqueeze(-1) * next_theta

    def update(self, batch: Batch, *, progress: Progress) -> UpdateReport:
        cfg = self.cfg
        obs, act, rew, discount, next_obs = self.tensors(batch)
        target = self.target_quantiles(rew, discount, next_obs)
        quantiles = self.q(obs, self.weight_noise)
        theta = quantiles.gather(1, act.view(-1, 1, 1).expand(-1, 1, cfg.quantiles)).squeeze(1)
        per_sample = quantile_huber_loss(theta, target, self.taus, cfg.kappa)
        loss = weighted_mean(per_sample, self.batch_weights(batch))
        clip_and_step(loss, self.optim, cfg.max_grad_norm)
        self.follow_target(progress)
        return UpdateReport(DQNStats(self.stat(loss), self.stat(theta.detach().mean()),
                                     self.epsilon(progress.fraction)),
                            priorities=per_sample.detach())


register(AlgoSpec(
    name="qrdqn", config=QRDQNConfig, build=QRDQN, trainers=("offpolicy",),
    actions=(DISCRETE,), console=(("loss", "loss"), ("q_mean", "q"), ("epsilon", "eps")),
    paper="Dabney et al. 2018, arXiv:1710.10044", prioritized=True, masks=True,
    # the quantile Huber loss's (batch, N, N) pairs: the differences, their Huber values, the
    # weights and the product, and as many in the backward pass
    update_bytes=lambda cfg, batch, element: 8 * batch * cfg.quantiles ** 2 * element,
))
