"""A user's own envs and wrappers, the first thing researchers do: ``module:Env-v0`` ids,
``env.imports``, ``env.wrappers`` through the one env factory (train, test, eval, export,
resume), and clear refusals for observations rltrain cannot take yet. In this process, but
for a command run where the user's package cannot be imported."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from conftest import (
    TESTS,
    command,
    read_jsonl,
    refusal,
    resume_in_process,
    run_in_process,
    run_tool,
)
from rltrain.commands import evaluate, export

SMOKE = ["experiment=smoke", "logger.tensorboard=false"]
SCALED = "env.wrappers=[{name:fault_envs.ScaleReward,kwargs:{scale:10}}]"


def test_module_form_of_an_env_id_imports_the_module(tmp_path, caplog):
    """The module of ``module:Env-v0`` is imported (it registers the env); its Dict
    observations are taken as they are (each key encoded), or flattened when asked."""
    caplog.set_level(logging.INFO)
    dict_env = ["env=gym", "env.id=fault_envs:rltrain-test/DictObs-v0"]
    assert run_in_process(tmp_path / "dict", *SMOKE, *dict_env).status == "completed"
    assert "obs Dict(pos (2,) float32, vel (2,) float32)" in caplog.text
    caplog.clear()
    run_in_process(tmp_path / "flat", *SMOKE, *dict_env,
                   "env.wrappers=[gymnasium.wrappers.FlattenObservation]")
    assert "obs (4,)," in caplog.text  # pos and vel


def test_env_imports_are_stored_with_the_run(tmp_path):
    """``env.imports`` is part of the run's config, so eval, export and resume import the
    user's package too (which must be importable there, as anywhere)."""
    run_dir = tmp_path / "run"
    run_in_process(run_dir, *SMOKE, "env=gym", "env.id=rltrain-test/NaNReward-v0",
                   "env.imports=[fault_envs]", "env.kwargs.nan_at=100000000")
    assert "fault_envs" in (run_dir / ".hydra" / "config.yaml").read_text()
    assert command(evaluate.main, run_dir, "--episodes", "2").returncode == 0
    res = command(export.main, run_dir, "--out", tmp_path / "p.onnx")
    assert res.returncode == 0, res.stderr
    assert resume_in_process(run_dir, "trainer.max_epochs=3") == (0, [])
    assert len(read_jsonl(run_dir / "epochs.jsonl")) == 3
    # a process of its own, where the package is not on the path
    res = run_tool("rltrain-eval", run_dir, cwd=tmp_path, env={"PYTHONPATH": ""})
    assert res.returncode == 2
    assert "env.imports: could not import 'fault_envs'" in res.stderr


def test_wrappers_apply_to_training_testing_and_eval(tmp_path):
    """The Counter env pays 1 per step for 5 steps; the user's wrapper scales rewards by 10,
    so every return the run sees, in training, testing and eval, is 50."""
    run_dir = tmp_path / "run"
    run_in_process(run_dir, *SMOKE, "env=gym", "env.id=toy_envs:rltrain-test/Counter-v0", SCALED)
    for row in read_jsonl(run_dir / "epochs.jsonl"):
        assert row["train"]["return_mean"] == row["test"]["return_mean"] == 50.0
    res = command(evaluate.main, run_dir, "--episodes", "3")
    assert res.returncode == 0, res.stderr
    assert json.loads((run_dir / "eval.json").read_text())["returns"] == [50.0] * 3


def test_wrapper_forms_and_order(tmp_path, caplog):
    """A bare name is gymnasium's; Hydra's ``_target_`` form takes inline arguments;
    wrappers apply in the order listed (time, then flatten: 3 + 1 observations)."""
    caplog.set_level(logging.INFO)
    run_dir = tmp_path / "run"
    run_in_process(run_dir, *SMOKE, "env=gym", "env.id=toy_envs:rltrain-test/Counter-v0",
                   "env.wrappers=[TimeAwareObservation,{_target_:fault_envs.ScaleReward,scale:2}]")
    assert "obs (4,)" in caplog.text
    assert read_jsonl(run_dir / "epochs.jsonl")[0]["test"]["return_mean"] == 10.0


@pytest.mark.parametrize(("args", "named"), [
    (["env.wrappers=[nosuch_pkg.Wrap]"], "env.wrappers[0]: could not import 'nosuch_pkg'"),
    (["env.wrappers=[gymnasium.wrappers.NoSuchWrapper]"],
     "env.wrappers[0]: gymnasium.wrappers has no 'NoSuchWrapper'"),
    (["env.wrappers=[{name:fault_envs.ScaleReward,kwargs:{nope:1}}]"],
     "env.wrappers[0] fault_envs.ScaleReward{'nope': 1} failed: TypeError"),
    (["env.wrappers=[{name:fault_envs.ScaleReward,scale:2}]"],
     "env.wrappers[0] must be a wrapper's dotted name or {name: ..., kwargs: {...}}"),
    (["env.wrappers=[builtins.str]"], "returned str, not a gymnasium Env"),
    (["env.imports=[nosuch_pkg]"], "env.imports: could not import 'nosuch_pkg'"),
    (["env=gym", "env.id=fault_envs:rltrain-test/Image-v0", "algo.encoder=flat"],
     "algo.encoder=flat cannot encode fault_envs:rltrain-test/Image-v0's observations"),
    (["env=gym", "env.id=nosuch_pkg.envs:Foo-v0"], "env.id=nosuch_pkg.envs:Foo-v0: could not"),
    (["env=gym", "env.id=MyEnv-v0"], "env.id=mypkg.envs:MyEnv-v0, or env.imports"),
])
def test_a_users_env_mistakes_get_one_clear_line(tmp_path, args, named):
    """Refused before anything is written (the CLI prints the message after ``rltrain:
    error: ``, exit 2: tests/commands/test_cli.py)."""
    message = refusal(tmp_path / "run", *SMOKE, *args)
    assert named in message, message
    assert "Traceback" not in message
    assert "\n" not in message.strip(), message


def test_the_toy_envs_are_where_the_tests_say():
    assert (TESTS / "toy_envs.py").is_file() and (TESTS / "fault_envs.py").is_file()
    assert Path(__file__).parents[1] == TESTS


@pytest.mark.parametrize(("args", "caveat"), [
    ([SCALED], "env.wrappers changes the rewards (fault_envs.ScaleReward)"),
    (["env.wrappers=[NormalizeReward]"], "env.wrappers changes the rewards (NormalizeReward)"),
    (["env.max_episode_steps=200"], "env.max_episode_steps=200 is not the registered 500"),
    ([SCALED, "env.reward_threshold=4000"], None),  # the user's own threshold: no warning
    (["env.wrappers=[FlattenObservation]"], None),  # rewards unchanged
])
def test_a_registered_threshold_under_changed_rewards_is_warned_of(tmp_path, caplog, args,
                                                                  caveat):
    """CartPole's registered 475 is for its own rewards and 500-step limit: with rewards
    scaled or episodes cut, 'solved' and stop_score=auto would quietly mean something else."""
    run_in_process(tmp_path / "run", *SMOKE, *args)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
                and r.getMessage().startswith("the reward threshold 475 is CartPole-v1's "
                                              "registered one")]
    assert len(warnings) == (caveat is not None), caplog.text
    if caveat is not None:
        assert caveat in warnings[0] and "set env.reward_threshold" in warnings[0]
