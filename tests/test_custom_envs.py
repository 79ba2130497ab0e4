"""A user's own envs and wrappers, the first thing researchers do: ``module:Env-v0`` ids,
``env.imports``, ``env.wrappers`` through the one env factory (train, test, eval, export,
resume), and clear refusals for observations rltrain cannot take yet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import TESTS, read_jsonl, run_tool

SMOKE = ["experiment=smoke", "logger.tensorboard=false"]
SCALED = "env.wrappers=[{name:fault_envs.ScaleReward,kwargs:{scale:10}}]"


def test_module_form_of_an_env_id_imports_the_module(cli, tmp_path):
    """The module of ``module:Env-v0`` is imported (it registers the env); its Dict
    observations are taken as they are (each key encoded), or flattened when asked."""
    dict_env = ["env=gym", "env.id=fault_envs:rltrain-test/DictObs-v0"]
    res = cli(*SMOKE, *dict_env, "hydra.run.dir=dict")
    assert res.returncode == 0, res.stderr
    log = (tmp_path / "dict" / "rltrain.log").read_text()
    assert "obs Dict(pos (2,) float32, vel (2,) float32)" in log
    res = cli(*SMOKE, *dict_env, "env.wrappers=[gymnasium.wrappers.FlattenObservation]",
              "hydra.run.dir=flat")
    assert res.returncode == 0, res.stderr
    assert "obs (4,)," in (tmp_path / "flat" / "rltrain.log").read_text()  # pos and vel


def test_env_imports_are_stored_with_the_run(cli, tmp_path):
    """``env.imports`` is part of the run's config, so eval, export and resume import the
    user's package too (which must be importable there, as anywhere)."""
    run_dir = tmp_path / "run"
    args = [*SMOKE, "env=gym", "env.id=rltrain-test/NaNReward-v0", "env.imports=[fault_envs]",
            "env.kwargs.nan_at=100000000", f"hydra.run.dir={run_dir}"]
    res = cli(*args)
    assert res.returncode == 0, res.stderr
    assert "fault_envs" in (run_dir / ".hydra" / "config.yaml").read_text()
    assert run_tool("rltrain-eval", run_dir, "--episodes", "2", cwd=tmp_path).returncode == 0
    res = run_tool("rltrain-export", run_dir, "--out", tmp_path / "p.onnx", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    res = cli(f"resume={run_dir}", "trainer.max_epochs=3")
    assert res.returncode == 0, res.stderr
    assert len(read_jsonl(run_dir / "epochs.jsonl")) == 3
    res = run_tool("rltrain-eval", run_dir, cwd=tmp_path, env={"PYTHONPATH": ""})
    assert res.returncode == 2
    assert "env.imports: could not import 'fault_envs'" in res.stderr


def test_wrappers_apply_to_training_testing_and_eval(cli, tmp_path):
    """The Counter env pays 1 per step for 5 steps; the user's wrapper scales rewards by 10,
    so every return the run sees, in training, testing and eval, is 50."""
    run_dir = tmp_path / "run"
    res = cli(*SMOKE, "env=gym", "env.id=toy_envs:rltrain-test/Counter-v0", SCALED,
              f"hydra.run.dir={run_dir}")
    assert res.returncode == 0, res.stderr
    for row in read_jsonl(run_dir / "epochs.jsonl"):
        assert row["train"]["return_mean"] == row["test"]["return_mean"] == 50.0
    res = run_tool("rltrain-eval", run_dir, "--episodes", "3", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads((run_dir / "eval.json").read_text())["returns"] == [50.0] * 3


def test_wrapper_forms_and_order(cli, tmp_path):
    """A bare name is gymnasium's; Hydra's ``_target_`` form takes inline arguments;
    wrappers apply in the order listed (time, then flatten: 3 + 1 observations)."""
    run_dir = tmp_path / "run"
    res = cli(*SMOKE, "env=gym", "env.id=toy_envs:rltrain-test/Counter-v0",
              "env.wrappers=[TimeAwareObservation,{_target_:fault_envs.ScaleReward,scale:2}]",
              f"hydra.run.dir={run_dir}")
    assert res.returncode == 0, res.stderr
    assert "obs (4,)" in (run_dir / "rltrain.log").read_text()
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
def test_a_users_env_mistakes_get_one_clear_line(cli, tmp_path, args, named):
    res = cli(*SMOKE, *args)
    assert res.returncode == 2
    assert named in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not list(tmp_path.glob("outputs/*/*"))


def test_the_toy_envs_are_where_the_tests_say():
    assert (TESTS / "toy_envs.py").is_file() and (TESTS / "fault_envs.py").is_file()
    assert Path(__file__).parent == TESTS


@pytest.mark.parametrize(("args", "caveat"), [
    ([SCALED], "env.wrappers changes the rewards (fault_envs.ScaleReward)"),
    (["env.wrappers=[NormalizeReward]"], "env.wrappers changes the rewards (NormalizeReward)"),
    (["env.max_episode_steps=200"], "env.max_episode_steps=200 is not the registered 500"),
    ([SCALED, "env.reward_threshold=4000"], None),  # the user's own threshold: no warning
    (["env.wrappers=[FlattenObservation]"], None),  # rewards unchanged
])
def test_a_registered_threshold_under_changed_rewards_is_warned_of(cli, tmp_path, args, caveat):
    """CartPole's registered 475 is for its own rewards and 500-step limit: with rewards
    scaled or episodes cut, 'solved' and stop_score=auto would quietly mean something else."""
    run_dir = tmp_path / "run"
    res = cli(*SMOKE, *args, f"hydra.run.dir={run_dir}")
    assert res.returncode == 0, res.stderr
    # a warning: labelled, on stderr
    warned = "warning: the reward threshold 475 is CartPole-v1's registered one" in res.stderr
    assert warned == (caveat is not None), res.stderr
    if caveat is not None:
        assert caveat in res.stderr and "set env.reward_threshold" in res.stderr
        assert caveat in (run_dir / "rltrain.log").read_text()
