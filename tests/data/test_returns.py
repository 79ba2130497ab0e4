"""GAE and n-step returns against plain per-transition loops and known values, and the
finished-episode mask Monte-Carlo returns learn from; n-step batches read from a buffer's
indices (the read path with the n-step transform) against hand computations, a
per-transition reference and the previous release's ``ReplayBuffer.sample`` maths."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rltrain.data.batch import Batch
from rltrain.data.reading import read
from rltrain.data.samplers.uniform import UniformSampler
from rltrain.data.storage import ReplayBuffer
from rltrain.data.transforms.finished import finished
from rltrain.data.transforms.gae import gae
from rltrain.data.transforms.nstep import NStepReturns, nstep_returns


def reference_gae(rew, values, next_values, terminated, truncated, valid, gamma, lam):
    """A_t = sum_k (gamma*lam)^k delta_{t+k}, summed forward from t up to and including
    the first done, and never past the last valid entry; 0 for invalid entries."""
    lanes, horizon = rew.shape
    adv = np.zeros((lanes, horizon))
    for lane in range(lanes):
        for t in range(horizon):
            if not valid[lane, t]:
                continue
            total = 0.0
            for k, u in enumerate(range(t, horizon)):
                if not valid[lane, u]:
                    break
                bootstrap = 0.0 if terminated[lane, u] else gamma * next_values[lane, u]
                delta = rew[lane, u] + bootstrap - values[lane, u]
                total += (gamma * lam) ** k * delta
                if terminated[lane, u] or truncated[lane, u]:
                    break
            adv[lane, t] = total
    return adv


def random_rollout(rng, lanes=5, horizon=24):
    rew = rng.normal(size=(lanes, horizon)).astype(np.float32)
    values = rng.normal(size=(lanes, horizon)).astype(np.float32)
    next_values = rng.normal(size=(lanes, horizon)).astype(np.float32)
    terminated = rng.random((lanes, horizon)) < 0.1
    truncated = (rng.random((lanes, horizon)) < 0.1) & ~terminated
    # lanes of different lengths: a full one, an empty one, random others
    lengths = np.concatenate([[horizon, 0], rng.integers(1, horizon, size=lanes - 2)])
    valid = np.arange(horizon)[None, :] < lengths[:, None]
    return rew, values, next_values, terminated, truncated, valid


@pytest.mark.parametrize(("gamma", "lam"), [(0.99, 0.95), (0.9, 1.0), (0.8, 0.0), (1.0, 0.5)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gae_matches_reference_loop(gamma, lam, seed):
    """Random rewards, values, terminations, truncations and lane lengths."""
    rng = np.random.default_rng(seed)
    rew, values, next_values, term, trunc, valid = random_rollout(rng)
    assert term.any() and trunc.any()
    adv = gae(rew, values, next_values, term, term | trunc, valid, gamma, lam)
    expected = reference_gae(rew, values, next_values, term, trunc, valid, gamma, lam)
    assert adv.shape == rew.shape
    np.testing.assert_allclose(adv, expected, rtol=1e-5, atol=1e-5)
    assert (adv[~valid] == 0).all()


def test_gae_invalid_tail_does_not_leak_into_valid_entries():
    """Garbage in the unused slots of a lane changes nothing."""
    rng = np.random.default_rng(3)
    rew, values, next_values, term, trunc, valid = random_rollout(rng)
    clean = gae(rew, values, next_values, term, term | trunc, valid, 0.99, 0.95)
    noisy = [a.copy() for a in (rew, values, next_values)]
    for a in noisy:
        a[~valid] = 1e6
    dirty = gae(*noisy, term, term | trunc, valid, 0.99, 0.95)
    np.testing.assert_allclose(dirty, clean, rtol=1e-6)


def test_gae_is_zero_with_true_values_of_constant_reward():
    """Reward 1 forever: V = 1 / (1 - gamma) everywhere, so every advantage is 0, also at
    truncations, which bootstrap from next_values."""
    gamma, lam = 0.9, 0.95
    lanes, horizon = 3, 50
    true_v = 1.0 / (1.0 - gamma)
    rew = np.ones((lanes, horizon), np.float32)
    values = np.full((lanes, horizon), true_v, np.float32)
    valid = np.ones((lanes, horizon), bool)
    no_term = np.zeros((lanes, horizon), bool)
    truncated = np.zeros((lanes, horizon), bool)
    truncated[:, 7::13] = True
    for dones in (no_term, truncated):
        adv = gae(rew, values, values.copy(), no_term, dones, valid, gamma, lam)
        np.testing.assert_allclose(adv, 0.0, atol=1e-4)
    # treating those truncations as terminations would be wrong by -gamma * V
    wrong = gae(rew, values, values.copy(), truncated, truncated, valid, gamma, lam)
    np.testing.assert_allclose(wrong[truncated], 1.0 - true_v, rtol=1e-5)


def test_gae_is_zero_with_true_values_of_terminating_episodes():
    """Reward 1 per step in episodes of length L that terminate: V(s_t) = (1 - gamma^(L-t)) /
    (1 - gamma); the value after termination is ignored."""
    gamma, lam, length, episodes = 0.95, 0.9, 6, 4
    t = np.tile(np.arange(length), episodes)[None, :]
    values = ((1 - gamma ** (length - t)) / (1 - gamma)).astype(np.float32)
    next_values = ((1 - gamma ** (length - t - 1)) / (1 - gamma)).astype(np.float32)
    terminated = t == length - 1
    next_values[terminated] = 1234.0  # must be ignored
    rew = np.ones_like(values)
    valid = np.ones_like(terminated)
    adv = gae(rew, values, next_values, terminated, terminated, valid, gamma, lam)
    np.testing.assert_allclose(adv, 0.0, atol=1e-4)


def test_gae_truncation_bootstraps_from_next_values():
    """Zero rewards and values except V(final obs) = 5 at a truncation: the advantage is
    gamma*5 there, decays by gamma*lam before it, and stops at the episode boundary."""
    gamma, lam = 0.9, 0.8
    z = np.zeros((1, 6), np.float32)
    next_values = z.copy()
    next_values[0, 3] = 5.0
    truncated = np.zeros((1, 6), bool)
    truncated[0, 3] = True
    adv = gae(z, z, next_values, np.zeros_like(truncated), truncated, np.ones_like(truncated),
              gamma, lam)
    g5 = gamma * 5.0
    np.testing.assert_allclose(
        adv[0], [(gamma * lam) ** 3 * g5, (gamma * lam) ** 2 * g5, gamma * lam * g5, g5, 0, 0],
        rtol=1e-6)
    # the same flag as a termination drops the bootstrap
    adv_term = gae(z, z, next_values, truncated, truncated, np.ones_like(truncated), gamma, lam)
    np.testing.assert_allclose(adv_term, 0.0)


# --------------------------------------------------------------------------- n-step
def test_finished_marks_the_slots_whose_episode_ends_in_the_lane():
    dones = np.array([[0, 1, 0, 0, 1, 0, 0],
                      [0, 0, 0, 0, 0, 0, 0],
                      [1, 0, 0, 1, 0, 0, 0]], bool)
    valid = np.ones((3, 7), bool)
    valid[2, 5:] = False
    want = np.array([[1, 1, 1, 1, 1, 0, 0],
                     [0, 0, 0, 0, 0, 0, 0],
                     [1, 1, 1, 1, 0, 0, 0]], bool)
    np.testing.assert_array_equal(finished(dones, valid), want)


def reference_nstep(rew, terminated, dones, valid, gamma):
    batch, n = rew.shape
    returns, lasts, discounts = np.zeros(batch), np.zeros(batch, int), np.zeros(batch)
    for b in range(batch):
        total, last = 0.0, 0
        for k in range(n):
            if k > 0 and (dones[b, k - 1] or not valid[b, k]):
                break
            total += gamma**k * rew[b, k]
            last = k
        returns[b], lasts[b] = total, last
        discounts[b] = 0.0 if terminated[b, last] else gamma ** (last + 1)
    return returns, lasts, discounts


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("seed", [0, 1])
def test_nstep_returns_match_reference_loop(n, seed):
    """Random windows with dones, terminations among them, and uncollected tails."""
    rng = np.random.default_rng(seed)
    batch, gamma = 200, 0.93
    rew = rng.normal(size=(batch, n)).astype(np.float32)
    dones = rng.random((batch, n)) < 0.2
    terminated = dones & (rng.random((batch, n)) < 0.5)
    valid = rng.random((batch, n)) < 0.85
    returns, last, discount = nstep_returns(rew, terminated, dones, valid, gamma)
    exp_ret, exp_last, exp_disc = reference_nstep(rew, terminated, dones, valid, gamma)
    np.testing.assert_allclose(returns, exp_ret, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(last, exp_last)
    np.testing.assert_allclose(discount, exp_disc, rtol=1e-6)
    if n > 2:
        # the cases are all present: full windows, cut by a done, cut by an invalid entry
        assert (exp_last == n - 1).any() and (exp_last < n - 1).any()


def test_nstep_returns_with_n_1_is_one_step_td():
    """n = 1: the reward itself; discount gamma, or 0 only for terminations (a truncated
    transition keeps its bootstrap); the window's first entry is used even if not valid."""
    rng = np.random.default_rng(4)
    rew = rng.normal(size=(50, 1)).astype(np.float32)
    dones = rng.random((50, 1)) < 0.5
    terminated = dones & (rng.random((50, 1)) < 0.5)
    returns, last, discount = nstep_returns(rew, terminated, dones,
                                            np.zeros((50, 1), bool), 0.97)
    np.testing.assert_allclose(returns, rew[:, 0])
    np.testing.assert_array_equal(last, 0)
    np.testing.assert_allclose(discount, np.where(terminated[:, 0], 0.0, 0.97), rtol=1e-6)


def test_nstep_returns_hand_example():
    """gamma 0.5, rewards 1, 2, 4: full window 3 (bootstrap 1/8); a truncation after the
    first step gives 1 + 1 (bootstrap 1/4); a termination there gives 2 with no bootstrap;
    an uncollected third entry gives 2 with bootstrap 1/4."""
    rew = np.array([[1, 2, 4]] * 4, np.float32)
    dones = np.array([[0, 0, 0], [0, 1, 0], [0, 1, 0], [0, 0, 0]], bool)
    terminated = np.array([[0, 0, 0], [0, 0, 0], [0, 1, 0], [0, 0, 0]], bool)
    valid = np.array([[1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 0]], bool)
    returns, last, discount = nstep_returns(rew, terminated, dones, valid, 0.5)
    np.testing.assert_allclose(returns, [3.0, 2.0, 2.0, 2.0])
    np.testing.assert_array_equal(last, [2, 1, 1, 1])
    np.testing.assert_allclose(discount, [0.125, 0.25, 0.0, 0.25])


# --------------------------------------------------------------------------- n-step batches
def _single_lane(rewards, terminated, truncated, capacity=None):
    """One lane: transition i has obs i and next_obs 100 + i (so every next observation is
    kept aside, and the bootstrap transition can be read off the batch)."""
    buf = ReplayBuffer(1, capacity or len(rewards), (1,), (), np.int64)
    for i, r in enumerate(rewards):
        buf.add(np.array([[i]], np.float32), np.array([0]), np.array([r], np.float32),
                np.array([[100 + i]], np.float32), np.array([terminated[i]]),
                np.array([truncated[i]]))
    return buf


def _every_window(buf: ReplayBuffer, n: int, gamma: float) -> dict[int, tuple]:
    """The n-step batch of every stored transition of lane 0, by start (its obs):
    (return, discount, next_obs)."""
    pos = (buf.oldest()[0] + np.arange(buf.size[0])) % buf.lane_capacity
    batch = read(buf, np.zeros(len(pos), np.int64), pos, [NStepReturns(n, gamma)])
    assert isinstance(batch, Batch)
    np.testing.assert_array_equal(batch.positions, pos)
    return {int(o): (float(r), float(d), float(x)) for o, r, d, x in zip(
        batch.obs[:, 0], batch.rew, batch.discount, batch.next_obs[:, 0], strict=True)}


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
def test_nstep_batch_matches_hand_computation(terminated, truncated, expected, capacity):
    """rewards 1, 2, 4, 8, 16 with gamma 0.5 and n 3: every window computed by hand."""
    buf = _single_lane([1, 2, 4, 8, 16], [bool(x) for x in terminated],
                       [bool(x) for x in truncated], capacity=capacity)
    got = _every_window(buf, 3, 0.5)
    assert set(got) == set(expected)
    for start, (ret, disc, nxt) in expected.items():
        assert got[start] == pytest.approx((ret, disc, nxt)), start


def test_nstep_batch_with_n_1_is_one_step_td():
    """n = 1: the stored reward; discount gamma, or 0 only for terminations (a truncated
    transition keeps its bootstrap); the transition's own next observation."""
    rewards = [1, 2, 4, 8, 16]
    buf = _single_lane(rewards, [0, 1, 0, 0, 0], [0, 0, 0, 1, 0], capacity=8)
    got = _every_window(buf, 1, 0.9)
    assert got == {i: (r, pytest.approx(0.0 if i == 1 else 0.9), 100 + i)
                   for i, r in enumerate(rewards)}


def test_nstep_window_follows_time_order_across_wrap_around():
    """In a wrapped circular lane, windows continue in time order (not array order) and
    stop at the newest entry."""
    # 7 transitions into 4 slots: the lane keeps indices 3, 4, 5, 6 at positions 3, 0, 1, 2
    buf = _single_lane([1, 2, 4, 8, 16, 32, 64], [False] * 7, [False] * 7, capacity=4)
    got = _every_window(buf, 3, 0.5)
    assert set(got) == {3, 4, 5, 6}
    assert got[3] == pytest.approx((8 + 8 + 8, 0.125, 105))
    assert got[4] == pytest.approx((16 + 16 + 16, 0.125, 106))
    assert got[5] == pytest.approx((32 + 32, 0.25, 106))
    assert got[6] == pytest.approx((64, 0.5, 106))


def test_nstep_returns_refuse_n_below_1():
    with pytest.raises(ValueError, match="n >= 1"):
        NStepReturns(0, 0.9)


class Lanes:
    """Random steps written to a buffer and kept per lane (the reference), with consistent
    episodes: a next observation is the next step's observation unless the episode ended."""

    def __init__(self, buffer: ReplayBuffer, rng: np.random.Generator) -> None:
        self.buffer, self.rng = buffer, rng
        m = buffer.num_lanes
        self.lanes: list[list[dict]] = [[] for _ in range(m)]
        self.cur = rng.normal(size=(m, 2)).astype(np.float32)

    def block(self, steps: int, p_valid: float | list[float], p_end: float) -> None:
        m, rng = self.buffer.num_lanes, self.rng
        cols = {k: [] for k in ("obs", "act", "rew", "next_obs", "terminated", "truncated",
                                "valid")}
        for _ in range(steps):
            valid = rng.random(m) < np.asarray(p_valid)
            nxt = rng.normal(size=(m, 2)).astype(np.float32)
            term, trunc = rng.random(m) < p_end, rng.random(m) < p_end
            for name, value in (("obs", self.cur), ("act", rng.integers(0, 3, m)),
                                ("rew", rng.normal(size=m).astype(np.float32)),
                                ("next_obs", nxt), ("terminated", term),
                                ("truncated", trunc), ("valid", valid)):
                cols[name].append(value)
            for lane in np.flatnonzero(valid):
                self.lanes[lane].append({k: v[-1][lane] for k, v in cols.items()})
            reset = rng.normal(size=(m, 2)).astype(np.float32)
            self.cur = np.where(valid[:, None], np.where((term | trunc)[:, None], reset, nxt),
                                self.cur)
        arrays = [np.stack(v) for v in cols.values()]
        self.buffer.extend(*arrays)

    def stored(self, lane: int) -> list[dict]:
        return self.lanes[lane][-self.buffer.lane_capacity:]

    def previous_release_sample(self, seed: int, batch_size: int, n: int, gamma: float
                                ) -> Batch:
        """What the previous release's ``ReplayBuffer(..., n_step=n, gamma=gamma,
        seed=seed).sample(batch_size)`` returned: its draws and its maths over full-capacity
        arrays that store every next observation (transition j of a lane at slot j % cap)."""
        b = self.buffer
        m, cap = b.num_lanes, b.lane_capacity
        arr = {k: np.zeros((m, cap, *s), d) for k, s, d in (
            ("obs", (2,), np.float32), ("next_obs", (2,), np.float32), ("act", (), np.int64),
            ("rew", (), np.float32), ("terminated", (), bool), ("truncated", (), bool))}
        ptr, size = np.zeros(m, np.int64), np.zeros(m, np.int64)
        for lane, written in enumerate(self.lanes):
            for j, tr in enumerate(written):
                for k, a in arr.items():
                    a[lane, j % cap] = tr[k]
            size[lane], ptr[lane] = min(len(written), cap), len(written) % cap
        rng = np.random.default_rng(seed)
        ends = np.cumsum(size)
        flat = rng.integers(int(size.sum()), size=batch_size)
        lanes = np.searchsorted(ends, flat, side="right")
        offsets = flat - (ends - size)[lanes]
        oldest = np.where(size == cap, ptr, 0)[lanes]
        positions = (oldest + offsets) % cap
        if n == 1:
            ret = arr["rew"][lanes, positions]
            disc = np.where(arr["terminated"][lanes, positions], 0.0, gamma).astype(np.float32)
            boot = positions
        else:
            window = offsets[:, None] + np.arange(n)
            wpos = (oldest[:, None] + window) % cap
            col = lanes[:, None]
            term = arr["terminated"][col, wpos]
            ret, last, disc = nstep_returns(arr["rew"][col, wpos], term,
                                            term | arr["truncated"][col, wpos],
                                            window < size[lanes][:, None], gamma)
            boot = wpos[np.arange(batch_size), last]
        return Batch(obs=arr["obs"][lanes, positions], act=arr["act"][lanes, positions],
                     rew=ret, next_obs=arr["next_obs"][lanes, boot], discount=disc,
                     lanes=lanes, positions=positions)


def reference_window(seq: list[dict], i: int, n: int, gamma: float):
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
    return ret, 0.0 if last["terminated"] else gamma ** (k + 1), last["next_obs"]


@pytest.mark.parametrize("n", [1, 2, 4])
def test_nstep_batch_matches_reference_on_random_lanes(n):
    """Random rewards, dones and masks over wrapped lanes of unequal size: every sampled
    window matches the per-transition reference."""
    gamma = 0.9
    buf = ReplayBuffer(3, 10, (2,), (), np.int64)
    lanes = Lanes(buf, np.random.default_rng(10 + n))
    for _ in range(5):
        lanes.block(5, p_valid=[1.0, 0.6, 0.1], p_end=0.1)
    assert (buf.size == 10).any() and (buf.size < 10).any()
    index = {}
    for lane in range(3):
        for i, t in enumerate(lanes.stored(lane)):
            index[t["obs"].tobytes()] = (lane, i)
    batch = read(buf, *UniformSampler(3).sample(buf, 2000), [NStepReturns(n, gamma)])
    assert {o.tobytes() for o in batch.obs} == set(index)
    for row in range(len(batch.rew)):
        lane, i = index[batch.obs[row].tobytes()]
        ret, disc, nxt = reference_window(lanes.stored(lane), i, n, gamma)
        assert batch.lanes[row] == lane
        assert batch.rew[row] == pytest.approx(ret, rel=1e-5, abs=1e-5)
        assert batch.discount[row] == pytest.approx(disc, rel=1e-6)
        assert nxt.tobytes() == batch.next_obs[row].tobytes()
        assert batch.act[row] == lanes.stored(lane)[i]["act"]


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("seed", [0, 5])
def test_sampler_and_nstep_batch_equal_the_previous_release_sample(n, seed):
    """For the same seed, UniformSampler then nstep_batch give, field by field and bit for
    bit, the Batch that the previous release's ReplayBuffer.sample gave: over episodes,
    masked steps, unequal lanes and wrap-around, batch after batch."""
    buf = ReplayBuffer(4, 16, (2,), (), np.int64)
    lanes = Lanes(buf, np.random.default_rng(seed))
    for block in range(8):
        lanes.block(7, p_valid=[1.0, 0.8, 0.5, 0.1], p_end=0.08)
        want = lanes.previous_release_sample(seed + block, 256, n, 0.97)
        got = read(buf, *UniformSampler(seed + block).sample(buf, 256), [NStepReturns(n, 0.97)])
        for field in dataclasses.fields(Batch):
            x, y = getattr(want, field.name), getattr(got, field.name)
            if field.name == "weights":  # uniform draws carry none
                assert x is None and y is None
                continue
            if field.name == "fields":  # nothing declared beside a transition's
                assert x == y == {}
                continue
            assert x.dtype == y.dtype and x.shape == y.shape, field.name
            assert x.tobytes() == y.tobytes(), (block, field.name)
    assert (buf.size == 16).any() and (buf.size < 16).any()
