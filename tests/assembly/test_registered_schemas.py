"""The catalogue (rltrain.assembly.registered_schemas): every schema the registries declare, stored
for Hydra; a stored config typed again; the trainer/algorithm pairing; and the key and value checks
that name what would be valid ("did you mean"), in-process and, for keys added with ``+``, through
the CLI."""

from __future__ import annotations

import dataclasses

import pytest
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from conftest import compose_run, refusal
from rltrain.algorithms import ALGORITHMS
from rltrain.assembly.checked_config import settings
from rltrain.assembly.registered_schemas import (
    check_known_keys,
    free_form_prefixes,
    key_problem,
    register_configs,
    schemas,
    trainer_problem,
    typed_run_config,
    value_problem,
)
from rltrain.config.schemas import ConfigError, EnvConfig, LoggerConfig, ReplayBufferConfig
from rltrain.loggers import LOGGERS
from rltrain.trainers import TRAINERS


# --------------------------------------------------------------------------- the schemas
def test_every_registered_schema_is_in_the_catalogue():
    found = schemas()
    for name, spec in ALGORITHMS.items():
        assert found[f"algo/{name}"] is spec.config
    for name, kind in TRAINERS.items():
        assert found[f"trainer/{name}"] is kind.params_type
    assert found["env"] is EnvConfig and found["buffer/replay"] is ReplayBufferConfig
    assert len(found) == len(ALGORITHMS) + len(TRAINERS) + 3


def test_the_logger_schema_has_a_section_per_registered_logger():
    logger = schemas()["logger"]
    assert issubclass(logger, LoggerConfig)
    fields = {f.name: f for f in dataclasses.fields(logger)}
    assert set(LOGGERS) == set(fields) - {f.name for f in dataclasses.fields(LoggerConfig)}
    assert {"tensorboard", "wandb", "mlflow"} <= set(LOGGERS)
    for key, spec in LOGGERS.items():
        assert fields[key].type is spec.schema or fields[key].type == spec.schema.__name__


def test_register_configs_stores_every_schema_for_the_yaml_files():
    register_configs()
    store = ConfigStore.instance()
    for path, schema in schemas().items():
        node = store.load(f"schema/{path}.yaml").node
        assert OmegaConf.get_type(node) is schema, path
    assert sorted(store.list("schema/algo")) == sorted(f"{n}.yaml" for n in ALGORITHMS)


# --------------------------------------------------------------------------- a stored config
def test_a_stored_config_is_typed_again_to_the_same_settings():
    cfg = compose_run("algo=td3", "env=pendulum", "trainer.max_epochs=3")
    raw = OmegaConf.create(OmegaConf.to_yaml(cfg))  # what .hydra/config.yaml reads back as
    typed = typed_run_config(raw)
    assert OmegaConf.get_type(typed.algo) is ALGORITHMS["td3"].config
    assert OmegaConf.get_type(typed.trainer) is TRAINERS["offpolicy"].params_type
    assert settings(typed) == settings(cfg)


def test_a_stored_config_without_a_trainer_gets_its_algorithms_own():
    raw = OmegaConf.create({"algo": {"name": "bc"}})
    assert OmegaConf.get_type(typed_run_config(raw).trainer) is TRAINERS["offline"].params_type


@pytest.mark.parametrize(("raw", "message"), [
    ({"algo": {"name": "nope"}}, "the stored config names no known algorithm (algo.name='nope'; "
                                 "rltrain has "),
    ({"env": {"id": "CartPole-v1"}}, "names no known algorithm (algo.name=None;"),
    ({"algo": {"name": "ppo"}, "trainer": {"name": "nope"}},
     "the stored config names no known trainer (trainer.name='nope')"),
    ({"algo": {"name": "ppo", "lr": "abc"}}, "the stored config does not match rltrain's schema"),
])
def test_typed_run_config_refuses_what_is_not_rltrains(raw, message):
    with pytest.raises(ConfigError) as e:
        typed_run_config(OmegaConf.create(raw))
    assert message in str(e.value)


# --------------------------------------------------------------------------- pairing
def test_trainer_problem_names_the_algorithms_trainer():
    for name, spec in ALGORITHMS.items():
        for trainer in TRAINERS:
            problem = trainer_problem(name, trainer)
            assert (problem is None) == (trainer in spec.trainers), (name, trainer)
    assert trainer_problem("bc", "onpolicy") == (
        "algo=bc runs with trainer=offline, not trainer=onpolicy; leave trainer= out (each "
        "algorithm picks its own)")
    assert trainer_problem("nope", "onpolicy") is None  # an unknown algo is refused elsewhere


# --------------------------------------------------------------------------- keys
@pytest.mark.parametrize(("key", "algos", "message"), [
    ("sead", None, "unknown key sead; did you mean seed? (top-level keys are: algo, buffer, "
                   "dataset, device, env, logger, precision, seed, torch_threads, trainer, "
                   "trust, tune)"),
    ("buffer.siz", None, "unknown key buffer.siz; did you mean buffer.size? (buffer has: "
                   "frame_stack, on_device, priority_alpha, priority_beta, priority_eps, "
                   "sampler, size)"),
    ("tune.objectiv", None, "unknown key tune.objectiv; did you mean tune.objective?"),
    ("env.normalize.rewards", None, "unknown key env.normalize.rewards; did you mean "
                                    "env.normalize.reward? (env.normalize has: clip_obs, "
                                    "clip_reward, epsilon, obs, reward)"),
    ("logger.wandb.projct", None, "unknown key logger.wandb.projct; did you mean "
                                  "logger.wandb.project? (logger.wandb has: "),
    ("logger.foo", None, "unknown key logger.foo (logger has: "),
    ("algo.lrr", ["ppo"], "unknown key algo.lrr; did you mean algo.lr? (algo has: activation, "
                          "clip_ratio,"),
    ("algo.lr", ["sac"], "unknown key algo.lr; did you mean algo.actor_lr, algo.alpha_lr or "
                         "algo.critic_lr? (algo has: "),
    ("algo.target_update_interval", ["ppo"], "unknown key algo.target_update_interval"),
    ("seed.x", None, "seed is a value, not a group of keys (seed.x)"),
    ("trainer.max_epochs.x", None,
     "trainer.max_epochs is a value, not a group of keys (trainer.max_epochs.x)"),
])
def test_key_problem_names_the_key_and_what_is_near_it(key, algos, message):
    problem = key_problem(key, algos)
    assert problem is not None and problem.startswith(message), problem


@pytest.mark.parametrize("key", ["seed", "dataset", "env.normalize.obs", "env.kwargs.g",
                                 "env.kwargs.anything.deep", "env.wrappers", "logger.wandb.tags",
                                 "logger.tensorboard", "trainer.random_warmup_env_steps",
                                 "algo.target_update_interval"])
def test_key_problem_accepts_the_schemas_keys(key):
    assert key_problem(key) is None


def test_no_did_you_mean_when_nothing_is_near():
    problem = key_problem("algo.zzzz", ["ppo"])
    assert problem is not None and "did you mean" not in problem


@pytest.mark.parametrize(("key", "value", "takes"), [
    ("trainer.max_epochs", "abc", "an integer"),
    ("trainer.max_epochs", 1.5, "an integer"),
    ("trainer.max_epochs", None, "an integer"),
    ("seed", "abc", "an integer"),
    ("algo.hidden_sizes", "abc", "a list of integers, like [64,64]"),
    ("algo.hidden_sizes", ["a", "b"], "a list of integers, like [64,64]"),
    ("env.normalize.obs", "maybe", "true or false"),
    ("algo.actor_lr", "fast", "a number"),
])
def test_value_problem_names_the_key_the_value_and_the_type(key, value, takes):
    shown = repr(value) if isinstance(value, str) else value
    assert value_problem(key, value) == f"{key}={shown} is not valid: {key} takes {takes}"


@pytest.mark.parametrize(("key", "value"), [
    ("trainer.stop_score", None), ("env.max_episode_steps", None), ("algo.lr", 1),
    ("algo.lr", "${seed}"), ("env.kwargs.g", "anything"), ("dataset", None),
    ("algo.hidden_sizes", [32, 32]), ("algo.nope", "x"),
])
def test_value_problem_passes_values_that_fit(key, value):
    assert value_problem(key, value) is None


# --------------------------------------------------------------------------- composed configs
def test_check_known_keys_refuses_a_key_added_with_plus():
    check_known_keys(compose_run("algo=dqn"))
    with pytest.raises(ConfigError, match=r"^unknown key trainer\.max_epoch; did you mean "
                                          r"trainer\.max_epochs\? \(trainer has: "):
        check_known_keys(compose_run("algo=dqn", "+trainer.max_epoch=1"))
    # PPO's schema has no target network: another algorithm's key is refused
    with pytest.raises(ConfigError, match="unknown key algo.target_update_interval"):
        check_known_keys(compose_run("algo=ppo", "+algo.target_update_interval=5"))


def test_keys_under_free_form_mappings_are_not_checked():
    check_known_keys(compose_run("algo=ppo", "+env.kwargs.anything.deep=1"))
    assert free_form_prefixes() == ["env.kwargs."]


@pytest.mark.parametrize(("override", "named"), [
    ("+trainer.max_epoch=1", "did you mean trainer.max_epochs?"),
    ("+seeed=1", "did you mean seed?"),
    ("+algo.lrr=1", "did you mean algo.lr?"),
    ("+algo._target_=os.system", "unknown key algo._target_"),
    ("+env.wrappers=[x]", "env.wrappers[0]: gymnasium.wrappers has no 'x'"),
    ("+logger.foo.bar=1", "unknown key logger.foo"),
])
def test_added_keys_are_checked_against_the_schema(tmp_path, override, named):
    message = refusal(tmp_path / "run", "experiment=smoke", override)
    assert named in message, message
    assert "Traceback" not in message
