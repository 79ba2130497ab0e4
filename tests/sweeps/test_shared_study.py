"""Several Optuna sweeps into one study (``hydra/sweeper=optuna`` with one ``storage``), through
the real CLI and real SQLite and journal files: each trial is run and counted once, a live
trial is never taken for a stale one, and a trial whose sweep was killed is failed and run
again once its heartbeat has stopped for the grace period."""

from __future__ import annotations

import datetime as dt
import signal
import subprocess
import time
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna", reason="the tune extra (optuna) is not installed")

from optuna.distributions import FloatDistribution  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

from conftest import RLTRAIN, cli_env, signal_when  # noqa: E402
from rltrain.assembly.optuna_trial import Heartbeats, open_storage  # noqa: E402
from rltrain.config.schemas import job_number  # noqa: E402
from rltrain.sweeps.optuna.conf import OptunaSweeperConf  # noqa: E402
from rltrain.sweeps.optuna.shared import SharedStudy  # noqa: E402

#: a trial of a second or two: PPO on CartPole, one short epoch, one test episode
TINY = ["algo=ppo", "env=cartpole", "trainer.max_epochs=1", "trainer.epoch_num_steps=128",
        "trainer.stop_score=null", "trainer.test_step_num_episodes=1", "env.num_test_envs=1",
        "logger.tensorboard=false", "algo.lr=interval(1e-4, 1e-2)",
        "hydra.sweeper.pruner.name=none", "hydra.sweeper.n_jobs=1"]
STUDY = "rltrain-ppo-cartpole"


def storage_url(kind: str, tmp_path: Path) -> str:
    return (f"journal:{tmp_path / 'study.log'}" if kind == "journal"
            else f"sqlite:///{tmp_path / 'study.db'}")


def sweep_args(url: str, sweep: Path, *extra: str) -> list[str]:
    return ["--multirun", "hydra/sweeper=optuna", "-q", *TINY, f"hydra.sweeper.storage={url}",
            f"hydra.sweep.dir={sweep}", *extra]


def start(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([str(RLTRAIN), *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=cli_env())


def load(url: str) -> optuna.Study:
    return optuna.load_study(study_name=STUDY, storage=open_storage(url))


def job_dirs(sweep: Path) -> dict[int, Path]:
    """The jobs a sweep ran, by trial number (the ``_job<N>`` suffix)."""
    return {n: p for p in sweep.iterdir() if p.is_dir() and (n := job_number(p.name)) is not None}


def _open_and_say(url: str, answers) -> None:
    try:
        open_storage(url)
        answers.put("ok")
    except Exception as e:  # noqa: BLE001 - the answer the test reads
        answers.put(f"{type(e).__name__}: {e}")


def test_processes_opening_a_new_sqlite_study_at_once_all_get_it(tmp_path):
    """Optuna creates its tables and stamps their version in steps: four processes opening a
    new SQLite file at the same moment collided (IntegrityError or 'table ... already
    exists') in 4 of 5 tries before open_storage tried again; now every one gets the
    storage, in each of three rounds."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    for round_ in range(3):
        url = f"sqlite:///{tmp_path / f'study{round_}.db'}"
        answers = ctx.Queue()
        procs = [ctx.Process(target=_open_and_say, args=(url, answers)) for _ in range(4)]
        for p in procs:
            p.start()
        got = [answers.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        assert got == ["ok"] * 4, got
    assert open_storage(url).get_all_studies() == []  # a sound database, no study yet


# each storage once by default; the other pairs with the slow checks
@pytest.mark.parametrize(("kind", "n_sweeps", "sampler"), [
    pytest.param("sqlite", 2, "tpe", marks=pytest.mark.slow), ("journal", 2, "grid"),
    ("sqlite", 3, "tpe"), pytest.param("journal", 3, "tpe", marks=pytest.mark.slow)])
def test_concurrent_sweeps_fill_one_study_once(tmp_path, kind, n_sweeps, sampler):
    """Sweeps started 1.5 s apart into one study: together they run exactly n_trials trials
    (each sweep asks only what the study lacks, counting the others' running trials), none
    is taken from a live sweep, and each waits for the others' last trials, so every one
    ends with the whole study finished. A grid is queued once, whichever sweep queues it."""
    url = storage_url(kind, tmp_path)
    n_trials = n_sweeps + 1
    grid = ([f"algo.lr=choice({','.join(str(0.001 * (i + 1)) for i in range(n_trials))})",
             "hydra.sweeper.sampler.name=grid"] if sampler == "grid" else [])
    procs = []
    for i in range(n_sweeps):
        procs.append(start(sweep_args(url, tmp_path / f"sweep{i}", *grid,
                                      f"hydra.sweeper.n_trials={n_trials}"), tmp_path))
        time.sleep(1.5)
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        assert "Traceback" not in err and "error" not in err, err
        assert f"{n_trials} trials: {n_trials} complete, 0 pruned, 0 failed;" in out, out
    trials = load(url).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE] * n_trials
    assert not any("retry_of" in t.user_attrs or t.user_attrs.get("interrupted")
                   for t in trials)
    assert len({t.params["algo.lr"] for t in trials}) == n_trials  # no parameters run twice
    # each trial ran once, as the job its sweep told it with
    ran = {n: d for i in range(n_sweeps) for n, d in job_dirs(tmp_path / f"sweep{i}").items()}
    assert sum(len(job_dirs(tmp_path / f"sweep{i}")) for i in range(n_sweeps)) == n_trials
    assert {n: str(d) for n, d in ran.items()} == {t.number: t.user_attrs["run_dir"]
                                                   for t in trials}
    assert all(len(t.intermediate_values) == 1 for t in trials)  # its epoch reported


# the journal with the slow checks: the heartbeat is Optuna's, the same for both storages
@pytest.mark.parametrize("kind", ["sqlite", pytest.param("journal", marks=pytest.mark.slow)])
def test_a_killed_sweeps_trial_is_run_again_once_its_heartbeat_is_stale(tmp_path, kind):
    """Sweep A is killed (SIGKILL) while its first trial trains; sweep B, started at once,
    fails that trial (interrupted) only once its heartbeat is grace_period old, and runs its
    parameters again; B ends with the study's two trials finished."""
    url = storage_url(kind, tmp_path)
    beat = ["hydra.sweeper.n_trials=2", "hydra.sweeper.heartbeat_interval=1",
            "hydra.sweeper.grace_period=5"]
    # A's job trains long (its own budget; the retry runs B's), and A is killed as it starts
    # training: its build lines say so ("run directory ..." is the last), where -q is off
    slow = [a for a in sweep_args(url, tmp_path / "a", *beat) if a != "-q"]
    a = signal_when([*slow, "trainer.epoch_num_steps=500000"], tmp_path,
                    lambda line: line.startswith("run directory "), signal.SIGKILL)
    killed_at = dt.datetime.now()
    assert a.returncode == -signal.SIGKILL
    (killed,) = job_dirs(tmp_path / "a")  # the trial A ran when it was killed
    # B starts as A's trial still looks alive (its last beat is fresh): B must leave it until
    # its heartbeat is grace_period old (B was once started first; on a loaded machine its
    # first trial could end before A asked any, and A then had no trial to be killed in)
    b = start(sweep_args(url, tmp_path / "b", *beat), tmp_path)
    out, err = b.communicate(timeout=300)
    assert b.returncode == 0, err
    assert "Traceback" not in err
    trials = load(url).trials
    lost = trials[killed]
    assert lost.state == TrialState.FAIL and lost.user_attrs["interrupted"]
    assert "no heartbeat for more than 5 s" in lost.user_attrs["error"]
    # failed no sooner than its heartbeat went stale (the last beat came before the kill, at
    # most an interval before; an RDB storage counts whole seconds)
    assert lost.datetime_complete is not None
    assert (lost.datetime_complete - killed_at).total_seconds() > 2
    (retry,) = [t for t in trials if t.user_attrs.get("retry_of") == killed]
    assert retry.state == TrialState.COMPLETE and retry.params == lost.params
    assert [t.state for t in trials if t.number != killed] == [TrialState.COMPLETE] * 2
    assert "3 trials: 2 complete, 0 pruned, 0 failed, 1 interrupted (not counted)" in out, out
    assert str(tmp_path / "b") in retry.user_attrs["run_dir"]


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("journal", marks=pytest.mark.slow)])
def test_a_live_trial_keeps_its_heartbeat_past_the_grace_period(tmp_path, kind):
    """In-process, on a real storage: a trial whose sweep is alive is not stale however long
    it runs; once its sweep stops beating (as a killed one does) another sweep takes it after
    the grace period, once: failed (interrupted) and its parameters queued again."""
    url = storage_url(kind, tmp_path)
    conf = OptunaSweeperConf(heartbeat_interval=1, grace_period=3)
    space = {"algo.lr": FloatDistribution(1e-4, 1e-2)}

    def sweep() -> SharedStudy:
        storage = open_storage(url)
        study = optuna.create_study(study_name=STUDY, storage=storage, load_if_exists=True,
                                    direction="maximize")
        return SharedStudy(study, storage, Heartbeats(url, storage, 1, 3), conf)

    owner, other = sweep(), sweep()
    trial = owner.ask(space)
    time.sleep(4.5)  # longer than the grace period: the owner's thread keeps beating
    other.take_stale()
    assert load(url).trials[trial.number].state == TrialState.RUNNING
    owner.close()  # no more heartbeats: the sweep is gone
    time.sleep(4.5)
    other.take_stale()
    other.take_stale()  # taken once
    trials = load(url).trials
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.WAITING]
    assert trials[0].user_attrs["interrupted"]
    assert trials[1].system_attrs["fixed_params"] == trials[0].params  # asked next
    assert trials[1].user_attrs["retry_of"] == 0
    assert other.tally().finished == 0  # an interrupted trial does not count


def test_a_trial_is_judged_by_the_longest_grace_period_a_running_sweep_declared(tmp_path):
    """A sweep with a short grace period does not take the trial of a sweep that declared a
    longer one (sweeps into one study given different settings): the trial's heartbeat has
    stopped for longer than the short grace period, not the long one."""
    url = storage_url("sqlite", tmp_path)
    space = {"algo.lr": FloatDistribution(1e-4, 1e-2)}

    def sweep(grace: float) -> SharedStudy:
        storage = open_storage(url)
        study = optuna.create_study(study_name=STUDY, storage=storage, load_if_exists=True,
                                    direction="maximize")
        conf = OptunaSweeperConf(heartbeat_interval=1, grace_period=grace)
        return SharedStudy(study, storage, Heartbeats(url, storage, 1, grace), conf)

    patient, hasty = sweep(600), sweep(2)
    patient.ask(space)
    patient.close()  # no heartbeat after the first
    time.sleep(3.5)
    hasty.take_stale()
    assert [t.state for t in load(url).trials] == [TrialState.RUNNING]
    assert hasty.grace == 600
