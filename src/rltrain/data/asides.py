"""Next observations kept aside: the codec of ``next_obs``, which is mostly not stored at all.

Observations are stored once. Within an episode the next observation of a transition is the
observation of the next transition of its lane, so it is found by index, as DQN Zoo and
Dopamine store each Atari frame once and Stable-Baselines3's ``optimize_memory_usage`` reads
``obs[i + 1]``. Unlike SB3's option (where the next episode's first observation overwrites
an episode's final one), every next observation given at write time that differs bit for bit
from its successor's observation is kept aside: the true final observation at an episode's
end (terminated or truncated), the last transition before a masked reset step, a dataset
whose rows are not consecutive. Reading gives back exactly the next observation that was
written. The newest transition of a lane has no successor yet, so its next observation waits
as the lane's *pending* one until the lane's next write decides whether it is needed.

The asides live in one ring per lane, written in time order; a transition holds a 4-byte
reference into it (``ref``). Transitions are overwritten oldest first and asides are written
in the order of their transitions, so the live asides of a lane are always its newest ones:
the ring never overwrites one that is still referenced as long as it has room for the live
ones, and it doubles when it has not. It costs memory in proportion to the asides held (about
one observation per episode end), not to the capacity. Asides and pending next observations
are whole observations, whole stacks too.

:class:`Asides` knows nothing of where slots are (the storage passes flat slots and lanes)
nor of how observations are stored (the storage passes them, and their successors, as
values). Imports numpy and :mod:`rltrain.data.fields`.
"""

from __future__ import annotations

import numpy as np

from rltrain.data.fields import Field, TimeOrder

#: an aside reference is (serial number of the aside mod this) + 1; 0 means "no aside"
_REF_MOD = 1 << 31
#: the reference of each lane's newest transition: its next observation is pending
PENDING = np.uint32(0xFFFFFFFF)
#: the bytes of one slot's reference
REF_BYTES = np.dtype(np.uint32).itemsize
#: blocks of next observations up to this many bytes are compared in one piece
_SMALL_BLOCK = 1 << 16
#: the smallest aside ring (slots per lane) once one is needed
_MIN_RING = 16


def differing(a: np.ndarray, b: np.ndarray, row: int) -> np.ndarray:
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


def pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


class Asides:
    """The next values of one field (the observations) that are not their successor's:
    per-slot references, per-lane rings of kept values and per-lane pending values."""

    def __init__(self, field: Field, num_lanes: int, lane_capacity: int) -> None:
        self.shape, self.dtype = field.shape, field.dtype
        self.num_lanes, self.lane_capacity = num_lanes, lane_capacity
        #: per transition: 0 (the next observation is the successor's), the reference of
        #: its next observation in the ring, or PENDING (the lane's newest: one lookup tells
        #: a reader all three). Invariant: 0 on every slot that holds no stored transition.
        self.ref = np.zeros((num_lanes, lane_capacity), dtype=np.uint32)
        self.flat_ref = self.ref.reshape(-1)
        #: the next observation of each lane's newest transition (meaningful if size > 0)
        self.pending = np.zeros((num_lanes, *self.shape), dtype=self.dtype)
        self.ring = np.zeros((num_lanes, 0, *self.shape), dtype=self.dtype)
        #: per lane: the serial number of its next aside; no live aside's is below floor
        self.head = np.zeros(num_lanes, dtype=np.int64)
        self.floor = np.zeros(num_lanes, dtype=np.int64)
        self.ring_base = np.zeros(num_lanes, dtype=np.int64)  # floor when the ring was made
        #: no lane's ring has room for fewer than this many more asides
        self.slack = 0
        self.written = 0  # asides written by all lanes, ever: a bound on any lane's serial
        self._row = int(np.prod(self.shape, dtype=np.int64))

    def resident_bytes(self) -> int:
        """The ring's written slots and the per-lane arrays."""
        ring_slots = np.minimum(self.head - self.ring_base, self.ring.shape[1])
        return int(self.pending[0].nbytes * ring_slots.sum() + self.pending.nbytes
                   + self.head.nbytes + self.floor.nbytes + self.ring_base.nbytes)

    def clear(self, stored: int) -> None:
        """Forget every reference in the first ``stored`` slots of each lane."""
        refs = self.ref[:, :stored]
        refs[refs != 0] = 0  # keep the invariant; writing only those maps no new page
        self.floor[:] = self.head

    # ------------------------------------------------------------------ finding them
    def found_in_run(self, obs: np.ndarray, next_obs: np.ndarray, size: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For a block where every lane writes every step (``(T, lanes, ...)``; ``size``:
        what each lane holds before it): the steps ``(ts, ls)`` (each lane's in time order)
        whose lane's previous transition needs its next observation, ``values``, kept aside.

        (A block of lane_capacity steps overwrites the pending transition it resolves: its
        aside is then referenced by nothing, as the transition's slot ends up holding the
        lane's newest. Harmless: live asides stay each lane's newest, see _make_room.)"""
        lanes, row = self.num_lanes, self._row
        if next_obs.nbytes <= _SMALL_BLOCK:
            # the previous transition's next observation for every step, the pending ones
            # first: one comparison (a copy of a small block costs less than a second call)
            before = np.concatenate((self.pending[None], next_obs[:-1]))
            hit = differing(before, obs, row)
            if len(hit) and hit[0] < lanes:  # nothing is pending in an empty lane
                hit = hit[(hit >= lanes) | (size[hit % lanes] > 0)]
            ts, ls = np.divmod(hit, lanes)
            return ts, ls, before.reshape(-1, *self.shape).take(hit, axis=0)
        # the previous transition of step t >= 1 is step t - 1: one comparison for all
        hit = differing(next_obs[:-1], obs[1:], row)
        values = next_obs.reshape(-1, *self.shape).take(hit, axis=0)
        ts, ls = np.divmod(hit, lanes)
        ts += 1
        # step 0 of every lane resolves the lane's pending next observation, if any
        first = differing(self.pending, obs[0], row)
        if len(first):
            first = first[size[first] > 0]
            ts = np.concatenate((np.zeros(len(first), dtype=ts.dtype), ts))
            ls = np.concatenate((first, ls))
            values = np.concatenate((self.pending[first], values))
        return ts, ls, values

    def found_in_masked(self, obs_w: np.ndarray, nxt: np.ndarray, valid: np.ndarray,
                        idx: np.ndarray, size: np.ndarray
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
        hit = differing(before, obs_w, self._row)
        if len(hit) and prev.take(hit).min() < 0:  # nothing is pending in an empty lane
            hit = hit[(prev[hit] >= 0) | (size[lane[hit]] > 0)]
        return hit, lane.take(hit), before.take(hit, axis=0), before_t[-1]

    # ------------------------------------------------------------------ keeping them
    def resolve_run(self, start: int, steps: int, ls: np.ndarray, owners: np.ndarray,
                    values: np.ndarray, last: np.ndarray, touched: np.ndarray) -> None:
        """After every lane wrote slots ``start .. start + steps - 1``: the previous pending
        transitions are resolved, the found ``values`` kept for their ``owners`` (flat
        slots, of lanes ``ls``), and ``last`` (each lane's newest next observation) waits."""
        self.ref[:, start : start + steps] = 0
        self.ref[:, start - 1] = 0  # the pending transitions are resolved
        if len(ls):
            self.keep(ls, owners, values, touched)
        self.pending[...] = last
        self.ref[:, start + steps - 1] = PENDING

    def resolve(self, flat: np.ndarray, newest: np.ndarray, ls: np.ndarray, owners: np.ndarray,
                values: np.ndarray, touched: np.ndarray) -> None:
        """After a block wrote flat slots ``flat``: the lanes' newest transitions before it
        (``newest``, flat) are resolved (or still pending: marked again by :meth:`mark`; in
        an empty lane the slot holds nothing, and stays 0), the found ``values`` kept for
        their ``owners`` (flat slots, of lanes ``ls``)."""
        self.flat_ref[flat] = 0
        self.flat_ref[newest] = 0
        if len(ls):
            self.keep(ls, owners, values, touched)

    def wait(self, values: np.ndarray, lanes: np.ndarray | None = None) -> None:
        """``values``: the next observations of the newest transitions of every lane (or of
        ``lanes``), pending until the lane's next write."""
        if lanes is None:
            self.pending[...] = values
        else:
            self.pending[lanes] = values

    def mark(self, newest: np.ndarray, filled: np.ndarray) -> None:
        """Each lane's newest transition (flat), where the lane is ``filled``, pending."""
        self.flat_ref[newest] = PENDING * filled

    def keep(self, ls: np.ndarray, owners: np.ndarray, values: np.ndarray,
             touched: np.ndarray) -> None:
        """Write next observations ``values`` (of lanes ``ls``, each lane's in time order)
        into their lanes' rings, and point the transitions (flat ``owners``) at them.
        ``touched``: per lane, the slots ever written."""
        new = np.bincount(ls, minlength=self.num_lanes)
        serial = self.head[ls]
        if len(ls) > 1 and new.max() > 1:  # rank within the lane, in time order
            order = np.argsort(ls, kind="stable")
            grouped = ls[order]
            rank = np.empty(len(ls), dtype=np.int64)
            rank[order] = np.arange(len(ls)) - np.searchsorted(grouped, grouped)
            serial = serial + rank
        # room: a cheap bound first (each lane gains at most len(ls)), then the exact test
        self.slack -= len(ls)
        if self.slack < 0:
            if (self.head + new - self.floor > self.ring.shape[1]).any():
                self._make_room(new, touched)
            self.slack = int((self.ring.shape[1] - (self.head + new - self.floor)).min())
        ring = self.ring
        ring[ls, serial & (ring.shape[1] - 1)] = values
        # references are serials + 1 while no lane has written 2**31 - 1 asides (a bound:
        # all lanes' together), then modulo _REF_MOD
        self.written += len(ls)
        self.flat_ref[owners] = (serial + 1 if self.written < _REF_MOD - 1 else
                                 serial % _REF_MOD + 1)
        self.head += new

    def _make_room(self, new: np.ndarray, touched: np.ndarray) -> None:
        """Make the rings hold every live aside and ``new`` more without overwriting one.

        Live asides are each lane's newest (transitions are overwritten oldest first and
        asides are written in their transitions' order), so counting the references (not
        the pending marks) tells exactly which serials are live: the newest ``live`` ones.
        A growing ring keeps room for as many again, so the next count is at least half a
        ring of asides away and counting stays cheap per aside. (At the largest ring, when
        most transitions need an aside, counts come more often; such data would cost as
        much as storing every next observation anyway.)
        """
        refs = self.ref[:, : int(touched.max(initial=0))]
        live = np.count_nonzero((refs != 0) & (refs != PENDING), axis=1)
        self.floor = self.head - live
        need = int((live + new).max())
        old = self.ring
        if 2 * need <= old.shape[1] or old.shape[1] == pow2(self.lane_capacity):
            return
        size = min(max(pow2(2 * need), _MIN_RING), pow2(self.lane_capacity))
        ring = np.zeros((self.num_lanes, size, *self.shape), dtype=old.dtype)
        if live.any():
            lanes = np.repeat(np.arange(self.num_lanes), live)
            rank = np.arange(len(lanes)) - np.repeat(np.cumsum(live) - live, live)
            serial = self.floor[lanes] + rank
            ring[lanes, serial & (size - 1)] = old[lanes, serial & (old.shape[1] - 1)]
        self.ring = ring
        self.ring_base = self.floor.copy()

    # ------------------------------------------------------------------ reading
    def read(self, lanes: np.ndarray, refs: np.ndarray) -> np.ndarray:
        """The asides that references ``refs`` (all > 0) of lanes ``lanes`` point at."""
        ring = self.ring
        size = ring.shape[1]
        slot = lanes * size + ((refs - 1) & max(size - 1, 0)).astype(np.int64)
        return ring.reshape(-1, *self.shape).take(slot, axis=0)

    def correct(self, out: np.ndarray, flat: np.ndarray, lanes: np.ndarray) -> np.ndarray:
        """``out``, the successors' observations of the transitions at flat slots ``flat``
        (of ``lanes``), with the asides and pending next observations put in: exactly the
        next observations that were written."""
        ref = self.flat_ref.take(flat)
        if ref.any():  # asides, and lanes' newest transitions (a pending one)
            special = np.flatnonzero(ref)
            ref, lanes = ref[special], lanes[special]
            newest = (ref == PENDING).reshape(-1, *(1,) * len(self.shape))
            pending = self.pending[lanes]
            # fewer operations than splitting the two: the ring's row for a pending
            # reference is a valid index that np.where drops
            out[special] = (pending if self.ring.shape[1] == 0 else
                            np.where(newest, pending, self.read(lanes, ref)))
        return out

    def newest(self, flat: np.ndarray) -> np.ndarray:
        """Whether each transition at flat slots ``flat`` is its lane's newest."""
        return self.flat_ref.take(flat) == PENDING

    def correct_rollout(self, next_obs: np.ndarray, size: np.ndarray) -> None:
        """:meth:`correct` for a rollout's ``(lanes, T, ...)`` next observations (each lane's
        first T slots; ``size``: each lane's count), in place."""
        t = next_obs.shape[1]
        ref = self.ref[:, :t]
        ls, ks = np.nonzero((ref != 0) & (ref != PENDING))
        if len(ls):
            next_obs[ls, ks] = self.read(ls, self.ref[ls, ks])
        lanes = np.flatnonzero(size)
        next_obs[lanes, size[lanes] - 1] = self.pending[lanes]

    # ------------------------------------------------------------------ state
    def state(self, order: TimeOrder) -> dict[str, np.ndarray]:
        """The rows (in ``order``) whose next observation is kept aside, those observations,
        and each lane's pending one (zero in an empty lane)."""
        ref = self.flat_ref[order.rows]
        has = (ref > 0) & (ref != PENDING)
        asides = self.read(order.lanes[has], ref[has])
        pending = self.pending.copy()
        pending[order.size == 0] = 0
        return {"aside_rows": np.flatnonzero(has), "asides": asides, "pending": pending}

    def load(self, s: dict[str, np.ndarray], order: TimeOrder, ptr: np.ndarray) -> None:
        """A checked state's asides, serials from 0 per lane in a ring just large enough (it
        grows when written to); each filled lane's newest transition (before ``ptr``)
        pending. The references must be clear (:meth:`clear`)."""
        self.pending[...] = s["pending"]
        aside_lanes = order.lanes[s["aside_rows"]]
        count = np.bincount(aside_lanes, minlength=self.num_lanes)
        ring = pow2(int(count.max(initial=0))) if len(aside_lanes) else 0
        self.ring = np.zeros((self.num_lanes, ring, *self.shape), dtype=self.dtype)
        serial = np.arange(len(aside_lanes)) - (np.cumsum(count) - count)[aside_lanes]
        self.ring[aside_lanes, serial] = s["asides"]
        self.flat_ref[order.rows[s["aside_rows"]]] = serial + 1
        filled = np.flatnonzero(order.size)
        self.ref[filled, (ptr[filled] - 1) % self.lane_capacity] = PENDING
        self.head[:] = count
        self.written = int(count.sum())  # bounds every lane's serials again
        self.floor[:] = 0
        self.ring_base[:] = 0
        self.slack = 0  # a new ring: test before the next aside
