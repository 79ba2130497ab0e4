"""The run lifecycle through the real CLI: interruption, exact resume, reproducibility,
checkpoint safety."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from conftest import RLTRAIN, learning_records, read_jsonl
from rltrain.checkpoint import load_checkpoint

#: fields that measure time, not learning

# long enough epochs that a signal sent right after epoch 1's line lands mid-epoch 2
RUNS = {
    "ppo": ["algo=ppo", "trainer.max_epochs=3", "trainer.epoch_num_steps=8192"],
    "dqn": ["algo=dqn", "trainer.max_epochs=3", "trainer.epoch_num_steps=2048",
            "buffer.size=20000"],
}
COMMON = ["trainer.stop_score=null", "seed=1", "logger.progress_bar=false",
          "env.num_test_envs=5", "trainer.test_step_num_episodes=5"]


def interrupt_after_first_epoch(args: list[str], cwd: Path, sig: int
                                ) -> subprocess.CompletedProcess:
    """Start a run, send ``sig`` as soon as epoch 1 is logged, wait for the exit."""
    proc = subprocess.Popen([str(RLTRAIN), *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("epoch   1/"):
            time.sleep(0.2)
            proc.send_signal(sig)
            break
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "".join(lines) + out, err)


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_sigterm_then_resume_equals_unbroken_run(cli, tmp_path, algo):
    full, broken = tmp_path / "full", tmp_path / "broken"
    args = [*RUNS[algo], *COMMON]
    assert cli(*args, f"hydra.run.dir={full}").returncode == 0

    res = interrupt_after_first_epoch([*args, f"hydra.run.dir={broken}"], tmp_path,
                                      signal.SIGTERM)
    assert res.returncode == 143, res.stderr
    assert f"rltrain resume={broken}" in res.stderr
    summary = json.loads((broken / "summary.json").read_text())
    assert summary["interrupted"] is True
    ckpt = load_checkpoint(broken / "checkpoints" / "last.pt")
    assert ckpt["trainer"]["env_step"] == summary["env_step"]
    mid_epoch = ckpt["trainer"]["partial"] is not None
    assert len(read_jsonl(broken / "epochs.jsonl")) == ckpt["trainer"]["epoch"] - mid_epoch

    res = cli(f"resume={broken}")
    assert res.returncode == 0, res.stderr
    assert learning_records(broken) == learning_records(full)
    assert json.loads((broken / "summary.json").read_text())["interrupted"] is False
    # TensorBoard continues at the right steps, nothing logged twice
    acc = EventAccumulator(str(broken / "tb"))
    acc.Reload()
    steps = [s.step for s in acc.Scalars("test/return_mean")]
    assert steps == [r["env_step"] for r in read_jsonl(broken / "epochs.jsonl")]


def test_sigint_exits_130_with_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    res = interrupt_after_first_epoch([*RUNS["ppo"], *COMMON, f"hydra.run.dir={run_dir}"],
                                      tmp_path, signal.SIGINT)
    assert res.returncode == 130, res.stderr
    assert "Traceback" not in res.stderr
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt")["format"] == "rltrain-checkpoint"
    assert (run_dir / "final" / "policy.pt").is_file()


def test_same_seed_same_numbers_other_seed_other_numbers(cli, tmp_path):
    runs = {}
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        res = cli("experiment=smoke", "algo=dqn", f"seed={seed}",
                  f"hydra.run.dir={tmp_path / name}")
        assert res.returncode == 0, res.stderr
        runs[name] = learning_records(tmp_path / name)
    assert runs["a"] == runs["b"]
    assert runs["a"] != runs["c"]
    system = json.loads((tmp_path / "a" / "summary.json").read_text())["system"]
    assert {"python", "torch", "gymnasium", "rltrain", "command"} <= system.keys()
    assert system["torch"] == torch.__version__


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A finished 3-epoch smoke run with one checkpoint per epoch."""
    cwd = tmp_path_factory.mktemp("finished")
    run_dir = cwd / "run"
    res = subprocess.run([str(RLTRAIN), "experiment=smoke", "trainer.max_epochs=3",
                          f"hydra.run.dir={run_dir}"], cwd=cwd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return run_dir


def copy_run(src: Path, dst: Path) -> Path:
    subprocess.run(["cp", "-a", str(src), str(dst)], check=True)
    return dst


def test_extend_finished_run(cli, tmp_path, finished_run):
    run_dir = copy_run(finished_run, tmp_path / "run")
    res = cli(f"resume={run_dir}", "trainer.max_epochs=4")
    assert res.returncode == 0, res.stderr
    assert [r["epoch"] for r in read_jsonl(run_dir / "epochs.jsonl")] == [1, 2, 3, 4]
    assert json.loads((run_dir / "summary.json").read_text())["epochs"] == 4


def test_a_run_stopped_at_its_stop_score_goes_on_with_a_higher_one(cli, tmp_path):
    """A run that stopped early at its stop score, resumed with trainer.stop_score raised (or
    null), trains on to the end and its records equal an unbroken run's with that stop score;
    the same stop score leaves it complete."""
    args = ["experiment=smoke", "trainer.max_epochs=3", "trainer.test_step_num_episodes=2"]
    stopped, whole = tmp_path / "stopped", tmp_path / "whole"
    assert cli(*args, "trainer.stop_score=0", f"hydra.run.dir={stopped}").returncode == 0
    assert [r["epoch"] for r in read_jsonl(stopped / "epochs.jsonl")] == [1]
    res = cli(f"resume={stopped}", "trainer.stop_score=0")
    assert res.returncode == 0 and "already complete" in res.stdout
    res = cli(f"resume={stopped}", "trainer.stop_score=null")
    assert res.returncode == 0, res.stderr
    assert cli(*args, "trainer.stop_score=null", f"hydra.run.dir={whole}").returncode == 0
    assert learning_records(stopped) == learning_records(whole)
    assert json.loads((stopped / "summary.json").read_text())["stopped_early"] is False
    res = cli(f"resume={stopped}", "trainer.stop_score=abc")
    assert res.returncode == 2 and "trainer.stop_score='abc' is not a number" in res.stderr


def test_resume_refuses_other_overrides(cli, finished_run):
    res = cli(f"resume={finished_run}", "algo.lr=0.1")
    assert res.returncode != 0
    assert "algo.lr=0.1" in res.stderr and "trainer.max_epochs" in res.stderr


def test_resume_missing_run_dir(cli, tmp_path):
    res = cli(f"resume={tmp_path / 'nope'}")
    assert res.returncode != 0
    assert "nope" in res.stderr and "Traceback" not in res.stderr


def test_truncated_last_falls_back_to_older_checkpoint(cli, tmp_path, finished_run):
    run_dir = copy_run(finished_run, tmp_path / "run")
    last = run_dir / "checkpoints" / "last.pt"
    data = last.read_bytes()
    # last.pt is a hard link to the newest numbered file; break the link, then truncate
    last.unlink()
    last.write_bytes(data[: len(data) // 2])
    res = cli(f"resume={run_dir}", "trainer.max_epochs=4")
    assert res.returncode == 0, res.stderr
    assert "last.pt is truncated or corrupt" in res.stderr
    assert "resuming from the older checkpoint" in res.stderr
    assert [r["epoch"] for r in read_jsonl(run_dir / "epochs.jsonl")] == [1, 2, 3, 4]


def test_truncated_only_checkpoint_is_a_clear_error(cli, tmp_path, finished_run):
    run_dir = copy_run(finished_run, tmp_path / "run")
    for path in (run_dir / "checkpoints").glob("*.pt"):
        data = path.read_bytes()
        path.unlink()
        path.write_bytes(data[:100])
    res = cli(f"resume={run_dir}")
    assert res.returncode != 0
    assert "last.pt is truncated or corrupt" in res.stderr
    assert "Traceback" not in res.stderr


class _RunsCode:
    """Unpickling this calls os.system: what a malicious checkpoint would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_checkpoint_that_runs_code_is_refused(cli, tmp_path, finished_run):
    run_dir = copy_run(finished_run, tmp_path / "run")
    marker = tmp_path / "pwned"
    for path in (run_dir / "checkpoints").glob("*.pt"):
        path.unlink()
        torch.save({"format": "rltrain-checkpoint", "version": 1, "x": _RunsCode(marker)}, path,
                   pickle_protocol=pickle.DEFAULT_PROTOCOL)
    res = cli(f"resume={run_dir}")
    assert res.returncode != 0
    assert "refusing to load" in res.stderr
    assert not marker.exists()


def test_foreign_checkpoint_is_refused(cli, tmp_path, finished_run):
    run_dir = copy_run(finished_run, tmp_path / "run")
    for path in (run_dir / "checkpoints").glob("*.pt"):
        path.unlink()
        torch.save({"weights": torch.zeros(3)}, path)
    res = cli(f"resume={run_dir}")
    assert res.returncode != 0
    assert "not an rltrain checkpoint" in res.stderr


def test_checkpoint_rotation_keeps_newest(cli, tmp_path):
    run_dir = tmp_path / "run"
    res = cli("experiment=smoke", "trainer.max_epochs=4", "trainer.keep_checkpoints=2",
              f"hydra.run.dir={run_dir}")
    assert res.returncode == 0, res.stderr
    numbered = sorted(p.name for p in (run_dir / "checkpoints").glob("ckpt_*.pt"))
    assert len(numbered) == 2 and numbered[-1].endswith("_00004.pt")
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt")["trainer"]["epoch"] == 4
    assert not list((run_dir / "checkpoints").glob(".*"))  # no temporary files left
