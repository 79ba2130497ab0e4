"""Offline runs: every offline algorithm from a dataset that rltrain-collect wrote (through the
real CLI, once per algorithm; on its other action spaces in this process), the run directory
it leaves, exact resume, the dataset referenced by its hash, and the ways a user can get an
offline run wrong."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from conftest import (
    SIGTERM,
    command,
    learning_records,
    read_jsonl,
    refusal,
    resume_in_process,
    run_in_process,
    signal_when,
)
from rltrain.algorithms import ALGORITHMS, DISCRETE
from rltrain.commands import collect, evaluate

OFFLINE = sorted(name for name, spec in ALGORITHMS.items() if "offline" in spec.trainers)
#: every offline algorithm on each action space it accepts (listed from the registry, so a
#: new one is smoke-run without touching this file)
SMOKE_CASES = [(name, env) for name in OFFLINE
               for env in (["cartpole"] if DISCRETE in ALGORITHMS[name].actions else [])
               + (["pendulum"] if "continuous" in ALGORITHMS[name].actions else [])]
#: through the CLI: each algorithm's first case (one real process per algorithm)
CLI_CASES = {name: env for name, env in reversed(SMOKE_CASES)}
SMALL = ["experiment=smoke", "trainer.epoch_num_steps=200", "trainer.batch_size=32",
         "logger.progress_bar=false"]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict[str, Path]:
    """A uniformly random dataset per env, written by rltrain-collect."""
    where = tmp_path_factory.mktemp("datasets")
    out = {"cartpole": where / "cartpole.h5", "pendulum": where / "pendulum.npz"}
    for args in (["--env", "CartPole-v1", "--episodes", "20", "--out", out["cartpole"]],
                 ["--env", "Pendulum-v1", "--steps", "2000", "--out", out["pendulum"]]):
        res = command(collect.main, "--random", *args)
        assert res.returncode == 0, res.stderr
    return out


def test_offline_algorithms_are_registered():
    assert {"bc", "td3bc", "cql", "iql"} <= set(OFFLINE)


@pytest.mark.parametrize(("algo", "env"), SMOKE_CASES, ids=[f"{a}-{e}" for a, e in SMOKE_CASES])
def test_offline_smoke_run_writes_complete_run_dir(cli, tmp_path, capsys, datasets, algo, env):
    run_dir = tmp_path / "run"
    args = [*SMALL, f"algo={algo}", f"env={env}", f"dataset={datasets[env]}"]
    if CLI_CASES[algo] == env:
        res = cli(*args, f"hydra.run.dir={run_dir}")
        assert res.returncode == 0, res.stderr
        assert "Traceback" not in res.stderr
        out = res.stdout
    else:
        assert run_in_process(run_dir, *args).status == "completed"
        out = capsys.readouterr().out
    assert "epoch   2/2" in out and "updates" in out
    rows = read_jsonl(run_dir / "epochs.jsonl")
    assert [r["epoch"] for r in rows] == [1, 2]
    # an epoch is epoch_num_steps gradient steps, then a test on the live env; no env step
    assert [r["gradient_step"] for r in rows] == [200, 400]
    assert all(r["env_step"] == 0 for r in rows)
    assert all(r["test"]["n_episodes"] == 2 for r in rows)
    spec = ALGORITHMS[algo]
    assert {key for key, _ in spec.console} <= rows[0]["update"].keys()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["gradient_step"] == 400
    data = summary["dataset"]
    assert data["path"] == str(datasets[env].resolve()) and len(data["sha256"]) == 64
    assert data["transitions"] > 0
    # TensorBoard's curves are against gradient steps offline
    acc = EventAccumulator(str(run_dir / "tb"))
    acc.Reload()
    assert [s.step for s in acc.Scalars("test/return_mean")] == [200, 400]
    ckpt = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    # the data is referenced (by its hash), not copied: the storage state is the sampler's
    assert set(ckpt["trainer"]["storage"]) == {"sampler"}
    assert ckpt["dataset"]["sha256"] == data["sha256"]
    for name in ("best", "final"):
        policy = torch.load(run_dir / name / "policy.pt", weights_only=True)
        assert policy["meta"]["algo"] == algo
    # the saved policy evaluates like any other
    res = command(evaluate.main, run_dir, "--episodes", "2")
    assert res.returncode == 0, res.stderr


# IQL with the slow checks: the offline trainer's resume is the same for both
@pytest.mark.parametrize("algo", ["cql", pytest.param("iql", marks=pytest.mark.slow)])
def test_offline_sigterm_and_resume_equal_an_unbroken_run(tmp_path, datasets, algo):
    # epochs of 100 update steps (CQL's are dear: about 0.5 s an epoch here), two of them
    # still to come when the signal is sent
    args = [*SMALL, f"algo={algo}", "env=pendulum", f"dataset={datasets['pendulum']}",
            "trainer.max_epochs=4", "logger.tensorboard=false", "trainer.epoch_num_steps=100"]
    full, broken = tmp_path / "full", tmp_path / "broken"
    run_in_process(full, *args)
    seen = []

    def mid_epoch_3(line: str) -> bool:  # the end of epoch 2's line: epoch 3 is under way
        seen.append(line.startswith("epoch   2/4"))
        return any(seen)

    res = signal_when([*args, f"hydra.run.dir={broken}"], tmp_path, mid_epoch_3, SIGTERM)
    assert res.returncode == 143, res.stderr
    assert json.loads((broken / "summary.json").read_text())["interrupted"] is True
    assert resume_in_process(broken) == (0, [])
    summary = json.loads((broken / "summary.json").read_text())
    assert summary["resumes"] and all(r["exact"] for r in summary["resumes"])
    assert learning_records(broken) == learning_records(full)


def test_resume_from_another_directory_finds_a_relative_dataset(tmp_path, datasets,
                                                                monkeypatch):
    """dataset=data.h5, relative to where the run began; resumed from elsewhere, the run
    finds the file it began with (the checkpoint holds its absolute path and hash)."""
    start, elsewhere = tmp_path / "start", tmp_path / "elsewhere"
    start.mkdir()
    elsewhere.mkdir()
    shutil.copy(datasets["cartpole"], start / "data.h5")
    run_dir = tmp_path / "run"
    res = signal_when([*SMALL, "algo=bc", "env=cartpole", "dataset=data.h5",
                       "trainer.max_epochs=4", f"hydra.run.dir={run_dir}"], start,
                      lambda line: line.startswith("epoch   1/4"), SIGTERM)
    assert res.returncode == 143, res.stderr
    monkeypatch.chdir(elsewhere)
    assert resume_in_process(run_dir) == (0, [])
    assert [r["epoch"] for r in read_jsonl(run_dir / "epochs.jsonl")] == [1, 2, 3, 4]


def test_resume_refuses_a_dataset_whose_content_changed(tmp_path, datasets):
    data = tmp_path / "data.h5"
    shutil.copy(datasets["cartpole"], data)
    run_dir = tmp_path / "run"
    args = [*SMALL, "algo=bc", "env=cartpole", f"dataset={data}", "trainer.max_epochs=4",
            f"hydra.run.dir={run_dir}"]
    res = signal_when(args, tmp_path, lambda line: line.startswith("epoch   1/4"), SIGTERM)
    assert res.returncode == 143, res.stderr
    before = (run_dir / "epochs.jsonl").read_bytes()
    other = tmp_path / "other.h5"
    res = command(collect.main, "--random", "--env", "CartPole-v1", "--episodes", "3",
                  "--seed", "7", "--out", other)
    assert res.returncode == 0, res.stderr
    shutil.copy(other, data)
    code, said = resume_in_process(run_dir)
    assert code == 2 and len(said) == 1
    assert "is not the one this run began with" in said[0] and "Traceback" not in said[0]
    assert (run_dir / "epochs.jsonl").read_bytes() == before  # nothing touched


BAD = {
    "online algorithm given a dataset": (
        ["algo=dqn", "env=cartpole", "dataset={cartpole}"],
        ["dataset= is for the offline algorithms", "algo=dqn learns online"]),
    "offline algorithm without a dataset": (
        ["algo=bc", "env=cartpole"], ["algo=bc learns offline", "dataset=PATH"]),
    "missing dataset file": (
        ["algo=bc", "env=cartpole", "dataset=nowhere.h5"], ["nowhere.h5"]),
    "dataset of another env": (
        ["algo=bc", "env=cartpole", "dataset={pendulum}"],
        ["(collected on Pendulum-v1) has observation space Box([-1, -1, -8], [1, 1, 8], (3,), "
         "float32) but CartPole-v1 has Box([-4.8,"]),
    "continuous-only algorithm on a discrete dataset": (
        ["algo=td3bc", "env=cartpole", "dataset={cartpole}"],
        ["algo=td3bc needs continuous actions"]),
    "batch larger than the dataset": (
        ["algo=bc", "env=cartpole", "dataset={cartpole}", "trainer.batch_size=100000"],
        ["trainer.batch_size=100000 is larger than the dataset"]),
    "no batch size": (
        ["algo=bc", "env=cartpole", "dataset={cartpole}", "trainer.batch_size=null"],
        ["trainer.batch_size=null", "trainer.batch_size=256"]),
    "reward scaling offline": (
        ["algo=iql", "env=pendulum", "dataset={pendulum}", "env.normalize.reward=true"],
        ["env.normalize.reward=true", "offline run collects none"]),
    "unknown minari dataset": (
        ["algo=bc", "env=cartpole", "dataset=minari:nothing/here-v0"], ["nothing/here-v0"]),
    "empty dataset": (["algo=bc", "env=cartpole", "dataset="], ["dataset="]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_offline_input_is_one_clear_line(tmp_path, datasets, case, monkeypatch):
    """Refused before anything is written (the CLI prints the message after ``rltrain:
    error: ``, exit 2: tests/commands/test_cli.py)."""
    args, needles = BAD[case]
    args = [a.format(**{k: str(v) for k, v in datasets.items()}) for a in args]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    message = refusal(tmp_path / "run", *SMALL, *args)
    assert "Traceback" not in message
    for needle in needles:
        assert needle in message, message


def test_a_minari_dataset_from_minaris_own_collector_trains(tmp_path, monkeypatch):
    """Minari's DataCollector records a random CartPole policy into a local dataset (its
    ``create_dataset``); ``dataset=minari:ID`` trains BC on it."""
    minari = pytest.importorskip("minari", reason="minari is not installed (extra: minari)")
    pytest.importorskip("jax", reason="jax is not installed: Minari's DataCollector needs it "
                        "(pip install 'minari[create]')")
    import gymnasium as gym

    store = tmp_path / "minari"
    env = minari.DataCollector(gym.make("CartPole-v1"))
    import os

    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(store)
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        for _ in range(30):
            done = False
            while not done:
                _, _, terminated, truncated, _ = env.step(env.action_space.sample())
                done = terminated or truncated
            env.reset()
        dataset = env.create_dataset(dataset_id="rltrain/cartpole-random-v0",
                                     algorithm_name="uniform random", author="rltrain tests",
                                     author_email="tests@rltrain.invalid",
                                     code_permalink="https://example.invalid/rltrain")
        returns = [float(ep.rewards.sum()) for ep in dataset.iterate_episodes()]
    finally:
        if old is None:
            os.environ.pop("MINARI_DATASETS_PATH")
        else:
            os.environ["MINARI_DATASETS_PATH"] = old
    run_dir = tmp_path / "run"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(store))
    info = run_in_process(run_dir, *SMALL, "algo=bc", "env=cartpole",
                          "dataset=minari:rltrain/cartpole-random-v0")
    assert info.status == "completed", info.error
    data = json.loads((run_dir / "summary.json").read_text())["dataset"]
    assert data["spec"] == "minari:rltrain/cartpole-random-v0"
    assert data["episodes"] == len(returns) == 30
    assert data["return_mean"] == pytest.approx(sum(returns) / len(returns))
    assert len(read_jsonl(run_dir / "epochs.jsonl")) == 2
