"""MuJoCo envs resume exactly: MjData's state captured with MuJoCo's own API, restored into a
fresh env, and the continuation bit-identical to the uninterrupted one."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from conftest import SIGTERM, learning_records, resume_in_process, run_in_process, signal_when
from rltrain.envs.state import Snapshot, restore, snapshot

pytest.importorskip("mujoco", reason="needs the mujoco extra: pip install -e '.[mujoco]'")


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # MuJoCo writes its compiler warnings (Humanoid's settotalmass) to ./MUJOCO_LOG.TXT
    monkeypatch.chdir(tmp_path)


def _saved(obj: Any) -> Snapshot:
    """A snapshot as a checkpoint gives it back (torch.load(weights_only=True))."""
    snap = snapshot(obj)
    buffer = io.BytesIO()
    torch.save(snap.state, buffer)
    buffer.seek(0)
    return Snapshot(torch.load(buffer, weights_only=True), snap.not_captured)


def _make(env_id: str) -> gym.vector.VectorEnv:
    envs = gym.make_vec(env_id, 2, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP})
    envs.reset(seed=11)
    return envs


def _rollout(envs: gym.vector.VectorEnv, actions: list[np.ndarray]) -> list[tuple]:
    out = []
    for action in actions:
        obs, reward, terminated, truncated, _ = envs.step(action)
        out.append((obs, reward, terminated, truncated))
    return out


# Hopper: episodes end (autoresets draw from the restored RNGs); Ant-v5 observes contact forces
# (cfrc_ext) and, like Humanoid-v5 (xipos), reads body positions before it steps
@pytest.mark.parametrize(("env_id", "steps"), [("Hopper-v5", 300), ("Ant-v5", 200),
                                               ("Humanoid-v5", 150)])
def test_restore_into_a_fresh_env_is_bit_identical(env_id: str, steps: int) -> None:
    first = _make(env_id)
    rng = np.random.default_rng(0)
    actions = [rng.uniform(-1, 1, first.action_space.shape).astype(np.float32)
               for _ in range(40 + steps)]
    _rollout(first, actions[:40])  # mid-episode
    snap = _saved(first)
    expected = _rollout(first, actions[40:])

    second = _make(env_id)  # built the same way: only the restore moves it to mid-episode
    assert snap.not_captured == []  # MjModel is configuration, the renderer holds nothing
    assert restore(second, snap.state) == []
    got = _rollout(second, actions[40:])

    if env_id == "Hopper-v5":
        assert any(step[2].any() for step in expected)
    for i, (want, have) in enumerate(zip(expected, got, strict=True)):
        for a, b in zip(want, have, strict=True):
            np.testing.assert_array_equal(a, b, err_msg=f"step {i}")
    first.close()
    second.close()


class Holder:
    """Holds an MjData directly, so that only its own restore can object."""

    def __init__(self, data: Any) -> None:
        self.data = data


@pytest.mark.parametrize(("saved_id", "live_id"), [
    ("Hopper-v5", "Walker2d-v5"),  # another state size
    ("HalfCheetah-v5", "Walker2d-v5"),  # the same state size, other geoms
])
def test_a_different_model_is_refused_and_left_alone(saved_id: str, live_id: str) -> None:
    saved = gym.make(saved_id)
    saved.reset(seed=0)
    state = _saved(Holder(saved.unwrapped.data)).state
    live = gym.make(live_id)
    live.reset(seed=0)
    data = live.unwrapped.data
    qpos, xpos = data.qpos.copy(), data.xpos.copy()
    problems = restore(Holder(data), state)
    assert problems and all(p.startswith("envs.data: ") and "different model" in p
                            for p in problems), problems
    np.testing.assert_array_equal(data.qpos, qpos)  # all or nothing: nothing written
    np.testing.assert_array_equal(data.xpos, xpos)


def test_a_tampered_state_gives_problems_not_exceptions() -> None:
    env = gym.make("Hopper-v5")
    env.reset(seed=0)
    holder = Holder(env.unwrapped.data)
    state = _saved(holder).state
    tag, name, attrs = state["root"]
    kind, c_name, (dict_tag, items) = attrs["data"]

    def with_data(packed: Any) -> dict[str, Any]:
        return {**state, "root": (tag, name, {"data": packed})}

    spec_one = (dict_tag, [[k, 1 if k == "spec" else v] for k, v in items])
    problems = restore(holder, with_data((kind, c_name, spec_one)))
    assert len(problems) == 1 and "not a MuJoCo integration state" in problems[0], problems
    assert restore(holder, with_data((kind, c_name, 5))) == [
        "envs.data: malformed mujoco.MjData state"]
    assert restore(holder, with_data((kind, "os.system", spec_one))) == [
        "envs.data: expected a os.system, the live value is mujoco._structs.MjData"]
    assert restore(Holder(np.zeros(3)), state) == [
        "envs.data: expected a mujoco.MjData, the live value is numpy.ndarray"]

SAC_HOPPER = ["algo=sac", "env=hopper", "algo.hidden_sizes=[32,32]", "buffer.size=2000",
              "trainer.epoch_num_steps=150", "trainer.random_warmup_env_steps=100",
              "trainer.max_epochs=2", "trainer.test_step_num_episodes=2", "env.num_test_envs=2",
              "env.max_episode_steps=100", "trainer.stop_score=null", "logger.tensorboard=false"]


def test_sac_on_hopper_resumes_exactly(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """SIGTERM mid-epoch, resume: the records equal an unbroken run's."""
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    run_in_process(whole, *SAC_HOPPER)
    res = signal_when([*SAC_HOPPER, f"hydra.run.dir={broken}"], tmp_path,
                      lambda line: line.startswith("epoch   1/2"), SIGTERM)
    assert res.returncode == 128 + SIGTERM, res.stdout + res.stderr
    assert "cannot be saved exactly" not in res.stdout + res.stderr
    caplog.clear()
    caplog.set_level(logging.INFO)
    assert resume_in_process(broken) == (0, [])
    assert any(m.endswith("(exact)") for m in caplog.messages) and "inexact" not in caplog.text
    assert learning_records(broken) == learning_records(whole)
    summary = json.loads((broken / "summary.json").read_text())
    assert summary["env_state"] == {"exact": True, "not_captured": []}
    assert [r["exact"] for r in summary["resumes"]] == [True]
