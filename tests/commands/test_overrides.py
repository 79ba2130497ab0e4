"""The command line checked before Hydra composes it (``rltrain.commands.command_line.prepare``):
keys are checked against the schema of the algorithm the command will run, whichever way it is
chosen."""

from __future__ import annotations

import pytest

from conftest import CONF
from conftest import refusal as run_refusal
from rltrain.commands.command_line import prepare
from rltrain.config.schemas import ConfigError

PPO_ONLY, SAC_ONLY = "clip_ratio", "actor_lr"


def refusal(*argv: str) -> str:
    with pytest.raises(ConfigError) as e:
        prepare(list(argv), CONF)
    return str(e.value)


@pytest.mark.parametrize(("argv", "algo_key"), [
    (["algo.tau=0.01"], PPO_ONLY),                               # conf/config.yaml's default
    (["experiment=smoke", "algo.tau=0.01"], PPO_ONLY),           # a preset that keeps it
    (["--multirun", "hparams_search=sac_pendulum", "algo.clip_ratio=0.1"], SAC_ONLY),
    (["algo=sac", "algo.clip_ratio=0.1"], SAC_ONLY),
])
def test_keys_are_checked_against_the_algorithm_the_command_runs(argv, algo_key):
    message = refusal(*argv)
    assert message.startswith("unknown key algo."), message
    listed = message.split("(algo has: ")[1]
    assert algo_key in listed
    assert (SAC_ONLY if algo_key == PPO_ONLY else PPO_ONLY) not in listed


def test_a_key_of_any_swept_algorithm_passes():
    # a sweep over two algorithms: the key of one is checked against both schemas' union,
    # and the composed config of each job is checked against its own
    assert prepare(["--multirun", "algo=ppo,sac", "algo.tau=0.01"], CONF)
    assert "unknown key algo.nope" in refusal("--multirun", "algo=ppo,sac", "algo.nope=1")


def test_a_primary_config_of_the_users_is_not_second_guessed():
    # --config-name picks another primary config: its default algorithm is not known here,
    # so a key of any algorithm passes this check (Hydra and the composed check decide)
    assert prepare(["--config-name", "mine", "algo.tau=0.01"], CONF)


def test_the_default_algorithm_is_read_from_the_config():
    # the trainer pairing uses the same choice: PPO (the default) with the offline trainer
    assert "algo=ppo runs with trainer=onpolicy" in refusal("trainer=offline")


def test_the_cli_says_it_in_one_line(cli, tmp_path):
    res = cli("experiment=smoke", "algo.tau=0.01")
    assert res.returncode == 2
    assert res.stderr.startswith("rltrain: error: unknown key algo.tau (algo has: "), res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Could not override" not in res.stderr
    assert not list(tmp_path.glob("outputs/*/*"))


@pytest.mark.parametrize("arg", ["dataset=données.h5", "hydra.run.dir=/tmp/é x"])
def test_an_override_hydra_cannot_lex_is_named_with_its_quoted_form(arg):
    key, _, value = arg.partition("=")
    message = refusal("experiment=smoke", arg)
    assert message.startswith(f"{arg!r} is not a valid override (")
    assert message.endswith(f"quotes: \"{key}='{value}'\"")
    assert prepare(["experiment=smoke", f"{key}='{value}'"], CONF)  # the quoted form passes


@pytest.mark.parametrize(("arg", "message"), [
    ("seed=${seed}", "seed: the value does not resolve (Recursive interpolation detected)"),
    ("algo.lr=${oc.env:RLTRAIN_TEST_NO_SUCH_VAR}",
     "algo.lr: the value does not resolve (KeyError raised while resolving interpolation: "
     "\"Environment variable 'RLTRAIN_TEST_NO_SUCH_VAR' not found\")"),
])
def test_an_interpolation_that_does_not_resolve_is_one_line(tmp_path, arg, message):
    assert run_refusal(tmp_path / "run", "experiment=smoke", arg) == (
        f"{message}; give a plain value or an interpolation that resolves")


@pytest.mark.parametrize(("arg", "message"), [
    ("hydra.sweeper.n_trials=abc",
     "hydra.sweeper.n_trials='abc' is not valid: hydra.sweeper.n_trials takes an integer"),
    ("hydra.sweeper.sampler.seed=x",
     "hydra.sweeper.sampler.seed='x' is not valid: hydra.sweeper.sampler.seed takes an "
     "integer or null"),
    ("hydra.sweeper.grace_period=soon", "hydra.sweeper.grace_period takes a number"),
    ("hydra.sweeper.n_trial=3",
     "unknown key hydra.sweeper.n_trial; did you mean hydra.sweeper.n_trials? (hydra.sweeper "
     "has: direction, grace_period, heartbeat_interval, last_k, n_jobs, n_trials, objective, "
     "params, pruner, sampler, storage, study_name)"),
    ("hydra.sweeper.samplr.seed=3", "unknown key hydra.sweeper.samplr; did you mean "
                                    "hydra.sweeper.sampler?"),
    ("hydra.sweeper.pruner.nme=none", "unknown key hydra.sweeper.pruner.nme; did you mean "
                                      "hydra.sweeper.pruner.name?"),
])
@pytest.mark.parametrize("chosen", [["hydra/sweeper=optuna"], ["hparams_search=ppo_cartpole"]])
def test_the_optuna_sweepers_keys_and_values_are_checked(arg, message, chosen):
    """Hydra's messages for these span three to five lines and exit 1: one line, exit 2."""
    assert message in refusal("--multirun", *chosen, arg)


def test_good_sweeper_settings_and_the_search_space_pass():
    argv = ["--multirun", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=7",
            "hydra.sweeper.sampler.seed=null", "hydra.sweeper.grace_period=30",
            "hydra.sweeper.n_jobs=${hydra.launcher.n_jobs}", "algo.lr=interval(1e-4, 1e-2)",
            "+hydra.sweeper.params.algo.gamma=choice(0.9, 0.99)"]
    assert prepare(argv, CONF) == argv
    # another sweeper's keys are its own to check
    assert prepare(["--multirun", "hydra.sweeper.n_trials=abc"], CONF)
