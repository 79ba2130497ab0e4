"""Adam and RMSprop for the small networks of RL, over one flat buffer of parameters.

Why not ``torch.optim.Adam``: its ``step()`` imports ``torch._dynamo`` on first
use (about 0.9 s, half of rltrain's start-up on a laptop CPU) and wraps each step in
bookkeeping that costs as much as the maths itself for 64x64 MLPs.

Why one flat buffer: on a CPU, torch's multi-tensor (``_foreach``) ops loop over the
tensors one kernel at a time, so zeroing, clipping and updating 12 parameter tensors
cost about 100 small kernels per step. Here the parameters' data and gradients live in
two flat tensors (each parameter is a view into them), and all of that is 12 kernels.

The update is the same arithmetic as torch's Adam (Kingma & Ba 2015, with bias
correction) and the clipping the same as ``torch.nn.utils.clip_grad_norm_``;
``tests/test_optim.py`` checks that both give the same parameters. RMSprop (Tieleman &
Hinton 2012, lecture 6.5; the optimiser of A3C and of Stable-Baselines3's A2C) is torch's
``RMSprop`` arithmetic (epsilon outside the square root, no momentum, not centred), checked
the same way.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from typing import Any

import torch

from rltrain.nets.nograd import no_grad


def flatten_parameters(params: Iterable[torch.Tensor]) -> torch.Tensor:
    """Move the parameters' data into one new flat tensor, in order, each parameter becoming
    a view into it (their values are unchanged); returns the flat tensor."""
    params = list(params)
    # filled slice by slice rather than by torch.cat: the same values, and on the meta device
    # (rltrain.assembly.footprint sizes a run's networks there) cat's Python decomposition would
    # import torch._dynamo, seconds of every run's start-up
    first = params[0]
    flat = torch.empty(sum(p.numel() for p in params), dtype=first.dtype, device=first.device)
    offset = 0
    with torch.no_grad():
        for p in params:
            n = p.numel()
            flat[offset : offset + n].copy_(p.detach().reshape(-1))
            p.data = flat[offset : offset + n].view_as(p)
            offset += n
    return flat


def zeros_as(t: torch.Tensor) -> torch.Tensor:
    """Zeros of ``t``'s shape, dtype and device (``torch.zeros_like`` without its Python
    decomposition on the meta device, see :func:`flatten_parameters`)."""
    return torch.zeros(t.shape, dtype=t.dtype, device=t.device)


@no_grad
def soft_update(target: torch.Tensor, source: torch.Tensor, tau: float) -> None:
    """Polyak averaging, ``target <- (1 - tau) * target + tau * source``, in place. Over the
    flat parameter buffers of a network and its target copy this is one kernel (instead of
    one per parameter tensor, as a loop over ``parameters()`` would be)."""
    target.lerp_(source, tau)


class FlatOptimizer:
    """An optimiser over a fixed list of parameters held in one flat buffer; ``lr`` may be
    changed between steps. Subclasses write :meth:`step` and their state.

    Construction moves the parameters into a flat buffer (their values are unchanged), so
    create the optimiser after moving the module to its device, and zero gradients with
    :meth:`zero_grad` (not ``module.zero_grad()``).
    """

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float) -> None:
        self.params = [p for p in params if p.requires_grad]
        name = type(self).__name__
        if not self.params:
            raise ValueError(f"{name} needs at least one parameter that requires grad")
        if len({(p.device, p.dtype) for p in self.params}) > 1:
            raise ValueError(f"{name}'s parameters must share one device and dtype")
        self.lr = lr
        self.steps = 0
        self.flat = flatten_parameters(self.params)
        self.grad = zeros_as(self.flat)
        self._grad_views: list[torch.Tensor] = []
        offset = 0
        for p in self.params:
            n = p.numel()
            self._grad_views.append(self.grad[offset : offset + n].view_as(p))
            offset += n
        self.zero_grad()

    def zero_grad(self) -> None:
        """Zero the flat gradient; backward passes then accumulate into it in place."""
        self.grad.zero_()
        for p, view in zip(self.params, self._grad_views, strict=True):
            if p.grad is not view:  # set to None or replaced by someone else
                p.grad = view

    @no_grad
    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """Scale the gradient to a global L2 norm of at most ``max_norm``; returns the norm
        before clipping (as ``torch.nn.utils.clip_grad_norm_`` does)."""
        norm = self.grad.norm()
        self.grad.mul_((max_norm / (norm + 1e-6)).clamp_(max=1.0))
        return norm

    def step(self) -> None:
        raise NotImplementedError

    #: the names of the flat statistics buffers the state holds, each shaped as the parameters
    _buffers: tuple[str, ...] = ()

    def state_dict(self) -> dict[str, Any]:
        return {"lr": self.lr, "steps": self.steps,
                **{name: getattr(self, name) for name in self._buffers}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in self._buffers:
            if state[name].shape != self.flat.shape:
                raise ValueError(f"optimizer state {name} has shape {tuple(state[name].shape)}, "
                                 f"the parameters {tuple(self.flat.shape)}")
        self.lr, self.steps = state["lr"], state["steps"]
        for name in self._buffers:
            getattr(self, name).copy_(state[name])


@functools.cache
def _fused_adam(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether this torch has a fused Adam kernel for ``device`` and ``dtype`` (CPU since
    torch 2.4; CUDA since 2.0): tried once on one number."""
    if device.type == "meta":  # sizes only (rltrain.assembly.footprint): no kernel runs there
        return False
    x = torch.zeros(1, device=device, dtype=dtype)
    try:
        torch._fused_adam_([x.clone()], [x.clone()], [x.clone()], [x.clone()], [],
                           [torch.ones((), device=device)], lr=0.1, beta1=0.9, beta2=0.999,
                           weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    except (AttributeError, NotImplementedError, RuntimeError, TypeError):
        return False
    return True


class Adam(FlatOptimizer):
    """Adam (Kingma & Ba 2015) with bias correction, as torch's."""

    _buffers = ("exp_avg", "exp_avg_sq")

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        super().__init__(params, lr)
        self.betas, self.eps = betas, eps
        self.exp_avg = zeros_as(self.flat)
        self.exp_avg_sq = zeros_as(self.flat)
        #: the step count as the fused kernel takes it, or None where there is no such kernel
        self._step_t = (torch.zeros((), device=self.flat.device)
                        if _fused_adam(self.flat.device, self.flat.dtype) else None)

    @no_grad
    def step(self) -> None:
        beta1, beta2 = self.betas
        self.steps += 1
        grad = self.grad
        if self._step_t is not None:
            # the same update in one kernel (torch's own, as Adam(fused=True) runs it): over a
            # flat buffer of 9k parameters 7 us against 27 us for the five ops below (one
            # thread, the 2-core VM); equal to them up to rounding (tests/test_optim.py)
            self._step_t.fill_(self.steps)
            torch._fused_adam_([self.flat], [grad], [self.exp_avg], [self.exp_avg_sq], [],
                               [self._step_t], lr=self.lr, beta1=beta1, beta2=beta2,
                               weight_decay=0.0, eps=self.eps, amsgrad=False, maximize=False)
            return
        self.exp_avg.lerp_(grad, 1.0 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        step_size = self.lr / (1.0 - beta1**self.steps)
        denom = self.exp_avg_sq.sqrt().div_(math.sqrt(1.0 - beta2**self.steps)).add_(self.eps)
        self.flat.addcdiv_(self.exp_avg, denom, value=-step_size)


class RMSprop(FlatOptimizer):
    """RMSprop as torch's (and Stable-Baselines3's A2C) runs it: a running mean of squared
    gradients with decay ``alpha``, no bias correction (its first steps are large: the mean
    starts at 0), and ``eps`` added to the root, outside it. TensorFlow's variant, which the
    original A2C used, adds eps inside the root and starts the mean at 1; at eps = 1e-5 the
    two differ mainly in those first steps."""

    _buffers = ("square_avg",)

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float, alpha: float = 0.99,
                 eps: float = 1e-8) -> None:
        super().__init__(params, lr)
        self.alpha, self.eps = alpha, eps
        self.square_avg = zeros_as(self.flat)

    @no_grad
    def step(self) -> None:
        self.steps += 1
        grad = self.grad
        self.square_avg.mul_(self.alpha).addcmul_(grad, grad, value=1.0 - self.alpha)
        self.flat.addcdiv_(grad, self.square_avg.sqrt().add_(self.eps), value=-self.lr)


class StackedAdam:
    """The :class:`Adam` s of several runs' copies of one network, as one ``(runs, N)`` state:
    the stacked update of a batch's members (:mod:`rltrain.common.stacking`). Each row is one run's
    flat parameters, moments and step count; :meth:`step` is each run's own Adam step with its own
    learning rate and its own gradient-norm clipping, in a few kernels for all of them, and
    :meth:`write_back` returns each row to its run's optimiser."""

    def __init__(self, optims: list[Adam]) -> None:
        first = optims[0]
        if any((o.betas, o.eps, o.flat.shape, o.flat.dtype) != (first.betas, first.eps,
               first.flat.shape, first.flat.dtype) for o in optims):
            raise ValueError("StackedAdam needs optimisers of one shape and one setting")
        self.optims = optims
        self.flat = torch.stack([o.flat for o in optims]).requires_grad_(True)
        self.exp_avg = torch.stack([o.exp_avg for o in optims])
        self.exp_avg_sq = torch.stack([o.exp_avg_sq for o in optims])
        self.steps = [o.steps for o in optims]
        self._lr = torch.tensor([[o.lr] for o in optims], dtype=first.flat.dtype,
                                device=first.flat.device)

    def stacked_views(self, of: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Every run's parameters, stacked: views ``(runs, *shape)`` of the flat state, one
        per parameter of the optimisers, in their order (gradients flow to :attr:`flat`); or
        the same views of ``of``, shaped as the flat state (a gradient written by hand)."""
        flat = self.flat if of is None else of
        out, offset = [], 0
        for p in self.optims[0].params:
            n = p.numel()
            out.append(flat[:, offset : offset + n].view(len(self.optims), *p.shape))
            offset += n
        return out

    @no_grad
    def step(self, grad: torch.Tensor, max_norm: float | torch.Tensor | None,
             active: torch.Tensor | None = None) -> None:
        """One Adam step of every row from its gradient row (clipped per row to an L2 norm
        of ``max_norm``, as :meth:`FlatOptimizer.clip_grad_norm_` does for one run; a column
        ``(runs, 1)`` gives each row its own, inf for none). With ``active`` (a bool per
        row), the other rows are left as they are."""
        first = self.optims[0]
        beta1, beta2 = first.betas
        if max_norm is not None:
            norm = grad.norm(dim=1, keepdim=True)
            grad.mul_((max_norm / (norm + 1e-6)).clamp_(max=1.0))
        moving = [True] * len(self.steps) if active is None else active.tolist()
        self.steps = [s + 1 if m else s for s, m in zip(self.steps, moving, strict=True)]
        # per row: lr / (1 - beta1^t) and sqrt(1 - beta2^t), as Adam's bias corrections
        scales = torch.tensor([[1.0 - beta1 ** max(s, 1), math.sqrt(1.0 - beta2 ** max(s, 1))]
                               for s in self.steps], dtype=self.flat.dtype,
                              device=self.flat.device)
        step_size, root = self._lr / scales[:, :1], scales[:, 1:]
        exp_avg = self.exp_avg.lerp(grad, 1.0 - beta1)
        exp_avg_sq = self.exp_avg_sq.mul(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        flat = self.flat - exp_avg / exp_avg_sq.sqrt().div_(root).add_(first.eps) * step_size
        if not all(moving):  # the rows that take no step keep their state
            keep = torch.tensor(moving, device=self.flat.device).unsqueeze(1)
            exp_avg = torch.where(keep, exp_avg, self.exp_avg)
            exp_avg_sq = torch.where(keep, exp_avg_sq, self.exp_avg_sq)
            flat = torch.where(keep, flat, self.flat)
        self.exp_avg, self.exp_avg_sq = exp_avg, exp_avg_sq
        self.flat.copy_(flat)

    @no_grad
    def write_back(self) -> None:
        for i, o in enumerate(self.optims):
            o.flat.copy_(self.flat[i])
            o.exp_avg.copy_(self.exp_avg[i])
            o.exp_avg_sq.copy_(self.exp_avg_sq[i])
            o.steps = self.steps[i]
