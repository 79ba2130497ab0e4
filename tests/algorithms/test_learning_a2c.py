"""Learning checks of A2C and REINFORCE (slow; CI skips them), through the CLI with the tuned
configs, 3 seeds each (LunarLander 5), against RL-Zoo3's benchmark.md
(DLR-RM/rl-baselines3-zoo), whose A2C figures come from one run each, trained on
``n_timesteps`` and evaluated with the deterministic policy:

=============  ===================  ===========
env            mean +- std          n_timesteps
=============  ===================  ===========
CartPole-v1    500.0 +- 0.0         500k
LunarLander    155.8 +- 80.4 (v2)   200k
Pendulum-v1    -163.0 +- 103.2      1M (gSDE)
=============  ===================  ===========

Each run here must reach its bar within the benchmark's env steps (the tuned configs plan no
more), judged by its best epoch's test (10 deterministic episodes). CartPole: 500, as the
benchmark. Pendulum: gymnasium's -200, better than the benchmark's mean less its spread
(-266), without the gSDE exploration the zoo's run had.

LunarLander is judged over five seeds, by their median. A2C on LunarLander in 200k steps
varies that much from seed to seed that one seed says little, and the benchmark is one run.
Ten seeds each, best test within 200k (docs/envs.md): Stable-Baselines3's own A2C with the
zoo's settings, tested the same way (scripts/peers/sb3_curve.py), median 97.0, from -70.7 to
187.4, one seed at 155.8 or more; rltrain median 62.0, from -16.5 to 170.4, one seed at 155.8
or more. A bar on every seed would fail the reference implementation too (its seed 5). The bar
is what the zoo's one run allows, its mean less two standard deviations of its episodes
(-5.0), far above a random policy's -180 or so, and the five seeds' median must reach it.

Run with: .venv/bin/python -m pytest -m slow tests/algorithms/test_learning_a2c.py
"""

from __future__ import annotations

import json
import statistics
from typing import Any

import pytest

SEEDS = [0, 1, 2]


def train(cli: Any, tmp_path: Any, *args: str) -> dict[str, Any]:
    run_dir = tmp_path / "run"
    res = cli(*args, f"hydra.run.dir={run_dir}", "logger.progress_bar=false",
              "logger.tensorboard=false", timeout=3600)
    assert res.returncode == 0, res.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    print({k: summary[k] for k in ("best_score", "best_epoch", "env_step", "wall_time")})
    return summary


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_a2c_reaches_500_on_cartpole(cli, tmp_path, seed):
    """RL-Zoo3: 500 within 500k env steps (the tuned config's whole plan)."""
    summary = train(cli, tmp_path, "algo=a2c", "env=cartpole", f"seed={seed}",
                    "trainer.stop_score=500")
    assert summary["best_score"] == 500.0, summary
    assert summary["stopped_early"] and summary["env_step"] <= 500_000, summary


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_a2c_solves_pendulum_within_the_benchmarks_steps(cli, tmp_path, seed):
    """Solved (-200, gymnasium's bar in conf/env/pendulum.yaml: better than RL-Zoo3's mean
    less its spread, -266) within RL-Zoo3's 1M env steps, without its gSDE exploration."""
    summary = train(cli, tmp_path, "algo=a2c", "env=pendulum", f"seed={seed}")
    assert summary["solved"] and summary["best_score"] >= -200.0, summary
    assert summary["env_step"] <= 1_000_000, summary


@pytest.mark.slow
def test_a2c_on_lunarlander_within_the_benchmarks_spread(cli, tmp_path):
    """The median of five seeds' best tests at least RL-Zoo3's 155.8 less two of its standard
    deviations (80.4), each within its 200k env steps (see the module's docstring for why
    the median, and why not the zoo's mean)."""
    bests = []
    for seed in range(5):
        summary = train(cli, tmp_path / f"seed{seed}", "algo=a2c", "env=lunarlander",
                        f"seed={seed}")
        assert summary["env_step"] <= 200_000, summary
        bests.append(summary["best_score"])
    assert statistics.median(bests) >= 155.8 - 2 * 80.4, bests


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_reinforce_solves_cartpole(cli, tmp_path, seed):
    """Solved (gymnasium's 475, the bar PPO and DQN meet in test_learning.py) within 200k env
    steps, the tuned config's plan: twice the slowest of the four seeds measured when it was
    chosen (45k-100k), Monte-Carlo returns being as noisy as they are."""
    summary = train(cli, tmp_path, "algo=reinforce", "env=cartpole", f"seed={seed}")
    assert summary["solved"] and summary["best_score"] >= 475.0, summary
    assert summary["env_step"] <= 200_000, summary
