"""The collector on real gymnasium vector envs, in both autoreset modes."""

from __future__ import annotations

import math
from collections import Counter

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import toy_envs
from rltrain.data.collector import Collector, episode_quotas, random_policy
from rltrain.data.storage import ReplayBuffer
from toy_envs import COUNTER_ID, COUNTER_T, TERMINATING_ID, terminating_length

MODES = [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP]


def make_envs(env_id: str, num_envs: int, mode: AutoresetMode, **kwargs) -> gym.vector.VectorEnv:
    return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": mode}, **kwargs)


def make_collector(envs, capacity: int | None = 1000, seed: int = 0):
    buffer = None
    if capacity is not None:
        buffer = ReplayBuffer(envs.num_envs, capacity, envs.single_observation_space.shape, (),
                              np.int64)
    collector = Collector(envs, buffer)
    collector.reset(seed=seed)
    return collector, buffer


def parity_policy(obs: np.ndarray) -> np.ndarray:
    """Action = step count mod 2, so a stored action can be checked against its obs."""
    return (obs[:, 0].astype(np.int64)) % 2


def lane(buffer: ReplayBuffer, i: int) -> dict[str, np.ndarray]:
    """Lane i in time order (these tests never overfill a lane); each transition's next
    observation as the buffer finds it (stored once: the next transition's, or kept aside)."""
    n = int(buffer.size[i])
    assert n < buffer.lane_capacity
    out = {name: buffer.codecs[name].array[i, :n]
           for name in ("obs", "act", "rew", "terminated", "truncated")}
    out["next_obs"] = buffer.next_obs_at(np.full(n, i), np.arange(n))
    return out


def counter_schedule(mode: AutoresetMode, first: int, last: int) -> tuple[int, int]:
    """For one Counter env freshly reset, over vector steps first..last (1-based): the number
    of real transitions and of episodes ended. Same-step: every step is real and episodes
    end at multiples of T. Next-step: each episode takes T real steps plus one reset step."""
    steps = range(first, last + 1)
    if mode is AutoresetMode.SAME_STEP:
        return len(steps), sum(k % COUNTER_T == 0 for k in steps)
    cycle = COUNTER_T + 1
    return (sum(k % cycle != 0 for k in steps), sum(k % cycle == COUNTER_T for k in steps))


# --------------------------------------------------------------------------- counts
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("n", [1, 3, 4, 5, 13])
def test_collect_rounds_n_steps_up_to_whole_vector_steps(mode, n):
    """collect(n_steps=n) on m envs runs ceil(n / m) vector steps: n_steps = ceil(n/m) * m."""
    m = 4
    collector, _ = make_collector(make_envs(COUNTER_ID, m, mode))
    assert collector.next_step_mode == (mode is AutoresetMode.NEXT_STEP)
    episodes = collector.collect(random_policy(collector.envs, 0), n_steps=n)
    assert episodes.n_steps == math.ceil(n / m) * m


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_transitions_and_episodes_are_exact_on_time_limited_env(mode):
    """Over several collections (episodes spanning them), the stored transitions equal
    n_transitions, exclude next-step reset steps, and every episode has length and return T."""
    m, chunk = 3, 7  # 3 vector steps per collection, which does not divide T = 5
    collector, buffer = make_collector(make_envs(COUNTER_ID, m, mode))
    vector_steps = math.ceil(chunk / m)
    done_steps = 0
    total_transitions = 0
    for _ in range(8):
        episodes = collector.collect(parity_policy, n_steps=chunk)
        per_env, n_eps = counter_schedule(mode, done_steps + 1, done_steps + vector_steps)
        done_steps += vector_steps
        assert episodes.n_steps == vector_steps * m
        assert episodes.n_transitions == per_env * m
        assert len(episodes.returns) == len(episodes.lengths) == n_eps * m
        np.testing.assert_array_equal(episodes.lengths, COUNTER_T)
        np.testing.assert_allclose(episodes.returns, float(COUNTER_T))
        total_transitions += episodes.n_transitions
        assert len(buffer) == total_transitions
    per_env, n_eps = counter_schedule(mode, 1, done_steps)
    assert list(buffer.size) == [per_env] * m
    if mode is AutoresetMode.NEXT_STEP:
        assert per_env < done_steps  # reset steps were skipped
    assert n_eps >= 3


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_truncated_transitions_store_the_true_final_observation(mode):
    """A truncated transition is stored with truncated=True, terminated=False and the final
    observation [T, k, id] as next_obs, never the reset observation [0, k+1, id]; lanes are
    continuous within episodes; no reset step is stored."""
    m, seed = 3, 40
    collector, buffer = make_collector(make_envs(COUNTER_ID, m, mode), seed=seed)
    for _ in range(5):
        collector.collect(parity_policy, n_steps=10)
    for i in range(m):
        tr = lane(buffer, i)
        obs, nxt = tr["obs"], tr["next_obs"]
        assert (obs[:, 2] == seed + i).all() and (nxt[:, 2] == seed + i).all()
        assert not tr["terminated"].any()
        np.testing.assert_allclose(tr["rew"], 1.0)  # a reset step would store reward 0
        np.testing.assert_array_equal(tr["act"], obs[:, 0].astype(np.int64) % 2)
        trunc = tr["truncated"]
        assert trunc.sum() >= 2
        # truncations: from step T-1 to the final observation T of the same episode
        np.testing.assert_array_equal(obs[trunc, 0], COUNTER_T - 1)
        np.testing.assert_array_equal(nxt[trunc, 0], COUNTER_T)
        np.testing.assert_array_equal(nxt[trunc, 1], obs[trunc, 1])
        # every other transition advances the step count within its episode
        np.testing.assert_array_equal(nxt[~trunc, 0], obs[~trunc, 0] + 1)
        np.testing.assert_array_equal(nxt[~trunc, 1], obs[~trunc, 1])
        assert (obs[:, 0] < COUNTER_T).all()
        # continuity: obs[t] == next_obs[t-1] unless t-1 ended; after a truncation, a new
        # episode starts from its reset observation
        prev_done = trunc[:-1]
        np.testing.assert_array_equal(obs[1:][~prev_done], nxt[:-1][~prev_done])
        np.testing.assert_array_equal(obs[1:][prev_done, 0], 0)
        np.testing.assert_array_equal(obs[1:][prev_done, 1], nxt[:-1][prev_done, 1] + 1)


# --------------------------------------------------------------------------- quotas
@pytest.mark.parametrize("mode", MODES)
def test_collections_in_pieces_continue_each_other(mode):
    """The trainer's warm-up collects in pieces (so the console can show it): the pieces store
    exactly the transitions one collection of their total would, episodes spanning pieces."""
    stored = []
    for pieces in ([300], [8, 100, 4, 188]):
        envs = make_envs("CartPole-v1", 4, mode)
        collector, buffer = make_collector(envs, capacity=400)
        policy = random_policy(envs, seed=5)
        returns = [r for n in pieces for r in collector.collect(policy, n_steps=n).returns]
        stored.append(([lane(buffer, i) for i in range(4)], returns))
        envs.close()
    (one, one_returns), (split, split_returns) = stored
    for a, b in zip(one, split, strict=True):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert one_returns == split_returns and len(one_returns) > 4  # episodes span the pieces


def test_episode_quotas_split_evenly():
    np.testing.assert_array_equal(episode_quotas(7, 3), [3, 2, 2])
    np.testing.assert_array_equal(episode_quotas(2, 4), [1, 1, 0, 0])
    np.testing.assert_array_equal(episode_quotas(8, 4), [2, 2, 2, 2])
    assert episode_quotas(10, 3).sum() == 10


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("n_episodes", [7, 2, 12])
def test_quota_collection_counts_exactly_the_per_env_quotas(mode, n_episodes):
    """With quota=True each env contributes exactly its quota, however short its episodes;
    the collection runs until the slowest env has finished its quota."""
    m, seed = 3, 0
    lengths = [terminating_length(seed + i) for i in range(m)]
    assert len(set(lengths)) == m  # very different lengths: 1, 4, 9
    collector, buffer = make_collector(make_envs(TERMINATING_ID, m, mode), capacity=None,
                                       seed=seed)
    assert buffer is None
    quotas = episode_quotas(n_episodes, m)
    expected = Counter({lengths[i]: int(q) for i, q in enumerate(quotas) if q})
    if mode is AutoresetMode.SAME_STEP:
        vector_steps = max(q * n for q, n in zip(quotas, lengths, strict=True))
    else:  # a reset step between consecutive episodes of an env
        vector_steps = max(q * (n + 1) - 1 for q, n in zip(quotas, lengths, strict=True) if q)
    for _ in range(2):  # test-style: reset, then collect; twice gives the same
        collector.reset()
        episodes = collector.collect(random_policy(collector.envs, 1), n_episodes=n_episodes,
                                     quota=True)
        assert len(episodes.lengths) == n_episodes
        assert Counter(episodes.lengths.tolist()) == expected
        np.testing.assert_allclose(np.sort(episodes.returns), np.sort(episodes.lengths))
        assert episodes.n_steps == vector_steps * m


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_collection_without_quota_over_represents_short_episodes(mode):
    """Without quotas, the first n episodes to end are counted: mostly the short ones."""
    m, seed = 3, 0
    collector, _ = make_collector(make_envs(TERMINATING_ID, m, mode), capacity=None, seed=seed)
    episodes = collector.collect(random_policy(collector.envs, 1), n_episodes=9)
    assert len(episodes.lengths) >= 9
    shortest = (episodes.lengths == terminating_length(seed)).sum()
    longest = (episodes.lengths == terminating_length(seed + 2)).sum()
    assert shortest > 9 // m > longest


def test_terminating_env_stores_terminated_not_truncated():
    """Terminations are stored as terminated=True, truncated=False, with the final obs."""
    m = 3
    collector, buffer = make_collector(make_envs(TERMINATING_ID, m, AutoresetMode.SAME_STEP))
    collector.collect(parity_policy, n_steps=30 * m)
    for i in range(m):
        tr = lane(buffer, i)
        length = terminating_length(i)
        term = tr["terminated"]
        assert not tr["truncated"].any()
        np.testing.assert_array_equal(term, tr["next_obs"][:, 0] == length)
        assert term.sum() == 30 // length


# --------------------------------------------------------------------------- CartPole
class RecordingVectorEnv(gym.vector.VectorWrapper):
    """Records what the wrapped vector env returns, to rebuild the expected transitions."""

    def __init__(self, env):
        super().__init__(env)
        self.reset_obs = None
        self.steps: list[tuple] = []

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.reset_obs = obs.copy()
        self.steps = []
        return obs, info

    def step(self, actions):
        obs, rew, term, trunc, info = self.env.step(actions)
        self.steps.append((np.array(actions).copy(), obs.copy(), rew.copy(), term.copy(),
                           trunc.copy()))
        return obs, rew, term, trunc, info


def expected_next_step_lanes(rec: RecordingVectorEnv) -> list[list[tuple]]:
    """Per lane, the real transitions of a next-step autoreset env: every step except the
    one right after a done, which is the reset step (reward 0, reset observation)."""
    m = rec.num_envs
    prev_obs = rec.reset_obs.copy()
    prev_done = np.zeros(m, bool)
    lanes: list[list[tuple]] = [[] for _ in range(m)]
    for act, obs, rew, term, trunc in rec.steps:
        for i in range(m):
            if prev_done[i]:
                assert rew[i] == 0 and not term[i] and not trunc[i]
                assert (np.abs(obs[i]) <= 0.05).all()  # CartPole's reset state
            else:
                lanes[i].append((prev_obs[i], act[i], rew[i], obs[i], term[i], trunc[i]))
        prev_done = (term | trunc) & ~prev_done
        prev_obs = obs
    return lanes


def test_cartpole_native_vector_env_next_step_path():
    """CartPole's own (next-step) vector env: the buffer holds exactly the real transitions,
    a done transition's next_obs is its true final observation (not the reset observation
    that follows), and each lane is continuous except across dones. Each collection is 75
    vector steps, so the collector's block writes (every 64 steps) split inside it."""
    m = 4
    rec = RecordingVectorEnv(
        gym.make_vec("CartPole-v1", num_envs=m, vectorization_mode="vector_entry_point"))
    collector, buffer = make_collector(rec, capacity=400, seed=3)
    assert collector.next_step_mode
    policy = random_policy(rec, 3)
    results = [collector.collect(policy, n_steps=300) for _ in range(4)]
    n_steps = sum(r.n_steps for r in results)
    assert collector.WRITE_EVERY < 300 // m
    assert n_steps == 4 * math.ceil(300 / m) * m == m * len(rec.steps)

    expected = expected_next_step_lanes(rec)
    resets = n_steps - sum(len(e) for e in expected)
    assert resets > 0
    assert len(buffer) == sum(r.n_transitions for r in results) == n_steps - resets
    all_lengths = []
    for i in range(m):
        tr = lane(buffer, i)
        exp = expected[i]
        assert len(exp) == len(tr["obs"])
        np.testing.assert_array_equal(tr["obs"], np.array([e[0] for e in exp]))
        np.testing.assert_array_equal(tr["act"], [e[1] for e in exp])
        np.testing.assert_array_equal(tr["rew"], [e[2] for e in exp])
        np.testing.assert_array_equal(tr["next_obs"], np.array([e[3] for e in exp]))
        np.testing.assert_array_equal(tr["terminated"], [e[4] for e in exp])
        np.testing.assert_array_equal(tr["truncated"], [e[5] for e in exp])

        done = tr["terminated"] | tr["truncated"]
        obs, nxt = tr["obs"], tr["next_obs"]
        assert done.sum() >= 2
        # continuity within episodes
        np.testing.assert_array_equal(obs[1:][~done[:-1]], nxt[:-1][~done[:-1]])
        # after a done: the next stored obs is a fresh reset state, and the done
        # transition's next_obs is not that reset observation but a failing state
        after = np.flatnonzero(done[:-1])
        assert not np.any(np.all(nxt[after] == obs[after + 1], axis=1))
        assert (np.abs(obs[after + 1]) <= 0.05).all()
        failed = (np.abs(nxt[tr["terminated"], 0]) > 2.4) | (
            np.abs(nxt[tr["terminated"], 2]) > 12 * 2 * math.pi / 360)
        assert failed.all()
        assert not (nxt[:, None, :] == rec.reset_obs[None, :, :]).all(axis=2).any()
        # episode lengths from the lane: runs of transitions ending in a done
        ends = np.flatnonzero(done)
        all_lengths += np.diff(np.concatenate([[-1], ends])).tolist()
    episodes = [r for r in results if len(r.lengths)]
    collected = np.concatenate([r.lengths for r in episodes])
    assert sorted(collected.tolist()) == sorted(all_lengths)
    np.testing.assert_allclose(np.sort(np.concatenate([r.returns for r in episodes])),
                               np.sort(collected).astype(float))


def test_toy_envs_register_once():
    """Re-running the registration (as a second import would) neither fails nor replaces."""
    spec = gym.spec(COUNTER_ID)
    toy_envs._register()
    assert gym.spec(COUNTER_ID) is spec
    assert spec.max_episode_steps == COUNTER_T
