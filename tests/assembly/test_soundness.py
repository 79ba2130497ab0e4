"""Each silent wrong answer of the "sound before broad" issue: a run that once exited 0 with a
wrong result now gives the right one or a clear message. Signals, locks between processes and
the CLI's messages through real `rltrain` processes; the runs they are compared with, and the
resumes, in this process."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from conftest import (
    RLTRAIN,
    SIGKILL,
    SIGTERM,
    cli_env,
    command,
    learning_records,
    read_jsonl,
    resume_in_process,
    run_in_process,
    signal_when,
    wait_for,
)
from rltrain.commands import evaluate, export
from rltrain.rundir.checkpoint import load_checkpoint

# four epochs; a progress line after every training step shows where a run is
LAST_EPOCH = {
    "ppo": ["algo=ppo", "env=cartpole", "trainer.epoch_num_steps=4096"],
    "dqn": ["algo=dqn", "env=cartpole", "trainer.epoch_num_steps=2048", "buffer.size=20000"],
}
COMMON = ["seed=1", "trainer.max_epochs=4", "trainer.stop_score=null", "env.num_test_envs=2",
          "logger.progress_interval_s=0", "logger.tensorboard=false"]
#: test episodes a test step, by where the signal lands: long test steps (30 episodes on 2
#: envs, about 7,500 steps each by epoch 4) so that a signal sent as a test step begins lands
#: inside it; a signal in training needs none (the 30 episodes were 3/4 of PPO's run time)
TEST_EPISODES = {"training": 2, "test": 30}


def last_epoch_args(algo: str, moment: str) -> list[str]:
    return [*LAST_EPOCH[algo], *COMMON, f"trainer.test_step_num_episodes={TEST_EPISODES[moment]}"]


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under ``root`` (hidden ones included) with the hash of its bytes."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- 1. the last epoch
@pytest.fixture(scope="module")
def unbroken(tmp_path_factory) -> Callable[[str, str], Path]:
    """The unbroken run of each algorithm and moment of interruption, made once a module."""
    runs: dict[tuple[str, str], Path] = {}

    def get(algo: str, moment: str) -> Path:
        if (algo, moment) not in runs:
            runs[algo, moment] = tmp_path_factory.mktemp(f"unbroken-{algo}-{moment}") / "full"
            run_in_process(runs[algo, moment], *last_epoch_args(algo, moment))
        return runs[algo, moment]

    return get


@pytest.mark.parametrize("moment", ["training", pytest.param("test", marks=pytest.mark.slow)])
# DQN's long test steps (500-step episodes by epoch 4) take 20-40 s: with the slow checks;
# its resume is also in test_lifecycle's SIGTERM test
@pytest.mark.parametrize("algo", ["ppo", pytest.param("dqn", marks=pytest.mark.slow)])
def test_sigterm_in_the_last_epoch_resumes_to_the_unbroken_run(cli, tmp_path, unbroken, algo,
                                                               moment):
    args = last_epoch_args(algo, moment)
    full, broken = unbroken(algo, moment), tmp_path / "broken"

    if moment == "training":  # the first training step of epoch 4 is done
        def when(line: str) -> bool:
            return line.startswith("  epoch 4/4: ") and "steps" in line
    else:  # epoch 4's test step begins
        def when(line: str) -> bool:
            return line.startswith("  epoch 4/4: testing")
    res = signal_when([*args, f"hydra.run.dir={broken}"], tmp_path, when, SIGTERM)
    assert res.returncode == 143, res.stderr
    assert f"rltrain resume={broken}" in res.stderr
    partial = load_checkpoint(broken / "checkpoints" / "last.pt")["trainer"]["partial"]
    assert partial is not None, "the signal should have landed inside epoch 4"
    steps_done = partial["steps"] >= int(LAST_EPOCH[algo][2].split("=")[1])
    assert steps_done == (moment == "test"), partial["steps"]
    assert len(read_jsonl(broken / "epochs.jsonl")) == 3

    assert resume_in_process(broken) == (0, [])
    assert learning_records(broken) == learning_records(full)
    summary = json.loads((broken / "summary.json").read_text())
    assert summary["epochs"] == 4 and summary["status"] == "completed"
    assert summary["env_step"] == json.loads((full / "summary.json").read_text())["env_step"]
    assert summary["resumes"][0]["exact"] is True


# ---------------------------------------------------------------- 2. env state that is not plain
CUSTOM = ["algo=ppo", "env=gym", "trainer.max_epochs=3", "trainer.epoch_num_steps=2048",
          "trainer.collection_step_num_env_steps=256", "trainer.stop_score=null", "seed=2",
          "env.num_test_envs=2", "trainer.test_step_num_episodes=4",
          "logger.progress_interval_s=0", "logger.tensorboard=false"]


def interrupt_in_epoch_2(args: list[str], run_dir: Path, cwd: Path
                         ) -> subprocess.CompletedProcess:
    res = signal_when([*args, f"hydra.run.dir={run_dir}"], cwd,
                      lambda line: line.startswith("  epoch 2/3: "), SIGTERM)
    assert res.returncode == 143, res.stderr
    return res


def test_custom_env_with_dict_state_resumes_exactly(tmp_path, caplog):
    """The state lives in a dict (the old snapshot skipped it silently): now it is saved, and
    the resumed records equal an unbroken run's."""
    args = [*CUSTOM, "env.id=state_envs:rltrain-test/DictState-v0"]
    full, broken = tmp_path / "full", tmp_path / "broken"
    run_in_process(full, *args)
    interrupt_in_epoch_2(args, broken, tmp_path)
    caplog.clear()
    caplog.set_level(logging.INFO)
    assert resume_in_process(broken) == (0, [])
    assert any(m.startswith("resumed at epoch ") and m.endswith(" (exact)")
               for m in caplog.messages), caplog.messages
    assert "inexact" not in caplog.text
    assert learning_records(broken) == learning_records(full)
    summary = json.loads((broken / "summary.json").read_text())
    assert summary["env_state"] == {"exact": True, "not_captured": []}


def test_env_state_that_cannot_be_saved_is_said_at_checkpoint_and_resume(cli, tmp_path):
    """The state lives in C memory (ctypes): said when the first checkpoint is written and
    again at the resume, on the console, in rltrain.log and in summary.json; the run goes on
    from a seeded reset."""
    args = [*CUSTOM, "env.id=state_envs:rltrain-test/OpaqueState-v0"]
    run_dir = tmp_path / "run"
    res = interrupt_in_epoch_2(args, run_dir, tmp_path)
    at_checkpoint = "the envs' state cannot be saved exactly"
    assert at_checkpoint in res.stderr and "c_double_Array_4 objects" in res.stderr
    assert "sim (state_envs.c_double_Array_4)" in (run_dir / "rltrain.log").read_text()
    res = cli(f"resume={run_dir}")
    assert res.returncode == 0, res.stderr
    assert "warning: inexact resume: the train envs' state could not be restored" in res.stderr
    assert "fresh episodes from a seeded reset" in res.stderr
    log = (run_dir / "rltrain.log").read_text()
    assert at_checkpoint in log and "inexact resume" in log
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_state"]["exact"] is False
    assert any("c_double_Array_4" in x for x in summary["env_state"]["not_captured"])
    (resume,) = summary["resumes"]
    assert resume["exact"] is False and resume["notes"]
    assert [r["epoch"] for r in read_jsonl(run_dir / "epochs.jsonl")] == [1, 2, 3]


# ---------------------------------------------------------------- 3. +key=value
# (keys added with + are checked against the schemas: tests/assembly/test_registered_schemas.py)
def test_free_form_env_kwargs_need_no_plus(tmp_path):
    """``env.kwargs.KEY=VALUE`` (as the README shows) reaches the env's constructor: this
    env's reward turns NaN at its 10th step, so the run stops there."""
    ok = run_in_process(tmp_path / "pendulum", "experiment=smoke", "env=gym",
                        "env.id=Pendulum-v1", "env.kwargs.g=9.81")
    assert ok.status == "completed"
    config = (tmp_path / "pendulum" / ".hydra" / "config.yaml").read_text()
    assert "g: 9.81" in config
    info = run_in_process(tmp_path / "nan", "experiment=smoke", "env=gym",
                          "env.id=fault_envs:rltrain-test/NaNReward-v0", "env.kwargs.nan_at=10")
    assert info.status == "failed" and "non-finite reward" in info.error


# ---------------------------------------------------------------- 4. a refused run
def test_refused_run_leaves_the_existing_run_byte_for_byte(cli, tmp_path):
    run_dir = tmp_path / "run"
    run_in_process(run_dir, "experiment=smoke")
    before = tree_digest(run_dir)
    res = cli("experiment=smoke", "seed=5", "env.num_test_envs=3", f"hydra.run.dir={run_dir}")
    assert res.returncode == 2 and "already holds a run" in res.stderr
    assert tree_digest(run_dir) == before  # same files, same bytes: .hydra/ included
    res = command(evaluate.main, run_dir, "--episodes", "2")
    assert res.returncode == 0, res.stderr
    assert json.loads((run_dir / "eval.json").read_text())["seed"] == 10_000  # seed 0's


# ---------------------------------------------------------------- 5. one run per directory
def test_two_runs_into_one_directory_one_is_refused(tmp_path):
    run_dir = tmp_path / "run"
    args = ["experiment=smoke", "trainer.max_epochs=3", "trainer.epoch_num_steps=4096",
            f"hydra.run.dir={run_dir}"]
    procs = [subprocess.Popen([str(RLTRAIN), *args, f"seed={s}"], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=cli_env()) for s in (0, 1)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    refused = next(err for code, err in results if code == 2)
    assert "in use by another rltrain process" in refused or "already holds a run" in refused
    assert [r["epoch"] for r in read_jsonl(run_dir / "epochs.jsonl")] == [1, 2, 3]


def test_two_resumes_of_one_run_one_is_refused(cli, tmp_path):
    run_dir = tmp_path / "run"
    # epochs of ~0.4 s: the first resume still trains when the second has started up
    run_in_process(run_dir, "experiment=smoke", "trainer.epoch_num_steps=4096")
    first = subprocess.Popen([str(RLTRAIN), f"resume={run_dir}", "trainer.max_epochs=12"],
                             cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=cli_env())
    lock = run_dir / ".rltrain.lock"
    wait_for(lambda: lock.is_file() and str(first.pid) in lock.read_text(),
             what="the first resume's lock")
    second = subprocess.run([str(RLTRAIN), f"resume={run_dir}", "trainer.max_epochs=12"],
                            cwd=tmp_path, capture_output=True, text=True, env=cli_env())
    assert first.wait(timeout=300) == 0, first.stderr.read()
    assert second.returncode == 2
    assert f"in use by another rltrain process (pid {first.pid}" in second.stderr
    assert [r["epoch"] for r in read_jsonl(run_dir / "epochs.jsonl")] == list(range(1, 13))


def test_a_killed_run_leaves_no_stuck_lock(cli, tmp_path):
    run_dir = tmp_path / "run"
    res = signal_when(["experiment=smoke", "trainer.max_epochs=6", "logger.progress_interval_s=0",
                       f"hydra.run.dir={run_dir}"], tmp_path,
                      lambda line: line.startswith("epoch   2/6"), SIGKILL)
    assert res.returncode == -9
    assert resume_in_process(run_dir) == (0, [])
    assert [r["epoch"] for r in read_jsonl(run_dir / "epochs.jsonl")] == list(range(1, 7))


# ---------------------------------------------------------------- 6. non-finite values
# (non-finite hyperparameters are refused by the settings: tests/assembly/test_checked_config.py)
def _finite(path: Path) -> bool:
    state = torch.load(path, weights_only=True)["state_dict"]
    return all(bool(t.isfinite().all()) for t in state.values())


def test_non_finite_env_reward_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    info = run_in_process(run_dir, "algo=ppo", "env=gym",
                          "env.id=fault_envs:rltrain-test/NaNReward-v0", "env.kwargs.nan_at=300",
                          "env.num_train_envs=4", "trainer.max_epochs=5",
                          "trainer.epoch_num_steps=1024",
                          "trainer.collection_step_num_env_steps=256")
    assert info.status == "failed" and info.failed_at.startswith("epoch 2 ")
    assert "non-finite reward" in info.error and "Traceback" not in info.error
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and "non-finite reward" in summary["error"]
    assert summary["checkpoint"]["epoch"] == 1  # what the CLI's resume line points at
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt")["trainer"]["epoch"] == 1
    assert _finite(run_dir / "best" / "policy.pt")
    assert not (run_dir / "final").exists()  # nothing trained on NaN is kept as a policy


def test_exploding_weights_stop_the_run_and_save_no_nan_policy(cli, tmp_path):
    run_dir = tmp_path / "run"
    info = run_in_process(run_dir, "experiment=smoke", "algo.lr=1e30")
    assert info.status == "failed" and info.failed_at.startswith("epoch 1 ")
    assert "nan" in info.error.lower()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert not (run_dir / "best").exists() and not (run_dir / "final").exists()
    assert summary["checkpoint"] is None  # the CLI says: the directory can be reused
    res = cli("experiment=smoke", f"hydra.run.dir={run_dir}")  # and so it can
    assert res.returncode == 0, res.stderr
    assert "replacing what an attempt without a checkpoint left" in res.stderr


# ---------------------------------------------------------------- 7. impossible combinations
# (settings that cannot learn are refused by the trainer kinds: tests/assembly/test_build.py)
def test_episode_collection_fits_the_on_policy_buffer(tmp_path):
    """Collecting whole episodes once overflowed the rollout storage mid-run
    (BufferFullError, when buffer.size / envs was below an env's episodes): its size now
    follows from the episodes' time limit, and buffer.size (the replay size) plays no part."""
    run_dir = tmp_path / "run"
    info = run_in_process(run_dir, "experiment=smoke", "trainer.collection_step_num_env_steps=null",
                          "trainer.collection_step_num_episodes=16", "buffer.size=80")
    assert info.status == "completed", info.error
    rows = read_jsonl(run_dir / "epochs.jsonl")
    assert len(rows) == 2 and all(r["train"]["n_episodes"] >= 16 for r in rows)


# ---------------------------------------------------------------- 8. smaller ones
# (a resume below the epochs done, or of a finished run: tests/commands/test_resume.py)
def test_export_refuses_to_overwrite_the_runs_weights(two_epoch_run, tmp_path):
    weights = two_epoch_run / "best" / "policy.pt"
    before = weights.read_bytes()
    res = command(export.main, two_epoch_run, "--out", weights)
    assert res.returncode == 2 and "refusing to overwrite" in res.stderr
    assert weights.read_bytes() == before


def test_a_hang_up_saves_the_epoch_in_flight_and_says_how_to_resume(tmp_path):
    """SIGHUP (the terminal closed) is taken as SIGTERM: with checkpoints only every third
    epoch, a hang-up in epoch 2 still leaves a checkpoint, the summary and the resume line,
    and the resumed run completes the same epochs."""
    run_dir = tmp_path / "run"
    # epochs of 8 rollouts: the hang-up, sent after the first rollout of epoch 2, lands 7
    # rollouts before its end
    res = signal_when(["experiment=smoke", "trainer.max_epochs=3", "trainer.checkpoint_every=3",
                       "trainer.epoch_num_steps=8192",
                       "trainer.collection_step_num_env_steps=1024",
                       "logger.progress_interval_s=0", f"hydra.run.dir={run_dir}"], tmp_path,
                      lambda line: line.startswith("  epoch 2/3: "), signal.SIGHUP)
    assert res.returncode == 128 + signal.SIGHUP, res.stderr
    assert "SIGHUP received; finishing the current step and saving" in res.stderr
    assert f"resume with: rltrain resume={run_dir}" in res.stderr
    assert "Traceback" not in res.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["interrupted"] is True
    assert summary["interrupt_signal"] == signal.SIGHUP
    assert Path(summary["checkpoint"]["path"]).is_file() and summary["checkpoint"]["epoch"] == 2
    assert resume_in_process(run_dir) == (0, [])
    assert [r["epoch"] for r in read_jsonl(run_dir / "epochs.jsonl")] == [1, 2, 3]


def test_under_nohup_a_hang_up_is_still_ignored(tmp_path):
    """``nohup rltrain ...``: SIGHUP ignored when the process starts stays ignored."""
    run_dir = tmp_path / "run"
    nohup = shutil.which("nohup")
    if nohup is None:
        pytest.skip("needs nohup (coreutils)")
    res = signal_when([str(RLTRAIN), "experiment=smoke", "trainer.max_epochs=2",
                       "trainer.epoch_num_steps=16384",
                       "trainer.collection_step_num_env_steps=8192",
                       "logger.progress_interval_s=0", f"hydra.run.dir={run_dir}"], tmp_path,
                      lambda line: line.startswith("  epoch 1/2: "), signal.SIGHUP,
                      program=Path(nohup))
    assert res.returncode == 0, res.stderr
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"


# Ctrl-C twice is the common case; SIGTERM twice with the slow checks
@pytest.mark.parametrize(("sig", "code"), [pytest.param(SIGTERM, 143, marks=pytest.mark.slow),
                                           (2, 130)])
def test_a_second_signal_stops_at_once_and_says_how_to_resume(tmp_path, sig, code):
    """Long training steps (8192 env steps), so that the second signal arrives in the step
    that the first one lets finish."""
    run_dir = tmp_path / "run"
    res = signal_when(["experiment=smoke", "trainer.max_epochs=3",
                       "trainer.epoch_num_steps=16384",
                       "trainer.collection_step_num_env_steps=8192",
                       "logger.progress_interval_s=0", f"hydra.run.dir={run_dir}"], tmp_path,
                      lambda line: line.startswith("  epoch 2/3: "), sig, sig,
                      ack="received; finishing the current step")
    assert res.returncode == code, res.stderr
    assert "received again: stopped at once" in res.stderr
    assert f"resume with: rltrain resume={run_dir}" in res.stderr
    assert "Traceback" not in res.stderr
    assert json.loads((run_dir / "summary.json").read_text())["interrupted"] is True
    assert not list((run_dir / "checkpoints").glob(".*.tmp"))
    start = time.monotonic()
    assert resume_in_process(run_dir) == (0, [])
    assert time.monotonic() - start < 120
    assert [r["epoch"] for r in read_jsonl(run_dir / "epochs.jsonl")] == [1, 2, 3]
