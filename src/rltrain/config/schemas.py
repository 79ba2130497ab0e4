"""Config schemas: one dataclass per config group option, registered in Hydra's ConfigStore.

Each YAML file under ``conf/`` extends its schema through its defaults list
(``- /schema/algo/ppo@_here_``), so Hydra refuses a misspelt key or a wrong type
at composition, naming the key. Each schema checks its own fields and their combinations in
its ``check()`` method, raising :class:`ConfigError` naming the fields; checks that involve the
env or built objects run in the build (``rltrain.assembly.build``).

This module is the ground floor: it imports no other rltrain module. What depends on which
algorithms, trainer kinds and loggers exist (their schemas in Hydra's ConfigStore, the key
checks) is ``rltrain.assembly.registered_schemas``'s.

Values that follow from the env (network input/output sizes, action bounds,
reward threshold) are never written here: the composition root computes them.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING, OmegaConf


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
    #: (train, test, eval, video): a dotted class name, or ``{name: ..., kwargs: {...}}``.
    #: An entry ``{name: ..., train_only: true}`` wraps the training envs alone, in its place
    #: in the order: what shapes learning but must not touch the returns tests and eval
    #: report (Atari's episodic life and reward sign clipping); it may not change the spaces
    wrappers: list[Any] = field(default_factory=list)
    #: the test score that counts as solved (the trainer's stop_score=auto stops there);
    #: null: the env's registered reward_threshold. Set for envs that register none.
    reward_threshold: float | None = None
    #: truncate episodes after this many steps (null: the env's registered limit; an env
    #: with none gets rltrain.common.types.DEFAULT_MAX_EPISODE_STEPS, so that no episode runs
    #: forever)
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

    def check_minibatch(self, batch_size: int | None) -> None:
        """Checks against an on-policy run's minibatch size (``trainer.batch_size``; None: the
        whole rollout), e.g. a minibatch too small for one of the algorithm's sequences."""


#: the activations a network may use (rltrain.nets.actors_critics maps each name to its function)
ACTIVATION_NAMES = ("tanh", "relu")


@dataclass
class NetworkConfig(AlgoConfig):
    """The fields every algorithm with networks shares: an observation encoder in front of each
    network, then MLP layers. Each algorithm's schema sets its own defaults."""

    #: hidden layer sizes of each network (actor, critics, value)
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])
    #: tanh or relu
    activation: str = "relu"
    #: the observation encoder of every network: auto (chosen from the observation space:
    #: flat for a Box) or a registered encoder's name (rltrain.nets.encoders)
    encoder: str = "auto"
    #: compile the update's losses and the acting step with torch.compile (on CUDA with CUDA
    #: graphs); the algorithms that have a compiled path say so in the registry (ppo, sac,
    #: td3, ddpg)
    compile: bool = False

    def check(self) -> None:
        if any(h <= 0 for h in self.hidden_sizes):
            raise ConfigError(f"algo.hidden_sizes must be positive, got {list(self.hidden_sizes)}")
        if self.activation not in ACTIVATION_NAMES:
            raise ConfigError(f"algo.activation must be {' or '.join(ACTIVATION_NAMES)}, got "
                              f"{self.activation!r}")


@dataclass
class DiscountedConfig(NetworkConfig):
    """An algorithm that learns values of discounted returns (every one but behaviour cloning);
    the reward scaler of ``env.normalize.reward`` uses the same discount."""

    gamma: float = 0.99

    def check(self) -> None:
        super().check()
        check_unit_interval(self, "algo", "gamma")


@dataclass
class TDConfig(DiscountedConfig):
    """An algorithm that learns from replayed transitions by temporal differences; its batches
    carry n-step returns (rltrain.data.transforms.nstep)."""

    #: n-step returns (1 = one-step TD)
    n_step: int = 1

    def check(self) -> None:
        super().check()
        check_positive(self, "algo", "n_step")


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
    #: cut a test episode at this many steps (of the policy, as the collector counts them),
    #: counted as it stands and said in the epoch's record (test/n_cut) and line; null: no
    #: cap but the env's own time limit (env.max_episode_steps)
    test_step_max_episode_steps: int | None = None
    #: stop when the test score reaches this; "auto" = the env's reward threshold; null = never
    stop_score: Any = "auto"
    #: write checkpoints/last.pt every this many epochs (and always on interruption)
    checkpoint_every: int = 1
    #: numbered checkpoints kept besides last.pt (the newest ones)
    keep_checkpoints: int = 3
    #: include the replay buffer in checkpoints (off-policy), for an exact resume
    checkpoint_buffer: bool = True

    def check(self) -> None:
        """Range and cross-field checks; raises ConfigError naming the fields."""
        check_positive(self, "trainer", "max_epochs", "epoch_num_steps", "batch_size",
                       "test_step_num_episodes", "checkpoint_every",
                       "test_step_max_episode_steps")
        if self.keep_checkpoints < 0:
            raise ConfigError(f"trainer.keep_checkpoints must be >= 0, got "
                              f"{self.keep_checkpoints}")
        stop = self.stop_score
        if not (stop is None or stop == "auto" or isinstance(stop, (int, float))):
            raise ConfigError(f"trainer.stop_score must be a number, auto or null, got {stop!r}")


@dataclass
class OnlineTrainerParams(TrainerParams):
    #: transitions per collection step (exactly one of this and the episodes count is set)
    collection_step_num_env_steps: int | None = 2048
    #: episodes per collection step
    collection_step_num_episodes: int | None = None
    #: test as soon as the training episodes of a collection step reach stop_score
    test_in_training: bool = False

    def check(self) -> None:
        super().check()
        n_steps, n_eps = self.collection_step_num_env_steps, self.collection_step_num_episodes
        if (n_steps is None) == (n_eps is None):
            raise ConfigError(
                "set exactly one of trainer.collection_step_num_env_steps and "
                f"trainer.collection_step_num_episodes (got {n_steps} and {n_eps}); "
                "set the other to null"
            )
        check_positive(self, "trainer", "collection_step_num_env_steps",
                       "collection_step_num_episodes")


@dataclass
class OnPolicyTrainerParams(OnlineTrainerParams):
    name: str = "onpolicy"
    #: passes over the collected data per update step
    update_step_num_repetitions: int = 10

    def check(self) -> None:
        super().check()
        check_positive(self, "trainer", "update_step_num_repetitions")


@dataclass
class OffPolicyTrainerParams(OnlineTrainerParams):
    name: str = "offpolicy"
    collection_step_num_env_steps: int | None = 16
    #: gradient steps per collected transition (round(u * n) per update step)
    update_step_num_gradient_steps_per_sample: float = 1.0
    #: env steps with uniformly random actions before the first epoch
    random_warmup_env_steps: int = 1000

    def check(self) -> None:
        super().check()
        if self.update_step_num_gradient_steps_per_sample < 0:
            raise ConfigError("trainer.update_step_num_gradient_steps_per_sample must be >= 0")
        if self.random_warmup_env_steps < 0:
            raise ConfigError("trainer.random_warmup_env_steps must be >= 0")
        if self.batch_size is None:
            raise ConfigError("trainer.batch_size must be a number for off-policy training")


@dataclass
class OfflineTrainerParams(TrainerParams):
    name: str = "offline"
    epoch_num_steps: int = 1000


# --------------------------------------------------------------------------- buffer, logger
@dataclass
class ReplayBufferConfig:
    #: capacity in transitions, split evenly into one lane per train env
    size: int = 100_000
    #: frame-stacked image observations (env.wrappers' FrameStackObservation) stored one frame
    #: per transition, the stack rebuilt by index: null (auto) when the env stacks frames,
    #: 1 to store every observation whole
    frame_stack: int | None = None
    #: which stored transitions a batch holds: uniform, prioritized (proportional
    #: prioritised replay, Schaul et al. 2016: ``buffer=prioritized``), or episodes (an
    #: episode uniformly, then a transition within it)
    sampler: str = "uniform"
    #: prioritized: how strongly priorities skew the draws (0: uniform)
    priority_alpha: float = 0.6
    #: prioritized: the importance-sampling exponent at the start, raised linearly to 1
    priority_beta: float = 0.4
    #: prioritized: added to each |TD error|, so no transition has zero probability
    priority_eps: float = 1e-6
    #: keep the one-step transitions again on the algorithm's device, where batches are then
    #: gathered: null (auto) for an offline run on a CUDA device when the batches are
    #: one-step (n_step 1), the observations are stored whole (frame_stack 1) and the copy
    #: takes at most half the device's free memory; true: for any run that can have one (on
    #: a CPU a second copy, for checks); false: never
    on_device: bool | None = None


@dataclass
class LoggerConfig:
    """The ``logger`` group: the console's fields. Each registered logger (TensorBoard, W&B,
    MLflow: ``rltrain.loggers``) adds its own section, ``logger.<key>``, to the group's
    schema (``rltrain.loggers.logger_schema()``)."""

    #: show a live progress bar during each epoch (only on a terminal)
    progress_bar: bool = True
    #: when stdout is not a terminal (Slurm logs, ``| tee``), print a progress line within a
    #: long epoch at most this often (seconds)
    progress_interval_s: float = 30.0
    #: print nothing but warnings and errors (``rltrain -q``)
    quiet: bool = False


# --------------------------------------------------------------------------- tuning
#: what a tuning trial's score is, from its test scores (rltrain.assembly.optuna_trial.objective)
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
    #: the floating-point type of the networks and their maths: float32, or float64 for
    #: checks of exactness (e.g. that a batched sweep's seeds equal the seeds run alone)
    precision: str = "float32"
    #: set by the Optuna sweeper (``hydra/sweeper=optuna``) for its trials
    tune: TuneConfig = field(default_factory=TuneConfig)
    #: what an offline algorithm (trainer=offline: bc, td3bc, cql, iql) learns from: an .h5,
    #: .hdf5 or .npz file written by rltrain-collect, or minari:ID (a local Minari dataset)
    dataset: str | None = None
    #: consent to code the run's files would run (rltrain.rundir.trust): a Minari dataset whose
    #: env must be built from its recorded spec. Never taken from a stored config: a resume
    #: gives it with --trust
    trust: bool = False


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


def store_schemas(nodes: Mapping[str, Any]) -> None:
    """Register the resolvers and store each schema in Hydra's ConfigStore under its path
    (``rltrain_schema``, ``schema/algo/ppo`` ...): the typed dataclasses for a run
    (rltrain.assembly.registered_schemas), their plain values for tab completion
    (rltrain.commands.completion)."""
    from hydra.core.config_store import ConfigStore

    register_resolvers()
    cs = ConfigStore.instance()
    for path, node in nodes.items():
        group, _, name = path.rpartition("/")
        cs.store(group=group or None, name=name, node=node)


# --------------------------------------------------------------------------- checks
#: the largest seed a run accepts: numpy's legacy seeding takes 32-bit seeds, and the envs,
#: eval and test seeds are derived by adding offsets, so 31 bits leave room for them
MAX_SEED = 2**31 - 1


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
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_finite(value, f"{prefix}.{f.name}")  # env.normalize.epsilon=inf, ...
            continue
        found = _nonfinite(value, f"{prefix}.{f.name}")
        if found is not None:
            key, v = found
            hint = " (null means none)" if f.name == "stop_score" else ""
            raise ConfigError(f"{key} must be a finite number, got {v}{hint}")


def _nonfinite(value: Any, key: str) -> tuple[str, float] | None:
    """The first NaN or infinite number inside ``value`` (lists and mappings walked: the
    free-form ``env.kwargs`` and wrapper arguments too) and its key, or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (key, value)
    if isinstance(value, Mapping):
        items: Iterable[tuple[str, Any]] = ((f"{key}.{k}", v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        items = ((f"{key}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for inner_key, inner in items:
        found = _nonfinite(inner, inner_key)
        if found is not None:
            return found
    return None


def check_seed(seed: Any, key: str = "seed") -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"{key} must be an integer from 0 to {MAX_SEED:,}, got {seed!r}")
    return seed


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


register_resolvers()


def overrides_as_typed(node: Any) -> list[str]:
    """Hydra's record of a job's overrides (``hydra.overrides.task``) as the user typed them:
    read without resolving, so that ``seed='${seed}'`` is listed, not evaluated."""
    items = OmegaConf.to_container(node, resolve=False)
    return [str(o) for o in items] if isinstance(items, list) else []


def split_id(env_id: str) -> tuple[str | None, str]:
    """``"mypkg.envs:MyEnv-v0"`` -> ``("mypkg.envs", "MyEnv-v0")`` (gymnasium's module form)."""
    module, sep, name = env_id.rpartition(":")
    return (module, name) if sep and module else (None, env_id)


def wrapper_entry(entry: Any) -> tuple[Any, dict[str, Any]] | None:
    """An ``env.wrappers`` entry as (name, kwargs): ``"FlattenObservation"`` or a dotted
    name, ``{name: ..., kwargs: {...}}`` (with ``train_only: true`` for the training envs
    alone, see :func:`train_only`) or Hydra's ``{_target_: ..., key: value}``; None for any
    other shape. Plain data in, nothing imported."""
    if isinstance(entry, str):
        return entry, {}
    if isinstance(entry, Mapping) and "_target_" in entry:
        return entry["_target_"], {k: v for k, v in entry.items() if k != "_target_"}
    if isinstance(entry, Mapping) and "name" in entry and set(entry) <= {"name", "kwargs",
                                                                        "train_only"}:
        kwargs = entry.get("kwargs") or {}
        return (entry["name"], dict(kwargs)) if isinstance(kwargs, Mapping) else None
    return None


def train_only(entry: Any) -> bool | None:
    """Whether an ``env.wrappers`` entry wraps the training envs alone (``{name: ...,
    train_only: true}``); None when its ``train_only`` is not a bool."""
    value = entry.get("train_only", False) if isinstance(entry, Mapping) and (
        "_target_" not in entry) else False
    return value if isinstance(value, bool) else None


#: characters that make a YAML flow-style scalar need quotes
_YAML_SPECIAL = re.compile(r"[,:{}\[\]#&*!|>'\"%@`]")


def flow_text(value: Any) -> str:
    """A config value (an ``env.wrappers`` entry, say) as a user writes it in YAML's flow
    style, on one line: ``{name: FrameStackObservation, kwargs: {stack_size: 4}}``, where
    Python's repr would print ``{'name': ..., 'kwargs': {...}}`` and ``False``."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{flow_text(k)}: {flow_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(flow_text(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    text = str(value)
    if isinstance(value, str) and (not text or text != text.strip() or _YAML_SPECIAL.search(text)
                                   or text.lower() in ("true", "false", "null", "yes", "no")):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text
