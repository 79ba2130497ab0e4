"""The run config as typed settings (rltrain.assembly.checked_config): every refusal that needs no
built object, each naming the key it refuses, in-process on configs composed as ``rltrain`` composes
them; the device check; and the settings of an existing run read back from its
``.hydra/config.yaml``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from conftest import command, compose_run
from conftest import refusal as cli_refusal
from rltrain.algorithms.bc import BCConfig
from rltrain.algorithms.dqn import DQNConfig
from rltrain.algorithms.ppo import PPOConfig
from rltrain.assembly.checked_config import (
    Settings,
    check_pairing,
    load_run_settings,
    settings,
    torch_device,
)
from rltrain.commands import evaluate
from rltrain.config.schemas import (
    ConfigError,
    EnvConfig,
    LoggerConfig,
    NetworkConfig,
    OfflineTrainerParams,
    OffPolicyTrainerParams,
    OnPolicyTrainerParams,
    ReplayBufferConfig,
    TrainerParams,
)

CPU = torch.device("cpu")


def refusal(*overrides: str) -> str:
    """The message settings() refuses the composed config with."""
    with pytest.raises(ConfigError) as e:
        settings(compose_run(*overrides))
    return str(e.value)


# --------------------------------------------------------------------------- composed settings
def test_the_default_config_passes_and_is_typed():
    s = settings(compose_run("algo=dqn", "seed=7", "torch_threads=2"))
    assert isinstance(s.algo, DQNConfig) and isinstance(s.trainer, OffPolicyTrainerParams)
    assert isinstance(s.env, EnvConfig) and s.env.id == "CartPole-v1"
    assert (s.seed, s.torch_threads, s.device, s.dataset) == (7, 2, CPU, None)
    assert not s.learns_offline
    offline = settings(compose_run("algo=bc", "dataset=data.h5"))
    assert offline.learns_offline and offline.dataset == "data.h5"
    assert isinstance(offline.trainer, OfflineTrainerParams)


#: overrides -> what the refusal says (each names the key it refuses)
REFUSALS = {
    "trainer.name forged to another kind": (
        ["algo=dqn", "trainer.name=onpolicy"],
        "trainer.name='onpolicy' does not match the trainer's parameters; choose a trainer "
        "with trainer=<name>, not trainer.name"),
    "trainer.name forged to no kind": (
        ["algo=dqn", "trainer.name=nonsense"], "trainer.name='nonsense' does not match"),
    # the offline trainer's keys are all the on-policy one's, so only the pairing refuses it
    "another algorithm's trainer": (
        ["algo=ppo", "env=gym", "env.id=CartPole-v1", "trainer=offline"],
        "algo=ppo runs with trainer=onpolicy, not trainer=offline; leave trainer= out"),
    "offline algorithm without a dataset": (
        ["algo=bc"], "algo=bc learns offline, from a dataset: add dataset=PATH"),
    "a dataset for an online algorithm": (
        ["algo=dqn", "dataset=data.h5"],
        "dataset= is for the offline algorithms (bc, cql, iql, td3bc); algo=dqn learns online "
        "from its env: drop dataset= or choose an offline algo"),
    "reward normalisation offline": (
        ["algo=iql", "env=pendulum", "dataset=data.h5", "env.normalize.reward=true"],
        "env.normalize.reward=true scales rewards as they are collected, and an offline run "
        "collects none"),
    "unknown encoder": (["algo=dqn", "algo.encoder=nope"], "algo.encoder=nope is not an encoder"),
    "not a device": (["device=gpu"], "device='gpu' is not a torch device; use cpu, cuda, cuda:N"),
    "not a real device": (["device=meta"], "device='meta': rltrain trains on real devices only"),
    "no torch threads": (["torch_threads=0"], "torch_threads must be > 0, got 0"),
    "unknown tune objective": (
        ["tune.objective=median"],
        "tune.objective must be one of auc, last_k, best, final, got 'median'"),
    "tune.last_k not positive": (["tune.last_k=0"], "tune.last_k must be > 0, got 0"),
    "empty dataset=": (["algo=bc", "dataset="], "dataset= is empty"),
    "blank dataset=": (["algo=bc", "dataset=  "], "dataset= is empty"),
    "missing env.id": (["env=gym"], "env.id must be set (e.g. env=gym env.id=Acrobot-v1)"),
    "negative seed": (["seed=-1"], "seed must be an integer from 0 to 2,147,483,647, got -1"),
    "empty buffer": (["buffer.size=0"], "buffer.size must be > 0, got 0"),
    "negative progress interval": (["logger.progress_interval_s=-1"],
                                   "logger.progress_interval_s must be >= 0"),
    "trainer range": (["trainer.max_epochs=0"], "trainer.max_epochs must be > 0, got 0"),
    "algorithm range": (["algo.gamma=1.5"], "algo.gamma must be in [0, 1], got 1.5"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_settings_refuse_by_name(case):
    overrides, message = REFUSALS[case]
    assert message in refusal(*overrides)


@pytest.mark.parametrize("override", [
    "algo.lr=nan", "algo.lr=inf", "algo.clip_ratio=nan", "algo.ent_coef=inf",
    "algo.vf_coef=-inf", "trainer.stop_score=nan", "env.reward_threshold=inf",
    # the free-form parts, walked to any depth: an env's own arguments, a wrapper's
    "+env.kwargs.fill=nan", "+env.kwargs.deep.bound=-inf", "+env.kwargs.levels=[1.0,nan]",
    "env.wrappers=[{name: gymnasium.wrappers.ClipReward, kwargs: {min_reward: -inf}}]"])
def test_non_finite_numbers_are_refused_in_process(override):
    key = {"+env.kwargs.levels=[1.0,nan]": "env.kwargs.levels[1]"}.get(
        override, override.split("=")[0].removeprefix("+"))
    if key == "env.wrappers":
        key = "env.wrappers[0].kwargs.min_reward"
    message = refusal("algo=ppo", override)
    assert message.startswith(f"{key} must be a finite number, got ")
    if key == "trainer.stop_score":
        assert message.endswith("(null means none)")


@pytest.mark.parametrize("override", ["algo.lr=nan", "algo.lr=inf", "algo.clip_ratio=nan",
                                      "algo.ent_coef=inf", "algo.vf_coef=-inf",
                                      "trainer.stop_score=nan"])
def test_non_finite_hyperparameters_are_refused_by_name(tmp_path, override):
    message = cli_refusal(tmp_path / "run", "experiment=smoke", override)
    key = override.split("=")[0]
    assert f"{key} must be a finite number" in message, message


# --------------------------------------------------------------------------- the pairing alone
def typed(algo, trainer: TrainerParams, *, dataset: str | None = None,
          reward: bool = False) -> Settings:
    env = EnvConfig(name="cartpole", id="CartPole-v1")
    env.normalize.reward = reward
    return Settings(algo, env, trainer, ReplayBufferConfig(), LoggerConfig(), seed=0,
                    device=CPU, torch_threads=1, dataset=dataset)


def test_check_pairing_accepts_each_algorithm_with_its_own_trainer():
    check_pairing(typed(PPOConfig(), OnPolicyTrainerParams()))
    check_pairing(typed(DQNConfig(), OffPolicyTrainerParams(), reward=True))
    check_pairing(typed(BCConfig(), OfflineTrainerParams(), dataset="minari:x/y-v0"))


@pytest.mark.parametrize(("s", "message"), [
    (typed(DQNConfig(), OnPolicyTrainerParams()),
     "algo=dqn runs with trainer=offpolicy, not trainer=onpolicy"),
    (typed(PPOConfig(), OnPolicyTrainerParams(name="offpolicy")),
     "trainer.name='offpolicy' does not match the trainer's parameters"),
    (typed(BCConfig(), OfflineTrainerParams()), "algo=bc learns offline"),
    (typed(DQNConfig(), OffPolicyTrainerParams(), dataset="data.h5"),
     "dataset= is for the offline algorithms"),
    (typed(BCConfig(), OfflineTrainerParams(), dataset="data.h5", reward=True),
     "env.normalize.reward=true scales rewards as they are collected"),
    (typed(DQNConfig(encoder="resnet"), OffPolicyTrainerParams()),
     "algo.encoder=resnet is not an encoder; use auto or one of dict, flat, impala, minatar, "
     "nature"),
])
def test_check_pairing_refuses_by_name(s, message):
    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        check_pairing(s)


def test_reward_normalisation_needs_a_discount():
    """Every registered online algorithm has a gamma, so this rule waits for one without: an
    online algorithm's schema without DiscountedConfig (PPO's name, so the pairing passes)."""
    s = typed(NetworkConfig(name="ppo"), OnPolicyTrainerParams(), reward=True)
    with pytest.raises(ConfigError, match=r"^env\.normalize\.reward=true scales rewards by the "
                                          r"spread of the discounted return, and algo=ppo has "
                                          r"no discount$"):
        check_pairing(s)
    check_pairing(typed(PPOConfig(), OnPolicyTrainerParams(), reward=True))


# --------------------------------------------------------------------------- devices
def test_auto_and_cpu_are_devices_here():
    assert torch_device("cpu") == CPU
    assert torch_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize("name", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_without_cuda_is_refused(name):
    with pytest.raises(ConfigError, match=f"device={name} asked for, but torch sees no CUDA "
                                          r"device \(torch .*\); use device=cpu"):
        torch_device(name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_index_beyond_the_devices_is_refused():
    n = torch.cuda.device_count()
    assert torch_device("cuda:0") == torch.device("cuda:0")
    with pytest.raises(ConfigError, match=f"device=cuda:{n}: torch sees {n} CUDA device"):
        torch_device(f"cuda:{n}")


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="this machine has MPS")
def test_mps_without_an_apple_gpu_is_refused():
    with pytest.raises(ConfigError, match="device=mps asked for, but torch sees no Apple GPU"):
        torch_device("mps")


@pytest.mark.parametrize(("name", "message"), [
    ("gpu", "device='gpu' is not a torch device"),
    ("cuda:x", "device='cuda:x' is not a torch device"),
    ("", "device='' is not a torch device"),
    ("meta", "device='meta': rltrain trains on real devices only"),
    ("xla", "device='xla': rltrain trains on real devices only"),
])
def test_what_is_not_a_real_device_is_refused(name, message):
    with pytest.raises(ConfigError) as e:
        torch_device(name)
    assert str(e.value).startswith(message)
    assert str(e.value).endswith("use cpu, cuda, cuda:N, mps or auto")


# --------------------------------------------------------------------------- a run's settings
def stored(run_dir: Path, text: str | bytes) -> Path:
    """``run_dir/.hydra/config.yaml`` holding ``text``."""
    path = run_dir / ".hydra" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def test_a_stored_config_gives_the_settings_it_was_composed_to(tmp_path):
    cfg = compose_run("algo=sac", "env=pendulum", "seed=11", "algo.hidden_sizes=[32,32]")
    stored(tmp_path, OmegaConf.to_yaml(cfg))
    assert load_run_settings(tmp_path) == settings(cfg)


def test_a_stored_device_can_be_replaced(tmp_path):
    """A run trained on cuda is read back on a machine without one: refused as it is, loaded
    with device="cpu"."""
    stored(tmp_path, OmegaConf.to_yaml(compose_run("experiment=smoke", "device=cuda:0")))
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="device=cuda:0 asked for"):
            load_run_settings(tmp_path)
    assert load_run_settings(tmp_path, device="cpu").device == CPU


@pytest.mark.parametrize(("text", "message"), [
    ("algo: [unclosed\n", r"config.yaml is damaged \(expected ',' or '\]', but got '<stream "
                          r"end>', line 2\); it is the run's config, so the run cannot be "
                          "rebuilt from it"),
    ("algo:\n\tname: ppo\n", r"config.yaml is damaged \(found character '\\t' that cannot "
                             r"start any token, line 2\)"),
    ("- algo\n- env\n", r"config.yaml is damaged \(not a mapping of config groups\)"),
    (b"\xff\xfe\x00", "config.yaml cannot be read: 'utf-8' codec can't decode byte 0xff"),
    ("algo:\n  name: nope\n", r"the stored config names no known algorithm \(algo.name='nope'; "
                              "rltrain has "),
    ("algo:\n  name: ppo\ntrainer:\n  name: nope\n",
     r"the stored config names no known trainer \(trainer.name='nope'\)"),
    ("algo:\n  name: ppo\n  lr: abc\n", "the stored config does not match rltrain's schema: "
                                        "Value 'abc' of type 'str' could not be converted"),
])
def test_a_damaged_stored_config_is_refused_naming_the_file(tmp_path, text, message):
    path = stored(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as e:
        load_run_settings(tmp_path)
    if "config.yaml" in message:
        assert str(e.value).startswith(str(path))


def test_a_missing_run_or_config_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=f"^{tmp_path / 'nope'} is not a directory; pass a run "
                                          "directory written by rltrain$"):
        load_run_settings(tmp_path / "nope")
    with pytest.raises(ConfigError, match=f"^{tmp_path} has no .hydra/config.yaml"):
        load_run_settings(tmp_path)
    (tmp_path / ".hydra" / "config.yaml").mkdir(parents=True)  # not a file
    with pytest.raises(ConfigError, match="has no .hydra/config.yaml"):
        load_run_settings(tmp_path)


def test_eval_of_a_damaged_run_config_is_one_line(tmp_path):
    """Through a command that reads a run's settings (rltrain-eval), the damaged file is
    named in one line, without a traceback."""
    run_dir = tmp_path / "run"
    stored(run_dir, "algo: [unclosed\n")
    res = command(evaluate.main, run_dir, "--episodes", "1")
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"rltrain-eval: error: {run_dir}/.hydra/config.yaml is damaged (expected ',' or ']', "
        "but got '<stream end>', line 2); it is the run's config, so the run cannot be rebuilt "
        "from it"]
