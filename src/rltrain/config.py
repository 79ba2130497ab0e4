"""Config schemas: one dataclass per config group option, registered in Hydra's ConfigStore.

Each YAML file under ``conf/`` extends its schema through its defaults list
(``- /schema/algo/ppo@_here_``), so Hydra refuses a misspelt key or a wrong type
at composition, naming the key. Checks that involve several fields, or the env,
run at build time (:func:`check`) and raise :class:`ConfigError` naming the fields.

Values that follow from the env (network input/output sizes, action bounds,
reward threshold) are never written here: the composition root computes them.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException


class ConfigError(ValueError):
    """A user-facing configuration problem; the CLI prints it without a traceback."""


@dataclass
class NormalizeConfig:
    """Observation normalisation and reward scaling (both off unless an env or tuned config
    switches them on). Their statistics are part of the training state (exact resume) and
    the observation statistics part of the saved policy (eval and export apply them)."""

    #: normalise observations by a running mean and variance, updated from training
    #: collection only (frozen while testing and in eval)
    obs: bool = False
    #: scale rewards by a running estimate of the discounted return's standard deviation
    #: (training only; test returns are always the env's own)
    reward: bool = False
    #: clip normalised observations to [-clip_obs, clip_obs]
    clip_obs: float = 10.0
    #: clip scaled rewards to [-clip_reward, clip_reward]
    clip_reward: float = 10.0
    #: added to the variance before the square root
    epsilon: float = 1e-8


# --------------------------------------------------------------------------- env
@dataclass
class EnvConfig:
    #: short name used in the run directory (``outputs/<algo>-<name>/...``)
    name: str = MISSING
    #: gymnasium id, e.g. CartPole-v1, a user's own registered id, or ``module:Env-v0``
    #: (gymnasium's form: the module is imported first, which registers the env)
    id: str = MISSING
    #: keyword arguments passed to the env constructor (free-form: ``env.kwargs.g=9.81``)
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: modules imported before the env is made (a user's package that registers envs);
    #: stored with the run, so eval, export and resume import them too
    imports: list[str] = field(default_factory=list)
    #: gymnasium wrappers (or the user's own), applied in order to every env of the run
    #: (train, test, eval, video): a dotted class name, or ``{name: ..., kwargs: {...}}``
    wrappers: list[Any] = field(default_factory=list)
    #: the test score that counts as solved (the trainer's stop_score=auto stops there);
    #: null: the env's registered reward_threshold. Set for envs that register none.
    reward_threshold: float | None = None
    #: truncate episodes after this many steps (null: the env's registered limit; an env
    #: with none gets DEFAULT_MAX_EPISODE_STEPS, so that no episode runs forever)
    max_episode_steps: int | None = None
    #: parallel envs used for collecting training data
    num_train_envs: int = 8
    #: parallel envs used for the test step (each runs a fixed quota of episodes)
    num_test_envs: int = 10
    #: auto (the env's native vector implementation when it has one, else sync), sync, async
    vectorization: str = "auto"
    #: observation normalisation and reward scaling: ``env.normalize.obs=true``
    normalize: NormalizeConfig = field(default_factory=NormalizeConfig)


# --------------------------------------------------------------------------- algorithms
@dataclass
class AlgoConfig:
    """The base of every algorithm's schema. Each schema lives next to its algorithm's class
    (``rltrain/algorithms/<name>.py``) and checks its own fields in :meth:`check`."""

    name: str = MISSING

    def check(self) -> None:
        """Range checks of the fields; raises ConfigError naming the field."""

    def check_plan(self, gradient_steps: float) -> None:
        """Checks against the run's planned number of gradient steps (e.g. a target network
        that would never be updated)."""


# --------------------------------------------------------------------------- trainers
@dataclass
class TrainerParams:
    """Parameters shared by all trainers (names follow Tianshou 2.0)."""

    #: which trainer: set by the trainer's schema (``trainer/<name>.yaml``), never by hand
    name: str = MISSING
    #: upper bound on the number of epochs
    max_epochs: int = 100
    #: env steps (online) or update steps (offline) per epoch
    epoch_num_steps: int = 10_000
    #: transitions sampled per gradient step (on-policy: minibatch size; null = whole batch)
    batch_size: int | None = 64
    #: episodes per test step, spread over the test envs in fixed per-env quotas
    test_step_num_episodes: int = 10
    #: stop when the test score reaches this; "auto" = the env's reward threshold; null = never
    stop_score: Any = "auto"
    #: write checkpoints/last.pt every this many epochs (and always on interruption)
    checkpoint_every: int = 1
    #: numbered checkpoints kept besides last.pt (the newest ones)
    keep_checkpoints: int = 3
    #: include the replay buffer in checkpoints (off-policy), for an exact resume
    checkpoint_buffer: bool = True


@dataclass
class OnlineTrainerParams(TrainerParams):
    #: transitions per collection step (exactly one of this and the episodes count is set)
    collection_step_num_env_steps: int | None = 2048
    #: episodes per collection step
    collection_step_num_episodes: int | None = None
    #: test as soon as the training episodes of a collection step reach stop_score
    test_in_training: bool = False


@dataclass
class OnPolicyTrainerParams(OnlineTrainerParams):
    name: str = "onpolicy"
    #: passes over the collected data per update step
    update_step_num_repetitions: int = 10


@dataclass
class OffPolicyTrainerParams(OnlineTrainerParams):
    name: str = "offpolicy"
    collection_step_num_env_steps: int | None = 16
    #: gradient steps per collected transition (round(u * n) per update step)
    update_step_num_gradient_steps_per_sample: float = 1.0
    #: env steps with uniformly random actions before the first epoch
    random_warmup_env_steps: int = 1000


@dataclass
class OfflineTrainerParams(TrainerParams):
    name: str = "offline"
    epoch_num_steps: int = 1000


# --------------------------------------------------------------------------- buffer, logger
@dataclass
class ReplayBufferConfig:
    #: capacity in transitions, split evenly into one lane per train env
    size: int = 100_000


@dataclass
class WandbConfig:
    """Weights & Biases (extra ``wandb``): the config, every epoch's metrics and the summary."""

    enabled: bool = False
    project: str = "rltrain"
    entity: str | None = None
    #: offline (files under the run directory; upload later with ``wandb sync``), online
    mode: str = "offline"
    group: str | None = None
    tags: list[str] = field(default_factory=list)


@dataclass
class MlflowConfig:
    """MLflow (extra ``mlflow``): the config as params, every epoch's metrics, the summary."""

    enabled: bool = False
    #: any MLflow tracking URI; default: sqlite:///mlflow.db in the working directory (MLflow
    #: 3 keeps its plain-file store for old data only)
    tracking_uri: str | None = None
    experiment: str = "rltrain"


@dataclass
class LoggerConfig:
    #: write TensorBoard event files under tb/
    tensorboard: bool = True
    #: show a live progress bar during each epoch (only on a terminal)
    progress_bar: bool = True
    #: when stdout is not a terminal (Slurm logs, ``| tee``), print a progress line within a
    #: long epoch at most this often (seconds)
    progress_interval_s: float = 30.0
    #: print nothing but warnings and errors (``rltrain -q``)
    quiet: bool = False
    wandb: WandbConfig = field(default_factory=WandbConfig)
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)


# --------------------------------------------------------------------------- tuning
#: what a tuning trial's score is, from its test scores (rltrain.tune.objective)
OBJECTIVES = ("auc", "last_k", "best", "final")


@dataclass
class TuneConfig:
    """How a run reports to an Optuna study. The Optuna sweeper sets ``storage``, ``study``
    and ``trial`` for each of its jobs; a run without them reports nothing."""

    #: the study's storage (an RDB URL such as sqlite:///PATH, or journal:PATH)
    storage: str | None = None
    study: str | None = None
    #: the trial's number in the study
    trial: int | None = None
    #: the trial's score from its epochs' test scores: auc (the mean over every planned
    #: epoch, the last score carried past an early stop), last_k (the mean of the last k),
    #: best or final
    objective: str = "auc"
    last_k: int = 3
    #: report each epoch's score to the study's pruner, and stop when it says so
    prune: bool = True


# --------------------------------------------------------------------------- run
@dataclass
class RunConfig:
    algo: Any = MISSING
    env: EnvConfig = MISSING
    trainer: Any = MISSING
    buffer: ReplayBufferConfig = MISSING
    logger: LoggerConfig = MISSING
    #: seeds python, numpy, torch and the envs (train and test envs get disjoint seeds);
    #: 0 <= seed <= MAX_SEED
    seed: int = 0
    #: cpu, cuda, cuda:N or auto (cuda when available)
    device: str = "cpu"
    #: torch intra-op threads; 1 is fastest for small MLPs
    torch_threads: int = 1
    #: set by the Optuna sweeper (``hydra/sweeper=optuna``) for its trials
    tune: TuneConfig = field(default_factory=TuneConfig)
    #: what an offline algorithm (trainer=offline: bc, td3bc, cql, iql) learns from: an .h5,
    #: .hdf5 or .npz file written by rltrain-collect, or minari:ID (a local Minari dataset)
    dataset: str | None = None


#: the trainer schemas, by trainer name (``trainer=<name>``)
TRAINER_SCHEMAS: dict[str, type[TrainerParams]] = {
    "onpolicy": OnPolicyTrainerParams,
    "offpolicy": OffPolicyTrainerParams,
    "offline": OfflineTrainerParams,
}


def algorithm_specs() -> dict[str, Any]:
    """The registered algorithms (``rltrain.algorithms``), by name. Imported here, not at the
    top: the algorithm modules import this one for their schemas' checks."""
    from rltrain.algorithms import ALGORITHMS

    return ALGORITHMS


def schemas() -> dict[str, type]:
    """Every schema by its ConfigStore path: ``algo/<name>`` for each registered algorithm,
    ``trainer/<name>``, ``env``, ``buffer/replay``, ``logger``."""
    out: dict[str, type] = {f"algo/{name}": spec.config
                            for name, spec in algorithm_specs().items()}
    out.update({f"trainer/{name}": schema for name, schema in TRAINER_SCHEMAS.items()})
    out.update({"env": EnvConfig, "buffer/replay": ReplayBufferConfig, "logger": LoggerConfig})
    return out


def trainer_problem(algo: str, trainer: str) -> str | None:
    """Why ``trainer`` cannot run ``algo`` (each algorithm's YAML picks its trainer), or None."""
    spec = algorithm_specs().get(algo)
    if spec is None or trainer in spec.trainers:
        return None
    return (f"algo={algo} runs with trainer={' or trainer='.join(spec.trainers)}, not "
            f"trainer={trainer}; leave trainer= out (each algorithm picks its own)")


def typed_run_config(raw: DictConfig) -> DictConfig:
    """Give a composed config read back from a run directory (``.hydra/config.yaml``)
    its schemas again, so it is checked and converts to the same dataclasses."""
    specs = algorithm_specs()
    algo = raw.get("algo", {}).get("name")
    if algo not in specs:
        raise ConfigError(f"the stored config names no known algorithm (algo.name={algo!r}; "
                          f"rltrain has {', '.join(specs)})")
    trainer = raw.get("trainer", {}).get("name") or specs[algo].trainers[0]
    if trainer not in TRAINER_SCHEMAS:
        raise ConfigError(f"the stored config names no known trainer (trainer.name={trainer!r})")
    schema = OmegaConf.structured(RunConfig)
    parts = {
        "algo": specs[algo].config,
        "env": EnvConfig,
        "trainer": TRAINER_SCHEMAS[trainer],
        "buffer": ReplayBufferConfig,
        "logger": LoggerConfig,
    }
    for key, node in parts.items():
        schema[key] = OmegaConf.structured(node)
    try:
        return OmegaConf.merge(schema, raw)
    except OmegaConfBaseException as e:
        raise ConfigError(f"the stored config does not match rltrain's schema: {e}") from None


def env_dir_name(env_id: str) -> str:
    """A run directory's name for an env id: ``mypkg.envs:ns/MyEnv-v0`` -> ``ns-MyEnv-v0``."""
    return env_id.rpartition(":")[2].replace("/", "-") or "env"


#: the longest part of a sweep job's directory name taken by its overrides (a file name may
#: have 255 bytes; five Optuna parameters at four digits take about 130)
JOB_NAME_LIMIT = 160


#: a decimal number with five or more digits after the point, standing alone as an override's
#: value or a list item
_LONG_NUMBER = re.compile(r"(?<=[=,\[ ])-?\d+\.\d{5,}(?:e[-+]?\d+)?(?=$|[,\] ])")


def job_dir_name(overrides: str, num: Any) -> str:
    """A sweep job's directory: the overrides that differ between its sweep's jobs (Hydra's
    ``override_dirname``, whose constant keys the sweep's callback excludes), then the job
    number, e.g. ``algo=dqn,seed=3_job7``; just ``job7`` when nothing differs. A ``/`` in a
    value becomes ``-`` (no nested directories), a number with five or more decimals (an
    Optuna trial's ``algo.lr=0.0008752409682826399``) is written to four significant digits
    (``algo.lr=0.0008752``; the exact values are in the job's ``.hydra/overrides.yaml``), and
    long names are cut (the number keeps them apart)."""
    name = _LONG_NUMBER.sub(lambda m: f"{float(m.group()):.4g}", str(overrides))
    name = name.replace("/", "-").replace("\\", "-").strip(".")
    if len(name) > JOB_NAME_LIMIT:
        name = name[:JOB_NAME_LIMIT].rstrip(",") + "~"
    return f"{name}_job{num}" if name else f"job{num}"


def job_number(name: str) -> int | None:
    """The job number in a sweep job's directory name (``..._job7``, ``job7``; an older
    sweep's plain ``7``), or None."""
    found = re.fullmatch(r"(?:.*_)?job(\d+)|(\d+)", name)
    return None if found is None else int(found.group(1) or found.group(2))


def register_resolvers() -> None:
    """``${rltrain_env_name:ID}`` (conf/env/gym.yaml) and ``${rltrain_job_dir:...}`` (a sweep
    job's directory, conf/config.yaml), needed wherever a config is read."""
    OmegaConf.register_new_resolver("rltrain_env_name", env_dir_name, replace=True)
    OmegaConf.register_new_resolver("rltrain_job_dir", job_dir_name, replace=True)


def register_configs() -> None:
    """Store every schema under ``schema/...`` so YAML files can extend them."""
    register_resolvers()
    cs = ConfigStore.instance()
    cs.store(name="rltrain_schema", node=RunConfig)
    for path, node in schemas().items():
        group, _, name = path.rpartition("/")
        cs.store(group=f"schema/{group}" if group else "schema", name=name, node=node)


# --------------------------------------------------------------------------- checks
#: the largest seed a run accepts: numpy's legacy seeding takes 32-bit seeds, and the envs,
#: eval and test seeds are derived by adding offsets, so 31 bits leave room for them
MAX_SEED = 2**31 - 1
#: the episode limit of an env that registers none and gets no env.max_episode_steps
DEFAULT_MAX_EPISODE_STEPS = 10_000


def check_positive(obj: Any, prefix: str, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if value is not None and not value > 0:  # "not > 0" also refuses NaN
            raise ConfigError(f"{prefix}.{name} must be > 0, got {value}")


def check_unit_interval(obj: Any, prefix: str, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"{prefix}.{name} must be in [0, 1], got {value}")


def check_finite(obj: Any, prefix: str) -> None:
    """Refuse NaN and infinite numbers anywhere in a schema object (``value <= 0`` is False
    for NaN, so range checks alone would let ``algo.lr=nan`` train a NaN network)."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if isinstance(v, float) and not math.isfinite(v):
                hint = " (null means none)" if f.name == "stop_score" else ""
                raise ConfigError(f"{prefix}.{f.name} must be a finite number, got {v}{hint}")


def check_seed(seed: Any, key: str = "seed") -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"{key} must be an integer from 0 to {MAX_SEED:,}, got {seed!r}")
    return seed


def check_trainer(params: TrainerParams) -> None:
    """Cross-field checks of the trainer params; raises ConfigError naming the fields."""
    check_positive(params, "trainer", "max_epochs", "epoch_num_steps", "batch_size",
              "test_step_num_episodes", "checkpoint_every")
    if params.keep_checkpoints < 0:
        raise ConfigError(f"trainer.keep_checkpoints must be >= 0, got {params.keep_checkpoints}")
    stop = params.stop_score
    if not (stop is None or stop == "auto" or isinstance(stop, (int, float))):
        raise ConfigError(f"trainer.stop_score must be a number, auto or null, got {stop!r}")
    if isinstance(params, OnlineTrainerParams):
        n_steps, n_eps = params.collection_step_num_env_steps, params.collection_step_num_episodes
        if (n_steps is None) == (n_eps is None):
            raise ConfigError(
                "set exactly one of trainer.collection_step_num_env_steps and "
                f"trainer.collection_step_num_episodes (got {n_steps} and {n_eps}); "
                "set the other to null"
            )
        check_positive(params, "trainer", "collection_step_num_env_steps",
                  "collection_step_num_episodes")
    if isinstance(params, OnPolicyTrainerParams):
        check_positive(params, "trainer", "update_step_num_repetitions")
    if isinstance(params, OffPolicyTrainerParams):
        if params.update_step_num_gradient_steps_per_sample < 0:
            raise ConfigError("trainer.update_step_num_gradient_steps_per_sample must be >= 0")
        if params.random_warmup_env_steps < 0:
            raise ConfigError("trainer.random_warmup_env_steps must be >= 0")
        if params.batch_size is None:
            raise ConfigError("trainer.batch_size must be a number for off-policy training")


def check_network(cfg: Any, prefix: str = "algo") -> None:
    """``hidden_sizes`` and ``activation`` of a schema with networks."""
    if any(h <= 0 for h in cfg.hidden_sizes):
        raise ConfigError(f"{prefix}.hidden_sizes must be positive, got {list(cfg.hidden_sizes)}")
    from rltrain.nets import ACTIVATIONS

    if cfg.activation not in ACTIVATIONS:
        raise ConfigError(f"{prefix}.activation must be {' or '.join(ACTIVATIONS)}, got "
                          f"{cfg.activation!r}")


def check_noise_beta(cfg: Any, prefix: str = "algo") -> None:
    """``noise_beta``, the colour of exploration noise: 0 (white) to 2 (red)."""
    if not 0.0 <= cfg.noise_beta <= 2.0:
        raise ConfigError(f"{prefix}.noise_beta must be in [0, 2] (0 white, 1 pink, 2 red), got "
                          f"{cfg.noise_beta}")


def check_env(env: EnvConfig) -> None:
    check_positive(env, "env", "num_train_envs", "num_test_envs", "max_episode_steps")
    for module in env.imports:
        if not isinstance(module, str) or not module.strip():
            raise ConfigError(f"env.imports must list module names, got {list(env.imports)}")
    if env.vectorization not in ("auto", "sync", "async"):
        raise ConfigError(
            f"env.vectorization must be auto, sync or async, got {env.vectorization!r}"
        )
    check_positive(env.normalize, "env.normalize", "clip_obs", "clip_reward", "epsilon")


def env_steps_per_collection(params: OnlineTrainerParams, num_envs: int) -> int | None:
    """Transitions per collection step: ceil(n / m) * m, or None when counted in episodes."""
    n = params.collection_step_num_env_steps
    return None if n is None else math.ceil(n / num_envs) * num_envs


# --------------------------------------------------------------------------- known keys
# Hydra's ``+key=value`` adds a key even where the schema has none, and converting the
# config to dataclasses then drops it without a word: ``+trainer.max_epoch=1`` would train
# all epochs. Every key is therefore checked against the schemas, by name, both before
# Hydra composes (the command line) and after (whatever the YAML files and overrides made).

#: the top-level keys of a run config, besides the groups (``hydra`` is Hydra's own)
_TOP = {f.name: f for f in dataclasses.fields(RunConfig)}


def _field_types(schema: type) -> dict[str, Any]:
    return typing.get_type_hints(schema)


def _is_free_form(tp: Any) -> bool:
    """Mappings and lists whose contents the schema leaves open (env.kwargs, env.wrappers)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_is_free_form(a) for a in typing.get_args(tp) if a is not type(None))
    return origin in (dict, list) or tp in (dict, list)


def group_schemas(group: str, algos: list[str]) -> list[type]:
    """The schemas a top-level group may have, for the given algorithm names."""
    specs = algorithm_specs()
    if group == "algo":
        return [specs[a].config for a in algos]
    if group == "trainer":
        return list(dict.fromkeys(TRAINER_SCHEMAS[t] for a in algos for t in specs[a].trainers))
    return {"env": [EnvConfig], "buffer": [ReplayBufferConfig], "logger": [LoggerConfig],
            "tune": [TuneConfig]}.get(
        group, [])


def key_problem(key: str, algos: list[str] | None = None) -> str | None:
    """None if ``key`` (dotted) is a key of the run config's schemas for one of ``algos``
    (default: any algorithm), else a message that names it and what would be valid."""
    specs = algorithm_specs()
    algos = [a for a in (algos or specs) if a in specs] or list(specs)
    parts = key.split(".")
    head = parts[0]
    if head not in _TOP:
        return _unknown(head, "", sorted(_TOP))
    schemas = group_schemas(head, algos)
    if not schemas:  # seed, device, torch_threads: values
        return None if len(parts) == 1 else f"{head} is a value, not a group of keys ({key})"
    prefix = head
    for part in parts[1:]:
        fields = {}
        for schema in schemas:
            fields.update(_field_types(schema))
        if part not in fields:
            return _unknown(part, prefix, sorted(fields))
        tp = fields[part]
        prefix = f"{prefix}.{part}"
        if _is_free_form(tp):
            return None
        nested = [t for t in [tp] if dataclasses.is_dataclass(t)]
        if not nested:
            rest = parts[len(prefix.split(".")):]
            return None if not rest else f"{prefix} is a value, not a group of keys ({key})"
        schemas = nested
    return None


def _describe(tp: Any) -> str:
    """What a value of type ``tp`` looks like on the command line."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        parts = [_describe(a) for a in args if a is not type(None)]
        return " or ".join(parts) + (" or null" if type(None) in args else "")
    if origin is list:
        inner = _describe(args[0]) if args else "values"
        return f"a list of {inner.removeprefix('an ').removeprefix('a ')}s, like [64,64]"
    return {int: "an integer", float: "a number", bool: "true or false",
            str: "a string"}.get(tp, getattr(tp, "__name__", str(tp)))


def value_problem(key: str, value: Any, algos: list[str] | None = None) -> str | None:
    """None if ``value`` (as Hydra parsed it) fits the schema field ``key`` names, for one of
    ``algos``; else a one-line message naming the key, the value and what would fit. Checked
    before Hydra, whose own message for a value of the wrong type spans five lines."""
    if isinstance(value, str) and "${" in value:
        return None  # an interpolation: resolved later, and checked then
    specs = algorithm_specs()
    algos = [a for a in (algos or specs) if a in specs] or list(specs)
    parts = key.split(".")
    if len(parts) == 1 and parts[0] in _TOP:
        schemas = [RunConfig]  # seed, device, torch_threads
    else:
        schemas = group_schemas(parts[0], algos)
        if len(parts) < 2 or not schemas:
            return None
    for part in parts[1:-1]:
        nested = []
        for schema in schemas:
            tp = _field_types(schema).get(part)
            if dataclasses.is_dataclass(tp):
                nested.append(tp)
            elif tp is not None:
                return None  # a free-form mapping, or not a key (key_problem says so)
        schemas = nested
    leaf = parts[-1]
    types_seen = []
    for schema in schemas:
        tp = _field_types(schema).get(leaf)
        if tp is None or _is_free_form(tp) and typing.get_origin(tp) is not list:
            continue
        types_seen.append(tp)
        node = OmegaConf.structured(schema)
        try:
            node[leaf] = value
            return None
        except OmegaConfBaseException:
            continue
    if not types_seen:
        return None
    shown = value if not isinstance(value, str) else repr(value)
    return f"{key}={shown} is not valid: {key} takes {_describe(types_seen[0])}"


def _unknown(name: str, prefix: str, valid: list[str]) -> str:
    full = f"{prefix}.{name}" if prefix else name
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    if not close:  # algo.lr for SAC: actor_lr, critic_lr, alpha_lr
        close = [v for v in valid if v.startswith(f"{name}_") or v.endswith(f"_{name}")][:3]
    where = f"{prefix} has" if prefix else "top-level keys are"
    dot = f"{prefix}." if prefix else ""
    names = [f"{dot}{c}" for c in close]
    options = " or ".join(filter(None, (", ".join(names[:-1]), names[-1]))) if names else ""
    hint = f"; did you mean {options}?" if names else ""
    return f"unknown key {full}{hint} ({where}: {', '.join(valid)})"


def check_known_keys(cfg: DictConfig) -> None:
    """Refuse, by name, any key of a composed run config that no schema knows."""
    algo = OmegaConf.select(cfg, "algo.name", default=None)
    algos = [algo] if algo in algorithm_specs() else None

    def walk(node: Any, prefix: str) -> None:
        for key in node.keys() if isinstance(node, DictConfig) else []:
            if not prefix and key == "hydra":
                continue
            full = f"{prefix}.{key}" if prefix else str(key)
            problem = key_problem(full, algos)
            if problem is not None:
                raise ConfigError(problem)
            child = node._get_node(key)
            if isinstance(child, DictConfig) and not _is_free_form_key(full, algos):
                walk(child, full)

    walk(cfg, "")


def _is_free_form_key(key: str, algos: list[str] | None) -> bool:
    head, _, rest = key.partition(".")
    if not rest:
        return False
    for schema in group_schemas(head, algos or list(algorithm_specs())):
        tp = _field_types(schema).get(rest.split(".")[0])
        if tp is not None and _is_free_form(tp):
            return True
    return False


def free_form_prefixes() -> list[str]:
    """Dotted keys under which any key may be added (``env.kwargs.``): Hydra would refuse
    ``env.kwargs.g=9.81`` without a ``+``, so the CLI adds one there."""
    out = []
    for group in ("algo", "trainer", "env", "buffer", "logger"):
        for schema in group_schemas(group, list(algorithm_specs())):
            for name, tp in _field_types(schema).items():
                origin = typing.get_origin(tp)
                if origin is dict or tp is dict:
                    out.append(f"{group}.{name}.")
    return sorted(set(out))


register_resolvers()
