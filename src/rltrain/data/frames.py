"""The frame-stack codec: stacked uint8 frames stored one frame per transition.

Frame stacks (``frame_stack=k > 1``: observations of shape ``(k, ...)``, as gymnasium's
``FrameStackObservation`` gives, oldest frame first) are stored as DQN Zoo and Dopamine store
them: within an episode frames ``0..k-2`` of an observation are frames ``1..k-1`` of the
previous one, so a transition stores only its newest frame, ``obs[-1]``, and a count ``back``
(0..k-1) of the frames before it that are the newest frames of the lane's ``back`` previous
transitions; the older ones repeat the oldest of those (at an episode's start,
``padding_type="reset"`` repeats the reset frame). Frame ``j`` of a transition is the newest
frame of the transition ``min(k-1-j, back)`` steps earlier in its lane; a transition keeps the
slots of its k frames (``index``, k 4-byte integers written with it), so rebuilding a stack is
one gather of k frames, with no index arithmetic on the sampling path. ``back`` is not taken
from the episode flags but derived from the data at write time: the largest count for which
the rebuild gives back the written observation bit for bit, and a write whose observation no
count rebuilds exactly (another padding, a wrapper that is not a frame stack) raises
``ValueError`` before anything is stored. A lane's frames live in their own ring of
``lane_capacity + k - 1`` slots, indexed by how many frames the lane has written (its serial),
so the ``k - 1`` frames before a full lane's oldest transition (already overwritten as
transitions) are still there, and so are a lane's newest frames after the storage is cleared,
for an episode that goes on after it (an on-policy rollout).

:class:`FrameStacks` follows :class:`rltrain.data.fields.Codec`. Imports numpy and
:mod:`rltrain.data.fields`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from rltrain.data.fields import Entries, Field, TimeOrder


def frame_shape(obs_shape: tuple[int, ...], frame_stack: int) -> tuple[int, ...]:
    """The shape of one frame of a ``frame_stack``-frame observation; ValueError if
    ``obs_shape`` is not that of such stacks (stack axis first)."""
    if not isinstance(frame_stack, (int, np.integer)) or not 1 <= frame_stack <= 255:
        raise ValueError(f"buffer frame_stack: {frame_stack!r}, expected an integer in 1..255")
    if frame_stack > 1 and (not obs_shape or obs_shape[0] != frame_stack):
        raise ValueError(f"buffer frame_stack={frame_stack} stores stacks of {frame_stack} "
                         f"frames, stack axis first (shape ({frame_stack}, ...), as "
                         "FrameStackObservation makes them), but the observations have shape "
                         f"{tuple(obs_shape)}; frame_stack must be the length of their first "
                         "axis, or 1 to store them whole")
    return tuple(obs_shape[1:]) if frame_stack > 1 else tuple(obs_shape)


def _same_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether each row of ``a`` equals ``b``'s bit for bit: ``(n, m)`` arrays whose rows
    are each contiguous (frames of a block), compared in the widest words that fit a row."""
    width = a.shape[1] * a.dtype.itemsize
    if width == 0:
        return np.ones(len(a), dtype=bool)
    word = f"u{next(w for w in (8, 4, 2, 1) if width % w == 0)}"
    return (a.view(word) == b.view(word)).all(axis=1)


def _span(first: int, last: int) -> str:
    """' 3' or 's 1..3', after 'frame'."""
    return f" {first}" if first == last else f"s {first}..{last}"


def _index_dtype(size: int) -> type:
    """The integer type of indices into ``size`` slots: int32 where it holds them (k of
    them per transition)."""
    return np.int32 if size < 2**31 else np.int64


class FrameWrite(NamedTuple):
    """A checked block of frame stacks, ready to be written."""

    #: per written entry, the flat slots of its k frames (``(..., k)``): its ``index`` row
    stack_slots: np.ndarray
    #: per written entry, its newest frame
    newest: np.ndarray
    #: (entries not in one run) each entry's lane and frame serial; each lane's count
    lanes: np.ndarray | None = None
    serials: np.ndarray | None = None
    added: np.ndarray | None = None


class FrameStacks:
    """A field of ``k``-frame stacks (``(k, ...)``, stack axis first), one frame per
    transition (see the module docstring). ``frames`` holds each lane's ring of newest
    frames, at slot ``serial % slots``; ``index`` holds each transition's k frame slots."""

    def __init__(self, field: Field, num_lanes: int, lane_capacity: int,
                 frame_stack: int) -> None:
        self.field, self.num_lanes, self.lane_capacity = field, num_lanes, lane_capacity
        self.frame_stack = k = int(frame_stack)
        self.frame_shape = frame_shape(field.shape, k)
        #: per lane, the newest frame of its transitions, at slot serial % slots
        self.slots = lane_capacity + k - 1
        self.frames = np.zeros((num_lanes, self.slots, *self.frame_shape), dtype=field.dtype)
        #: per transition: the flat slots in ``frames`` of its stack's k frames, oldest
        #: first (0 on slots that hold no transition: a valid slot all the same)
        self.index: np.ndarray = np.zeros((num_lanes, lane_capacity, k),
                                          dtype=_index_dtype(num_lanes * self.slots))
        self.flat_index = self.index.reshape(num_lanes * lane_capacity, k)
        #: per lane: frames written, ever (the next frame's serial)
        self.serial = np.zeros(num_lanes, dtype=np.int64)
        self.touched = np.zeros(num_lanes, dtype=np.int64)  # frame slots 0.. written
        #: frame j of a stack is the newest frame of the transition min(k-1-j, back) back
        self._reach = np.arange(k - 1, -1, -1, dtype=np.int64)
        self.frames_flat = self.frames.reshape(-1, *self.frame_shape)
        self._frame_elements = int(np.prod(self.frame_shape, dtype=np.int64))

    # ------------------------------------------------------------------ sizes
    @staticmethod
    def bytes_per_slot(field: Field, frame_stack: int) -> int:
        """One frame and the slots of the transition's k frames (4 bytes each)."""
        frame = frame_shape(field.shape, frame_stack)
        return (field.dtype.itemsize * int(np.prod(frame, dtype=np.int64))
                + frame_stack * np.dtype(np.int32).itemsize)

    def frame_bytes(self) -> int:
        return self.field.dtype.itemsize * self._frame_elements

    def nominal_extra_bytes(self) -> int:
        """Each lane's ring holds k - 1 frames more than it has transitions."""
        return self.num_lanes * (self.frame_stack - 1) * self.frame_bytes()

    def resident_extra_bytes(self, touched: np.ndarray) -> int:
        """The frame slots written beyond the ``touched`` transition slots, and the
        per-lane counters."""
        return (self.frame_bytes() * int(self.touched.sum() - touched.sum())
                + self.serial.nbytes + self.touched.nbytes)

    # ------------------------------------------------------------------ writing
    def readied(self, values: Any) -> np.ndarray:
        """Frames are compared row by row: each must be contiguous (usually no copy)."""
        return np.ascontiguousarray(values, dtype=self.field.dtype)

    def encode_run(self, values: np.ndarray) -> FrameWrite:
        back, newest = self._back_of_full_block(values)
        serials = self.serial + np.arange(len(values))[:, None]
        return FrameWrite(self._index_of(np.arange(self.num_lanes), serials, back), newest)

    def write_run(self, start: int, encoded: FrameWrite) -> None:
        steps = len(encoded.stack_slots)
        self.index[:, start : start + steps] = encoded.stack_slots.swapaxes(0, 1)
        serial = int(self.serial[0]) % self.slots
        if serial + steps <= self.slots and (self.serial == self.serial[0]).all():
            self.frames[:, serial : serial + steps] = encoded.newest.swapaxes(0, 1)
        else:
            self._store(encoded.newest.reshape(-1, *self.frame_shape),
                        np.arange(steps * self.num_lanes) % self.num_lanes,
                        (self.serial + np.arange(steps)[:, None]).reshape(-1))
        self._count(steps)

    def encode(self, values: np.ndarray, rows: np.ndarray, entries: Entries) -> FrameWrite:
        serials = (self.serial + entries.counts - 1).reshape(-1)  # each step's frame's
        if entries.idx is None:
            back, newest = self._back_of_full_block(values)
            lanes = np.arange(len(entries.flat)) % self.num_lanes
        else:
            lanes, serials = entries.idx % self.num_lanes, serials.take(entries.idx)
            back, newest = self._back_of_masked_block(rows, entries.idx, lanes, serials)
        return FrameWrite(self._index_of(lanes, serials, back.reshape(-1)), newest, lanes,
                          serials, entries.added)

    def write(self, flat: np.ndarray, encoded: FrameWrite) -> None:
        assert encoded.lanes is not None and encoded.serials is not None
        self._store(encoded.newest.reshape(-1, *self.frame_shape), encoded.lanes,
                    encoded.serials)
        self._count(encoded.added)
        self.flat_index[flat] = encoded.stack_slots

    def _store(self, newest: np.ndarray, lanes: np.ndarray, serials: np.ndarray) -> None:
        self.frames_flat[self._slot(lanes, serials)] = newest

    def _count(self, added: Any) -> None:
        self.serial += added
        np.maximum(self.touched, np.minimum(self.serial, self.slots), out=self.touched)

    def _slot(self, lanes: np.ndarray, serials: np.ndarray) -> np.ndarray:
        """The flat slot of frames ``serials`` (any integers: modulo the ring) of ``lanes``."""
        return lanes * self.slots + serials % self.slots

    def _index_of(self, lanes: np.ndarray, serials: np.ndarray, back: np.ndarray
                  ) -> np.ndarray:
        """The ``index`` rows (``(..., k)``) of transitions of ``lanes`` whose newest
        frames have ``serials``, with ``back`` counts: frame j is the newest frame of the
        transition ``min(k-1-j, back)`` earlier."""
        back = np.minimum(self._reach, np.asarray(back)[..., None])
        return self._slot(np.asarray(lanes)[..., None], serials[..., None] - back)

    def _lane_frames(self, n: int) -> np.ndarray:
        """Each lane's ``n`` newest frames (whether or not their transitions are still stored,
        or were cleared), oldest first: ``(lanes, n, ...)``."""
        serials = self.serial[:, None] + np.arange(-n, 0)
        return self.frames_flat.take(self._slot(np.arange(self.num_lanes)[:, None], serials),
                                     axis=0)

    # ------------------------------------------------------------------ checking a write
    def _back_of_full_block(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For a block where every lane writes every step (``(T, lanes, k, ...)``
        observations, contiguous): each step's ``back`` count ``(T, lanes)`` and its newest
        frame ``(T, lanes, ...)``. The frames before step t's newest are the newest of steps
        t - 1, t - 2, ..., then the lane's newest stored ones."""
        k, (steps, lanes) = self.frame_stack, obs.shape[:2]
        ext = np.empty((k - 1 + steps, lanes, *self.frame_shape), dtype=self.field.dtype)
        ext[: k - 1] = self._lane_frames(k - 1).swapaxes(0, 1)
        ext[k - 1 :] = obs[:, :, -1]
        rows = ext.reshape(k - 1 + steps, lanes * self._frame_elements)
        before = [rows[k - 1 - i : k - 1 - i + steps].reshape(steps * lanes, -1)
                  for i in range(1, k)]
        stacks = obs.reshape(steps * lanes, k, self._frame_elements)
        return self._back_of(stacks, before, None).reshape(steps, lanes), ext[k - 1 :]

    def _back_of_masked_block(self, obs_w: np.ndarray, idx: np.ndarray, lanes: np.ndarray,
                              serials: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_back_of_full_block` for the written entries of a masked block: flat
        ``idx`` (time-major) of ``lanes``, whose frames get ``serials``; observations
        ``obs_w``. Each lane's frames, its newest stored ones first, are laid end to end."""
        k, n = self.frame_stack, len(idx)
        added = np.bincount(lanes, minlength=self.num_lanes)
        base = np.arange(self.num_lanes) * (k - 1) + np.cumsum(added) - added
        at = base[lanes] + (k - 1) + (serials - self.serial[lanes])
        ext = np.empty((self.num_lanes * (k - 1) + n, self._frame_elements),
                       dtype=self.field.dtype)
        ext[(base[:, None] + np.arange(k - 1)).reshape(-1)] = self._lane_frames(k - 1).reshape(
            -1, self._frame_elements)
        stacks = obs_w.reshape(n, k, self._frame_elements)
        ext[at] = stacks[:, -1]
        before = [ext.take(at - i, axis=0) for i in range(1, k)]
        return self._back_of(stacks, before, idx), obs_w[:, -1]

    def _back_of(self, stacks: np.ndarray, before: list[np.ndarray], idx: np.ndarray | None
                 ) -> np.ndarray:
        """The ``back`` count of each of ``stacks`` (``(n, k, m)``, rows of m elements):
        the largest b such that its frames k-1-b .. k-2 are the newest frames of its lane's
        b previous transitions (``before[i - 1]``: the i-th previous one's, ``(n, m)``). The
        rebuild is exact if frames 0 .. k-1-b are equal too (a reset padding repeats an
        episode's first frame); if they are not, no smaller count rebuilds it either.

        :raises ValueError: an observation that has no such count, described, with the fix;
            ``idx`` (flat, time-major; None: ``arange(n)``) places it in the block.
        """
        k = self.frame_stack
        back = np.zeros(len(stacks), dtype=np.uint8)
        run = np.ones(len(stacks), dtype=bool)
        for i in range(1, k):
            run &= _same_rows(stacks[:, k - 1 - i], before[i - 1])
            back += run
        short = np.flatnonzero(back < k - 1)  # episode starts, mostly: check their padding
        if len(short):
            sub = stacks.take(short, axis=0)
            pad = np.zeros(len(short), dtype=np.int64)  # frames 0..pad are equal
            run = np.ones(len(short), dtype=bool)
            for j in range(k - 1):
                run &= _same_rows(sub[:, j], sub[:, j + 1])
                pad += run
            wrong = np.flatnonzero(pad < k - 1 - back[short])
            if len(wrong):
                self._refuse(int(short[wrong[0]]), int(back[short[wrong[0]]]), len(wrong), idx)
        return back

    def _refuse(self, first: int, b: int, count: int, idx: np.ndarray | None) -> None:
        """Raise the ValueError of :meth:`_back_of` for entry ``first`` (whose frames follow
        on for ``b`` steps), one of ``count``."""
        k = self.frame_stack
        step, env = divmod(first if idx is None else int(idx[first]), self.num_lanes)
        follow = (f"only its frame{_span(k - 1 - b, k - 2)} "
                  f"follow{'s' * (b == 1)} on from the env's previous frames" if b else
                  f"its frame {k - 2} is not the env's previous frame")
        raise ValueError(
            f"buffer frame_stack={k} stores each frame once, but the observation of "
            f"env {env} at step {step} of this write ({count} in all) is neither "
            f"a stack of {k} frames that follows on from its env's previous one nor "
            f"an episode's first one: {follow} and its frame{_span(0, k - 1 - b)} "
            "are not all equal (a reset padding). Within an episode frames "
            f"0..{k - 2} must be the previous observation's 1..{k - 1}, and before an "
            "episode's first frame the stack repeats it (FrameStackObservation's "
            "padding_type='reset'); store other observations (another padding, a "
            "wrapper that is not a frame stack) whole with buffer.frame_stack=1")

    # ------------------------------------------------------------------ reading
    def take(self, flat: np.ndarray) -> np.ndarray:
        """The stacks at flat slots ``flat``, each rebuilt from its lane's frames: one
        gather of k frames. Any slot gives some stack (one that holds no transition,
        garbage)."""
        return self.frames_flat.take(self.flat_index.take(flat, axis=0), axis=0)

    def first(self, t: int, valid: np.ndarray) -> np.ndarray:
        """Each lane's first ``t`` slots' stacks, ``(lanes, t, k, ...)``, zero where not
        ``valid``."""
        stacks = self.take(self._lane_base()[:, None] + np.arange(t))
        stacks[~valid] = 0
        return stacks

    def successors(self, t: int) -> np.ndarray:
        """The stacks of each lane's slots ``1 .. t`` (modulo the lane): the successors of
        its first ``t`` slots (past a lane's newest: garbage)."""
        return self.take(self._lane_base()[:, None] + np.arange(1, t + 1) % self.lane_capacity)

    def _lane_base(self) -> np.ndarray:
        return np.arange(self.num_lanes, dtype=np.int64) * self.lane_capacity

    # ------------------------------------------------------------------ state
    def state_rows(self, order: TimeOrder) -> dict[str, np.ndarray]:
        """Each transition's newest frame (``frames``) and its ``back`` count."""
        index = self.flat_index[order.rows]
        return {"frames": self.frames_flat[index[:, -1]],
                # frame 0 is back (at most k - 1) frames before the newest
                "back": ((index[:, -1] - index[:, 0]) % self.slots).astype(np.uint8)}

    def state_lanes(self, order: TimeOrder) -> dict[str, np.ndarray]:
        """Each lane's k - 1 frames before its oldest transition's (``history``)."""
        earlier = (self.serial - order.size)[:, None] + np.arange(1 - self.frame_stack, 0)
        return {"history": self.frames_flat[self._slot(np.arange(self.num_lanes)[:, None],
                                                       earlier)]}

    def load(self, s: dict[str, np.ndarray], order: TimeOrder) -> None:
        """A checked state's frames, serials from 0: the history's, then the transitions'
        in time order."""
        k = self.frame_stack
        self.serial[:] = order.size + k - 1
        self._store(s["history"].reshape(-1, *self.frame_shape),
                    np.repeat(np.arange(self.num_lanes), k - 1),
                    np.tile(np.arange(k - 1), self.num_lanes))
        self._store(s["frames"], order.lanes, k - 1 + order.age)
        self.flat_index[order.rows] = self._index_of(order.lanes, k - 1 + order.age, s["back"])
        self._count(0)


def stacks_of_state(s: dict[str, np.ndarray]) -> np.ndarray:
    """The observations of a checked frame-stack state's transitions, in its row order:
    each lane's history and frames laid end to end, then one gather of k frames each."""
    k, size, frames = int(s["frame_stack"]), s["size"], s["frames"]
    lanes = np.repeat(np.arange(len(size)), size)
    start = np.cumsum(size) - size
    base = np.arange(len(size)) * (k - 1) + start  # where each lane's history begins
    ext = np.empty((len(frames) + len(size) * (k - 1), *frames.shape[1:]), dtype=frames.dtype)
    ext[(base[:, None] + np.arange(k - 1)).reshape(-1)] = s["history"].reshape(
        -1, *frames.shape[1:])
    at = base[lanes] + (k - 1) + np.arange(len(lanes)) - start[lanes]
    ext[at] = frames
    back = np.minimum(np.arange(k - 1, -1, -1), s["back"].astype(np.int64)[:, None])
    return ext.take(at[:, None] - back, axis=0)
