"""The algorithm registry (rltrain.algorithms.registry) and what derives from it: one YAML per
algorithm, the tuned configs, the key checks that follow each algorithm's schema, how the
composition root builds an algorithm, and the action spaces it refuses."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from algo_helpers import BOX, CPU, DISC, SMALL, kind
from conftest import TESTS, refusal
from rltrain.algorithms import (
    ALGORITHMS,
    CONTINUOUS,
    DISCRETE,
    MULTIDISCRETE,
    Algorithm,
    AlgoSpec,
    get,
    register,
)
from rltrain.algorithms.cql import ContinuousCQL, CQLConfig, DiscreteCQL, build_cql
from rltrain.algorithms.ppo import PPO, PPOConfig
from rltrain.assembly.build import build_algorithm
from rltrain.assembly.checked_config import settings
from rltrain.assembly.registered_schemas import key_problem, register_configs
from rltrain.common.types import Progress, SpaceInfo
from rltrain.config.schemas import ConfigError

CONF = TESTS.parent / "conf"


def compose_run(*overrides: str) -> DictConfig:
    """The run config `rltrain OVERRIDES` composes."""
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def dataset_for(algo: str) -> list[str]:
    """An offline algorithm's settings name a dataset (composing and checking read no file)."""
    return ["dataset=data.h5"] if "offline" in ALGORITHMS[algo].trainers else []


# --------------------------------------------------------------------------- one entry each
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_registered_algorithm_has_a_yaml_and_builds(name):
    """One YAML per algorithm, naming a trainer the algorithm supports and extending its
    schema; the spec's build makes it from the schema's defaults, and it acts (the deployable
    policy within the env's bounds)."""
    spec = ALGORITHMS[name]
    raw = yaml.safe_load((CONF / "algo" / f"{name}.yaml").read_text())
    defaults = raw["defaults"]
    assert f"/schema/algo/{name}@_here_" in defaults
    trainer = next(d["/trainer@_global_.trainer"] for d in defaults if isinstance(d, dict))
    assert trainer in spec.trainers
    info = BOX if CONTINUOUS in spec.actions else DISC
    cfg = spec.config()
    cfg.check()
    algorithm = spec.build(cfg, info, CPU, 0)
    assert isinstance(algorithm, Algorithm)
    obs = np.zeros((5, *info.obs_shape), np.float32)
    act = algorithm.act(obs, deterministic=True, progress=Progress(0, 0, 0.0))
    assert act.shape == (5, *info.action_shape)
    with torch.no_grad():
        env_act = algorithm.deployable()(torch.from_numpy(obs))
    assert env_act.shape == (5, *info.action_shape)
    if not info.discrete:  # the deployable policy acts in the env's bounds
        assert (env_act.numpy() >= info.action_low).all()
        assert (env_act.numpy() <= info.action_high).all()


def test_specs_are_dataclass_schemas_and_known_action_kinds():
    for spec in ALGORITHMS.values():
        assert dataclasses.is_dataclass(spec.config)
        assert set(spec.actions) <= {DISCRETE, MULTIDISCRETE, CONTINUOUS}
        assert spec.config.name == spec.name


@pytest.mark.parametrize("name", ["bc", "cql", "iql", "td3bc"])
def test_offline_algorithms_run_with_the_offline_trainer_only(name):
    assert ALGORITHMS[name].trainers == ("offline",)


def test_cql_registers_a_builder_that_picks_the_class_from_the_action_space():
    """One name, two classes: the registry's build is a function (no class whose __new__
    returns another class), DiscreteCQL for Discrete actions, ContinuousCQL for a Box."""
    spec = ALGORITHMS["cql"]
    assert spec.build is build_cql and not isinstance(spec.build, type)
    disc = spec.build(CQLConfig(**SMALL), DISC, CPU, 0)
    cont = spec.build(CQLConfig(**SMALL), BOX, CPU, 0)
    assert type(disc) is DiscreteCQL and type(cont) is ContinuousCQL


def _subclasses(cls: type) -> list[type]:
    return [c for sub in cls.__subclasses__() for c in (sub, *_subclasses(sub))]


def test_no_algorithm_class_overrides_new():
    """What is built is what the spec's build returns: no class turns into another."""
    classes = _subclasses(Algorithm)
    assert {PPO, DiscreteCQL, ContinuousCQL} <= set(classes)
    assert [c.__name__ for c in classes if "__new__" in vars(c)] == []


def test_the_build_calls_the_specs_build(monkeypatch):
    """rltrain.assembly.build.build_algorithm makes the algorithm with the registered spec's build,
    given the run's algo settings, the env's info, device and seed."""
    calls = []

    def spy(cfg: PPOConfig, info: SpaceInfo, device: torch.device, seed: int) -> PPO:
        calls.append((cfg, info, device, seed))
        return PPO(cfg, info, device, seed)

    monkeypatch.setitem(ALGORITHMS, "ppo", dataclasses.replace(ALGORITHMS["ppo"], build=spy))
    s = settings(compose_run("algo=ppo", "env=cartpole", "seed=7"))
    algorithm = build_algorithm(s, DISC)
    assert isinstance(algorithm, PPO)
    assert calls == [(s.algo, DISC, s.device, 7)]


def test_register_refuses_inconsistent_specs():
    spec = ALGORITHMS["ppo"]
    with pytest.raises(ValueError, match="two algorithms are registered as 'ppo'"):
        register(dataclasses.replace(spec, build=lambda *args: None))
    with pytest.raises(ValueError, match="PPOConfig.name must default to 'ppo2'"):
        register(dataclasses.replace(spec, name="ppo2"))
    with pytest.raises(ValueError, match="actions must be among"):
        register(AlgoSpec(name="ppo", config=PPOConfig, build=spec.build,
                          trainers=("onpolicy",), actions=("multibinary",)))
    assert register(spec) is spec and ALGORITHMS["ppo"] is spec  # the same spec again: fine


def test_get_names_the_algorithms():
    assert get("sac") is ALGORITHMS["sac"]
    with pytest.raises(ConfigError, match="algo='sacc' is not an rltrain algorithm; use one of "
                                          "a2c, bc, "):
        get("sacc")


# --------------------------------------------------------------------------- key checks
def test_key_checks_follow_each_algorithms_schema():
    assert key_problem("algo.actor_lr", ["sac"]) is None
    assert key_problem("algo.target_noise", ["td3"]) is None
    problem = key_problem("algo.actor_lr", ["ppo"])
    assert problem is not None and "unknown key algo.actor_lr" in problem
    assert "did you mean algo.target_noise" in key_problem("algo.target_nois", ["td3"])
    # a key of another algorithm's schema names this one's nearest keys
    assert ("did you mean algo.actor_lr, algo.alpha_lr or algo.critic_lr?"
            in key_problem("algo.lr", ["sac"]))
    assert key_problem("env.normalize.obs") is None
    assert "did you mean env.normalize.reward" in key_problem("env.normalize.rewards")


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_key_checks_follow_the_shared_schemas(name):
    """Every algorithm has the network fields (encoder included); all but behaviour cloning a
    discount; the TD learners n-step returns, which PPO and BC do not have."""
    for key in ("algo.hidden_sizes", "algo.activation", "algo.encoder"):
        assert key_problem(key, [name]) is None, key
    gamma, n_step = key_problem("algo.gamma", [name]), key_problem("algo.n_step", [name])
    assert (gamma is None) == (name != "bc"), gamma
    assert (n_step is None) == (name not in ("bc", "ppo", "ppo_lstm", "a2c", "reinforce")), n_step
    if n_step is not None:
        assert "unknown key algo.n_step" in n_step


# --------------------------------------------------------------------------- tuned configs
def tuned_pairs() -> list[tuple[str, str]]:
    pairs = []
    for path in sorted((CONF / "tuned").glob("*.yaml")):
        # the longest name that fits: ppo_lstm_cartpole_novel is ppo_lstm's, not ppo's
        algo = max((a for a in ALGORITHMS if path.stem.startswith(f"{a}_")), key=len)
        pairs.append((algo, path.stem[len(algo) + 1:]))
    return pairs


@pytest.mark.parametrize(("algo", "env"), tuned_pairs())
def test_every_tuned_config_composes_and_passes_the_checks(algo, env):
    """Each conf/tuned/<algo>_<env>.yaml names a registered algorithm and a shipped env, is
    picked up by `algo=<algo> env=<env>`, and yields settings that pass every check."""
    assert (CONF / "env" / f"{env}.yaml").exists()
    cfg = compose_run(f"algo={algo}", f"env={env}", *dataset_for(algo))
    raw = yaml.safe_load((CONF / "tuned" / f"{algo}_{env}.yaml").read_text())
    # a group of many games (atari, minatar, minigrid) names its runs after the env id
    assert cfg.algo.name == algo and cfg.env.name in (env, cfg.env.id.replace("/", "-"))
    s = settings(cfg)
    if "trainer" in raw:  # the tuned values are the ones composed
        assert s.trainer.max_epochs == raw["trainer"].get("max_epochs", s.trainer.max_epochs)


# --------------------------------------------------------------------------- action spaces
@pytest.mark.parametrize(("name", "info"), [(n, i) for n in sorted(ALGORITHMS) for i in (BOX, DISC)
                                            if kind(i) not in ALGORITHMS[n].actions])
def test_the_build_refuses_an_action_space_the_spec_does_not_accept(name, info):
    """Refused before anything is built, naming the algorithms of the same kind of training
    that fit."""
    s = settings(compose_run(f"algo={name}", "env=cartpole", *dataset_for(name)))
    with pytest.raises(ConfigError, match=f"algo={name} needs") as e:
        build_algorithm(s, info)
    offline = "offline" in ALGORITHMS[name].trainers
    fits = [n for n, spec in ALGORITHMS.items()
            if kind(info) in spec.actions and ("offline" in spec.trainers) == offline]
    assert fits and all(f"algo={n}" in str(e.value) for n in fits)


def test_unbounded_actions_are_refused_by_squashing_algorithms(tmp_path):
    message = refusal(tmp_path / "run", "algo=sac", "env=gym",
                      "env.id=toy_envs:rltrain-test/Unbounded-v0", "experiment=smoke")
    assert "unbounded in dimensions [0]" in message and "Traceback" not in message


def test_discrete_algorithm_on_box_actions_names_the_ones_that_fit(tmp_path):
    message = refusal(tmp_path / "run", "algo=dqn", "env=pendulum", "experiment=smoke")
    assert "algo=dqn needs discrete actions" in message
    assert all(f"algo={a}" in message for a in ("ddpg", "ppo", "sac", "td3"))
