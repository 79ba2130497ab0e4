"""The image envs resume exactly: a snapshot of a vector env, saved as a checkpoint saves it
(``torch.load(weights_only=True)``), restored into a freshly built vector env of the same
config, continues bit-identically: observations, rewards, terminations, truncations.

Atari's emulator is C++: ale_py's ALEInterface is captured through ALE's own
``cloneState(include_rng=True)``, and with sticky actions (env/atari.yaml's default) the one
thing that leaves out, the action the emulator repeats when a frame sticks, is kept beside it
(rltrain.envs.state.families.ale.AleStickyAction, rltrain.envs.wrappers.RecordStickyAction);
MinAtar's and MiniGrid's envs are plain Python. CarRacing's Box2D world and ale-py's native
vector env are not captured, and say so."""

from __future__ import annotations

import collections
import functools
import io
import random
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from conftest import compose_run
from rltrain.assembly.checked_config import settings
from rltrain.config.schemas import EnvConfig
from rltrain.envs.state import Snapshot, restore, snapshot
from rltrain.envs.state.families.ale import AleStickyAction
from rltrain.envs.vector import make_vector_env
from rltrain.envs.wrappers import RecordStickyAction, record_sticky_action

ale_py = pytest.importorskip("ale_py", reason="needs the atari extra: pip install -e '.[atari]'")


def _saved(obj: Any) -> Snapshot:
    """A snapshot as a checkpoint gives it back (torch.load(weights_only=True))."""
    snap = snapshot(obj)
    buffer = io.BytesIO()
    torch.save(snap.state, buffer)
    buffer.seek(0)
    return Snapshot(torch.load(buffer, weights_only=True), snap.not_captured, snap.caveats)


@functools.lru_cache
def _env_config(*overrides: str) -> EnvConfig:
    return settings(compose_run("algo=dqn", *overrides)).env


def _make(*overrides: str, train: bool, num_envs: int = 2,
          seed: int = 11) -> gym.vector.VectorEnv:
    envs = make_vector_env(_env_config(*overrides), num_envs, train=train)
    envs.reset(seed=seed)
    return envs


def _rollout(envs: gym.vector.VectorEnv, actions: list[np.ndarray]) -> list[tuple]:
    out = []
    for action in actions:
        obs, reward, terminated, truncated, _ = envs.step(action)
        obs = {k: v.copy() for k, v in obs.items()} if isinstance(obs, dict) else obs.copy()
        out.append((obs, reward.copy(), terminated.copy(), truncated.copy()))
    return out


def _same(a: tuple, b: tuple) -> bool:
    obs_a, obs_b = a[0], b[0]
    if isinstance(obs_a, dict):
        same_obs = obs_a.keys() == obs_b.keys() and all(
            np.array_equal(obs_a[k], obs_b[k]) for k in obs_a)
    else:
        same_obs = obs_a.dtype == obs_b.dtype and np.array_equal(obs_a, obs_b)
    return same_obs and all(np.array_equal(x, y) for x, y in zip(a[1:], b[1:], strict=True))


#: Atari without sticky actions (env/atari.yaml has them: 0.25)
NOT_STICKY = "env.kwargs.repeat_action_probability=0.0"
CASES = {
    # Breakout: lives lost (training episodes end at each), games over and reset, FIRE served
    "breakout-train": (["env=atari", "env.id=ALE/Breakout-v5"], True, 140, 100),
    "breakout-test": (["env=atari", "env.id=ALE/Breakout-v5"], False, 140, 100),
    # Pong cut at 400 frames (100 agent steps): truncations, and no-op starts after them
    "pong-truncated": (["env=atari", "env.max_episode_steps=400"], True, 130, 100),
    # ALE's v5 id as registered: 4 frames per step inside AtariEnv, RGB frames, no wrappers
    "breakout-registered": (["env=gym", "env.id=ALE/Breakout-v5", "env.imports=[ale_py]"], True,
                            200, 80),
    "pong-not-sticky": (["env=atari", "env.max_episode_steps=400", NOT_STICKY], True, 130, 100),
    "minatar-breakout": (["env=minatar"], True, 200, 150),
    "minatar-seaquest": (["env=minatar", "env.id=MinAtar/Seaquest-v1"], True, 200, 150),
    # DoorKey: a new grid (new Key, Door, Wall objects) at each episode, 250 steps at most
    "minigrid-doorkey": (["env=minigrid"], True, 300, 150),
}


@pytest.mark.parametrize("case", list(CASES))
def test_restore_into_a_fresh_vector_env_is_bit_identical(case: str) -> None:
    overrides, train, before, after = CASES[case]
    if overrides[0] in ("env=minatar", "env=minigrid"):
        pytest.importorskip(overrides[0].removeprefix("env="))
    first = _make(*overrides, train=train)
    space = first.single_action_space
    assert isinstance(space, gym.spaces.Discrete)
    rng = np.random.default_rng(0)
    actions = [rng.integers(0, int(space.n), size=first.num_envs) for _ in range(before + after)]
    ends = sum(int(np.sum(t | u)) for _, _, t, u in _rollout(first, actions[:before]))
    snap = _saved(first)
    assert snap.not_captured == [] and snap.caveats == []
    expected = _rollout(first, actions[before:])
    assert ends > 0 or any(t.any() or u.any() for _, _, t, u in expected)  # resets exercised

    fresh = _make(*overrides, train=train, seed=99)  # another seed: all must come from the state
    assert restore(fresh, snap.state) == []
    got = _rollout(fresh, actions[before:])
    differ = [i for i, (a, b) in enumerate(zip(expected, got, strict=True)) if not _same(a, b)]
    assert differ == [], f"steps {differ[:5]} after the restore differ"
    first.close()
    fresh.close()


def test_sticky_actions_draw_from_the_restored_emulator_rng() -> None:
    """Without ALE's random generator in the state the continuation would differ: sticky
    actions (probability 0.25 per frame) draw from it. The emulator restored with the fresh
    env's own generator instead gives other frames for the same actions."""
    first = _make("env=atari", train=False, num_envs=1)
    fresh = _make("env=atari", train=False, num_envs=1, seed=99)
    fresh_ale = fresh.envs[0].unwrapped.ale
    own_rng = fresh_ale.cloneState(include_rng=True)
    rng = np.random.default_rng(1)
    actions = [rng.integers(0, 6, size=1) for _ in range(300)]
    _rollout(first, actions[:100])
    snap = _saved(first)
    without_rng = first.envs[0].unwrapped.ale.cloneState(include_rng=False)
    expected = _rollout(first, actions[100:])
    assert restore(fresh, snap.state) == []
    fresh_ale.restoreState(own_rng)  # the fresh env's generator (and emulator) ...
    fresh_ale.restoreState(without_rng)  # ... then the first one's emulator alone
    got = _rollout(fresh, actions[100:])
    assert not all(_same(a, b) for a, b in zip(expected, got, strict=True))
    first.close()
    fresh.close()


def _record(envs: gym.vector.SyncVectorEnv, i: int = 0) -> AleStickyAction:
    """The held-action record of sub-env ``i`` (the env factory wraps sticky Atari envs)."""
    env = envs.envs[i]
    while not isinstance(env, RecordStickyAction):
        env = env.env
    return env.record


def _next_frame_sticks(record: AleStickyAction) -> bool:
    """Whether the emulator's next frame plays its held action whatever it is told (read off
    a copy of the record's copy of ALE's generator)."""
    assert record.rng is not None
    copy = random.Random()
    copy.setstate(record.rng.getstate())
    return (copy.getrandbits(64) & 0xFFFFFFFF) < record.threshold


def test_the_held_action_is_what_ales_saved_state_leaves_out() -> None:
    """ALE's cloneState holds the emulator and its generator, not the action a frame that
    sticks repeats. The run holds RIGHT (its paddle at the wall, where RIGHT moves nothing) and
    its next frame sticks; fresh envs hold LEFT. Restored with the run's held action, a fresh
    env goes on as the unbroken run; the same state restored with LEFT held parts at once:
    its first frame plays LEFT."""
    right, left = 2, 3  # Pong's minimal action set: NOOP, FIRE, RIGHT, LEFT, ...
    first = _make("env=atari", train=False, num_envs=1)
    record = _record(first)
    codes = [a.value for a in first.envs[0].unwrapped._action_set]
    _rollout(first, [np.array([right])] * 20)
    while not _next_frame_sticks(record):  # the next step's first frame plays the held action
        _rollout(first, [np.array([right])])
    assert record.held == codes[right]
    snap = _saved(first)
    expected = _rollout(first, [np.array([left])] * 30)

    def fresh(seed: int) -> gym.vector.SyncVectorEnv:
        envs = _make("env=atari", train=False, num_envs=1, seed=seed)
        _rollout(envs, [np.array([left])] * 5)
        assert _record(envs).held == codes[left]
        return envs

    same = fresh(99)
    assert restore(same, snap.state) == []
    assert _record(same).held == codes[right]
    got = _rollout(same, [np.array([left])] * 30)
    assert all(_same(a, b) for a, b in zip(expected, got, strict=True))

    _record_pairs(snap.state["root"])[0][1] = codes[left]  # ("held", code)
    other = fresh(98)
    assert restore(other, snap.state) == []
    got = _rollout(other, [np.array([left])] * 30)
    parted = [i for i, (a, b) in enumerate(zip(expected, got, strict=True)) if not _same(a, b)]
    assert parted and parted[0] <= 1, parted  # Pong draws the paddle's move a step later
    for envs in (first, same, other):
        envs.close()


def test_the_record_follows_the_emulator_and_says_when_it_cannot() -> None:
    """Through lost lives, games over, no-op starts, FIRE and a seeded reset the record's copy
    of ALE's generator stands where the emulator's does, so a snapshot lacks nothing. An act()
    the record is not told of moves the emulator's generator alone: the snapshot says so."""
    envs = _make("env=atari", "env.id=ALE/Breakout-v5", train=True, num_envs=2)
    rng = np.random.default_rng(3)
    ends = sum(int(np.sum(t | u)) for _, _, t, u in
               _rollout(envs, [rng.integers(0, 4, size=2) for _ in range(400)]))
    envs.reset(seed=5)
    _rollout(envs, [rng.integers(0, 4, size=2) for _ in range(50)])
    assert ends > 0
    assert [_record(envs, i).lost() for i in range(2)] == [None, None]
    snap = snapshot(envs)
    assert snap.not_captured == [] and snap.caveats == []

    envs.envs[1].unwrapped.ale.act(0, 1.0)  # behind the record's back
    snap = snapshot(envs)
    assert len(snap.caveats) == 1, snap.caveats
    assert snap.caveats[0].startswith("envs.envs[1].")
    assert "drew for frames the record was not told of" in snap.caveats[0]
    envs.close()


def test_an_atari_env_without_a_record_says_what_its_state_leaves_out() -> None:
    """Sticky actions the record cannot follow (continuous actions, a frame skip drawn at
    random), or an ALE env not made by rltrain's factory: every emulator is reported as
    captured with a caveat naming the held action, so that a resume restores it and says it is
    not exact; without sticky actions nothing is."""
    makers = [lambda: gym.make("ALE/Pong-v5", frameskip=1),  # not through the factory
              lambda: record_sticky_action(gym.make("ALE/Pong-v5", continuous=True)),
              lambda: record_sticky_action(gym.make("ALE/Pong-v5", frameskip=(2, 5)))]
    for make in makers:
        envs = gym.vector.SyncVectorEnv([make])
        envs.reset(seed=0)
        assert not any(isinstance(e, RecordStickyAction) for e in _chain(envs.envs[0]))
        snap = snapshot(envs)
        assert snap.not_captured == []  # captured, and restored: a resume goes on from it
        assert len(snap.caveats) == 1, snap.caveats
        assert ("ALEInterface: sticky actions: the action ALE repeats is held outside its "
                "saved state" in snap.caveats[0])
        assert "repeat_action_probability=0" in snap.caveats[0]
        envs.close()
    plain = _make("env=atari", NOT_STICKY, train=False, num_envs=2)
    assert not any(isinstance(e, RecordStickyAction) for e in _chain(plain.envs[0]))
    snap = snapshot(plain)
    assert snap.not_captured == [] and snap.caveats == []
    plain.close()


def _chain(env: gym.Env) -> list[gym.Env]:
    """An env and every env it wraps."""
    out = [env]
    while isinstance(out[-1], gym.Wrapper):
        out.append(out[-1].env)
    return out


def test_a_held_action_that_is_not_the_games_is_refused() -> None:
    envs = _make("env=atari", train=False, num_envs=1)
    state = _saved(envs).state
    _record_pairs(state["root"])[0][1] = 99
    ale = envs.envs[0].unwrapped.ale
    before = ale.cloneState(include_rng=True)
    problems = restore(_make("env=atari", train=False, num_envs=1), state)
    assert any("not a held action of this game (99); left as it is" in p for p in problems)
    assert ale.cloneState(include_rng=True) == before
    envs.close()


def test_an_ale_state_is_never_loaded_into_another_game_or_from_bad_bytes() -> None:
    breakout = _make("env=atari", "env.id=ALE/Breakout-v5", train=False, num_envs=1)
    pong = _make("env=atari", train=False, num_envs=1)
    ale = pong.envs[0].unwrapped.ale
    before = ale.cloneState(include_rng=True)
    problems = restore(pong, _saved(breakout).state)
    assert any(p.endswith("ale: a state of breakout.bin, but the live emulator runs pong.bin: "
                          "another game; left as it is") for p in problems), problems
    assert ale.cloneState(include_rng=True) == before

    state = _saved(pong).state
    for pair in _ale_state_pairs(state["root"]):
        if pair[0] == "state":  # ("array", dtype, shape, tensor, raw): cut to 16 bytes
            tag, dtype, _, data, raw = pair[1]
            pair[1] = (tag, dtype, [16], data[:16].clone(), raw)
    problems = restore(pong, state)
    assert any("ale: ALE refused the saved state" in p for p in problems), problems
    assert ale.cloneState(include_rng=True) == before  # put back as it was
    breakout.close()
    pong.close()


def _c_state_pairs(packed: Any, name: str) -> list[list] | None:
    """The ``[key, value]`` pairs of the first C state ``name`` in a packed env state (a C
    state ``("cstate", name, ("dict", pairs))``), to write a bad one into."""
    if isinstance(packed, tuple) and packed[:2] == ("cstate", name):
        return packed[2][1]
    items = (packed.values() if isinstance(packed, dict)
             else packed if isinstance(packed, (tuple, list)) else [])
    for item in items:
        if (found := _c_state_pairs(item, name)) is not None:
            return found
    return None


def _ale_state_pairs(packed: Any) -> list[list] | None:
    return _c_state_pairs(packed, "ale_py.ALEInterface")


def _record_pairs(packed: Any) -> list[list]:
    """The held-action record's pairs: ``[["held", code], ["rng", ...]]``."""
    pairs = _c_state_pairs(packed, "rltrain.AleStickyAction")
    assert pairs is not None and pairs[0][0] == "held", pairs
    return pairs


class _Frames:
    """Holds a frame stack's queue as FrameStackObservation does."""

    def __init__(self, frames: list[np.ndarray]) -> None:
        self.queue = collections.deque(frames, maxlen=len(frames))


def test_one_live_array_in_several_places_is_restored_as_the_distinct_saved_ones() -> None:
    """Just after a reset, a frame stack's queue holds one array four times; the saved queue
    held four frames. Writing each into the live array in turn would leave the last in all."""
    saved = _Frames([np.full((2, 2), i, np.uint8) for i in range(4)])
    frame = np.zeros((2, 2), np.uint8)
    live = _Frames([frame] * 4)
    assert restore(live, _saved(saved).state) == []
    assert [int(f[0, 0]) for f in live.queue] == [0, 1, 2, 3]
    # where the saved queue held one array four times, the restored one does too
    shared = _Frames([np.full((2, 2), 7, np.uint8)] * 4)
    other = _Frames([np.zeros((2, 2), np.uint8) for _ in range(4)])
    assert restore(other, _saved(shared).state) == []
    assert all(f is other.queue[0] for f in other.queue) and int(other.queue[3][0, 0]) == 7


# --------------------------------------------------------------------------- not captured
def test_carracing_box2d_world_is_reported_not_captured() -> None:
    pytest.importorskip("Box2D", reason="needs the box2d extra: pip install -e '.[box2d]'")
    envs = _make("env=carracing_discrete", train=True)
    snap = _saved(envs)
    assert any(x.endswith(".world (Box2D.Box2D.b2World)") for x in snap.not_captured)
    problems = restore(_make("env=carracing_discrete", train=True), snap.state)
    assert any(".world: not captured in the snapshot (Box2D.Box2D.b2World)" in p
               for p in problems)
    envs.close()


def test_ale_native_vector_env_is_reported_not_captured() -> None:
    """ale-py's AtariVectorEnv runs its emulators in C++ threads, with no per-env state API."""
    from ale_py.vector_env import AtariVectorEnv

    envs = AtariVectorEnv("pong", 2, num_threads=1)
    envs.reset(seed=0)
    snap = snapshot(envs)
    assert snap.not_captured == ["envs.ale (ale_py._ale_py.ALEVectorInterface)"]
    envs.close()
