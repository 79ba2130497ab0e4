"""Learning checks on image and Dict observations (slow; CI skips them).

- MiniGrid DoorKey-5x5, PPO on MiniGrid's own image and direction (the dict encoder), tuned
  config: a mean test return >= 0.9 within 150k env steps, every seed (RL-Zoo3's PPO on
  flattened observations reaches 0.964 at 100k).
- The tiny pixel env (tests/pixel_envs.py), every online algorithm on its action space: the
  CNN sees the image (a policy blind to it scores 10 of 20 on average).

Run with: .venv/bin/python -m pytest -m slow tests/algorithms/test_learning_images.py
"""

from __future__ import annotations

import json

import pytest

from pixel_envs import PIXELS_ID

DOORKEY_BUDGET = 150_000


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ppo_solves_doorkey_5x5_from_its_image(cli, tmp_path, seed):
    run_dir = tmp_path / "run"
    res = cli("algo=ppo", "env=minigrid", f"seed={seed}", f"hydra.run.dir={run_dir}",
              timeout=1800)
    assert res.returncode == 0, res.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["reward_threshold"] == 0.9
    assert summary["solved"] and summary["best_score"] >= 0.9, summary
    assert summary["env_step"] <= DOORKEY_BUDGET, summary


@pytest.mark.slow
@pytest.mark.parametrize(("algo", "extra"), [("ppo", []), ("dqn", []),
                                             ("sac", ["env.kwargs.continuous=true"])])
def test_a_cnn_learns_where_the_pixel_is(cli, tmp_path, algo, extra):
    run_dir = tmp_path / "run"
    res = cli(f"algo={algo}", "env=gym", f"env.id=pixel_envs:{PIXELS_ID}", *extra,
              "env.reward_threshold=18", "trainer.max_epochs=20", "trainer.epoch_num_steps=2048",
              "trainer.test_step_num_episodes=10", f"hydra.run.dir={run_dir}", timeout=1800)
    assert res.returncode == 0, res.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["solved"] and summary["best_score"] >= 18, summary
