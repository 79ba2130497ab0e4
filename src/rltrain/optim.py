"""Adam for the small networks of RL, over one flat buffer of parameters.

Why not ``torch.optim.Adam``: its ``step()`` imports ``torch._dynamo`` on first
use (about 0.9 s, half of rltrain's start-up on a laptop CPU) and wraps each step in
bookkeeping that costs as much as the maths itself for 64x64 MLPs.

Why one flat buffer: on a CPU, torch's multi-tensor (``_foreach``) ops loop over the
tensors one kernel at a time, so zeroing, clipping and updating 12 parameter tensors
cost about 100 small kernels per step. Here the parameters' data and gradients live in
two flat tensors (each parameter is a view into them), and all of that is 12 kernels.

The update is the same arithmetic as torch's Adam (Kingma & Ba 2015, with bias
correction) and the clipping the same as ``torch.nn.utils.clip_grad_norm_``;
``tests/test_optim.py`` checks that both give the same parameters.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch


def flatten_parameters(params: Iterable[torch.Tensor]) -> torch.Tensor:
    """Move the parameters' data into one new flat tensor, in order, each parameter becoming
    a view into it (their values are unchanged); returns the flat tensor."""
    params = list(params)
    with torch.no_grad():
        flat = torch.cat([p.detach().reshape(-1) for p in params])
    offset = 0
    for p in params:
        n = p.numel()
        p.data = flat[offset : offset + n].view_as(p)
        offset += n
    return flat


@torch.no_grad()
def soft_update(target: torch.Tensor, source: torch.Tensor, tau: float) -> None:
    """Polyak averaging, ``target <- (1 - tau) * target + tau * source``, in place. Over the
    flat parameter buffers of a network and its target copy this is one kernel (instead of
    one per parameter tensor, as a loop over ``parameters()`` would be)."""
    target.lerp_(source, tau)


class Adam:
    """Adam over a fixed list of parameters. ``lr`` may be changed between steps.

    Construction moves the parameters into a flat buffer (their values are unchanged), so
    create the optimiser after moving the module to its device, and zero gradients with
    :meth:`zero_grad` (not ``module.zero_grad()``).
    """

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("Adam needs at least one parameter that requires grad")
        if len({(p.device, p.dtype) for p in self.params}) > 1:
            raise ValueError("Adam's parameters must share one device and dtype")
        self.lr, self.betas, self.eps = lr, betas, eps
        self.steps = 0
        self.flat = flatten_parameters(self.params)
        self.grad = torch.zeros_like(self.flat)
        self._grad_views: list[torch.Tensor] = []
        offset = 0
        for p in self.params:
            n = p.numel()
            self._grad_views.append(self.grad[offset : offset + n].view_as(p))
            offset += n
        self.exp_avg = torch.zeros_like(self.flat)
        self.exp_avg_sq = torch.zeros_like(self.flat)
        self.zero_grad()

    def zero_grad(self) -> None:
        """Zero the flat gradient; backward passes then accumulate into it in place."""
        self.grad.zero_()
        for p, view in zip(self.params, self._grad_views, strict=True):
            if p.grad is not view:  # set to None or replaced by someone else
                p.grad = view

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """Scale the gradient to a global L2 norm of at most ``max_norm``; returns the norm
        before clipping (as ``torch.nn.utils.clip_grad_norm_`` does)."""
        norm = self.grad.norm()
        self.grad.mul_((max_norm / (norm + 1e-6)).clamp_(max=1.0))
        return norm

    @torch.no_grad()
    def step(self) -> None:
        beta1, beta2 = self.betas
        self.steps += 1
        grad = self.grad
        self.exp_avg.lerp_(grad, 1.0 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        step_size = self.lr / (1.0 - beta1**self.steps)
        denom = self.exp_avg_sq.sqrt().div_(math.sqrt(1.0 - beta2**self.steps)).add_(self.eps)
        self.flat.addcdiv_(self.exp_avg, denom, value=-step_size)

    def state_dict(self) -> dict[str, Any]:
        return {"lr": self.lr, "steps": self.steps, "exp_avg": self.exp_avg,
                "exp_avg_sq": self.exp_avg_sq}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in ("exp_avg", "exp_avg_sq"):
            if state[name].shape != self.flat.shape:
                raise ValueError(f"optimizer state {name} has shape {tuple(state[name].shape)}, "
                                 f"the parameters {tuple(self.flat.shape)}")
        self.lr, self.steps = state["lr"], state["steps"]
        self.exp_avg.copy_(state["exp_avg"])
        self.exp_avg_sq.copy_(state["exp_avg_sq"])
