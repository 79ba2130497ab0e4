"""Behaviour cloning: Pomerleau 1991, "Efficient Training of Artificial Neural Networks for
Autonomous Navigation" (Neural Computation 3(1):88-97), the baseline of the offline RL
literature (e.g. Fu et al. 2020, D4RL, arXiv:2004.07219; Fujimoto & Gu 2021, arXiv:2106.06860).

Supervised learning of the dataset's actions from its states, no rewards: discrete actions by
cross-entropy on a categorical actor's logits (MultiDiscrete and MultiBinary ones: the sum of
each entry's cross-entropy, one categorical per entry), continuous ones by the mean squared
error of a deterministic tanh actor's action against the data action, in the normalised space
of :mod:`rltrain.spaces.actions` (where the env's bounds are -1 and 1). Offline only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rltrain.algorithms.base import OffPolicyAlgorithm, Stat, UpdateReport, clip_and_step
from rltrain.algorithms.registry import CONTINUOUS, DISCRETE, MULTIDISCRETE, AlgoSpec, register
from rltrain.common.types import Progress, SpaceInfo
from rltrain.config.schemas import NetworkConfig, check_positive
from rltrain.data.batch import Batch
from rltrain.nets.actors_critics import CategoricalActor, DeterministicActor, MultiCategoricalActor
from rltrain.nets.optim import Adam


@dataclass
class BCConfig(NetworkConfig):
    """Behaviour cloning (Pomerleau 1991), offline; discrete and continuous actions."""

    name: str = "bc"
    lr: float = 3e-4
    #: clip the global gradient norm (null: no clipping)
    max_grad_norm: float | None = None

    def check(self) -> None:
        super().check()
        check_positive(self, "algo", "lr", "max_grad_norm")


@dataclass(frozen=True)
class BCStats:
    """Continuous actions: the loss is the mean squared error to the data actions."""

    loss: Stat


@dataclass(frozen=True)
class DiscreteBCStats:
    #: cross-entropy of the data actions under the actor's logits (summed over the entries of
    #: MultiDiscrete and MultiBinary actions)
    loss: Stat
    #: fraction of the batch where the actor's argmax is the data action (every entry of it)
    accuracy: Stat


class BC(OffPolicyAlgorithm):
    cfg: BCConfig

    def __init__(self, cfg: BCConfig, info: SpaceInfo, device: torch.device, seed: int) -> None:
        super().__init__(cfg, info, device, seed)
        self.discrete = info.discrete
        self.pi: CategoricalActor | MultiCategoricalActor | DeterministicActor
        if info.nvec is not None:
            self.pi = MultiCategoricalActor(self.encoder(), cfg.hidden_sizes, info.nvec,
                                            cfg.activation, info.action_shape)
        elif info.discrete:
            self.pi = CategoricalActor(self.encoder(), cfg.hidden_sizes, info.action_dim,
                                       cfg.activation)
        else:
            self.pi = DeterministicActor(self.encoder(), cfg.hidden_sizes, info.action_dim,
                                         cfg.activation)
        self.to(device)
        self.optim = Adam(self.pi.parameters(), lr=cfg.lr)

    def actor(self) -> nn.Module:
        return self.pi

    def optimizers(self) -> dict[str, Adam]:
        return {"actor": self.optim}

    def _act(self, obs: np.ndarray, *, deterministic: bool, progress: Progress) -> np.ndarray:
        """The cloned policy's action; a discrete one samples its logits unless deterministic
        (a continuous one has no noise to add)."""
        x = self._obs(obs)
        if isinstance(self.pi, (CategoricalActor, MultiCategoricalActor)):
            act = self.pi(x).argmax(-1) if deterministic else self.pi.sample(x)
            return act.cpu().numpy()
        return self.pi(x).reshape(len(obs), *self.info.action_shape).cpu().numpy()

    def update(self, batch: Batch, *, progress: Progress) -> UpdateReport:
        obs = self._obs(batch.obs)
        if isinstance(self.pi, MultiCategoricalActor):
            act = self._tensor(batch.act, torch.long)
            logp, _ = self.pi.log_prob_entropy(obs, act)
            loss = -logp.mean()
            clip_and_step(loss, self.optim, self.cfg.max_grad_norm)
            with torch.no_grad():
                hit = self.pi(obs).argmax(-1) == act.reshape(len(act), *self.pi.action_shape)
                accuracy = hit.reshape(len(hit), -1).all(-1).float().mean()
            return UpdateReport(DiscreteBCStats(self.stat(loss), self.stat(accuracy)))
        if self.discrete:
            act = self._tensor(batch.act, torch.long)
            logits = self.pi(obs)
            loss = F.cross_entropy(logits, act)
            clip_and_step(loss, self.optim, self.cfg.max_grad_norm)
            accuracy = (logits.detach().argmax(-1) == act).float().mean()
            return UpdateReport(DiscreteBCStats(self.stat(loss), self.stat(accuracy)))
        act = self._tensor(batch.act).reshape(len(obs), -1)
        loss = F.mse_loss(self.pi(obs), act)
        clip_and_step(loss, self.optim, self.cfg.max_grad_norm)
        return UpdateReport(BCStats(self.stat(loss)))


register(AlgoSpec(
    name="bc", config=BCConfig, build=BC, trainers=("offline",),
    actions=(DISCRETE, MULTIDISCRETE, CONTINUOUS),
    console=(("loss", "loss"),),  # accuracy (discrete only) is in the records
    bounded_actions=True,
    paper="Pomerleau 1991, Neural Computation 3(1):88-97",
))
