"""ReplayBuffer: circular lanes, valid masks, sampling, append-only rollouts, n-step windows."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rltrain.data.buffers import Batch, BufferFullError, ReplayBuffer, Rollout


class Recorder:
    """Adds steps to a buffer and keeps, per lane, the list of everything written there.

    Each transition gets a unique id stored in ``obs[..., 0]`` (and ``-id`` in
    ``next_obs[..., 0]``) so a sampled transition can be found in the record.
    """

    def __init__(self, buffer: ReplayBuffer, rng: np.random.Generator) -> None:
        self.buffer, self.rng = buffer, rng
        self.lanes: list[list[dict]] = [[] for _ in range(buffer.num_lanes)]
        self.next_id = 1

    def add(self, valid=None, terminated=None, truncated=None, rew=None) -> None:
        m = self.buffer.num_lanes
        ids = np.arange(self.next_id, self.next_id + m, dtype=np.float32)
        self.next_id += m
        obs = np.stack([ids, self.rng.normal(size=m).astype(np.float32)], axis=1)
        next_obs = np.stack([-ids, self.rng.normal(size=m).astype(np.float32)], axis=1)
        act = self.rng.integers(0, 3, size=m)
        rew = self.rng.normal(size=m).astype(np.float32) if rew is None else np.asarray(rew)
        terminated = np.zeros(m, bool) if terminated is None else np.asarray(terminated)
        truncated = np.zeros(m, bool) if truncated is None else np.asarray(truncated)
        self.buffer.add(obs, act, rew, next_obs, terminated, truncated,
                        None if valid is None else np.asarray(valid))
        for lane in range(m):
            if valid is None or valid[lane]:
                self.lanes[lane].append(dict(
                    id=ids[lane], obs=obs[lane], next_obs=next_obs[lane], act=act[lane],
                    rew=np.float32(rew[lane]), terminated=bool(terminated[lane]),
                    truncated=bool(truncated[lane])))

    def stored(self, lane: int) -> list[dict]:
        """What the lane should hold: its newest lane_capacity transitions, oldest first."""
        return self.lanes[lane][-self.buffer.lane_capacity:]


def make_buffer(num_lanes=3, lane_capacity=8, **kwargs) -> ReplayBuffer:
    return ReplayBuffer(num_lanes, lane_capacity, (2,), (), np.int64, **kwargs)


def lane_in_time_order(buffer: ReplayBuffer, lane: int) -> np.ndarray:
    """Positions of a lane's stored transitions, oldest first (from the public ptr/size)."""
    size, ptr = int(buffer.size[lane]), int(buffer.ptr[lane])
    start = ptr if size == buffer.lane_capacity else 0
    return (start + np.arange(size)) % buffer.lane_capacity


def reference_nstep(seq: list[dict], i: int, n: int, gamma: float):
    """Hand n-step return of transition i of a lane's time-ordered transitions:
    (return, discount, next_obs of the bootstrap transition)."""
    ret, k = 0.0, 0
    for j in range(n):
        if i + j >= len(seq):  # the lane's newest entry ends the window
            break
        tr = seq[i + j]
        ret += gamma**j * float(tr["rew"])
        k = j
        if tr["terminated"] or tr["truncated"]:
            break
    last = seq[i + k]
    discount = 0.0 if last["terminated"] else gamma ** (k + 1)
    return ret, discount, last["next_obs"]


# --------------------------------------------------------------------------- storage
def test_circular_overwrite_keeps_newest_in_time_order():
    """A full circular lane keeps its newest lane_capacity transitions, oldest first."""
    buf = make_buffer(num_lanes=2, lane_capacity=4)
    rec = Recorder(buf, np.random.default_rng(0))
    for _ in range(11):
        rec.add()
    assert list(buf.size) == [4, 4] and len(buf) == 8
    for lane in range(2):
        pos = lane_in_time_order(buf, lane)
        expected = rec.stored(lane)
        assert len(expected) == 4
        np.testing.assert_array_equal(buf.obs[lane, pos], [t["obs"] for t in expected])
        np.testing.assert_array_equal(buf.next_obs[lane, pos], [t["next_obs"] for t in expected])
        np.testing.assert_array_equal(buf.rew[lane, pos], [t["rew"] for t in expected])
        np.testing.assert_array_equal(buf.act[lane, pos], [t["act"] for t in expected])
        # ids strictly increase in time order: the 4 newest, in order
        ids = buf.obs[lane, pos, 0]
        assert (np.diff(ids) > 0).all()
        assert ids[-1] == rec.lanes[lane][-1]["id"]


def test_circular_sample_sees_only_the_newest():
    """After wrap-around, sampling never returns an overwritten transition."""
    buf = make_buffer(num_lanes=2, lane_capacity=4)
    rec = Recorder(buf, np.random.default_rng(1))
    for _ in range(10):
        rec.add()
    batch = buf.sample(2000)
    newest = {t["id"] for lane in range(2) for t in rec.stored(lane)}
    assert set(batch.obs[:, 0].tolist()) == newest


def test_valid_mask_leaves_masked_lanes_untouched():
    """Lanes masked out by ``valid`` keep their content, pointer and size."""
    buf = make_buffer(num_lanes=3, lane_capacity=5)
    rec = Recorder(buf, np.random.default_rng(2))
    rec.add()
    before = {name: getattr(buf, name).copy()
              for name in ("obs", "next_obs", "act", "rew", "terminated", "truncated")}
    rec.add(valid=[True, False, True], terminated=[True, True, False],
            truncated=[False, True, True])
    assert list(buf.size) == [2, 1, 2]
    assert list(buf.ptr) == [2, 1, 2]
    for name, old in before.items():
        np.testing.assert_array_equal(getattr(buf, name)[1], old[1], err_msg=name)
    assert buf.terminated[0, 1] and not buf.truncated[0, 1]
    assert buf.truncated[2, 1] and not buf.terminated[2, 1]


def test_lanes_with_different_fill_counts():
    """Masks give lanes different counts; each lane holds exactly its own transitions in order,
    also after some lanes wrapped around and others did not."""
    buf = make_buffer(num_lanes=4, lane_capacity=6)
    rng = np.random.default_rng(3)
    rec = Recorder(buf, rng)
    for step in range(20):
        # lane 0 always, lane 1 every other step, lane 2 every fifth step, lane 3 never
        rec.add(valid=[True, step % 2 == 0, step % 5 == 0, False])
    assert list(buf.size) == [6, 6, 4, 0]
    assert len(buf) == 16
    for lane in range(4):
        pos = lane_in_time_order(buf, lane)
        expected = rec.stored(lane)
        assert len(pos) == len(expected)
        np.testing.assert_array_equal(buf.obs[lane, pos, 0], [t["id"] for t in expected])


def test_clear_empties_every_lane():
    buf = make_buffer()
    rec = Recorder(buf, np.random.default_rng(4))
    for _ in range(3):
        rec.add()
    buf.clear()
    assert len(buf) == 0 and (buf.ptr == 0).all()
    with pytest.raises(ValueError):
        buf.sample(4)


# --------------------------------------------------------------------------- sampling
def test_sample_returns_only_stored_transitions_with_their_fields():
    """Every sampled row is a stored transition of its lane, with matching fields."""
    buf = make_buffer(num_lanes=4, lane_capacity=10, gamma=0.9)
    rec = Recorder(buf, np.random.default_rng(5))
    for step in range(7):
        rec.add(valid=[True, step < 2, False, step % 3 == 0],
                terminated=[step == 3, False, False, step == 6],
                truncated=[step == 5, False, False, False])
    batch = buf.sample(3000)
    assert isinstance(batch, Batch)
    by_id = {t["id"]: (lane, t) for lane in range(4) for t in rec.stored(lane)}
    assert (batch.positions < buf.size[batch.lanes]).all()
    assert set(batch.obs[:, 0].tolist()) == set(by_id)
    for row in range(len(batch.rew)):
        lane, tr = by_id[float(batch.obs[row, 0])]
        assert batch.lanes[row] == lane
        np.testing.assert_array_equal(batch.obs[row], tr["obs"])
        assert batch.act[row] == tr["act"]
        # one-step: the stored reward, bootstrap from the own next_obs, discount gamma
        # unless terminated (truncated transitions keep the bootstrap)
        assert batch.rew[row] == tr["rew"]
        np.testing.assert_array_equal(batch.next_obs[row], tr["next_obs"])
        assert batch.discount[row] == pytest.approx(0.0 if tr["terminated"] else 0.9)


def test_sample_is_uniform_over_transitions_across_unequal_lanes():
    """Each stored transition is equally likely, whatever the size of its lane."""
    buf = make_buffer(num_lanes=4, lane_capacity=12)
    rec = Recorder(buf, np.random.default_rng(6))
    for step in range(12):
        rec.add(valid=[step < 1, step < 5, False, True])
    sizes = np.array([1, 5, 0, 12])
    assert list(buf.size) == list(sizes)
    n = 72_000
    batch = buf.sample(n)
    ids, counts = np.unique(batch.obs[:, 0], return_counts=True)
    assert len(ids) == sizes.sum()
    expected = n / sizes.sum()  # 4000 per transition, std ~ 62
    assert np.all(np.abs(counts - expected) < 0.08 * expected), counts
    lane_counts = np.bincount(batch.lanes, minlength=4)
    np.testing.assert_allclose(lane_counts / n, sizes / sizes.sum(), atol=0.01)


def test_sample_is_reproducible_with_a_seed():
    """The same seed gives the same batches; another seed gives different ones."""

    def batches(seed):
        buf = make_buffer(num_lanes=3, lane_capacity=16, seed=seed, n_step=3)
        rec = Recorder(buf, np.random.default_rng(7))  # same content for every seed
        for step in range(20):
            rec.add(valid=[True, step % 2 == 0, step < 4])
        return [buf.sample(32) for _ in range(3)]

    a, b, c = batches(11), batches(11), batches(12)
    for x, y in zip(a, b, strict=True):
        for f in dataclasses.fields(Batch):
            np.testing.assert_array_equal(getattr(x, f.name), getattr(y, f.name))
    assert any(not np.array_equal(x.positions, z.positions) or not np.array_equal(x.lanes, z.lanes)
               for x, z in zip(a, c, strict=True))


# --------------------------------------------------------------------------- append-only
def test_append_only_raises_when_a_lane_is_full():
    """Without circular overwrite, writing to a full lane raises and changes nothing."""
    buf = make_buffer(num_lanes=2, lane_capacity=3, circular=False)
    rec = Recorder(buf, np.random.default_rng(8))
    rec.add()
    rec.add()
    rec.add(valid=[True, False])
    assert list(buf.size) == [3, 2]
    rec.add(valid=[False, True])  # lane 1 still had room
    assert list(buf.size) == [3, 3]
    obs_before = buf.obs.copy()
    with pytest.raises(BufferFullError):
        buf.add(np.ones((2, 2)), np.zeros(2, np.int64), np.ones(2), np.ones((2, 2)),
                np.zeros(2, bool), np.zeros(2, bool))
    with pytest.raises(BufferFullError):
        buf.add(np.ones((2, 2)), np.zeros(2, np.int64), np.ones(2), np.ones((2, 2)),
                np.zeros(2, bool), np.zeros(2, bool), np.array([False, True]))
    np.testing.assert_array_equal(buf.obs, obs_before)
    assert list(buf.size) == [3, 3]
    buf.clear()
    rec.add()
    assert list(buf.size) == [1, 1]


def test_rollout_shapes_valid_mask_and_contents():
    """rollout() gives (lanes, T, ...) arrays in time order, T = the longest lane."""
    buf = ReplayBuffer(3, 6, (2, 2), (2,), np.float32, circular=False)
    rng = np.random.default_rng(9)
    added = [[] for _ in range(3)]
    for step in range(4):
        valid = np.array([True, step < 2, False])
        obs = rng.normal(size=(3, 2, 2)).astype(np.float32)
        act = rng.normal(size=(3, 2)).astype(np.float32)
        rew = rng.normal(size=3).astype(np.float32)
        nxt = rng.normal(size=(3, 2, 2)).astype(np.float32)
        term, trunc = np.array([step == 1, False, False]), np.array([False, step == 1, False])
        buf.add(obs, act, rew, nxt, term, trunc, valid)
        for lane in np.flatnonzero(valid):
            added[lane].append((obs[lane], act[lane], rew[lane], nxt[lane], term[lane],
                                trunc[lane]))
    ro = buf.rollout()
    assert isinstance(ro, Rollout)
    assert ro.obs.shape == (3, 4, 2, 2) and ro.next_obs.shape == (3, 4, 2, 2)
    assert ro.act.shape == (3, 4, 2)
    assert ro.rew.shape == ro.terminated.shape == ro.truncated.shape == ro.valid.shape == (3, 4)
    np.testing.assert_array_equal(
        ro.valid, [[True] * 4, [True, True, False, False], [False] * 4])
    assert ro.num_transitions == 6
    np.testing.assert_array_equal(ro.dones, ro.terminated | ro.truncated)
    for lane in range(3):
        for t, (o, a, r, n, te, tr) in enumerate(added[lane]):
            np.testing.assert_array_equal(ro.obs[lane, t], o)
            np.testing.assert_array_equal(ro.act[lane, t], a)
            assert ro.rew[lane, t] == r
            np.testing.assert_array_equal(ro.next_obs[lane, t], n)
            assert ro.terminated[lane, t] == te and ro.truncated[lane, t] == tr
    assert ro.dones[0, 1] and ro.dones[1, 1] and not ro.dones[0, 0]


def test_rollout_of_empty_buffer_and_of_circular_buffer():
    empty = make_buffer(num_lanes=2, lane_capacity=4, circular=False).rollout()
    assert empty.obs.shape == (2, 0, 2) and empty.valid.shape == (2, 0)
    assert empty.num_transitions == 0
    with pytest.raises(RuntimeError):
        make_buffer(circular=True).rollout()


# --------------------------------------------------------------------------- n-step
def _single_lane(rewards, terminated, truncated, n_step, gamma, capacity=None):
    buf = ReplayBuffer(1, capacity or len(rewards), (1,), (), np.int64, n_step=n_step,
                       gamma=gamma, seed=0)
    for i, r in enumerate(rewards):
        buf.add(np.array([[i]], np.float32), np.array([0]), np.array([r], np.float32),
                np.array([[100 + i]], np.float32), np.array([terminated[i]]),
                np.array([truncated[i]]))
    return buf


def _rows_by_start(batch: Batch) -> dict[int, tuple[float, float, float]]:
    """Map the start index (obs) of each sampled window to (return, discount, next_obs)."""
    out = {}
    for o, r, d, n in zip(batch.obs[:, 0], batch.rew, batch.discount, batch.next_obs[:, 0],
                          strict=True):
        out[int(o)] = (float(r), float(d), float(n))
    return out


@pytest.mark.parametrize(
    ("terminated", "truncated", "expected"),
    [
        # no done: full windows of 3, then windows cut by the lane's newest entry
        ([0, 0, 0, 0, 0], [0, 0, 0, 0, 0],
         {0: (1 + 1 + 1, 0.125, 102), 1: (2 + 2 + 2, 0.125, 103),
          2: (4 + 4 + 4, 0.125, 104), 3: (8 + 8, 0.25, 104), 4: (16, 0.5, 104)}),
        # truncation at index 1: the window stops there and still bootstraps (gamma^k)
        ([0, 0, 0, 0, 0], [0, 1, 0, 0, 0],
         {0: (1 + 1, 0.25, 101), 1: (2, 0.5, 101),
          2: (4 + 4 + 4, 0.125, 104), 3: (8 + 8, 0.25, 104), 4: (16, 0.5, 104)}),
        # termination at index 1: same return, but no bootstrap
        ([0, 1, 0, 0, 0], [0, 0, 0, 0, 0],
         {0: (1 + 1, 0.0, 101), 1: (2, 0.0, 101),
          2: (4 + 4 + 4, 0.125, 104), 3: (8 + 8, 0.25, 104), 4: (16, 0.5, 104)}),
        # termination at the newest entry, truncation at index 2
        ([0, 0, 0, 0, 1], [0, 0, 1, 0, 0],
         {0: (1 + 1 + 1, 0.125, 102), 1: (2 + 2, 0.25, 102), 2: (4, 0.5, 102),
          3: (8 + 8, 0.0, 104), 4: (16, 0.0, 104)}),
    ],
)
@pytest.mark.parametrize("capacity", [5, 8], ids=["full-lane", "partly-filled-lane"])
def test_nstep_sample_matches_hand_computation(terminated, truncated, expected, capacity):
    """rewards 1, 2, 4, 8, 16 with gamma 0.5 and n 3: every window computed by hand."""
    buf = _single_lane([1, 2, 4, 8, 16], [bool(x) for x in terminated],
                       [bool(x) for x in truncated], n_step=3, gamma=0.5, capacity=capacity)
    got = _rows_by_start(buf.sample(500))
    assert set(got) == set(expected)
    for start, (ret, disc, nxt) in expected.items():
        assert got[start] == pytest.approx((ret, disc, nxt)), start


def test_nstep_window_follows_time_order_across_wrap_around():
    """In a wrapped circular lane, windows continue in time order (not array order) and
    stop at the newest entry."""
    # 7 transitions into 4 slots: the lane keeps indices 3, 4, 5, 6 at positions 3, 0, 1, 2
    buf = _single_lane([1, 2, 4, 8, 16, 32, 64], [False] * 7, [False] * 7, n_step=3, gamma=0.5,
                       capacity=4)
    got = _rows_by_start(buf.sample(400))
    assert set(got) == {3, 4, 5, 6}
    assert got[3] == pytest.approx((8 + 8 + 8, 0.125, 105))
    assert got[4] == pytest.approx((16 + 16 + 16, 0.125, 106))
    assert got[5] == pytest.approx((32 + 32, 0.25, 106))
    assert got[6] == pytest.approx((64, 0.5, 106))


@pytest.mark.parametrize("n_step", [1, 2, 4])
def test_nstep_sample_matches_reference_on_random_lanes(n_step):
    """Random rewards, dones and masks over wrapped lanes of unequal size: every sampled
    window matches the per-transition reference."""
    gamma = 0.9
    buf = make_buffer(num_lanes=3, lane_capacity=10, n_step=n_step, gamma=gamma, seed=3)
    rng = np.random.default_rng(10 + n_step)
    rec = Recorder(buf, rng)
    for _ in range(25):
        rec.add(valid=rng.random(3) < [1.0, 0.6, 0.2],
                terminated=rng.random(3) < 0.15, truncated=rng.random(3) < 0.15)
    rec.add()  # no done at the newest entries: windows there are cut by the lane's end
    assert buf.size[2] < buf.lane_capacity  # one lane is only partly filled
    index = {}
    for lane in range(3):
        for i, t in enumerate(rec.stored(lane)):
            index[t["id"]] = (lane, i)
    batch = buf.sample(2000)
    assert set(batch.obs[:, 0].tolist()) == set(index)
    for row in range(len(batch.rew)):
        lane, i = index[float(batch.obs[row, 0])]
        ret, disc, nxt = reference_nstep(rec.stored(lane), i, n_step, gamma)
        assert batch.rew[row] == pytest.approx(ret, rel=1e-5, abs=1e-5)
        assert batch.discount[row] == pytest.approx(disc, rel=1e-6)
        np.testing.assert_array_equal(batch.next_obs[row], nxt)
        assert batch.lanes[row] == lane


# --------------------------------------------------------------------------- blocks
def _random_steps(rng, steps, lanes, p_valid):
    obs = rng.normal(size=(steps, lanes, 2)).astype(np.float32)
    return (obs, rng.integers(0, 3, size=(steps, lanes)),
            rng.normal(size=(steps, lanes)).astype(np.float32), -obs,
            rng.random((steps, lanes)) < 0.1, rng.random((steps, lanes)) < 0.05,
            None if p_valid is None else rng.random((steps, lanes)) < p_valid)


@pytest.mark.parametrize("p_valid", [None, 0.7])
@pytest.mark.parametrize("steps", [1, 5, 8, 19])
def test_extend_equals_step_by_step_adds(steps, p_valid):
    """A block of T steps (T below, at and above the lane capacity of 8, which wraps lanes
    more than once) leaves a circular buffer exactly as T single-step adds do."""
    rng = np.random.default_rng(steps)
    one, block = make_buffer(num_lanes=4), make_buffer(num_lanes=4)
    for _ in range(2):  # a second block starts from lanes at different positions
        fields = _random_steps(rng, steps, 4, p_valid)
        block.extend(*fields)
        for t in range(steps):
            one.add(*(None if f is None else f[t] for f in fields))
    for name in ReplayBuffer._ARRAYS:
        np.testing.assert_array_equal(getattr(block, name), getattr(one, name), err_msg=name)


def test_extend_that_would_overflow_an_append_only_lane_writes_nothing():
    buf = make_buffer(num_lanes=2, lane_capacity=4, circular=False)
    fields = _random_steps(np.random.default_rng(0), 3, 2, None)
    buf.extend(*fields)
    before = {name: getattr(buf, name).copy() for name in ReplayBuffer._ARRAYS}
    valid = np.array([[False, True], [False, True]])  # lane 1 would need 5 slots
    with pytest.raises(BufferFullError):
        buf.extend(*(f[:2] for f in fields[:6]), valid)
    for name, value in before.items():
        np.testing.assert_array_equal(getattr(buf, name), value, err_msg=name)
    buf.extend(*(f[:1] for f in fields[:6]))  # one more step still fits
    assert list(buf.size) == [4, 4]
