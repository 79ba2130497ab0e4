"""The build: checked settings -> envs, algorithm, storage, collectors, trainer, loggers.

Every check that needs a built object (the env's spaces against the algorithm, the memory a
buffer needs, a dataset against the env) runs here, before the first file of the run is
written, so that a refused run leaves nothing behind. The trainer kind (``rltrain.trainers``)
says what differs between on-policy, off-policy and offline training: which envs to make,
what is feasible, how its storage is made; nothing here asks which kind it has.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rltrain.algorithms import (
    ALGORITHMS,
    CONTINUOUS,
    DISCRETE,
    Algorithm,
    AlgoSpec,
    OffPolicyAlgorithm,
)
from rltrain.algorithms import get as algorithm_spec
from rltrain.assembly.checked_config import Settings
from rltrain.assembly.footprint import check_footprint
from rltrain.common.types import SpaceInfo
from rltrain.config.schemas import ConfigError, DiscountedConfig, flow_text, wrapper_entry
from rltrain.data.collector import Collector
from rltrain.data.reading import reach
from rltrain.data.storage import ReplayBuffer
from rltrain.envs.vector import (
    env_seeds,
    make_vector_env,
    max_episode_steps,
    registered_threshold_caveats,
    space_info,
)
from rltrain.loggers import ConsoleLogger, JsonlLogger, Logger, LoggerContext, build_loggers
from rltrain.nets.normalize import ObsNormalizer, RewardScaler
from rltrain.process.system import available_memory, size_text
from rltrain.spaces.actions import ScaleActions, ShiftActions
from rltrain.spaces.masking import is_masked, mask_space_problem
from rltrain.spaces.observations import describe as describe_obs
from rltrain.spaces.observations import layout, raw_tensors, storage_dtype
from rltrain.trainers import TRAINERS, Callbacks, Storage, StorageRequest, Trainer

log = logging.getLogger("rltrain")


@dataclass(frozen=True)
class Parts:
    """The objects a run is made of, built before any file is written."""

    info: SpaceInfo
    algorithm: Algorithm
    storage: Storage
    #: None when the trainer collects nothing (offline)
    train_collector: Collector | None
    test_collector: Collector
    train_seed: int
    test_seed: int

    def close(self) -> None:
        if self.train_collector is not None:
            self.train_collector.envs.close()
        self.test_collector.envs.close()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def check_actions(spec: AlgoSpec, info: SpaceInfo) -> None:
    """Refuse an action space the algorithm cannot act in, naming what would work."""
    kind = info.action_kind
    if kind not in spec.actions:
        # what would work here: the same kind of training (online or offline), this action space
        def from_data(algo: AlgoSpec) -> bool:
            return not any(TRAINERS[t].collects for t in algo.trainers)

        fits = sorted(name for name, other in ALGORITHMS.items() if kind in other.actions
                      and from_data(other) == from_data(spec))
        space = (f"discrete actions (Discrete({info.num_actions}))" if kind == DISCRETE else
                 f"multidiscrete actions ({info.actions_text})" if kind != CONTINUOUS else
                 f"continuous actions (Box, shape {info.action_shape})")
        raise ConfigError(f"algo={spec.name} needs {' or '.join(spec.actions)} actions, but "
                          f"{info.env_id} has {space}; use algo={' or algo='.join(fits)}")
    problem = mask_space_problem(info.obs_space, info.num_actions)
    if problem is not None:
        raise ConfigError(f"{info.env_id}: {problem}")
    if is_masked(info.obs_space) and not spec.masks:
        able = sorted(name for name, other in ALGORITHMS.items() if other.masks)
        raise ConfigError(f"{info.env_id}'s observations carry an action mask, which "
                          f"algo={spec.name} would ignore; use algo={' or algo='.join(able)}")
    if spec.bounded_actions and not info.discrete:
        assert info.action_low is not None and info.action_high is not None
        bounded = np.isfinite(info.action_low) & np.isfinite(info.action_high)
        if not bounded.all():
            raise ConfigError(
                f"algo={spec.name} squashes its actions into the env's bounds, but {info.env_id}'s "
                f"action space is unbounded in dimensions {np.flatnonzero(~bounded).tolist()}; "
                "give the env finite bounds (e.g. env.wrappers=[{name: RescaleAction, kwargs: "
                "{min_action: -1, max_action: 1}}] on a bounded copy of the space) or use "
                "algo=ppo, which passes unbounded dimensions through unscaled")


def frame_stack(s: Settings, info: SpaceInfo) -> int:
    """How many frames each stored observation is rebuilt from (``buffer.frame_stack``; auto:
    the stack size of a FrameStackObservation in env.wrappers, when the observations are
    uint8 images stacked on their first axis), 1 for whole observations."""
    stacked = 1
    for entry in s.env.wrappers:
        parsed = wrapper_entry(entry)
        if parsed is not None and str(parsed[0]).rpartition(".")[2] == "FrameStackObservation":
            stacked = int(parsed[1].get("stack_size", 1))
    wanted = s.buffer.frame_stack
    image = (storage_dtype(info.obs_space) == np.uint8 and layout(info.obs_space) is None
             and len(info.obs_shape) >= 3)
    if wanted is None:
        return stacked if image and stacked > 1 and info.obs_shape[0] == stacked else 1
    if wanted != 1 and not (image and info.obs_shape[0] == wanted):
        raise ConfigError(f"buffer.frame_stack={wanted} needs uint8 image observations stacked "
                          f"{wanted} frames deep on their first axis; {info.env_id}'s are "
                          f"{info.obs_shape}: use buffer.frame_stack=null (auto) or 1")
    return wanted


def build_algorithm(s: Settings, info: SpaceInfo) -> Algorithm:
    """The registered algorithm for ``s.algo``, with the normalisers ``env.normalize`` asks
    for attached."""
    spec = algorithm_spec(s.algo.name)
    check_actions(spec, info)
    algorithm = spec.build(s.algo, info, s.device, s.seed)
    norm = s.env.normalize
    if norm.obs and raw_tensors(info.obs_space):
        what = "a Dict" if layout(info.obs_space) is not None else "an image"
        raise ConfigError(f"env.normalize.obs=true cannot work on {info.env_id}'s observations "
                          f"({what}: the encoder scales them by the space's bounds); set "
                          "env.normalize.obs=false")
    obs_norm = ObsNormalizer(info.obs_dim, norm.clip_obs, norm.epsilon) if norm.obs else None
    scaler = None
    if norm.reward:
        assert isinstance(s.algo, DiscountedConfig)  # the settings' check
        scaler = RewardScaler(s.env.num_train_envs, s.algo.gamma, norm.clip_reward,
                              norm.epsilon)
    algorithm.set_normalizers(obs_norm, scaler)
    return algorithm


def build_parts(s: Settings) -> Parts:
    """Seed, then build envs, algorithm, storage and collectors (envs reset, seeded)."""
    torch.set_num_threads(s.torch_threads)
    torch.set_default_dtype(s.precision)  # the networks, buffers of statistics and maths
    seed_everything(s.seed)
    kind = TRAINERS[s.trainer.name]
    train_seed, test_seed = env_seeds(s.seed, s.env.num_train_envs)
    limit, source = max_episode_steps(s.env)
    if source.startswith("rltrain"):
        log.warning(f"env {s.env.id} registers no time limit: its episodes are cut at "
                    f"{limit:,} steps ({source}); set env.max_episode_steps to choose")
    # a test env without a quota of episodes would only idle
    num_test_envs = min(s.env.num_test_envs, s.trainer.test_step_num_episodes)
    train_envs = (make_vector_env(s.env, s.env.num_train_envs, train=True) if kind.collects
                  else None)
    try:
        test_envs = make_vector_env(s.env, num_test_envs)
    except BaseException:
        if train_envs is not None:
            train_envs.close()
        raise
    try:
        info = space_info(test_envs if train_envs is None else train_envs, s.env.id, limit,
                          s.env.reward_threshold)
        _warn_of_threshold(s, info)
        check_actions(algorithm_spec(s.algo.name), info)
        kind.check(s.trainer, s.algo, s.env.num_train_envs, s.buffer.size)
        request = StorageRequest(info, s.env.num_train_envs, s.buffer.size, s.dataset, s.trust,
                                 frame_stack(s, info),
                                 algorithm_spec(s.algo.name).stored_fields(s.algo, info))
        # everything the run will hold, sized before any of it is allocated
        check_footprint(s, info, request)
        algorithm = build_algorithm(s, info)
        kind.check_algorithm(s.trainer, algorithm, request)
        storage = kind.storage(s.trainer, request)
    except BaseException:
        if train_envs is not None:
            train_envs.close()
        test_envs.close()
        raise
    if isinstance(algorithm, OffPolicyAlgorithm):
        replay_on_device(s.buffer.on_device, algorithm, storage.buffer, online=kind.collects)
    if algorithm.obs_norm is not None and storage.observations is not None:
        algorithm.obs_norm.observe(storage.observations)  # an offline run's fixed statistics
    if not info.discrete:  # the algorithm acts in [-1, 1]; the envs scale to their bounds
        test_envs = ScaleActions(test_envs)
        train_envs = None if train_envs is None else ScaleActions(train_envs)
    elif info.action_start is not None:  # the algorithm's indices start at 0, the env's not
        test_envs = ShiftActions(test_envs)
        train_envs = None if train_envs is None else ShiftActions(train_envs)
    train_collector = None
    if train_envs is not None:
        # the observers of training collection: the normalisers' statistics, updated here only
        obs_norm, scaler = algorithm.obs_norm, algorithm.reward_scaler
        train_collector = Collector(train_envs, storage.buffer,
                                    on_obs=None if obs_norm is None else obs_norm.observe,
                                    on_step=None if scaler is None else scaler.observe)
        train_collector.reset(seed=train_seed)
    test_collector = Collector(test_envs)
    test_collector.reset(seed=test_seed)
    return Parts(info, algorithm, storage, train_collector, test_collector, train_seed,
                 test_seed)


def replay_on_device(wanted: bool | None, algorithm: OffPolicyAlgorithm,
                     buffer: ReplayBuffer, *, online: bool) -> None:
    """``buffer.on_device``: give the replay buffer its copy on the algorithm's device (see
    :class:`rltrain.data.device_copy.DeviceMirror`), or say why it cannot have one. Auto
    (None) gives one to an offline run on CUDA: its dataset is copied once, and each batch
    then costs one copy of indices instead of five of data. An online run writes every
    step it collects, one copy per field, about as many copies as its batches save at one
    gradient step per env step: it asks with ``true`` (unmeasured on a GPU so far; see
    ``docs/performance.md``)."""
    device = algorithm.device
    if wanted is False or (wanted is None and (device.type != "cuda" or online)):
        return
    why = None
    if buffer.frame_stack > 1:
        why = (f"the buffer stores {buffer.frame_stack}-frame stacks frame by frame, and the "
               "copy holds whole observations (buffer.frame_stack=1 stores them whole)")
    elif reach(algorithm.transforms()) > 1:
        why = (f"{algorithm.cfg.name} builds n-step batches (algo.n_step="
               f"{getattr(algorithm.cfg, 'n_step', '?')}) from the host arrays; the copy "
               "holds one-step transitions")
    else:
        need = buffer.mirror_bytes()
        free = (torch.cuda.mem_get_info(device)[0] if device.type == "cuda"
                else available_memory())
        if free is not None and need > free // 2:
            why = (f"it needs {size_text(need)}, more than half the {size_text(free)} free "
                   f"on {device}")
    if why is None:
        buffer.mirror_on(device)
        log.info(f"replay buffer: a copy on {device} ({size_text(buffer.mirror_bytes())}); "
                 "batches are gathered there")
    elif wanted:
        raise ConfigError(f"buffer.on_device=true: no copy of the replay buffer on {device}: "
                          f"{why}; set buffer.on_device=null (auto) or false")
    else:
        log.info(f"replay buffer: kept on the host only ({why})")


def _warn_of_threshold(s: Settings, info: SpaceInfo) -> None:
    """The env's registered reward threshold, where this run's settings change its meaning."""
    if s.env.reward_threshold is None and info.reward_threshold is not None:
        caveats = registered_threshold_caveats(s.env)
        if caveats:
            log.warning(
                f"the reward threshold {info.reward_threshold:g} is {s.env.id}'s registered "
                f"one, for its own rewards and time limit, but {'; '.join(caveats)}: "
                "'solved' and trainer.stop_score=auto may be out of reach or trivial; set "
                "env.reward_threshold (or trainer.stop_score) for this setting")


def build_trainer(s: Settings, parts: Parts, *, loggers: list[Logger] | None = None,
                  callbacks: Callbacks | None = None) -> Trainer:
    """The trainer the algorithm runs with, on the built parts."""
    return TRAINERS[s.trainer.name](
        parts.algorithm, s.trainer, parts.storage.buffer, parts.test_collector,
        train_collector=parts.train_collector, reward_threshold=parts.info.reward_threshold,
        loggers=loggers or [], callbacks=callbacks or Callbacks(), seed=s.seed,
        test_seed=parts.test_seed,
        **({"replay": s.buffer} if TRAINERS[s.trainer.name].keeps_replay_buffer else {}))


def run_loggers(s: Settings, run_dir: Path, *, config: dict[str, Any],
                summary: dict[str, Any], resumed_at: dict[str, Any] | None,
                started: float | None = None, run_id: str | None = None) -> list[Logger]:
    """The console, ``epochs.jsonl`` + ``summary.json`` (with ``summary``'s facts), and the
    registered loggers ``logger.*`` switches on. ``resumed_at``: the trainer state a resumed
    run starts from (its later records are dropped, its step is where curves go on);
    ``started``: when the command began (``time.perf_counter``), for the console's summary;
    ``run_id``: the run's identity's id, which every epoch record carries."""
    step_key = TRAINERS[s.trainer.name].step_key
    done = None
    if resumed_at is not None:
        done = resumed_at["epoch"] - (resumed_at["partial"] is not None)
    console = ConsoleLogger(s.trainer.max_epochs, s.logger.progress_bar, run_dir,
                            quiet=s.logger.quiet,
                            progress_interval_s=s.logger.progress_interval_s,
                            stats=algorithm_spec(s.algo.name).console, started=started)
    context = LoggerContext(run_dir=run_dir, config=config,
                            name=f"{s.algo.name}-{s.env.name}-seed{s.seed}",
                            resume_step=None if resumed_at is None else resumed_at[step_key],
                            step_key=step_key)
    return [console, JsonlLogger(run_dir, keep_epochs=done, extra_summary=summary,
                                 run_id=run_id),
            *build_loggers(s.logger, context)]


#: below this many parameters, an on-policy run on vector observations is faster on a CPU
SMALL_FOR_A_GPU = 100_000


def gpu_advice(device: torch.device, trainer: str, raw_obs: bool, n_params: int) -> str | None:
    """A warning for a run a GPU is likely to slow down (None: no advice): an on-policy one
    on vector observations with small networks, whose steps are too small to pay for the
    launches and the copies to and from the device at every env step."""
    if device.type != "cuda" or trainer != "onpolicy" or raw_obs or n_params >= SMALL_FOR_A_GPU:
        return None
    return (f"device={device}: an on-policy run with an MLP of {n_params:,} parameters is "
            f"usually faster on the CPU (PPO on HalfCheetah-v5, 64x64, one env: 808 env "
            f"steps/s on an H200 against 1,818 on its CPU); device=cpu, unless this run's "
            f"envs or batches are large")


def log_build(s: Settings, parts: Parts, trainer: Trainer, run_dir: Path) -> None:
    """What was built, in rltrain.log and on the console."""
    info, dataset = parts.info, parts.storage.dataset
    actions = info.actions_text
    mode = "next-step" if (parts.train_collector or parts.test_collector).next_step_mode \
        else "same-step"
    train = f"{s.env.num_train_envs} train / " if parts.train_collector is not None else ""
    threshold = ("no reward threshold" if info.reward_threshold is None
                 else f"reward threshold {info.reward_threshold}")
    log.info(f"env {s.env.id}: {train}{parts.test_collector.num_envs} "
             f"test envs ({mode} autoreset), obs {describe_obs(info.obs_space, info.obs_shape)}, "
             f"actions {actions}, {threshold}, episodes of at most "
             f"{info.max_episode_steps:,} steps")
    if dataset is not None:
        mean = dataset["return_mean"]
        log.info(f"dataset {dataset['spec']}: {dataset['transitions']:,} transitions, "
                 f"{dataset['episodes']:,} episodes"
                 + ("" if mean is None else f" (mean return {mean:.1f})")
                 + f", sha256 {dataset['sha256'][:12]}")
    if s.env.wrappers:
        log.info(f"env wrappers: {', '.join(flow_text(w) for w in s.env.wrappers)}")
    algorithm = parts.algorithm
    compiled = getattr(s.algo, "compile", False)
    n_params = sum(p.numel() for p in algorithm.parameters())
    log.info(f"algorithm {type(algorithm).__name__}: {n_params:,} parameters on "
             f"{s.device}, seed {s.seed}"
             + (", its update's losses compiled by torch.compile as they are first called "
                "(tens of seconds on a CPU)" if compiled else ""))
    advice = gpu_advice(s.device, trainer.name, raw_tensors(info.obs_space), n_params)
    if advice is not None:
        log.warning(advice)
    unit = "gradient steps" if trainer.step_key == "gradient_step" else "env steps"
    stop = ("no stop score (every epoch runs)" if trainer.stop_score is None
            else f"stop score {trainer.stop_score:g}")
    n, note = s.trainer.max_epochs, trainer.epoch_steps_note()
    cap = s.trainer.test_step_max_episode_steps
    tests = (f"; test steps of {s.trainer.test_step_num_episodes} episodes, each cut at "
             f"{cap:,} steps (trainer.test_step_max_episode_steps)" if cap is not None else "")
    log.info(f"trainer {type(trainer).__name__}: up to {n} epoch{'' if n == 1 else 's'} of "
             f"{trainer.epoch_steps():,} {unit}{f' ({note})' if note else ''}, {stop}{tests}")
    log.info(f"run directory {run_dir}")
