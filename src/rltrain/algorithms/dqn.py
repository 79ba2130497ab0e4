"""DQN: Mnih et al. 2015, "Human-level control through deep reinforcement learning".

With a target network, double Q-learning (van Hasselt et al. 2016, arXiv:1509.06461),
the Huber loss, n-step returns (rltrain.data.transforms.nstep, in the batches it samples) and
a linearly annealed epsilon-greedy policy. Discrete actions only. Its network may be dueling
(Wang et al. 2016) and noisy (Fortunato et al. 2018), see :mod:`rltrain.nets.q_networks`; its update
weights each sample's loss by prioritised replay's importance weights and reports |TD error|
as the sample's new priority (Schaul et al. 2016, arXiv:1511.05952).

:class:`QLearning` is what DQN, C51 (``c51.py``) and QR-DQN (``qrdqn.py``) share: the Q
network and its target copy, acting (epsilon-greedy on the greedy action of the expected
Q-values, weight noise when noisy), the target network's copies and the training state. Each
subclass says what its network outputs per action (``atoms``) and writes its own loss.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rltrain.algorithms import dqn_by_hand
from rltrain.algorithms.base import Stat, TDAlgorithm, UpdateReport, clip_and_step, weighted_mean
from rltrain.algorithms.registry import DISCRETE, AlgoSpec, register
from rltrain.common.types import Progress, SpaceInfo
from rltrain.config.schemas import ConfigError, TDConfig, check_positive, check_unit_interval
from rltrain.data.batch import Batch
from rltrain.nets.optim import Adam
from rltrain.nets.q_networks import Q_INITS, QNetwork
from rltrain.spaces.masking import random_allowed


@dataclass
class QConfig(TDConfig):
    """The fields every Q-learning algorithm here shares (DQN, C51, QR-DQN, Rainbow)."""

    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    lr: float = 1e-3
    #: Adam's epsilon: torch's default for DQN; the distributional papers' 0.01/32 (their
    #: batch size) for C51 and QR-DQN, which sb3-contrib's QR-DQN keeps as 0.01/batch_size
    adam_eps: float = 1e-8
    #: use the online network to pick the next action, the target network to value it
    double_q: bool = True
    #: copy the online network to the target every this many gradient steps
    target_update_interval: int = 500
    max_grad_norm: float | None = 10.0
    #: epsilon-greedy exploration, annealed linearly from start to end over
    #: exploration_fraction of the planned env steps
    eps_start: float = 1.0
    eps_end: float = 0.05
    exploration_fraction: float = 0.2
    #: dueling head (Wang et al. 2016): Q = V + A - mean_a A, two streams after a shared torso
    dueling: bool = False
    #: noisy linear layers (Fortunato et al. 2018): exploration by learnt weight noise; the
    #: greedy (test, deployed) policy uses the mean weights
    noisy: bool = False
    #: the noisy layers' initial noise scale sigma_0 (sigma = sigma_0 / sqrt(inputs))
    noisy_sigma0: float = 0.5
    #: how the Q network's linear layers start: ``orthogonal`` (gain sqrt(2), the head's 1,
    #: biases 0: rltrain's networks' default) or ``torch`` (PyTorch's own for nn.Linear,
    #: uniform within 1/sqrt(inputs), what Stable-Baselines3's and CleanRL's Q networks start
    #: from); the encoder's convolutions are the encoder's own either way, and noisy layers
    #: (``noisy``) start as Fortunato et al.'s do
    init: str = "orthogonal"

    def check(self) -> None:
        super().check()
        if self.init not in Q_INITS:
            raise ConfigError(f"algo.init must be {' or '.join(Q_INITS)}, got {self.init!r}")
        check_unit_interval(self, "algo", "eps_start", "eps_end", "exploration_fraction")
        check_positive(self, "algo", "lr", "adam_eps", "target_update_interval",
                       "max_grad_norm", "noisy_sigma0")

    def check_plan(self, gradient_steps: float) -> None:
        if self.target_update_interval > gradient_steps:
            raise ConfigError(
                f"algo.target_update_interval={self.target_update_interval:,} is more than the "
                f"run's ~{gradient_steps:,.0f} gradient steps: the target network would never "
                "be updated; lower it or train longer")


@dataclass
class DQNConfig(QConfig):
    """Deep Q-Network (Mnih et al. 2015) with double Q (van Hasselt et al. 2016), off-policy."""

    name: str = "dqn"
    #: Huber loss threshold (smooth L1 beta)
    huber_delta: float = 1.0

    def check(self) -> None:
        super().check()
        check_positive(self, "algo", "huber_delta")


@dataclass(frozen=True)
class DQNStats:
    loss: Stat
    q_mean: Stat
    epsilon: float


class QLearning(TDAlgorithm):
    """The Q network, its target, epsilon-greedy (and noisy) acting and the target copies;
    subclasses give the loss (see the module's docstring)."""

    cfg: QConfig

    def __init__(self, cfg: QConfig, info: SpaceInfo, device: torch.device, seed: int,
                 atoms: int | None = None) -> None:
        super().__init__(cfg, info, device, seed)
        self.num_actions = info.action_dim
        self.q = QNetwork(self.encoder(), cfg.hidden_sizes, info.action_dim, cfg.activation,
                          dueling=cfg.dueling, noisy=cfg.noisy, sigma0=cfg.noisy_sigma0,
                          atoms=atoms, init=cfg.init)
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.to(device)
        self.optim = Adam(self.q.parameters(), lr=cfg.lr, eps=cfg.adam_eps)
        # exploration randomness, separate from torch's so that acting greedily
        # (testing) never shifts the training stream
        self.rng = np.random.default_rng(seed)
        #: the noisy layers' weight noise (None: no noisy layers), drawn on every training
        #: forward pass and exploring action; its state is in the training state
        self.weight_noise: torch.Generator | None = None
        if cfg.noisy:
            self.weight_noise = torch.Generator().manual_seed(seed)

    def optimizers(self) -> dict[str, Adam]:
        return {"optim": self.optim}

    def q_values(self, net: nn.Module, obs: torch.Tensor) -> torch.Tensor:
        """Expected Q-values ``(batch, actions)`` from ``net``'s outputs (the online or the
        target network), with fresh weight noise when noisy: every forward pass of training
        draws its own (Fortunato et al., appendix: online, target and the double-Q selection
        each have independent noise)."""
        return self.masked(self.expected(net(obs, self.weight_noise)), obs)

    def masked(self, q: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """Expected Q-values with each disallowed action's at the lowest float (an env with
        action masks, rltrain.spaces.masking): never the greedy action, nor the target's max."""
        return q if self.action_mask is None else self.action_mask(q, obs)

    def expected(self, out: torch.Tensor) -> torch.Tensor:
        """The network's outputs as expected Q-values: plain Q-values are already."""
        return out

    def epsilon(self, fraction: float) -> float:
        cfg = self.cfg
        if cfg.exploration_fraction <= 0:
            return cfg.eps_end
        t = min(fraction / cfg.exploration_fraction, 1.0)
        return cfg.eps_start + t * (cfg.eps_end - cfg.eps_start)

    def _act(self, obs: np.ndarray, *, deterministic: bool, progress: Progress) -> np.ndarray:
        x = self._obs(obs)
        if deterministic:  # the mean weights, as the deployable policy
            return self.masked(self.expected(self.q(x)), x).argmax(-1).cpu().numpy()
        greedy = self.q_values(self.q, x).argmax(-1).cpu().numpy()
        explore = self.rng.random(len(obs)) < self.epsilon(progress.fraction)
        if self.action_mask is None:
            random = self.rng.integers(self.num_actions, size=len(obs))
        else:  # uniform over each state's allowed actions
            random = random_allowed(self.rng, self.action_mask.allowed_numpy(obs))
        return np.where(explore, random, greedy)

    def next_actions(self, next_obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The target network's outputs at s' (noisy: with its own noise) and the next action
        ``(batch, 1)`` they are taken at: the online network's greedy one (double Q) or the
        target's own."""
        next_target = self.q_target(next_obs, self.weight_noise)
        if self.cfg.double_q:
            next_act = self.q_values(self.q, next_obs).argmax(-1, keepdim=True)
        else:
            next_act = self.masked(self.expected(next_target), next_obs).argmax(-1, keepdim=True)
        return next_target, next_act

    def follow_target(self, progress: Progress) -> None:
        """Copy the online network to the target every target_update_interval gradient steps."""
        if (progress.gradient_step + 1) % self.cfg.target_update_interval == 0:
            self.q_target.load_state_dict(self.q.state_dict())

    def training_state(self) -> dict[str, Any]:
        state = {**super().training_state(), "rng": self.rng.bit_generator.state}
        if self.weight_noise is not None:
            state["weight_noise"] = self.weight_noise.get_state()
        return state

    def load_training_state(self, state: dict[str, Any]) -> None:
        super().load_training_state(state)
        self.rng.bit_generator.state = state["rng"]
        if self.weight_noise is not None:
            self.weight_noise.set_state(state["weight_noise"])


class DQN(QLearning):
    cfg: DQNConfig

    def __init__(self, cfg: DQNConfig, info: SpaceInfo, device: torch.device, seed: int
                 ) -> None:
        super().__init__(cfg, info, device, seed)
        layers = self.q.plain_layers()
        #: the Q-network's ``(weight, bias)`` layers when the gradient step differentiates
        #: them by hand (``dqn_by_hand.py``): DQN's own loss (not a subclass's) on plain
        #: layers; None: autograd
        self.by_hand_layers = layers if layers is not None and type(self) is DQN else None
        #: the encoder learns (a CNN, a dict encoder): autograd takes its part of the step
        encoder = self.q.net.encoder
        self.encoder_learns = encoder is not None and any(True for _ in encoder.parameters())
        #: tests set it False to compare the two
        self.by_hand = self.by_hand_layers is not None

    def actor(self) -> nn.Module:
        return self.q

    def td_target(self, rew: torch.Tensor, discount: torch.Tensor, next_obs: torch.Tensor
                  ) -> torch.Tensor:
        """r + discount * V(s'), V(s') from the target network at the action the online network
        picks (double Q) or at the target's own best action."""
        with torch.no_grad():
            next_q_target, next_act = self.next_actions(next_obs)
            return rew + discount * next_q_target.gather(1, next_act).squeeze(1)

    def update(self, batch: Batch, *, progress: Progress) -> UpdateReport:
        if self.by_hand:  # the same step with its gradient written out
            loss, q_sa, target = dqn_by_hand.td_step(self, batch)
        else:
            loss, q_sa, target = self.td_step(batch)
        self.follow_target(progress)
        return UpdateReport(DQNStats(self.stat(loss), self.stat(q_sa.mean()),
                                     self.epsilon(progress.fraction)),
                            priorities=(target - q_sa).abs())

    def td_step(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One gradient step on ``batch``'s weighted mean Huber loss of the TD errors:
        ``(loss, Q(s, a), target)``, Q(s, a) detached."""
        cfg = self.cfg
        obs, act, rew, discount, next_obs = self.tensors(batch)
        target = self.td_target(rew, discount, next_obs)
        q_sa = self.q(obs, self.weight_noise).gather(1, act.unsqueeze(1)).squeeze(1)
        per_sample = F.smooth_l1_loss(q_sa, target, reduction="none", beta=cfg.huber_delta)
        loss = weighted_mean(per_sample, self.batch_weights(batch))
        clip_and_step(loss, self.optim, cfg.max_grad_norm)
        return loss, q_sa.detach(), target


register(AlgoSpec(
    name="dqn", config=DQNConfig, build=DQN, trainers=("offpolicy",), actions=(DISCRETE,),
    console=(("loss", "loss"), ("q_mean", "q"), ("epsilon", "eps")),
    paper="Mnih et al. 2015, Nature 518:529-533", prioritized=True, masks=True,
))
