"""The algorithm interface: a policy that acts on a batch of observations, an update
that reports what it did (a small typed stats record and its gradient steps), and state for
checkpoints.

An algorithm owns its networks and optimisers. It never touches an env, a file
or a logger; what an update needs (data, progress) arrives as arguments, and what it
measured leaves as its return value: nothing is kept between calls but the learnt state.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeAlias, cast, overload

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from rltrain.common.types import Acted, Policy, Progress, SpaceInfo
from rltrain.config.schemas import NetworkConfig, TDConfig
from rltrain.data.batch import Batch, Rollout
from rltrain.data.transforms import Transform
from rltrain.data.transforms.nstep import NStepReturns
from rltrain.nets.encoders import Encoder, make_encoder
from rltrain.nets.noise import ColoredNoise
from rltrain.nets.normalize import ObsNormalizer, RewardScaler
from rltrain.nets.optim import FlatOptimizer
from rltrain.spaces.actions import ActionScale
from rltrain.spaces.masking import action_mask
from rltrain.spaces.observations import layout, raw_tensors


@dataclass(frozen=True)
class UpdateReport:
    """What one call of an algorithm's update did. ``stats`` is a frozen dataclass of numbers
    (a field that is None was not measured in this call, e.g. the actor's loss on a step that
    updates only the critics); ``gradient_steps`` is how many optimiser steps the call took,
    which the trainer adds to its count."""

    stats: Any
    gradient_steps: int = 1
    #: per-sample priorities for the batch learnt from (``(batch,)``, non-negative, detached:
    #: |TD error| or a per-sample loss), which a prioritised sampler stores; None from an
    #: algorithm that does not report them (the registry's ``prioritized`` says which do)
    priorities: torch.Tensor | None = None


class Algorithm(nn.Module, ABC):
    """Every algorithm is built as ``build(cfg, info, device, seed)`` (see the registry).

    Observations and rewards pass through :meth:`_obs` and :meth:`_rew`, which apply the
    normalisers the composition root attaches (:meth:`set_normalizers`) and are the identity
    otherwise. Continuous actions are in the normalised space of :mod:`rltrain.spaces.actions`.
    Networks are built on :meth:`encoder`, so no algorithm depends on what an observation
    looks like.
    """

    def __init__(self, cfg: NetworkConfig, info: SpaceInfo, device: torch.device, seed: int
                 ) -> None:
        super().__init__()
        self.cfg, self.info, self.device = cfg, info, device
        self.obs_norm: ObsNormalizer | None = None
        self.reward_scaler: RewardScaler | None = None
        #: coloured exploration noise (made on first use: its shape is the number of envs)
        self.noise: ColoredNoise | None = None
        self._noise_seed = seed
        #: observations reach the encoder as stored (images, dicts), not as float32 vectors
        self._raw_obs = raw_tensors(info.obs_space)
        #: the actions the env allows, read from each observation (None: all, always)
        self.action_mask = (action_mask(info.obs_space, info.num_actions) if info.discrete
                            else None)
        #: updates report their stats as tensors left on the device (:meth:`stat`): on an
        #: accelerator a Python float per stat per gradient step would wait for the step to
        #: finish (a host sync) before the next could be queued
        self.defer_stats = device.type != "cpu"
        #: host arrays reach a CUDA device through page-locked memory, copied without waiting
        #: (:meth:`_tensor`), when the losses are compiled: a copy from pageable memory makes
        #: the host wait for the GPU's queued work. Measured on an H200 (docs/performance.md),
        #: SAC's compiled step gained about 7% from this and its eager step, which the host's
        #: kernel launches bound, lost about as much to the extra staging copy
        self.pinned_copies = device.type == "cuda" and compiles(cfg)

    @overload
    def stat(self, x: torch.Tensor | float) -> Stat: ...
    @overload
    def stat(self, x: None) -> None: ...
    @overload
    def stat(self, x: torch.Tensor | float | None) -> Stat | None: ...
    def stat(self, x: torch.Tensor | float | None) -> Stat | None:
        """A measurement for the update's stats record: None when it was not measured; a
        Python float; or, with :attr:`defer_stats`, the detached tensor, which the trainer
        reads with the others in one transfer every few training steps."""
        if x is None or isinstance(x, float):
            return x
        return x.detach() if self.defer_stats else float(x.detach())

    def encoder(self) -> Encoder:
        """A new observation encoder (``algo.encoder``) for one of this algorithm's networks."""
        return make_encoder(self.info, self.cfg.encoder)

    def set_normalizers(self, obs_norm: ObsNormalizer | None,
                        reward_scaler: RewardScaler | None) -> None:
        self.obs_norm = None if obs_norm is None else obs_norm.to(self.device)
        self.reward_scaler = reward_scaler  # updated from numpy, per env step: on the CPU

    def act(self, obs: np.ndarray, *, deterministic: bool, progress: Progress) -> np.ndarray:
        """Actions for a batch of observations (without what an algorithm that stores values
        of acting time returns beside them, :class:`~rltrain.common.types.Acted`)."""
        with torch.inference_mode():
            acted = self._act(obs, deterministic=deterministic, progress=progress)
        return acted.actions if isinstance(acted, Acted) else acted

    def policy(self, progress: Progress, *, deterministic: bool = False) -> Policy:
        """:meth:`act` as a collector's policy. The collector runs it under
        ``torch.inference_mode()``, entered once per collection rather than once per step
        (that context costs as much as a small layer)."""
        return partial(self._act, deterministic=deterministic, progress=progress)

    @abstractmethod
    def _act(self, obs: np.ndarray, *, deterministic: bool, progress: Progress
             ) -> np.ndarray | Acted:
        """:meth:`act`'s work; runs under ``torch.inference_mode()``. An algorithm whose spec
        declares stored fields (``AlgoSpec.stored``) returns :class:`~rltrain.common.types.Acted`
        with a value of each beside the actions."""

    @abstractmethod
    def actor(self) -> nn.Module:
        """The network whose output the deployable policy's head turns into actions: logits
        or Q-values (argmax), a Gaussian mean, or an action in [-1, 1]; its input is the
        normalised observation (its encoder takes it from there)."""

    def deployable(self) -> DeployedPolicy:
        """The policy as saved to best/ and final/, evaluated and exported: raw observation in,
        the action the env receives out."""
        return DeployedPolicy(self.obs_norm, self.actor(), self.info)

    @abstractmethod
    def optimizers(self) -> Mapping[str, FlatOptimizer]: ...

    def nonfinite_parameter(self) -> str | None:
        """The name of a parameter holding NaN or inf, or None. One reduction per optimiser
        over its flat buffer (every trained parameter): the largest magnitude, which is NaN
        or inf exactly when some value is (NaN propagates through the max). About 10x faster
        than ``isfinite(flat).all()`` on one CPU thread (65 us against 710 us for SAC's 210k
        parameters on Hopper), which builds a boolean tensor first."""
        if all(o.flat.numel() == 0 or bool(torch.isfinite(o.flat.abs().amax()))
               for o in self.optimizers().values()):
            return None
        for name, p in self.named_parameters():
            if not bool(torch.isfinite(p).all()):
                return name
        return "(an optimiser's buffer)"

    def exploration_noise(self, num_envs: int, beta: float) -> torch.Tensor | None:
        """Standard normal noise for the training actions of ``num_envs`` envs, shape
        ``(num_envs, action_dim)``: None for white noise (beta 0: the caller draws it with
        torch, as it always has), else the next step of coloured streams, one per env and
        action dimension (:mod:`rltrain.nets.noise`), each ``max_episode_steps`` long."""
        if beta == 0:
            return None
        if self.noise is None or self.noise.shape[0] != num_envs:
            self.noise = ColoredNoise(beta, (num_envs, self.info.action_dim),
                                      self.info.max_episode_steps, self._noise_seed)
        return torch.from_numpy(self.noise()).to(self.device)

    def training_state(self) -> dict[str, Any]:
        """Everything needed to continue training exactly (checkpoints)."""
        return {
            "modules": self.state_dict(),
            "optimizers": {k: o.state_dict() for k, o in self.optimizers().items()},
            "noise": None if self.noise is None else self.noise.state_dict(),
        }

    def load_training_state(self, state: dict[str, Any]) -> None:
        self.load_state_dict(state["modules"])
        for k, o in self.optimizers().items():
            o.load_state_dict(state["optimizers"][k])
        noise = state.get("noise")
        self.noise = None if noise is None else ColoredNoise.from_state_dict(noise)

    def _tensor(self, x: npt.ArrayLike, dtype: torch.dtype | None = None) -> torch.Tensor:
        """``x`` on the device as ``dtype`` (default: the run's precision)."""
        dtype = dtype or torch.get_default_dtype()
        if not isinstance(x, np.ndarray):
            host = torch.as_tensor(x, dtype=dtype)
        else:
            if not x.flags.writeable:
                x = np.array(x)  # torch warns of (and cannot share) a read-only array
            try:  # half the cost of as_tensor(x, dtype, device) on the per-env-step path
                host = torch.from_numpy(x)
            except (TypeError, ValueError):  # a dtype torch lacks, negative strides
                host = torch.as_tensor(np.ascontiguousarray(x), dtype=dtype)
        if not self.pinned_copies or host.device.type != "cpu":
            return host.to(self.device, dtype)
        # converted on the host first: a copy that also converts would stage through pageable
        # memory; the caching host allocator keeps the staging block until the copy is done
        return host.to(dtype).pin_memory().to(self.device, non_blocking=True)

    def _obs(self, obs: np.ndarray | torch.Tensor) -> torch.Tensor:
        """A batch of observations as the networks take them: vectors as float32, normalised
        (when on); images and packed dict observations as they are stored (uint8): the
        encoder scales and unpacks them on the device (a quarter of the bytes to move)."""
        if self._raw_obs:
            return self._tensor(obs, torch.uint8)
        x = self._tensor(obs)
        return x if self.obs_norm is None else self.obs_norm(x)

    @overload
    def _rew(self, rew: np.ndarray) -> np.ndarray: ...

    @overload
    def _rew(self, rew: torch.Tensor) -> torch.Tensor: ...

    def _rew(self, rew: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        """Rewards as the losses take them: scaled (training only). Host arrays, or a
        batch's tensors from the buffer's device copy."""
        return rew if self.reward_scaler is None else self.reward_scaler.scale(rew)

    def transforms(self) -> tuple[Transform, ...]:
        """What the data it learns from is computed with, in order (rltrain.data.transforms),
        applied by the trainer's read path before :meth:`update`: n-step returns for a
        sampled batch, GAE for a rollout. None, by default, for a loss that reads the stored
        transitions as they are (BC's states and actions)."""
        return ()

    def batch_weights(self, batch: Batch) -> torch.Tensor | None:
        """The batch's importance-sampling weights on the device (prioritised replay), or
        None under uniform sampling: pass them to :func:`weighted_mean`."""
        return None if batch.weights is None else self._tensor(batch.weights)

    def tensors(self, batch: Batch) -> tuple[torch.Tensor, ...]:
        """A sampled batch as the losses take it: ``(obs, act, rew, discount, next_obs)``, the
        observations normalised, the rewards scaled, discrete actions as indices (long),
        continuous ones ``(batch, action_dim)``."""
        obs, next_obs = self._obs(batch.obs), self._obs(batch.next_obs)
        if self.info.discrete:
            act = self._tensor(batch.act, torch.long)
        else:
            act = self._tensor(batch.act).reshape(len(obs), -1)
        if batch.discount is None:
            raise TypeError(f"{type(self).__name__} learns from returns, and declares no "
                            "transform that computes them (OffPolicyAlgorithm.transforms)")
        return (obs, act, self._tensor(self._rew(batch.rew)), self._tensor(batch.discount),
                next_obs)


class DeployedPolicy(nn.Module):
    """Observation normaliser, actor network, head: raw observations ``(batch, *obs_shape)``
    to the actions the env receives. Discrete: the argmax (int64, ``(batch,)``); MultiDiscrete
    and MultiBinary: the argmax of each entry (int64, ``(batch, *action_shape)``; the actor
    gives ``(batch, *action_shape, n)`` logits), plus the space's ``start`` where it is not 0;
    continuous: the actor's output clipped to [-1, 1] and scaled to the env's bounds (float32,
    ``(batch, *action_shape)``).

    A vector observation arrives as any numeric dtype (float32 reaches the network), an image
    as the env gives it (uint8: the encoder scales it); a Dict observation as one tensor per
    key, in :attr:`keys` order (the ONNX graph's inputs are named after them; see
    :func:`policy_inputs` for the packed rows buffers hold)."""

    def __init__(self, obs_norm: ObsNormalizer | None, actor: nn.Module, info: SpaceInfo) -> None:
        super().__init__()
        self.obs_norm, self.actor = obs_norm, actor
        self.discrete, self.action_shape = info.discrete, tuple(info.action_shape)
        self.raw = raw_tensors(info.obs_space)
        packing = layout(info.obs_space)
        #: a Dict observation's keys: forward() takes one tensor per key, in this order
        self.keys: tuple[str, ...] | None = None if packing is None else packing.keys
        self.scale = None
        if info.action_low is not None and info.action_high is not None:  # a Box
            self.scale = ActionScale(info.action_low, info.action_high)
        #: the actions allowed in each observation (rltrain.spaces.masking), or None
        self.mask = (action_mask(info.obs_space, info.num_actions)
                     if info.num_actions is not None else None)
        #: integer actions whose values do not start at 0: the env's value of index 0
        self.start: torch.Tensor | None
        self.register_buffer("start", None if info.action_start is None
                             else torch.as_tensor(info.action_start), persistent=False)

    def forward(self, *obs: torch.Tensor) -> torch.Tensor:
        x = self._inputs(obs)
        return self._head(self._masked(self.actor(x), x))

    def _masked(self, out: torch.Tensor, x: Any) -> torch.Tensor:
        """The actor's per-action outputs with the observation's action mask applied (where
        the env has one): whatever the actor is, the argmax is an allowed action."""
        return out if self.mask is None else self.mask(out, x)

    def _inputs(self, obs: tuple[torch.Tensor, ...]) -> Any:
        """The observation tensors as the actor takes them."""
        if self.keys is not None:
            return dict(zip(self.keys, obs, strict=True))
        if self.raw:
            return obs[0]
        x = obs[0].to(torch.get_default_dtype())
        return x if self.obs_norm is None else self.obs_norm(x)

    def _head(self, out: torch.Tensor) -> torch.Tensor:
        """The actor's output as the env's actions."""
        if self.scale is None:
            act = out.argmax(-1)
            return act if self.start is None else act + self.start
        return self.scale(out.reshape(out.shape[0], -1)).reshape(-1, *self.action_shape)


class RecurrentDeployedPolicy(DeployedPolicy):
    """A deployable policy with memory (rltrain.nets.recurrent): its ``actor`` maps (observations,
    state) to (output, next state), the state one row per observation, zeros at an episode's
    start. :meth:`step` takes the observations then the state's parts (:attr:`state_names`,
    each ``(batch, state_size)``: an LSTM's ``h`` and ``c``, a GRU's ``h``) and returns the
    actions then the next state's parts: the ONNX graph's inputs and outputs. :meth:`forward`
    is an episode's first step (the actions from the initial state), so that code that knows
    nothing of memory still gets what the policy does there."""

    def __init__(self, obs_norm: ObsNormalizer | None, actor: nn.Module, info: SpaceInfo,
                 state_names: tuple[str, ...], state_size: int) -> None:
        super().__init__(obs_norm, actor, info)
        self.state_names, self.state_size = state_names, state_size

    def initial_state(self, batch: int, device: torch.device | str = "cpu"
                      ) -> tuple[torch.Tensor, ...]:
        return tuple(torch.zeros(batch, self.state_size, device=device)
                     for _ in self.state_names)

    def step(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n = len(self.state_names)
        x = self._inputs(inputs[:-n])
        out, state = self.actor(x, torch.cat(inputs[-n:], -1))
        return (self._head(self._masked(out, x)), *state.split(self.state_size, -1))

    def forward(self, *obs: torch.Tensor) -> torch.Tensor:
        return self.step(*obs, *self.initial_state(len(obs[0]), obs[0].device))[0]


def policy_inputs(info: SpaceInfo, obs: np.ndarray) -> tuple[torch.Tensor, ...]:
    """A batch of stored observations (as a collector passes them) as the deployable policy's
    inputs: one tensor, or one per key of a Dict observation."""
    packing = layout(info.obs_space)
    if packing is None:
        return (torch.as_tensor(np.asarray(obs)),)
    return tuple(torch.from_numpy(a) for a in packing.unpack(np.asarray(obs)).values())


class OnPolicyAlgorithm(Algorithm):
    """Learns from the whole rollout just collected. It never reads the storage: the
    trainer's read path (rltrain.data.reading.read_rollout) reads the rollout, applies the
    :meth:`transforms` this algorithm declares (GAE, by the critic as it is now) and hands
    :meth:`update` the result."""

    @abstractmethod
    def update(
        self, rollout: Rollout, *, batch_size: int | None, repetitions: int, progress: Progress
    ) -> UpdateReport:
        """Learn from the whole rollout, ``repetitions`` passes in minibatches; ``rollout``
        holds what :meth:`transforms` computed (``Rollout.advantages``, ...)."""


class OffPolicyAlgorithm(Algorithm):
    """Learns from batches sampled from a replay buffer or a dataset. It never reads the
    storage: the trainer's read path (rltrain.data.reading) samples, gathers and applies the
    :meth:`transforms` this algorithm declares, and hands :meth:`update` the batch."""

    def random_fields(self, obs: np.ndarray, actions: np.ndarray
                      ) -> dict[str, np.ndarray] | None:
        """The fields its spec stores beside a transition's (``AlgoSpec.stored``) for
        ``actions`` drawn uniformly at random (the random warm-up's), by name; None (the
        default): it has none to give, and a run with a random warm-up is refused."""
        return None

    @abstractmethod
    def update(self, batch: Batch, *, progress: Progress) -> UpdateReport:
        """Learn from one sampled batch."""


class TDAlgorithm(OffPolicyAlgorithm):
    """Learns by temporal differences: its batches carry n-step returns with its discount."""

    cfg: TDConfig

    def transforms(self) -> tuple[Transform, ...]:
        return (NStepReturns(self.cfg.n_step, self.cfg.gamma),)


def weighted_mean(x: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """The mean of per-sample losses ``x`` (batch along the last axis), each weighted by its
    importance-sampling weight (Schaul et al. 2016); the plain mean, the same ops as
    ``x.mean(-1)``, when ``weights`` is None (uniform sampling keeps its numbers bit for bit)."""
    return x.mean(-1) if weights is None else (x * weights).mean(-1)


#: an update's measurement as its stats record holds it: a Python float, or (an algorithm on
#: an accelerator, :attr:`Algorithm.defer_stats`) a detached 0-dim tensor that the trainer
#: reads with the others in one transfer every few training steps
Stat: TypeAlias = "float | torch.Tensor"


@contextlib.contextmanager
def frozen(net: nn.Module) -> Iterator[None]:
    """No gradients for ``net``'s parameters inside (an actor's loss through a critic: the
    backward pass then skips the critic's weight gradients, which the actor's optimiser would
    never read)."""
    net.requires_grad_(False)
    try:
        yield
    finally:
        net.requires_grad_(True)


def squared_td_error(q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The critics' loss from their values ``q`` (critics, batch) at the batch's actions: the
    squared TD errors, averaged over the batch and summed over the critics."""
    return (q - target).pow(2).mean(1).sum()


def td_priorities(td_error: torch.Tensor) -> torch.Tensor:
    """Prioritised replay's priority of each sample from its TD errors ``(critics, batch)``:
    |Q_i - target| averaged over the critics, detached. Every critic learns from the sample,
    so each one's error counts; the mean of absolute values (not the absolute value of the
    mean) lets twin critics that err in opposite directions add up rather than cancel."""
    return td_error.detach().abs().mean(0)


#: the compiled loss functions, by (function, mode): one per process, shared by every
#: instance (each instance is an argument, so torch.compile guards and recompiles for it)
_COMPILED: dict[tuple[Callable[..., Any], str], Callable[..., Any]] = {}


def compiles(cfg: object) -> bool:
    """Whether a run's algorithm settings ask for compiled losses (``algo.compile=true``)."""
    return isinstance(cfg, NetworkConfig) and cfg.compile


def compiled(algo: Algorithm, name: str) -> Callable[..., Any]:
    """The method ``name`` of ``algo`` (a loss, or the acting step's network part:
    :func:`acting`), compiled by ``torch.compile`` when ``algo.compile=true``, else the plain
    method.

    A loss's forward pass goes through inductor, its backward through AOTAutograd when the
    caller's ``loss.backward()`` runs it; the optimiser's step stays
    rltrain's (one fused kernel). On CUDA the mode is ``reduce-overhead``: the compiled
    graphs replay as CUDA graphs. Random numbers drawn inside (SAC's and TD3's noise) come
    from torch's own generator as in eager mode (inductor's ``fallback_random``), so a
    compiled run draws what an eager one draws and its checkpoints resume the same way; the
    two differ only by floating-point reordering (``tests/test_compile.py``). The function of
    the class is compiled once per process and called with ``algo`` as its first argument, so
    torch.compile guards on the instance and compiles again for another one."""
    if not compiles(algo.cfg):
        return cast(Callable[..., Any], getattr(algo, name))
    fn = getattr(type(algo), name)
    mode = "reduce-overhead" if algo.device.type == "cuda" else "default"
    key = (fn, mode)
    if key not in _COMPILED:
        import torch._inductor.config as inductor  # imported only for a compiled run

        inductor.fallback_random = True
        _COMPILED[key] = torch.compile(fn, mode=mode)
    if mode == "reduce-overhead":
        return partial(_copied_out, _COMPILED[key], algo)
    return partial(_COMPILED[key], algo)


def acting(algo: Algorithm, name: str) -> Callable[..., Any]:
    """The acting step's network part, the method ``name`` of ``algo`` (observations as the
    networks take them in, the action tensor out), compiled as the losses are
    (:func:`compiled`) when ``algo.compile=true``, else the plain method. Its random draws
    are torch's, as eager acting's. On CUDA it replays as a CUDA graph: an env step's dozen
    small kernels cost more to launch than to run. On a CPU, inductor's code for SAC's actor
    at batch 1 ran in 50 us where eager took 73-99 us (``docs/performance.md``). A test env
    batch of another size compiles once more."""
    return compiled(algo, name)


def _copied_out(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` with each tensor it returns copied. A function compiled with CUDA graphs
    returns tensors in the graph's own memory, which its next replay (or the replay of another
    compiled loss, next in the same step) writes over: torch then refuses to read them
    ("accessing tensor output of CUDAGraphs that has been overwritten"). A loss's stats and TD
    errors are read after that, so they are copied as they come out; the copy is part of
    autograd's graph, so the loss's backward pass is unchanged."""
    out = fn(*args)
    if isinstance(out, torch.Tensor):
        return out.clone()
    return tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in out)


def clip_and_step(loss: torch.Tensor, optimizer: FlatOptimizer, max_norm: float | None
                  ) -> None:
    optimizer.zero_grad()
    loss.backward()
    if max_norm is not None:
        optimizer.clip_grad_norm_(max_norm)
    optimizer.step()
