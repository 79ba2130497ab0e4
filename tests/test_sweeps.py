"""Sweeps that survive a bad job and stop cleanly, with Hydra's real launchers."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import RLTRAIN, SIGINT, SIGTERM, cli_env, read_jsonl, signal_when, wait_for
from rltrain import rundir

SMOKE = ["experiment=smoke", "logger.tensorboard=false"]


def summary(job: Path) -> dict:
    return json.loads((job / "summary.json").read_text())


@pytest.mark.parametrize("launcher", ["basic", "joblib"])
def test_a_job_with_a_config_error_does_not_end_the_sweep(cli, tmp_path, launcher):
    sweep = tmp_path / "sweep"
    res = cli("--multirun", f"hydra/launcher={launcher}", *SMOKE, "env.num_train_envs=0,8",
              f"hydra.sweep.dir={sweep}")
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    assert summary(sweep / "1")["status"] == "completed"  # the good job ran
    failed = summary(sweep / "0")
    assert failed["status"] == "failed"
    assert failed["error"] == "env.num_train_envs must be > 0, got 0"
    assert (sweep / "0" / ".hydra" / "config.yaml").is_file()  # to see what the job was
    report = res.stderr[res.stderr.index(f"rltrain: sweep {sweep}"):]
    assert "2 job(s): 1 failed, 0 interrupted" in report
    assert re.search(rf"0\s+failed\s+{sweep / '0'}\s+env.num_train_envs must be > 0", report)
    assert re.search(rf"1\s+completed\s+{sweep / '1'}", report)


def test_a_job_that_fails_while_training_does_not_end_the_sweep(cli, tmp_path):
    sweep = tmp_path / "sweep"
    res = cli("--multirun", *SMOKE, "env=gym", "env.id=fault_envs:rltrain-test/NaNReward-v0",
              "env.kwargs.nan_at=10,100000", f"hydra.sweep.dir={sweep}")
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    assert summary(sweep / "0")["status"] == "failed"
    assert "non-finite reward" in summary(sweep / "0")["error"]
    assert summary(sweep / "1")["status"] == "completed"
    assert re.search(r"0\s+failed\s+.*non-finite reward", res.stderr)


def test_jobs_record_their_own_overrides_and_the_git_commit(cli, tmp_path):
    sweep = tmp_path / "sweep"
    res = cli("--multirun", "experiment=smoke", "seed=3,4", "env.num_test_envs=1",
              f"hydra.sweep.dir={sweep}")
    assert res.returncode == 0, res.stderr
    for job, seed in (("0", 3), ("1", 4)):
        system = summary(sweep / job)["system"]
        assert system["overrides"] == ["experiment=smoke", f"seed={seed}", "env.num_test_envs=1"]
        assert system["command"] == f"rltrain experiment=smoke seed={seed} env.num_test_envs=1"
    git = summary(sweep / "0")["system"].get("git", {}).get("rltrain")
    if not (Path(__file__).resolve().parents[1] / ".git").exists():
        pytest.skip("rltrain is not run from a git checkout here, so there is no commit to record")
    assert git is not None and re.fullmatch(r"[0-9a-f]{40}", git["commit"])
    assert isinstance(git["dirty"], bool)


@pytest.mark.parametrize(("sig", "code"), [(SIGTERM, 143), (SIGINT, 130)])
def test_a_signal_to_a_joblib_sweep_reaches_its_jobs(tmp_path, sig, code):
    """The sweep's main process passes the signal on: each running job finishes its step,
    checkpoints and says how to resume; the job not yet started never starts; no worker
    is left training. SIGINT goes to the whole process group, as a terminal's Ctrl-C does."""
    sweep = tmp_path / "sweep"
    proc = subprocess.Popen(
        [str(RLTRAIN), "--multirun", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
         *SMOKE, "seed=0,1,2", "trainer.max_epochs=40", "trainer.epoch_num_steps=4096",
         f"hydra.sweep.dir={sweep}"], cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=cli_env(), start_new_session=True)
    try:
        wait_for(lambda: all((sweep / j / "epochs.jsonl").is_file()
                             and (sweep / j / "epochs.jsonl").read_text().strip()
                             for j in ("0", "1")), timeout=120, what="both jobs' first epoch")
        pids = [rundir.lock_holder_pid(sweep / j) for j in ("0", "1")]
        assert all(pids) and proc.pid not in pids  # the jobs run in worker processes
        if sig == SIGINT:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    assert proc.returncode == code, err
    assert "Traceback" not in err
    for job in ("0", "1"):
        assert summary(sweep / job)["status"] == "interrupted"
        assert f"resume with: rltrain resume={sweep / job}" in err
    assert summary(sweep / "2")["status"] == "not started"
    assert not (sweep / "2" / "epochs.jsonl").exists()
    for pid in pids:  # no orphan: the workers are gone with the sweep
        wait_for(lambda p=pid: not Path(f"/proc/{p}").exists(), timeout=30,
                 what=f"worker {pid} to end")
    res = subprocess.run([str(RLTRAIN), f"resume={sweep / '0'}", "trainer.max_epochs=4"],
                         cwd=tmp_path, capture_output=True, text=True, env=cli_env())
    assert res.returncode == 0, res.stderr
    assert [r["epoch"] for r in read_jsonl(sweep / "0" / "epochs.jsonl")] == [1, 2, 3, 4]


def test_a_signal_to_a_basic_sweep_stops_it_after_the_running_job(tmp_path):
    sweep = tmp_path / "sweep"
    res = signal_when(["--multirun", *SMOKE, "seed=0,1", "trainer.max_epochs=30",
                       "trainer.epoch_num_steps=2048", f"hydra.sweep.dir={sweep}"], tmp_path,
                      lambda line: line.startswith("epoch   1/30"), SIGTERM)
    assert res.returncode == 143, res.stderr
    assert summary(sweep / "0")["status"] == "interrupted"
    assert summary(sweep / "1")["status"] == "not started"
    assert f"resume with: rltrain resume={sweep / '0'}" in res.stderr
