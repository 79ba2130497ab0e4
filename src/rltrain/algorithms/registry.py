"""The algorithm registry: one :class:`AlgoSpec` per algorithm, declared next to its class.

Everything else that depends on which algorithms exist derives from it: the config schemas
Hydra knows (``algo/<name>``, through rltrain.assembly.registered_schemas), the key checks, the
trainer an algorithm may run with, the action spaces it accepts, the update stats the console shows,
and how the composition root builds it. Adding an algorithm is one module in
``rltrain/algorithms/`` (its config schema, its class and a ``register(AlgoSpec(...))`` call)
and one YAML file, ``conf/algo/<name>.yaml``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rltrain.common.types import CONTINUOUS, DISCRETE, MULTIDISCRETE
from rltrain.config.schemas import AlgoConfig, ConfigError

if TYPE_CHECKING:
    import torch

    from rltrain.algorithms.base import Algorithm
    from rltrain.common.types import SpaceInfo
    from rltrain.data.fields import Field

    #: what the registry builds an algorithm with: ``build(cfg, info, device, seed)``
    Builder = Callable[[Any, SpaceInfo, torch.device, int], Algorithm]

#: action space kinds an algorithm may accept (``SpaceInfo.action_kind`` says an env's):
#: Discrete; MultiDiscrete or MultiBinary; Box
ACTION_KINDS = (DISCRETE, MULTIDISCRETE, CONTINUOUS)


@dataclass(frozen=True)
class AlgoSpec:
    """What rltrain needs to know of an algorithm."""

    #: the config name: ``rltrain algo=<name>``
    name: str
    #: its config schema (a dataclass extending AlgoConfig, with its own ``check()``)
    config: type[AlgoConfig]
    #: builds it: ``build(cfg, info, device, seed)``; usually the class itself, or a function
    #: that picks a class from the env's spaces (CQL: one name, a discrete and a continuous
    #: class)
    build: Builder
    #: the trainers it can run with ("onpolicy", "offpolicy", "offline"); its YAML picks one
    trainers: tuple[str, ...]
    #: the action spaces it accepts: DISCRETE, MULTIDISCRETE (MultiDiscrete, MultiBinary)
    #: and/or CONTINUOUS (a Box)
    actions: tuple[str, ...]
    #: update stats the console's epoch line shows, in order: (stat name, short label)
    console: tuple[tuple[str, str], ...] = ()
    #: its actions are squashed into the env's bounds, which must then be finite
    bounded_actions: bool = False
    #: the paper, for the docs' algorithm table (docs/hooks.py)
    paper: str = ""
    #: its update weights each sample's loss by ``batch.weights`` and reports per-sample
    #: priorities (``UpdateReport.priorities``): it can learn from ``buffer=prioritized``
    prioritized: bool = False
    #: it applies action masks (rltrain.spaces.masking) wherever it picks or values actions: a
    #: masked env is refused for the others
    masks: bool = False
    #: its updates can run stacked with other seeds' in one process, as the members of a
    #: batch (``hydra/launcher=batched``, rltrain.sweeps.batched; the update offers its work through
    #: rltrain.common.stacking); the others run there too, each updating alone
    batched: bool = False
    #: with ``batched``: the settings (dotted keys of the run config, e.g. ``algo.lr``) that
    #: may differ between the members of one batch (a sweep over them stacks as a sweep over
    #: seeds does), because each member's share of the stacked update uses its own value
    member_fields: tuple[str, ...] = ()
    #: ``algo.compile=true`` compiles its update's losses (:func:`rltrain.algorithms.base.compiled`)
    compiles: bool = False
    #: bytes one gradient step holds beyond the networks, where a setting makes that large:
    #: ``update_bytes(cfg, batch_size, element_size)`` (QR-DQN's pairs of quantiles). Added
    #: to what a run will hold in memory (rltrain.assembly.footprint); None: small next to the
    #: networks
    update_bytes: Callable[[Any, int, int], int] | None = None
    #: the fields its updates read beside a transition's, stored per env step:
    #: ``stored(cfg, info)`` gives them (:class:`rltrain.data.fields.Field`: name, shape,
    #: dtype); its policy then returns :class:`rltrain.common.types.Acted` with a value of each, the
    #: buffer keeps them (and its checkpoints), and batches and rollouts carry them
    #: (``Batch.fields``, ``Rollout.fields``). None: a transition's fields only
    stored: Callable[[Any, SpaceInfo], tuple[Field, ...]] | None = None

    def stored_fields(self, cfg: Any, info: SpaceInfo) -> tuple[Field, ...]:
        """:attr:`stored` for these settings and spaces (none when it is None)."""
        return () if self.stored is None else tuple(self.stored(cfg, info))


ALGORITHMS: dict[str, AlgoSpec] = {}


def shared_settings(algo: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """An algorithm's settings (a plain dict of ``algo``) but those of ``fields`` (dotted
    keys, as ``AlgoSpec.member_fields``): the ones that must be equal for runs to be members
    of one batch."""
    return {k: v for k, v in algo.items() if f"algo.{k}" not in fields}


def register(spec: AlgoSpec) -> AlgoSpec:
    """Add ``spec`` to the registry (at the import of its module)."""
    if spec.name in ALGORITHMS and ALGORITHMS[spec.name].build is not spec.build:
        raise ValueError(f"two algorithms are registered as {spec.name!r}")
    if spec.config.name != spec.name:  # the dataclass default of the schema's name field
        raise ValueError(f"{spec.config.__name__}.name must default to {spec.name!r}")
    unknown = set(spec.actions) - set(ACTION_KINDS)
    if unknown or not spec.actions:
        raise ValueError(f"{spec.name}: actions must be among {', '.join(ACTION_KINDS)}")
    ALGORITHMS[spec.name] = spec
    return spec


def get(name: str) -> AlgoSpec:
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ConfigError(f"algo={name!r} is not an rltrain algorithm; use one of "
                          f"{', '.join(sorted(ALGORITHMS))}") from None
