"""The CLI end to end: real `rltrain` processes, real envs, real files; and the same runs of
other env kinds, and the refusals of bad input, in this process."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from action_envs import MULTIBINARY_ID, MULTIDISCRETE_ID
from conftest import BIN, cheap_smoke, compose_run, read_jsonl, refusal, run_in_process
from pixel_envs import DICT_ID, PIXELS_ID
from rltrain.algorithms import ALGORITHMS, DISCRETE, MULTIDISCRETE

EPOCH_KEYS = {"epoch", "env_step", "gradient_step", "time", "train", "test", "update", "best",
              "timing"}
SUMMARY_KEYS = {"best_score", "best_epoch", "solved", "stopped_early", "interrupted", "env_step",
                "gradient_step", "wall_time", "reward_threshold"}
#: the update stats each algorithm's console line shows must be in every epoch record
UPDATE_KEYS = {name: {key for key, _ in spec.console} for name, spec in ALGORITHMS.items()}


def check_run_dir(run_dir: Path, algo: str, epochs: int) -> None:
    """Everything the run-directory contract promises is there and consistent."""
    assert (run_dir / ".hydra" / "config.yaml").is_file()
    rows = read_jsonl(run_dir / "epochs.jsonl")
    assert [r["epoch"] for r in rows] == list(range(1, epochs + 1))
    for row in rows:
        assert EPOCH_KEYS <= row.keys()
        assert {"return_mean", "return_std", "length_mean", "n_episodes"} <= row["test"].keys()
        assert row["test"]["n_episodes"] == 2  # smoke: 2 test episodes
        assert UPDATE_KEYS[algo] <= row["update"].keys()
        assert {"collect", "update", "test"} <= row["timing"].keys()
    steps = [r["env_step"] for r in rows]
    assert steps == sorted(steps) and steps[0] > 0

    summary = json.loads((run_dir / "summary.json").read_text())
    assert SUMMARY_KEYS <= summary.keys()
    assert summary["env_step"] == rows[-1]["env_step"]
    assert summary["best_score"] == max(r["test"]["return_mean"] for r in rows)
    assert summary["interrupted"] is False

    events = list((run_dir / "tb").glob("events.out.tfevents.*"))
    assert events, "no TensorBoard event file"
    acc = EventAccumulator(str(run_dir / "tb"))
    acc.Reload()
    scalars = acc.Scalars("test/return_mean")
    assert [s.step for s in scalars] == steps
    assert [pytest.approx(s.value) for s in scalars] == [r["test"]["return_mean"] for r in rows]

    ckpt = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert ckpt["trainer"]["epoch"] == epochs
    for name in ("best", "final"):
        policy = torch.load(run_dir / name / "policy.pt", weights_only=True)
        assert policy["meta"]["algo"] == algo
        assert all(torch.isfinite(t).all() for t in policy["state_dict"].values())


#: every registered online algorithm on an env it accepts, through the CLI: one real process
#: each (listed from the registry, so a new algorithm is smoke-run through the CLI without
#: touching this file); the offline ones are smoke-run from a dataset in test_offline.py
CLI_SMOKE = [
    (name, ["env=cartpole"] if DISCRETE in spec.actions else ["env=pendulum"])
    for name, spec in sorted(ALGORITHMS.items())
    if "offline" not in spec.trainers
]

#: and the same runs of other env kinds, in this process (the run is the same whether the CLI
#: or a test calls it; the CLI's own part is the same for every env)
IN_PROCESS_SMOKE = [
    # on an image env and a Dict env (tests/pixel_envs.py), each algorithm on the action
    # space it takes: the CNN and dict encoders, uint8 and packed storage, end to end
    # a CNN's gradient steps are dear on a CPU: shorter epochs and warm-up (the pipeline is
    # what is checked here, not learning), a quarter as many gradient steps
    (name, ["env=gym", f"env.id=pixel_envs:{env_id}", "trainer.batch_size=32",
            "trainer.epoch_num_steps=256", *cheap_smoke(name),
            *([] if DISCRETE in spec.actions else ["env.kwargs.continuous=true"]),
            *(["trainer.update_step_num_gradient_steps_per_sample=0.25",
               # (within the 128 gradient steps, so the target networks are updated)
               *(["algo.target_update_interval=64"]
                 if "target_update_interval" in spec.config.__dataclass_fields__ else [])]
              if "offpolicy" in spec.trainers else [])])
    for env_id in (PIXELS_ID, DICT_ID)
    for name, spec in sorted(ALGORITHMS.items())
    if "offline" not in spec.trainers
] + [
    # and on MultiDiscrete and MultiBinary actions (tests/action_envs.py), each online
    # algorithm that takes them
    (name, ["env=gym", f"env.id=action_envs:{env_id}"])
    for env_id in (MULTIDISCRETE_ID, MULTIBINARY_ID)
    for name, spec in sorted(ALGORITHMS.items())
    if MULTIDISCRETE in spec.actions and "offline" not in spec.trainers
] + [
    ("ppo", ["env=pendulum", "env.normalize.obs=true", "env.normalize.reward=true"]),
    ("dqn", ["env=gym", "env.id=Acrobot-v1", "env.num_train_envs=2"]),
]


@pytest.mark.parametrize(("algo", "env_args"), CLI_SMOKE,
                         ids=[f"{a}-{'-'.join(e)}" for a, e in CLI_SMOKE])
def test_smoke_run_writes_complete_run_dir(cli, tmp_path, algo, env_args):
    run_dir = tmp_path / "run"
    # shortened (the CLI's part does not depend on the run's length): cheap_smoke, and
    # off-policy a quarter of a gradient step a transition (every target network is still
    # updated: the cartpole runs' intervals are 64-128 of their 256-512 gradient steps); on
    # Pendulum, whose runs collect one env step a collection step, 4 a step, so that a
    # quarter of a gradient step a transition is one
    off_policy = "offpolicy" in ALGORITHMS[algo].trainers
    shorter = [*cheap_smoke(algo),
               *(["trainer.update_step_num_gradient_steps_per_sample=0.25"] if off_policy else []),
               *(["trainer.collection_step_num_env_steps=4"]
                 if off_policy and env_args == ["env=pendulum"] else [])]
    res = cli("experiment=smoke", f"algo={algo}", *env_args, *shorter,
              f"hydra.run.dir={run_dir}")
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert "epoch   2/2" in res.stdout and "rltrain summary" in res.stdout
    check_run_dir(run_dir, algo, epochs=2)


@pytest.mark.parametrize(("algo", "env_args"), IN_PROCESS_SMOKE,
                         ids=[f"{a}-{'-'.join(e)}" for a, e in IN_PROCESS_SMOKE])
def test_smoke_run_of_each_env_kind_writes_complete_run_dir(tmp_path, capsys, algo, env_args):
    run_dir = tmp_path / "run"
    info = run_in_process(run_dir, "experiment=smoke", f"algo={algo}", *env_args)
    assert info.status == "completed" and info.epochs == 2
    out = capsys.readouterr().out
    assert "epoch   2/2" in out and "rltrain summary" in out
    check_run_dir(run_dir, algo, epochs=2)


def test_default_run_dir_layout(cli, tmp_path):
    res = cli("experiment=smoke", "algo=dqn", "logger.tensorboard=false")
    assert res.returncode == 0, res.stderr
    (run_dir,) = (tmp_path / "outputs" / "dqn-cartpole").iterdir()
    assert (run_dir / "summary.json").is_file()
    assert not (run_dir / "tb").exists()


def test_help_lists_groups_and_options(cli):
    res = cli("--help")
    assert res.returncode == 0
    for text in ("usage: rltrain", "algo:", "dqn, iql, ppo", "env:",
                 "cartpole, cartpole_novel, gym", "experiment:", "smoke"):
        assert text in res.stdout


def test_help_fits_80_columns(cli):
    """Issue 45: 24 of --help's 56 lines were wider than 80 columns (the env list, 274
    characters); the option lists wrap under themselves."""
    res = cli("--help")
    assert res.returncode == 0
    lines = res.stdout.splitlines()
    assert max(map(len, lines)) <= 80, [line for line in lines if len(line) > 80]
    groups = res.stdout.split("config groups (GROUP=OPTION):\n", 1)[1].split("\n  tuned/")[0]
    listed = " ".join(groups.split())
    for env in ("acrobot,", "carracing_discrete,", "mountaincar_continuous,", "walker2d"):
        assert env in listed  # every option, none cut


def test_the_header_says_the_epoch_that_runs_and_the_test_cap(tmp_path, capsys, caplog):
    """Issue 45: an epoch smaller than a collection step promised "1 epoch of 512 env steps"
    and ran 2,048, its progress "2,048/512 steps ... eta -1:59:12". The header says the epoch
    that runs and why; progress counts to it; a cap on test episodes is stated, and the
    record says how many it cut."""
    caplog.set_level(logging.INFO)
    run_dir = tmp_path / "run"
    run_in_process(run_dir, "experiment=smoke", "trainer.epoch_num_steps=100",
                   "logger.progress_interval_s=0", "trainer.test_step_max_episode_steps=9")
    header = "\n".join(caplog.messages)
    assert ("up to 2 epochs of 256 env steps (trainer.epoch_num_steps=100 rounded up to 1 "
            "whole collection step of 256)") in header
    assert ("test steps of 2 episodes, each cut at 9 steps (trainer.test_step_max_episode_steps)"
            in header)
    out = capsys.readouterr().out
    progress = [line for line in out.splitlines() if line.startswith("  epoch ")]
    assert progress and all("/256 steps" in line for line in progress if "steps/s" in line)
    assert not re.search(r"eta -\d", out)
    records = [json.loads(line) for line in (run_dir / "epochs.jsonl").read_text().splitlines()]
    assert [r["env_step"] for r in records] == [256, 512]
    assert all(r["test"]["n_cut"] == 2 and r["test"]["length_mean"] == 9 for r in records)
    assert "test 9.0±0.0 (2 cut)" in out


def test_help_names_the_companion_commands(cli):
    """Each companion command, on a line of its own saying what it does, and installed."""
    res = cli("--help")
    assert res.returncode == 0
    for tool in ("rltrain-eval", "rltrain-export", "rltrain-collect", "rltrain-report"):
        (line,) = [ln for ln in res.stdout.splitlines() if ln.startswith(f"  {tool} ")]
        assert len(line.split()) > 4, line  # the command, its arguments and what it does
        assert (BIN / tool).is_file(), f"{tool} is named in --help but not installed"
    assert 'eval "$(rltrain -sc install=bash)"' in res.stdout


def test_cfg_job_prints_composed_config_with_tuned_values(cli):
    tuned = cli("--cfg", "job", "algo=dqn", "env=cartpole")
    assert tuned.returncode == 0, tuned.stderr
    assert "lr: 0.0023" in tuned.stdout  # from conf/tuned/dqn_cartpole.yaml
    # which tuned file applied, as a YAML comment: Hydra's output does not say
    assert tuned.stdout.startswith("# tuned: tuned/dqn_cartpole.yaml applied")
    assert "random_warmup_env_steps" in tuned.stdout  # the algorithm chose the trainer
    generic = cli("--cfg", "job", "algo=dqn", "env=gym", "env.id=Acrobot-v1")
    assert generic.returncode == 0, generic.stderr
    assert "lr: 0.001" in generic.stdout and "id: Acrobot-v1" in generic.stdout
    assert generic.stdout.startswith("# tuned: none for dqn_gym (the algorithm's generic")


ERROR_CASES = {
    "misspelt key": (["trainer.max_epoch=5"], ["max_epoch", "trainer"]),
    "wrong type": (["trainer.batch_size=abc"], ["trainer.batch_size", "abc"]),
    "unknown option": (["algo=ppp"], ["algo=ppp", "did you mean algo=ppo", "dqn", "sac"]),
    "unknown env option": (["env=pendulm"], ["env=pendulm", "env=pendulum"]),
    "unknown top-level key": (["sead=3"], ["sead"]),
    "discrete algo on continuous env": (["algo=dqn", "env=gym", "env.id=Pendulum-v1"],
                                        ["algo=dqn", "discrete", "Pendulum-v1", "algo=ppo"]),
    "unknown env id": (["env=gym", "env.id=NoSuchEnv-v0"], ["NoSuchEnv-v0"]),
    "missing env id": (["env=gym"], ["env.id"]),
    "bad env kwarg": (["env=gym", "env.id=Acrobot-v1", "+env.kwargs.nope=1"], ["nope"]),
    "bad value": (["trainer.max_epochs=0"], ["trainer.max_epochs", "> 0"]),
    "both collection counts": (["trainer.collection_step_num_episodes=4"],
                               ["collection_step_num_env_steps", "collection_step_num_episodes"]),
    "bad stop score": (["trainer.stop_score=high"], ["trainer.stop_score"]),
    "bad device": (["device=gpu"], ["device", "cpu"]),
    "another algorithm's trainer": (["algo=dqn", "trainer=onpolicy"],
                                    ["trainer=onpolicy", "algo=dqn", "offpolicy"]),
    "the default algorithm's wrong trainer": (["trainer=offline"], ["trainer=offline",
                                                                     "algo=ppo", "onpolicy"]),
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_bad_input_is_refused_by_name(tmp_path, case):
    """Refused before anything is written (refusal: in this process; the CLI prints the
    message after ``rltrain: error: `` and exits 2, test_a_refusal_is_one_line_and_exit_2)."""
    args, expected = ERROR_CASES[case]
    message = refusal(tmp_path / "run", *args)
    for text in expected:
        assert text in message, f"{text!r} not in the message:\n{message}"
    assert "Traceback" not in message
    assert len(message.strip().splitlines()) <= 11, message


@pytest.mark.parametrize("case", ["misspelt key", "discrete algo on continuous env"])
def test_a_refusal_is_one_line_and_exit_2(cli, tmp_path, case):
    """Through the CLI: a refusal of the command line (before Hydra composes it) and one of
    the composed run (when it is built), each the message alone, nothing left behind."""
    args, expected = ERROR_CASES[case]
    res = cli(*args)
    assert res.returncode == 2
    assert res.stderr.startswith("rltrain: error: ") and res.stderr.count("\n") == 1, res.stderr
    for text in expected:
        assert text in res.stderr, f"{text!r} not in stderr:\n{res.stderr}"
    assert "Traceback" not in res.stderr + res.stdout
    assert not any(tmp_path.iterdir())  # nothing trained, nothing left behind
    # the message the tests in this process read
    assert res.stderr == f"rltrain: error: {refusal(tmp_path / 'run', *args)}\n"


WRONG_TYPES = {
    "trainer.max_epochs=abc": "takes an integer",
    "trainer.max_epochs=1.5": "takes an integer",
    "seed=abc": "takes an integer",
    "algo.hidden_sizes=abc": "takes a list of integers, like [64,64]",
    "algo.hidden_sizes=[a,b]": "takes a list of integers",
    "env.normalize.obs=maybe": "takes true or false",
    "buffer.on_device=maybe": "takes true or false or null",
}


@pytest.mark.parametrize("arg", list(WRONG_TYPES))
def test_wrong_type_is_one_line_naming_key_value_and_type(tmp_path, arg):
    """A value of the wrong type is refused before Hydra (whose message spans five lines and
    exits 1), in one line naming the key, the value and the type it takes."""
    message = refusal(tmp_path / "run", "algo=sac", "env=pendulum", arg)
    key, _, value = arg.partition("=")
    assert "\n" not in message
    assert message.startswith(f"{key}=")
    assert value.strip("[]").split(",")[0] in message and WRONG_TYPES[arg] in message


def test_values_of_the_right_type_pass_the_type_check():
    """null where the schema allows it, ints for floats, interpolations: not refused."""
    cfg = compose_run("algo=sac", "env=pendulum", "trainer.stop_score=null",
                      "env.max_episode_steps=null", "algo.actor_lr=1", "env.normalize.obs=true",
                      "algo.hidden_sizes=[32,32]", "seed=${torch_threads}")
    assert cfg.algo.actor_lr == 1 and list(cfg.algo.hidden_sizes) == [32, 32]
    assert cfg.trainer.stop_score is None and cfg.seed == cfg.torch_threads


def test_full_error_shows_traceback(cli):
    res = cli("algo=dqn", "env=gym", "env.id=Pendulum-v1", env={"HYDRA_FULL_ERROR": "1"})
    assert res.returncode != 0
    assert "Traceback" in res.stderr


def test_existing_run_is_never_overwritten(cli, tmp_path):
    run_dir = tmp_path / "run"
    run_in_process(run_dir, "experiment=smoke")
    before = (run_dir / "epochs.jsonl").read_bytes()
    res = cli("experiment=smoke", f"hydra.run.dir={run_dir}")
    assert res.returncode != 0
    assert "already holds a run" in res.stderr and str(run_dir) in res.stderr
    assert (run_dir / "epochs.jsonl").read_bytes() == before


# joblib with the slow checks (its jobs' directories: tests/sweeps)
@pytest.mark.parametrize("launcher", ["basic", pytest.param("joblib", marks=pytest.mark.slow)])
def test_multirun_writes_one_dir_per_job(cli, tmp_path, launcher):
    sweep = tmp_path / "sweep"
    res = cli("--multirun", f"hydra/launcher={launcher}", "experiment=smoke", "algo=ppo",
              "seed=0,1", f"hydra.sweep.dir={sweep}")
    assert res.returncode == 0, res.stderr
    jobs = sorted(p.name for p in sweep.iterdir() if p.is_dir() and not p.name.startswith("."))
    # named by what differs between the jobs (seed), then the job number
    assert jobs == ["seed=0_job0", "seed=1_job1"]
    seeds = []
    for job in jobs:
        check_run_dir(sweep / job, "ppo", epochs=2)
        seeds.append((sweep / job / ".hydra" / "overrides.yaml").read_text())
    assert "seed=0" in seeds[0] and "seed=1" in seeds[1]
    # different seeds, different learning
    a, b = (read_jsonl(sweep / j / "epochs.jsonl")[0]["update"] for j in jobs)
    assert a != b


def test_a_plain_run_skips_hydras_mode_probe_and_hydra_mode_still_sweeps(cli, tmp_path,
                                                                        monkeypatch):
    """Hydra composes the whole config once just to read ``hydra.mode``; a plain run skips
    that probe (rltrain.commands.hydra_compat), an override of hydra.mode keeps it and still
    sweeps."""
    from hydra._internal.hydra import Hydra

    from rltrain.commands.hydra_compat import skip_mode_probe

    original = Hydra.get_mode
    monkeypatch.setattr(Hydra, "get_mode", original)  # restored after the test
    skip_mode_probe(["hydra.mode=MULTIRUN", "seed=0,1"])
    assert Hydra.get_mode is original
    skip_mode_probe(["experiment=smoke", "seed=1"])
    assert Hydra.get_mode is not original
    assert Hydra.get_mode(object(), "config", ["experiment=smoke"]) is None

    sweep = tmp_path / "sweep"
    res = cli("experiment=smoke", "hydra.mode=MULTIRUN", "seed=0,1", f"hydra.sweep.dir={sweep}")
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["seed=0_job0",
                                                                      "seed=1_job1"]


def test_task_returns_best_score_for_sweepers(tmp_path):
    """The Hydra task function returns the metric a sweeper optimises (composed in-process
    with Hydra's compose API, as a sweeper's job would be)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from rltrain.assembly.registered_schemas import register_configs
    from rltrain.commands.train import conf_dir, task

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    register_configs()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=smoke", "logger.tensorboard=false"],
                      return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(run_dir)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]  # as Hydra does before it calls the task function
    score = task(cfg)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert score == summary["best_score"]
    assert isinstance(score, float)


def test_a_refused_run_leaves_no_outputs_behind(cli, tmp_path):
    """A first run refused in an empty directory left an empty outputs/ (made for its run
    directory); one the user made stays, and so do its other contents."""
    res = cli("algo.lr=nan")
    assert res.returncode == 2 and "algo.lr must be a finite number" in res.stderr
    res = cli("algo=dqn", "env=gym", "env.id=Pendulum-v1", "hydra.run.dir=a/b/c")
    assert res.returncode == 2 and "needs discrete actions" in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    (tmp_path / "outputs").mkdir()
    (tmp_path / "a").mkdir()
    res = cli("algo.lr=nan")
    assert res.returncode == 2
    res = cli("algo=dqn", "env=gym", "env.id=Pendulum-v1", "hydra.run.dir=a/b/c")
    assert res.returncode == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "outputs"]
    assert not any((tmp_path / "outputs").iterdir()) and not any((tmp_path / "a").iterdir())
