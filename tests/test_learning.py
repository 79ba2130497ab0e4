"""Learning checks (slow; CI skips them): the tuned configs solve CartPole for every seed.

Run with: .venv/bin/python -m pytest -m slow
"""

from __future__ import annotations

import json

import pytest

#: env-step budget within which the tuned configs must solve CartPole-v1
BUDGET = 100_000


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_tuned_config_solves_cartpole(cli, tmp_path, algo, seed):
    run_dir = tmp_path / "run"
    res = cli(f"algo={algo}", "env=cartpole", f"seed={seed}", f"hydra.run.dir={run_dir}",
              timeout=900)
    assert res.returncode == 0, res.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["solved"], summary
    assert summary["best_score"] >= summary["reward_threshold"] == 475.0
    assert summary["env_step"] <= BUDGET
    assert summary["stopped_early"]
