"""Entry point: ``rltrain [--multirun] [--cfg job] [group=option ...] [key=value ...]``.

Hydra composes ``conf/``; :func:`rltrain.run.run` does the rest. Errors in the
user's input end with a short message on stderr and a non-zero exit, without a
traceback unless HYDRA_FULL_ERROR=1.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import NoReturn

STARTED = time.perf_counter()

USAGE = """\
rltrain: train a deep RL agent from composed YAML configs (Hydra).

usage: rltrain [--multirun] [--cfg job] [GROUP=OPTION ...] [KEY=VALUE ...]

examples:
  rltrain algo=ppo env=cartpole                  train with the tuned config, stop when solved
  rltrain algo=dqn env=cartpole seed=3 trainer.max_epochs=20
  rltrain algo=ppo env=gym env.id=Acrobot-v1     any registered gymnasium env
  rltrain experiment=smoke                       a run of seconds (what CI runs)
  rltrain --multirun algo=ppo seed=0,1,2         one run directory per job under multirun/
  rltrain --multirun hydra/launcher=joblib seed=0,1,2   jobs in parallel processes
  rltrain --cfg job algo=dqn                     print the composed config and exit

config groups (GROUP=OPTION):
{groups}
  tuned/ALGO_ENV is applied automatically when it exists.

keys (KEY=VALUE): any key that `rltrain --cfg job` prints, e.g. seed=1, device=cpu,
  trainer.max_epochs=20, algo.lr=3e-4, env.num_train_envs=16, env.kwargs.KEY=VALUE.

Each run writes outputs/<algo>-<env>/<date_time>/ (epochs.jsonl, summary.json, tb/,
checkpoints/, best/, final/); move it with hydra.run.dir=PATH. Hydra's own options:
rltrain --hydra-help.
"""

#: groups a user selects; trainer follows the algorithm, tuned follows algo and env
USER_GROUPS = ("algo", "env", "buffer", "logger", "experiment")


def conf_dir() -> Path:
    """The config tree: inside the installed package, or at the top of a source checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "conf", here.parents[1] / "conf"):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise FileNotFoundError(f"rltrain's conf/ directory was not found next to {here}")


def help_text() -> str:
    root = conf_dir()
    lines = []
    for group in USER_GROUPS:
        options = sorted(p.stem for p in (root / group).glob("*.yaml"))
        lines.append(f"  {group + ':':<12}{', '.join(options)}")
    return USAGE.format(groups="\n".join(lines))


def _remove_if_empty_run(run_dir: Path) -> None:
    """After an error before training, drop the directory Hydra made (it holds only Hydra's
    snapshot and the log), so failed attempts leave no clutter."""
    if run_dir.is_dir() and {p.name for p in run_dir.iterdir()} <= {".hydra", "rltrain.log"}:
        shutil.rmtree(run_dir, ignore_errors=True)
        parent = run_dir.parent  # outputs/<algo>-<env>/, if this was its only run
        if parent.parent.name == "outputs" and not any(parent.iterdir()):
            parent.rmdir()


def _fail(message: str, code: int = 2) -> NoReturn:
    print(f"rltrain: error: {message}", file=sys.stderr)
    sys.exit(code)


def _finish(info, run_dir: Path) -> None:  # noqa: ANN001 - InfoStats
    """Exit codes after training: 0 done, 130 SIGINT, 143 SIGTERM."""
    if not info.interrupted:
        return
    print(f"rltrain: interrupted at epoch {info.epochs} (env step {info.env_step:,}); "
          f"checkpoint and summary written.\nresume with: rltrain resume={run_dir}",
          file=sys.stderr)
    sys.exit(128 + int(info.interrupt_signal or signal.SIGINT))


def task(cfg) -> float | None:  # noqa: ANN001 - a DictConfig from Hydra
    from hydra.core.hydra_config import HydraConfig

    from rltrain.config import ConfigError
    from rltrain.run import run

    global _SINGLE_RUN
    hydra_cfg = HydraConfig.get()
    _SINGLE_RUN = hydra_cfg.mode is None or hydra_cfg.mode.name == "RUN"
    run_dir = Path(hydra_cfg.runtime.output_dir)
    try:
        info = run(cfg, run_dir, started=STARTED)
    except ConfigError as e:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        _remove_if_empty_run(run_dir)
        _fail(str(e))
    except KeyboardInterrupt:
        _fail("stopped at once; checkpoints/last.pt is the last complete checkpoint", 130)
    _finish(info, run_dir)
    # the metric a Hydra sweeper optimises
    return info.best_score


#: set by task(): a single run (not a --multirun sweep) may end with _exit_now()
_SINGLE_RUN = False


def _exit_now() -> NoReturn:
    """End a finished run without the interpreter's teardown, which costs about 0.2 s once
    torch is loaded (a tenth of a short run). Everything the run writes is closed by then;
    only the log handlers and the standard streams are left to flush. Not used for sweeps,
    whose launchers may clean up at exit."""
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


#: the only override a resume accepts: extending the run
RESUME_OVERRIDABLE = "trainer.max_epochs"


def resume(args: list[str]) -> None:
    """``rltrain resume=RUN_DIR [trainer.max_epochs=N]``: continue a run in its directory,
    with the config stored in its checkpoint."""
    import logging

    from rltrain.checkpoint import CheckpointError, load_latest
    from rltrain.config import ConfigError, register_configs, typed_run_config
    from rltrain.run import run

    run_dir, max_epochs = None, None
    for arg in args:
        key, _, value = arg.partition("=")
        if key == "resume":
            run_dir = Path(value).expanduser()
        elif key == RESUME_OVERRIDABLE:
            try:
                max_epochs = int(value)
            except ValueError:
                _fail(f"{RESUME_OVERRIDABLE}={value!r} is not an integer")
        else:
            _fail(f"{arg!r} cannot change on resume: a resumed run keeps the config stored in "
                  f"its checkpoint (only {RESUME_OVERRIDABLE}=N may extend it); start a new "
                  "run to change anything else")
    assert run_dir is not None
    if not run_dir.is_dir():
        _fail(f"resume={run_dir}: no such run directory")
    try:
        ckpt, used, problems = load_latest(run_dir / "checkpoints")
    except CheckpointError as e:
        _fail(f"resume={run_dir}: {e}")
    for problem in problems:
        print(f"rltrain: warning: {problem}", file=sys.stderr)
    if used.name != "last.pt":
        print(f"rltrain: warning: resuming from the older checkpoint {used}", file=sys.stderr)
    from omegaconf import OmegaConf

    register_configs()
    cfg = OmegaConf.create(ckpt["config"])
    if max_epochs is not None:
        cfg.trainer.max_epochs = max_epochs
    logging.basicConfig(level=logging.INFO, format="%(message)s", handlers=[
        logging.StreamHandler(sys.stdout), logging.FileHandler(run_dir / "rltrain.log")])
    try:
        info = run(typed_run_config(cfg), run_dir, started=STARTED, resume=ckpt)
    except ConfigError as e:
        _fail(str(e))
    except KeyboardInterrupt:
        _fail("stopped at once; checkpoints/last.pt is the last complete checkpoint", 130)
    _finish(info, run_dir)
    _exit_now()


def main() -> None:
    args = sys.argv[1:]
    if any(arg in ("-h", "--help") for arg in args):
        print(help_text())
        return
    if any(arg.startswith("resume=") for arg in args):
        resume(args)
        return
    import hydra

    from rltrain.config import register_configs

    register_configs()
    hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")(task)()
    if _SINGLE_RUN:
        _exit_now()


if __name__ == "__main__":
    main()
