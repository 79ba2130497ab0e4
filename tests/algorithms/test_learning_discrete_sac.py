"""Learning check (slow; CI skips it): discrete SAC's tuned config solves CartPole-v1 for every
seed, through the CLI.

Run with: .venv/bin/python -m pytest -m slow tests/algorithms/test_learning_discrete_sac.py
"""

from __future__ import annotations

import json

import pytest

#: env steps within which the tuned config must solve CartPole-v1
#: (tests/algorithms/test_learning.py's);
#: the tuned config plans 1,000 warm-up steps and 48 epochs of 2,048, just under it
BUDGET = 100_000


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tuned_discrete_sac_solves_cartpole(cli, tmp_path, seed):
    run_dir = tmp_path / "run"
    res = cli("algo=discrete_sac", "env=cartpole", f"seed={seed}", f"hydra.run.dir={run_dir}",
              timeout=1800)
    assert res.returncode == 0, res.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["reward_threshold"] == 475.0
    assert summary["solved"] and summary["best_score"] >= 475.0, summary
    assert summary["stopped_early"]
    assert summary["env_step"] <= BUDGET, summary
