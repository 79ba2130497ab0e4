"""Exact resume on the image and Dict envs: SIGTERM mid-epoch (a real `rltrain`), then the
resume (in this process), equal to an unbroken run (epochs.jsonl, time fields aside). MiniGrid
(a Dict observation, PPO) in the default suite; MinAtar (an image, PPO and DQN), Atari with
env/atari.yaml's sticky actions (PPO on Pong, DQN on Breakout with frame-stacked storage; the
emulator's state through ALE's cloneState, its held action through rltrain's record) and
CarRacing (Box2D, which says it is not exact) behind ``slow``: CNNs train slowly on a CPU.
The in-process round trips of the same envs, in the default suite: tests/envs/test_ale_state.py."""

from __future__ import annotations

import json
import signal

import pytest

from conftest import (
    interrupt_after_first_epoch,
    learning_records,
    read_jsonl,
    resume_in_process,
    run_in_process,
)
from rltrain.rundir.checkpoint import load_checkpoint

COMMON = ["trainer.stop_score=null", "seed=2", "logger.progress_bar=false",
          "env.num_test_envs=2", "trainer.test_step_num_episodes=2"]
RUNS = {
    # a collection step of 256 env steps: a signal after epoch 1's line lands mid-epoch 2
    "minigrid-ppo": ["algo=ppo", "env=minigrid", "trainer.max_epochs=3",
                     "trainer.epoch_num_steps=2048", "trainer.collection_step_num_env_steps=256",
                     "trainer.update_step_num_repetitions=2", "trainer.batch_size=256"],
    "minatar-ppo": ["algo=ppo", "env=minatar", "trainer.max_epochs=3",
                    "trainer.epoch_num_steps=2048", "trainer.collection_step_num_env_steps=256",
                    "trainer.update_step_num_repetitions=2", "trainer.batch_size=256"],
    "minatar-dqn": ["algo=dqn", "env=minatar", "env.id=MinAtar/Breakout-v1",
                    "trainer.max_epochs=3", "trainer.epoch_num_steps=1600",
                    "trainer.random_warmup_env_steps=400", "buffer.size=20000",
                    "algo.target_update_interval=100", "trainer.batch_size=32",
                    "trainer.update_step_num_gradient_steps_per_sample=0.25"],
    # Atari with the env file's defaults: sticky actions (0.25), whose held action ALE's saved
    # state leaves out and rltrain keeps beside it (tests/envs/test_ale_state.py)
    "atari-ppo": ["algo=ppo", "env=atari", "env.id=ALE/Pong-v5", "trainer.max_epochs=3",
                  "trainer.epoch_num_steps=1024", "trainer.collection_step_num_env_steps=256",
                  "env.num_train_envs=4", "trainer.update_step_num_repetitions=1",
                  "trainer.test_step_num_episodes=1", "env.num_test_envs=1"],
    "atari-dqn": ["algo=dqn", "env=atari", "env.id=ALE/Breakout-v5", "trainer.max_epochs=3",
                  "trainer.epoch_num_steps=1024", "trainer.random_warmup_env_steps=256",
                  "buffer.size=20000", "algo.target_update_interval=50",
                  "trainer.collection_step_num_env_steps=64",
                  "trainer.update_step_num_gradient_steps_per_sample=0.05",
                  "trainer.test_step_num_episodes=1", "env.num_test_envs=1"],
}
SLOW = {"minatar-ppo", "minatar-dqn", "atari-ppo", "atari-dqn"}


def case(name: str):
    return pytest.param(name, marks=[pytest.mark.slow] if name in SLOW else [], id=name)


@pytest.mark.parametrize("name", [case(n) for n in RUNS])
def test_sigterm_then_resume_equals_unbroken_run(tmp_path, caplog, name):
    full, broken = tmp_path / "full", tmp_path / "broken"
    args = [*RUNS[name], *COMMON]
    run_in_process(full, *args)
    assert json.loads((full / "summary.json").read_text())["env_state"] == {
        "exact": True, "not_captured": []}

    res = interrupt_after_first_epoch([*args, f"hydra.run.dir={broken}"], tmp_path,
                                      signal.SIGTERM, unbroken=full)
    assert res.returncode == 143, res.stderr
    ckpt = load_checkpoint(broken / "checkpoints" / "last.pt")
    assert ckpt["trainer"]["partial"] is not None, "the signal did not land mid-epoch"
    assert len(read_jsonl(broken / "epochs.jsonl")) == ckpt["trainer"]["epoch"] - 1

    assert resume_in_process(broken) == (0, [])
    assert "inexact" not in caplog.text
    assert learning_records(broken) == learning_records(full)


@pytest.mark.slow
def test_carracing_says_its_resume_is_not_exact(tmp_path, caplog):
    run_dir = tmp_path / "run"
    run_in_process(run_dir, "algo=ppo", "env=carracing_discrete", "trainer.max_epochs=1",
                   "trainer.epoch_num_steps=256", "trainer.collection_step_num_env_steps=128",
                   "env.num_train_envs=2", "env.max_episode_steps=100", *COMMON)
    assert "cannot be saved exactly" in caplog.text
    state = json.loads((run_dir / "summary.json").read_text())["env_state"]
    assert state["exact"] is False
    assert any("Box2D" in item or "b2" in item for item in state["not_captured"]), state
