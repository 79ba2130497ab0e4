"""What a trainer kind stores: the request a build makes, the plan a kind answers with
(how many lanes, how long, circular or not, and what to say if it cannot fit), and the replay
buffer built from it. Imports the data path's storage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rltrain.common.types import SpaceInfo
from rltrain.config.schemas import ConfigError
from rltrain.data.fields import Field
from rltrain.data.storage import ReplayBuffer
from rltrain.process.system import available_memory, size_text
from rltrain.spaces.observations import storage_dtype


@dataclass(frozen=True)
class StorageRequest:
    """What a trainer kind is told to make its storage from (:meth:`Trainer.storage`)."""

    info: SpaceInfo
    num_train_envs: int
    #: ``buffer.size``: the replay capacity, in transitions
    buffer_size: int
    #: an offline run's ``dataset=`` (a file or ``minari:ID``)
    dataset: str | None = None
    #: consent to code the dataset would run (``trust=true``; rltrain.rundir.trust)
    trust: bool = False
    #: frames per observation of a frame-stacked image env (1: none), stored once each
    frame_stack: int = 1
    #: the fields the algorithm stores beside a transition's (``AlgoSpec.stored``)
    fields: tuple[Field, ...] = ()


@dataclass(frozen=True)
class Storage:
    """The transitions a trainer learns from, as its kind made them."""

    buffer: ReplayBuffer
    #: an offline run's dataset: its fingerprint (spec, path, sha256) and summary, for
    #: summary.json and checkpoints (a resume must find the same data)
    dataset: dict[str, Any] | None = None
    #: observations the statistics of ``env.normalize.obs`` start from (an offline run's
    #: dataset: nothing is collected to learn them from)
    observations: np.ndarray | None = None


@dataclass(frozen=True)
class StoragePlan:
    """The buffer a trainer kind will make, sized before it is made: the composition root
    adds it to what the run will hold in memory (rltrain.assembly.footprint) before allocating
    any."""

    #: lanes (one per train env) and transitions per lane
    lanes: int
    lane_capacity: int
    #: a ring that overwrites its oldest transitions (replay), or append-only (a rollout)
    circular: bool
    #: the setting behind its size, as a message names it (``buffer.size``, ``the rollout``)
    what: str
    #: what to do when it cannot fit
    fix: str
    #: frames per observation of a frame-stacked image env, stored once each (1: none)
    frame_stack: int = 1
    #: the fields the algorithm stores beside a transition's (``AlgoSpec.stored``)
    fields: tuple[Field, ...] = ()

    def per_transition(self, info: SpaceInfo) -> int:
        """Bytes one transition takes, as :class:`ReplayBuffer` stores it."""
        stack = {} if self.frame_stack == 1 else {"frame_stack": self.frame_stack}
        return ReplayBuffer.bytes_per_transition(
            info.obs_shape, storage_dtype(info.obs_space), info.action_shape,
            np.int64 if info.discrete else np.float32, fields=self.fields, **stack)

    def nbytes(self, info: SpaceInfo) -> int:
        return self.lanes * self.lane_capacity * self.per_transition(info)

    def detail(self, info: SpaceInfo) -> str:
        """``for N transitions of ENV (B bytes each)``."""
        return (f"for {self.lanes * self.lane_capacity:,} transitions of {info.env_id} "
                f"({self.per_transition(info):,} bytes each)")


def replay_buffer(info: SpaceInfo, num_lanes: int, lane_capacity: int, *, circular: bool,
                  what: str, fix: str, frame_stack: int = 1,
                  fields: tuple[Field, ...] = ()) -> ReplayBuffer:
    """A buffer of ``num_lanes`` x ``lane_capacity`` transitions, refused by name when it
    cannot fit in the memory available (``what`` names the setting, ``fix`` says what to do).
    Observations are stored as :func:`rltrain.spaces.observations.storage_dtype` says (images and
    dicts as uint8), a frame stack one frame per transition when ``frame_stack`` > 1."""
    return make_buffer(info, StoragePlan(num_lanes, lane_capacity, circular, what, fix,
                                         frame_stack, fields))


def make_buffer(info: SpaceInfo, plan: StoragePlan) -> ReplayBuffer:
    """The buffer of ``plan``, refused by name when it cannot fit in the memory available
    (the run's footprint has checked it with everything else by then: this is for a buffer
    made alone)."""
    need = plan.nbytes(info)
    available = available_memory()
    if available is not None and need > available:
        raise ConfigError(f"{plan.what} needs {size_text(need)} of memory {plan.detail(info)}, "
                          f"but {size_text(available)} is available; {plan.fix}")
    stack = {} if plan.frame_stack == 1 else {"frame_stack": plan.frame_stack}
    try:
        return ReplayBuffer(plan.lanes, plan.lane_capacity, info.obs_shape, info.action_shape,
                            np.int64 if info.discrete else np.float32,
                            obs_dtype=storage_dtype(info.obs_space), circular=plan.circular,
                            fields=plan.fields, **stack)
    except MemoryError:
        raise ConfigError(f"{plan.what} needs {size_text(need)} of memory, which could not be "
                          "allocated") from None
