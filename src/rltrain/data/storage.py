"""Preallocated transition storage with one lane per env, each observation (or each frame of
frame-stacked observations) stored once: the ring, its positions, and the fields it keeps.

A lane is a circular array of the transitions of one env, in time order, so consecutive
entries of a lane are consecutive steps of that env (what n-step returns and GAE need). The
collector writes only real transitions: under gymnasium's next-step autoreset, the reset step
of a finished env is skipped, so lanes may hold different counts.

What is kept per slot is a set of declared fields (:func:`rltrain.data.fields.
transition_fields`: ``obs, act, rew, terminated, truncated``, and those the algorithm declares,
``fields=``, written with each block and read back by name), held in :attr:`ReplayBuffer.
codecs`, one codec per field, chosen by :func:`codec_class`: the field whole
(:class:`~rltrain.data.fields.WholeArrays`), or stacked uint8 frames one frame per transition
(:class:`~rltrain.data.frames.FrameStacks`). The observations' next values are read from
their successors, the ones that differ kept aside (:mod:`rltrain.data.asides`); a device copy
(:mod:`rltrain.data.device_copy`) may mirror the one-step transitions; the state a checkpoint
holds is :mod:`rltrain.data.state_format`'s.

Storage is allocated with ``np.zeros`` (calloc: pages are mapped on first write), so a large
buffer costs memory as it fills, not when it is built.

A buffer only stores; a sampler (:mod:`rltrain.data.samplers`) chooses indices and the
transforms (:mod:`rltrain.data.transforms`: n-step returns, GAE) compute what the losses need
from what the read path (:mod:`rltrain.data.reading`) gathers here. Imports
numpy, torch and the modules of :mod:`rltrain.data` named above, and :mod:`rltrain.data.batch`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from rltrain.data.asides import REF_BYTES, Asides
from rltrain.data.batch import Rollout, Window
from rltrain.data.device_copy import DeviceMirror, Layout
from rltrain.data.fields import (
    OBS,
    TRANSITION_FIELDS,
    Codec,
    Entries,
    Field,
    TimeOrder,
    WholeArrays,
    declared,
    transition_fields,
)
from rltrain.data.frames import FrameStacks, frame_shape
from rltrain.data.state_format import fitted_state, state_of

#: extend() writes larger blocks in parts of at most this many observation elements
_BLOCK_ELEMENTS = 1 << 22
#: what a one-step batch reads, in :meth:`ReplayBuffer.transitions`' order (and the device
#: copy's, with ``next_obs`` last)
_ONE_STEP = ("obs", "act", "rew", "terminated")


class BufferFullError(RuntimeError):
    pass


def codec_class(field: Field, frame_stack: int) -> type[WholeArrays] | type[FrameStacks]:
    """How ``field`` is stored: the observations of a ``frame_stack`` > 1 buffer frame by
    frame, everything else whole."""
    return FrameStacks if field.name == OBS and frame_stack > 1 else WholeArrays


class ReplayBuffer:
    """Circular (replay) or append-only (rollout) storage, ``num_lanes`` x ``lane_capacity``.

    :param circular: overwrite the oldest transitions when a lane is full (replay);
        if False, a full lane raises :class:`BufferFullError` (on-policy rollouts).
    :param obs_dtype: the dtype observations are stored in (uint8 for image frames).
    :param frame_stack: k > 1: observations are stacks of k frames, shape ``(k, ...)``
        (gymnasium's ``FrameStackObservation``), stored one frame per transition and
        rebuilt on reading (:mod:`rltrain.data.frames`). A write that cannot be rebuilt
        exactly raises ValueError.
    :param fields: fields stored beside a transition's (an algorithm's ``AlgoSpec.stored``),
        each given with every block written (:meth:`extend`'s ``fields``), kept whole.
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
        fields: tuple[Field, ...] = (),
    ) -> None:
        if num_lanes <= 0 or lane_capacity <= 0:
            raise ValueError("a buffer needs at least one lane and one slot per lane")
        self.num_lanes, self.lane_capacity, self.circular = num_lanes, lane_capacity, circular
        self.obs_shape, self.act_shape = tuple(obs_shape), tuple(act_shape)
        self.frame_stack = k = int(frame_stack)
        self.frame_shape = frame_shape(self.obs_shape, frame_stack)
        self.obs_dtype = np.dtype(obs_dtype)
        #: the declared fields, in state order, each kept by its codec
        #: the fields declared beside a transition's, in state order after them
        self.declared = declared(fields)
        self.fields = {f.name: f for f in (*transition_fields(self.obs_shape, obs_dtype,
                                                              self.act_shape, act_dtype),
                                           *self.declared)}
        self.codecs: dict[str, Codec] = {
            name: codec_class(f, k)(f, num_lanes, lane_capacity, k)
            for name, f in self.fields.items()}
        #: the observations' next values that are not their successors' (and the pending ones)
        self.asides = Asides(self.fields[OBS], num_lanes, lane_capacity)
        #: next write position and number of stored transitions, per lane
        self.ptr = np.zeros(num_lanes, dtype=np.int64)
        self.size = np.zeros(num_lanes, dtype=np.int64)
        #: transitions ever written per lane (a prioritised sampler finds the new ones by it)
        self.added = np.zeros(num_lanes, dtype=np.int64)
        #: times the buffer was emptied (:meth:`clear`, and :meth:`load_state_dict`, which
        #: clears first): what is derived from the stored transitions (an episode index)
        #: rebuilds when it moves, since ``added`` alone cannot tell a refill from new writes
        self.clears = 0
        self._touched = np.zeros(num_lanes, dtype=np.int64)  # slots ever written, per lane
        #: every lane's ptr is the same (False may be wrong, True never is)
        self._lockstep = True
        #: the one-step transitions again on an accelerator, written as they are here
        #: (:meth:`mirror_on`); None: batches are gathered from the host arrays
        self.mirror: DeviceMirror | None = None
        self._obs_size = int(np.prod(self.obs_shape, dtype=np.int64))
        self._lane_base = np.arange(num_lanes, dtype=np.int64) * lane_capacity

    # ------------------------------------------------------------------ sizes
    @staticmethod
    def bytes_per_transition(obs_shape: tuple[int, ...], obs_dtype: np.dtype | type,
                             act_shape: tuple[int, ...], act_dtype: np.dtype | type, *,
                             frame_stack: int = 1, fields: tuple[Field, ...] = ()) -> int:
        """What one stored transition costs: its observation (once), action, reward, two
        flags and its aside reference; with ``frame_stack`` k > 1, one frame (``obs_shape[1:]``)
        instead of the observation, and the slots of its k frames (4 bytes each). Each episode
        end adds one observation kept aside; with k > 1, each lane k - 1 frames. Declared
        ``fields`` add their own bytes."""
        frame_shape(tuple(obs_shape), frame_stack)  # a ValueError for a wrong frame_stack
        every = (*transition_fields(tuple(obs_shape), obs_dtype, tuple(act_shape), act_dtype),
                 *fields)
        return sum(codec_class(f, frame_stack).bytes_per_slot(f, frame_stack)
                   for f in every) + REF_BYTES

    def _per_transition(self) -> int:
        return self.bytes_per_transition(self.obs_shape, self.obs_dtype, self.act_shape,
                                         self.fields["act"].dtype,
                                         frame_stack=self.frame_stack, fields=self.declared)

    def nominal_bytes(self) -> int:
        """The bytes the full buffer would hold, asides aside (with frame stacks, each lane's
        ring of frames holds k - 1 more than it has transitions)."""
        extra = sum(codec.nominal_extra_bytes() for codec in self.codecs.values())
        return self.num_lanes * self.lane_capacity * self._per_transition() + extra

    def resident_bytes(self) -> int:
        """An estimate of the memory actually held now: the slots ever written (pages are
        mapped on first write and stay mapped after :meth:`clear`), the aside ring's written
        slots, and the small per-lane arrays."""
        slots = self._per_transition() * int(self._touched.sum())
        small = self.ptr.nbytes + self.size.nbytes + self._touched.nbytes
        extra = sum(codec.resident_extra_bytes(self._touched) for codec in self.codecs.values())
        return int(slots + small + extra + self.asides.resident_bytes())

    def __len__(self) -> int:
        return int(self.size.sum())

    def clear(self) -> None:
        """Forget every transition (nothing stays pending); memory stays allocated. With
        frame stacks, each lane's newest frames stay the frames before its next transition's,
        so that an episode may go on across a clear (an on-policy rollout's)."""
        self.asides.clear(int(self.size.max(initial=0)))
        self.ptr[:] = 0
        self.size[:] = 0
        self.added[:] = 0
        self.clears += 1
        self._lockstep = True

    def oldest(self) -> np.ndarray:
        """Position of the oldest stored transition of each lane."""
        return np.where(self.size == self.lane_capacity, self.ptr % self.lane_capacity, 0)

    # ------------------------------------------------------------------ writing
    def add(
        self,
        obs: np.ndarray,
        act: np.ndarray,
        rew: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        valid: np.ndarray | None = None,
        *,
        fields: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        """Append one step of every env (arrays with a leading ``num_lanes`` axis);
        lanes whose ``valid`` entry is False are left untouched."""
        self.extend(np.asarray(obs)[None], np.asarray(act)[None], np.asarray(rew)[None],
                    np.asarray(next_obs)[None], np.asarray(terminated)[None],
                    np.asarray(truncated)[None], None if valid is None else np.asarray(valid)[None],
                    fields=None if fields is None else
                    {k: np.asarray(v)[None] for k, v in fields.items()})

    def extend(
        self,
        obs: np.ndarray,
        act: np.ndarray,
        rew: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        valid: np.ndarray | None = None,
        *,
        fields: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        """Append ``T`` consecutive steps of every env at once (arrays with leading axes
        ``(T, num_lanes)``): the same as ``T`` calls of :meth:`add`, in a few array
        operations. A step's lanes whose ``valid`` entry is False are left untouched.
        ``fields`` holds a block of each declared field (the buffer's ``fields=``), by name.

        Each block is checked whole, then written: every field's codec encodes its part (a
        frame stack that cannot be rebuilt is refused here) and the next observations to
        keep aside are found, and only then is anything stored.

        :raises BufferFullError: if a lane of an append-only buffer would overflow; then
            nothing is written.
        :raises ValueError: (``frame_stack`` > 1) an observation that cannot be rebuilt
            from its newest frame and its lane's previous ones; then nothing of this block
            is written (of a block larger than the parts it is written in, the parts before
            that observation's are). A declared field missing from ``fields``, one given
            that is not declared, or one of another shape: nothing is written.
        """
        steps = len(rew)
        extra = self._declared_block(fields, steps)
        if steps == 0:
            return
        part = self._part_steps()
        if steps > part:
            self._extend_in_parts(part, obs, act, rew, next_obs, terminated, truncated, valid,
                                  extra)
            return
        if valid is not None:
            valid = np.asarray(valid, dtype=bool)
            if valid.all():
                valid = None
        values = self._readied(dict(zip(TRANSITION_FIELDS,
                                        (obs, act, rew, terminated, truncated), strict=True)))
        values.update(extra)
        next_obs = np.asarray(next_obs, dtype=self.obs_dtype)
        start = int(self.ptr[0])
        if valid is None and self._lockstep and start + steps <= self.lane_capacity:
            self._extend_run(start, values, next_obs)  # the collector's usual block
        else:
            self._extend_entries(values, next_obs, valid)

    def _part_steps(self) -> int:
        """The most steps one block is written in: within lane_capacity steps no lane wraps
        onto a slot written in the same block; and a block of at most _BLOCK_ELEMENTS
        observation elements keeps the comparison's temporaries small (a whole dataset
        arrives as one block)."""
        chunk = max(1, _BLOCK_ELEMENTS // (self.num_lanes * max(self._obs_size, 1)))
        return min(chunk, self.lane_capacity) if self.circular else chunk

    def _declared_block(self, fields: Mapping[str, np.ndarray] | None, steps: int
                        ) -> dict[str, np.ndarray]:
        """A block's declared fields, checked against the declaration (names, dtype-castable
        values of shape ``(steps, lanes, *field.shape)``)."""
        if not self.declared and not fields:  # the usual buffer: nothing to check per block
            return {}
        given = dict(fields or {})
        names = [f.name for f in self.declared]
        if sorted(given) != sorted(names):
            missing = [n for n in names if n not in given]
            unknown = [n for n in given if n not in names]
            raise ValueError(
                "a block's declared fields do not match the buffer's: "
                + "; ".join(filter(None, (
                    f"missing {', '.join(missing)}" if missing else "",
                    f"not declared: {', '.join(unknown)}" if unknown else "")))
                + f" (declared: {', '.join(names) or 'none'})")
        out = {}
        for f in self.declared:
            value = np.asarray(given[f.name], dtype=f.dtype)
            want = (steps, self.num_lanes, *f.shape)
            if value.shape != want:
                raise ValueError(f"declared field {f.name!r}: a block of shape {value.shape}, "
                                 f"expected {want} (steps, lanes, *shape)")
            out[f.name] = value
        return out

    def _extend_in_parts(self, part: int, obs: np.ndarray, act: np.ndarray, rew: np.ndarray,
                         next_obs: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                         valid: np.ndarray | None, extra: dict[str, np.ndarray]) -> None:
        if not self.circular:  # all or nothing: refuse before the first part is written
            added = len(rew) if valid is None else np.asarray(valid, dtype=bool).sum(0)
            self._check_room(added)
        for t in range(0, len(rew), part):
            cut = slice(t, t + part)
            self.extend(obs[cut], act[cut], rew[cut], next_obs[cut], terminated[cut],
                        truncated[cut], None if valid is None else valid[cut],
                        fields={k: v[cut] for k, v in extra.items()})

    def _check_room(self, added: Any) -> None:
        if (self.ptr + added > self.lane_capacity).any():
            raise BufferFullError(
                f"rollout storage is full ({self.lane_capacity} transitions per env)")

    def _readied(self, values: dict[str, Any]) -> dict[str, Any]:
        """A block's fields as their codecs read them; the observations in the stored dtype
        first, as they are compared bit for bit with the next observations."""
        values[OBS] = np.asarray(values[OBS], dtype=self.obs_dtype)
        return {name: self.codecs[name].readied(v) for name, v in values.items()}

    def _extend_run(self, start: int, values: dict[str, Any], next_obs: np.ndarray) -> None:
        """Every lane writes the same run of slots, ``start ..``, without wrapping."""
        steps = len(next_obs)
        encoded = {name: codec.encode_run(values[name]) for name, codec in self.codecs.items()}
        ts, ls, kept = self.asides.found_in_run(values[OBS], next_obs, self.size)
        for name, codec in self.codecs.items():
            codec.write_run(start, encoded[name])
        if self.mirror is not None:  # step-major, as the block's rows are
            slots = self._lane_base + np.arange(start, start + steps)[:, None]
            rows = {name: np.asarray(values[name]).reshape(
                steps * self.num_lanes, *np.shape(values[name])[2:]) for name in self._mirrored}
            self._mirror_write(slots.reshape(-1), rows,
                               next_obs.reshape(steps * self.num_lanes, *self.obs_shape))
        owners = self._previous_slots(self._lane_base[ls] + start + ts, ls)
        self.asides.resolve_run(start, steps, ls, owners, kept, next_obs[-1], self._touched)
        np.maximum(self._touched, start + steps, out=self._touched)
        end = start + steps
        self.ptr[:] = end if end < self.lane_capacity or not self.circular else 0
        np.minimum(self.size + steps, self.lane_capacity, out=self.size)
        self.added += steps

    def _entries(self, steps: int, valid: np.ndarray | None) -> Entries:
        """Where a block's entries go (:class:`~rltrain.data.fields.Entries`).

        :raises BufferFullError: a lane of an append-only buffer would overflow.
        """
        if valid is None:
            counts = np.arange(1, steps + 1)[:, None]
            added = np.full(self.num_lanes, steps)
        else:
            counts = valid.cumsum(0)
            added = counts[-1]
        if not self.circular:
            self._check_room(added)
        pos = self.ptr + counts - 1  # (T, lanes): the slot of each step of each lane
        if self.circular:
            pos %= self.lane_capacity
        # one flat index into (lanes * capacity) views: cheaper than 2-D fancy indexing;
        # and the block's (T * lanes) entries taken by flat index, cheaper than masks
        flat = (self._lane_base + pos).reshape(-1)
        if valid is None:
            return Entries(flat, None, counts, added)
        idx = np.flatnonzero(valid)  # time-major: each lane's steps in time order
        return Entries(flat.take(idx), idx, counts, added)

    def _extend_entries(self, values: dict[str, Any], next_obs: np.ndarray,
                        valid: np.ndarray | None) -> None:
        """A block whose lanes do not all write one run of slots: a masked block, a block
        that wraps around, lanes out of step."""
        entries = self._entries(len(next_obs), valid)
        rows = {name: entries.rows(value) for name, value in values.items()}
        encoded = {name: codec.encode(values[name], rows[name], entries)
                   for name, codec in self.codecs.items()}
        nxt = next_obs.reshape(-1, *self.obs_shape)
        if entries.idx is None:
            ts, ls, kept = self.asides.found_in_run(values[OBS], next_obs, self.size)
            hits = entries.flat.take(ts * self.num_lanes + ls)
        else:
            assert valid is not None
            hit, ls, kept, last = self.asides.found_in_masked(rows[OBS], nxt, valid,
                                                             entries.idx, self.size)
            hits = entries.flat.take(hit)
        for name, codec in self.codecs.items():
            codec.write(entries.flat, encoded[name])
        if self.mirror is not None:
            self._mirror_write(entries.flat, rows,
                               nxt if entries.idx is None else nxt.take(entries.idx, axis=0))
        self.asides.resolve(entries.flat, self._newest_slots(), ls,
                            self._previous_slots(hits, ls), kept, self._touched)
        if entries.idx is None:
            self.asides.wait(next_obs[-1])
        else:  # each lane's newest written step waits for its successor
            lanes = np.flatnonzero(entries.added)
            self.asides.wait(nxt.take(last[lanes] * self.num_lanes + lanes, axis=0), lanes)
        self._advance(entries.added)
        self.asides.mark(self._newest_slots(), self.size > 0)
        if valid is not None:  # lanes wrote different counts, most likely: no fast path
            self._lockstep = False

    def _advance(self, added: np.ndarray) -> None:
        """Move each lane on by the ``added`` transitions it has just written."""
        cap = self.lane_capacity
        # lanes write their slots in order from 0: those below the highest ever written
        np.maximum(self._touched, np.minimum(self.ptr + added, cap), out=self._touched)
        self.ptr += added
        self.added += added
        if self.circular:
            self.ptr %= cap
        np.minimum(self.size + added, cap, out=self.size)

    def _newest_slots(self) -> np.ndarray:
        """The flat slot of each lane's newest transition (in an empty lane, some slot)."""
        return self._lane_base + (self.ptr - 1) % self.lane_capacity

    def _previous_slots(self, flat: np.ndarray, ls: np.ndarray) -> np.ndarray:
        """The flat slot before each of ``flat`` (of lanes ``ls``) in its lane, wrapping."""
        owners = flat - 1
        owners[owners < self._lane_base[ls]] += self.lane_capacity
        return owners

    # ------------------------------------------------------------------ reading
    def obs_at(self, lanes: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """The observations of stored transitions ``(lanes[i], positions[i])``."""
        return self.codecs[OBS].take(self._lane_base[lanes] + positions)

    def act_at(self, lanes: np.ndarray, positions: np.ndarray) -> np.ndarray:
        return self.codecs["act"].take(self._lane_base[lanes] + positions)

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
        c = self.codecs
        return (c["obs"].take(flat), c["act"].take(flat), c["rew"].take(flat),
                c["terminated"].take(flat), self._next_obs(flat, lanes, positions))

    def _next_obs(self, flat: np.ndarray, lanes: np.ndarray, positions: np.ndarray
                  ) -> np.ndarray:
        succ = flat + 1
        succ[positions == self.lane_capacity - 1] -= self.lane_capacity
        return self.asides.correct(self.codecs[OBS].take(succ), flat, lanes)

    def window(self, lanes: np.ndarray, positions: np.ndarray, n: int) -> Window:
        """The ``n`` consecutive transitions of each lane starting at each position (in time
        order, across the wrap-around), and whether each is stored yet."""
        lanes, positions = np.asarray(lanes), np.asarray(positions)
        wpos = (positions[:, None] + np.arange(n)) % self.lane_capacity
        flat = self._lane_base[lanes][:, None] + wpos
        # an entry is stored unless an earlier one of its window is the lane's newest (whose
        # next observation is pending): one gather, no counting from each lane's oldest
        newest = self.asides.newest(flat[:, :-1])
        stored = np.ones(flat.shape, dtype=bool)
        if n > 1:
            stored[:, 1:] = ~np.logical_or.accumulate(newest, axis=1)
        c = self.codecs
        return Window(c["rew"].take(flat), c["terminated"].take(flat),
                      c["truncated"].take(flat), stored, wpos, flat)

    def declared_at(self, lanes: np.ndarray, positions: np.ndarray) -> dict[str, np.ndarray]:
        """The declared fields of stored transitions ``(lanes[i], positions[i])``, by name."""
        flat = self._lane_base[np.asarray(lanes)] + np.asarray(positions)
        return {f.name: self.codecs[f.name].take(flat) for f in self.declared}

    def obs_at_flat(self, flat: np.ndarray) -> np.ndarray:
        """The observations at flat indices (a window's), without recomputing them."""
        return self.codecs[OBS].take(flat)

    def act_at_flat(self, flat: np.ndarray) -> np.ndarray:
        return self.codecs["act"].take(flat)

    def next_obs_at_flat(self, flat: np.ndarray, lanes: np.ndarray) -> np.ndarray:
        """:meth:`next_obs_at` for flat indices of the given lanes."""
        return self._next_obs(flat, lanes, flat - self._lane_base[lanes])

    def rollout(self) -> Rollout:
        """All transitions of an append-only buffer, lanes x time."""
        if self.circular:
            raise RuntimeError("rollout() reads append-only storage; this buffer is circular")
        t = int(self.size.max(initial=0))
        valid = np.arange(t)[None, :] < self.size[:, None]
        obs_codec = self.codecs[OBS]
        obs = obs_codec.first(t, valid)
        next_obs = obs_codec.successors(t)
        self.asides.correct_rollout(next_obs, self.size)
        next_obs[~valid] = 0
        first = {name: self.codecs[name].first(t, valid) for name in TRANSITION_FIELDS[1:]}
        return Rollout(obs=obs, next_obs=next_obs, valid=valid, **first,
                       fields={f.name: self.codecs[f.name].first(t, valid)
                               for f in self.declared})

    # ------------------------------------------------------------------ state
    def _time_order(self) -> TimeOrder:
        """Every stored transition, lane after lane, each lane oldest first."""
        size = self.size
        lanes = np.repeat(np.arange(self.num_lanes), size)
        age = np.arange(len(lanes)) - np.repeat(np.cumsum(size) - size, size)
        rows = self._lane_base[lanes] + (self.oldest()[lanes] + age) % self.lane_capacity
        return TimeOrder(lanes, rows, age, size)

    def state_dict(self) -> dict[str, Any]:
        """The filled part only, as tensors, in :mod:`rltrain.data.state_format`'s format:
        every stored transition, lanes one after another in time order, the asides they
        reference (by row), each lane's pending next observation, and ``ptr``, so that
        positions (and so samples and priorities) are the same after loading. Building it
        copies the stored part once."""
        order = self._time_order()
        asides = self.asides.state(order)
        rows: dict[str, np.ndarray] = {}
        lanes: dict[str, np.ndarray] = {}
        for codec in self.codecs.values():
            rows.update(codec.state_rows(order))
            lanes.update(codec.state_lanes(order))
        return state_of(rows, lanes, frame_stack=self.frame_stack,
                        lane_capacity=self.lane_capacity, ptr=self.ptr, size=self.size,
                        added=self.added, asides=asides)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict`, or the previous release's (full-capacity ``obs``
        and ``next_obs`` arrays, ``ptr``, ``size``, ``rng``; its ``rng`` is ignored: the
        sampler owns the draws now).

        :raises ValueError: a field that is missing or does not fit this buffer, named (a
            state of a buffer with another ``frame_stack``: that field); then the buffer is
            left as it was.
        """
        s = fitted_state(state, num_lanes=self.num_lanes, lane_capacity=self.lane_capacity,
                         frame_stack=self.frame_stack, obs_shape=self.obs_shape,
                         frame_shape=self.frame_shape, act_shape=self.act_shape,
                         declared=self.declared)
        self.clear()
        self.ptr[:], self.size[:] = s["ptr"], s["size"]
        order = self._time_order()
        for codec in self.codecs.values():
            codec.load(s, order)
        self.added[:] = s["added"]
        self.asides.load(s, order, self.ptr)
        np.maximum(self._touched, self.size, out=self._touched)
        self._lockstep = bool((self.ptr == self.ptr[0]).all())
        if self.mirror is not None:
            self._sync_mirror()

    # ------------------------------------------------------------------ device copy
    @property
    def _mirrored(self) -> tuple[str, ...]:
        """The stored fields the device copy holds: a one-step transition's, and the declared
        ones."""
        return (*_ONE_STEP, *(f.name for f in self.declared))

    def _mirror_layout(self) -> Layout:
        """What the device copy holds per slot: a one-step transition, its next observation
        whole, and the declared fields."""
        f = self.fields
        return {**{name: (f[name].shape, f[name].dtype) for name in _ONE_STEP},
                "next_obs": (f[OBS].shape, f[OBS].dtype),
                **{d.name: (d.shape, d.dtype) for d in self.declared}}

    def mirror_bytes(self) -> int:
        """The bytes :meth:`mirror_on` allocates on its device."""
        return (self.num_lanes * self.lane_capacity
                * DeviceMirror.bytes_per_slot(self._mirror_layout()))

    def mirror_on(self, device: torch.device) -> None:
        """Keep the one-step transitions again on ``device`` (:class:`DeviceMirror`), from
        now on written there as they are written here, so that :meth:`device_transitions`
        gathers a batch on the device. Only for whole observations (``frame_stack`` 1)."""
        if self.frame_stack > 1:
            raise ValueError("a device copy of the buffer holds whole observations; this "
                             f"buffer stores {self.frame_stack}-frame stacks frame by frame")
        self.mirror = DeviceMirror(device, self.num_lanes * self.lane_capacity,
                                   self._mirror_layout())
        self._sync_mirror()

    def _mirror_write(self, flat: np.ndarray, rows: Mapping[str, np.ndarray],
                      next_rows: np.ndarray) -> None:
        assert self.mirror is not None
        self.mirror.write(flat, *(rows[name] for name in _ONE_STEP), next_rows,
                          *(rows[f.name] for f in self.declared))

    def _sync_mirror(self, chunk: int = 1 << 16) -> None:
        """Copy every slot the buffer has written over to the device copy (after a restored
        state), ``chunk`` slots at a time (the host gathers them first)."""
        assert self.mirror is not None
        for flat, rows in self._written(chunk):
            self.mirror.write(flat, *rows)

    def _written(self, chunk: int) -> Iterator[tuple[np.ndarray, tuple[np.ndarray, ...]]]:
        """Every slot ever written, lane by lane, ``chunk`` at a time, with its one-step
        transition (:meth:`transitions`)."""
        for lane, touched in enumerate(self._touched.tolist()):
            for start in range(0, touched, chunk):
                positions = np.arange(start, min(start + chunk, touched))
                lanes = np.full(len(positions), lane)
                declared = self.declared_at(lanes, positions)
                yield self._lane_base[lanes] + positions, (
                    *self.transitions(lanes, positions), *declared.values())

    def device_transitions(self, lanes: np.ndarray, positions: np.ndarray
                           ) -> tuple[torch.Tensor, ...]:
        """:meth:`transitions`, gathered from the device copy: the same values, as tensors
        on its device."""
        assert self.mirror is not None, "mirror_on() first"
        return self.mirror.gather(self._lane_base[lanes] + positions,
                                  (*_ONE_STEP, "next_obs"))

    def device_declared_at(self, lanes: np.ndarray, positions: np.ndarray
                           ) -> dict[str, torch.Tensor]:
        """:meth:`declared_at`, gathered from the device copy: the same values, as tensors on
        its device."""
        assert self.mirror is not None, "mirror_on() first"
        names = tuple(f.name for f in self.declared)
        got = self.mirror.gather(self._lane_base[lanes] + positions, names)
        return dict(zip(names, got, strict=True))
