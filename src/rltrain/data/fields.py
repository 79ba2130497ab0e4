"""The fields a transition is made of, and the plain way to store one: a whole value per slot.

Storage (:mod:`rltrain.data.storage`) keeps each declared :class:`Field` in a codec: an object
that holds the field's values for every slot of every lane and knows how to write a block of
them and gather them back. :class:`WholeArrays` stores each value as it is, one
``(lanes, capacity, *shape)`` array; :class:`rltrain.data.frames.FrameStacks` stores stacked
uint8 frames one frame per transition. Both follow :class:`Codec`; a field's next value (an
observation's ``next_obs``) is not a codec's business but the kept-aside ring's
(:mod:`rltrain.data.asides`).

Every transition has :func:`transition_fields`: ``obs, act, rew, terminated, truncated``.
Beside them a buffer keeps the fields its algorithm declares (``AlgoSpec.stored``: a
behaviour log-prob for V-trace, a value for GAE from storage, a goal), each a :class:`Field`
written with every block (``ReplayBuffer.extend(..., fields=...)``), saved in the buffer's
state, handed to the read path (``Batch.fields``, ``Rollout.fields``) and written to and read
from datasets under the same names (``Dataset.fields``, :mod:`rltrain.data.datasets`);
:func:`declared` checks such a declaration.

Imports numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import numpy as np

#: the field whose next value (``next_obs``) is the next transition's, kept aside where not
OBS = "obs"


@dataclass(frozen=True)
class Field:
    """One named value stored per transition: its shape (one env step's) and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        """The bytes of one value."""
        return self.dtype.itemsize * int(np.prod(self.shape, dtype=np.int64))


def transition_fields(obs_shape: tuple[int, ...], obs_dtype: np.dtype | type,
                      act_shape: tuple[int, ...], act_dtype: np.dtype | type
                      ) -> tuple[Field, ...]:
    """The fields every transition has, in the order of a buffer's state: the observation,
    the action, the reward (float32) and the two episode-end flags."""
    return (Field(OBS, tuple(obs_shape), np.dtype(obs_dtype)),
            Field("act", tuple(act_shape), np.dtype(act_dtype)),
            Field("rew", (), np.dtype(np.float32)),
            Field("terminated", (), np.dtype(bool)),
            Field("truncated", (), np.dtype(bool)))


#: the names of :func:`transition_fields`, in state order
TRANSITION_FIELDS = ("obs", "act", "rew", "terminated", "truncated")

#: names a declared field cannot take: a transition's, and the other entries of a buffer's
#: state, of a read record and of a dataset file (which holds declared fields beside its own
#: arrays, :mod:`rltrain.data.datasets.files`)
RESERVED = frozenset({*TRANSITION_FIELDS, "next_obs", "frames", "back", "history",
                      "frame_stack", "lane_capacity", "ptr", "size", "added", "aside_rows",
                      "asides", "pending", "lanes", "positions", "window", "discount",
                      "weights", "valid", "obs_frames", "next_obs_frames",
                      "meta"})


def declared(fields: tuple[Field, ...] | list[Field]) -> tuple[Field, ...]:
    """Declared fields, checked: identifiers, none reserved (:data:`RESERVED`), none twice.

    :raises ValueError: naming the field and what would be right.
    """
    seen: set[str] = set()
    for f in fields:
        if not isinstance(f, Field) or not f.name.isidentifier():
            raise ValueError(f"a declared field must be a Field with a Python identifier as "
                             f"its name, not {f!r}")
        if f.name in RESERVED:
            raise ValueError(f"the declared field {f.name!r} takes a name storage uses "
                             f"itself; call it something else (reserved: "
                             f"{', '.join(sorted(RESERVED))})")
        if f.name in seen:
            raise ValueError(f"the field {f.name!r} is declared twice")
        seen.add(f.name)
    return tuple(fields)


class Entries(NamedTuple):
    """Where the entries of a block of ``T`` steps of every lane go when the lanes do not all
    write one run of slots (a masked block, a wrap-around, lanes out of step)."""

    #: the flat slot (lane * lane_capacity + position) of each written entry, time-major
    flat: np.ndarray
    #: which entries of the block are written, flat ``t * lanes + lane``; None: every one
    idx: np.ndarray | None
    #: ``(T, lanes)`` (``(T, 1)`` when every lane writes every step): how many steps each
    #: lane has written up to and including step t
    counts: np.ndarray
    #: per lane, how many steps the block writes
    added: np.ndarray

    def rows(self, values: Any) -> np.ndarray:
        """A ``(T, lanes, ...)`` block's written entries as rows, in ``flat``'s order."""
        rows = np.asarray(values).reshape(-1, *np.shape(values)[2:])
        return rows if self.idx is None else rows.take(self.idx, axis=0)


class TimeOrder(NamedTuple):
    """Every stored transition, lane after lane, each lane oldest first: the order of a
    buffer's state."""

    #: each transition's lane
    lanes: np.ndarray
    #: each transition's flat slot (lane * lane_capacity + position)
    rows: np.ndarray
    #: each transition's age in its lane (0: the lane's oldest)
    age: np.ndarray
    #: per lane, how many transitions it holds
    size: np.ndarray


class Codec(Protocol):
    """How one field is stored per slot. Writing is two steps, so that a block is checked
    whole before any field of it is written: ``encode*`` (may raise ValueError; writes
    nothing), then ``write*``. ``*_run`` is the collector's usual block: every lane writes
    the slots ``start .. start + T - 1``; the others take :class:`Entries`."""

    field: Field

    def readied(self, values: Any) -> Any:
        """A block as this codec's encoding reads it."""
        ...

    def encode_run(self, values: Any) -> Any:
        """A ``(T, lanes, ...)`` block's encoding."""
        ...

    def write_run(self, start: int, encoded: Any) -> None:
        ...

    def encode(self, values: Any, rows: np.ndarray, entries: Entries) -> Any:
        """The encoding of a block's written entries (``rows``, from ``values``)."""
        ...

    def write(self, flat: np.ndarray, encoded: Any) -> None:
        ...

    def take(self, flat: np.ndarray) -> np.ndarray:
        """The values at flat slots ``flat`` (a slot that holds no transition: garbage)."""
        ...

    def first(self, t: int, valid: np.ndarray) -> np.ndarray:
        """Each lane's first ``t`` slots' values, ``(lanes, t, ...)`` (a rollout's; past a
        lane's newest, whatever the codec gives)."""
        ...

    def successors(self, t: int) -> np.ndarray:
        """The values of each lane's slots ``1 .. t``: the successors of its first ``t``
        (past a lane's newest: garbage)."""
        ...

    def state_rows(self, order: TimeOrder) -> dict[str, np.ndarray]:
        """The state entries of the stored transitions, one row each in ``order``."""
        ...

    def state_lanes(self, order: TimeOrder) -> dict[str, np.ndarray]:
        """The state entries the codec keeps per lane beside the rows (none, mostly)."""
        ...

    def load(self, s: dict[str, np.ndarray], order: TimeOrder) -> None:
        """Write a checked state's entries back (the buffer's counters already are)."""
        ...

    def nominal_extra_bytes(self) -> int:
        """What the full codec holds beyond :meth:`bytes_per_slot` per slot."""
        ...

    def resident_extra_bytes(self, touched: np.ndarray) -> int:
        """What it holds now beyond :meth:`bytes_per_slot` per ``touched`` slot."""
        ...


class WholeArrays:
    """A field stored whole: slot ``(lane, position)`` of ``array`` holds its value."""

    def __init__(self, field: Field, num_lanes: int, lane_capacity: int,
                 frame_stack: int = 1) -> None:
        self.field = field
        # np.zeros, never zeros_like/full: calloc'd pages are only mapped when written
        self.array = np.zeros((num_lanes, lane_capacity, *field.shape), dtype=field.dtype)
        #: a flat (lanes * capacity) view: one flat index is cheaper than 2-D fancy indexing
        self.flat = self.array.reshape(num_lanes * lane_capacity, *field.shape)

    @staticmethod
    def bytes_per_slot(field: Field, frame_stack: int) -> int:
        return field.nbytes

    def readied(self, values: Any) -> Any:
        return values

    def encode_run(self, values: Any) -> Any:
        return values

    def write_run(self, start: int, encoded: Any) -> None:
        steps = len(encoded)
        self.array[:, start : start + steps] = np.asarray(encoded).swapaxes(0, 1)

    def encode(self, values: Any, rows: np.ndarray, entries: Entries) -> np.ndarray:
        return rows

    def write(self, flat: np.ndarray, encoded: np.ndarray) -> None:
        self.flat[flat] = encoded

    def take(self, flat: np.ndarray) -> np.ndarray:
        return self.flat.take(flat, axis=0)

    def first(self, t: int, valid: np.ndarray) -> np.ndarray:
        """A view: slots past a lane's newest hold what they hold."""
        return self.array[:, :t]

    def successors(self, t: int) -> np.ndarray:
        shape = self.array.shape
        out = np.empty((shape[0], t, *shape[2:]), dtype=self.array.dtype)
        out[:, : min(t, shape[1] - 1)] = self.array[:, 1 : t + 1]
        return out

    def state_rows(self, order: TimeOrder) -> dict[str, np.ndarray]:
        return {self.field.name: self.flat[order.rows]}

    def state_lanes(self, order: TimeOrder) -> dict[str, np.ndarray]:
        return {}

    def load(self, s: dict[str, np.ndarray], order: TimeOrder) -> None:
        self.flat[order.rows] = s[self.field.name]

    def nominal_extra_bytes(self) -> int:
        return 0

    def resident_extra_bytes(self, touched: np.ndarray) -> int:
        return 0
