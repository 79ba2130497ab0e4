"""The one door into a run: every command that starts, continues or opens a run comes here.

- **Train** (:func:`train`): ``rltrain`` (a single run or a sweep's job), ``rltrain
  resume=DIR`` and a sweep job that continues itself all call it, a new run with its config
  and a resumed one with its :class:`~rltrain.assembly.lifecycle.ResumePoint`. It runs
  :func:`rltrain.assembly.run.run` (settings, then the parts, then a trainer with its lifecycle) and
  turns how the run ended into one :class:`Ended`: the exit code and the message the command
  prints, the same for every door.
- **Continue** (:func:`resuming`): the run directory locked, and its newest usable checkpoint
  read through the lifecycle's one reading path, for ``resume=`` and a continued sweep job.
- **Open** (:func:`open_run`): a run's algorithm rebuilt from its stored config with the
  chosen weights loaded, for ``rltrain-eval``, ``rltrain-export`` and ``rltrain-collect``;
  and (:func:`env_spaces`) what an env's config builds, for those that need only that.

Each command asks for the part it needs and keeps only what is its own: its arguments, what it
prints, and the files it writes. Nothing else assembles a run.

Layer: orchestration, above the build, the lifecycle and the settings; the commands import it
(inside their functions, after their arguments are parsed: it imports torch).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

from rltrain.assembly.lifecycle import ResumePoint, RunContext, resume_point
from rltrain.assembly.run import StoppedAtOnce, run
from rltrain.common.errors import UserError
from rltrain.common.stats import InfoStats
from rltrain.config.schemas import ConfigError
from rltrain.process.streams import clip_long_words, short
from rltrain.rundir import directory
from rltrain.rundir.checkpoint import CheckpointError
from rltrain.rundir.files import WEIGHT_FILES
from rltrain.trainers import failure_text

# --------------------------------------------------------------------------- train


@dataclasses.dataclass(frozen=True)
class Ended:
    """How a run that was asked to train ended, as every door reports it."""

    #: the process's exit status: 0 done, 1 failed, 2 refused, 128+N stopped by signal N
    code: int
    #: what the command prints on stderr after ``rltrain: `` (None: nothing to say)
    message: str | None = None
    #: the run's stats, when it trained
    info: InfoStats | None = None
    #: what refused or broke the run before it trained (a sweep records it in the job's
    #: status), None when it trained
    error: Exception | None = None


def train(cfg: DictConfig, ctx: RunContext, resume: ResumePoint | None = None, *,
          label: str = "", full_error: bool = False) -> Ended:
    """Train the run ``cfg`` describes into ``ctx.run_dir`` (with ``resume``: continue it
    from there) and say how it ended. ``label`` starts every message (a sweep's ``job 3: ``,
    a resume's ``resume=DIR: ``). ``full_error`` (``HYDRA_FULL_ERROR=1``) lets an error
    before training raise with its traceback instead of becoming one line.

    A signal while the run is built (:class:`rltrain.process.signals.EarlyStop`) is not caught: the
    command that installed the handlers says what it means for its run.
    """
    try:
        info = run(cfg, ctx, resume=resume)
    except (ConfigError, directory.RunDirError) as e:
        if full_error:
            raise
        return Ended(2, f"error: {label}{clip_long_words(str(e))}", error=e)
    except StoppedAtOnce as e:
        return Ended(*stopped_at_once(e, ctx))
    except Exception as e:  # noqa: BLE001 - anything else before training: one line, no trace
        if full_error:
            raise
        return Ended(1, f"error: {label}the run could not start: {failure_text(e)} "
                     "(HYDRA_FULL_ERROR=1 shows the traceback)", error=e)
    return Ended(*outcome(info, ctx, label), info=info)


def outcome(info: InfoStats, ctx: RunContext, label: str = "") -> tuple[int, str | None]:
    """The exit code and message for a run that trained, from its InfoStats."""
    if info.status == "failed" and ctx.lost:  # no directory left to point at: its own line
        return 1, f"error: {label}{info.error}"
    if info.status == "failed":
        where = f" in {info.failed_at}" if info.failed_at else ""
        tail = (f"; after fixing the cause, resume with: {directory.resume_command(ctx.run_dir)}"
                if ctx.checkpoint else "; the directory can be reused")
        return 1, (f"error: {label}the run failed{where}: {info.error}\n"
                   f"rltrain: {_where(ctx.checkpoint)}; summary.json and rltrain.log in "
                   f"{ctx.run_dir} say more{tail}")
    if info.status == "interrupted":
        return 128 + int(info.interrupt_signal or 2), (
            f"interrupted at epoch {info.epochs} (env step {info.env_step:,}); checkpoint and "
            f"summary written.\nresume with: {directory.resume_command(ctx.run_dir)}")
    return 0, None


def stopped_at_once(e: StoppedAtOnce, ctx: RunContext) -> tuple[int, str]:
    """The exit code and message for a run stopped by a second signal, mid-epoch."""
    resume = f"\nresume with: {directory.resume_command(ctx.run_dir)}" if e.checkpoint else ""
    return 128 + e.signum, (f"{e} received again: stopped at once; {_where(e.checkpoint)}"
                            f"{resume}")


def _where(checkpoint: dict[str, Any] | None) -> str:
    if not checkpoint:
        return "no checkpoint was written"
    return (f"the last good checkpoint is {checkpoint['path']} (epoch "
            f"{checkpoint['epochs_complete']} complete, env step {checkpoint['env_step']:,})")


# --------------------------------------------------------------------------- continue


@contextlib.contextmanager
def resuming(run_dir: Path, *, consent: bool, allow: str) -> Iterator[ResumePoint]:
    """The run directory locked for as long as the block runs, and the point to resume it
    from: its newest usable checkpoint, with the config stored there (``consent``: run the
    code that config names though nothing here set it up; ``allow``: how the user gives
    that consent, for the refusal's message).

    :raises rltrain.rundir.directory.RunDirError: another process holds the directory;
        CheckpointError: no usable checkpoint; ConfigError: a config that is not rltrain's,
        or code run without consent.
    """
    lock = directory.RunDirLock(run_dir)
    lock.acquire()
    try:
        yield resume_point(run_dir, consent=consent, allow=allow)
    finally:
        lock.release()


# --------------------------------------------------------------------------- open

@dataclasses.dataclass
class LoadedRun:
    """A run's algorithm, rebuilt from its config, with the chosen weights loaded."""

    run_dir: Path
    settings: Any  # rltrain.assembly.checked_config.Settings
    info: Any  # rltrain.common.types.SpaceInfo
    algorithm: Any  # rltrain.algorithms.Algorithm
    weights: str
    weights_path: Path
    #: raw observations -> the actions the env receives (``Algorithm.deployable()``), loaded
    policy: Any = None

    @property
    def recurrent(self) -> bool:
        """The policy has memory (rltrain.algorithms.base.RecurrentDeployedPolicy): it acts
        on each env's state too, which :meth:`acting` threads through the episodes."""
        from rltrain.algorithms.base import RecurrentDeployedPolicy

        return isinstance(self.policy, RecurrentDeployedPolicy)

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Actions for a batch of observations as a collector passes them (a Dict
        observation's packed rows are unpacked into one tensor per key). A policy with memory
        cannot act on observations alone: :meth:`acting` gives what a collector steps it with."""
        import torch

        from rltrain.algorithms.base import policy_inputs

        if self.recurrent:
            raise UserError(f"the {self.settings.algo.name} policy has memory: it acts on each "
                            "env's state as well as its observation, which this command does "
                            "not keep; rltrain-eval and rltrain-export run it")
        with torch.inference_mode():
            return self.policy(*policy_inputs(self.info, obs)).numpy()

    def acting(self) -> Any:
        """The policy as a collector steps envs with it (rltrain.common.types.Policy): :meth:`act`,
        or for a policy with memory a rltrain.nets.recurrent.RecurrentPolicy over its ``step`` (the
        collector keeps each env's state, zeros at each episode's start)."""
        if not self.recurrent:
            return self.act
        import torch

        from rltrain.algorithms.base import policy_inputs
        from rltrain.nets.recurrent import RecurrentPolicy

        policy, info = self.policy, self.info
        size, parts = policy.state_size, len(policy.state_names)

        def step(obs: np.ndarray, state: torch.Tensor) -> tuple[np.ndarray, torch.Tensor]:
            action, *after = policy.step(*policy_inputs(info, obs), *state.split(size, -1))
            return action.numpy(), torch.cat(after, -1)

        return RecurrentPolicy(step, size * parts)


def env_spaces(env_cfg: Any) -> tuple[Any, Any, Any]:
    """What the env ``env_cfg`` describes gives the networks (rltrain.common.types.SpaceInfo), and
    its single observation and action spaces, from one env made and closed."""
    from rltrain.envs.vector import make_vector_env, max_episode_steps, space_info

    envs = make_vector_env(env_cfg, 1)
    try:
        info = space_info(envs, env_cfg.id, max_episode_steps(env_cfg)[0],
                          env_cfg.reward_threshold)
        return info, envs.single_observation_space, envs.single_action_space
    finally:
        envs.close()


def newest_checkpoint(run_dir: Path) -> tuple[dict[str, Any], Path]:
    """The run's newest usable checkpoint, read as a resume reads it, and its file; refused
    when another run wrote it (a file copied into this directory).

    :raises UserError: naming the problem.
    """
    from rltrain.assembly.lifecycle import ForeignFile, file_identity, not_own, own_identity
    from rltrain.rundir.checkpoint import load_latest

    try:
        state, used, _ = load_latest(run_dir / "checkpoints")
    except CheckpointError as e:
        raise UserError(short(e, 240)) from None
    try:
        problem = not_own(used, file_identity(state), own_identity(run_dir))
    except ForeignFile as e:
        problem = str(e)
    if problem is not None:
        raise UserError(f"{problem}; use the directory of the run that wrote it")
    return state, used


def open_run(run_dir: Path, weights: str, device: str | None = None, *,
             consent: bool = False) -> LoadedRun:
    """Rebuild the run's algorithm from ``.hydra/config.yaml`` and load ``weights`` into it
    (on ``device``, default: cpu, whatever the run trained on). Code the config names that
    was not set up on this machine runs only with ``consent`` (``--trust``).

    :raises ConfigError, UserError: anything the user can fix (no such run, no such weights
        file, a damaged file).
    """
    import torch

    from rltrain.assembly.build import build_algorithm
    from rltrain.assembly.checked_config import load_run_settings

    s = load_run_settings(run_dir, device=device or "cpu", consent=consent)
    path = run_dir / WEIGHT_FILES[weights]
    if not path.is_file():
        have = [name for name, rel in WEIGHT_FILES.items() if (run_dir / rel).is_file()]
        hint = f"this run has --weights {', '.join(have)}" if have else "this run saved no weights"
        raise UserError(f"{path} does not exist (--weights {weights}); {hint}")
    torch.set_num_threads(s.torch_threads)
    info = env_spaces(s.env)[0]
    algorithm = build_algorithm(s, info)
    policy = algorithm.deployable()
    policy.load_state_dict(_policy_state(path, weights, algorithm, info, _own(run_dir)))
    algorithm.eval()
    return LoadedRun(run_dir, s, info, algorithm, weights, path, policy.eval())


def _own(run_dir: Path) -> dict[str, Any] | None:
    """The directory's own run (rltrain.assembly.lifecycle.own_identity); UserError if run.json is
    damaged."""
    from rltrain.assembly.lifecycle import ForeignFile, own_identity

    try:
        return own_identity(run_dir)
    except ForeignFile as e:
        raise UserError(str(e)) from None


def _policy_state(path: Path, weights: str, algorithm: Any, info: Any,
                  own: dict[str, Any] | None = None) -> dict[str, Any]:
    """The deployable policy's state_dict from a weights file, checked against the policy
    the run's config builds and against the run (``own``: its identity): a file another run
    wrote, copied into this directory, is refused naming both runs."""
    from rltrain.rundir.checkpoint import load_policy

    policy = algorithm.deployable()
    if weights == "last":
        _restore_last(path, algorithm, own)
        return policy.state_dict()
    try:
        obj = load_policy(path)
    except CheckpointError as e:
        raise UserError(short(e, 240)) from None
    _refuse_other(path, obj, own)
    state = obj["state_dict"]
    meta = obj.get("meta") or {}
    algo = algorithm.cfg.name
    saved = (meta.get("algo", algo), meta.get("env_id", info.env_id))
    if saved != (algo, info.env_id):
        raise UserError(f"{path} holds {saved[0]} weights for {saved[1]}, but the run's "
                        f"config builds {algo} for {info.env_id}")
    problem = _mismatch(policy.state_dict(), state)
    if problem:
        raise UserError(f"{path} does not fit the policy built from the run's config "
                        f"({problem})")
    return state


def _restore_last(path: Path, algorithm: Any, own: dict[str, Any] | None) -> None:
    """Load the algorithm's modules from ``checkpoints/last.pt``: the full training state,
    checked (format, version) and loaded weights_only, read as a resume reads it."""
    from rltrain.assembly.lifecycle import restore_algorithm
    from rltrain.rundir.checkpoint import load_checkpoint

    try:
        obj = load_checkpoint(path)
    except CheckpointError as e:
        raise UserError(short(e, 240)) from None
    _refuse_other(path, obj, own)
    try:
        modules = obj["algorithm"]["modules"]
    except (KeyError, TypeError):
        raise UserError(f"{path} is not an rltrain checkpoint (no algorithm modules)") from None
    problem = _mismatch(algorithm.state_dict(), modules)
    if problem:
        raise UserError(f"{path} does not fit the algorithm built from the run's config "
                        f"({problem})")
    restore_algorithm(algorithm, obj, training=False)


def _refuse_other(path: Path, obj: Any, own: dict[str, Any] | None) -> None:
    """A weights file another run wrote is refused, naming both runs."""
    from rltrain.assembly.lifecycle import file_identity, not_own

    problem = not_own(path, file_identity(obj), own)
    if problem is not None:
        raise UserError(f"{problem}; these are not this run's weights: move that file "
                        "out, or pass the directory of the run that wrote it")


def _mismatch(expected: dict[str, Any], state: dict[str, Any]) -> str:
    """What keeps ``state`` from loading into a module whose state_dict is ``expected``."""
    missing = sorted(expected.keys() - state.keys())
    unexpected = sorted(state.keys() - expected.keys())
    wrong = sorted(k for k in expected.keys() & state.keys()
                   if tuple(state[k].shape) != tuple(expected[k].shape))
    return "; ".join(f"{label} {', '.join(keys[:3])}{', ...' if len(keys) > 3 else ''}"
                     for label, keys in (("missing", missing), ("unexpected", unexpected),
                                         ("wrong shape", wrong)) if keys)
