"""Preallocated transition storage with one lane per env, each observation (or each frame
of frame-stacked observations) stored once.

A lane is a circular array of the transitions of one env, in time order, so
consecutive entries of a lane are consecutive steps of that env (what n-step
returns and GAE need). The collector writes only real transitions: under
gymnasium's next-step autoreset, the reset step of a finished env is skipped,
so lanes may hold different counts.

Observations are stored once. Within an episode the next observation of a transition
is the observation of the next transition of its lane, so it is found by index, as
DQN Zoo and Dopamine store each Atari frame once and Stable-Baselines3's
``optimize_memory_usage`` reads ``obs[i + 1]``. Unlike SB3's option (where the next
episode's first observation overwrites an episode's final one), every next observation
given at write time that differs bit for bit from its successor's observation is kept
aside: the true final observation at an episode's end (terminated or truncated), the last
transition before a masked reset step, a dataset whose rows are not consecutive. Reading
gives back exactly the next observation that was written. The newest transition of a lane
has no successor yet, so its next observation waits as the lane's *pending* one until the
lane's next write decides whether it is needed.

Frame stacks (``frame_stack=k > 1``: observations of shape ``(k, ...)``, as gymnasium's
``FrameStackObservation`` gives, oldest frame first) go one step further, as DQN Zoo and
Dopamine do: within an episode frames ``0..k-2`` of an observation are frames ``1..k-1``
of the previous one, so a transition stores only its newest frame, ``obs[-1]``, and a
count ``back`` (0..k-1) of the frames before it that are the newest frames of the lane's
``back`` previous transitions; the older ones repeat the oldest of those (at an episode's
start, ``padding_type="reset"`` repeats the reset frame). Frame ``j`` of a transition is
the newest frame of the transition ``min(k-1-j, back)`` steps earlier in its lane; a
transition keeps the slots of its k frames (``frame_index``, k 4-byte integers written
with it), so rebuilding a stack is one gather of k frames, with no index arithmetic on
the sampling path. ``back`` is not taken from the episode flags but derived from the data
at write time: the largest count for which the rebuild gives back the written observation
bit for bit, and a write whose observation no count rebuilds exactly (another padding, a
wrapper that is not a frame stack) raises ``ValueError`` before anything is stored. A
lane's frames live in their own ring of ``lane_capacity + k - 1`` slots, indexed by how
many frames the lane has written (its serial), so the ``k - 1`` frames before a full
lane's oldest transition (already overwritten as transitions) are still there, and so are
a lane's newest frames after :meth:`ReplayBuffer.clear`, for an episode that goes on after
it (an on-policy rollout).

The asides live in one ring per lane, written in time order; a transition holds a
4-byte reference into it. Transitions are overwritten oldest first and asides are written
in the order of their transitions, so the live asides of a lane are always its newest
ones: the ring never overwrites one that is still referenced as long as it has room for
the live ones, and it doubles when it has not. It costs memory in proportion to the
asides held (about one observation per episode end), not to the capacity. Asides and
pending next observations are whole observations, whole stacks too.

Storage is allocated with ``np.zeros`` (calloc: pages are mapped on first write), so a
large buffer costs memory as it fills, not when it is built.

A buffer only stores; a sampler (:mod:`rltrain.data.samplers`) chooses indices and the
return computations (:mod:`rltrain.data.returns`) build batches from the primitives here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch


class BufferFullError(RuntimeError):
    pass


@dataclass(frozen=True)
class Batch:
    """Sampled transitions, as the read path (rltrain.data.reading) gives them to an update:
    with n-step returns applied, the target is ``rew + discount * V(next_obs)``. Host
    arrays, or tensors on the device when the buffer keeps a device copy
    (:meth:`ReplayBuffer.mirror_on`) and the batch is one-step."""

    obs: np.ndarray | torch.Tensor
    act: np.ndarray | torch.Tensor
    rew: np.ndarray | torch.Tensor
    next_obs: np.ndarray | torch.Tensor
    #: the bootstrap value's factor, from the algorithm's returns transform
    #: (rltrain.data.transforms); None for an algorithm that declares none (BC)
    discount: np.ndarray | torch.Tensor | None
    #: (lane, position) of each sampled transition, for priority updates
    lanes: np.ndarray
    positions: np.ndarray
    #: importance-sampling weights (float32, ``(batch,)``) when the sampler is prioritised
    #: (:class:`rltrain.data.samplers.PrioritizedSampler`); None under uniform sampling
    weights: np.ndarray | None = None


@dataclass(frozen=True)
class Rollout:
    """Every stored transition as ``(num_lanes, T, ...)`` arrays in time order, with a
    ``valid`` mask for the unused slots at the end of shorter lanes."""

    obs: np.ndarray
    act: np.ndarray
    rew: np.ndarray
    next_obs: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    valid: np.ndarray
    #: a recurrent policy's state ``(num_lanes, state_size)`` on each lane's first transition:
    #: what the policy acted on it with (rltrain.recurrent); None for a policy without memory
    start_state: np.ndarray | None = None

    @property
    def dones(self) -> np.ndarray:
        return self.terminated | self.truncated

    @property
    def num_transitions(self) -> int:
        return int(self.valid.sum())


class Window(NamedTuple):
    """For each of ``B`` starting transitions, the ``n`` consecutive transitions of its lane
    from there on: ``(B, n)`` arrays. ``stored`` is False past the lane's newest transition
    (those entries hold whatever the slot holds and must be ignored). (A named tuple: it is
    built for every batch, and cheaper to build than a frozen dataclass.)"""

    rew: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    stored: np.ndarray
    positions: np.ndarray
    #: the entries' flat indices (lane * lane_capacity + position), for the gathers that follow
    flat: np.ndarray


#: an aside reference is (serial number of the aside mod this) + 1; 0 means "no aside"
_REF_MOD = 1 << 31
#: the reference of each lane's newest transition: its next observation is pending
_PENDING = np.uint32(0xFFFFFFFF)
#: blocks of next observations up to this many bytes are compared in one piece
_SMALL_BLOCK = 1 << 16
#: extend() writes larger blocks in parts of at most this many observation elements
_BLOCK_ELEMENTS = 1 << 22
#: the smallest aside ring (slots per lane) once one is needed
_MIN_RING = 16
#: the per-transition arrays, in state_dict order
_FIELDS = ("obs", "act", "rew", "terminated", "truncated")


def _row_fields(frame_stack: int) -> tuple[str, ...]:
    """The per-transition rows of a state: whole observations, or (``frame_stack > 1``)
    each transition's newest frame and its ``back`` count."""
    return _FIELDS if frame_stack == 1 else ("frames", "back", *_FIELDS[1:])


def _frame_shape(obs_shape: tuple[int, ...], frame_stack: int) -> tuple[int, ...]:
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


def _differing(a: np.ndarray, b: np.ndarray, row: int) -> np.ndarray:
    """The indices of the observations (``row`` elements each, flattened over the leading
    axes) of ``a`` that differ from ``b``'s bit for bit, in increasing order. Found from the
    differing elements: one pass, where a per-row ``any`` is slow on short rows."""
    size = a.dtype.itemsize
    if size in (1, 2, 4, 8):  # a view: no copy
        a, b = a.view(f"u{size}"), b.view(f"u{size}")
    else:
        a, b = np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8)
        row *= size
    ne = a != b  # a new contiguous array
    if row in (2, 4, 8):  # a row's flags as one integer: nonzero finds the rows directly
        return ne.reshape(-1, row).view(f"u{row}").ravel().nonzero()[0]
    hit = ne.ravel().nonzero()[0]
    if row <= 1 or not len(hit):
        return hit
    rows = hit // row
    return rows[np.concatenate(([True], rows[1:] != rows[:-1]))]


def _span(first: int, last: int) -> str:
    """' 3' or 's 1..3', after 'frame'."""
    return f" {first}" if first == last else f"s {first}..{last}"


def _index_dtype(size: int) -> type:
    """The integer type of indices into ``size`` slots: int32 where it holds them (k of
    them per transition, with frame stacks)."""
    return np.int32 if size < 2**31 else np.int64


def _numpy(x: Any) -> np.ndarray:
    return x.numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


class ReplayBuffer:
    """Circular (replay) or append-only (rollout) storage, ``num_lanes`` x ``lane_capacity``.

    :param circular: overwrite the oldest transitions when a lane is full (replay);
        if False, a full lane raises :class:`BufferFullError` (on-policy rollouts).
    :param obs_dtype: the dtype observations are stored in (uint8 for image frames).
    :param frame_stack: k > 1: observations are stacks of k frames, shape ``(k, ...)``
        (gymnasium's ``FrameStackObservation``), stored one frame per transition and
        rebuilt on reading (see the module docstring); the buffer then holds ``frames``
        (per lane, a ring of ``lane_capacity + k - 1`` frames) and ``frame_index`` (per
        transition, the flat slots of its k frames) instead of ``obs``. A write that cannot
        be rebuilt exactly raises ValueError.
    """

    def __init__(
        self,
        num_lanes: int,
        lane_capacity: int,
        obs_shape: tuple[int, ...],
        act_shape: tuple[int, ...],
        act_dtype: np.dtype | type,
        *,
        obs_dtype: np.dtype | type = np.float32,
        circular: bool = True,
        frame_stack: int = 1,
    ) -> None:
        if num_lanes <= 0 or lane_capacity <= 0:
            raise ValueError("a buffer needs at least one lane and one slot per lane")
        self.num_lanes, self.lane_capacity, self.circular = num_lanes, lane_capacity, circular
        self.obs_shape, self.act_shape = tuple(obs_shape), tuple(act_shape)
        self.frame_stack = k = int(frame_stack)
        self.frame_shape = _frame_shape(self.obs_shape, frame_stack)
        self.obs_dtype = np.dtype(obs_dtype)
        shape = (num_lanes, lane_capacity)
        # np.zeros, never zeros_like/full: calloc'd pages are only mapped when written
        if k == 1:
            self.obs = np.zeros(shape + self.obs_shape, dtype=obs_dtype)
        else:
            #: per lane, the newest frame of its transitions, at slot serial % frame_slots
            self._frame_slots = lane_capacity + k - 1
            self.frames = np.zeros((num_lanes, self._frame_slots, *self.frame_shape),
                                   dtype=obs_dtype)
            #: per transition: the flat slots in ``frames`` of its stack's k frames, oldest
            #: first (0 on slots that hold no transition: a valid slot all the same)
            index_dtype = _index_dtype(num_lanes * self._frame_slots)
            self.frame_index: np.ndarray = np.zeros((*shape, k), dtype=index_dtype)
            #: per lane: frames written, ever (the next frame's serial)
            self._serial = np.zeros(num_lanes, dtype=np.int64)
            self._frames_touched = np.zeros(num_lanes, dtype=np.int64)  # slots 0.. written
            #: frame j of a stack is the newest frame of the transition min(k-1-j, back) back
            self._reach = np.arange(k - 1, -1, -1, dtype=np.int64)
            self._frames_flat = self.frames.reshape(-1, *self.frame_shape)
            self._frame_elements = int(np.prod(self.frame_shape, dtype=np.int64))
        #: the arrays of one row per transition slot, in state_dict order
        self._fields = ("obs" if k == 1 else "frame_index", *_FIELDS[1:])
        self.act = np.zeros(shape + self.act_shape, dtype=act_dtype)
        self.rew = np.zeros(shape, dtype=np.float32)
        self.terminated = np.zeros(shape, dtype=bool)
        self.truncated = np.zeros(shape, dtype=bool)
        #: per transition: 0 (the next observation is the successor's), the reference of
        #: its next observation in the aside ring, or _PENDING (the lane's newest: one
        #: lookup tells a reader all three). Invariant: 0 on every slot that holds no
        #: stored transition.
        self.aside_ref = np.zeros(shape, dtype=np.uint32)
        #: next write position and number of stored transitions, per lane
        self.ptr = np.zeros(num_lanes, dtype=np.int64)
        self.size = np.zeros(num_lanes, dtype=np.int64)
        #: transitions ever written per lane (a prioritised sampler finds the new ones by it)
        self.added = np.zeros(num_lanes, dtype=np.int64)
        #: the next observation of each lane's newest transition (meaningful if size > 0)
        self.pending = np.zeros((num_lanes, *self.obs_shape), dtype=obs_dtype)
        self._asides = np.zeros((num_lanes, 0, *self.obs_shape), dtype=obs_dtype)
        #: a recurrent policy's state on each lane's first transition (:meth:`set_start_state`)
        self.start_state: np.ndarray | None = None
        #: per lane: the serial number of its next aside; no live aside's is below floor
        self._aside_head = np.zeros(num_lanes, dtype=np.int64)
        self._aside_floor = np.zeros(num_lanes, dtype=np.int64)
        self._ring_base = np.zeros(num_lanes, dtype=np.int64)  # floor when the ring was made
        self._touched = np.zeros(num_lanes, dtype=np.int64)  # slots ever written, per lane
        #: every lane's ptr is the same (False may be wrong, True never is)
        self._lockstep = True
        #: the one-step transitions again on an accelerator, written as they are here
        #: (:meth:`mirror_on`); None: batches are gathered from the host arrays
        self.mirror: DeviceMirror | None = None
        #: no lane's ring has room for fewer than this many more asides
        self._slack = 0
        self._written = 0  # asides written by all lanes, ever: a bound on any lane's serial
        self._obs_size = int(np.prod(self.obs_shape, dtype=np.int64))
        self._lane_base = np.arange(num_lanes, dtype=np.int64) * lane_capacity
        n = num_lanes * lane_capacity
        # flat (lanes * capacity) views: one flat index is cheaper than 2-D fancy indexing
        self._flat = {name: getattr(self, name).reshape(n, *getattr(self, name).shape[2:])
                      for name in (*self._fields, "aside_ref")}

    # ------------------------------------------------------------------ sizes
    @staticmethod
    def bytes_per_transition(obs_shape: tuple[int, ...], obs_dtype: np.dtype | type,
                             act_shape: tuple[int, ...], act_dtype: np.dtype | type, *,
                             frame_stack: int = 1) -> int:
        """What one stored transition costs: its observation (once), action, reward, two
        flags and its aside reference; with ``frame_stack`` k > 1, one frame (``obs_shape[1:]``)
        instead of the observation, and the slots of its k frames (4 bytes each). Each episode
        end adds one observation kept aside; with k > 1, each lane k - 1 frames."""
        frame = _frame_shape(tuple(obs_shape), frame_stack)
        obs = np.dtype(obs_dtype).itemsize * int(np.prod(frame, dtype=np.int64))
        act = np.dtype(act_dtype).itemsize * int(np.prod(act_shape, dtype=np.int64))
        index = frame_stack * np.dtype(np.int32).itemsize if frame_stack > 1 else 0
        return obs + index + act + 4 + 1 + 1 + np.dtype(np.uint32).itemsize

    def _frame_bytes(self) -> int:
        """What one frame (k > 1) or one observation costs."""
        return self.obs_dtype.itemsize * int(np.prod(self.frame_shape, dtype=np.int64))

    def nominal_bytes(self) -> int:
        """The bytes the full buffer would hold, asides aside (with frame stacks, each lane's
        ring of frames holds k - 1 more than it has transitions)."""
        per = self.bytes_per_transition(self.obs_shape, self.obs_dtype, self.act_shape,
                                        self.act.dtype, frame_stack=self.frame_stack)
        extra = self.num_lanes * (self.frame_stack - 1) * self._frame_bytes()
        return self.num_lanes * self.lane_capacity * per + extra

    def resident_bytes(self) -> int:
        """An estimate of the memory actually held now: the slots ever written (pages are
        mapped on first write and stay mapped after :meth:`clear`), the aside ring's written
        slots, and the small per-lane arrays."""
        per = self.bytes_per_transition(self.obs_shape, self.obs_dtype, self.act_shape,
                                        self.act.dtype, frame_stack=self.frame_stack)
        ring_slots = np.minimum(self._aside_head - self._ring_base, self._asides.shape[1])
        obs_bytes = self.pending[0].nbytes
        small = sum(a.nbytes for a in (self.ptr, self.size, self.pending, self._aside_head,
                                       self._aside_floor, self._ring_base, self._touched))
        slots = per * int(self._touched.sum())
        if self.frame_stack > 1:  # frames are written to their own ring
            slots += self._frame_bytes() * int(self._frames_touched.sum() - self._touched.sum())
            small += self._serial.nbytes + self._frames_touched.nbytes
        return int(slots + obs_bytes * ring_slots.sum() + small)

    def __len__(self) -> int:
        return int(self.size.sum())

    def clear(self) -> None:
        """Forget every transition (nothing stays pending); memory stays allocated. With
        frame stacks, each lane's newest frames stay the frames before its next transition's,
        so that an episode may go on across a clear (an on-policy rollout's)."""
        refs = self.aside_ref[:, : int(self.size.max(initial=0))]
        refs[refs != 0] = 0  # keep the invariant; writing only those maps no new page
        self.ptr[:] = 0
        self.size[:] = 0
        self.added[:] = 0
        self._aside_floor[:] = self._aside_head
        self._lockstep = True

    def oldest(self) -> np.ndarray:
        """Position of the oldest stored transition of each lane."""
        return np.where(self.size == self.lane_capacity, self.ptr % self.lane_capacity, 0)

    # ------------------------------------------------------------------ writing
    def set_start_state(self, state: np.ndarray) -> None:
        """For each lane that holds no transition yet, the state ``(num_lanes, state_size)`` a
        recurrent policy acts on the lane's next (its first) transition with; lanes that hold
        transitions keep theirs. :meth:`rollout` hands it on: an on-policy update replays each
        lane's sequence from it (rltrain.recurrent)."""
        state = np.asarray(state, dtype=np.float32)
        if self.start_state is None or self.start_state.shape != state.shape:
            if self.start_state is not None and (self.size > 0).any():
                raise ValueError(f"start state of shape {state.shape}, but the lanes' states "
                                 f"are {self.start_state.shape}")
            self.start_state = np.zeros_like(state)
        empty = self.size == 0
        self.start_state[empty] = state[empty]

    def add(
        self,
        obs: np.ndarray,
        act: np.ndarray,
        rew: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        valid: np.ndarray | None = None,
    ) -> None:
        """Append one step of every env (arrays with a leading ``num_lanes`` axis);
        lanes whose ``valid`` entry is False are left untouched."""
        self.extend(np.asarray(obs)[None], np.asarray(act)[None], np.asarray(rew)[None],
                    np.asarray(next_obs)[None], np.asarray(terminated)[None],
                    np.asarray(truncated)[None], None if valid is None else np.asarray(valid)[None])

    def extend(
        self,
        obs: np.ndarray,
        act: np.ndarray,
        rew: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        valid: np.ndarray | None = None,
    ) -> None:
        """Append ``T`` consecutive steps of every env at once (arrays with leading axes
        ``(T, num_lanes)``): the same as ``T`` calls of :meth:`add`, in a few array
        operations. A step's lanes whose ``valid`` entry is False are left untouched.

        :raises BufferFullError: if a lane of an append-only buffer would overflow; then
            nothing is written.
        :raises ValueError: (``frame_stack`` > 1) an observation that cannot be rebuilt
            from its newest frame and its lane's previous ones; then nothing of this block
            is written (of a block larger than the parts it is written in, the parts before
            that observation's are).
        """
        steps, cap = len(rew), self.lane_capacity
        if steps == 0:
            return
        # within lane_capacity steps no lane wraps onto a slot written in the same block;
        # and a block of at most _BLOCK_ELEMENTS observation elements keeps the comparison's
        # temporaries small (a whole dataset arrives as one block)
        chunk = max(1, _BLOCK_ELEMENTS // (self.num_lanes * max(self._obs_size, 1)))
        if self.circular:
            chunk = min(chunk, cap)
        if steps > chunk:
            if not self.circular:  # all or nothing: refuse before the first part is written
                added = steps if valid is None else np.asarray(valid, dtype=bool).sum(0)
                if (self.ptr + added > cap).any():
                    raise BufferFullError(f"rollout storage is full ({cap} transitions per env)")
            for t in range(0, steps, chunk):
                part = slice(t, t + chunk)
                self.extend(obs[part], act[part], rew[part], next_obs[part], terminated[part],
                            truncated[part], None if valid is None else valid[part])
            return
        if valid is not None:
            valid = np.asarray(valid, dtype=bool)
            if valid.all():
                valid = None
        stacked = self.frame_stack > 1
        # frames are compared row by row: each must be contiguous (usually no copy)
        obs = (np.ascontiguousarray(obs, dtype=self.obs_dtype) if stacked else
               np.asarray(obs, dtype=self.obs_dtype))
        next_obs = np.asarray(next_obs, dtype=self.obs_dtype)
        fields = {"obs": obs, "act": act, "rew": rew, "terminated": terminated,
                  "truncated": truncated}
        start = int(self.ptr[0])
        if valid is None and self._lockstep and start + steps <= cap:
            # the collector's usual block: every lane writes the same run of slots
            if stacked:  # checked before anything is written
                back, newest = self._back_of_full_block(obs)
                del fields["obs"]
                fields["frame_index"] = self._frame_index_of(
                    np.arange(self.num_lanes), self._serial + np.arange(steps)[:, None], back)
            ts, ls, values = self._asides_of_full_block(obs, next_obs)
            run = slice(start, start + steps)
            for name, value in fields.items():
                getattr(self, name)[:, run] = np.asarray(value).swapaxes(0, 1)
            if self.mirror is not None:  # step-major, as the block's rows are
                slots = self._lane_base + np.arange(start, start + steps)[:, None]
                self.mirror.write(slots.reshape(-1), *(
                    np.asarray(a).reshape(steps * self.num_lanes, *np.shape(a)[2:])
                    for a in (obs, act, rew, terminated, next_obs)))
            if stacked:
                serial = int(self._serial[0]) % self._frame_slots
                if serial + steps <= self._frame_slots and (self._serial == self._serial[0]).all():
                    self.frames[:, serial : serial + steps] = newest.swapaxes(0, 1)
                else:
                    self._store_frames(newest.reshape(-1, *self.frame_shape),
                                       np.arange(steps * self.num_lanes) % self.num_lanes,
                                       (self._serial + np.arange(steps)[:, None]).reshape(-1))
                self._count_frames(steps)
            self.aside_ref[:, run] = 0
            self.aside_ref[:, start - 1] = 0  # the pending transitions are resolved
            if len(ts):
                owners = self._lane_base[ls] + ts + (start - 1)  # the lane's previous slot
                if start == 0:
                    owners[ts == 0] += cap
                self._keep_asides(ls, owners, values)
            self.pending[...] = next_obs[-1]
            self.aside_ref[:, start + steps - 1] = _PENDING
            np.maximum(self._touched, start + steps, out=self._touched)
            self.ptr[:] = start + steps if start + steps < cap or not self.circular else 0
            np.minimum(self.size + steps, cap, out=self.size)
            self.added += steps
            return
        if valid is None:
            counts = np.arange(1, steps + 1)[:, None]
            added = np.full(self.num_lanes, steps)
        else:
            counts = valid.cumsum(0)
            added = counts[-1]
        if not self.circular and (self.ptr + added > cap).any():
            raise BufferFullError(f"rollout storage is full ({cap} transitions per env)")
        pos = self.ptr + counts - 1  # (T, lanes): the slot of each step of each lane
        if self.circular:
            pos %= cap
        # one flat index into (lanes * capacity) views: cheaper than 2-D fancy indexing;
        # and the block's (T * lanes) entries taken by flat index, cheaper than masks
        flat = (self._lane_base + pos).reshape(-1)
        entries = {k: np.asarray(v).reshape(-1, *np.shape(v)[2:]) for k, v in fields.items()}
        nxt = next_obs.reshape(-1, *self.obs_shape)
        if stacked:  # the serial number of each step's frame in its lane
            serials = (self._serial + counts - 1).reshape(-1)
        if valid is None:
            if stacked:  # checked before anything is written
                back, newest = self._back_of_full_block(obs)
                entry_lanes = np.arange(len(flat)) % self.num_lanes
            ts, ls, values = self._asides_of_full_block(obs, next_obs)
            owners = flat.take(ts * self.num_lanes + ls) - 1  # the lane's previous slot
            owners[pos[ts, ls] == 0] += cap
            self.pending[...] = next_obs[-1]
        else:
            idx = np.flatnonzero(valid)  # time-major: each lane's steps in time order
            flat = flat.take(idx)
            entries = {k: v.take(idx, axis=0) for k, v in entries.items()}
            if stacked:  # checked before anything is written
                entry_lanes, serials = idx % self.num_lanes, serials.take(idx)
                back, newest = self._back_of_masked_block(entries["obs"], idx, entry_lanes,
                                                          serials)
            hit, ls, values, last = self._asides_of_masked_block(entries["obs"], nxt, valid,
                                                                 idx)
            owners = flat.take(hit) - 1  # the lane's previous slot
            owners[owners < self._lane_base[ls]] += cap
            # each lane's newest written step waits for its successor
            lanes = np.flatnonzero(added)
            self.pending[lanes] = nxt.take(last[lanes] * self.num_lanes + lanes, axis=0)
        if stacked:
            del entries["obs"]
            entries["frame_index"] = self._frame_index_of(entry_lanes, serials, back.reshape(-1))
            self._store_frames(newest.reshape(-1, *self.frame_shape), entry_lanes, serials)
            self._count_frames(added)
        for name, value in entries.items():
            self._flat[name][flat] = value
        if self.mirror is not None:
            written_next = nxt if valid is None else nxt.take(idx, axis=0)
            self.mirror.write(flat, entries["obs"], entries["act"], entries["rew"],
                              entries["terminated"], written_next)
        ref = self._flat["aside_ref"]
        ref[flat] = 0
        # the lanes' newest: resolved (or still pending: marked again below; in an empty
        # lane the slot holds nothing, and stays 0)
        ref[self._lane_base + (self.ptr - 1) % cap] = 0
        if len(ls):
            self._keep_asides(ls, owners, values)
        # lanes write their slots in order from 0: those below the highest ever written
        np.maximum(self._touched, np.minimum(self.ptr + added, cap), out=self._touched)
        self.ptr += added
        self.added += added
        if self.circular:
            self.ptr %= cap
        np.minimum(self.size + added, cap, out=self.size)
        ref[self._lane_base + (self.ptr - 1) % cap] = _PENDING * (self.size > 0)
        if valid is not None:  # lanes wrote different counts, most likely: no fast path
            self._lockstep = False

    def _asides_of_full_block(self, obs: np.ndarray, next_obs: np.ndarray
                              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For a block where every lane writes every step: the steps ``(ts, ls)`` (each
        lane's in time order) whose lane's previous transition needs its next observation,
        ``values``, kept aside.

        (A block of lane_capacity steps overwrites the pending transition it resolves: its
        aside is then referenced by nothing, as the transition's slot ends up holding the
        lane's newest. Harmless: live asides stay each lane's newest, see _make_room.)"""
        lanes, row = self.num_lanes, self._obs_size
        if next_obs.nbytes <= _SMALL_BLOCK:
            # the previous transition's next observation for every step, the pending ones
            # first: one comparison (a copy of a small block costs less than a second call)
            before = np.concatenate((self.pending[None], next_obs[:-1]))
            hit = _differing(before, obs, row)
            if len(hit) and hit[0] < lanes:  # nothing is pending in an empty lane
                hit = hit[(hit >= lanes) | (self.size[hit % lanes] > 0)]
            ts, ls = np.divmod(hit, lanes)
            return ts, ls, before.reshape(-1, *self.obs_shape).take(hit, axis=0)
        # the previous transition of step t >= 1 is step t - 1: one comparison for all
        hit = _differing(next_obs[:-1], obs[1:], row)
        values = next_obs.reshape(-1, *self.obs_shape).take(hit, axis=0)
        ts, ls = np.divmod(hit, lanes)
        ts += 1
        # step 0 of every lane resolves the lane's pending next observation, if any
        first = _differing(self.pending, obs[0], row)
        if len(first):
            first = first[self.size[first] > 0]
            ts = np.concatenate((np.zeros(len(first), dtype=ts.dtype), ts))
            ls = np.concatenate((first, ls))
            values = np.concatenate((self.pending[first], values))
        return ts, ls, values

    def _asides_of_masked_block(self, obs_w: np.ndarray, nxt: np.ndarray, valid: np.ndarray,
                                idx: np.ndarray
                                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """For a block with masked steps, written entries ``idx`` (flat ``t * lanes +
        lane``; observations ``obs_w``; next observations ``nxt`` flat): which entries'
        lane's previous transition needs its next observation, ``values``, kept aside, and
        their lanes. That transition is the lane's previous written step of the block, or
        its newest stored one (whose next observation is pending). Also each lane's last
        written step."""
        lanes = self.num_lanes
        # row t: the lane's last written step before t (-1: none, the pending transition)
        before_t = np.full((len(valid) + 1, lanes), -1, dtype=np.int64)
        np.copyto(before_t[1:], np.arange(len(valid))[:, None], where=valid)
        np.maximum.accumulate(before_t, axis=0, out=before_t)
        prev = before_t.reshape(-1).take(idx)
        lane = idx % lanes
        if nxt.nbytes <= _SMALL_BLOCK:
            # the pending rows after the block's: step -1 of a lane indexes its pending row
            source = np.concatenate((nxt, self.pending))
            before = source.take(prev * lanes + lane, axis=0)
        else:  # no copy of a large block: the pending rows are put in afterwards
            before = nxt.take(prev * lanes + lane, axis=0)
            pend = np.flatnonzero(prev < 0)
            before[pend] = self.pending[lane[pend]]
        hit = _differing(before, obs_w, self._obs_size)
        if len(hit) and prev.take(hit).min() < 0:  # nothing is pending in an empty lane
            hit = hit[(prev[hit] >= 0) | (self.size[lane[hit]] > 0)]
        return hit, lane.take(hit), before.take(hit, axis=0), before_t[-1]

    # ------------------------------------------------------------------ frame stacks
    def _lane_frames(self, n: int) -> np.ndarray:
        """Each lane's ``n`` newest frames (whether or not their transitions are still stored,
        or were cleared), oldest first: ``(lanes, n, ...)``."""
        serials = self._serial[:, None] + np.arange(-n, 0)
        return self._frames_flat.take(self._frame_slot(np.arange(self.num_lanes)[:, None],
                                                       serials), axis=0)

    def _frame_slot(self, lanes: np.ndarray, serials: np.ndarray) -> np.ndarray:
        """The flat slot of frames ``serials`` (any integers: modulo the ring) of ``lanes``."""
        return lanes * self._frame_slots + serials % self._frame_slots

    def _frame_index_of(self, lanes: np.ndarray, serials: np.ndarray, back: np.ndarray
                        ) -> np.ndarray:
        """The ``frame_index`` rows (``(..., k)``) of transitions of ``lanes`` whose newest
        frames have ``serials``, with ``back`` counts: frame j is the newest frame of the
        transition ``min(k-1-j, back)`` earlier."""
        back = np.minimum(self._reach, np.asarray(back)[..., None])
        return self._frame_slot(np.asarray(lanes)[..., None], serials[..., None] - back)

    def _store_frames(self, newest: np.ndarray, lanes: np.ndarray, serials: np.ndarray
                      ) -> None:
        self._frames_flat[self._frame_slot(lanes, serials)] = newest

    def _count_frames(self, added: int | np.ndarray) -> None:
        self._serial += added
        np.maximum(self._frames_touched, np.minimum(self._serial, self._frame_slots),
                   out=self._frames_touched)

    def _back_of_full_block(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For a block where every lane writes every step (``(T, lanes, k, ...)``
        observations, contiguous): each step's ``back`` count ``(T, lanes)`` and its newest
        frame ``(T, lanes, ...)``. The frames before step t's newest are the newest of steps
        t - 1, t - 2, ..., then the lane's newest stored ones."""
        k, (steps, lanes) = self.frame_stack, obs.shape[:2]
        ext = np.empty((k - 1 + steps, lanes, *self.frame_shape), dtype=self.obs_dtype)
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
        at = base[lanes] + (k - 1) + (serials - self._serial[lanes])
        ext = np.empty((self.num_lanes * (k - 1) + n, self._frame_elements),
                       dtype=self.obs_dtype)
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
                first = int(short[wrong[0]])
                step, env = divmod(first if idx is None else int(idx[first]), self.num_lanes)
                b = int(back[first])
                follow = (f"only its frame{_span(k - 1 - b, k - 2)} "
                          f"follow{'s' * (b == 1)} on from the env's previous frames" if b else
                          f"its frame {k - 2} is not the env's previous frame")
                raise ValueError(
                    f"buffer frame_stack={k} stores each frame once, but the observation of "
                    f"env {env} at step {step} of this write ({len(wrong)} in all) is neither "
                    f"a stack of {k} frames that follows on from its env's previous one nor "
                    f"an episode's first one: {follow} and its frame{_span(0, k - 1 - b)} "
                    "are not all equal (a reset padding). Within an episode frames "
                    f"0..{k - 2} must be the previous observation's 1..{k - 1}, and before an "
                    "episode's first frame the stack repeats it (FrameStackObservation's "
                    "padding_type='reset'); store other observations (another padding, a "
                    "wrapper that is not a frame stack) whole with buffer.frame_stack=1")
        return back

    def _keep_asides(self, ls: np.ndarray, owners: np.ndarray, values: np.ndarray) -> None:
        """Write next observations ``values`` (of lanes ``ls``, each lane's in time order)
        into their lanes' rings, and point the transitions (flat ``owners``) at them."""
        new = np.bincount(ls, minlength=self.num_lanes)
        serial = self._aside_head[ls]
        if len(ls) > 1 and new.max() > 1:  # rank within the lane, in time order
            order = np.argsort(ls, kind="stable")
            grouped = ls[order]
            rank = np.empty(len(ls), dtype=np.int64)
            rank[order] = np.arange(len(ls)) - np.searchsorted(grouped, grouped)
            serial = serial + rank
        # room: a cheap bound first (each lane gains at most len(ls)), then the exact test
        self._slack -= len(ls)
        if self._slack < 0:
            if (self._aside_head + new - self._aside_floor > self._asides.shape[1]).any():
                self._make_room(new)
            self._slack = int((self._asides.shape[1] - (self._aside_head + new
                                                        - self._aside_floor)).min())
        ring = self._asides
        ring[ls, serial & (ring.shape[1] - 1)] = values
        # references are serials + 1 while no lane has written 2**31 - 1 asides (a bound:
        # all lanes' together), then modulo _REF_MOD
        self._written += len(ls)
        self._flat["aside_ref"][owners] = (serial + 1 if self._written < _REF_MOD - 1 else
                                           serial % _REF_MOD + 1)
        self._aside_head += new

    def _make_room(self, new: np.ndarray) -> None:
        """Make the rings hold every live aside and ``new`` more without overwriting one.

        Live asides are each lane's newest (transitions are overwritten oldest first and
        asides are written in their transitions' order), so counting the references (not
        the pending marks) tells exactly which serials are live: the newest ``live`` ones.
        A growing ring keeps room for as many again, so the next count is at least half a
        ring of asides away and counting stays cheap per aside. (At the largest ring, when
        most transitions need an aside, counts come more often; such data would cost as
        much as storing every next observation anyway.)
        """
        refs = self.aside_ref[:, : int(self._touched.max(initial=0))]
        live = np.count_nonzero((refs != 0) & (refs != _PENDING), axis=1)
        self._aside_floor = self._aside_head - live
        need = int((live + new).max())
        old = self._asides
        if 2 * need <= old.shape[1] or old.shape[1] == _pow2(self.lane_capacity):
            return
        size = min(max(_pow2(2 * need), _MIN_RING), _pow2(self.lane_capacity))
        ring = np.zeros((self.num_lanes, size, *self.obs_shape), dtype=old.dtype)
        if live.any():
            lanes = np.repeat(np.arange(self.num_lanes), live)
            rank = np.arange(len(lanes)) - np.repeat(np.cumsum(live) - live, live)
            serial = self._aside_floor[lanes] + rank
            ring[lanes, serial & (size - 1)] = old[lanes, serial & (old.shape[1] - 1)]
        self._asides = ring
        self._ring_base = self._aside_floor.copy()

    # ------------------------------------------------------------------ reading
    def _aside_of(self, lanes: np.ndarray, refs: np.ndarray) -> np.ndarray:
        """The asides that references ``refs`` (all > 0) of lanes ``lanes`` point at."""
        ring = self._asides
        size = ring.shape[1]
        slot = lanes * size + ((refs - 1) & max(size - 1, 0)).astype(np.int64)
        return ring.reshape(-1, *self.obs_shape).take(slot, axis=0)

    def _stacks(self, flat: np.ndarray) -> np.ndarray:
        """The observations of the transitions at flat indices ``flat``: the stored rows, or
        (frame stacks) each rebuilt from its lane's frames, one gather of k frames. Any slot
        gives some observation (a slot that holds no transition, garbage)."""
        if self.frame_stack == 1:
            return self._flat["obs"].take(flat, axis=0)
        return self._frames_flat.take(self._flat["frame_index"].take(flat, axis=0), axis=0)

    def obs_at(self, lanes: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """The observations of stored transitions ``(lanes[i], positions[i])``."""
        return self._stacks(self._lane_base[lanes] + positions)

    def act_at(self, lanes: np.ndarray, positions: np.ndarray) -> np.ndarray:
        return self._flat["act"].take(self._lane_base[lanes] + positions, axis=0)

    def next_obs_at(self, lanes: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """The next observations of stored transitions, exactly as they were written: the
        successor's observation, or the aside, or the lane's pending one."""
        lanes, positions = np.asarray(lanes), np.asarray(positions)
        return self._next_obs(self._lane_base[lanes] + positions, lanes, positions)

    def transitions(self, lanes: np.ndarray, positions: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(obs, act, rew, terminated, next_obs)`` of stored transitions: what a one-step
        batch reads, gathered with one index computation (the sampling hot path)."""
        flat = self._lane_base[lanes] + positions
        f = self._flat
        return (self._stacks(flat), f["act"].take(flat, axis=0), f["rew"].take(flat),
                f["terminated"].take(flat), self._next_obs(flat, lanes, positions))

    def _next_obs(self, flat: np.ndarray, lanes: np.ndarray, positions: np.ndarray
                  ) -> np.ndarray:
        succ = flat + 1
        succ[positions == self.lane_capacity - 1] -= self.lane_capacity
        out = self._stacks(succ)
        ref = self._flat["aside_ref"].take(flat)
        if ref.any():  # asides, and lanes' newest transitions (a pending one)
            special = np.flatnonzero(ref)
            ref, lanes = ref[special], lanes[special]
            newest = (ref == _PENDING).reshape(-1, *(1,) * len(self.obs_shape))
            pending = self.pending[lanes]
            # fewer operations than splitting the two: the ring's row for a pending
            # reference is a valid index that np.where drops
            out[special] = (pending if self._asides.shape[1] == 0 else
                            np.where(newest, pending, self._aside_of(lanes, ref)))
        return out

    def window(self, lanes: np.ndarray, positions: np.ndarray, n: int) -> Window:
        """The ``n`` consecutive transitions of each lane starting at each position (in time
        order, across the wrap-around), and whether each is stored yet."""
        lanes, positions = np.asarray(lanes), np.asarray(positions)
        wpos = (positions[:, None] + np.arange(n)) % self.lane_capacity
        flat = self._lane_base[lanes][:, None] + wpos
        f = self._flat
        # an entry is stored unless an earlier one of its window is the lane's newest (whose
        # next observation is pending): one gather, no counting from each lane's oldest
        newest = f["aside_ref"].take(flat[:, :-1]) == _PENDING
        stored = np.ones(flat.shape, dtype=bool)
        if n > 1:
            stored[:, 1:] = ~np.logical_or.accumulate(newest, axis=1)
        return Window(f["rew"].take(flat), f["terminated"].take(flat),
                      f["truncated"].take(flat), stored, wpos, flat)

    def obs_at_flat(self, flat: np.ndarray) -> np.ndarray:
        """The observations at flat indices (a window's), without recomputing them."""
        return self._stacks(flat)

    def act_at_flat(self, flat: np.ndarray) -> np.ndarray:
        return self._flat["act"].take(flat, axis=0)

    def next_obs_at_flat(self, flat: np.ndarray, lanes: np.ndarray) -> np.ndarray:
        """:meth:`next_obs_at` for flat indices of the given lanes."""
        return self._next_obs(flat, lanes, flat - self._lane_base[lanes])

    def rollout(self) -> Rollout:
        """All transitions of an append-only buffer, lanes x time."""
        if self.circular:
            raise RuntimeError("rollout() reads append-only storage; this buffer is circular")
        t = int(self.size.max(initial=0))
        valid = np.arange(t)[None, :] < self.size[:, None]
        if self.frame_stack == 1:
            obs = self.obs[:, :t]
            next_obs = np.empty((self.num_lanes, t, *self.obs_shape), dtype=self.obs_dtype)
            next_obs[:, : min(t, self.lane_capacity - 1)] = self.obs[:, 1 : t + 1]
        else:  # rebuilt: each slot's, then its successor slot's (past a lane's newest:
            # garbage, replaced below)
            flat = self._lane_base[:, None] + np.arange(t)
            obs = self._stacks(flat)
            obs[~valid] = 0
            next_obs = self._stacks(self._lane_base[:, None] + np.arange(1, t + 1)
                                    % self.lane_capacity)
        ref = self.aside_ref[:, :t]
        ls, ks = np.nonzero((ref != 0) & (ref != _PENDING))
        if len(ls):
            next_obs[ls, ks] = self._aside_of(ls, self.aside_ref[ls, ks])
        lanes = np.flatnonzero(self.size)
        next_obs[lanes, self.size[lanes] - 1] = self.pending[lanes]
        next_obs[~valid] = 0
        return Rollout(
            obs=obs,
            act=self.act[:, :t],
            rew=self.rew[:, :t],
            next_obs=next_obs,
            terminated=self.terminated[:, :t],
            truncated=self.truncated[:, :t],
            valid=valid,
            start_state=None if self.start_state is None else self.start_state.copy(),
        )

    # ------------------------------------------------------------------ state
    def _time_order(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The lane, flat index and age (0: the lane's oldest) of every stored transition,
        lane after lane, each lane oldest first."""
        size = self.size
        lanes = np.repeat(np.arange(self.num_lanes), size)
        age = np.arange(len(lanes)) - np.repeat(np.cumsum(size) - size, size)
        rows = self._lane_base[lanes] + (self.oldest()[lanes] + age) % self.lane_capacity
        return lanes, rows, age

    def state_dict(self) -> dict[str, Any]:
        """The filled part only, as tensors: every stored transition, lanes one after another
        in time order (``size`` says how many per lane), the asides they reference (by row),
        each lane's pending next observation, and ``ptr``, so that positions (and so samples
        and priorities) are the same after loading. Building it copies the stored part once.
        With frame stacks, each transition's newest frame (``frames``) and ``back`` count
        stand for its observation, and ``history`` holds each lane's k - 1 frames before its
        oldest transition's.
        """
        lanes, rows, age = self._time_order()
        ref = self._flat["aside_ref"][rows]
        has = (ref > 0) & (ref != _PENDING)
        asides = self._aside_of(lanes[has], ref[has])
        pending = self.pending.copy()
        pending[self.size == 0] = 0
        state = {name: self._flat[name][rows] for name in self._fields}
        if self.frame_stack > 1:
            index = state.pop("frame_index")
            earlier = (self._serial - self.size)[:, None] + np.arange(1 - self.frame_stack, 0)
            state = {"frames": self._frames_flat[index[:, -1]],
                     # frame 0 is back (at most k - 1) frames before the newest
                     "back": ((index[:, -1] - index[:, 0]) % self._frame_slots).astype(np.uint8),
                     **state, "history": self._frames_flat[self._frame_slot(
                         np.arange(self.num_lanes)[:, None], earlier)]}
        state.update(frame_stack=np.array(self.frame_stack),
                     lane_capacity=np.array(self.lane_capacity), ptr=self.ptr.copy(),
                     size=self.size.copy(), added=self.added.copy(),
                     aside_rows=np.flatnonzero(has), asides=asides, pending=pending)
        return {k: torch.from_numpy(v) for k, v in state.items()}  # fresh arrays

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict`, or the previous release's (full-capacity ``obs``
        and ``next_obs`` arrays, ``ptr``, ``size``, ``rng``; its ``rng`` is ignored: the
        sampler owns the draws now).

        :raises ValueError: a field that is missing or does not fit this buffer, named (a
            state of a buffer with another ``frame_stack``: that field).
        """
        k, stored_k = self.frame_stack, _frame_stack_of(state)
        if stored_k != k:
            held = (f"{stored_k}-frame stacks frame by frame" if stored_k > 1 else
                    "whole observations")
            raise ValueError(f"buffer frame_stack: the state holds {held} (frame_stack="
                             f"{stored_k}), this buffer has frame_stack={k}; load it into a "
                             f"buffer with frame_stack={stored_k}")
        if "next_obs" in state:
            expected = {"obs": self.obs.shape, "next_obs": self.obs.shape,
                        "act": self.act.shape, "rew": self.rew.shape,
                        "terminated": self.rew.shape, "truncated": self.rew.shape,
                        "ptr": self.ptr.shape, "size": self.size.shape}
            for name, shape in expected.items():
                if name not in state:
                    raise ValueError(f"buffer state has no {name!r}")
                if tuple(state[name].shape) != shape:
                    raise ValueError(f"buffer {name}: stored shape {tuple(state[name].shape)}, "
                                     f"expected {shape}")
            s = _from_old_format(state)
        else:
            s = _checked_state(state)
        for name, want in (("lane_capacity", self.lane_capacity), ("size", self.num_lanes)):
            got = int(s[name]) if name == "lane_capacity" else len(s[name])
            if got != want:
                what = "lane_capacity" if name == "lane_capacity" else "lanes"
                raise ValueError(f"buffer {name}: stored {got} {what}, expected {want}")
        for name, tail in (("obs" if k == 1 else "frames", self.frame_shape),
                           ("act", self.act_shape), ("asides", self.obs_shape),
                           ("pending", self.obs_shape)):
            if s[name].shape[1:] != tail:
                raise ValueError(f"buffer {name}: stored shape {s[name].shape}, expected "
                                 f"(n, {', '.join(map(str, tail))})")
        if k > 1 and s["history"].shape[2:] != self.frame_shape:
            raise ValueError(f"buffer history: stored shape {s['history'].shape}, expected "
                             f"{(self.num_lanes, k - 1, *self.frame_shape)}")
        self.clear()
        self.ptr[:], self.size[:] = s["ptr"], s["size"]
        lanes, rows, age = self._time_order()
        for name in _FIELDS[1:]:
            self._flat[name][rows] = s[name]
        if k == 1:
            self._flat["obs"][rows] = s["obs"]
        else:  # frame serials from 0: the history's, then the transitions' in time order
            self._serial[:] = self.size + k - 1
            self._store_frames(s["history"].reshape(-1, *self.frame_shape),
                               np.repeat(np.arange(self.num_lanes), k - 1),
                               np.tile(np.arange(k - 1), self.num_lanes))
            self._store_frames(s["frames"], lanes, k - 1 + age)
            self._flat["frame_index"][rows] = self._frame_index_of(lanes, k - 1 + age, s["back"])
            self._count_frames(0)
        self.pending[...] = s["pending"]
        # states written before the counter existed: what is stored is what was written
        added = _numpy(state["added"]) if "added" in state else s["size"]
        if added.shape != self.added.shape or (added < s["size"]).any():
            raise ValueError(f"buffer added: {added.tolist()} does not fit size "
                             f"{s['size'].tolist()} (one count per lane, at least its size)")
        self.added[:] = added
        aside_lanes = lanes[s["aside_rows"]]
        count = np.bincount(aside_lanes, minlength=self.num_lanes)
        # serials 0.. per lane, in a ring just large enough (it grows when written to)
        ring = _pow2(int(count.max(initial=0))) if len(aside_lanes) else 0
        self._asides = np.zeros((self.num_lanes, ring, *self.obs_shape), dtype=self.obs_dtype)
        serial = np.arange(len(aside_lanes)) - (np.cumsum(count) - count)[aside_lanes]
        self._asides[aside_lanes, serial] = s["asides"]
        self._flat["aside_ref"][rows[s["aside_rows"]]] = serial + 1
        filled = np.flatnonzero(self.size)
        self.aside_ref[filled, (self.ptr[filled] - 1) % self.lane_capacity] = _PENDING
        self._aside_head[:] = count
        self._written = int(count.sum())  # bounds every lane's serials again
        self._aside_floor[:] = 0
        self._ring_base[:] = 0
        self._slack = 0  # a new ring: test before the next aside
        np.maximum(self._touched, self.size, out=self._touched)
        self._lockstep = bool((self.ptr == self.ptr[0]).all())
        if self.mirror is not None:
            self.mirror.sync(self)

    # ------------------------------------------------------------------ device copy
    def mirror_bytes(self) -> int:
        """The bytes :meth:`mirror_on` allocates on its device."""
        return self.num_lanes * self.lane_capacity * DeviceMirror.bytes_per_slot(self)

    def mirror_on(self, device: torch.device) -> None:
        """Keep the one-step transitions again on ``device`` (:class:`DeviceMirror`), from
        now on written there as they are written here, so that :meth:`device_transitions`
        gathers a batch on the device. Only for whole observations (``frame_stack`` 1)."""
        if self.frame_stack > 1:
            raise ValueError("a device copy of the buffer holds whole observations; this "
                             f"buffer stores {self.frame_stack}-frame stacks frame by frame")
        self.mirror = DeviceMirror(self, device)
        self.mirror.sync(self)

    def device_transitions(self, lanes: np.ndarray, positions: np.ndarray
                           ) -> tuple[torch.Tensor, ...]:
        """:meth:`transitions`, gathered from the device copy: the same values, as tensors
        on its device."""
        assert self.mirror is not None, "mirror_on() first"
        return self.mirror.gather(self._lane_base[lanes] + positions)


class DeviceMirror:
    """A replay buffer's one-step transitions kept again on an accelerator (``buffer.
    on_device``): each slot's observation, action, reward, termination and next observation,
    the next one stored whole (on the host it is the successor's row or an aside). The
    buffer writes each block here as it stores it, in one copy per field; a batch is then
    gathered on the device after one copy of its indices, rather than gathered from the host
    arrays and copied up field by field at every gradient step. The host arrays stay what
    checkpoints, n-step windows and rollouts read; a restored state is copied over whole."""

    _FIELDS = ("obs", "act", "rew", "terminated", "next_obs")

    def __init__(self, buffer: ReplayBuffer, device: torch.device) -> None:
        self.device = device
        slots = buffer.num_lanes * buffer.lane_capacity

        def zeros(shape: tuple[int, ...], dtype: np.dtype) -> torch.Tensor:
            return torch.zeros((slots, *shape), dtype=_torch_dtype(dtype), device=device)

        obs = (buffer.obs_shape, buffer.obs_dtype)
        self.tensors = {"obs": zeros(*obs), "act": zeros(buffer.act_shape, buffer.act.dtype),
                        "rew": zeros((), buffer.rew.dtype),
                        "terminated": zeros((), buffer.terminated.dtype),
                        "next_obs": zeros(*obs)}

    @staticmethod
    def bytes_per_slot(buffer: ReplayBuffer) -> int:
        obs = int(np.prod(buffer.obs_shape, dtype=np.int64)) * buffer.obs_dtype.itemsize
        act = int(np.prod(buffer.act_shape, dtype=np.int64)) * buffer.act.dtype.itemsize
        return 2 * obs + act + buffer.rew.dtype.itemsize + buffer.terminated.dtype.itemsize

    def _up(self, array: np.ndarray, dtype: np.dtype) -> torch.Tensor:
        """A host array on the device. To CUDA through page-locked memory, in a copy the host
        does not wait for (a copy from pageable memory waits for the device's queue: a sync
        at every write and every batch); the caching host allocator keeps the staging block
        until the copy is done."""
        host = torch.from_numpy(np.ascontiguousarray(array, dtype=dtype))
        if self.device.type != "cuda":
            return host.to(self.device)
        return host.pin_memory().to(self.device, non_blocking=True)

    def write(self, flat: np.ndarray, *rows: np.ndarray) -> None:
        """Rows ``(obs, act, rew, terminated, next_obs)`` into flat slots ``flat``."""
        if len(flat) == 0:
            return
        index = self._up(flat, np.dtype(np.int64))
        for name, value in zip(self._FIELDS, rows, strict=True):
            tensor = self.tensors[name]
            rows_up = self._up(value, _numpy_dtype(tensor))
            tensor.index_copy_(0, index, rows_up.reshape(len(flat), *tensor.shape[1:]))

    def sync(self, buffer: ReplayBuffer, chunk: int = 1 << 16) -> None:
        """Copy over every slot the buffer has written (after a restored state), ``chunk``
        slots at a time (the host gathers them first)."""
        for lane, touched in enumerate(buffer._touched.tolist()):
            for start in range(0, touched, chunk):
                positions = np.arange(start, min(start + chunk, touched))
                lanes = np.full(len(positions), lane)
                self.write(buffer._lane_base[lanes] + positions,
                           *buffer.transitions(lanes, positions))

    def gather(self, flat: np.ndarray) -> tuple[torch.Tensor, ...]:
        """``(obs, act, rew, terminated, next_obs)`` at flat slots ``flat``."""
        index = self._up(flat, np.dtype(np.int64))
        t = self.tensors
        return (t["obs"].index_select(0, index), t["act"].index_select(0, index),
                t["rew"].index_select(0, index), t["terminated"].index_select(0, index),
                t["next_obs"].index_select(0, index))


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype=dtype)).dtype


def _numpy_dtype(tensor: torch.Tensor) -> np.dtype:
    return torch.zeros(0, dtype=tensor.dtype).numpy().dtype


# ---------------------------------------------------------------------- state formats
def _frame_stack_of(state: Mapping[str, Any]) -> int:
    """The ``frame_stack`` of the buffer that a state comes from (1 where the state has no
    such field: the formats before it, whose rows are whole observations)."""
    if "frame_stack" not in state:
        return 1
    k = _numpy(state["frame_stack"])
    if k.shape != () or k.dtype.kind not in "iu" or not 1 <= int(k) <= 255:
        raise ValueError(f"buffer frame_stack: {k!r} is not an integer in 1..255")
    return int(k)


def _checked_state(state: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A :meth:`ReplayBuffer.state_dict` as numpy arrays, checked for consistency on its
    own (each lane's counters, the row counts); ValueError naming the field otherwise."""
    k = _frame_stack_of(state)
    rows_fields = _row_fields(k)
    names = ("lane_capacity", "ptr", "size", *rows_fields, "aside_rows", "asides", "pending",
             *(("history",) if k > 1 else ()))
    for name in names:
        if name not in state:
            raise ValueError(f"buffer state has no {name!r}")
    s = {name: _numpy(state[name]) for name in names}
    for name in names[1:]:
        if s[name].ndim < 1:
            raise ValueError(f"buffer {name}: a scalar, expected an array")
    stored_cap = s["lane_capacity"]
    if stored_cap.shape != () or stored_cap.dtype.kind not in "iu" or int(stored_cap) <= 0:
        raise ValueError(f"buffer lane_capacity: {stored_cap!r} is not a positive integer")
    cap = int(stored_cap)
    ptr, size = s["ptr"], s["size"]
    for name, a in (("ptr", ptr), ("size", size)):
        if a.ndim != 1 or a.dtype.kind not in "iu" or len(a) != len(s["pending"]):
            raise ValueError(f"buffer {name}: shape {a.shape} and dtype {a.dtype}, expected "
                             f"one integer per lane ({len(s['pending'])} lanes, as pending)")
    if ((size < 0) | (size > cap)).any():
        raise ValueError(f"buffer size: {size.tolist()} outside 0..{cap} (lane_capacity)")
    if ((ptr < 0) | (ptr > cap) | ((size < cap) & (ptr != size))).any():
        raise ValueError(f"buffer ptr: {ptr.tolist()} does not fit size {size.tolist()} "
                         f"(a lane that is not full has ptr == size)")
    n = int(size.sum())
    for name in rows_fields:
        if len(s[name]) != n:
            raise ValueError(f"buffer {name}: shape {s[name].shape}, expected {n} rows "
                             "(the sum of size)")
    if k > 1:
        back, history = s["back"], s["history"]
        if back.ndim != 1 or back.dtype.kind not in "iu" or (
                n and (back.min() < 0 or back.max() > k - 1)):
            raise ValueError(f"buffer back: expected one integer in 0..{k - 1} per row "
                             f"(frame_stack={k})")
        if history.shape[:2] != (len(size), k - 1) or history.shape[2:] != s["frames"].shape[1:]:
            raise ValueError(f"buffer history: shape {history.shape}, expected "
                             f"{(len(size), k - 1, *s['frames'].shape[1:])} (lanes, "
                             "frame_stack - 1, a frame)")
    s["frame_stack"] = np.array(k)
    rows = s["aside_rows"]
    ends = np.cumsum(size) - 1
    if rows.ndim != 1 or (len(rows) and (rows.dtype.kind not in "iu" or rows.min() < 0
                                         or rows.max() >= n or (np.diff(rows) <= 0).any()
                                         or np.isin(rows, ends).any())):
        raise ValueError("buffer aside_rows: expected increasing rows below the sum of size, "
                         "none a lane's newest (its next observation is pending)")
    if len(s["asides"]) != len(rows):
        raise ValueError(f"buffer asides: shape {s['asides'].shape}, expected {len(rows)} rows "
                         "(one per aside_rows entry)")
    return s


def _from_old_format(state: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The previous release's state (full-capacity ``(lanes, capacity, ...)`` arrays with
    ``next_obs`` stored twice) in today's layout: each next observation that is not its
    successor's observation (compared bit for bit) becomes an aside, each lane's newest
    one its pending next observation."""
    for name in ("obs", "next_obs", "act", "rew", "terminated", "truncated", "ptr", "size"):
        if name not in state:
            raise ValueError(f"buffer state has no {name!r}")
    old = {name: _numpy(state[name]) for name in (
        "obs", "next_obs", "act", "rew", "terminated", "truncated", "ptr", "size")}
    if old["rew"].ndim != 2:
        raise ValueError(f"buffer rew: shape {old['rew'].shape}, expected (lanes, capacity)")
    num_lanes, cap = old["rew"].shape
    for name in ("obs", "next_obs", "act", "terminated", "truncated"):
        if old[name].shape[:2] != (num_lanes, cap):
            raise ValueError(f"buffer {name}: shape {old[name].shape}, expected "
                             f"({num_lanes}, {cap}, ...) as rew")
    if old["next_obs"].shape != old["obs"].shape:
        raise ValueError(f"buffer next_obs: shape {old['next_obs'].shape}, expected "
                         f"{old['obs'].shape} as obs")
    ptr, size = old["ptr"].astype(np.int64), old["size"].astype(np.int64)
    for name, a in (("ptr", ptr), ("size", size)):
        if a.shape != (num_lanes,):
            raise ValueError(f"buffer {name}: shape {a.shape}, expected ({num_lanes},)")
    if ((size < 0) | (size > cap)).any() or ((ptr < 0) | (ptr > cap)).any():
        raise ValueError(f"buffer size or ptr outside 0..{cap}: size {size.tolist()}, "
                         f"ptr {ptr.tolist()}")
    lanes = np.repeat(np.arange(num_lanes), size)
    k = np.arange(len(lanes)) - np.repeat(np.cumsum(size) - size, size)
    oldest = np.where(size == cap, ptr % cap, 0)
    rows = lanes * cap + (oldest[lanes] + k) % cap
    flat = {name: old[name].reshape(num_lanes * cap, *old[name].shape[2:])[rows]
            for name in ("obs", "next_obs", "act", "rew", "terminated", "truncated")}
    nxt = flat["next_obs"]
    ends = np.cumsum(size)[size > 0] - 1
    aside = np.zeros(len(rows), dtype=bool)
    aside[_differing(nxt[:-1], flat["obs"][1:], int(np.prod(old["obs"].shape[2:])))] = True
    aside[ends] = False  # a lane's newest: pending, not an aside
    pending = np.zeros((num_lanes, *old["obs"].shape[2:]), dtype=old["obs"].dtype)
    pending[size > 0] = nxt[ends]
    aside_rows = np.flatnonzero(aside)
    return {"frame_stack": np.array(1), "lane_capacity": np.array(cap), "ptr": ptr, "size": size,
            **{name: flat[name] for name in _FIELDS},
            "aside_rows": aside_rows, "asides": nxt[aside_rows], "pending": pending}


def stored_transitions(state: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Every transition of a buffer's state (today's format, frame stacks included, or the
    previous release's), lanes one after another, each in time order, with its next
    observation: ``obs``, ``act``, ``rew``, ``next_obs``, ``terminated``, ``truncated`` (one
    row per transition; frame stacks rebuilt) and ``size`` (how many rows each lane has).

    :raises ValueError: a damaged state, naming the field.
    """
    s = _from_old_format(state) if "next_obs" in state else _checked_state(state)
    obs = s["obs"] if int(s["frame_stack"]) == 1 else _stacks_of_state(s)
    size = s["size"]
    next_obs = np.empty_like(obs)
    next_obs[:-1] = obs[1:]
    filled = size > 0
    next_obs[np.cumsum(size)[filled] - 1] = s["pending"][filled]
    next_obs[s["aside_rows"]] = s["asides"]
    return {"obs": obs, "act": s["act"], "rew": s["rew"], "next_obs": next_obs,
            "terminated": s["terminated"], "truncated": s["truncated"], "size": size}


def _stacks_of_state(s: Mapping[str, np.ndarray]) -> np.ndarray:
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
