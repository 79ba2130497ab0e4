"""The trust boundary (rltrain.rundir.trust): a run directory, checkpoint or Minari dataset from
elsewhere runs no code without consent; what a command on this machine set up works as before.

The hostile entry is the one that ran a shell command before: ``pydoc.pipepager`` as a wrapper,
whose ``cmd`` the shell runs. Where it is refused, the file it would create must not exist;
where the user consents, it does (the consent really lets it run)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from conftest import command, refusal, resume_in_process, run_in_process, wait_for
from rltrain.commands import collect, evaluate, export
from rltrain.config.schemas import ConfigError
from rltrain.rundir import trust

OWN_ENV = ["env=gym", "env.id=fault_envs:rltrain-test/DictObs-v0",
           "env.wrappers=[FlattenObservation,{name:fault_envs.ScaleReward,kwargs:{scale:10}}]"]


def hostile(marker: Path) -> dict:
    return {"_target_": "pydoc.pipepager", "cmd": f"touch {marker}"}


# --------------------------------------------------------------------------- the surface
@pytest.mark.parametrize(("env", "items"), [
    ({"id": "CartPole-v1", "wrappers": ["FlattenObservation",
                                        "gymnasium.wrappers.ClipAction",
                                        {"name": "TimeLimit", "kwargs": {"max_episode_steps": 5}},
                                        {"_target_": "gymnasium.wrappers.ClipReward"}],
      "imports": ["gymnasium.envs.classic_control"]}, []),
    ({"id": "mypkg.envs:MyEnv-v0"}, ["import mypkg.envs (env.id=mypkg.envs:MyEnv-v0)"]),
    ({"id": "X-v0", "imports": ["mypkg.envs"]}, ["import mypkg.envs (env.imports[0])"]),
    ({"id": "X-v0", "wrappers": [{"_target_": "pydoc.pipepager", "cmd": "touch x"}]},
     ["call pydoc.pipepager(cmd='touch x') (env.wrappers[0])"]),
    ({"id": "X-v0", "wrappers": [{"name": "mypkg.W", "kwargs": {"b": 2, "a": 1}}, "os.system"]},
     ["call mypkg.W(a=1, b=2) (env.wrappers[0])", "call os.system() (env.wrappers[1])"]),
    ({"id": "gymnasiumx:Evil-v0"}, ["import gymnasiumx (env.id=gymnasiumx:Evil-v0)"]),
])
def test_the_surface_names_every_module_and_callable_beyond_gymnasium(env, items):
    assert trust.env_surface(env) == items


def test_consent_is_recorded_once_and_only_for_what_was_consented(tmp_path, monkeypatch):
    monkeypatch.setenv("RLTRAIN_STATE_DIR", str(tmp_path / "state"))
    items = ["import mypkg.envs (env.imports[0])"]
    with pytest.raises(trust.UntrustedError, match=r"^R would run code that was not set up by "
                       r"a command on this machine: import mypkg\.envs \(env\.imports\[0\]\)\. "
                       r"Run it only if you trust where it came from: add --trust$"):
        trust.check(items, "R", consent=False, allow="add --trust")
    assert isinstance(trust.UntrustedError("x"), ConfigError)  # exit 2, one line
    trust.check(items, "R", consent=True, allow="add --trust")
    trust.check(items, "R", consent=False, allow="add --trust")  # recorded now
    trust.record(items, "again")
    assert len((tmp_path / "state" / "trusted").read_text().splitlines()) == 1
    with pytest.raises(trust.UntrustedError):  # other arguments are other code
        trust.check(["import mypkg.other (env.imports[0])"], "R", consent=False, allow="")
    trust.check([], "R", consent=False, allow="")  # nothing to run: nothing to consent to


def test_the_record_is_never_written_through_a_link(tmp_path, monkeypatch):
    state = tmp_path / "state"
    state.mkdir()
    target = tmp_path / "elsewhere"
    target.write_text("untouched\n")
    (state / "trusted").symlink_to(target)
    monkeypatch.setenv("RLTRAIN_STATE_DIR", str(state))
    trust.record(["import mypkg (env.imports[0])"], "a command")
    assert target.read_text() == "untouched\n"
    with pytest.raises(trust.UntrustedError):  # and a linked record is not read either
        trust.check(["import mypkg (env.imports[0])"], "R", consent=False, allow="")


# --------------------------------------------------------------------------- the commands
# (in this process: the commands' own functions; RLTRAIN_STATE_DIR, set for the test process
# by conftest, is this machine's record)
@pytest.fixture(scope="module")
def own_run(tmp_path_factory) -> Path:
    """A run of this machine with its own env module and wrapper (recorded when it ran)."""
    run_dir = tmp_path_factory.mktemp("own") / "run"
    run_in_process(run_dir, "experiment=smoke", "logger.tensorboard=false", *OWN_ENV)
    return run_dir


def test_a_run_made_here_works_as_before(own_run, tmp_path):
    res = command(evaluate.main, own_run, "--episodes", "2")
    assert res.returncode == 0, res.stderr
    run = tmp_path / "run"
    shutil.copytree(own_run, run)
    assert resume_in_process(run, "trainer.max_epochs=3") == (0, [])


def test_a_hostile_run_config_runs_nothing_without_consent(own_run, tmp_path):
    run = tmp_path / "from-elsewhere"
    shutil.copytree(own_run, run)
    marker = tmp_path / "PWNED"
    config = run / ".hydra" / "config.yaml"
    data = yaml.safe_load(config.read_text())
    data["env"]["wrappers"] = [hostile(marker)]
    config.write_text(yaml.safe_dump(data))
    for tool, main, extra in (
            ("rltrain-eval", evaluate.main, []), ("rltrain-export", export.main, []),
            ("rltrain-collect", collect.main, ["--episodes", "1", "--out", tmp_path / "x.h5"])):
        res = command(main, run, *extra)
        assert res.returncode == 2, (tool, res.stderr)
        assert res.stderr.startswith(f"{tool}: error: {config} would run code that was not set "
                                     "up by a command on this machine: "), res.stderr
        assert f"call pydoc.pipepager(cmd='touch {marker}') (env.wrappers[0])" in res.stderr
        assert "add --trust" in res.stderr and len(res.stderr.splitlines()) == 1
        assert not marker.exists() and not (tmp_path / "x.h5").exists()
    # with consent it runs (the wrapper then fails: pipepager is no wrapper)
    res = command(evaluate.main, run, "--trust")
    # (pipepager starts the shell, then fails writing to it: the shell may still be running)
    wait_for(marker.exists, timeout=30, what=f"the consented command ({res.stderr})")
    assert "Traceback" not in res.stderr


def test_a_hostile_checkpoint_config_is_refused_by_resume(own_run, tmp_path):
    run = tmp_path / "from-elsewhere"
    shutil.copytree(own_run, run)
    marker = tmp_path / "PWNED"
    last = run / "checkpoints" / "last.pt"
    state = torch.load(last, weights_only=True)
    state["config"]["env"]["wrappers"] = [hostile(marker)]
    torch.save(state, last)
    code, said = resume_in_process(run, "trainer.max_epochs=5")
    assert code == 2, said
    assert f"the config in {last} would run code" in said[0]
    assert f"rltrain resume={run} --trust" in said[0] and not marker.exists()
    code, said = resume_in_process(run, "trainer.max_epochs=5", "--trust")
    wait_for(marker.exists, timeout=30, what=f"the consented command ({said})")


def test_a_run_from_another_machine_needs_consent_once(own_run, tmp_path, monkeypatch):
    """Another machine: its own record, empty. The run's own module and wrapper are refused,
    accepted with --trust, and from then on accepted as made here."""
    monkeypatch.setenv("RLTRAIN_STATE_DIR", str(tmp_path / "other-machine"))
    res = command(evaluate.main, own_run, "--episodes", "1")
    assert res.returncode == 2
    assert ("import fault_envs (env.id=fault_envs:rltrain-test/DictObs-v0); call "
            "fault_envs.ScaleReward(scale=10) (env.wrappers[1])") in res.stderr
    res = command(evaluate.main, own_run, "--episodes", "1", "--trust")
    assert res.returncode == 0, res.stderr
    res = command(evaluate.main, own_run, "--episodes", "1")
    assert res.returncode == 0, res.stderr


def test_a_plain_gymnasium_run_needs_no_consent_anywhere(two_epoch_run, tmp_path,
                                                         monkeypatch):
    monkeypatch.setenv("RLTRAIN_STATE_DIR", str(tmp_path / "other-machine"))
    res = command(evaluate.main, two_epoch_run, "--episodes", "1")
    assert res.returncode == 0, res.stderr
    assert not (tmp_path / "other-machine").exists()  # nothing to record


def test_a_minari_dataset_that_would_build_its_env_from_its_spec_is_refused(tmp_path,
                                                                           monkeypatch):
    """The metadata has no spaces, so Minari would gym.make its env_spec, whose entry point is
    any callable: refused naming it; with trust=true it is called."""
    pytest.importorskip("minari", reason="minari is not installed (extra: minari)")
    marker = tmp_path / "PWNED"
    store = tmp_path / "minari"
    data = store / "evil" / "data-v0" / "data"
    data.mkdir(parents=True)
    spec = {"id": "Evil-v0", "entry_point": "fault_envs:touch_marker",
            "kwargs": {"path": str(marker)}, "reward_threshold": None,
            "nondeterministic": False, "max_episode_steps": None, "order_enforce": True,
            "disable_env_checker": False, "additional_wrappers": [],
            "vector_entry_point": None}
    (data / "metadata.json").write_text(json.dumps({
        "dataset_id": "evil/data-v0", "env_spec": json.dumps(spec), "total_episodes": 1,
        "total_steps": 1, "data_format": "hdf5", "minari_version": "0.5.4"}))
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(store))
    args = ["experiment=smoke", "algo=bc", "env=cartpole", "dataset=minari:evil/data-v0"]
    message = refusal(tmp_path / "run", *args)
    assert ("would run code that was not set up by a command on this machine: call "
            "fault_envs:touch_marker (the dataset's env_spec, to build its env). Run it only "
            "if you trust where it came from: add trust=true to the command") in message
    assert not marker.exists()
    message = refusal(tmp_path / "run", *args, "trust=true")  # then Minari refuses it
    assert marker.exists(), message
    assert "Traceback" not in message


def test_trust_in_a_stored_config_is_not_consent(own_run, tmp_path):
    """A checkpoint whose config says trust=true grants nothing: the resume's own flag
    decides."""
    run = tmp_path / "from-elsewhere"
    shutil.copytree(own_run, run)
    marker = tmp_path / "PWNED"
    last = run / "checkpoints" / "last.pt"
    state = torch.load(last, weights_only=True)
    assert state["config"]["trust"] is False  # what rltrain itself stores
    state["config"]["trust"] = True
    state["config"]["env"]["wrappers"] = [hostile(marker)]
    torch.save(state, last)
    code, said = resume_in_process(run, "trainer.max_epochs=5")
    assert code == 2 and "would run code" in said[0] and not marker.exists()
