"""Offline learning checks (slow; CI skips them): the datasets of docs/offline.md, made by its
own commands, and the figures it reports for them.

Run with: .venv/bin/python -m pytest -m slow tests/algorithms/test_learning_offline.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from filelock import FileLock

from conftest import read_jsonl, run_cli, run_tool

#: docs/offline.md's dataset recipes: (overrides of a run into ./run, rltrain-collect calls on
#: it), in order
RECIPES = {
    "cartpole": (["algo=ppo", "env=cartpole"],
                 [["run", "--episodes", "50", "--out", "expert.h5"],
                  ["--random", "--env", "CartPole-v1", "--steps", "25000", "--out", "random.h5"],
                  ["--merge", "expert.h5", "random.h5", "--out", "mixed.h5"]]),
    "pendulum": (["algo=sac", "env=pendulum", "trainer.stop_score=-300"],
                 [["run", "--buffer", "--out", "replay.h5"],
                  ["run", "--steps", "97000", "--noise", "0.8", "--weights", "final",
                   "--out", "noisy.h5"],
                  ["--merge", "replay.h5", "noisy.h5", "--out", "medium_replay.h5"]]),
}


def _make(where: Path, env: str) -> None:
    overrides, calls = RECIPES[env]
    res = run_cli(*overrides, "hydra.run.dir=run", cwd=where, timeout=600)
    assert res.returncode == 0, res.stderr
    for args in calls:
        res = run_tool("rltrain-collect", *args, cwd=where, timeout=600)
        assert res.returncode == 0, res.stderr


@pytest.fixture(scope="session")
def data(tmp_path_factory) -> dict[str, Path]:
    """Both datasets, made once for all xdist workers (under the session's shared root)."""
    root = tmp_path_factory.getbasetemp().parent / "offline_learning_data"
    root.mkdir(exist_ok=True)
    with FileLock(str(root) + ".lock"):
        for env in RECIPES:
            where = root / env
            if not (where / "done").exists():
                where.mkdir(exist_ok=True)
                _make(where, env)
                (where / "done").touch()
    return {"expert": root / "cartpole" / "expert.h5", "mixed": root / "cartpole" / "mixed.h5",
            "medium_replay": root / "pendulum" / "medium_replay.h5"}


def _train(tmp_path: Path, *args: str) -> tuple[dict, list[float]]:
    tmp_path.mkdir(exist_ok=True)
    run_dir = tmp_path / "run"
    res = run_cli(*args, f"hydra.run.dir={run_dir}", cwd=tmp_path, timeout=1800)
    assert res.returncode == 0, res.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    tests = [r["test"]["return_mean"] for r in read_jsonl(run_dir / "epochs.jsonl")]
    return summary, tests


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bc_solves_cartpole_from_an_expert_dataset(tmp_path, data, seed):
    summary, _ = _train(tmp_path, "algo=bc", "env=cartpole", f"dataset={data['expert']}",
                        f"seed={seed}")
    assert summary["solved"] and summary["best_score"] >= 475.0, summary
    assert summary["dataset"]["return_mean"] > 490  # the solved PPO run's own episodes


@pytest.mark.slow
def test_cql_beats_bc_on_mixed_cartpole_data(tmp_path, data):
    """Half expert, half random (mean return about 43): BC copies the random half too; CQL
    keeps to the expert's actions. Compared on the mean of the last five tests."""
    last5 = {}
    for algo in ("bc", "cql"):
        _, tests = _train(tmp_path / algo, f"algo={algo}", "env=cartpole",
                          f"dataset={data['mixed']}", "trainer.stop_score=null", "seed=0")
        assert len(tests) == 20
        last5[algo] = sum(tests[-5:]) / 5
    assert last5["cql"] >= 475 and last5["cql"] > last5["bc"], last5


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("algo", ["td3bc", "cql", "iql"])
def test_offline_pendulum_reaches_minus_250_within_50k_gradient_steps(tmp_path, data, algo,
                                                                        seed):
    summary, _ = _train(tmp_path, f"algo={algo}", "env=pendulum",
                        f"dataset={data['medium_replay']}", "trainer.stop_score=-250",
                        "trainer.max_epochs=50", f"seed={seed}")
    assert summary["dataset"]["return_mean"] < -300  # the behaviour policy is far worse
    # stopped at the stop score (solved means Pendulum's own threshold, -200)
    assert summary["stopped_early"] and summary["best_score"] >= -250, summary
    assert summary["gradient_step"] <= 50_000
