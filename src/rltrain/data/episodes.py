"""Where each stored transition's episode begins and ends: an index kept beside storage.

An episode of a lane ends at a transition whose ``terminated`` or ``truncated`` is set; the
next transition of that lane begins the next one. Two kinds of episode are only partly
stored, and the index says so rather than guessing:

- the episode still being collected in a lane (*in flight*) ends, for now, at the lane's
  newest stored transition: never beyond it, so that what is read from it (hindsight
  relabelling's goals "from the future") is only what has happened;
- an episode whose beginning the ring has overwritten begins at the lane's oldest stored
  transition.

:class:`EpisodeIndex` answers, for stored transitions ``(lanes, positions)`` as samplers return
them (ring slots), the slots of the first and last stored transitions of their episodes
(:meth:`EpisodeIndex.spans`), and lists the stored episodes, each by its first slot and length
(:meth:`EpisodeIndex.counts`, :meth:`EpisodeIndex.episode`, :meth:`EpisodeIndex.episodes`),
all in numpy, without a Python loop per transition or per episode. The episode sampler
(:mod:`rltrain.data.samplers.episodes`) draws from it; hindsight relabelling's ``future``,
``final`` and ``episode`` strategies read its spans.

The index is derived from storage and holds nothing a checkpoint needs: it is kept
incrementally from the transitions written since it last looked (``ReplayBuffer.added``, per
lane), and rebuilt from the stored ``terminated``/``truncated`` flags of a lane that was written
more than its capacity since, or of every lane once the buffer was cleared or restored
(``ReplayBuffer.clears`` moved). After a resume it is rebuilt from the restored buffer.

Layer: the data path; imports numpy and the storage's type.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from rltrain.data.storage import ReplayBuffer


class Spans(NamedTuple):
    """The stored part of the episodes of some transitions, one entry per transition."""

    #: slot of the first stored transition of its episode
    first: np.ndarray
    #: slot of the last stored transition of its episode (an episode in flight: the lane's
    #: newest)
    last: np.ndarray
    #: transitions of its episode stored (last - first + 1, counted along the ring)
    length: np.ndarray
    #: how many of them come before it (0: it is the first)
    offset: np.ndarray


class Episodes(NamedTuple):
    """Stored episodes, one entry per episode."""

    lanes: np.ndarray
    #: slot of the episode's first stored transition
    first: np.ndarray
    #: its stored transitions, in time order from ``first`` along the ring
    length: np.ndarray


class EpisodeIndex:
    """The episode of every stored transition of ``buffer``, kept up to date on each call.

    Kept per lane, with transitions and episodes numbered by when they were written (a lane's
    n-th transition ever written, its e-th episode): ``episode`` holds each slot's episode
    number, and ``start``/``end`` the numbers of each episode's first and last transitions at
    ``e % lane_capacity`` (a lane holds at most ``lane_capacity`` episodes; an episode in flight
    has ``end`` -1). Numbers are turned into slots from the lane's write position and count,
    so that a restored buffer whose count is not its position (a state from before the count)
    is read right. 24 bytes per slot, allocated with the buffer's own laziness (``np.zeros``).

    Each public call first brings the index up to date (:meth:`sync`): it costs the
    transitions written since the last call, plus a few operations per lane.

    :param buffer: the storage it indexes (circular or append-only).
    """

    def __init__(self, buffer: ReplayBuffer) -> None:
        self.buffer = buffer
        lanes, cap = buffer.num_lanes, buffer.lane_capacity
        self._episode = np.zeros((lanes, cap), dtype=np.int64)
        self._start = np.zeros((lanes, cap), dtype=np.int64)
        self._end = np.zeros((lanes, cap), dtype=np.int64)
        #: per lane: the newest indexed transition's episode number (-1: none), whether it
        #: ended its episode, and the buffer's ``added`` when the index last looked
        self._last = np.full(lanes, -1, dtype=np.int64)
        self._ended = np.ones(lanes, dtype=bool)
        self._seen = np.zeros(lanes, dtype=np.int64)
        self._clears = buffer.clears
        self._lane_range = np.arange(lanes)

    # ------------------------------------------------------------------ keeping up
    def sync(self) -> None:
        """Index the transitions written since the last look; rebuild the lanes where that
        cannot be done (more written than a lane holds, or the buffer emptied since)."""
        b = self.buffer
        new = b.added - self._seen
        renew = (new > b.lane_capacity) | (new < 0)
        if b.clears != self._clears:
            renew[:] = True
            self._clears = b.clears
        if renew.any():
            self._last[renew] = -1
            self._ended[renew] = True
            new = np.where(renew, b.size, new)
        if new.any():
            self._index(new)
        self._seen = b.added.copy()

    def _index(self, new: np.ndarray) -> None:
        """Number the ``new[l]`` newest transitions of each lane ``l``, as the continuation of
        what was indexed before (each begins an episode where its predecessor ended one)."""
        b, cap = self.buffer, self.buffer.lane_capacity
        active = np.flatnonzero(new)
        n = new[active]
        lanes = np.repeat(active, n)
        head = np.cumsum(n) - n  # each lane's first entry among the new
        tail = head + n - 1
        age = np.arange(len(lanes)) - np.repeat(head, n)  # 0.. within its lane
        count = b.added[lanes] - new[lanes] + age  # the transition's number in its lane
        slots = (b.ptr[lanes] - (b.added[lanes] - count)) % cap
        flat = lanes * cap + slots
        done = b.codecs["terminated"].take(flat) | b.codecs["truncated"].take(flat)
        # a transition begins an episode where the one before it (the lane's last indexed,
        # for its first new one) ended one
        opens = np.empty(len(lanes), dtype=bool)
        opens[1:] = done[:-1]
        opens[head] = self._ended[active]
        opened = np.cumsum(opens)
        episode = self._last[lanes] + opened - np.repeat(opened[head] - opens[head], n)
        ring = episode % cap
        self._start[lanes[opens], ring[opens]] = count[opens]
        self._end[lanes[opens], ring[opens]] = -1
        self._end[lanes[done], ring[done]] = count[done]
        self._episode[lanes, slots] = episode
        self._last[active] = episode[tail]
        self._ended[active] = done[tail]

    # ------------------------------------------------------------------ reading
    def _numbered(self, lanes: np.ndarray, episode: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
        """The slot of the first stored transition, and the stored length, of episodes
        ``episode`` (numbers) of ``lanes``: an episode's beginning no earlier than the lane's
        oldest stored transition, its end no later than the newest."""
        b, cap = self.buffer, self.buffer.lane_capacity
        ring = episode % cap
        added = b.added[lanes]
        begin = np.maximum(self._start[lanes, ring], added - b.size[lanes])
        end = self._end[lanes, ring]
        end = np.where(end < 0, added - 1, end)
        return (b.ptr[lanes] - (added - begin)) % cap, end - begin + 1

    def spans(self, lanes: np.ndarray, positions: np.ndarray) -> Spans:
        """The stored part of the episode of each stored transition ``(lanes[i],
        positions[i])`` (a slot that holds no transition: garbage)."""
        self.sync()
        lanes, positions = np.asarray(lanes), np.asarray(positions)
        cap = self.buffer.lane_capacity
        first, length = self._numbered(lanes, self._episode[lanes, positions])
        return Spans(first, (first + length - 1) % cap, length, (positions - first) % cap)

    def counts(self) -> np.ndarray:
        """The number of episodes each lane stores (in flight, and cut by the ring,
        included)."""
        self.sync()
        b = self.buffer
        oldest = self._episode[self._lane_range, b.oldest()]
        return np.where(b.size > 0, self._last - oldest + 1, 0)

    def episode(self, lanes: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The first slot and the stored length of the ``k[i]``-th stored episode of lane
        ``lanes[i]`` (0: the oldest; ``k`` below :meth:`counts`)."""
        self.sync()
        lanes = np.asarray(lanes)
        oldest = self._episode[lanes, self.buffer.oldest()[lanes]]
        return self._numbered(lanes, oldest + np.asarray(k))

    def episodes(self) -> Episodes:
        """Every stored episode, lane after lane, each lane oldest first."""
        counts = self.counts()
        lanes = np.repeat(self._lane_range, counts)
        k = np.arange(len(lanes)) - np.repeat(np.cumsum(counts) - counts, counts)
        first, length = self.episode(lanes, k)
        return Episodes(lanes, first, length)
