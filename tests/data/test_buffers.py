"""ReplayBuffer: circular lanes, valid masks, append-only rollouts, each observation stored
once (next observations exact against a reference that stores them), checkpoint states
(small, exact, and the previous release's format), lazy allocation."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
import torch

from rltrain.data import storage
from rltrain.data.batch import Rollout
from rltrain.data.reading import read
from rltrain.data.samplers.uniform import UniformSampler
from rltrain.data.state_format import stored_transitions
from rltrain.data.storage import BufferFullError, ReplayBuffer
from rltrain.data.transforms.nstep import NStepReturns

FIELDS = ("obs", "act", "rew", "next_obs", "terminated", "truncated")


class Recorder:
    """Adds steps to a buffer and keeps, per lane, the list of everything written there: a
    plain reference that stores each next observation explicitly.

    Each transition gets a unique id stored in ``obs[..., 0]`` (and ``-id`` in
    ``next_obs[..., 0]``, so every next observation differs from its successor's
    observation: the buffer must keep them all aside).
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
        self.record(obs, act, rew, next_obs, terminated, truncated, valid)

    def record(self, obs, act, rew, next_obs, terminated, truncated, valid=None) -> None:
        for lane in range(self.buffer.num_lanes):
            if valid is None or valid[lane]:
                self.lanes[lane].append(dict(
                    id=obs[lane].reshape(-1)[0], obs=np.float32(obs[lane]),
                    next_obs=np.float32(next_obs[lane]), act=act[lane],
                    rew=np.float32(rew[lane]), terminated=bool(terminated[lane]),
                    truncated=bool(truncated[lane])))

    def clear(self) -> None:
        self.buffer.clear()
        self.lanes = [[] for _ in range(self.buffer.num_lanes)]

    def stored(self, lane: int) -> list[dict]:
        """What the lane should hold: its newest lane_capacity transitions, oldest first."""
        return self.lanes[lane][-self.buffer.lane_capacity:]

    def old_state(self) -> dict:
        """The previous release's ``state_dict()`` for the same content: full-capacity
        arrays (next_obs stored twice), transition j of a lane (counted since the last
        clear) at slot j % capacity, ``ptr`` and ``size``, and its sampling ``rng``."""
        b = self.buffer
        m, cap = b.num_lanes, b.lane_capacity
        arrays = {"obs": np.zeros((m, cap, *b.obs_shape), np.float32),
                  "next_obs": np.zeros((m, cap, *b.obs_shape), np.float32),
                  "act": np.zeros((m, cap, *b.act_shape), b.fields["act"].dtype),
                  "rew": np.zeros((m, cap), np.float32),
                  "terminated": np.zeros((m, cap), bool), "truncated": np.zeros((m, cap), bool)}
        ptr, size = np.zeros(m, np.int64), np.zeros(m, np.int64)
        for lane, written in enumerate(self.lanes):
            for j, tr in enumerate(written):
                for name, value in arrays.items():
                    value[lane, j % cap] = tr[name]
            size[lane] = min(len(written), cap)
            ptr[lane] = len(written) % cap if b.circular else len(written)
        return {**{k: torch.from_numpy(v) for k, v in arrays.items()},
                "ptr": torch.from_numpy(ptr), "size": torch.from_numpy(size),
                "rng": np.random.default_rng(0).bit_generator.state}


def make_buffer(num_lanes=3, lane_capacity=8, **kwargs) -> ReplayBuffer:
    return ReplayBuffer(num_lanes, lane_capacity, (2,), (), np.int64, **kwargs)


def lane_in_time_order(buffer: ReplayBuffer, lane: int) -> np.ndarray:
    """Positions of a lane's stored transitions, oldest first (from the public ptr/size)."""
    size = int(buffer.size[lane])
    return (buffer.oldest()[lane] + np.arange(size)) % buffer.lane_capacity


def lane_contents(buffer: ReplayBuffer, lane: int) -> dict[str, np.ndarray]:
    """Every field of a lane's stored transitions, oldest first, through the primitives."""
    pos = lane_in_time_order(buffer, lane)
    lanes = np.full(len(pos), lane)
    held = {name: buffer.codecs[name].array[lane, pos]
            for name in ("rew", "terminated", "truncated")}
    return {"obs": buffer.obs_at(lanes, pos), "act": buffer.act_at(lanes, pos),
            "next_obs": buffer.next_obs_at(lanes, pos), **held}


def assert_holds(buffer: ReplayBuffer, rec: Recorder) -> None:
    """Every lane holds exactly the reference's newest transitions, bit for bit."""
    for lane in range(buffer.num_lanes):
        expected = rec.stored(lane)
        got = lane_contents(buffer, lane)
        assert len(got["rew"]) == len(expected) == buffer.size[lane], lane
        for name in FIELDS:
            want = np.array([t[name] for t in expected]).reshape(got[name].shape)
            assert want.tobytes() == got[name].tobytes(), (lane, name)


# --------------------------------------------------------------------------- storage
def test_circular_overwrite_keeps_newest_in_time_order():
    """A full circular lane keeps its newest lane_capacity transitions, oldest first."""
    buf = make_buffer(num_lanes=2, lane_capacity=4)
    rec = Recorder(buf, np.random.default_rng(0))
    for _ in range(11):
        rec.add()
    assert list(buf.size) == [4, 4] and len(buf) == 8
    assert_holds(buf, rec)
    for lane in range(2):
        ids = lane_contents(buf, lane)["obs"][:, 0]
        assert (np.diff(ids) > 0).all() and ids[-1] == rec.lanes[lane][-1]["id"]


def test_valid_mask_leaves_masked_lanes_untouched():
    """Lanes masked out by ``valid`` keep their content, pointer, size and pending next obs."""
    buf = make_buffer(num_lanes=3, lane_capacity=5)
    rec = Recorder(buf, np.random.default_rng(2))
    rec.add()
    before = lane_contents(buf, 1)
    rec.add(valid=[True, False, True], terminated=[True, True, False],
            truncated=[False, True, True])
    assert list(buf.size) == [2, 1, 2] and list(buf.ptr) == [2, 1, 2]
    for name, old in before.items():
        np.testing.assert_array_equal(lane_contents(buf, 1)[name], old, err_msg=name)
    assert buf.codecs["terminated"].array[0, 1] and not buf.codecs["truncated"].array[0, 1]
    assert buf.codecs["truncated"].array[2, 1] and not buf.codecs["terminated"].array[2, 1]
    assert_holds(buf, rec)


def test_lanes_with_different_fill_counts():
    """Masks give lanes different counts; each lane holds exactly its own transitions in order,
    also after some lanes wrapped around and others did not."""
    buf = make_buffer(num_lanes=4, lane_capacity=6)
    rec = Recorder(buf, np.random.default_rng(3))
    for step in range(20):
        # lane 0 always, lane 1 every other step, lane 2 every fifth step, lane 3 never
        rec.add(valid=[True, step % 2 == 0, step % 5 == 0, False])
    assert list(buf.size) == [6, 6, 4, 0] and len(buf) == 16
    assert_holds(buf, rec)


def test_clear_empties_every_lane_and_leaves_nothing_pending():
    buf = make_buffer()
    rec = Recorder(buf, np.random.default_rng(4))
    for _ in range(3):
        rec.add()
    rec.clear()
    assert len(buf) == 0 and (buf.ptr == 0).all()
    with pytest.raises(ValueError, match="empty"):
        UniformSampler(0).sample(buf, 4)
    # the lanes' next writes resolve nothing from before the clear
    for _ in range(2):
        rec.add()
    assert_holds(buf, rec)


def test_bytes_per_transition_counts_each_observation_once():
    """Humanoid-sized: obs (348,) and act (17,) float32; the previous layout stored
    next_obs too (2,858 bytes)."""
    per = ReplayBuffer.bytes_per_transition((348,), np.float32, (17,), np.float32)
    previous = 2 * 348 * 4 + 17 * 4 + 4 + 1 + 1  # obs and next_obs, act, rew, two flags
    assert per == previous - 348 * 4 + 4  # one observation less, a 4-byte reference more
    buf = ReplayBuffer(2, 10, (3, 2), (), np.int64, obs_dtype=np.uint8)
    assert buf.nominal_bytes() == 20 * ReplayBuffer.bytes_per_transition(
        (3, 2), np.uint8, (), np.int64) == 20 * (6 + 8 + 10)


# --------------------------------------------------------------------------- append-only
def test_append_only_raises_when_a_lane_is_full():
    """Without circular overwrite, writing to a full lane raises and changes nothing."""
    buf = make_buffer(num_lanes=2, lane_capacity=3, circular=False)
    rec = Recorder(buf, np.random.default_rng(8))
    rec.add()
    rec.add()
    rec.add(valid=[True, False])
    rec.add(valid=[False, True])  # lane 1 still had room
    assert list(buf.size) == [3, 3]
    before = buf.state_dict()
    for valid in (None, np.array([False, True])):
        with pytest.raises(BufferFullError):
            buf.add(np.ones((2, 2)), np.zeros(2, np.int64), np.ones(2), np.ones((2, 2)),
                    np.zeros(2, bool), np.zeros(2, bool), valid)
    for key, value in buf.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert_holds(buf, rec)
    rec.clear()
    rec.add()
    assert list(buf.size) == [1, 1]


def test_rollout_shapes_valid_mask_and_contents():
    """rollout() gives (lanes, T, ...) arrays in time order, T = the longest lane, with each
    transition's next observation as written."""
    buf = ReplayBuffer(3, 6, (2, 2), (2,), np.float32, circular=False)
    rng = np.random.default_rng(9)
    added = [[] for _ in range(3)]
    cur = rng.normal(size=(3, 2, 2)).astype(np.float32)
    for step in range(4):
        valid = np.array([True, step < 2, False])
        act = rng.normal(size=(3, 2)).astype(np.float32)
        rew = rng.normal(size=3).astype(np.float32)
        nxt = rng.normal(size=(3, 2, 2)).astype(np.float32)
        term, trunc = np.array([step == 1, False, False]), np.array([False, step == 1, False])
        buf.add(cur, act, rew, nxt, term, trunc, valid)
        for lane in np.flatnonzero(valid):
            added[lane].append((cur[lane], act[lane], rew[lane], nxt[lane], term[lane],
                                trunc[lane]))
        # within an episode the next observation is the next step's; after an end, a reset
        cur = np.where((term | trunc)[:, None, None], rng.normal(size=(3, 2, 2)), nxt
                       ).astype(np.float32)
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
    assert empty.obs.shape == (2, 0, 2) and empty.next_obs.shape == (2, 0, 2)
    assert empty.valid.shape == (2, 0) and empty.num_transitions == 0
    with pytest.raises(RuntimeError):
        make_buffer(circular=True).rollout()


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
    for _ in range(3):  # later blocks start from lanes at different positions
        fields = _random_steps(rng, steps, 4, p_valid)
        block.extend(*fields)
        for t in range(steps):
            one.add(*(None if f is None else f[t] for f in fields))
    np.testing.assert_array_equal(block.ptr, one.ptr)
    np.testing.assert_array_equal(block.size, one.size)
    for lane in range(4):
        a, b = lane_contents(block, lane), lane_contents(one, lane)
        for name in FIELDS:
            assert a[name].tobytes() == b[name].tobytes(), (lane, name)


@pytest.mark.parametrize("circular", [True, False])
def test_extend_in_parts_equals_extend_at_once(monkeypatch, circular):
    """A large block (a whole dataset) is written in parts that keep temporaries small: the
    same contents as one part; and an append-only buffer still refuses all of a block that
    overflows before writing any part."""
    rng = np.random.default_rng(11)
    fields = _random_steps(rng, 30, 3, 0.8)
    whole = make_buffer(lane_capacity=40, circular=circular)
    whole.extend(*fields)
    monkeypatch.setattr(storage, "_BLOCK_ELEMENTS", 13)  # parts of 2 steps x 3 lanes x 2
    parts = make_buffer(lane_capacity=40, circular=circular)
    parts.extend(*fields)
    for key, value in whole.state_dict().items():
        assert torch.equal(value, parts.state_dict()[key]), key
    if not circular:
        before = parts.state_dict()
        with pytest.raises(BufferFullError):
            parts.extend(*fields)  # the first parts would fit, the last would not
        for key, value in parts.state_dict().items():
            assert torch.equal(value, before[key]), key


def test_extend_that_would_overflow_an_append_only_lane_writes_nothing():
    buf = make_buffer(num_lanes=2, lane_capacity=4, circular=False)
    fields = _random_steps(np.random.default_rng(0), 3, 2, None)
    buf.extend(*fields)
    before = buf.state_dict()
    valid = np.array([[False, True], [False, True]])  # lane 1 would need 5 slots
    with pytest.raises(BufferFullError):
        buf.extend(*(f[:2] for f in fields[:6]), valid)
    for key, value in buf.state_dict().items():
        assert torch.equal(value, before[key]), key
    buf.extend(*(f[:1] for f in fields[:6]))  # one more step still fits
    assert list(buf.size) == [4, 4]


# --------------------------------------------------------------------------- next obs
def episodes(rng, lanes, blocks, *, p_end=0.15, next_step=False, obs_shape=(3,),
             tweaks=True):
    """Blocks of steps of envs with episodes: within an episode the next observation is
    the next step's observation; an episode ends (terminated or truncated) with a final
    observation, and the next one starts from a reset observation. ``next_step``:
    gymnasium's next-step autoreset, whose step after an end is a reset step (from the
    final observation to the reset one), masked out. Some next observations differ from
    the next step's only in their bits (-0.0 for 0.0, another NaN payload), some are equal
    NaNs (unless not ``tweaks``). Block lengths vary; in same-step mode every third block
    masks random steps."""
    cur = rng.normal(size=(lanes, *obs_shape)).astype(np.float32)
    resetting = np.zeros(lanes, bool)
    nan_a, nan_b = np.array([0x7FC00001, 0x7FC00002], np.uint32).view(np.float32)
    column = (slice(None),) * 0 + (0,) * len(obs_shape)  # the first element of an obs
    for b in range(blocks):
        steps = int(rng.integers(1, 40))
        block = {k: [] for k in (*FIELDS, "valid")}
        for _ in range(steps):
            valid = ~resetting
            nxt = rng.normal(size=(lanes, *obs_shape)).astype(np.float32)
            kind = rng.random(lanes)
            term = (kind < p_end / 2) & valid
            trunc = (kind >= p_end / 2) & (kind < p_end) & valid
            ends = term | trunc
            follow = nxt.copy()  # the next step's observation
            for lo, x, y in ((p_end, -0.0, 0.0), (p_end + 0.03, nan_a, nan_b),
                             (p_end + 0.06, nan_a, nan_a))[: 3 * tweaks]:
                tweak = (kind >= lo) & (kind < lo + 0.03) & valid
                nxt[(tweak, *column[1:])] = x
                follow[(tweak, *column[1:])] = y
            reset = rng.normal(size=(lanes, *obs_shape)).astype(np.float32)
            shape = (lanes,) + (1,) * len(obs_shape)
            if next_step:
                nxt = np.where(resetting.reshape(shape), reset, nxt)
                cur_next = np.where(resetting.reshape(shape), reset,
                                    np.where(ends.reshape(shape), nxt, follow))
                resetting = ends
            else:
                cur_next = np.where(ends.reshape(shape), reset, follow)
            for name, value in (("obs", cur), ("act", rng.integers(0, 4, lanes)),
                                ("rew", rng.normal(size=lanes).astype(np.float32)),
                                ("next_obs", nxt), ("terminated", term),
                                ("truncated", trunc), ("valid", valid)):
                block[name].append(value)
            cur = cur_next
        arrays = {k: np.stack(v) for k, v in block.items()}
        if not next_step and b % 3 == 2:
            arrays["valid"] = rng.random(arrays["valid"].shape) < 0.8
        yield arrays


@pytest.mark.parametrize("next_step", [False, True], ids=["same-step", "next-step"])
@pytest.mark.parametrize(("lanes", "capacity"), [(1, 1), (3, 7), (4, 40), (2, 300)])
def test_next_obs_is_exactly_what_was_written(next_step, lanes, capacity):
    """Against a reference that stores every next observation: random episode ends
    (terminated and truncated), masked steps, bit-level differences (-0.0, NaN payloads),
    wrap-around, clears and each lane's newest (pending) transition, after every block."""
    rng = np.random.default_rng(lanes * 1000 + capacity + next_step)
    buf = ReplayBuffer(lanes, capacity, (3,), (), np.int64)
    rec = Recorder(buf, rng)
    for b, block in enumerate(episodes(rng, lanes, 40, next_step=next_step)):
        if b == 25:
            rec.clear()
        valid = block.pop("valid")
        fields = [block[name] for name in ("obs", "act", "rew", "next_obs", "terminated",
                                           "truncated")]
        buf.extend(*fields, None if valid.all() else valid)
        for t in range(len(valid)):
            rec.record(*(f[t] for f in fields), valid[t])
        assert_holds(buf, rec)


def test_next_obs_exact_in_rollouts_of_append_only_buffers():
    rng = np.random.default_rng(5)
    buf = ReplayBuffer(3, 200, (3,), (), np.int64, circular=False)
    for _ in range(3):
        rec = Recorder(buf, rng)
        rec.clear()
        for block in episodes(rng, 3, 5, next_step=True):
            valid = block.pop("valid")
            fields = [block[n] for n in ("obs", "act", "rew", "next_obs", "terminated",
                                         "truncated")]
            buf.extend(*fields, valid)
            for t in range(len(valid)):
                rec.record(*(f[t] for f in fields), valid[t])
        ro = buf.rollout()
        for lane in range(3):
            want = np.array([t["next_obs"] for t in rec.stored(lane)])
            got = ro.next_obs[lane][ro.valid[lane]]
            assert want.tobytes() == got.tobytes()
        assert_holds(buf, rec)


@pytest.mark.parametrize("p_end", [0.002, 0.05])
def test_asides_cost_memory_in_proportion_to_episode_ends(p_end):
    """The observations kept aside (one per episode end) cost memory in proportion to how
    many are held: the resident estimate beyond the stored transitions' own bytes is
    between one and a few observations per aside, far from a second copy of each."""
    obs_dim = 64
    buf = ReplayBuffer(2, 5000, (obs_dim,), (), np.int64)
    rng = np.random.default_rng(6)
    for block in episodes(rng, 2, 600, p_end=p_end, obs_shape=(obs_dim,), tweaks=False,
                          next_step=True):
        valid = block.pop("valid")
        buf.extend(*(block[n] for n in ("obs", "act", "rew", "next_obs", "terminated",
                                        "truncated")), valid)
    per = ReplayBuffer.bytes_per_transition((obs_dim,), np.float32, (), np.int64)
    stored, obs_bytes = len(buf), obs_dim * 4
    held = len(buf.state_dict()["aside_rows"])  # the asides stored transitions reference
    assert stored == 10_000 and held > 10
    extra = buf.resident_bytes() - per * stored
    assert held * obs_bytes <= extra <= (4 * held + 64) * obs_bytes
    assert extra < 0.5 * stored * obs_bytes  # not a second copy


# --------------------------------------------------------------------------- state
def filled(lanes=3, capacity=50, blocks=30, seed=7, next_step=True):
    rng = np.random.default_rng(seed)
    buf = ReplayBuffer(lanes, capacity, (3,), (), np.int64)
    rec = Recorder(buf, rng)
    for block in episodes(rng, lanes, blocks, next_step=next_step):
        valid = block.pop("valid")
        fields = [block[n] for n in ("obs", "act", "rew", "next_obs", "terminated",
                                     "truncated")]
        buf.extend(*fields, valid)
        for t in range(len(valid)):
            rec.record(*(f[t] for f in fields), valid[t])
    return buf, rec


def assert_same_buffer(a: ReplayBuffer, b: ReplayBuffer, n: int = 3) -> None:
    np.testing.assert_array_equal(a.ptr, b.ptr)
    np.testing.assert_array_equal(a.size, b.size)
    for lane in range(a.num_lanes):
        x, y = lane_contents(a, lane), lane_contents(b, lane)
        for name in FIELDS:
            assert x[name].tobytes() == y[name].tobytes(), (lane, name)
    for seed in range(3):
        ba = read(a, *UniformSampler(seed).sample(a, 64), [NStepReturns(n, 0.9)])
        bb = read(b, *UniformSampler(seed).sample(b, 64), [NStepReturns(n, 0.9)])
        assert ba.weights is None and bb.weights is None  # uniform draws: no weights
        assert ba.fields == bb.fields == {}
        for name in ba.__dataclass_fields__:
            if name not in ("weights", "fields"):
                assert getattr(ba, name).tobytes() == getattr(bb, name).tobytes(), name


def test_state_dict_round_trip_through_a_weights_only_checkpoint():
    """Saved with torch.save and read back with weights_only=True, the state restores a
    buffer whose contents, samples and n-step batches are identical; the restored buffer
    goes on taking writes exactly as the original does."""
    buf, rec = filled()
    assert (buf.size == buf.lane_capacity).any()  # wrapped lanes
    data = io.BytesIO()
    torch.save(buf.state_dict(), data)
    data.seek(0)
    state = torch.load(data, weights_only=True)
    other = ReplayBuffer(3, 50, (3,), (), np.int64)
    other.load_state_dict(state)
    assert_same_buffer(buf, other)
    rng = np.random.default_rng(8)
    for block in episodes(rng, 3, 10, next_step=True):
        valid = block.pop("valid")
        fields = [block[n] for n in ("obs", "act", "rew", "next_obs", "terminated",
                                     "truncated")]
        for b in (buf, other):
            b.extend(*fields, valid)
        for t in range(len(valid)):
            rec.record(*(f[t] for f in fields), valid[t])
    assert_same_buffer(buf, other)
    assert_holds(other, rec)


def test_state_dict_holds_only_what_is_stored():
    """A partly filled buffer's state costs what it holds, not its capacity: its tensor
    bytes are within a small margin of stored transitions x bytes per transition."""
    def state_bytes(buf):
        return sum(v.numel() * v.element_size() for v in buf.state_dict().values())

    capacity, obs_dim = 100_000, 11
    per = ReplayBuffer.bytes_per_transition((obs_dim,), np.float32, (3,), np.float32)
    sizes = []
    for steps in (500, 2000):
        buf = ReplayBuffer(2, capacity, (obs_dim,), (3,), np.float32)
        rng = np.random.default_rng(steps)
        cur = rng.normal(size=(2, obs_dim)).astype(np.float32)
        for _ in range(steps // 50):
            obs = np.empty((50, 2, obs_dim), np.float32)
            nxt = rng.normal(size=(50, 2, obs_dim)).astype(np.float32)
            for t in range(50):
                obs[t], cur = cur, nxt[t]
            buf.extend(obs, rng.normal(size=(50, 2, 3)), np.ones((50, 2)), nxt,
                       np.zeros((50, 2), bool), np.zeros((50, 2), bool))
        stored = len(buf)
        assert stored == 2 * steps
        size = state_bytes(buf)
        assert per * stored * 0.9 < size < per * stored * 1.1 + 1000
        assert size < 0.05 * buf.nominal_bytes()
        sizes.append(size)
    assert 3.5 < sizes[1] / sizes[0] < 4.5  # scales with what is stored


def test_load_state_dict_reads_the_previous_release_format():
    """A checkpoint of the previous release (full-capacity arrays, next_obs stored twice,
    its sampling rng) loads into exactly the same contents; the n-step batches then match
    those of a buffer filled directly."""
    buf, rec = filled(seed=9)
    other = ReplayBuffer(3, 50, (3,), (), np.int64)
    other.load_state_dict(rec.old_state())
    assert_holds(other, rec)
    assert_same_buffer(buf, other)
    # both formats describe the same transitions
    a, b = stored_transitions(rec.old_state()), stored_transitions(buf.state_dict())
    for name in (*FIELDS, "size"):
        assert a[name].tobytes() == b[name].tobytes(), name


def test_load_state_dict_refuses_a_state_that_does_not_fit():
    buf, rec = filled(seed=10)
    state = buf.state_dict()
    for kwargs, field in (({"lane_capacity": 40}, "lane_capacity"),
                          ({"num_lanes": 2}, "size"), ({"obs_shape": (4,)}, "obs")):
        args = {"num_lanes": 3, "lane_capacity": 50, "obs_shape": (3,), **kwargs}
        other = ReplayBuffer(args["num_lanes"], args["lane_capacity"], args["obs_shape"], (),
                             np.int64)
        with pytest.raises(ValueError, match=f"buffer {field}"):
            other.load_state_dict(state)
        with pytest.raises(ValueError, match="buffer (obs|rew|ptr)"):
            other.load_state_dict(rec.old_state())
    broken = dict(state, aside_rows=state["aside_rows"][:-1])
    with pytest.raises(ValueError, match="buffer asides"):
        buf.load_state_dict(broken)
    with pytest.raises(ValueError, match="no 'pending'"):
        buf.load_state_dict({k: v for k, v in state.items() if k != "pending"})
    bad_ptr = dict(state, ptr=state["ptr"] + 100)
    with pytest.raises(ValueError, match="buffer ptr"):
        buf.load_state_dict(bad_ptr)
    too_few = dict(state, added=state["size"] - 1)  # fewer written than stored
    with pytest.raises(ValueError, match="buffer added"):
        buf.load_state_dict(too_few)
    # every state is checked whole before anything is written: the buffer is as it was
    assert_holds(buf, rec)
    after = buf.state_dict()
    assert list(after) == list(state)
    assert all(after[k].numpy().tobytes() == state[k].numpy().tobytes() for k in state)


# --------------------------------------------------------------------------- memory
def _rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"),
                    reason="resident memory is read from /proc/self/status (Linux)")
def test_allocation_is_lazy():
    """A 1M-transition Humanoid-sized buffer (obs (348,), act (17,)) maps its pages when
    they are written, not when it is built: resident memory grows by far less than the
    nominal 1.47 GB, and by about what was written once transitions arrive."""
    before = _rss_bytes()
    buf = ReplayBuffer(1, 1_000_000, (348,), (17,), np.float32)
    built = _rss_bytes() - before
    assert buf.nominal_bytes() > 1.4e9
    assert built < 0.02 * buf.nominal_bytes(), built
    steps = 20_000
    obs = np.random.default_rng(0).normal(size=(steps + 1, 1, 348)).astype(np.float32)
    buf.extend(obs[:-1], np.zeros((steps, 1, 17), np.float32), np.zeros((steps, 1)),
               obs[1:], np.zeros((steps, 1), bool), np.zeros((steps, 1), bool))
    del obs
    written = buf.bytes_per_transition((348,), np.float32, (17,), np.float32) * steps
    assert built + 0.5 * written < _rss_bytes() - before < 0.1 * buf.nominal_bytes()
    assert written <= buf.resident_bytes() < written * 1.01 + 1e6
