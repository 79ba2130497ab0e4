"""The episode index (where each stored transition's episode begins and ends) against a plain
walk over the stored flags, and the episode-uniform sampler built on it: episodes equally
likely whatever their length, transitions equally likely within one, a seeded stream that a
checkpoint continues, and a run that resumes exactly."""

from __future__ import annotations

import io
import json
import logging
import shutil

import numpy as np
import pytest
import torch

from conftest import learning_records, refusal, resume_in_process, run_in_process
from rltrain.config.schemas import ConfigError, ReplayBufferConfig
from rltrain.data.episodes import EpisodeIndex
from rltrain.data.samplers import SAMPLERS, check_sampler, make_sampler
from rltrain.data.samplers.episodes import EpisodeSampler
from rltrain.data.samplers.uniform import UniformSampler
from rltrain.data.storage import ReplayBuffer
from rltrain.rundir.checkpoint import load_checkpoint


# ------------------------------------------------------------------------------ helpers
def write(buf: ReplayBuffer, terminated: np.ndarray, truncated: np.ndarray | None = None,
          valid: np.ndarray | None = None) -> None:
    """A block of ``(T, lanes)`` steps whose only content that matters is its end flags."""
    steps, lanes = terminated.shape
    obs = np.zeros((steps, lanes, 1), np.float32)
    zeros = np.zeros((steps, lanes))
    buf.extend(obs, zeros.astype(np.int64), zeros, obs, terminated.astype(bool),
               (np.zeros_like(terminated) if truncated is None else truncated).astype(bool),
               valid)


def random_block(buf: ReplayBuffer, rng: np.random.Generator, steps: int,
                 masked: bool) -> None:
    shape = (steps, buf.num_lanes)
    write(buf, rng.random(shape) < 0.15, rng.random(shape) < 0.05,
          rng.random(shape) < 0.6 if masked else None)


def reference(buf: ReplayBuffer) -> tuple[dict, list]:
    """Walking each lane's stored transitions oldest first, one at a time: each stored
    ``(lane, slot)``'s ``(first, last, length, offset)``, and the stored episodes as
    ``(lane, first, length)``, lane after lane, oldest first."""
    done = buf.codecs["terminated"].array | buf.codecs["truncated"].array
    cap = buf.lane_capacity
    spans, episodes = {}, []
    for lane in range(buf.num_lanes):
        oldest, size = int(buf.oldest()[lane]), int(buf.size[lane])
        current: list[int] = []
        for t in range(size):
            slot = (oldest + t) % cap
            current.append(slot)
            if done[lane, slot] or t == size - 1:
                for offset, s in enumerate(current):
                    spans[lane, s] = (current[0], current[-1], len(current), offset)
                episodes.append((lane, current[0], len(current)))
                current = []
    return spans, episodes


def assert_matches_reference(index: EpisodeIndex) -> None:
    spans, episodes = reference(index.buffer)
    keys = sorted(spans)
    lanes = np.array([k[0] for k in keys], dtype=np.int64)
    slots = np.array([k[1] for k in keys], dtype=np.int64)
    got = index.spans(lanes, slots)
    want = np.array([spans[k] for k in keys], dtype=np.int64).reshape(-1, 4)
    np.testing.assert_array_equal(np.stack(got, axis=1).reshape(-1, 4), want)
    listed = index.episodes()
    assert list(zip(listed.lanes.tolist(), listed.first.tolist(), listed.length.tolist(),
                    strict=True)) == episodes
    np.testing.assert_array_equal(index.counts(), np.bincount(
        [e[0] for e in episodes], minlength=index.buffer.num_lanes))


def with_episodes(lengths_per_lane: list[list[int]], capacity: int,
                  open_last: bool = False) -> ReplayBuffer:
    """A buffer whose lanes hold episodes of the given lengths, in order (the last one of
    each lane left in flight when ``open_last``)."""
    buf = ReplayBuffer(len(lengths_per_lane), capacity, (1,), (), np.int64)
    steps = max(sum(lengths) for lengths in lengths_per_lane)
    term = np.zeros((steps, buf.num_lanes), bool)
    valid = np.zeros((steps, buf.num_lanes), bool)
    for lane, lengths in enumerate(lengths_per_lane):
        ends = np.cumsum(lengths) - 1
        term[ends[:-1] if open_last else ends, lane] = True
        valid[: sum(lengths), lane] = True
    write(buf, term, valid=valid)
    return buf


# ------------------------------------------------------------------------------ the index
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("masked", [False, True], ids=["lockstep", "masked"])
def test_index_follows_random_writes_as_a_plain_walk_does(seed, masked):
    """Blocks of every size (one step; more than a lane holds, which wraps the ring past
    what the index saw), episodes ending by termination or truncation, lanes writing
    different counts: after each block, the index kept across them and a fresh one both
    give what a walk over the stored flags gives."""
    rng = np.random.default_rng(seed)
    buf = ReplayBuffer(3, 11, (1,), (), np.int64)
    kept = EpisodeIndex(buf)
    for _ in range(40):
        random_block(buf, rng, int(rng.choice([1, 2, 3, 7, 13, 30])), masked)
        assert_matches_reference(kept)
        assert_matches_reference(EpisodeIndex(buf))
    assert (buf.added > 3 * buf.lane_capacity).all()  # the rings wrapped several times


def test_an_append_only_buffer_is_indexed_too():
    rng = np.random.default_rng(5)
    buf = ReplayBuffer(2, 200, (1,), (), np.int64, circular=False)
    index = EpisodeIndex(buf)
    for steps in (1, 9, 30, 4):
        random_block(buf, rng, steps, masked=True)
        assert_matches_reference(index)


def test_an_episode_in_flight_ends_at_the_newest_stored_transition():
    """Never beyond it: each write moves the end of the episode in flight along, and once
    it ends there, it stays there when the next one begins."""
    buf = ReplayBuffer(1, 8, (1,), (), np.int64)
    index = EpisodeIndex(buf)
    for step in range(5):
        write(buf, np.zeros((1, 1), bool))
        spans = index.spans(np.zeros(step + 1, np.int64), np.arange(step + 1))
        assert spans.first.tolist() == [0] * (step + 1)
        assert spans.last.tolist() == [step] * (step + 1)
        assert spans.offset.tolist() == list(range(step + 1))
    write(buf, np.ones((1, 1), bool))  # slot 5 ends it
    write(buf, np.zeros((2, 1), bool))  # slots 6, 7: the next, in flight
    spans = index.spans(np.zeros(8, np.int64), np.arange(8))
    assert spans.first.tolist() == [0] * 6 + [6, 6]
    assert spans.last.tolist() == [5] * 6 + [7, 7]
    assert index.counts().tolist() == [2]


def test_an_episode_cut_by_the_ring_begins_at_the_oldest_stored_transition():
    """A 4-slot lane after an episode of 6 and one of 3 (in flight): the first episode's
    two newest transitions are left, from the oldest slot; the ring's slots wrap inside the
    episode in flight."""
    buf = with_episodes([[6, 3]], capacity=4, open_last=True)
    # writes 0..8 in slots 0,1,2,3,0,1,2,3,0: stored are writes 5..8, slots 1,2,3,0
    assert buf.oldest().tolist() == [1]
    index = EpisodeIndex(buf)
    assert index.episodes().first.tolist() == [1, 2] and index.episodes().length.tolist() == [1, 3]
    spans = index.spans(np.zeros(4, np.int64), np.array([1, 2, 3, 0]))
    assert spans.first.tolist() == [1, 2, 2, 2] and spans.last.tolist() == [1, 0, 0, 0]
    assert spans.length.tolist() == [1, 3, 3, 3] and spans.offset.tolist() == [0, 0, 1, 2]


def test_a_cleared_and_refilled_buffer_is_indexed_anew():
    """After a clear, more is written than the index saw before it: the write counts alone
    would read it as a continuation; the buffer's clear count says otherwise."""
    rng = np.random.default_rng(3)
    buf = ReplayBuffer(2, 9, (1,), (), np.int64)
    index = EpisodeIndex(buf)
    random_block(buf, rng, 5, masked=False)
    assert_matches_reference(index)
    buf.clear()
    random_block(buf, rng, 7, masked=True)
    assert_matches_reference(index)


@pytest.mark.parametrize("old_format", [False, True], ids=["state", "state without added"])
def test_a_restored_buffer_is_indexed_anew(old_format):
    """A buffer that loads another's state (a resume) is indexed from what it now holds;
    a state from before the write count (``added`` as stored, not as written) still maps
    each episode to its slots."""
    rng = np.random.default_rng(4)
    source = ReplayBuffer(3, 10, (1,), (), np.int64)
    for _ in range(6):
        random_block(source, rng, 7, masked=True)
    state = source.state_dict()
    if old_format:
        del state["added"]
    buf = ReplayBuffer(3, 10, (1,), (), np.int64)
    index = EpisodeIndex(buf)
    random_block(buf, rng, 4, masked=False)
    assert_matches_reference(index)
    buf.load_state_dict(state)
    assert_matches_reference(index)
    random_block(buf, rng, 3, masked=True)
    assert_matches_reference(index)


# ------------------------------------------------------------------------------ the sampler
LENGTHS = [[1, 2, 5, 30], [3, 60, 1]]


def episode_shares(buf: ReplayBuffer, lanes: np.ndarray, positions: np.ndarray
                   ) -> np.ndarray:
    """How many draws fell in each stored episode (in :meth:`EpisodeIndex.episodes`' order)."""
    index = EpisodeIndex(buf)
    spans = index.spans(lanes, positions)
    listed = index.episodes()
    keys = listed.lanes * buf.lane_capacity + listed.first
    found = np.searchsorted(keys, lanes * buf.lane_capacity + spans.first)
    assert (keys[found] == lanes * buf.lane_capacity + spans.first).all()
    return np.bincount(found, minlength=len(keys))


def chi_square(counts: np.ndarray) -> tuple[float, float]:
    """Pearson's statistic against equal shares, and a bound it exceeds with a probability
    far below 0.001 when the shares are equal (its mean plus 5 of its standard deviations)."""
    expected = counts.sum() / len(counts)
    dof = len(counts) - 1
    return float(((counts - expected) ** 2 / expected).sum()), dof + 5 * np.sqrt(2 * dof)


def test_every_episode_is_equally_likely_whatever_its_length():
    """7 episodes of 1 to 60 transitions (one in flight) in two lanes: each drawn about a
    seventh of the time. Uniform sampling, which weighs them by length, fails the same
    test."""
    buf = with_episodes(LENGTHS, capacity=80, open_last=True)
    n = 70_000
    lanes, positions = EpisodeSampler(7).sample(buf, n)
    stat, bound = chi_square(episode_shares(buf, lanes, positions))
    assert stat < bound, (stat, bound)
    uniform = episode_shares(buf, *UniformSampler(7).sample(buf, n))
    assert chi_square(uniform)[0] > 100 * bound


def test_transitions_are_equally_likely_within_an_episode():
    buf = with_episodes(LENGTHS, capacity=80)
    lanes, positions = EpisodeSampler(8).sample(buf, 140_000)
    spans = EpisodeIndex(buf).spans(lanes, positions)
    for length in (5, 30, 60):
        chosen = spans.length == length
        counts = np.bincount(spans.offset[chosen], minlength=length)
        assert len(counts) == length
        stat, bound = chi_square(counts)
        assert stat < bound, (length, stat, bound)


@pytest.mark.parametrize("masked", [False, True], ids=["lockstep", "masked"])
def test_only_stored_transitions_are_drawn_and_every_one_is(masked):
    rng = np.random.default_rng(9)
    buf = ReplayBuffer(3, 12, (1,), (), np.int64)
    sampler = EpisodeSampler(2)
    for _ in range(10):
        random_block(buf, rng, 9, masked)
        spans, _ = reference(buf)
        lanes, positions = sampler.sample(buf, 4000)
        drawn = set(zip(lanes.tolist(), positions.tolist(), strict=True))
        assert drawn == set(spans)


def test_the_same_seed_draws_the_same_and_another_does_not():
    buf = with_episodes(LENGTHS, capacity=80, open_last=True)

    def draws(seed):
        sampler = EpisodeSampler(seed)
        return np.concatenate([np.stack(sampler.sample(buf, 32)) for _ in range(3)], axis=1)

    np.testing.assert_array_equal(draws(11), draws(11))
    assert not np.array_equal(draws(11), draws(12))


def test_state_round_trip_continues_the_same_draws():
    """Plain data (JSON and a weights-only torch checkpoint take it); the restored sampler,
    whose index is built anew from the buffer, draws what the original draws next, and
    both go on alike as the buffer grows."""
    rng = np.random.default_rng(1)
    buf = ReplayBuffer(2, 15, (1,), (), np.int64)
    random_block(buf, rng, 20, masked=True)
    sampler = EpisodeSampler(3)
    sampler.sample(buf, 100)
    state = sampler.state_dict()
    data = io.BytesIO()
    torch.save({"sampler": state}, data)
    data.seek(0)
    restored = []
    for plain in (json.loads(json.dumps(state)), torch.load(data, weights_only=True)["sampler"]):
        other = EpisodeSampler(99)
        other.load_state_dict(plain)
        restored.append(other)
    for _ in range(3):
        random_block(buf, rng, 4, masked=True)
        want = np.stack(sampler.sample(buf, 64))
        for other in restored:
            np.testing.assert_array_equal(np.stack(other.sample(buf, 64)), want)


def test_an_empty_buffer_cannot_be_sampled():
    with pytest.raises(ValueError, match="empty"):
        EpisodeSampler(0).sample(ReplayBuffer(2, 4, (1,), (), np.int64), 1)


def test_a_sampler_given_another_buffer_indexes_that_one():
    sampler = EpisodeSampler(0)
    first = with_episodes([[3, 3]], capacity=10)
    sampler.sample(first, 8)
    second = with_episodes([[2], [4]], capacity=10)
    lanes, positions = sampler.sample(second, 200)
    assert set(zip(lanes.tolist(), positions.tolist(), strict=True)) == set(reference(second)[0])


# ------------------------------------------------------------------------------ settings, runs
def test_the_sampler_is_registered_and_named_where_a_wrong_one_is_refused():
    assert SAMPLERS["episodes"].title == "episode-uniform sampling"
    assert not SAMPLERS["episodes"].weighs
    assert isinstance(make_sampler(ReplayBufferConfig(sampler="episodes"), 0), EpisodeSampler)
    with pytest.raises(ConfigError, match=r"buffer.sampler='bogus' is not a sampler; use .*"
                                          r"episodes"):
        check_sampler(ReplayBufferConfig(sampler="bogus"))
    with pytest.raises(ConfigError, match="buffer.priority_alpha is for prioritised replay, "
                                          "and this run uses episode-uniform sampling"):
        check_sampler(ReplayBufferConfig(sampler="episodes", priority_alpha=0.5))


def test_an_on_policy_run_refuses_it(tmp_path):
    refused = refusal(tmp_path / "run", "experiment=smoke", "algo=ppo",
                      "buffer.sampler=episodes")
    assert "buffer.sampler=episodes replays what an online off-policy run collected" in refused


@pytest.mark.parametrize("algo", ["dqn", "sac"])
def test_a_run_resumed_from_its_first_epoch_equals_an_unbroken_one(tmp_path, caplog, algo):
    """A run stopped after epoch 1 (its checkpoint then, with the buffer and the sampler's
    stream; episodes in flight in it) and resumed: exact, and its records are the unbroken
    run's (the index is rebuilt from the restored buffer)."""
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    args = ["experiment=smoke", f"algo={algo}", "buffer.sampler=episodes",
            "trainer.max_epochs=2", "seed=1", "logger.tensorboard=false"]
    if algo == "sac":
        args.append("env=pendulum")
    run_in_process(full, *args)
    shutil.copytree(full, resumed)
    checkpoints = resumed / "checkpoints"
    (first,) = checkpoints.glob("ckpt_*_00001.pt")
    state = load_checkpoint(first)
    assert state["trainer"]["epoch"] == 1
    assert set(state["trainer"]["storage"]["sampler"]) == {"rng"}
    for path in checkpoints.glob("*.pt"):
        if path != first:
            path.unlink()
    first.rename(checkpoints / "last.pt")

    caplog.set_level(logging.INFO)
    assert resume_in_process(resumed) == (0, [])
    assert any(m.startswith("resumed at epoch 1") and m.endswith("(exact)")
               for m in caplog.messages), caplog.messages
    assert learning_records(resumed) == learning_records(full)
    if algo == "dqn":  # the sampler was the one used: uniform draws learn otherwise
        uniform = tmp_path / "uniform"
        run_in_process(uniform, *(a for a in args if not a.startswith("buffer.")))
        assert learning_records(uniform) != learning_records(full)
