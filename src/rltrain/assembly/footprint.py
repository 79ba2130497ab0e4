"""What a run will hold in memory, known before any of it is allocated.

A run is refused by name when its networks, their gradients and optimiser state, one update's
largest intermediates and its replay or rollout buffer cannot fit in the memory available,
and warned of when they would take more than half of it; both before anything is built, so
that an observation of 2000x2000 pixels, ``Discrete(10**9)`` actions or ``algo.atoms=10**8``
end in one line naming the setting instead of minutes of swapping, an allocation error or
the OOM killer.

- **The networks** are built on PyTorch's meta device, which gives every tensor its shape
  and dtype and no storage: the exact sizes for any registered algorithm, in milliseconds,
  with nothing allocated (:func:`networks_need`). Before that, the widths the spaces and
  settings alone give the networks' ends (the action head, a flat observation) are checked
  against memory (:func:`_widths`): a table built with numpy while the networks are made
  (a MultiDiscrete head's) would be allocated even on the meta device.
- **An update's intermediates** that a setting makes large are the algorithm's to say
  (``AlgoSpec.update_bytes``: QR-DQN's pairs of quantiles).
- **The buffer** is the trainer kind's plan (:meth:`rltrain.trainers.Trainer.storage_plan`).

Host parts are compared with the memory available now (``MemAvailable``); on a CUDA device,
the networks and the update with its free memory.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import torch

from rltrain.algorithms import Algorithm
from rltrain.algorithms import get as algorithm_spec
from rltrain.assembly.checked_config import Settings
from rltrain.common.types import SpaceInfo
from rltrain.config.schemas import ConfigError, NetworkConfig
from rltrain.nets.encoders.registry import choose as choose_encoder
from rltrain.process.system import available_memory, size_text
from rltrain.spaces.observations import is_image
from rltrain.trainers import TRAINERS, StorageRequest

log = logging.getLogger("rltrain")

#: a run that would hold more than this share of the memory available is warned of
LARGE_SHARE = 0.5
#: tensors a trained parameter comes with: itself, its gradient, Adam's two moments
PER_TRAINED_PARAMETER = 4
#: ``gymnasium.wrappers.ResizeObservation`` as an ``env.wrappers`` entry, for the fixes
RESIZE = "env.wrappers=[{name: gymnasium.wrappers.ResizeObservation, kwargs: {shape: [84, 84]}}]"


@dataclass(frozen=True)
class Need:
    """One part of what a run will hold in memory."""

    #: what it is, as a message names it (``buffer.size``, ``algo=ppo's networks``)
    what: str
    nbytes: int
    #: how it comes to that size (``for 1,000 transitions of X (40 bytes each)``)
    detail: str
    #: what would make it smaller
    fix: str
    #: held on the algorithm's device (a GPU's memory when that is CUDA), else the host's
    on_device: bool = False
    #: the verb that goes with ``what`` ("need" after a plural)
    verb: str = "needs"


def _atoms(cfg: object) -> tuple[int, str]:
    """Outputs per action of a distributional head and the setting behind them (1, "")."""
    for key in ("atoms", "quantiles"):
        value = getattr(cfg, key, None)
        if isinstance(value, int):
            return value, f"algo.{key}={value:,}"
    return 1, ""


def _widths(s: Settings, info: SpaceInfo) -> list[tuple[int, str, str]]:
    """The widths of the networks' ends that the spaces and settings alone give, each with
    what it follows from and how to make it smaller."""
    space = info.action_space if info.action_space is not None else f"{info.action_shape}"
    smaller_actions = "use an action space with fewer values (a wrapper in env.wrappers)"
    widths: list[tuple[int, str, str]] = []
    if info.nvec is not None:
        nvec = info.nvec
        widths.append((sum(nvec), f"the action space {space} (a logit per value)",
                       smaller_actions))
        # the head pads every entry to the largest one's values (rltrain.nets.actors_critics)
        widths.append((len(nvec) * max(nvec), f"the action space {space} ({len(nvec)} entries "
                       f"padded to {max(nvec):,} values each)", smaller_actions))
    elif info.num_actions is not None:
        atoms, setting = _atoms(s.algo)
        cause = f"the action space {space}" + (f" x {setting}" if setting else "")
        fix = f"lower algo.{setting.split('=')[0].removeprefix('algo.')}" if setting else ""
        widths.append((info.num_actions * atoms, cause,
                       fix + (" or " if fix else "") + smaller_actions))
    else:
        widths.append((int(np.prod(info.action_shape)), f"the action space {space}",
                       smaller_actions))
    if not is_image(info.obs_space) and info.obs_space is not None:
        widths.append((int(np.prod(info.obs_shape)), f"the observations {info.obs_shape}",
                       "use smaller observations"))
    return widths


def _check_widths(s: Settings, info: SpaceInfo, element: int, available: int | None) -> None:
    """Refuse a network end too wide for memory before the networks are made: a layer meeting
    a width W has at least W x (its narrowest neighbour) weights, each with its gradient and
    optimiser moments."""
    if available is None:
        return
    hidden = list(getattr(s.algo, "hidden_sizes", []) or [1])
    narrowest = max(1, min(hidden))
    for width, cause, fix in _widths(s, info):
        least = width * narrowest * element * PER_TRAINED_PARAMETER
        if least > available:
            raise ConfigError(
                f"algo={s.algo.name}'s networks need more than {size_text(least)} of memory: "
                f"an output of {width:,} values, from {cause}, times a layer of {narrowest:,}, "
                f"with gradients and optimiser state, but {size_text(available)} is "
                f"available; {fix}")


def _cause(s: Settings, info: SpaceInfo, name: str, shape: tuple[int, ...]) -> tuple[str, str]:
    """What makes the tensor ``name`` of ``shape`` as large as it is, and what would make it
    smaller."""
    dims = set(shape)
    for width, cause, fix in _widths(s, info):
        if width in dims and width > 1:
            return cause, fix
    if "encoder" in name and info.obs_space is not None and is_image(info.obs_space):
        encoder = choose_encoder(info, s.algo.encoder).name if isinstance(
            s.algo, NetworkConfig) else "auto"
        return (f"the observations {info.obs_shape} through algo.encoder={encoder}'s "
                "convolutions", f"use smaller observations (e.g. {RESIZE})")
    hidden = getattr(s.algo, "hidden_sizes", None)
    return f"algo.hidden_sizes={hidden}", "lower algo.hidden_sizes"


def networks_need(s: Settings, info: SpaceInfo) -> Need:
    """The algorithm's networks as it will build them, sized on the meta device: every
    parameter and buffer, and each optimiser's gradient and state (same shapes as the
    parameters it trains)."""
    spec = algorithm_spec(s.algo.name)
    meta = torch.device("meta")
    with meta:
        algorithm: Algorithm = spec.build(s.algo, info, meta, s.seed)
    tensors = [*algorithm.parameters(), *algorithm.buffers()]
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    for optim in algorithm.optimizers().values():
        extra = [optim.grad, *(getattr(optim, name) for name in optim._buffers)]
        nbytes += sum(t.numel() * t.element_size() for t in extra)
    n_params = sum(p.numel() for p in algorithm.parameters())
    name, largest = max(algorithm.named_parameters(), key=lambda kv: kv[1].numel())
    shape = tuple(largest.shape)
    cause, fix = _cause(s, info, name, shape)
    detail = (f"({n_params:,} parameters with their gradients and optimiser state; the "
              f"largest, {name} of shape {shape}, follows from {cause})")
    return Need(f"algo={s.algo.name}'s networks", nbytes, detail, fix, on_device=True,
                verb="need")


def update_need(s: Settings) -> Need | None:
    """What one gradient step holds beyond the networks, where the algorithm says a setting
    makes that large."""
    spec = algorithm_spec(s.algo.name)
    batch = s.trainer.batch_size
    if spec.update_bytes is None or batch is None:
        return None
    element = torch.finfo(s.precision).bits // 8
    nbytes = spec.update_bytes(s.algo, batch, element)
    _, setting = _atoms(s.algo)
    return Need(f"algo={s.algo.name}'s update", nbytes,
                f"(batches of {batch:,}{' with ' + setting if setting else ''})",
                f"lower {setting.split('=')[0] if setting else 'trainer.batch_size'}",
                on_device=True)


def storage_need(s: Settings, info: SpaceInfo, request: StorageRequest) -> Need | None:
    """The replay or rollout buffer the trainer kind will make (None: none of its own)."""
    plan = TRAINERS[s.trainer.name].storage_plan(s.trainer, request)
    if plan is None:
        return None
    return Need(plan.what, plan.nbytes(info), plan.detail(info), plan.fix)


def check_footprint(s: Settings, info: SpaceInfo, request: StorageRequest) -> list[Need]:
    """Refuse a run that cannot fit in memory, naming the part and the setting behind it;
    warn of one that would take more than half of it. Returns the parts (for the log)."""
    host_free = available_memory()
    element = torch.finfo(s.precision).bits // 8
    on_cuda = s.device.type == "cuda"
    device_free = torch.cuda.mem_get_info(s.device)[0] if on_cuda else host_free
    _check_widths(s, info, element, device_free)
    needs = [need for need in (networks_need(s, info), update_need(s),
                               storage_need(s, info, request)) if need is not None]
    places = [("host", [n for n in needs if not (n.on_device and on_cuda)], host_free)]
    if on_cuda:
        places.append((str(s.device), [n for n in needs if n.on_device], device_free))
    for where, parts, free in places:
        if free is None or not parts:
            continue
        suffix = f" on {where}" if where != "host" else ""
        for need in parts:
            if need.nbytes > free:
                raise ConfigError(f"{need.what} {need.verb} {size_text(need.nbytes)} of memory "
                                  f"{need.detail}, but {size_text(free)} is available{suffix}; "
                                  f"{need.fix}")
        total = sum(n.nbytes for n in parts)
        listed = ", ".join(f"{n.what} {size_text(n.nbytes)}" for n in parts)
        largest = max(parts, key=lambda n: n.nbytes)
        if total > free:
            raise ConfigError(f"the run needs {size_text(total)} of memory ({listed}), but "
                              f"{size_text(free)} is available{suffix}; {largest.fix}")
        if total > LARGE_SHARE * free:
            log.warning(f"this run will hold about {size_text(total)} of memory ({listed}), "
                        f"{math.floor(100 * total / free)}% of the {size_text(free)} available"
                        f"{suffix} now; if it fails to allocate or the machine swaps, "
                        f"{largest.fix}")
    return needs
