"""DQN's gradient step with the gradient written out instead of recorded by autograd (as PPO's
minibatch step, ``ppo_by_hand.py``; see :meth:`rltrain.nets.actors_critics.MLP.forward_kept` for
why).

The weighted mean Huber loss's gradient with respect to each sample's Q(s, a) is ``w_i / n``
times the Huber slope ``clamp((Q(s, a) - y) / delta, -1, 1)``, scattered to the sample's
action, then through the layers. With double Q, the online network's passes at s and s' are
one pass over both. On CartPole's tuned 128x128 network (batch 128, one thread, the 2-core
VM) the step takes 0.74-0.79 of autograd's time: the rest is matrix products, at MKL's speed
either way (``scripts/bench_throughput.py --only-dqn``). An encoder that learns (a CNN) runs
under autograd at s, and its backward takes the gradient the layers pass down to its
features.

DQN takes this form for its own loss (not a subclass's) on plain layers (``DQN.by_hand``, set
by its constructor); ``tests/test_dqn_by_hand.py`` checks it against the autograd step in
float64. It reads of the algorithm only :class:`HandDQN`: ``dqn.py`` chooses it and imports
it, never the other way round.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F

from rltrain.algorithms.base import weighted_mean
from rltrain.data.batch import Batch
from rltrain.nets.actors_critics import backward_into, forward_kept
from rltrain.nets.nograd import no_grad
from rltrain.nets.optim import Adam
from rltrain.nets.q_networks import QNetwork


class HuberSettings(Protocol):
    """The settings of DQN's loss the written-out step reads."""

    @property
    def huber_delta(self) -> float: ...

    @property
    def double_q(self) -> bool: ...

    @property
    def max_grad_norm(self) -> float | None: ...


class HandDQN(Protocol):
    """What the written-out step reads of the algorithm (``dqn.DQN``)."""

    q: QNetwork
    q_target: QNetwork
    optim: Adam
    #: the Q-network's ``(weight, bias)`` layers (set where this step applies)
    by_hand_layers: list[tuple[torch.Tensor, torch.Tensor]] | None
    #: the encoder has parameters (a CNN, a dict encoder): autograd takes its part
    encoder_learns: bool

    @property
    def cfg(self) -> HuberSettings: ...

    def tensors(self, batch: Batch) -> tuple[torch.Tensor, ...]: ...

    def batch_weights(self, batch: Batch) -> torch.Tensor | None: ...

    def masked(self, q: torch.Tensor, obs: torch.Tensor) -> torch.Tensor: ...

    def td_target(self, rew: torch.Tensor, discount: torch.Tensor, next_obs: torch.Tensor
                  ) -> torch.Tensor: ...


@no_grad
def td_step(algo: HandDQN, batch: Batch
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``DQN.update``'s gradient step on ``batch``, written out: ``(loss, Q(s, a), target)``,
    detached, for the update's report."""
    cfg = algo.cfg
    layers, encoder = algo.by_hand_layers, algo.q.net.encoder
    assert layers is not None and encoder is not None  # by_hand is only set with them
    obs, act, rew, discount, next_obs = algo.tensors(batch)
    n = len(obs)
    features: torch.Tensor | None = None
    if algo.encoder_learns:
        with torch.enable_grad():
            features = encoder.forward(obs)
        x = features.detach()
    else:
        x = encoder.forward(obs)
    if cfg.double_q:
        # the online network at s and at s' in one pass (one matrix product per layer);
        # the backward reads the first n rows of each layer's input
        next_x = encoder.forward(next_obs)
        inputs, both = forward_kept(torch.cat([x, next_x]), layers, algo.q.net.activation)
        inputs, q = [z[:n] for z in inputs], both[:n]
        next_act = algo.masked(both[n:], next_obs).argmax(-1, keepdim=True)
        next_q = algo.q_target(next_obs).gather(1, next_act).squeeze(1)
        target = rew + discount * next_q
    else:
        target = algo.td_target(rew, discount, next_obs)
        inputs, q = forward_kept(x, layers, algo.q.net.activation)
    index = act.unsqueeze(1)
    q_sa = q.gather(1, index).squeeze(1)
    per_sample = F.smooth_l1_loss(q_sa, target, reduction="none", beta=cfg.huber_delta)
    weights = algo.batch_weights(batch)
    loss = weighted_mean(per_sample, weights)
    slope = (q_sa - target).div_(cfg.huber_delta).clamp_(-1.0, 1.0)
    grad_q_sa = slope.div_(n) if weights is None else slope.mul_(weights).div_(n)
    grad_q = torch.zeros_like(q).scatter_(1, index, grad_q_sa.unsqueeze(1))
    algo.optim.zero_grad()
    grad_x = backward_into(layers, inputs, grad_q, algo.q.net.activation,
                           input_grad=features is not None)
    if features is not None:
        with torch.enable_grad():
            features.backward(grad_x)
    if cfg.max_grad_norm is not None:
        algo.optim.clip_grad_norm_(cfg.max_grad_norm)
    algo.optim.step()
    return loss, q_sa, target
