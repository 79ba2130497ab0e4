"""C51: Bellemare, Dabney and Munos 2017, "A Distributional Perspective on Reinforcement
Learning" (arXiv:1707.06887); and Rainbow, Hessel et al. 2018, "Rainbow: Combining
Improvements in Deep Reinforcement Learning" (arXiv:1710.02298), as C51 with every option on.

C51 learns, per action, a categorical distribution of the return on a fixed support of
``atoms`` values from ``v_min`` to ``v_max``. Its target is the distribution at the next state
(the target network's, at the online network's greedy action under double Q) shifted by the
n-step reward and shrunk by the discount, then projected back onto the support
(:func:`categorical_projection`); its loss is the cross-entropy from that target to the
predicted distribution (the KL divergence up to a constant). Actions are greedy in the
expected values.

Rainbow is not a separate algorithm here: ``algo=rainbow`` registers :class:`RainbowConfig`, a
:class:`C51Config` with other defaults (dueling, noisy, 3-step, double Q, no epsilon), built as
:class:`C51`; its YAML selects prioritised replay, whose priorities are the per-sample
cross-entropy (the KL loss, as Hessel et al. prioritise by).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from rltrain.algorithms.base import UpdateReport, clip_and_step, weighted_mean
from rltrain.algorithms.dqn import DQNStats, QConfig, QLearning
from rltrain.algorithms.registry import DISCRETE, AlgoSpec, register
from rltrain.common.types import Progress, SpaceInfo
from rltrain.config.schemas import ConfigError
from rltrain.data.batch import Batch
from rltrain.nets.q_networks import CategoricalQ, categorical_mean


@dataclass
class C51Config(QConfig):
    """Categorical distributional DQN (Bellemare et al. 2017), off-policy."""

    name: str = "c51"
    #: Bellemare et al.'s Adam epsilon, 0.01 / 32 (their batch size)
    adam_eps: float = 0.01 / 32
    #: the support's number of atoms
    atoms: int = 51
    #: the support's ends: returns beyond them count as the end value
    v_min: float = -10.0
    v_max: float = 10.0

    def check(self) -> None:
        super().check()
        if self.atoms < 2:
            raise ConfigError(f"algo.atoms must be at least 2 (a support of one value cannot "
                              f"represent a distribution), got {self.atoms}")
        if not self.v_min < self.v_max:
            raise ConfigError(f"algo.v_min={self.v_min} must be below algo.v_max={self.v_max}")


@dataclass
class RainbowConfig(C51Config):
    """Rainbow (Hessel et al. 2018): C51 with a dueling, noisy network, 3-step returns and
    double Q (prioritised replay is the buffer's, chosen by conf/algo/rainbow.yaml). Exploration
    is the noisy layers' alone, as in the paper: epsilon 0."""

    name: str = "rainbow"
    #: Hessel et al.'s Adam epsilon (their table 1)
    adam_eps: float = 1.5e-4
    n_step: int = 3
    double_q: bool = True
    dueling: bool = True
    noisy: bool = True
    eps_start: float = 0.0
    eps_end: float = 0.0


def categorical_projection(probs: torch.Tensor, rew: torch.Tensor, discount: torch.Tensor,
                           support: torch.Tensor) -> torch.Tensor:
    """The distribution of ``rew + discount * Z``, Z with probabilities ``probs`` (batch,
    atoms) on ``support``, projected onto ``support`` (Bellemare et al., algorithm 1): each
    shifted atom ``Tz_i``, clipped to [v_min, v_max], gives its probability to the two
    neighbouring support values ``z_l <= Tz_i < z_(l+1)`` in proportion to their closeness. An
    atom landing exactly on ``z_l`` gives it everything (its share of ``z_(l+1)`` is 0, so the
    algorithm's special case for floor == ceil is not needed). A terminal transition (discount
    0) puts all the mass at ``rew``."""
    n = len(support)
    v_min, v_max = float(support[0]), float(support[-1])
    tz = (rew.unsqueeze(-1) + discount.unsqueeze(-1) * support).clamp(v_min, v_max)
    b = (tz - v_min) / ((v_max - v_min) / (n - 1))  # in [0, n - 1]
    lower = b.floor().clamp(max=n - 1)
    upper_share = b - lower
    m = torch.zeros_like(probs)
    m.scatter_add_(1, lower.long(), probs * (1.0 - upper_share))
    # at b = n - 1 the upper neighbour's share is 0: fold it onto the last atom
    m.scatter_add_(1, (lower.long() + 1).clamp(max=n - 1), probs * upper_share)
    return m


def check_support(cfg: C51Config, dtype: torch.dtype) -> None:
    """The support as the networks will hold it (in ``dtype``, the run's precision) must be
    ``atoms`` distinct, finite values, and its span ``v_max - v_min`` finite too: the
    projection divides by the atoms' spacing and the expected values sum over the support.
    Bounds beyond the type's range (``algo.v_max=1e300`` in float32) would make an infinite
    support, and atoms closer than the type's resolution would coincide: both refused by name
    before anything is built, instead of an overflow deep inside the first update."""
    finfo = torch.finfo(dtype)
    name = str(dtype).removeprefix("torch.")
    span = cfg.v_max - cfg.v_min
    if not (abs(cfg.v_min) <= finfo.max and abs(cfg.v_max) <= finfo.max and span <= finfo.max):
        raise ConfigError(
            f"algo.v_min={cfg.v_min:g} and algo.v_max={cfg.v_max:g}: the support and its span "
            f"({span:g}) must fit in {name} (up to {finfo.max:.3g}); returns are clipped to "
            "the support, so choose bounds a little beyond the returns the env can give "
            "(the defaults are -10 and 10)")
    spacing = span / (cfg.atoms - 1)
    resolution = float(np.spacing(np.asarray(max(abs(cfg.v_min), abs(cfg.v_max)),
                                             dtype=np.float64 if finfo.bits == 64
                                             else np.float32)))
    if not spacing > resolution:
        raise ConfigError(
            f"algo.atoms={cfg.atoms:,} between algo.v_min={cfg.v_min:g} and algo.v_max="
            f"{cfg.v_max:g} would be {spacing:.3g} apart, finer than {name} can tell apart "
            f"there ({resolution:.3g}): use fewer atoms or a wider support")


class C51(QLearning):
    cfg: C51Config
    #: the fixed support z_1..z_atoms; follows from the config, so not in the state_dict
    support: torch.Tensor

    def __init__(self, cfg: C51Config, info: SpaceInfo, device: torch.device, seed: int
                 ) -> None:
        check_support(cfg, torch.get_default_dtype())
        super().__init__(cfg, info, device, seed, atoms=cfg.atoms)
        # made on the CPU and moved: the same support on every device, and no Python
        # decomposition of linspace on the meta device (rltrain.assembly.footprint sizes runs there)
        self.register_buffer("support", torch.linspace(cfg.v_min, cfg.v_max, cfg.atoms,
                                                       device="cpu").to(device),
                             persistent=False)

    def expected(self, out: torch.Tensor) -> torch.Tensor:
        return categorical_mean(out, self.support)

    def actor(self) -> nn.Module:
        return CategoricalQ(self.q, self.support)

    def target_distribution(self, rew: torch.Tensor, discount: torch.Tensor,
                            next_obs: torch.Tensor) -> torch.Tensor:
        """The projected target distribution ``(batch, atoms)``: the target network's at s' and
        the next action (double Q: the online network's greedy one), shifted and projected."""
        with torch.no_grad():
            next_logits, next_act = self.next_actions(next_obs)
            index = next_act.unsqueeze(-1).expand(-1, -1, self.cfg.atoms)
            next_probs = next_logits.gather(1, index).squeeze(1).softmax(-1)
            return categorical_projection(next_probs, rew, discount, self.support)

    def update(self, batch: Batch, *, progress: Progress) -> UpdateReport:
        cfg = self.cfg
        obs, act, rew, discount, next_obs = self.tensors(batch)
        target = self.target_distribution(rew, discount, next_obs)
        logits = self.q(obs, self.weight_noise)
        logits_sa = logits.gather(1, act.view(-1, 1, 1).expand(-1, 1, cfg.atoms)).squeeze(1)
        cross_entropy = -(target * logits_sa.log_softmax(-1)).sum(-1)
        loss = weighted_mean(cross_entropy, self.batch_weights(batch))
        clip_and_step(loss, self.optim, cfg.max_grad_norm)
        self.follow_target(progress)
        with torch.no_grad():
            q_sa = categorical_mean(logits_sa, self.support)
        return UpdateReport(DQNStats(self.stat(loss), self.stat(q_sa.mean()),
                                     self.epsilon(progress.fraction)),
                            priorities=cross_entropy.detach())


CONSOLE = (("loss", "loss"), ("q_mean", "q"), ("epsilon", "eps"))

register(AlgoSpec(
    name="c51", config=C51Config, build=C51, trainers=("offpolicy",), actions=(DISCRETE,),
    console=CONSOLE, paper="Bellemare et al. 2017, arXiv:1707.06887", prioritized=True,
    masks=True,
))
register(AlgoSpec(
    name="rainbow", config=RainbowConfig, build=C51, trainers=("offpolicy",),
    actions=(DISCRETE,), console=CONSOLE, paper="Hessel et al. 2018, arXiv:1710.02298",
    prioritized=True, masks=True,
))
