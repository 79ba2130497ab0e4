"""The run config as typed settings, checked: every rule that needs no built object.

:func:`settings` turns a composed config into :class:`Settings` (dataclasses, one per group)
and refuses, by name, whatever cannot be right on its own or with the other fields: unknown
keys, non-finite numbers, ranges, an unknown device, a trainer that does not fit the
algorithm, a dataset for an online algorithm. Checks that need the env or a built object
(the action space, memory, the dataset's size) are the build's (:mod:`rltrain.assembly.build`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

import torch
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from rltrain.algorithms import ALGORITHMS
from rltrain.assembly.registered_schemas import check_known_keys, trainer_problem, typed_run_config
from rltrain.config.schemas import (
    OBJECTIVES,
    AlgoConfig,
    ConfigError,
    DiscountedConfig,
    EnvConfig,
    LoggerConfig,
    NetworkConfig,
    ReplayBufferConfig,
    TrainerParams,
    TuneConfig,
    check_env,
    check_finite,
    check_positive,
    check_seed,
)
from rltrain.data.samplers import SAMPLERS, check_sampler
from rltrain.loggers import check_loggers
from rltrain.nets.encoders.registry import check_name as check_encoder_name
from rltrain.rundir import stored_data, trust
from rltrain.trainers import TRAINERS

#: ``precision=``: the floating-point types a run's networks may use
PRECISIONS = {"float32": torch.float32, "float64": torch.float64}

T = TypeVar("T")


@dataclass(frozen=True)
class Settings:
    """The run config as typed objects, checked."""

    algo: AlgoConfig
    env: EnvConfig
    trainer: TrainerParams
    buffer: ReplayBufferConfig
    logger: LoggerConfig
    seed: int
    device: torch.device
    torch_threads: int
    precision: torch.dtype = torch.float32
    tune: TuneConfig = field(default_factory=TuneConfig)
    #: an offline run's dataset (``dataset=PATH`` or ``minari:ID``)
    dataset: str | None = None
    #: ``trust=true``: the user consents to code the run's files would run (rltrain.rundir.trust)
    trust: bool = False

    @property
    def learns_offline(self) -> bool:
        """Whether its trainer learns from a dataset rather than from its own collection."""
        return not TRAINERS[self.trainer.name].collects


def _group(cfg: DictConfig, key: str, schema: type[T]) -> T:
    """The config group ``key`` as its schema's dataclass."""
    try:
        obj = OmegaConf.to_object(cfg[key])
    except MissingMandatoryValue as e:
        missing = e.full_key if "env.id" not in str(e) else "env.id"
        hint = " (e.g. env=gym env.id=Acrobot-v1)" if missing == "env.id" else ""
        raise ConfigError(f"{missing} must be set{hint}") from None
    except OmegaConfBaseException as e:
        raise ConfigError(str(e).splitlines()[0]) from None
    if not isinstance(obj, schema):
        raise ConfigError(f"{key} must be a group of {key} keys, got {obj!r}")
    check_finite(obj, key)
    return obj


def settings(cfg: DictConfig) -> Settings:
    """The checked settings of a composed run config; raises ConfigError naming the field."""
    check_resolves(cfg)
    # the pairing first: another trainer's params would otherwise show up as keys unknown to
    # the algorithm's trainer (a forged trainer.name, whose params are another kind's, is
    # check_pairing's to name)
    kind = TRAINERS.get(str(OmegaConf.select(cfg, "trainer.name", default="")))
    trainer_keys = set(cfg.trainer.keys()) if isinstance(cfg.get("trainer"), DictConfig) else set()
    if kind is not None and trainer_keys == {f.name for f in fields(kind.params_type)}:
        problem = trainer_problem(str(OmegaConf.select(cfg, "algo.name", default="")), kind.name)
        if problem is not None:
            raise ConfigError(problem)
    check_known_keys(cfg)
    algo, env = _group(cfg, "algo", AlgoConfig), _group(cfg, "env", EnvConfig)
    trainer, buffer = _group(cfg, "trainer", TrainerParams), _group(cfg, "buffer",
                                                                    ReplayBufferConfig)
    logger = _group(cfg, "logger", LoggerConfig)
    algo.check()
    check_env(env)
    trainer.check()
    if not buffer.size > 0:
        raise ConfigError(f"buffer.size must be > 0, got {buffer.size}")
    if buffer.frame_stack is not None and not 1 <= buffer.frame_stack <= 255:
        raise ConfigError(f"buffer.frame_stack must be null (auto) or 1..255, got "
                          f"{buffer.frame_stack}")
    check_sampler(buffer)
    if logger.progress_interval_s < 0:
        raise ConfigError("logger.progress_interval_s must be >= 0")
    check_loggers(logger)
    if cfg.torch_threads <= 0:
        raise ConfigError(f"torch_threads must be > 0, got {cfg.torch_threads}")
    precision = PRECISIONS.get(str(cfg.get("precision", "float32")))
    if precision is None:
        raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got "
                          f"{cfg.get('precision')!r}")
    tune = _group(cfg, "tune", TuneConfig) if "tune" in cfg else TuneConfig()
    if tune.objective not in OBJECTIVES:
        raise ConfigError(f"tune.objective must be one of {', '.join(OBJECTIVES)}, "
                          f"got {tune.objective!r}")
    check_positive(tune, "tune", "last_k")
    dataset = cfg.get("dataset")
    if dataset is not None and not str(dataset).strip():
        raise ConfigError("dataset= is empty; give a file written by rltrain-collect (.h5, "
                          ".hdf5, .npz) or minari:ID")
    s = Settings(algo, env, trainer, buffer, logger, seed=check_seed(cfg.seed),
                 device=torch_device(cfg.device), torch_threads=int(cfg.torch_threads),
                 precision=precision, tune=tune,
                 dataset=None if dataset is None else str(dataset),
                 trust=bool(cfg.get("trust", False)))
    check_pairing(s)
    return s


def check_sampler_pairing(s: Settings) -> None:
    """A sampler other than the default chooses among what an online off-policy run stored
    (an offline run draws its dataset uniformly, an on-policy run learns from all it
    collected); one that weighs its draws needs an algorithm that reports priorities."""
    spec = SAMPLERS[s.buffer.sampler]
    chosen = spec.selected_by or f"buffer.sampler={spec.name}"
    if spec.name != ReplayBufferConfig().sampler and s.trainer.name != "offpolicy":
        raise ConfigError(
            f"{chosen} replays what an online off-policy run collected, and "
            f"algo={s.algo.name} runs with trainer={s.trainer.name}: drop {chosen}")
    if spec.weighs and not ALGORITHMS[s.algo.name].prioritized:
        able = sorted(n for n, a in ALGORITHMS.items() if a.prioritized)
        raise ConfigError(
            f"{chosen}: algo={s.algo.name} does not weight its loss by importance or report "
            f"priorities; the algorithms that do: {', '.join(able)}")


def check_pairing(s: Settings) -> None:
    """The trainer must be one the algorithm runs with, a dataset is for offline learning
    only (and needed there), and the algorithm's fields that name registered parts must name
    ones that exist."""
    name = s.trainer.name
    if name not in TRAINERS or TRAINERS[name].params_type is not type(s.trainer):
        raise ConfigError(f"trainer.name={name!r} does not match the trainer's parameters; "
                          "choose a trainer with trainer=<name>, not trainer.name")
    problem = trainer_problem(s.algo.name, name)
    if problem is not None:
        raise ConfigError(problem)
    if s.learns_offline and s.dataset is None:
        raise ConfigError(
            f"algo={s.algo.name} learns offline, from a dataset: add dataset=PATH (a file "
            "written by rltrain-collect: .h5, .hdf5 or .npz) or dataset=minari:ID")
    if not s.learns_offline and s.dataset is not None:
        names = sorted(n for n, spec in ALGORITHMS.items()
                       if any(not TRAINERS[t].collects for t in spec.trainers))
        raise ConfigError(
            f"dataset= is for the offline algorithms ({', '.join(names)}); algo={s.algo.name} "
            "learns online from its env: drop dataset= or choose an offline algo")
    check_sampler_pairing(s)
    if s.env.normalize.reward:
        if s.learns_offline:
            raise ConfigError(
                "env.normalize.reward=true scales rewards as they are collected, and an "
                "offline run collects none: drop it (env.normalize.obs=true works: its "
                "statistics come from the dataset)")
        if not isinstance(s.algo, DiscountedConfig):
            raise ConfigError(f"env.normalize.reward=true scales rewards by the spread of the "
                              f"discounted return, and algo={s.algo.name} has no discount")
    if isinstance(s.algo, NetworkConfig):
        check_encoder_name(s.algo.encoder)
        if s.algo.compile and not ALGORITHMS[s.algo.name].compiles:
            able = sorted(n for n, spec in ALGORITHMS.items() if spec.compiles)
            raise ConfigError(f"algo.compile=true: algo={s.algo.name} has no compiled update; "
                              f"the algorithms that have one: {', '.join(able)}")


def torch_device(name: str) -> torch.device:
    """The torch device ``device=`` names, refused unless torch can use it here."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    valid = "use cpu, cuda, cuda:N, mps or auto"
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError):
        raise ConfigError(f"device={name!r} is not a torch device; {valid}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device={name} asked for, but torch sees no CUDA device "
                              f"(torch {torch.__version__}); use device=cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ConfigError(f"device={name}: torch sees {torch.cuda.device_count()} CUDA "
                              f"device(s), cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ConfigError("device=mps asked for, but torch sees no Apple GPU (MPS); use "
                              "device=cpu")
    elif dev.type != "cpu":
        raise ConfigError(f"device={name!r}: rltrain trains on real devices only; {valid}")
    return dev


def load_run_settings(run_dir: Path, device: str | None = None, *, consent: bool = False,
                      allow: str = "add --trust") -> Settings:
    """The checked settings of an existing run, from its ``.hydra/config.yaml``;
    ``device`` replaces the run's own (a run trained on cuda evaluates on cpu). A config
    that would run code not set up on this machine is refused unless ``consent``
    (:mod:`rltrain.rundir.trust`; ``allow`` says how to give it)."""
    path = run_dir / ".hydra" / "config.yaml"
    try:
        is_run = path.is_file()
        what = "is not a directory" if not run_dir.is_dir() else "has no .hydra/config.yaml"
    except OSError as e:  # a name too long for the file system, a directory not readable
        raise ConfigError(f"{run_dir} cannot be read: {e.strerror}; pass a run directory "
                          "written by rltrain") from None
    if not is_run:
        raise ConfigError(f"{run_dir} {what}; pass a run directory written by rltrain")
    try:
        # plain data within bounds (a YAML alias bomb, a set, a key that is not a string:
        # refused by name), read as OmegaConf.load reads; then made a config
        data = stored_data.read_yaml(path)
    except stored_data.StoredDataError as e:
        raise ConfigError(f"{e}; it is the run's config, so the run cannot be rebuilt from it"
                          if e.readable else str(e)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is damaged (not a mapping of config groups)")
    try:
        raw = OmegaConf.create(data)
    except OmegaConfBaseException as e:
        raise ConfigError(f"{path} is damaged ({str(e).strip().splitlines()[0]}); it is the "
                          "run's config, so the run cannot be rebuilt from it") from None
    trust.check(trust.env_surface(plain(raw.get("env"))), str(path), consent=consent,
                allow=allow)
    cfg = typed_run_config(raw)
    if device is not None:
        cfg.device = device
    return settings(cfg)


def plain(node: Any) -> Any:
    """A config node as plain data, interpolations resolved where they can be (what a
    checkpoint stores), else as written: the trust record compares the two."""
    if not isinstance(node, (DictConfig, ListConfig)):
        return node
    try:
        return OmegaConf.to_container(node, resolve=True)
    except Exception:  # noqa: BLE001 - an interpolation that does not resolve
        return OmegaConf.to_container(node, resolve=False)


def check_resolves(cfg: DictConfig) -> None:
    """Every interpolation of the composed config resolves (``seed='${seed}'`` refers to
    itself; ``${oc.env:NAME}`` needs NAME set): else one ConfigError naming the key."""
    try:
        OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        reason = str(getattr(e, "msg", None) or e).strip().splitlines()[0]
        where = f"{key}: " if key else ""
        raise ConfigError(f"{where}the value does not resolve ({reason}); give a plain value "
                          "or an interpolation that resolves") from None
