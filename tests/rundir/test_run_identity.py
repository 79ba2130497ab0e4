"""A run directory holds one run (issue 45 §1). A run has an identity (``run.json``: a random
id, what it trains, where it was made) that its checkpoints, saved policies, summary and
every epoch record carry; resume, eval, export, collect and report refuse a file another run
wrote, copied into the directory, naming both runs, before anything is written. Before, a
QR-DQN checkpoint copied into a PPO run's checkpoints/ resumed with exit 0, "(exact)", and
trained QR-DQN inside the PPO directory, overwriting its records, checkpoints and best/.

The commands run in this process (their own functions, in the test's directory, so that paths
are named as a user typed them), but for a run stopped by a signal."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from conftest import (
    cheap_smoke,
    command,
    read_jsonl,
    resume_in_process,
    run_cli,
    run_in_process,
    signal_when,
)
from rltrain.commands import collect, evaluate, export
from rltrain.rundir.checkpoint import load_checkpoint, load_policy

SMOKE = ["experiment=smoke", "logger.tensorboard=false"]
#: the run whose directory is tampered with, and the runs the foreign files come from: another
#: algorithm, the same one with another seed, the same one on another env
RUNS = {"own": ["algo=ppo"], "qrdqn": ["algo=qrdqn", "algo.quantiles=16"],
        "seed1": ["algo=ppo", "seed=1"], "acrobot": ["algo=ppo", "env=acrobot"]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("runs")
    for name, args in RUNS.items():
        # shortened (cheap_smoke): the runs are the files they leave, not what they learnt
        run_in_process(where / name, *SMOKE, *args, *cheap_smoke(args[0].split("=")[1]))
    return {name: where / name for name in RUNS}


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's directory as the working directory, as the user's shell has it."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def copy(run: Path, to: Path) -> Path:
    shutil.copytree(run, to, symlinks=True)
    return to


def digests(run: Path) -> dict[str, str]:
    """Every file of a run directory (but its lock and log) by its bytes."""
    return {str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run.rglob("*")) if p.is_file()
            and p.name not in (".rltrain.lock", "rltrain.log")}


def test_every_file_of_a_run_carries_its_identity(runs: dict[str, Path]) -> None:
    run = runs["own"]
    identity = json.loads((run / "run.json").read_text())
    assert {key: identity[key] for key in ("algo", "env", "seed", "dir")} == {
        "algo": "ppo", "env": "CartPole-v1", "seed": 0, "dir": str(run)}
    assert len(identity["id"]) == 16
    assert [r["run"] for r in read_jsonl(run / "epochs.jsonl")] == [identity["id"]] * 2
    assert json.loads((run / "summary.json").read_text())["run"] == identity
    assert load_checkpoint(run / "checkpoints" / "last.pt")["run"] == identity
    for name in ("best", "final"):
        assert load_policy(run / name / "policy.pt")["meta"]["run"] == identity
    others = {json.loads((runs[n] / "run.json").read_text())["id"] for n in RUNS}
    assert len(others) == len(RUNS)  # no two runs share an id


@pytest.mark.parametrize("other", ["qrdqn", "seed1", "acrobot"])
@pytest.mark.parametrize("part", ["checkpoints/last.pt", "best/policy.pt", "epochs.jsonl"])
def test_a_resume_refuses_another_runs_file_naming_both_and_writes_nothing(
        runs: dict[str, Path], here: Path, other: str, part: str) -> None:
    run = copy(runs["own"], here / "R")
    if part == "epochs.jsonl":  # another run's record appended
        with (run / part).open("a") as f:
            f.write((runs[other] / part).read_text().splitlines()[0] + "\n")
    else:
        shutil.copy(runs[other] / part, run / part)
    before = digests(run)
    code, said = resume_in_process(Path("R"), "trainer.max_epochs=3")
    assert code == 2, said
    (line,) = said
    assert "\n" not in line
    theirs = json.loads((runs[other] / "run.json").read_text())["id"]
    ours = json.loads((run / "run.json").read_text())["id"]
    assert line.startswith(f"error: resume=R: R/{part} ")
    assert f"run {theirs}" in line and f"run {ours}" in line, line
    assert "a resume continues the directory's own run" in line
    assert digests(run) == before  # nothing rotated, nothing written


def test_a_copied_run_directory_is_still_its_own_run(runs: dict[str, Path], here: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """Moving or copying a run keeps its identity: its own files resume, evaluate, export."""
    copy(runs["own"], here / "moved")
    caplog.set_level(logging.INFO)
    assert resume_in_process(Path("moved"), "trainer.max_epochs=3") == (0, [])
    assert any(m.endswith("(exact)") for m in caplog.messages), caplog.messages
    records = read_jsonl(here / "moved" / "epochs.jsonl")
    assert [r["epoch"] for r in records] == [1, 2, 3] and len({r["run"] for r in records}) == 1
    for main in (evaluate.main, export.main):
        assert command(main, "moved").returncode == 0


@pytest.mark.parametrize("main", [evaluate.main, export.main], ids=["rltrain-eval",
                                                                   "rltrain-export"])
@pytest.mark.parametrize(("part", "weights"), [("best/policy.pt", "best"),
                                               ("final/policy.pt", "final"),
                                               ("checkpoints/last.pt", "last")])
def test_eval_and_export_refuse_another_runs_weights(runs: dict[str, Path], here: Path,
                                                     main: Callable[[list[str]], None],
                                                     part: str, weights: str) -> None:
    run = copy(runs["own"], here / "R")
    shutil.copy(runs["seed1"] / part, run / part)  # the same algorithm and env: only the id
    before = digests(run)
    res = command(main, "R", "--weights", weights)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert f"R/{part} is another run's (ppo on CartPole-v1, seed 1, run " in res.stderr
    assert "these are not this run's weights" in res.stderr
    assert digests(run) == before


def test_collect_refuses_another_runs_replay_buffer(runs: dict[str, Path], here: Path) -> None:
    other = here / "dqn"
    run_in_process(other, *SMOKE, "algo=dqn")
    mine = here / "dqn2"
    run_in_process(mine, *SMOKE, "algo=dqn", "seed=3")
    shutil.copy(other / "checkpoints" / "last.pt", mine / "checkpoints" / "last.pt")
    res = command(collect.main, mine, "--buffer", "--out", "d.h5")
    assert res.returncode != 0 and "is another run's" in res.stderr, res.stderr
    assert not (here / "d.h5").exists()


@pytest.mark.parametrize("part", ["epochs.jsonl", "summary.json"])
def test_the_report_refuses_a_run_holding_another_runs_record(runs: dict[str, Path],
                                                              here: Path, part: str) -> None:
    pytest.importorskip("rliable", reason="needs the report extra: pip install -e '.[report]'")
    from rltrain.commands import report

    run = copy(runs["own"], here / "R")
    if part == "epochs.jsonl":
        with (run / part).open("a") as f:
            f.write((runs["qrdqn"] / part).read_text().splitlines()[1] + "\n")
    else:
        shutil.copy(runs["qrdqn"] / part, run / part)
    copy(runs["seed1"], here / "S")
    res = command(report.main, "R", "S", "--out", "rep")
    assert res.returncode == 0, res.stderr  # the other run is reported
    theirs = json.loads((runs["qrdqn"] / "run.json").read_text())["id"]
    (warning,) = [line for line in res.stderr.splitlines() if "skipping R" in line]
    assert theirs in warning and "this directory's run is ppo on CartPole-v1, seed 0" in warning


def test_a_run_made_before_runs_had_ids_is_judged_by_what_it_trains(
        runs: dict[str, Path], here: Path) -> None:
    """No run.json, and files without ids: a checkpoint of another algorithm is still
    refused (its config says so); the directory's own resumes and gets an identity."""
    run = copy(runs["own"], here / "old")
    (run / "run.json").unlink()
    for path in (run / "checkpoints").glob("*.pt"):
        state = torch.load(path, weights_only=True)
        del state["run"]
        torch.save(state, path)
    rows = read_jsonl(run / "epochs.jsonl")
    (run / "epochs.jsonl").write_text("".join(
        json.dumps({k: v for k, v in r.items() if k != "run"}) + "\n" for r in rows))
    stranger = copy(run, here / "stranger")
    shutil.copy(runs["qrdqn"] / "checkpoints" / "last.pt",
                stranger / "checkpoints" / "last.pt")
    code, said = resume_in_process(Path("stranger"), "trainer.max_epochs=3")
    assert code == 2 and "is another run's (qrdqn on CartPole-v1" in said[0]
    assert "this directory's run is ppo on CartPole-v1, seed 0;" in said[0]
    assert resume_in_process(Path("old"), "trainer.max_epochs=3") == (0, [])
    identity = json.loads((run / "run.json").read_text())
    assert identity["algo"] == "ppo" and read_jsonl(run / "epochs.jsonl")[-1]["run"] == (
        identity["id"])


def test_a_damaged_identity_is_said_by_name(runs: dict[str, Path], here: Path) -> None:
    run = copy(runs["own"], here / "R")
    (run / "run.json").write_text('{"id": 7}')
    code, said = resume_in_process(Path("R"))
    assert code == 2 and "R/run.json is not a run's identity" in said[0]
    assert "Traceback" not in said[0]
    res = command(evaluate.main, "R")
    assert res.returncode != 0 and "R/run.json is not a run's identity" in res.stderr
    assert "Traceback" not in res.stderr


def test_a_run_stopped_at_once_before_its_first_checkpoint_is_replaced_by_a_new_one(
        tmp_path: Path) -> None:
    """Its summary says interrupted, but nothing can resume it: running the same command
    again replaces it, saying so, where it once refused the directory and pointed at a
    resume that then failed ("no usable checkpoint")."""
    command = ["experiment=smoke", "trainer.max_epochs=3", "trainer.epoch_num_steps=16384",
               "trainer.collection_step_num_env_steps=8192", "logger.progress_interval_s=0",
               "hydra.run.dir=run"]
    res = signal_when(command, tmp_path, lambda line: line.startswith("  epoch 1/3: "),
                      signal.SIGINT, signal.SIGINT, ack="received; finishing the current step")
    assert res.returncode == 130 and "no checkpoint was written" in res.stderr, res.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == (
        "interrupted")
    assert "resume with" not in res.stderr
    # (one rollout of 512, not of the first command's 8,192: a run that completes is all
    # this needs)
    res = run_cli(*command[:-1], "trainer.max_epochs=1", "trainer.epoch_num_steps=512",
                  "trainer.collection_step_num_env_steps=512", "hydra.run.dir=run", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert ("note: replacing what an attempt without a checkpoint left in " in res.stderr
            and "it was stopped at once, before its first checkpoint" in res.stderr)
    assert [r["epoch"] for r in read_jsonl(tmp_path / "run" / "epochs.jsonl")] == [1]
