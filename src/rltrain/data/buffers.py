"""Preallocated transition storage with one lane per env, each observation stored once.

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

The asides live in one ring per lane, written in time order; a transition holds a
4-byte reference into it. Transitions are overwritten oldest first and asides are written
in the order of their transitions, so the live asides of a lane are always its newest
ones: the ring never overwrites one that is still referenced as long as it has room for
the live ones, and it doubles when it has not. It costs memory in proportion to the
asides held (about one observation per episode end), not to the capacity.

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
    """Sampled transitions with n-step returns applied: the target is
    ``rew + discount * V(next_obs)``."""

    obs: np.ndarray
    act: np.ndarray
    rew: np.ndarray
    next_obs: np.ndarray
    discount: np.ndarray
    #: (lane, position) of each sampled transition, for priority updates
    lanes: np.ndarray
    positions: np.ndarray


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


def _numpy(x: Any) -> np.ndarray:
    return x.numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


class ReplayBuffer:
    """Circular (replay) or append-only (rollout) storage, ``num_lanes`` x ``lane_capacity``.

    :param circular: overwrite the oldest transitions when a lane is full (replay);
        if False, a full lane raises :class:`BufferFullError` (on-policy rollouts).
    :param obs_dtype: the dtype observations are stored in (uint8 for image frames).
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
    ) -> None:
        if num_lanes <= 0 or lane_capacity <= 0:
            raise ValueError("a buffer needs at least one lane and one slot per lane")
        self.num_lanes, self.lane_capacity, self.circular = num_lanes, lane_capacity, circular
        self.obs_shape, self.act_shape = tuple(obs_shape), tuple(act_shape)
        shape = (num_lanes, lane_capacity)
        # np.zeros, never zeros_like/full: calloc'd pages are only mapped when written
        self.obs = np.zeros(shape + self.obs_shape, dtype=obs_dtype)
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
        #: the next observation of each lane's newest transition (meaningful if size > 0)
        self.pending = np.zeros((num_lanes, *self.obs_shape), dtype=obs_dtype)
        self._asides = np.zeros((num_lanes, 0, *self.obs_shape), dtype=obs_dtype)
        #: per lane: the serial number of its next aside; no live aside's is below floor
        self._aside_head = np.zeros(num_lanes, dtype=np.int64)
        self._aside_floor = np.zeros(num_lanes, dtype=np.int64)
        self._ring_base = np.zeros(num_lanes, dtype=np.int64)  # floor when the ring was made
        self._touched = np.zeros(num_lanes, dtype=np.int64)  # slots ever written, per lane
        #: every lane's ptr is the same (False may be wrong, True never is)
        self._lockstep = True
        #: no lane's ring has room for fewer than this many more asides
        self._slack = 0
        self._written = 0  # asides written by all lanes, ever: a bound on any lane's serial
        self._obs_size = int(np.prod(self.obs_shape, dtype=np.int64))
        self._lane_base = np.arange(num_lanes, dtype=np.int64) * lane_capacity
        n = num_lanes * lane_capacity
        # flat (lanes * capacity) views: one flat index is cheaper than 2-D fancy indexing
        self._flat = {name: getattr(self, name).reshape(n, *getattr(self, name).shape[2:])
                      for name in (*_FIELDS, "aside_ref")}

    # ------------------------------------------------------------------ sizes
    @staticmethod
    def bytes_per_transition(obs_shape: tuple[int, ...], obs_dtype: np.dtype | type,
                             act_shape: tuple[int, ...], act_dtype: np.dtype | type) -> int:
        """What one stored transition costs: its observation (once), action, reward, two
        flags and its aside reference. Each episode end adds one observation kept aside."""
        obs = np.dtype(obs_dtype).itemsize * int(np.prod(obs_shape, dtype=np.int64))
        act = np.dtype(act_dtype).itemsize * int(np.prod(act_shape, dtype=np.int64))
        return obs + act + 4 + 1 + 1 + np.dtype(np.uint32).itemsize

    def nominal_bytes(self) -> int:
        """The bytes the full buffer would hold, asides aside."""
        return self.num_lanes * self.lane_capacity * self.bytes_per_transition(
            self.obs_shape, self.obs.dtype, self.act_shape, self.act.dtype)

    def resident_bytes(self) -> int:
        """An estimate of the memory actually held now: the slots ever written (pages are
        mapped on first write and stay mapped after :meth:`clear`), the aside ring's written
        slots, and the small per-lane arrays."""
        per = self.nominal_bytes() // (self.num_lanes * self.lane_capacity)
        ring_slots = np.minimum(self._aside_head - self._ring_base, self._asides.shape[1])
        obs_bytes = self.pending[0].nbytes
        small = sum(a.nbytes for a in (self.ptr, self.size, self.pending, self._aside_head,
                                       self._aside_floor, self._ring_base, self._touched))
        return int(per * self._touched.sum() + obs_bytes * ring_slots.sum() + small)

    def __len__(self) -> int:
        return int(self.size.sum())

    def clear(self) -> None:
        """Forget every transition (nothing stays pending); memory stays allocated."""
        refs = self.aside_ref[:, : int(self.size.max(initial=0))]
        refs[refs != 0] = 0  # keep the invariant; writing only those maps no new page
        self.ptr[:] = 0
        self.size[:] = 0
        self._aside_floor[:] = self._aside_head
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
        obs = np.asarray(obs, dtype=self.obs.dtype)
        next_obs = np.asarray(next_obs, dtype=self.obs.dtype)
        fields = {"obs": obs, "act": act, "rew": rew, "terminated": terminated,
                  "truncated": truncated}
        start = int(self.ptr[0])
        if valid is None and self._lockstep and start + steps <= cap:
            # the collector's usual block: every lane writes the same run of slots
            ts, ls, values = self._asides_of_full_block(obs, next_obs)
            run = slice(start, start + steps)
            for name, value in fields.items():
                getattr(self, name)[:, run] = np.asarray(value).swapaxes(0, 1)
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
        if valid is None:
            ts, ls, values = self._asides_of_full_block(obs, next_obs)
            owners = flat.take(ts * self.num_lanes + ls) - 1  # the lane's previous slot
            owners[pos[ts, ls] == 0] += cap
            self.pending[...] = next_obs[-1]
        else:
            idx = np.flatnonzero(valid)  # time-major: each lane's steps in time order
            flat = flat.take(idx)
            entries = {k: v.take(idx, axis=0) for k, v in entries.items()}
            hit, ls, values, last = self._asides_of_masked_block(entries["obs"], nxt, valid,
                                                                 idx)
            owners = flat.take(hit) - 1  # the lane's previous slot
            owners[owners < self._lane_base[ls]] += cap
            # each lane's newest written step waits for its successor
            lanes = np.flatnonzero(added)
            self.pending[lanes] = nxt.take(last[lanes] * self.num_lanes + lanes, axis=0)
        for name, value in entries.items():
            self._flat[name][flat] = value
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

    def obs_at(self, lanes: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """The observations of stored transitions ``(lanes[i], positions[i])``."""
        return self._flat["obs"].take(self._lane_base[lanes] + positions, axis=0)

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
        return (f["obs"].take(flat, axis=0), f["act"].take(flat, axis=0), f["rew"].take(flat),
                f["terminated"].take(flat), self._next_obs(flat, lanes, positions))

    def _next_obs(self, flat: np.ndarray, lanes: np.ndarray, positions: np.ndarray
                  ) -> np.ndarray:
        succ = flat + 1
        succ[positions == self.lane_capacity - 1] -= self.lane_capacity
        out = self._flat["obs"].take(succ, axis=0)
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
        return self._flat["obs"].take(flat, axis=0)

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
        next_obs = np.empty((self.num_lanes, t, *self.obs_shape), dtype=self.obs.dtype)
        next_obs[:, : min(t, self.lane_capacity - 1)] = self.obs[:, 1 : t + 1]
        ref = self.aside_ref[:, :t]
        ls, ks = np.nonzero((ref != 0) & (ref != _PENDING))
        if len(ls):
            next_obs[ls, ks] = self._aside_of(ls, self.aside_ref[ls, ks])
        lanes = np.flatnonzero(self.size)
        next_obs[lanes, self.size[lanes] - 1] = self.pending[lanes]
        next_obs[~valid] = 0
        return Rollout(
            obs=self.obs[:, :t],
            act=self.act[:, :t],
            rew=self.rew[:, :t],
            next_obs=next_obs,
            terminated=self.terminated[:, :t],
            truncated=self.truncated[:, :t],
            valid=valid,
        )

    # ------------------------------------------------------------------ state
    def _time_order(self) -> tuple[np.ndarray, np.ndarray]:
        """The lane and flat index of every stored transition, lane after lane, each lane
        oldest first."""
        size = self.size
        lanes = np.repeat(np.arange(self.num_lanes), size)
        k = np.arange(len(lanes)) - np.repeat(np.cumsum(size) - size, size)
        return lanes, self._lane_base[lanes] + (self.oldest()[lanes] + k) % self.lane_capacity

    def state_dict(self) -> dict[str, Any]:
        """The filled part only, as tensors: every stored transition, lanes one after another
        in time order (``size`` says how many per lane), the asides they reference (by row),
        each lane's pending next observation, and ``ptr``, so that positions (and so samples
        and priorities) are the same after loading. Building it copies the stored part once.
        """
        lanes, rows = self._time_order()
        ref = self._flat["aside_ref"][rows]
        has = (ref > 0) & (ref != _PENDING)
        asides = self._aside_of(lanes[has], ref[has])
        pending = self.pending.copy()
        pending[self.size == 0] = 0
        state = {name: self._flat[name][rows] for name in _FIELDS}
        state.update(lane_capacity=np.array(self.lane_capacity), ptr=self.ptr.copy(),
                     size=self.size.copy(), aside_rows=np.flatnonzero(has), asides=asides,
                     pending=pending)
        return {k: torch.from_numpy(v) for k, v in state.items()}  # fresh arrays

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict`, or the previous release's (full-capacity ``obs``
        and ``next_obs`` arrays, ``ptr``, ``size``, ``rng``; its ``rng`` is ignored: the
        sampler owns the draws now).

        :raises ValueError: a field that is missing or does not fit this buffer, named.
        """
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
        for name, tail in (("obs", self.obs_shape), ("act", self.act_shape),
                           ("asides", self.obs_shape), ("pending", self.obs_shape)):
            if s[name].shape[1:] != tail:
                raise ValueError(f"buffer {name}: stored shape {s[name].shape}, expected "
                                 f"(n, {', '.join(map(str, tail))})")
        self.clear()
        self.ptr[:], self.size[:] = s["ptr"], s["size"]
        lanes, rows = self._time_order()
        for name in _FIELDS:
            self._flat[name][rows] = s[name]
        self.pending[...] = s["pending"]
        aside_lanes = lanes[s["aside_rows"]]
        count = np.bincount(aside_lanes, minlength=self.num_lanes)
        # serials 0.. per lane, in a ring just large enough (it grows when written to)
        ring = _pow2(int(count.max(initial=0))) if len(aside_lanes) else 0
        self._asides = np.zeros((self.num_lanes, ring, *self.obs_shape), dtype=self.obs.dtype)
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


# ---------------------------------------------------------------------- state formats
def _checked_state(state: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A :meth:`ReplayBuffer.state_dict` as numpy arrays, checked for consistency on its
    own (each lane's counters, the row counts); ValueError naming the field otherwise."""
    names = ("lane_capacity", "ptr", "size", *_FIELDS, "aside_rows", "asides", "pending")
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
    for name in _FIELDS:
        if len(s[name]) != n:
            raise ValueError(f"buffer {name}: shape {s[name].shape}, expected {n} rows "
                             "(the sum of size)")
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
    return {"lane_capacity": np.array(cap), "ptr": ptr, "size": size,
            **{name: flat[name] for name in _FIELDS},
            "aside_rows": aside_rows, "asides": nxt[aside_rows], "pending": pending}


def stored_transitions(state: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Every transition of a buffer's state (today's format or the previous release's),
    lanes one after another, each in time order, with its next observation: ``obs``,
    ``act``, ``rew``, ``next_obs``, ``terminated``, ``truncated`` (one row per transition)
    and ``size`` (how many rows each lane has).

    :raises ValueError: a damaged state, naming the field.
    """
    s = _from_old_format(state) if "next_obs" in state else _checked_state(state)
    obs, size = s["obs"], s["size"]
    next_obs = np.empty_like(obs)
    next_obs[:-1] = obs[1:]
    filled = size > 0
    next_obs[np.cumsum(size)[filled] - 1] = s["pending"][filled]
    next_obs[s["aside_rows"]] = s["asides"]
    return {"obs": obs, "act": s["act"], "rew": s["rew"], "next_obs": next_obs,
            "terminated": s["terminated"], "truncated": s["truncated"], "size": size}
