"""Sweeps that survive a bad job and stop cleanly, with Hydra's real launchers."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import (
    RLTRAIN,
    SIGINT,
    SIGTERM,
    cli_env,
    compose_run,
    job_dir,
    learning_records,
    read_jsonl,
    signal_when,
    wait_for,
)
from rltrain.config.schemas import job_dir_name, job_number
from rltrain.rundir import directory
from rltrain.sweeps import callback, outcome

SMOKE = ["experiment=smoke", "logger.tensorboard=false"]


def summary(job: Path) -> dict:
    return json.loads((job / "summary.json").read_text())


@pytest.mark.parametrize(("overrides", "name"), [
    ("", "job4"),
    ("algo=dqn,seed=3", "algo=dqn,seed=3_job4"),
    ("env.id=my_pkg/Thing-v0", "env.id=my_pkg-Thing-v0_job4"),
    # an Optuna trial's sampled floats to four significant digits; short ones as given
    ("algo.clip_ratio=0.3920509890656153,algo.lr=0.0008752409682826399,trainer.batch_size=256",
     "algo.clip_ratio=0.3921,algo.lr=0.0008752,trainer.batch_size=256_job4"),
    ("algo.lr=1.2345678e-05,algo.gamma=0.99,env.id=v1.123456x",
     "algo.lr=1.235e-05,algo.gamma=0.99,env.id=v1.123456x_job4"),
    ("algo.hidden_sizes=[0.123456,2]", "algo.hidden_sizes=[0.1235,2]_job4"),
    ("algo.x=" + "1" * 200, "algo.x=" + "1" * 153 + "~_job4"),
])
def test_job_directory_names(overrides, name):
    assert job_dir_name(overrides, 4) == name
    assert job_number(name) == 4


# joblib with the slow checks: the refusal is the job's own, whatever runs it
@pytest.mark.parametrize("launcher", ["basic", pytest.param("joblib", marks=pytest.mark.slow)])
def test_a_job_with_a_config_error_does_not_end_the_sweep(cli, tmp_path, launcher):
    sweep = tmp_path / "sweep"
    res = cli("--multirun", f"hydra/launcher={launcher}", *SMOKE, "env.num_train_envs=0,8",
              f"hydra.sweep.dir={sweep}")
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    assert "HYDRA_FULL_ERROR" not in res.stderr  # rltrain said what failed, and where
    assert "rltrain: job 0: failed (see" in res.stderr
    assert summary(job_dir(sweep, 1))["status"] == "completed"  # the good job ran
    failed = summary(job_dir(sweep, 0))
    assert failed["status"] == "failed"
    assert failed["error"] == "env.num_train_envs must be > 0, got 0"
    assert (job_dir(sweep, 0) / ".hydra" / "config.yaml").is_file()  # to see what the job was
    report = res.stderr[res.stderr.index(f"rltrain: sweep {sweep}"):]
    assert "2 job(s): 1 failed, 0 interrupted" in report
    job_0, job_1 = (re.escape(str(job_dir(sweep, n))) for n in (0, 1))
    assert re.search(rf"0\s+failed\s+{job_0}\s+env.num_train_envs must be > 0", report)
    assert re.search(rf"1\s+completed\s+{job_1}", report)


def test_a_job_that_fails_while_training_does_not_end_the_sweep(cli, tmp_path):
    sweep = tmp_path / "sweep"
    res = cli("--multirun", *SMOKE, "env=gym", "env.id=fault_envs:rltrain-test/NaNReward-v0",
              "env.kwargs.nan_at=10,100000", f"hydra.sweep.dir={sweep}")
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    assert summary(job_dir(sweep, 0))["status"] == "failed"
    assert "non-finite reward" in summary(job_dir(sweep, 0))["error"]
    assert summary(job_dir(sweep, 1))["status"] == "completed"
    assert re.search(r"0\s+failed\s+.*non-finite reward", res.stderr)


def test_a_sweep_counts_the_jobs_it_refused_and_says_how_to_finish(cli, tmp_path):
    """Another process holds job 0's directory, as a second sweep into the same
    hydra.sweep.dir does: the sweep runs job 1, refuses job 0, and counts and lists the
    refusal (it said '0 failed' while exiting 1); its last line is the command that finishes
    it, which then runs job 0, skips job 1 and ends by naming rltrain-report."""
    sweep = tmp_path / "sweep"
    held = sweep / "seed=0_job0"
    held.mkdir(parents=True)
    args = ["--multirun", *SMOKE, "seed=0,1"]
    with directory.RunDirLock(held):
        res = cli(*args, f"hydra.sweep.dir={sweep}")
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr
    report = res.stderr[res.stderr.index(f"rltrain: sweep {sweep}"):]
    assert "2 job(s): 0 failed, 0 interrupted, 1 refused" in report
    assert re.search(rf"^\s+0\s+refused\s+{re.escape(str(held))}\s+is in use by another "
                     r"rltrain process \(pid \d+", report, re.M)
    assert re.search(rf"^\s+1\s+completed\s+{re.escape(str(job_dir(sweep, 1)))}\s+best "
                     r"-?\d+\.\d$", report, re.M)
    finish = report.strip().splitlines()[-1]
    assert finish.startswith("next: finish the sweep")
    assert finish.endswith(f"rltrain {' '.join(args)} hydra.sweep.dir={sweep}; then "
                           f"rltrain-report {sweep}")
    assert not list(sweep.glob(".rltrain-refused-*"))  # read and removed

    again = shlex.split(finish[finish.index("): rltrain ") + 3:finish.rindex("; then ")])
    res = cli(*again[1:])
    assert res.returncode == 0, res.stderr
    assert f"job 1: already completed in {job_dir(sweep, 1)}: skipped" in res.stdout
    assert summary(job_dir(sweep, 0))["status"] == "completed"
    assert res.stdout.strip().splitlines()[-1] == f"next: rltrain-report {sweep}"


def test_the_sweep_list_rounds_scores_as_the_console_does(tmp_path, capsys):
    for num, best in ((0, 123.456789), (1, None)):
        job = tmp_path / f"seed={num}_job{num}"
        job.mkdir()
        (job / "summary.json").write_text(json.dumps({"status": "completed",
                                                      "best_score": best}))
    assert outcome.report(tmp_path) == (0, 0, 2)
    out = capsys.readouterr().out
    assert re.search(r"0\s+completed\s+.*seed=0_job0\s+best 123\.5$", out, re.M)
    assert re.search(r"1\s+completed\s+.*seed=1_job1\s+best -$", out, re.M)
    assert out.splitlines()[-1] == f"next: rltrain-report {tmp_path}"


def listed_as_on_disk(report: str, sweep: Path) -> dict[int, str]:
    """Each job's status in a sweep's list (``report``: stderr from its ``rltrain: sweep``
    line), checked against its directory: a resume command only beside a checkpoint, and a
    job listed as stopped before its first checkpoint holds none. Issue 45 §5: jobs stopped at
    once were listed 'interrupted ... resume with', and that command failed."""
    listed: dict[int, str] = {}
    for num, status, rest in re.findall(r"^\s+(\d+)\s+(\S+(?: started)?)\s+(.*)$", report,
                                        re.M):
        job = job_dir(sweep, int(num))
        saved = any((job / "checkpoints").glob("*.pt"))
        listed[int(num)] = status
        if status == "interrupted":
            assert saved and f"resume with: rltrain resume={job}" in rest, rest
        if status == "stopped":
            assert not saved and "runs it again from the start" in rest, rest
            assert summary(job)["status"] == "interrupted" and summary(job)["checkpoint"] is None
    return listed


def finish_command(report: str) -> list[str]:
    """The arguments of the command a sweep's last line says finishes it."""
    last = report.strip().splitlines()[-1]
    assert last.startswith("next: finish the sweep"), last
    return shlex.split(last[last.index("): rltrain ") + 3:last.rindex("; then ")])[1:]


def test_the_list_of_an_unfinished_sweep_says_what_each_directory_holds(tmp_path, capsys):
    """Whatever launcher ran the jobs, their rows are read from their files: an interrupted
    job with a checkpoint gets its resume command; one stopped at once before its first
    checkpoint says that finishing the sweep runs it again; one killed before writing its
    summary says what finishing does with what it left."""
    rows = {0: ({"status": "interrupted", "interrupted": True}, True),
            1: ({"status": "interrupted", "interrupted": True, "checkpoint": None}, False),
            2: (None, True), 3: (None, False)}
    for num, (written, saved) in rows.items():
        job = tmp_path / f"seed={num}_job{num}"
        (job / "checkpoints").mkdir(parents=True)
        if written is not None:
            (job / "summary.json").write_text(json.dumps(written))
        else:  # killed: its lock file stays, unlocked
            (job / directory.LOCK).write_text("{}")
        if saved:
            (job / "checkpoints" / "last.pt").write_bytes(b"a checkpoint")
    assert outcome.report(tmp_path) == (2, 2, 4)
    err = capsys.readouterr().err
    assert "4 job(s): 2 failed, 1 interrupted, 1 stopped before their first checkpoint" in err
    assert re.search(rf"0\s+interrupted\s+.*seed=0_job0\s+resume with: rltrain "
                     rf"resume={re.escape(str(tmp_path))}/seed=0_job0$", err, re.M)
    assert re.search(r"1\s+stopped\s+.*seed=1_job1\s+stopped at once before its first "
                     r"checkpoint: nothing to resume; finishing the sweep runs it again from "
                     r"the start$", err, re.M)
    assert re.search(r"2\s+unknown\s+.*seed=2_job2\s+no summary.json \(killed\?\); its "
                     r"checkpoint is resumed when the sweep is finished$", err, re.M)
    assert re.search(r"3\s+unknown\s+.*seed=3_job3\s+no summary.json \(killed\?\); no "
                     r"checkpoint: finishing the sweep runs it again from the start$", err, re.M)


#: jobs whose one epoch is 2 collection steps of 8,192 env steps (a PPO update on each: one
#: pass over the whole batch), so that two signals sent as its second step begins both land
#: in that step, before the first checkpoint (written as the epoch ends)
FIRST_STEP_LONG = [*SMOKE, "trainer.max_epochs=1", "trainer.epoch_num_steps=16384",
                   "trainer.collection_step_num_env_steps=8192", "trainer.batch_size=null",
                   "trainer.update_step_num_repetitions=1", "logger.progress_interval_s=0",
                   "seed=0,1"]


def test_a_basic_sweep_stopped_at_once_is_finished_by_the_command_it_prints(cli, tmp_path):
    """Issue 45 §5, the basic launcher: SIGTERM during job 0's training, again at once. The
    job stops with no checkpoint written, and job 1 does not start; the list says so, and the
    command it prints finishes the sweep in one run: job 0 again from the start, job 1."""
    sweep = tmp_path / "sweep"
    res = signal_when(["--multirun", *FIRST_STEP_LONG, f"hydra.sweep.dir={sweep}"], tmp_path,
                      lambda line: "8,192/16,384 steps" in line, SIGTERM, SIGTERM,
                      ack="SIGTERM received")
    assert res.returncode == 143, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    assert "SIGTERM received again: stopped at once; no checkpoint was written" in res.stderr
    report = res.stderr[res.stderr.index(f"rltrain: sweep {sweep}"):]
    assert listed_as_on_disk(report, sweep) == {0: "stopped", 1: "not started"}
    assert "those stopped before their first run again from the start" in report
    res = cli(*finish_command(report))
    assert res.returncode == 0, res.stderr
    assert (f"rltrain: note: replacing what an attempt without a checkpoint left in "
            f"{job_dir(sweep, 0)} (") in res.stderr
    assert "it was stopped at once, before its first checkpoint)" in res.stderr
    for num in (0, 1):
        assert summary(job_dir(sweep, num))["status"] == "completed"
        assert [r["epoch"] for r in read_jsonl(job_dir(sweep, num) / "epochs.jsonl")] == [1]
    assert res.stdout.strip().splitlines()[-1] == f"next: rltrain-report {sweep}"


@pytest.mark.slow  # loky's workers start in seconds each on the 2-core VM: about 40 s in all
def test_a_joblib_sweep_signalled_twice_is_finished_by_the_command_it_prints(cli, tmp_path):
    """The same with joblib's workers: whatever each job had reached when the two signals
    came (stopped at once, interrupted with a checkpoint, not started), the list says what
    its directory holds, and the printed command finishes every job in one run."""
    sweep = tmp_path / "sweep"
    args = ["--multirun", *FIRST_STEP_LONG, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]
    res = signal_when([*args, f"hydra.sweep.dir={sweep}"], tmp_path,
                      lambda line: "8,192/16,384 steps" in line, SIGTERM, SIGTERM,
                      ack="SIGTERM received")
    assert res.returncode == 143, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    report = res.stderr[res.stderr.index(f"rltrain: sweep {sweep}"):]
    assert set(listed_as_on_disk(report, sweep)) == {0, 1}
    res = cli(*finish_command(report))
    assert res.returncode == 0, res.stderr
    for num in (0, 1):
        assert summary(job_dir(sweep, num))["status"] == "completed"
        assert [r["epoch"] for r in read_jsonl(job_dir(sweep, num) / "epochs.jsonl")] == [1]


def test_a_value_given_twice_runs_twice_and_says_so(cli, tmp_path):
    """seed=0,0 ran job 0 twice without a word; a warning names the job that repeats."""
    sweep = tmp_path / "sweep"
    res = cli("--multirun", *SMOKE, "seed=0,0", "trainer.max_epochs=1",
              "trainer.epoch_num_steps=256", f"hydra.sweep.dir={sweep}")
    assert res.returncode == 0, res.stderr
    warning = next(line for line in res.stderr.splitlines() if "repeats" in line)
    assert warning.startswith("rltrain: warning: job 1 repeats job 0 (seed=0): ")
    assert "harmless" in warning and "give each value once (seed=0) to run it once" in warning
    assert [summary(job_dir(sweep, n))["status"] for n in (0, 1)] == ["completed"] * 2


@pytest.mark.parametrize(("task", "said"), [
    (["trainer.batch_size=64,64", "seed=0,1"],
     "job 2 repeats job 0 (trainer.batch_size=64 seed=0); job 3 repeats job 1 "
     "(trainer.batch_size=64 seed=1)"),
    # the same value written two ways is the same job
    (["algo.lr=0.001,1e-3"], "job 1 repeats job 0 (algo.lr=0.001)"),
    (["seed=0,1", "algo.lr=0.001,0.002"], None),
])
def test_the_warning_names_every_job_that_repeats_another(capsys, task, said):
    from omegaconf import OmegaConf

    config = OmegaConf.create({"hydra": {
        "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
                    "params": None},
        "overrides": {"task": ["experiment=smoke", *task]}}})
    callback.warn_repeated_jobs(config)
    err = capsys.readouterr().err
    if said is None:
        assert err == ""
    else:
        assert err.startswith(f"rltrain: warning: {said}: "), err


def test_jobs_record_their_own_overrides_and_the_git_commit(cli, tmp_path):
    sweep = tmp_path / "sweep"
    res = cli("--multirun", "experiment=smoke", "seed=3,4", "env.num_test_envs=1",
              f"hydra.sweep.dir={sweep}")
    assert res.returncode == 0, res.stderr
    for job, seed in ((0, 3), (1, 4)):
        assert job_dir(sweep, job).name == f"seed={seed}_job{job}"
        system = summary(job_dir(sweep, job))["system"]
        assert system["overrides"] == ["experiment=smoke", f"seed={seed}", "env.num_test_envs=1"]
        assert system["command"] == f"rltrain experiment=smoke seed={seed} env.num_test_envs=1"
    git = summary(job_dir(sweep, 0))["system"].get("git", {}).get("rltrain")
    if not (Path(__file__).resolve().parents[2] / ".git").exists():
        pytest.skip("rltrain is not run from a git checkout here, so there is no commit to record")
    assert git is not None and re.fullmatch(r"[0-9a-f]{40}", git["commit"])
    assert isinstance(git["dirty"], bool)


# Ctrl-C is what a person at the shell sends; SIGTERM (a cluster's) with the slow checks
@pytest.mark.parametrize(("sig", "code"), [pytest.param(SIGTERM, 143, marks=pytest.mark.slow),
                                           (SIGINT, 130)])
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
        jobs = [sweep / f"seed={j}_job{j}" for j in (0, 1)]
        wait_for(lambda: all((j / "epochs.jsonl").is_file()
                             and (j / "epochs.jsonl").read_text().strip()
                             for j in jobs), timeout=120, what="both jobs' first epoch")
        pids = [directory.lock_holder_pid(j) for j in jobs]
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
    for job in jobs:
        assert summary(job)["status"] == "interrupted"
        assert f"resume with: rltrain resume={job}" in err
    assert summary(job_dir(sweep, 2))["status"] == "not started"
    assert not (job_dir(sweep, 2) / "epochs.jsonl").exists()
    for pid in pids:  # no orphan: the workers are gone with the sweep
        wait_for(lambda p=pid: not Path(f"/proc/{p}").exists(), timeout=30,
                 what=f"worker {pid} to end")
    res = subprocess.run([str(RLTRAIN), f"resume={job_dir(sweep, 0)}", "trainer.max_epochs=4"],
                         cwd=tmp_path, capture_output=True, text=True, env=cli_env())
    assert res.returncode == 0, res.stderr
    assert [r["epoch"] for r in read_jsonl(job_dir(sweep, 0) / "epochs.jsonl")] == [1, 2, 3, 4]


def _descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc: the parent of each)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def test_a_killed_joblib_sweep_leaves_no_process_behind(tmp_path):
    """SIGKILL to a joblib sweep's main process: its loky workers (about 277 MB each) and
    their resource trackers lived on for 20 minutes and more, training their jobs
    unsupervised. Each job now stops as SIGTERM stops it (its step, a checkpoint, summary.json
    interrupted) and every process of the sweep ends; each line of a job starts with it."""
    if not Path("/proc/self/stat").is_file():
        pytest.skip("needs /proc to list the sweep's processes")
    sweep = tmp_path / "sweep"
    proc = subprocess.Popen(
        [str(RLTRAIN), "--multirun", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
         *SMOKE, "seed=0,1", "trainer.max_epochs=40", "trainer.epoch_num_steps=4096",
         f"hydra.sweep.dir={sweep}"], cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=cli_env(), start_new_session=True)
    family: set[int] = set()
    try:
        jobs = [sweep / f"seed={j}_job{j}" for j in (0, 1)]
        wait_for(lambda: all((j / "epochs.jsonl").is_file()
                             and (j / "epochs.jsonl").read_text().strip()
                             for j in jobs), timeout=120, what="both jobs' first epoch")
        family = _descendants(proc.pid)
        workers = {directory.lock_holder_pid(j) for j in jobs}
        assert None not in workers and workers <= family, (workers, family)
        proc.kill()
        # the pipes end when the last process holding them (a worker) has ended
        out, err = proc.communicate(timeout=120)
        for pid in family:
            wait_for(lambda p=pid: not Path(f"/proc/{p}").exists()
                     or Path(f"/proc/{p}/stat").read_text().split(") ")[1][0] == "Z",
                     timeout=60, what=f"process {pid} of the killed sweep to end")
    finally:
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the sweep
    for num, job in enumerate(jobs):
        assert summary(job)["status"] == "interrupted"
        assert f"[job {num}] rltrain: the sweep's main process (pid {proc.pid}) is gone" in err
        assert f"[job {num}] resume with: rltrain resume={job}" in err
        assert re.search(rf"^\[job {num}\] epoch   1/40 ", out, re.M)
    assert "Traceback" not in err


def test_a_signal_to_a_basic_sweep_stops_it_after_the_running_job(tmp_path):
    sweep = tmp_path / "sweep"
    res = signal_when(["--multirun", *SMOKE, "seed=0,1", "trainer.max_epochs=30",
                       "trainer.epoch_num_steps=2048", f"hydra.sweep.dir={sweep}"], tmp_path,
                      lambda line: line.startswith("epoch   1/30"), SIGTERM)
    assert res.returncode == 143, res.stderr
    assert summary(job_dir(sweep, 0))["status"] == "interrupted"
    assert summary(job_dir(sweep, 1))["status"] == "not started"
    assert f"resume with: rltrain resume={job_dir(sweep, 0)}" in res.stderr


# 33 s: a sweep finished by running its command again is checked by default in
# test_a_basic_sweep_stopped_at_once_is_finished_by_the_command_it_prints
@pytest.mark.slow
def test_a_sweep_run_again_skips_finished_jobs_and_resumes_unfinished_ones(cli, tmp_path):
    """The same sweep command, run again into its directory (as after a crash, or as
    submitit does when it requeues a job): finished jobs are skipped and left as they are,
    an interrupted one resumes from its checkpoint, and every job's records equal those of
    an unbroken sweep. A different sweep into that directory is refused, job by job,
    touching nothing."""
    args = ["--multirun", *SMOKE, "seed=0,1", "trainer.max_epochs=4",
            "trainer.epoch_num_steps=1024"]
    full, broken = tmp_path / "full", tmp_path / "broken"
    assert cli(*args, f"hydra.sweep.dir={full}").returncode == 0
    seen = []

    def job_1_epoch_2(line: str) -> bool:
        seen.append(line.startswith("epoch   2/4"))
        return sum(seen) == 2  # job 0's epoch 2, then job 1's

    res = signal_when([*args, f"hydra.sweep.dir={broken}"], tmp_path, job_1_epoch_2, SIGTERM)
    assert res.returncode == 143, res.stderr
    assert summary(job_dir(broken, 0))["status"] == "completed"
    assert summary(job_dir(broken, 1))["status"] == "interrupted"
    job_0_files = {p: p.read_bytes() for p in job_dir(broken, 0).rglob("*") if p.is_file()}
    # a copy of that directory, and another sweep into it: seed 0's job has the name of the
    # first sweep's job 0 but other settings (refused, nothing touched), seed 5's is new (runs).
    # The first sweep's job 1, interrupted, is listed with its resume command, but this
    # command would not resume it: the way on for this sweep is a directory of its own
    shared = tmp_path / "shared"
    shutil.copytree(broken, shared)
    first_job_1 = job_dir(shared, 1)
    interrupted_files = {p: p.read_bytes() for p in first_job_1.rglob("*") if p.is_file()}
    res = cli("--multirun", *SMOKE, "seed=0,5", "trainer.max_epochs=5",
              "trainer.epoch_num_steps=1024", f"hydra.sweep.dir={shared}")
    assert res.returncode == 1
    assert "already holds a different run" in res.stderr
    assert "  interrupted  " in res.stderr and "resume with: rltrain resume=" in res.stderr
    assert "next: run this sweep with a new hydra.sweep.dir" in res.stderr
    assert "next: finish the sweep" not in res.stderr
    assert {p: p.read_bytes() for p in first_job_1.rglob("*") if p.is_file()} == interrupted_files
    # the same, with this sweep's own seed-5 job interrupted: finishing it is the way on, and
    # the line says that the refused job will be refused again
    shared = tmp_path / "shared2"
    shutil.copytree(broken, shared)
    res = signal_when(["--multirun", *SMOKE, "seed=0,5", "trainer.max_epochs=5",
                       "trainer.epoch_num_steps=1024", f"hydra.sweep.dir={shared}"],
                      tmp_path, lambda line: line.startswith("epoch   2/5"), SIGTERM)
    assert res.returncode == 143, res.stderr
    assert "next: finish the sweep" in res.stderr
    assert "(1 refused job(s) will be refused again" in res.stderr

    res = cli(*args, f"hydra.sweep.dir={broken}")
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert f"job 0: already completed in {job_dir(broken, 0)}: skipped" in res.stdout
    assert f"job 1: resuming the unfinished run in {job_dir(broken, 1)}" in res.stdout
    assert {p: p.read_bytes() for p in job_dir(broken, 0).rglob("*") if p.is_file()} == job_0_files
    for job in (0, 1):
        assert learning_records(job_dir(broken, job)) == learning_records(job_dir(full, job))
        assert summary(job_dir(broken, job))["status"] == "completed"
    assert summary(job_dir(broken, 1))["resumes"][0]["exact"] is True

    # jobs are named by what differs between them: a sweep of other seeds gets directories of
    # its own beside these; one of the same seeds but other settings would reuse their names
    res = cli("--multirun", *SMOKE, "seed=0,1", "trainer.max_epochs=5",
              "trainer.epoch_num_steps=1024", f"hydra.sweep.dir={broken}")
    assert res.returncode == 1
    assert f"{job_dir(broken, 0)} already holds a different run" in res.stderr
    assert "Traceback" not in res.stderr
    assert {p: p.read_bytes() for p in job_dir(broken, 0).rglob("*") if p.is_file()} == job_0_files
    # the same command would be refused again: the way on is another directory
    assert "next: run this sweep with a new hydra.sweep.dir" in res.stderr
    assert "next: finish the sweep" not in res.stderr


SUBMITIT_RUN = ["algo=dqn", "env=cartpole", "seed=0", "trainer.stop_score=null",
                "trainer.test_step_num_episodes=2", "env.num_test_envs=2",
                "logger.tensorboard=false"]
#: a PPO run whose epochs take seconds, and which no test here lets finish
LONG_RUN = [*SMOKE, "trainer.max_epochs=40", "trainer.epoch_num_steps=4096"]


class LiveSweep:
    """``rltrain --multirun hydra/launcher=submitit_local ARGS`` in the background; its stdout
    read line by line as it comes, each line noted with whether the sweep still ran then."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        pytest.importorskip("hydra_plugins.hydra_submitit_launcher",
                            reason="hydra-submitit-launcher (extra: cluster) is not installed")
        self.proc = subprocess.Popen(
            [str(RLTRAIN), "--multirun", "hydra/launcher=submitit_local", *args], cwd=cwd,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(),
            start_new_session=True)
        self.lines: list[tuple[str, bool]] = []
        self.errors: list[str] = []
        self._readers = [threading.Thread(target=self._read, daemon=True),
                         threading.Thread(target=self._read_errors, daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((line, self.proc.poll() is None))

    def _read_errors(self) -> None:
        assert self.proc.stderr is not None
        self.errors.extend(self.proc.stderr)

    def said(self, pattern: str) -> list[tuple[re.Match, bool]]:
        """Each stdout line matching ``pattern``, and whether the sweep ran on after it."""
        return [(m, running) for line, running in list(self.lines)
                if (m := re.search(pattern, line)) is not None]

    def finish(self, timeout: float) -> tuple[int, str, str]:
        """Wait for the sweep and the ends of its output (its jobs hold them too)."""
        try:
            self.proc.wait(timeout=timeout)
            for reader in self._readers:
                reader.join(timeout=60)
        finally:
            self.stop()
        return (self.proc.returncode, "".join(line for line, _ in self.lines),
                "".join(self.errors))

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)


def preempt(job: Path, sweep: Path, before: int | None = None) -> int:
    """Warn the job's running attempt of its coming end as submitit's local executor does
    (SIGUSR2), then, once the job took it (it trains on until near the end), again: it
    checkpoints at once and hands the signal to submitit, which requeues it. ``before``: the
    pid of the previous attempt, to wait for a new one. Returns the pid signalled."""
    wait_for(lambda: directory.lock_holder_pid(job) not in (None, before), timeout=300,
             what="the job's attempt to run")
    pid = directory.lock_holder_pid(job)
    assert pid is not None

    def acks() -> int:
        return sum(p.read_text().count("training on for")
                   for p in (sweep / ".submitit").rglob("*.err"))

    seen = acks()
    os.kill(pid, signal.SIGUSR2)
    # taken (or, if its executor had warned it already, the second warning: it stops)
    wait_for(lambda: acks() > seen or directory.lock_holder_pid(job) != pid, timeout=120,
             what="the job to take SIGUSR2")
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGUSR2)
    return pid


@pytest.mark.slow  # real submitit attempts: 30-50 s idle, and 329 s then a time-out under the
# full suite's load on 2 cores (a fresh clone, 2026-11-25): with the other submitit tests
def test_a_preempted_submitit_job_checkpoints_requeues_and_resumes_exactly(cli, tmp_path):
    """submitit warns a job of preemption (or a coming timeout) with SIGUSR2: the run
    finishes its step, checkpoints and hands the signal to submitit, which requeues the job;
    the requeued job resumes from the checkpoint, and its records equal an unbroken run's. The
    sweep's console says so as it happens (it waited in silence before)."""
    args = [*SUBMITIT_RUN, "trainer.max_epochs=12"]
    full = tmp_path / "full"
    sweep = tmp_path / "sweep"
    # the unbroken run first: while it ran beside the sweep, the sweep's job could end all its
    # epochs before the test looked (then no attempt was left to preempt; seen 2026-11-27)
    assert cli(*args, f"hydra.run.dir={full}").returncode == 0
    live = LiveSweep([*args, f"hydra.sweep.dir={sweep}"], tmp_path)
    job = sweep / "job0"  # a sweep of one job: no override differs
    try:
        wait_for(lambda: (job / "epochs.jsonl").is_file()
                 and len((job / "epochs.jsonl").read_text().splitlines()) >= 3,
                 timeout=300, what="the job's third epoch")
        pid = preempt(job, sweep)
        assert pid != live.proc.pid
        code, out, err = live.finish(timeout=300)
    finally:
        live.stop()
    assert code == 0, err
    logs = "".join(p.read_text() for p in (sweep / ".submitit").rglob("*.out"))
    logs += "".join(p.read_text() for p in (sweep / ".submitit").rglob("*.err"))
    assert "Requeued job" in logs
    assert f"job 0: resuming the unfinished run in {job}" in logs
    resumes = summary(job)["resumes"]
    assert len(resumes) == 1 and resumes[0]["exact"] is True
    assert summary(job)["status"] == "completed"
    assert learning_records(job) == learning_records(full)

    epoch = resumes[0]["epoch"]
    # a preemption, as submitit sees it (the job is far from its 60-minute limit): it does not
    # count against the timeouts allowed (max_num_timeout, 20 by default here)
    requeued = live.said(rf"^rltrain: job 0: preempted at epoch {epoch}, requeued \(attempt 2; "
                         r"timeouts left: 20\)$")
    resumed = live.said(rf"^rltrain: job 0: resumed at epoch {epoch} \(attempt 2\)$")
    assert len(requeued) == 1 and len(resumed) == 1, out
    assert requeued[0][1] and resumed[0][1], "said only once the sweep had ended"
    assert re.search(r"^rltrain: job 0: completed, best \d+\.\d \(12 epochs, 2 attempt\(s\)\)$",
                     out, re.M)
    assert out.splitlines()[-1] == f"next: rltrain-report {sweep}"


def test_a_submitit_job_out_of_requeues_is_a_failed_job_with_its_resume_command(tmp_path):
    """A job stopped for a timeout with no requeue left ended the sweep as 'the sweep could
    not run: UncompletedJobError' (exit 2), silent until then: it is a failed job of the sweep
    (exit 1), said as it happened, listed with its resume command."""
    sweep = tmp_path / "sweep"
    job = sweep / "job0"
    # with a one-minute limit submitit takes any warning for a timeout
    live = LiveSweep(["hydra.launcher.timeout_min=1", "+hydra.launcher.max_num_timeout=0",
                      *LONG_RUN, f"hydra.sweep.dir={sweep}"], tmp_path)
    try:
        wait_for(lambda: (job / "epochs.jsonl").is_file()
                 and (job / "epochs.jsonl").read_text().strip(),
                 timeout=300, what="the job's first epoch")
        preempt(job, sweep)
        code, out, err = live.finish(timeout=300)
    finally:
        live.stop()
    assert code == 1, err
    assert "Traceback" not in err and "could not run" not in err
    stopped = summary(job)
    assert stopped["status"] == "interrupted"
    assert (f"rltrain: job 0: failed: timed out at epoch {stopped['epochs']}, with no requeue "
            f"left (+hydra.launcher.max_num_timeout=0; attempt 1); resume with: "
            f"rltrain resume={job}") in err
    report = err[err.index(f"rltrain: sweep {sweep}"):]
    assert "1 job(s): 0 failed, 1 interrupted" in report
    assert re.search(rf"0\s+interrupted\s+{re.escape(str(job))}\s+resume with: rltrain "
                     rf"resume={re.escape(str(job))}$", report, re.M)
    assert report.strip().splitlines()[-1].startswith("next: finish the sweep")


@pytest.mark.slow
def test_a_local_submitit_job_goes_on_past_the_controllers_six_attempts(cli, tmp_path):
    """submitit's local controller starts a job 6 times at most, whatever max_num_timeout
    says: the sweep submits it again, and it resumes, exactly, until it completes. The
    unbroken run for comparison goes first: beside it, the sweep's job could train through
    so many of its 12 epochs that 7 preemptions, one an epoch, would outlast it."""
    args = [*SMOKE, "trainer.max_epochs=12", "trainer.epoch_num_steps=2048"]
    sweep, full = tmp_path / "sweep", tmp_path / "full"
    job = sweep / "job0"
    assert cli(*args, f"hydra.run.dir={full}").returncode == 0
    live = LiveSweep([*args, f"hydra.sweep.dir={sweep}"], tmp_path)
    try:
        pid = None
        for _ in range(7):
            done = len((job / "epochs.jsonl").read_text().splitlines()) \
                if (job / "epochs.jsonl").is_file() else 0
            wait_for(lambda d=done: (job / "epochs.jsonl").is_file()
                     and len((job / "epochs.jsonl").read_text().splitlines()) > d,
                     timeout=300, what="an epoch of the job's next attempt")
            pid = preempt(job, sweep, before=pid)
        code, out, err = live.finish(timeout=600)
    finally:
        live.stop()
    assert code == 0, err
    assert live.said(r"^rltrain: job 0: submitted again \(attempt 7, local job "), out
    assert live.said(r"^rltrain: job 0: resumed at epoch \d+ \(attempt 8\)$"), out
    resumes = summary(job)["resumes"]
    assert len(resumes) == 7 and all(r["exact"] for r in resumes)
    assert learning_records(job) == learning_records(full)


@pytest.mark.slow
def test_a_submitit_job_past_its_timeout_is_requeued_and_resumes_exactly(cli, tmp_path):
    """The README's example, the real thing: submitit_local with a one-minute timeout (it
    sends SIGUSR2 30 s before the end; the job trains on for 20 s of them) and a DQN run of
    several minutes; each requeue and resume said as it happens."""
    args = [*SUBMITIT_RUN, "trainer.max_epochs=80"]
    full, sweep = tmp_path / "full", tmp_path / "sweep"
    live = LiveSweep(["hydra.launcher.timeout_min=1", *args, f"hydra.sweep.dir={sweep}"],
                     tmp_path)
    try:
        assert cli(*args, f"hydra.run.dir={full}", timeout=1200).returncode == 0
        code, out, err = live.finish(timeout=3000)
    finally:
        live.stop()
    assert code == 0, err
    resumes = summary(job_dir(sweep, 0))["resumes"]
    assert resumes, "the run was never requeued (a faster machine?)"
    assert all(r["exact"] for r in resumes)
    assert learning_records(job_dir(sweep, 0)) == learning_records(full)
    said = live.said(r"^rltrain: job 0: resumed at epoch (\d+) \(attempt (\d+)\)$")
    assert [int(m[1]) for m, _ in said] == [r["epoch"] for r in resumes]
    assert all(running for _, running in said)


def test_the_slurm_example_composes_with_requeueing_on():
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher",
                        reason="hydra-submitit-launcher (extra: cluster) is not installed")
    launcher = compose_run("hydra/launcher=slurm", "hydra.launcher.partition=cpu",
                           hydra=True).hydra.launcher
    assert launcher["_target_"].endswith("SlurmLauncher")
    assert launcher["partition"] == "cpu"
    assert launcher["max_num_timeout"] > 0 and launcher["signal_delay_s"] > 0


def test_a_launcher_that_refuses_its_settings_is_one_line_and_exit_2(cli, tmp_path):
    """submitit refuses an unknown executor parameter with a NameError from inside the
    launcher: one line naming it, no traceback, no job started."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher",
                        reason="hydra-submitit-launcher (extra: cluster) is not installed")
    sweep = tmp_path / "sweep"
    res = cli("--multirun", "hydra/launcher=submitit_local", "+hydra.launcher.foo=1", *SMOKE,
              f"hydra.sweep.dir={sweep}")
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and 'File "' not in res.stderr
    assert ("rltrain: error: the sweep could not run: NameError: Unknown argument 'foo'"
            in res.stderr)
    assert not list(sweep.glob("*/summary.json"))


def test_a_ray_sweep_records_a_failing_job_and_runs_the_others(cli, tmp_path):
    """hydra/launcher=ray on a local Ray instance (extra: ray): each job is a Ray task in its
    own worker process; a job with a config error is recorded and the sweep goes on."""
    pytest.importorskip("hydra_plugins.hydra_ray_launcher",
                        reason="hydra-ray-launcher (extra: ray) is not installed")
    sweep = tmp_path / "sweep"
    res = cli("--multirun", "hydra/launcher=ray", "-q", *SMOKE, "env.num_train_envs=0,8",
              f"hydra.sweep.dir={sweep}", env={"RAY_USAGE_STATS_ENABLED": "0"}, timeout=600)
    assert res.returncode == 1, res.stderr
    assert summary(job_dir(sweep, 0))["status"] == "failed"
    assert summary(job_dir(sweep, 0))["error"] == "env.num_train_envs must be > 0, got 0"
    assert summary(job_dir(sweep, 1))["status"] == "completed"
    assert "env.num_train_envs=8" in summary(job_dir(sweep, 1))["system"]["overrides"]
    assert "2 job(s): 1 failed, 0 interrupted" in res.stderr
