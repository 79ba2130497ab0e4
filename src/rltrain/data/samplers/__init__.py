"""Samplers choose which stored transitions a batch holds; storage only stores them.

The first stage of the read path (:mod:`rltrain.data.reading`: sampler -> gather ->
transforms -> the algorithm's update). A sampler returns ``(lanes, positions)``, the indices
of transitions in a :class:`~rltrain.data.storage.ReplayBuffer`; what is read there and
computed from it (n-step returns, :mod:`rltrain.data.transforms`) are later stages. Keeping
the choice apart from the storage is what lets prioritised replay (Schaul et al. 2016) or a
sampler of sequences be one more module here instead of a subclass of the buffer. Here:
``uniform`` (the default), ``prioritized`` and ``episodes`` (an episode uniformly, then a
transition within it, from :mod:`rltrain.data.episodes`' index of where episodes begin and end).

The samplers are a registry: every module of this package declares one sampler and
registers a :class:`SamplerSpec`, so importing the package fills :data:`SAMPLERS`, and
``buffer.sampler=<name>`` chooses among them. A new sampler is one new module (and, when it
has settings of its own, their fields in ``ReplayBufferConfig`` and a ``conf/buffer`` YAML).
Its state (the random generator, for a prioritised sampler its priorities) is checkpointed on
its own, as plain data.

Layer: the data path; imports the config schemas, numpy and torch, and the buffer's type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from rltrain.common.registries import import_members
from rltrain.config.schemas import ConfigError, ReplayBufferConfig
from rltrain.data.storage import ReplayBuffer


class Sampler(Protocol):
    """What the read path asks of any sampler."""

    def sample(self, buffer: ReplayBuffer, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """``batch_size`` stored transitions of ``buffer`` as ``(lanes, positions)``."""
        ...

    def weights(self, lanes: np.ndarray, positions: np.ndarray, fraction: float
                ) -> np.ndarray | None:
        """Importance-sampling weights of the transitions just sampled (``fraction``: of the
        run done, for annealed schedules), or None when every transition is equally likely."""
        ...

    def update(self, lanes: np.ndarray, positions: np.ndarray, priorities: np.ndarray) -> None:
        """Store the priorities an update reported for the transitions it learnt from."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Plain data (no objects), so that a checkpoint loads with ``weights_only=True``."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class Unweighted:
    """What a sampler whose draws do not depend on what was learnt shares: its own seeded
    generator (its whole state, as plain data), no importance weights, nothing to store from
    an update. Its subclass writes :meth:`sample`."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def weights(self, lanes: np.ndarray, positions: np.ndarray, fraction: float) -> None:
        return None

    def update(self, lanes: np.ndarray, positions: np.ndarray, priorities: np.ndarray) -> None:
        """Nothing to store: the draws do not depend on what was learnt."""

    def state_dict(self) -> dict[str, Any]:
        """The generator's state (a dict of ints and strings)."""
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]


@dataclass(frozen=True)
class SamplerSpec:
    """What rltrain needs to know of a sampler."""

    #: the name ``buffer.sampler`` gives
    name: str
    #: builds it from the ``buffer`` group and the run's seed
    build: Callable[[ReplayBufferConfig, int], Sampler]
    #: the ``buffer`` group's keys that this sampler alone reads: given with another sampler
    #: (at a value other than the default), they are refused, since they would be ignored
    settings: tuple[str, ...] = ()
    #: checks the ranges of its settings, raising ConfigError naming the key
    check: Callable[[ReplayBufferConfig], None] | None = None
    #: its batches carry importance weights, and it needs the priorities the update reports
    #: back (only algorithms whose registry entry says ``prioritized`` can learn from it)
    weighs: bool = False
    #: how a user selects it, for messages: e.g. ``buffer=prioritized``
    selected_by: str = ""
    #: what it does, in a few words, for messages: e.g. "prioritised replay"
    title: str = ""


#: the samplers, by ``buffer.sampler=<name>``, in registration order
SAMPLERS: dict[str, SamplerSpec] = {}


def register(spec: SamplerSpec) -> SamplerSpec:
    """Add a sampler to the registry (each module of this package calls it once)."""
    if spec.name in SAMPLERS:
        raise ValueError(f"a sampler named {spec.name!r} is registered twice")
    SAMPLERS[spec.name] = spec
    return spec


def check_sampler(cfg: ReplayBufferConfig) -> None:
    """The sampler is a registered one, its settings are in range, and no setting another
    sampler reads is given (it would be ignored).

    :raises ConfigError: naming the key, and what would work.
    """
    spec = SAMPLERS.get(cfg.sampler)
    if spec is None:
        names = list(SAMPLERS)
        how = [f"{s.selected_by} selects {s.name}" for s in SAMPLERS.values() if s.selected_by]
        raise ConfigError(f"buffer.sampler={cfg.sampler!r} is not a sampler; use "
                          f"{', '.join(names[:-1])} or {names[-1]}"
                          + (f" ({'; '.join(how)})" if how else ""))
    defaults = ReplayBufferConfig()
    for other in SAMPLERS.values():
        for key in other.settings:
            if key in spec.settings or getattr(cfg, key) == getattr(defaults, key):
                continue
            choose = other.selected_by or f"buffer.sampler={other.name}"
            raise ConfigError(f"buffer.{key} is for {other.title or other.name}, and this run "
                              f"uses {spec.title or spec.name}: add {choose}, or drop it")
    if spec.check is not None:
        spec.check(cfg)


def make_sampler(cfg: ReplayBufferConfig, seed: int) -> Sampler:
    """The sampler ``buffer.sampler`` names, seeded with the run's seed."""
    return SAMPLERS[cfg.sampler].build(cfg, seed)


import_members(__name__, __path__)
