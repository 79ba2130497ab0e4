"""UniformSampler: indices of stored transitions only, uniform over unequal lanes,
reproducible from a seed and from its saved state."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch

from rltrain.data.samplers import Sampler
from rltrain.data.samplers.uniform import UniformSampler
from rltrain.data.storage import ReplayBuffer


def buffer_with(sizes: list[int], capacity: int, steps: int | None = None) -> ReplayBuffer:
    """Lanes holding ``sizes`` transitions after ``steps`` writes each (wrapped lanes when
    steps > capacity); obs[..., 0] is (lane, count since the start) encoded as lane * 1e6
    + count, so a position can be checked against its write."""
    buf = ReplayBuffer(len(sizes), capacity, (1,), (), np.int64)
    steps = steps or max(sizes)
    writes = [s if s < capacity else steps for s in sizes]
    for t in range(steps):
        valid = np.array([t < w for w in writes])
        obs = (np.arange(len(sizes)) * 1e6 + t).astype(np.float32)[:, None]
        buf.add(obs, np.zeros(len(sizes), np.int64), np.zeros(len(sizes)), obs + 0.5,
                np.zeros(len(sizes), bool), np.zeros(len(sizes), bool), valid)
    assert list(buf.size) == [min(s, capacity) for s in sizes]
    return buf


def stored_ids(buf: ReplayBuffer) -> set[float]:
    ids = set()
    for lane in range(buf.num_lanes):
        pos = (buf.oldest()[lane] + np.arange(buf.size[lane])) % buf.lane_capacity
        ids |= set(buf.codecs["obs"].array[lane, pos, 0].tolist())
    return ids


def test_sample_is_uniform_over_transitions_across_unequal_lanes():
    """Each stored transition is equally likely, whatever the size of its lane: counts of a
    fixed-seed sample within 8% of the expectation (std about 1.6%)."""
    buf = buffer_with([1, 5, 0, 12], capacity=12)
    n = 72_000
    lanes, positions = UniformSampler(6).sample(buf, n)
    ids, counts = np.unique(buf.codecs["obs"].array[lanes, positions, 0], return_counts=True)
    assert len(ids) == 18 and set(ids.tolist()) == stored_ids(buf)
    expected = n / 18  # 4000 per transition, std ~ 62
    assert np.all(np.abs(counts - expected) < 0.08 * expected), counts
    np.testing.assert_allclose(np.bincount(lanes, minlength=4) / n, np.array([1, 5, 0, 12]) / 18,
                               atol=0.01)


@pytest.mark.parametrize("sizes", [[30, 30, 30], [30, 7, 30]], ids=["full", "unequal"])
def test_sample_returns_only_stored_transitions_after_wrap_around(sizes):
    """After wrap-around (writes past the capacity), every index is a stored transition,
    every stored one is drawn, and overwritten ones never are; the lanes' mapping for full
    lanes (quotient and remainder) and for the general case agree on the same draws."""
    buf = buffer_with(sizes, capacity=10, steps=37)
    lanes, positions = UniformSampler(1).sample(buf, 3000)
    assert (positions >= 0).all() and (positions < buf.size[lanes]).all()
    drawn = set(buf.codecs["obs"].array[lanes, positions, 0].tolist())
    assert drawn == stored_ids(buf)
    # the general mapping, from the same generator state
    rng = np.random.default_rng(1)
    flat = rng.integers(len(buf), size=3000)
    ends = np.cumsum(buf.size)
    ref_lanes = np.searchsorted(ends, flat, side="right")
    ref_pos = (buf.oldest()[ref_lanes] + flat - (ends - buf.size)[ref_lanes]) % 10
    np.testing.assert_array_equal(lanes, ref_lanes)
    np.testing.assert_array_equal(positions, ref_pos)


def test_sample_is_reproducible_with_a_seed():
    """The same seed gives the same indices; another seed gives different ones."""
    buf = buffer_with([16, 8, 3], capacity=16)

    def draws(seed):
        sampler = UniformSampler(seed)
        return [sampler.sample(buf, 32) for _ in range(3)]

    a, b, c = draws(11), draws(11), draws(12)
    for (la, pa), (lb, pb) in zip(a, b, strict=True):
        np.testing.assert_array_equal(la, lb)
        np.testing.assert_array_equal(pa, pb)
    assert any(not np.array_equal(pa, pc) or not np.array_equal(la, lc)
               for (la, pa), (lc, pc) in zip(a, c, strict=True))


def test_state_round_trip_continues_the_same_draws():
    """A sampler restored from its state (plain data: JSON and a weights-only torch
    checkpoint take it) draws what the original draws next."""
    buf = buffer_with([20, 20], capacity=20)
    sampler = UniformSampler(3)
    sampler.sample(buf, 100)
    state = sampler.state_dict()
    expected = [sampler.sample(buf, 64) for _ in range(3)]
    data = io.BytesIO()
    torch.save({"sampler": state}, data)
    data.seek(0)
    for restored_state in (json.loads(json.dumps(state)),
                           torch.load(data, weights_only=True)["sampler"]):
        other = UniformSampler(99)
        other.load_state_dict(restored_state)
        for lanes, positions in expected:
            got_lanes, got_positions = other.sample(buf, 64)
            np.testing.assert_array_equal(got_lanes, lanes)
            np.testing.assert_array_equal(got_positions, positions)


def test_empty_buffer_cannot_be_sampled():
    buf = ReplayBuffer(2, 4, (1,), (), np.int64)
    with pytest.raises(ValueError, match="empty"):
        UniformSampler(0).sample(buf, 1)


def test_uniform_sampler_has_the_sampler_interface():
    """What the trainer relies on: a prioritised sampler is another class with these."""
    sampler: Sampler = UniformSampler(0)
    for name in ("sample", "state_dict", "load_state_dict"):
        assert callable(getattr(sampler, name)) and hasattr(Sampler, name)
