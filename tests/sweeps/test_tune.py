"""The Optuna sweeper (``hydra/sweeper=optuna``), through the real CLI and real Optuna
storages: pruning, failed trials, the tuned file, continued studies, parallel trials."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna", reason="the tune extra (optuna) is not installed")

from omegaconf import OmegaConf, open_dict  # noqa: E402
from optuna.distributions import (  # noqa: E402
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState  # noqa: E402

from conftest import CONF as CONF_DIR  # noqa: E402
from conftest import compose_run, job_dir, run_in_process  # noqa: E402
from rltrain.assembly.optuna_trial import objective  # noqa: E402
from rltrain.config.schemas import job_number  # noqa: E402
from rltrain.sweeps.optuna.space import encode, search_space  # noqa: E402

#: a short PPO CartPole budget: 4 epochs of 1,024 env steps, no early stop
SHORT = ["algo=ppo", "env=cartpole", "trainer.max_epochs=4", "trainer.epoch_num_steps=1024",
         "trainer.stop_score=null", "trainer.test_step_num_episodes=2", "env.num_test_envs=2",
         "logger.tensorboard=false"]


def study(sweep: Path) -> optuna.Study:
    """The one study in the sweep's default storage."""
    url = f"sqlite:///{sweep / 'optuna.db'}"
    (name,) = optuna.get_all_study_names(storage=url)
    return optuna.load_study(study_name=name, storage=url)


def summary(run_dir: str | Path) -> dict:
    return json.loads((Path(run_dir) / "summary.json").read_text())


# ---------------------------------------------------------------------- units
def test_objective_auc_carries_the_last_score_over_skipped_epochs():
    assert objective([10, 20, 30], planned_epochs=3) == 20
    # stopped early at epoch 2 of 4: 30 is carried over epochs 3 and 4
    assert objective([10, 30], planned_epochs=4) == (10 + 30 + 30 + 30) / 4
    assert objective([10, 30], planned_epochs=4, kind="best") == 30
    assert objective([10, 30, 20], planned_epochs=4, kind="final") == 20
    assert objective([10, 30, 20], planned_epochs=4, kind="last_k", last_k=2) == 25
    assert objective([5], planned_epochs=4, kind="last_k", last_k=3) == 5
    with pytest.raises(ValueError):
        objective([], planned_epochs=4)


def test_search_space_from_hydra_syntax_and_optuna_distributions():
    fixed, space = search_space(
        ["algo=ppo", "seed=3", "algo.gamma=choice(0.9,0.99)"],
        {"algo.lr": "tag(log, interval(1e-4, 1e-2))",
         "algo.n_step": "range(1, 6)",
         "algo.hidden_sizes": "choice([64,64],[128,128])",
         "trainer.batch_size": "tag(int, interval(32, 256))",
         "algo.tau": {"type": "float", "low": 0.001, "high": 0.1, "log": True},
         "algo.gamma": "interval(0.5, 0.6)"})  # replaced by the command line's sweep
    assert fixed == ["algo=ppo", "seed=3"]
    assert space["algo.lr"] == FloatDistribution(1e-4, 1e-2, log=True)
    assert space["algo.n_step"] == IntDistribution(1, 5)
    assert space["algo.hidden_sizes"] == CategoricalDistribution(["[64,64]", "[128,128]"])
    assert space["trainer.batch_size"] == IntDistribution(32, 256)
    assert space["algo.tau"] == FloatDistribution(0.001, 0.1, log=True)
    assert space["algo.gamma"] == CategoricalDistribution([0.9, 0.99])


def test_a_search_space_that_does_not_parse_is_named():
    from rltrain.sweeps.optuna.conf import SweepError

    with pytest.raises(SweepError, match=r"hydra.sweeper.params.algo.lr=interval\(1 is not a "
                                         r"search space"):
        search_space([], {"algo.lr": "interval(1"})
    with pytest.raises(SweepError, match="type must be float, int or categorical"):
        search_space([], {"algo.lr": {"type": "normal", "low": 0, "high": 1}})


@pytest.mark.parametrize("value", [3, 0.0003, 1e-05, True, None, "relu", "[64,64]",
                                   "sqlite:////tmp/a b/optuna.db", "it's"])
def test_encoded_values_parse_back_to_themselves(value):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_override(f"key={encode(value)}").value()
    assert parsed == ([64, 64] if value == "[64,64]" else value)


# ---------------------------------------------------------------------- studies
def test_study_prunes_writes_its_results_and_the_tuned_file_trains(cli, tmp_path):
    sweep = tmp_path / "sweep"
    res = cli("--multirun", "hydra/sweeper=optuna", "-q", *SHORT,
              "algo.lr=tag(log, interval(1e-5, 1e-2))", "algo.clip_ratio=interval(0.05, 0.4)",
              "hydra.sweeper.n_trials=8", "hydra.sweeper.pruner.n_startup_trials=1",
              "hydra.sweeper.pruner.n_warmup_steps=1", f"hydra.sweep.dir={sweep}")
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    trials = study(sweep).trials
    assert len(trials) == 8
    states = [t.state for t in trials]
    assert TrialState.PRUNED in states and TrialState.COMPLETE in states
    for t in trials:
        run = summary(t.user_attrs["run_dir"])
        if t.state == TrialState.PRUNED:
            # pruned after an epoch, its directory complete, its last value recorded
            assert run["status"] == "pruned" and run["epochs"] < 4
            assert max(t.intermediate_values) == run["epochs"]
            assert (Path(t.user_attrs["run_dir"]) / "final" / "policy.pt").is_file()
        else:
            assert run["status"] == "completed" and run["epochs"] == 4
            scores = [json.loads(line)["test"]["return_mean"] for line in
                      (Path(t.user_attrs["run_dir"]) / "epochs.jsonl").read_text().splitlines()]
            assert t.value == pytest.approx(sum(scores) / 4)  # auc over the planned epochs
    rows = list(csv.DictReader((sweep / "trials.csv").read_text().splitlines()))
    assert [r["state"] for r in rows] == [t.state.name.lower() for t in trials]
    for name in ("optimization_history.png", "param_importances.png"):
        assert (sweep / name).read_bytes()[:4] == b"\x89PNG"

    best = study(sweep).best_trial
    assert f"best trial {best.number}:" in res.stdout
    tuned = sweep / "conf" / "tuned" / "ppo_cartpole.yaml"
    assert tuned.read_text().startswith("# @package _global_")
    said = res.stdout
    # the command it prints, composed in this process
    composed = compose_run("--config-dir", str(sweep / "conf"), "experiment=tuned_ppo_cartpole")
    assert composed["algo"]["lr"] == pytest.approx(best.params["algo.lr"])
    assert composed["algo"]["clip_ratio"] == pytest.approx(best.params["algo.clip_ratio"])
    # the budget to train with is the one rltrain algo=ppo env=cartpole has (the shipped
    # tuned file's), not the trials' short one (issue 45 §5: it kept max_epochs=4)
    plain = compose_run("algo=ppo", "env=cartpole")["trainer"]
    budget = ("max_epochs", "epoch_num_steps", "stop_score", "test_step_num_episodes")
    assert {k: composed["trainer"][k] for k in budget} == {k: plain[k] for k in budget}
    assert plain["max_epochs"] != 4
    assert (f"rltrain: the tuned files carry the budget rltrain algo=ppo env=cartpole trains "
            f"with (tuned/ppo_cartpole.yaml): trainer.max_epochs={plain['max_epochs']} "
            f"trainer.epoch_num_steps={plain['epoch_num_steps']} trainer.stop_score=auto "
            f"trainer.test_step_num_episodes={plain['test_step_num_episodes']}, not the "
            "trials' (trainer.max_epochs=4 trainer.epoch_num_steps=1024 trainer.stop_score=null "
            "trainer.test_step_num_episodes=2); set those keys on the command line for "
            "another") in said
    assert "# budget: the budget rltrain algo=ppo env=cartpole trains with" in tuned.read_text()


def test_a_searched_budget_key_stays_the_best_trials_and_the_rest_are_the_defaults(cli,
                                                                                 tmp_path):
    """PPO on Acrobot has no tuned file: the tuned files carry the defaults' budget, but for
    trainer.max_epochs, which this search searched (a setting like any other then)."""
    sweep = tmp_path / "sweep"
    res = cli("--multirun", "hydra/sweeper=optuna", "-q", "algo=ppo", "env=acrobot",
              "trainer.max_epochs=choice(1,2)", "trainer.epoch_num_steps=256",
              "trainer.stop_score=null", "trainer.test_step_num_episodes=1",
              "env.num_test_envs=1", "logger.tensorboard=false", "hydra.sweeper.n_trials=1",
              f"hydra.sweep.dir={sweep}")
    assert res.returncode == 0, res.stderr
    import yaml

    best = study(sweep).best_trial
    plain = compose_run("algo=ppo", "env=acrobot")["trainer"]
    written = yaml.safe_load((sweep / "conf" / "experiment" / "tuned_ppo_acrobot.yaml")
                             .read_text())["trainer"]
    assert written["max_epochs"] == best.params["trainer.max_epochs"]
    for key in ("epoch_num_steps", "stop_score", "test_step_num_episodes"):
        assert written[key] == plain[key], key
    assert ("rltrain: the tuned files carry the budget rltrain algo=ppo env=acrobot trains "
            "with (no tuned file: the defaults): trainer.epoch_num_steps=") in res.stdout


def test_invalid_and_crashing_trials_fail_and_the_study_goes_on(cli, tmp_path):
    """A grid over an invalid gamma and an env that yields NaN rewards early: three of the
    four trials fail (recorded with their reason); the study ends with the fourth best."""
    sweep = tmp_path / "sweep"
    res = cli("--multirun", "hydra/sweeper=optuna", "hydra.sweeper.sampler.name=grid", "-q",
              *SHORT, "trainer.max_epochs=2", "env=gym",
              "env.id=fault_envs:rltrain-test/NaNReward-v0",
              "env.kwargs.nan_at=choice(10,100000)", "algo.gamma=choice(0.9,1.5)",
              f"hydra.sweep.dir={sweep}")
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    trials = study(sweep).trials
    assert len(trials) == 4
    failed = {(t.params["++env.kwargs.nan_at"] if "++env.kwargs.nan_at" in t.params
               else t.params["env.kwargs.nan_at"], t.params["algo.gamma"]): t
              for t in trials if t.state == TrialState.FAIL}
    assert set(failed) == {(10, 0.9), (10, 1.5), (100000, 1.5)}
    assert "algo.gamma must be in [0, 1]" in failed[(100000, 1.5)].user_attrs["error"]
    assert "non-finite reward" in failed[(10, 0.9)].user_attrs["error"]
    best = study(sweep).best_trial
    assert best.params["algo.gamma"] == 0.9
    assert "4 trials: 1 complete, 0 pruned, 3 failed" in res.stdout


def test_a_study_without_a_complete_trial_exits_1_and_writes_no_tuned_file(cli, tmp_path):
    """Every trial invalid (gamma above 1): the study holds them as failed, trials.csv says
    so, and with no best trial there is no tuned file; the sweep exits 1."""
    sweep = tmp_path / "sweep"
    res = cli("--multirun", "hydra/sweeper=optuna", "hydra.sweeper.sampler.name=grid", "-q",
              *SHORT, "algo.gamma=choice(1.5,2.0)", f"hydra.sweep.dir={sweep}")
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr
    assert "2 trials: 0 complete, 0 pruned, 2 failed" in res.stdout
    assert "rltrain: error: no trial completed, so there is no best one" in res.stderr
    assert [t.state for t in study(sweep).trials] == [TrialState.FAIL] * 2
    with open(sweep / "trials.csv", newline="") as f:
        assert [row["state"] for row in csv.DictReader(f)] == ["fail", "fail"]
    assert not (sweep / "conf").exists()


def test_rerun_continues_the_study_and_a_trial_without_heartbeat_is_asked_again(cli, tmp_path):
    """A trial left running without a heartbeat (by an rltrain before heartbeats, or another
    program) is taken for stale once it started more than grace_period ago: failed
    (interrupted, not counted) and its parameters asked again. (A trial whose sweep was
    killed, with its heartbeat: tests/sweeps/test_shared_study.py.)"""
    sweep = tmp_path / "sweep"
    args = ["--multirun", "hydra/sweeper=optuna", "-q", *SHORT, "trainer.max_epochs=1",
            "algo.lr=interval(1e-4, 1e-2)", "hydra.sweeper.pruner.name=none",
            "hydra.sweeper.heartbeat_interval=1", "hydra.sweeper.grace_period=2",
            f"hydra.sweep.dir={sweep}"]
    res = cli(*args, "hydra.sweeper.n_trials=2")
    assert res.returncode == 0, res.stderr
    s = study(sweep)
    stale = s.ask({"algo.lr": FloatDistribution(1e-4, 1e-2)})
    res = cli(*args, "hydra.sweeper.n_trials=4")
    assert res.returncode == 0, res.stderr
    assert "5 trials: 4 complete, 0 pruned, 0 failed, 1 interrupted (not counted)" in res.stdout
    trials = study(sweep).trials
    assert [t.number for t in trials] == [0, 1, 2, 3, 4]
    assert trials[2].state == TrialState.FAIL and trials[2].user_attrs["interrupted"]
    assert "without a heartbeat" in trials[2].user_attrs["error"]
    (retry,) = [t for t in trials if t.user_attrs.get("retry_of") == stale.number]
    assert retry.params == stale.params  # asked again
    assert all(t.state == TrialState.COMPLETE for t in trials if t.number != 2)
    jobs = {job_number(p.name): p.name for p in sweep.iterdir() if p.is_dir()}
    assert sorted(n for n in jobs if n is not None) == [0, 1, 3, 4]
    # each trial's directory is named by its sampled value (four significant digits), then
    # its number
    assert jobs[retry.number] == f"algo.lr={retry.params['algo.lr']:.4g}_job{retry.number}"
    assert summary(job_dir(sweep, 0))["status"] == "completed"  # untouched


# a journal shared by sweeps is in test_shared_study; this one with the slow checks
@pytest.mark.parametrize("storage", ["sqlite", pytest.param("journal", marks=pytest.mark.slow)])
def test_parallel_trials_share_one_study(cli, tmp_path, storage):
    sweep = tmp_path / "sweep"
    url = ([f"hydra.sweeper.storage=journal:{tmp_path / 'study.log'}"]
           if storage == "journal" else [])
    res = cli("--multirun", "hydra/sweeper=optuna", "hydra/launcher=joblib",
              "hydra.launcher.n_jobs=2", "-q", *SHORT, "trainer.max_epochs=2",
              "algo.lr=interval(1e-4, 1e-2)", "hydra.sweeper.n_trials=4", *url,
              f"hydra.sweep.dir={sweep}")
    assert res.returncode == 0, res.stderr
    target = (f"journal:{tmp_path / 'study.log'}" if storage == "journal"
              else f"sqlite:///{sweep / 'optuna.db'}")
    from rltrain.assembly.optuna_trial import open_storage

    s = optuna.load_study(study_name="rltrain-ppo-cartpole", storage=open_storage(target))
    assert [t.state for t in s.trials] == [TrialState.COMPLETE] * 4
    assert all(len(t.intermediate_values) == 2 for t in s.trials)  # each epoch reported


#: each a CLI process of 3-5 s: the first and the last by default, the rest with the slow checks
BAD_SWEEPER_SETTINGS = [
    (["hydra.sweeper.sampler.name=foo"], "hydra.sweeper.sampler.name must be one of tpe"),
    (["hydra.sweeper.sampler.name=grid", "algo.lr=interval(1e-4, 1e-2)"],
     "grid needs a finite set of values: algo.lr is an interval"),
    (["hydra.sweeper.objective=median"], "hydra.sweeper.objective must be one of auc"),
    (["hydra.sweeper.n_trials=0", "algo.lr=interval(1e-4, 1e-2)"],
     "hydra.sweeper.n_trials must be > 0"),
    ([], "the search space is empty"),
    (["algo.lr=interval(1e-2, 1e-4)"],
     "the search space algo.lr=interval(1e-2, 1e-4): `low <= high` must hold"),
    (["algo.lr=tag(log, interval(0, 1))"], "`low > 0` must hold for `log=True`"),
    (["algo.lr=interval(1e-4, 1e-2)", "hydra.sweeper.storage=nosuchdb://x"],
     "the study's storage nosuchdb://x cannot be used"),
    (["hydra.sweeper.n_trials=abc"], "hydra.sweeper.n_trials='abc' is not valid: "
                                     "hydra.sweeper.n_trials takes an integer"),
    (["hydra.sweeper.heartbeat_interval=30", "hydra.sweeper.grace_period=20"],
     "hydra.sweeper.grace_period (20) must be more than hydra.sweeper.heartbeat_interval (30)"),
]


@pytest.mark.parametrize(("args", "message"), [
    case if i in (0, len(BAD_SWEEPER_SETTINGS) - 1)
    else pytest.param(*case, marks=pytest.mark.slow)
    for i, case in enumerate(BAD_SWEEPER_SETTINGS)])
def test_bad_sweeper_settings_are_one_line(cli, tmp_path, args, message):
    res = cli("--multirun", "hydra/sweeper=optuna", *SHORT, *args,
              f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert res.returncode == 2
    assert message in res.stderr
    assert "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


@pytest.mark.parametrize(("settings", "message"), [
    ({"heartbeat_interval": 0.0}, "heartbeat_interval must be a finite number of seconds > 0, "
                                  "got 0.0"),
    ({"heartbeat_interval": -1.0}, "heartbeat_interval must be a finite number"),
    ({"heartbeat_interval": math.inf}, "heartbeat_interval must be a finite number"),
    ({"grace_period": math.nan}, "grace_period must be a finite number of seconds > 0, got nan"),
    ({"heartbeat_interval": 10.0, "grace_period": 10.0},
     "grace_period (10) must be more than hydra.sweeper.heartbeat_interval (10)"),
])
def test_heartbeat_settings_are_checked(settings, message):
    from rltrain.sweeps.optuna.conf import OptunaSweeperConf, SweepError, check_conf

    check_conf(OptunaSweeperConf(heartbeat_interval=1.0, grace_period=1.5))  # fine
    with pytest.raises(SweepError, match=re.escape(message)):
        check_conf(OptunaSweeperConf(**settings))


def test_hparams_search_without_multirun_says_how(cli):
    res = cli("hparams_search=ppo_cartpole")
    assert res.returncode == 2
    assert "rltrain --multirun hparams_search=ppo_cartpole" in res.stderr


def test_multirun_with_cfg_is_one_line(cli):
    res = cli("--multirun", "hparams_search=ppo_cartpole", "--cfg", "hydra")
    assert res.returncode == 2
    assert "--multirun and --cfg do not go together" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("name", sorted(p.stem for p in (
    Path(__file__).resolve().parents[2] / "conf" / "hparams_search").glob("*.yaml")))
def test_every_search_space_composes_with_known_keys(name):
    from rltrain.assembly.registered_schemas import key_problem

    hydra_cfg = OmegaConf.to_container(compose_run(f"hparams_search={name}", hydra=True).hydra)
    assert hydra_cfg["sweeper"]["_target_"].endswith("OptunaSweeper")
    params = hydra_cfg["sweeper"]["params"]
    algo = name.split("_")[0]
    assert params and all(key_problem(k, [algo]) is None for k in params)
    _, space = search_space([], params)
    assert len(space) == len(params)


# ---------------------------------------------------------------------- PostgreSQL storage
def _pg_bin() -> Path | None:
    import shutil

    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent  # a link in /usr/local/bin: the real bin dir
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    return candidates[-1].parent if candidates else None


@pytest.fixture
def postgres(tmp_path):
    """A real PostgreSQL server in a temporary directory (trust auth, a free TCP port);
    yields its URL for a database named rltrain. Skips, saying why, without pg_ctl or
    psycopg. As root, the server runs as the postgres user (initdb refuses root)."""
    import os
    import shutil
    import socket
    import subprocess

    bin_dir = _pg_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL's pg_ctl is not installed (Debian: apt-get install postgresql)")
    pytest.importorskip("psycopg", reason="psycopg is not installed (extra: postgres)")
    as_user: list[str] = []
    data = tmp_path / "pgdata"
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: initdb refuses root")
        base = Path("/tmp") / f"rltrain-pg-{os.getpid()}-{tmp_path.name}"
        base.mkdir()
        shutil.chown(base, "postgres")
        data = base / "pgdata"
        as_user = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def pg(*args: str) -> None:
        subprocess.run([*as_user, *args], check=True, capture_output=True, timeout=120)

    pg(str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres")
    pg(str(bin_dir / "pg_ctl"), "-D", str(data), "-w", "-l", str(data / "log"), "-o",
       f"-p {port} -k {data} -h 127.0.0.1", "start")
    try:
        pg(str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
           "rltrain")
        yield f"postgresql://postgres@127.0.0.1:{port}/rltrain"
    finally:
        pg(str(bin_dir / "pg_ctl"), "-D", str(data), "-w", "-m", "fast", "stop")
        if as_user:
            shutil.rmtree(data.parent, ignore_errors=True)


def test_a_study_in_postgresql_with_parallel_trials_and_a_second_run(cli, tmp_path, postgres):
    args = ["--multirun", "hydra/sweeper=optuna", "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=2", "-q", *SHORT, "trainer.max_epochs=2",
            "algo.lr=interval(1e-4, 1e-2)", f"hydra.sweeper.storage={postgres}",
            f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    res = cli(*args, "hydra.sweeper.n_trials=2")
    assert res.returncode == 0, res.stderr
    res = cli(*args, "hydra.sweeper.n_trials=4")  # continues the same study
    assert res.returncode == 0, res.stderr
    assert "2 of 4 trials finished" in res.stdout
    s = optuna.load_study(study_name="rltrain-ppo-cartpole", storage=postgres)
    assert [t.state for t in s.trials] == [TrialState.COMPLETE] * 4
    assert not (tmp_path / "sweep" / "optuna.db").exists()


def test_optuna_trials_as_ray_tasks(cli, tmp_path):
    pytest.importorskip("hydra_plugins.hydra_ray_launcher",
                        reason="hydra-ray-launcher (extra: ray) is not installed")
    sweep = tmp_path / "sweep"
    res = cli("--multirun", "hydra/sweeper=optuna", "hydra/launcher=ray", "-q", *SHORT,
              "trainer.max_epochs=2", "algo.lr=interval(1e-4, 1e-2)",
              "hydra.sweeper.n_trials=4", f"hydra.sweep.dir={sweep}",
              env={"RAY_USAGE_STATS_ENABLED": "0"}, timeout=600)
    assert res.returncode == 0, res.stderr
    trials = study(sweep).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 4
    assert all(len(t.intermediate_values) == 2 for t in trials)  # reported from Ray workers


def test_the_study_opens_in_optuna_dashboard(cli, tmp_path):
    """The command the sweep prints at the end serves the study: optuna-dashboard's API lists
    it with its trials."""
    import shutil
    import socket
    import subprocess
    import time
    import urllib.request

    from conftest import BIN

    dashboard = shutil.which("optuna-dashboard", path=str(BIN))
    if dashboard is None:
        pytest.skip("optuna-dashboard (extra: tune) is not installed")
    sweep = tmp_path / "sweep"
    res = cli("--multirun", "hydra/sweeper=optuna", "-q", *SHORT, "trainer.max_epochs=1",
              "algo.lr=interval(1e-4, 1e-2)", "hydra.sweeper.n_trials=2",
              f"hydra.sweep.dir={sweep}")
    assert res.returncode == 0, res.stderr
    url = f"sqlite:///{sweep / 'optuna.db'}"
    assert f"optuna-dashboard {url}" in res.stdout
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([dashboard, url, "--host", "127.0.0.1", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, body = time.monotonic() + 60, None
        while body is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies/1?after=0",
                                            timeout=5) as r:
                    body = json.loads(r.read())
            except OSError:
                time.sleep(0.2)
        assert body is not None, "optuna-dashboard did not answer"
        assert body["name"] == "rltrain-ppo-cartpole"
        assert len(body["trials"]) == 2
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.parametrize("space", sorted(p.stem for p in CONF_DIR.glob("hparams_search/*.yaml")))
def test_the_printed_command_of_every_shipped_search_trains_its_best_trial(tmp_path, space):
    """The experiment file a search writes picks its algorithm and env, so the command the
    sweeper prints (``--config-dir SWEEP/conf experiment=tuned_ALGO_ENV``) composes and
    trains: a best trial is made from the search's own composed config, as a sweep's is."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from rltrain.assembly.registered_schemas import register_configs
    from rltrain.sweeps.optuna.outputs import write_tuned

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"hparams_search={space}"], return_hydra_config=True)
    run = tmp_path / "trial" / ".hydra"
    run.mkdir(parents=True)
    hydra_node = cfg.hydra
    with open_dict(cfg):
        del cfg["hydra"]
    OmegaConf.save(cfg, run / "config.yaml")
    OmegaConf.save(OmegaConf.create({"hydra": hydra_node}), run / "hydra.yaml")
    trial = optuna.trial.create_trial(value=1.0, user_attrs={"run_dir": str(run.parent)})
    algo, env = str(cfg.algo.name), str(cfg.env.name)
    _, experiment = write_tuned(tmp_path / "sweep", trial, algo, env, space)
    assert experiment.name == f"tuned_{algo}_{env}.yaml"
    run_in_process(tmp_path / "run", "--config-dir", str(tmp_path / "sweep" / "conf"),
                   f"experiment={experiment.stem}", "trainer.max_epochs=1",
                   "trainer.epoch_num_steps=256", "trainer.stop_score=null",
                   *([] if algo == "ppo" else ["trainer.random_warmup_env_steps=128"]))
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["epochs"] == 1
    stored = OmegaConf.load(tmp_path / "run" / ".hydra" / "config.yaml")
    assert (stored.algo.name, stored.env.name) == (algo, env)
