"""Transforms: what an algorithm learns from, computed from what storage holds.

The third stage of the read path (:mod:`rltrain.data.reading`). A transform takes the record
:func:`~rltrain.data.reading.gather` read for the sampled transitions (a dict of named
fields) and returns it with the fields the loss needs: n-step returns and their discounts
(:mod:`.nstep`) for sampled batches; for an on-policy rollout (a record of ``(lanes, T)``
fields, :func:`~rltrain.data.reading.read_rollout`), GAE's advantages and returns by the
algorithm's critic at the update (:mod:`.gae`) and the finished episodes Monte-Carlo returns
are known for (:mod:`.finished`); hindsight relabelling (a goal replaced, the reward
recomputed) and V-trace corrections are the same shape. A transform says how far it reads
(:attr:`Transform.window`: consecutive transitions from each sampled one), so that the
gather reads exactly that much; where it needs more from storage (the observation an n-step
window bootstraps from) it is given the storage to read it.

Each algorithm declares its transforms (``Algorithm.transforms()``); the trainer applies
them, so an algorithm never reads storage itself. The transforms are a registry: every module
of this package declares one and registers it by name (:data:`TRANSFORMS`), so a new one is
one new module.

Layer: the data path; imports storage's types, numpy and torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from rltrain.common.registries import import_members

if TYPE_CHECKING:
    from rltrain.data.storage import ReplayBuffer

#: named fields of the B sampled transitions, ``(B, ...)`` arrays or tensors each (and the
#: gather's ``window``, a :class:`~rltrain.data.batch.Window`, when one was read)
Record = dict[str, Any]


class Transform(Protocol):
    """What the read path asks of a transform."""

    #: consecutive transitions it reads from each sampled one (1: the transition alone)
    window: int
    #: what it reads: ``"batch"`` (sampled transitions, ``(B, ...)`` fields) or
    #: ``"rollout"`` (a whole rollout, ``(lanes, T, ...)`` fields); the read path refuses one
    #: given the other (:func:`check_reads`), naming it, instead of failing on a missing key
    reads: str

    def __call__(self, record: Record, storage: ReplayBuffer) -> Record:
        """The record with the fields this transform computes (it may replace fields; it
        must not change the arrays it was given in place)."""
        ...


#: the transforms, by name, each a class whose instances are transforms
TRANSFORMS: dict[str, type] = {}


def register(name: str, cls: type) -> type:
    """Add a transform to the registry (each module of this package calls it once)."""
    if name in TRANSFORMS:
        raise ValueError(f"a transform named {name!r} is registered twice")
    TRANSFORMS[name] = cls
    return cls


def check_reads(transforms: Sequence[Transform], reads: str, who: str) -> None:
    """Every transform reads what ``who`` (a read path) gives it: ``reads``.

    :raises ValueError: naming the transform and what it reads (an algorithm declared a
        transform of the other kind, e.g. GAE for sampled batches).
    """
    for t in transforms:
        kind = getattr(t, "reads", None)
        if kind not in ("batch", "rollout"):
            raise ValueError(f"{t!r} does not say what it reads: give its class "
                             f"reads = 'batch' or 'rollout'")
        if kind != reads:
            raise ValueError(f"{t!r} reads a {kind}, and {who} gives it a {reads}: an "
                             f"algorithm's transforms() must hold {reads} transforms only")


import_members(__name__, __path__)
