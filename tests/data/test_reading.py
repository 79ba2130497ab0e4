"""The read path (rltrain.data.reading): sampler -> gather -> transforms -> batch, one way
through; the sampler and transform registries, and a new sampler and a new transform added
from outside the package, as an extension would add them; on-policy, the whole rollout
through its transforms (GAE, finished episodes)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from conftest import SHORT_DQN, read_jsonl, run_in_process
from rltrain.config.schemas import ConfigError, ReplayBufferConfig
from rltrain.data.batch import Rollout
from rltrain.data.fields import Field
from rltrain.data.reading import ReadPath, gather, reach, read, read_rollout, transformed
from rltrain.data.samplers import SAMPLERS, SamplerSpec, check_sampler, make_sampler
from rltrain.data.samplers.prioritized import PrioritizedSampler
from rltrain.data.samplers.uniform import UniformSampler
from rltrain.data.storage import ReplayBuffer
from rltrain.data.transforms import TRANSFORMS, Record, check_reads
from rltrain.data.transforms.finished import FinishedEpisodes, finished
from rltrain.data.transforms.gae import GAE, gae
from rltrain.data.transforms.nstep import NStepReturns


def filled(lanes: int = 3, capacity: int = 32, steps: int = 40, seed: int = 0) -> ReplayBuffer:
    """Random steps with episode ends, written to wrapped lanes; obs[..., 0] is unique."""
    rng = np.random.default_rng(seed)
    buf = ReplayBuffer(lanes, capacity, (2,), (), np.int64)
    for t in range(steps):
        obs = np.stack([np.arange(lanes) * 1000.0 + t, rng.normal(size=lanes)], 1)
        buf.add(obs.astype(np.float32), rng.integers(0, 4, lanes),
                rng.normal(size=lanes).astype(np.float32), obs.astype(np.float32) + 0.5,
                rng.random(lanes) < 0.1, rng.random(lanes) < 0.05)
    return buf


def same_batch(x, y) -> None:  # noqa: ANN001 - two Batches
    for name in x.__dataclass_fields__:
        a, b = getattr(x, name), getattr(y, name)
        if isinstance(a, dict):
            assert a.keys() == b.keys(), name
            for key in a:
                assert a[key].dtype == b[key].dtype and a[key].tobytes() == b[key].tobytes()
            continue
        if a is None or b is None:
            assert a is None and b is None, name
            continue
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name


@pytest.mark.parametrize("n", [1, 3])
def test_the_read_path_is_sample_then_read(n):
    """ReadPath.batch is the sampler's draw, read with the transforms: bit for bit what the
    stages give one after another, for the same seed."""
    buf = filled()
    path = ReadPath(UniformSampler(7), [NStepReturns(n, 0.9)])
    lanes, positions = UniformSampler(7).sample(buf, 64)
    same_batch(path.batch(buf, 64, 0.5), read(buf, lanes, positions, [NStepReturns(n, 0.9)]))


def test_gather_reads_as_far_as_the_transforms_reach():
    """One-step transitions for a reach of 1; the first transition's obs and act and the
    window, and no one-step reward or next observation, for a longer reach."""
    buf = filled()
    lanes, positions = UniformSampler(1).sample(buf, 16)
    assert reach([]) == 1 and reach([NStepReturns(1, 0.9), NStepReturns(4, 0.9)]) == 4
    one = gather(buf, lanes, positions, 1)
    assert set(one) == {"lanes", "positions", "obs", "act", "rew", "terminated", "next_obs"}
    np.testing.assert_array_equal(one["next_obs"], buf.next_obs_at(lanes, positions))
    wide = gather(buf, lanes, positions, 3)
    assert set(wide) == {"lanes", "positions", "obs", "act", "window"}
    assert wide["window"].rew.shape == (16, 3)
    np.testing.assert_array_equal(wide["obs"], one["obs"])


class SignOfReward:
    """A transform defined outside the package: the reward's sign (as DQN's Atari reward
    clipping does)."""

    window = 1

    def __call__(self, record: Record, storage: ReplayBuffer) -> Record:
        record["rew"] = np.sign(record["rew"]).astype(np.float32)
        return record


class WindowUnused:
    """A transform that asks for a window and computes nothing from it."""

    window = 2

    def __call__(self, record: Record, storage: ReplayBuffer) -> Record:
        return record


def test_transforms_apply_in_order_and_a_new_one_needs_no_edit():
    buf = filled()
    lanes, positions = UniformSampler(2).sample(buf, 64)
    plain = read(buf, lanes, positions, [NStepReturns(3, 0.9)])
    signed = read(buf, lanes, positions, [NStepReturns(3, 0.9), SignOfReward()])
    np.testing.assert_array_equal(signed.rew, np.sign(plain.rew))
    np.testing.assert_array_equal(signed.discount, plain.discount)
    assert set(np.unique(signed.rew)) <= {-1.0, 0.0, 1.0}
    with pytest.raises(RuntimeError, match="produced no rew, next_obs"):
        read(buf, lanes, positions, [WindowUnused()])
    assert TRANSFORMS["nstep"] is NStepReturns


def test_a_transform_of_the_other_kind_is_refused_by_name():
    """GAE reads whole rollouts and n-step returns sampled batches: each read path refuses
    the other's, and a transform that does not say what it reads, naming it (never a
    KeyError at the first update)."""
    with pytest.raises(ValueError, match=r"GAE\(gamma=0.9, lam=0.8\) reads a rollout, and a "
                                         r"sampled read path gives it a batch"):
        ReadPath(UniformSampler(0), [NStepReturns(3, 0.9), GAE(LinearCritic(), 0.9, 0.8)])
    with pytest.raises(ValueError, match=r"NStepReturns\(n=3, gamma=0.9\) reads a batch"):
        check_reads([FinishedEpisodes(), NStepReturns(3, 0.9)], "rollout", "a rollout")
    with pytest.raises(ValueError, match="does not say what it reads"):
        ReadPath(UniformSampler(0), [SignOfReward()])
    check_reads([GAE(LinearCritic(), 0.9, 0.8), FinishedEpisodes()], "rollout", "a rollout")
    assert ReadPath(UniformSampler(0), [NStepReturns(3, 0.9)]).window == 3


def test_prioritised_reads_carry_weights_and_give_priorities_back():
    """The weights ride on the batch; the priorities the update reports reach the sampler
    (the sampled leaves change, the others do not)."""
    buf = filled()
    sampler = PrioritizedSampler(alpha=1.0, beta=0.4, eps=1e-6, seed=0)
    path = ReadPath(sampler, [NStepReturns(1, 0.9)])
    batch = path.batch(buf, 8, 0.0)
    assert batch.weights is not None and batch.weights.max() == 1.0
    assert sampler.tree is not None
    before = sampler.tree.leaves.copy()
    path.learned(batch, __import__("torch").full((8,), 5.0))
    leaves = batch.lanes * buf.lane_capacity + batch.positions
    np.testing.assert_allclose(sampler.tree.leaves[leaves], 5.0 + 1e-6)
    untouched = np.setdiff1d(np.arange(len(before)), leaves)
    np.testing.assert_array_equal(sampler.tree.leaves[untouched], before[untouched])


def test_the_samplers_are_a_registry():
    assert {"uniform", "prioritized"} <= set(SAMPLERS)
    assert SAMPLERS["prioritized"].weighs and not SAMPLERS["uniform"].weighs
    with pytest.raises(ConfigError, match=r"buffer.sampler='rank' is not a sampler; use "
                       r".*prioritized.*uniform.*buffer=prioritized selects prioritized"):
        check_sampler(ReplayBufferConfig(sampler="rank"))


class NewestFirst:
    """A sampler defined outside the package: each lane's newest transitions, in turn
    (counts its draws, so a test can see it was the one used)."""

    draws = 0

    def sample(self, buffer: ReplayBuffer, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        NewestFirst.draws += 1
        lanes = np.arange(batch_size) % buffer.num_lanes
        back = np.minimum(np.arange(batch_size) // buffer.num_lanes, buffer.size[lanes] - 1)
        return lanes, (buffer.ptr[lanes] - 1 - back) % buffer.lane_capacity

    def weights(self, lanes: np.ndarray, positions: np.ndarray, fraction: float) -> None:
        return None

    def update(self, lanes: np.ndarray, positions: np.ndarray, priorities: np.ndarray) -> None:
        pass

    def state_dict(self) -> dict:
        return {"draws": NewestFirst.draws}

    def load_state_dict(self, state: dict) -> None:
        NewestFirst.draws = state["draws"]


@pytest.fixture
def newest_first():
    """``buffer.sampler=newest``, registered as a module of the package would register it,
    and taken out again after the test."""
    SAMPLERS["newest"] = SamplerSpec(name="newest", build=lambda cfg, seed: NewestFirst(),
                                     title="newest-first sampling")
    NewestFirst.draws = 0
    yield
    del SAMPLERS["newest"]


def test_a_new_sampler_trains_through_the_trainer(newest_first, tmp_path: Path):
    """Registered, it is a valid ``buffer.sampler``, refuses another sampler's settings, and
    a real off-policy run learns from its draws (through the CLI's composition root)."""
    check_sampler(ReplayBufferConfig(sampler="newest"))
    with pytest.raises(ConfigError, match="buffer.priority_alpha is for prioritised replay, "
                       "and this run uses newest-first sampling: add buffer=prioritized"):
        check_sampler(ReplayBufferConfig(sampler="newest", priority_alpha=0.5))
    assert isinstance(make_sampler(ReplayBufferConfig(sampler="newest"), 0), NewestFirst)
    run_in_process(tmp_path / "run", *SHORT_DQN, "buffer.sampler=newest",
                   "trainer.max_epochs=1")
    (record,) = read_jsonl(tmp_path / "run" / "epochs.jsonl")
    assert NewestFirst.draws == record["gradient_step"] > 0


# --------------------------------------------------------------------------- on-policy
class LinearCritic:
    """A critic whose value of an observation is a fixed function of it (twice its first
    entry), whose losses take the rewards halved, and which hands back a by-product of its
    pass and counts its calls."""

    calls = 0

    def rollout_values(self, record: Record) -> Record:
        self.calls += 1
        return {"values": 2 * record["obs"][..., 0], "next_values": 2 * record["next_obs"][..., 0],
                "pass": "by-product"}

    def learning_rewards(self, rew: np.ndarray) -> np.ndarray:
        return rew / 2


def appended(lanes: int = 3, steps: int = 9, seed: int = 0) -> ReplayBuffer:
    """Append-only lanes of random steps with episode ends (on-policy storage), with a
    declared field beside each transition; lane 0 a step short."""
    rng = np.random.default_rng(seed)
    buf = ReplayBuffer(lanes, 16, (2,), (), np.int64, circular=False,
                       fields=(Field("logp", (), np.dtype(np.float32)),))
    for t in range(steps):
        obs = rng.normal(size=(lanes, 2)).astype(np.float32)
        valid = np.ones(lanes, bool)
        valid[0] = t < steps - 1
        buf.add(obs, rng.integers(0, 4, lanes), rng.normal(size=lanes).astype(np.float32),
                obs + 0.5, rng.random(lanes) < 0.2, rng.random(lanes) < 0.1, valid,
                fields={"logp": np.full(lanes, -t, np.float32)})
    return buf


def test_the_on_policy_read_path_is_the_rollout_through_its_transforms():
    """read_rollout: storage's rollout, unchanged, with GAE by the critic (its rewards, its
    values at this call) and the finished-episode mask added; the declared field and the
    critic's by-product ride along in ``fields``; without a mask transform every valid slot
    is learnt from."""
    buf = appended()
    stored = buf.rollout()
    critic = LinearCritic()
    got = read_rollout(buf, [GAE(critic, 0.9, 0.8), FinishedEpisodes()])
    for name in ("obs", "act", "rew", "next_obs", "terminated", "truncated", "valid"):
        np.testing.assert_array_equal(getattr(got, name), getattr(stored, name))
    values, next_values = 2 * stored.obs[..., 0], 2 * stored.next_obs[..., 0]
    want = gae(stored.rew / 2, values, next_values, stored.terminated, stored.dones,
               stored.valid, 0.9, 0.8)
    assert got.advantages is not None and got.values is not None and got.learn is not None
    np.testing.assert_array_equal(got.advantages, want)
    np.testing.assert_array_equal(got.returns, want + values)
    np.testing.assert_array_equal(got.values, values)
    np.testing.assert_array_equal(got.learn, finished(stored.dones, stored.valid))
    assert not got.learn.all() and not got.valid.all()
    assert sorted(got.fields) == ["logp", "next_values", "pass"]
    np.testing.assert_array_equal(got.fields["logp"], stored.fields["logp"])
    assert critic.calls == 1
    plain = read_rollout(buf, [GAE(critic, 0.9, 0.8)])
    np.testing.assert_array_equal(plain.learn, stored.valid)
    assert {"gae", "finished_episodes"} <= set(TRANSFORMS)
    named_as_attribute = dataclasses.replace(stored, fields={"values": stored.rew})
    with pytest.raises(ValueError, match="named as one of its attributes: {'values'}"):
        read_rollout_of(named_as_attribute)


def read_rollout_of(rollout: Rollout) -> Rollout:
    """``rollout`` through GAE by a :class:`LinearCritic` (the storage beside it unread)."""
    return transformed(rollout, [GAE(LinearCritic(), 0.9, 0.8)], appended())


def test_an_empty_rollout_is_read_as_storage_gives_it():
    """Only reset steps collected (next-step autoreset): nothing to compute, the critic is
    not asked."""
    buf = ReplayBuffer(2, 4, (2,), (), np.int64, circular=False)
    critic = LinearCritic()
    got = read_rollout(buf, [GAE(critic, 0.9, 0.8)])
    assert got.num_transitions == 0 and got.advantages is None and critic.calls == 0
