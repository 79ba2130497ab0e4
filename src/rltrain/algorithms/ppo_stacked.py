"""PPO's minibatch steps of several runs as one computation: the members of a batched sweep
(``hydra/launcher=batched``), each with its own parameters, Adam state, learning rate and
settings, stepped together over stacked parameters (one batched matrix product per layer for
all of them, ``nets.stacked_mlp``), with the gradient written out (``ppo_by_hand.py``) or
taken by autograd through the paper's loss.

An update hands its steps over as :class:`StackedSteps`, a
:class:`rltrain.common.stacking.Stackable`: the batch scheduler runs the members' works with equal
:meth:`~StackedSteps.batch_key` as one (:meth:`~StackedSteps.run_batch`); a work alone runs the
member's own steps. ``tests/sweeps/test_batched.py`` checks each member's result against its own
steps in float64.

It reads of each member's algorithm only :class:`MemberPPO` (PPO, ``ppo.py``, is one): the
algorithm chooses this form and imports it, never the other way round.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Protocol

import torch
from torch import nn

from rltrain.algorithms.actor_critic import ActorCriticConfig, HandBackward
from rltrain.algorithms.ppo_by_hand import Coefficients, clipped_gradients
from rltrain.algorithms.ppo_terms import neg_normalized, stats
from rltrain.algorithms.registry import shared_settings
from rltrain.common.stacking import Stackable
from rltrain.nets.optim import Adam, StackedAdam

#: the settings each member of a batch of PPO runs takes as its own (``hydra/launcher=batched``):
#: they act before the stacked minibatch steps (the learning rate's schedule, the discount,
#: GAE), enter them as one column per member (:func:`stacked_coefficients`, the gradient
#: clipping of :meth:`StackedAdam.step`, each member's learning rate) or as each member's own
#: number of passes (a member with fewer sits out the last ones), or only set the initial
#: parameters
MEMBER_FIELDS = tuple(f"algo.{name}" for name in (
    "lr", "lr_annealing", "gamma", "gae_lambda", "clip_ratio", "value_clip", "ent_coef",
    "vf_coef", "max_grad_norm", "init_log_std")) + ("trainer.update_step_num_repetitions",)


class MemberPPO(Protocol):
    """What the stacked steps read of each member's algorithm (``ppo.PPO``)."""

    #: the member's own steps write their gradient out (else: autograd)
    by_hand: bool
    optim: Adam
    device: torch.device

    @property
    def cfg(self) -> ActorCriticConfig: ...

    def coefficients(self) -> Coefficients:
        """The numbers in its loss."""

    def minibatch_steps(self, tensors: Sequence[torch.Tensor], perms: Sequence[torch.Tensor],
                        size: int) -> tuple[torch.Tensor, int]:
        """Its update's minibatch steps by itself; the stats summed over them, their count."""

    def clipped_losses(self, logp: torch.Tensor, entropy_all: torch.Tensor, v: torch.Tensor,
                       adv: torch.Tensor, ret: torch.Tensor, old_v: torch.Tensor,
                       old_logp: torch.Tensor, weight: torch.Tensor | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        """The paper's loss and stats (each copy's, with ``weight``)."""

    def named_parameters(self) -> Iterator[tuple[str, nn.Parameter]]: ...

    def stacked_evaluate(self, params: Mapping[str, torch.Tensor], obs: torch.Tensor,
                         act: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(log pi(a|s), entropy, V(s))`` of stacked copies of its networks."""

    def stacked_evaluate_kept(self, params: Mapping[str, torch.Tensor],
                              grads: Mapping[str, torch.Tensor], obs: torch.Tensor,
                              act: torch.Tensor
                              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, HandBackward]:
        """:meth:`stacked_evaluate` without autograd, and its backward written out."""


@dataclass(eq=False)
class StackedSteps(Stackable):
    """One PPO update's minibatch steps, to run stacked with other members'
    (:mod:`rltrain.common.stacking`): the update's tensors (obs, act, adv, ret, old_v, old_logp),
    the permutation of each pass (drawn by the run itself, so its random numbers are its own) and
    the minibatch size."""

    algo: MemberPPO
    tensors: tuple[torch.Tensor, ...]
    perms: list[torch.Tensor]
    size: int

    def batch_key(self) -> Hashable:
        # written by hand, the stacked step takes each member's own MEMBER_FIELDS; value
        # clipping or none are two forms of the step
        cfg = self.algo.cfg
        settings = (shared_settings(asdict(cfg), MEMBER_FIELDS) if self.algo.by_hand
                    else asdict(cfg))
        return (repr(settings), self.algo.by_hand, self.algo.coefficients().value_clip is None,
                tuple(t.shape[1:] for t in self.tensors), self.size,
                self.algo.optim.flat.shape, str(self.algo.device))

    def alone(self) -> tuple[torch.Tensor, int]:
        """The minibatch steps of this member by itself (as its update runs them alone)."""
        return self.algo.minibatch_steps(self.tensors, self.perms, self.size)

    @classmethod
    def run_batch(cls, works: Sequence[StackedSteps]) -> list[tuple[torch.Tensor, int]]:
        """Each member's minibatch steps, stacked: step k of every member at once. Members
        whose rollouts kept different numbers of transitions (an env's reset step is not one)
        pad their minibatches, with weight 0, to the longest member's; a member with no k-th
        minibatch in a pass leaves its parameters as they are at that step."""
        if len(works) == 1:  # one member left in the batch: its own update, as run alone
            return [works[0].alone()]
        first, size = works[0].algo, works[0].size
        device = first.device
        optim = StackedAdam([w.algo.optim for w in works])
        names = {id(p): name for name, p in first.named_parameters()}
        keys = [names[id(p)] for p in first.optim.params]
        lengths = [len(w.tensors[0]) for w in works]
        longest = max(lengths)
        chunks = -(-longest // size)
        stacked = [_padded(group, longest)
                   for group in zip(*(w.tensors for w in works), strict=True)]
        rows = torch.arange(len(works), device=device).unsqueeze(1)
        dtype = optim.flat.dtype
        # by hand (as each member's own step is): the gradient rows written here, no graph
        grad = torch.zeros_like(optim.flat, requires_grad=False)
        grads = dict(zip(keys, optim.stacked_views(grad), strict=True))
        sums = torch.zeros(len(works), 5, dtype=dtype, device=device)
        steps = torch.zeros(len(works), dtype=torch.long, device=device)
        cfgs = [w.algo.cfg for w in works]
        # each member's own, a column each
        coef = stacked_coefficients([w.algo.coefficients() for w in works], sums)
        max_norm = (None if all(c.max_grad_norm is None for c in cfgs) else sums.new_tensor(
            [[math.inf if c.max_grad_norm is None else c.max_grad_norm] for c in cfgs]))
        normalize = first.cfg.normalize_advantage
        for r in range(max(len(w.perms) for w in works)):
            perm = torch.zeros(len(works), chunks * size, dtype=torch.long, device=device)
            weight = torch.zeros(len(works), chunks * size, dtype=dtype, device=device)
            for i, w in enumerate(works):
                if r < len(w.perms):  # a member with fewer passes sits out the last ones
                    perm[i, : lengths[i]] = w.perms[r]
                    weight[i, : lengths[i]] = 1.0
            for c in range(chunks):
                part = slice(c * size, (c + 1) * size)
                idx, wt = perm[:, part], weight[:, part]
                active = wt[:, 0] > 0  # a member has a k-th minibatch: its first sample
                obs, act, adv, ret, old_v, old_logp = (t[rows, idx] for t in stacked)
                params = dict(zip(keys, optim.stacked_views(), strict=True))
                if first.by_hand:
                    with torch.no_grad():
                        logp, entropy, v, backward = first.stacked_evaluate_kept(
                            params, grads, obs, act)
                        grad_logp, grad_entropy, grad_v, per_sample = clipped_gradients(
                            logp, entropy, v, neg_normalized(adv, wt, normalize), ret, old_v,
                            old_logp, coef, wt)
                        backward(grad_logp, grad_entropy, grad_v)
                        step_stats = stats(per_sample, wt, coef.clip_ratio)
                else:
                    logp, entropy, v = first.stacked_evaluate(params, obs, act)
                    loss, step_stats = first.clipped_losses(logp, entropy, v, adv, ret, old_v,
                                                            old_logp, wt)
                    (grad,) = torch.autograd.grad(loss.sum(), optim.flat)
                optim.step(grad, max_norm, active)
                sums += step_stats * active.unsqueeze(1)
                steps += active
        optim.write_back()
        return [(sums[i], int(steps[i])) for i in range(len(works))]


def stacked_coefficients(coefs: Sequence[Coefficients], like: torch.Tensor) -> Coefficients:
    """Each member's loss coefficients as a column (the members agree on whether
    value_clip is null: :meth:`StackedSteps.batch_key`)."""

    def column(name: str) -> torch.Tensor:
        return like.new_tensor([[float(getattr(c, name))] for c in coefs])

    return Coefficients(column("clip_ratio"),
                        None if coefs[0].value_clip is None else column("value_clip"),
                        column("ent_coef"), column("vf_coef"))


def _padded(tensors: Sequence[torch.Tensor], length: int) -> torch.Tensor:
    """Tensors of up to ``length`` rows stacked, each padded with zeros to ``length``."""
    out = tensors[0].new_zeros((len(tensors), length, *tensors[0].shape[1:]))
    for i, t in enumerate(tensors):
        out[i, : len(t)] = t
    return out
