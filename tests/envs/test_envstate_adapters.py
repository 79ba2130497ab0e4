"""rltrain.envs.state.adapters: state the walker cannot see, captured through a registered
adapter (the protocol a new env family implements), and reported as before without one.

The toy: a gymnasium env whose state sits in a :class:`Dial`, a Python class whose numbers
live in a ctypes buffer behind ``__slots__`` (what a C library's object looks like to
``vars()``: nothing to read), with a small "library" API to read and write them."""

from __future__ import annotations

import ctypes
import io
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from rltrain.assembly.lifecycle import partial_state_line, unsaved_state_line
from rltrain.envs.state import Snapshot, restore, snapshot
from rltrain.envs.state.adapters import ADAPTERS, StateAdapter, known, register

DIAL_ID = "rltrain-test/Dial-v0"


class Dial:
    """A dial turned by steps: its angle and its full turns, in C-like storage. ``friction``
    is set when it is made and never saved (the adapter's caveat says so)."""

    __slots__ = ("_cells",)

    def __init__(self, friction: float = 0.0) -> None:
        self._cells = (ctypes.c_double * 3)(0.0, 0.0, friction)

    def read(self) -> tuple[float, int]:
        return self._cells[0], int(self._cells[1])

    def write(self, angle: float, turns: int) -> None:
        self._cells[0], self._cells[1] = angle, float(turns)

    def friction(self) -> float:
        return self._cells[2]

    def turn(self, by: float) -> None:
        angle, turns = self.read()
        angle += by * (1.0 - self.friction())
        self.write(angle % 360.0, turns + int(angle // 360.0))


class DialEnv(gym.Env):
    """Turn the dial left or right by a noisy amount; the episode ends at three full turns."""

    metadata = {"render_modes": []}

    def __init__(self, friction: float = 0.0) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float64)
        self.action_space = gym.spaces.Discrete(2)
        self.dial = Dial(friction)

    def _obs(self) -> np.ndarray:
        angle, turns = self.dial.read()
        return np.array([angle / 360.0, turns])

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.dial.write(float(self.np_random.uniform(0.0, 360.0)), 0)
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        sign = 1.0 if int(action) == 1 else -1.0
        self.dial.turn(sign * float(self.np_random.uniform(20.0, 140.0)))
        angle, turns = self.dial.read()
        return self._obs(), float(np.cos(np.radians(angle))), abs(turns) >= 3, False, {}


if DIAL_ID not in gym.registry:
    gym.register(id=DIAL_ID, entry_point=DialEnv, max_episode_steps=100)


class DialState(StateAdapter):
    """The adapter a library offering :class:`Dial` would ship: its state through its API."""

    name = "rltrain-test.Dial"
    module, type_name = __name__, "Dial"

    def capture(self, value: Any) -> dict[str, Any]:
        angle, turns = value.read()
        return {"angle": np.array(angle), "turns": turns}

    def restore(self, value: Any, saved: dict[str, Any]) -> list[str]:
        angle, turns = saved.get("angle"), saved.get("turns")
        if not (isinstance(angle, np.ndarray) and angle.shape == () and type(turns) is int):
            return ["not a Dial state"]
        value.write(float(angle), turns)
        return []

    def caveat(self, value: Any) -> str | None:
        if value.friction():
            return "its friction is not saved (make it with friction=0 to resume exactly)"
        return None


@pytest.fixture
def dial_state() -> Iterator[StateAdapter]:
    adapter = register(DialState())
    yield adapter
    del ADAPTERS[adapter.name]


def _dials(friction: float = 0.0) -> gym.vector.SyncVectorEnv:
    return gym.vector.SyncVectorEnv([lambda: gym.make(DIAL_ID, friction=friction)] * 2,
                                    autoreset_mode=AutoresetMode.SAME_STEP)


def _dial_paths(envs: gym.vector.SyncVectorEnv) -> list[str]:
    paths = []
    for i, env in enumerate(envs.envs):
        path = f"envs.envs[{i}]"
        while isinstance(env, gym.Wrapper):
            path, env = f"{path}.env", env.env
        paths.append(f"{path}.dial")
    return paths


def _saved(envs: gym.vector.SyncVectorEnv) -> Snapshot:
    """A snapshot as a checkpoint gives it back (saved, loaded with weights_only=True)."""
    snap = snapshot(envs)
    buffer = io.BytesIO()
    torch.save(snap.state, buffer)
    buffer.seek(0)
    return Snapshot(torch.load(buffer, weights_only=True), snap.not_captured, snap.caveats)


def _rollout(envs: gym.vector.SyncVectorEnv, steps: int) -> list[np.ndarray]:
    out = []
    for t in range(steps):
        obs, reward, terminated, _, _ = envs.step(np.array([int(t % 4 != 0), int(t % 3 != 0)]))
        out += [obs.copy(), reward.copy(), terminated.copy()]
    return out


def _adapted(packed: Any, name: str) -> list[tuple]:
    """The ``("cstate", name, data)`` entries of a packed state."""
    if isinstance(packed, tuple) and packed[:2] == ("cstate", name):
        return [packed]
    items = packed.values() if isinstance(packed, dict) else packed
    if not isinstance(packed, (dict, list, tuple)):
        return []
    return [entry for item in items for entry in _adapted(item, name)]


def test_an_unregistered_opaque_object_is_reported_not_captured() -> None:
    """Without an adapter, the dial is what it always was: a value the snapshot cannot
    capture, named with its path and type, said to the user as such; a restore says it."""
    envs = _dials()
    envs.reset(seed=3)
    snap = _saved(envs)
    assert snap.not_captured == [f"{path} ({__name__}.Dial)" for path in _dial_paths(envs)]
    assert snap.caveats == []
    line = unsaved_state_line(DIAL_ID, [f"train envs: {x}" for x in snap.not_captured])
    assert line.startswith("the envs' state cannot be saved exactly: checkpoints do not hold "
                           f"{DIAL_ID}'s train envs' Dial objects")
    problems = restore(_dials(), snap.state)
    assert [p.split(":")[0] for p in problems] == _dial_paths(envs)
    assert all("not captured in the snapshot" in p for p in problems)


def test_a_registered_adapter_captures_and_restores_exactly(dial_state: StateAdapter) -> None:
    first = _dials()
    first.reset(seed=3)
    _rollout(first, 30)
    snap = _saved(first)
    expected = _rollout(first, 60)

    assert snap.not_captured == [] and snap.caveats == []
    entries = _adapted(snap.state["root"], "rltrain-test.Dial")
    assert len(entries) == 2  # each sub-env's dial went through the adapter
    second = _dials()
    second.reset(seed=99)  # another start: only the dials' restore can make the runs agree
    assert restore(second, snap.state) == []
    got = _rollout(second, 60)
    assert any(step.any() for step in expected[2::3])  # episodes ended: autoresets too
    for want, have in zip(expected, got, strict=True):
        np.testing.assert_array_equal(want, have)


def test_an_adapters_caveat_and_problems_are_reported(dial_state: StateAdapter) -> None:
    envs = _dials(friction=0.1)
    envs.reset(seed=3)
    snap = _saved(envs)
    assert snap.not_captured == []
    assert snap.caveats == [f"{path} ({__name__}.Dial: its friction is not saved (make it "
                            "with friction=0 to resume exactly))" for path in _dial_paths(envs)]
    assert "its friction is not saved" in partial_state_line(
        DIAL_ID, [f"train envs: {x}" for x in snap.caveats])

    # a state the adapter refuses: said with the path, and the live dial left as it was
    live = _dials()
    live.reset(seed=5)
    before = [env.unwrapped.dial.read() for env in live.envs]
    state = _tamper_turns(snap.state["root"])
    problems = restore(live, {**snap.state, "root": state})
    assert problems == [f"{path}: not a Dial state; left as it is"
                        for path in _dial_paths(live)]
    assert [env.unwrapped.dial.read() for env in live.envs] == before


def _tamper_turns(packed: Any) -> Any:
    """``packed`` with each dial's turns saved as a string."""
    if isinstance(packed, tuple) and packed[:2] == ("cstate", "rltrain-test.Dial"):
        items = [[key, "three" if key == "turns" else value] for key, value in packed[2][1]]
        return ("cstate", packed[1], ("dict", items))
    if isinstance(packed, dict):
        return {key: _tamper_turns(value) for key, value in packed.items()}
    if isinstance(packed, (list, tuple)):
        return type(packed)(_tamper_turns(value) for value in packed)
    return packed


def test_the_live_type_must_be_the_adapters() -> None:
    """A state saved through an adapter is written back only into a value of its type."""
    adapter = register(DialState())
    try:
        envs = _dials()
        envs.reset(seed=3)
        state = _saved(envs).state
    finally:
        del ADAPTERS[adapter.name]
    problems = restore(_dials(), state)  # the adapter is gone: no live type answers the name
    assert problems == [f"{path}: expected a rltrain-test.Dial, the live value is "
                        f"{__name__}.Dial" for path in _dial_paths(envs)]


def test_registering_imports_nothing_and_names_clash() -> None:
    class Absent(DialState):
        name = "rltrain-test.Absent"
        module, type_name = "rltrain_test_never_imported", "Thing"

    adapter = register(Absent())
    try:
        assert "rltrain_test_never_imported" not in sys.modules
        assert adapter not in known().adapters.values()  # its library is not imported
        with pytest.raises(ValueError, match="clashes with"):
            register(Absent())
    finally:
        del ADAPTERS[adapter.name]


def test_importing_envstate_imports_no_env_familys_library() -> None:
    """rltrain runs without the mujoco, atari and minigrid extras: their adapters are
    registered, their packages are not imported."""
    code = ("import sys; import rltrain.envs.state; from rltrain.envs.state.adapters import "
            "ADAPTERS; print(' '.join(sorted(ADAPTERS))); "
            "print([m for m in ('mujoco', 'ale_py', 'minigrid') if m in sys.modules])")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    registered, imported = res.stdout.splitlines()
    # the shipped families' adapters at least (a family module added beside them, as the
    # extension point invites, registers one more)
    assert {"ale_py.ALEInterface", "mujoco.MjData", "rltrain.AleStickyAction"} <= set(
        registered.split())
    assert imported == "[]"
