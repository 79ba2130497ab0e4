"""Entry point: ``rltrain [--multirun] [--cfg job] [group=option ...] [key=value ...]``.

Hydra composes ``conf/``; :func:`rltrain.run.run` does the rest. Errors in the
user's input end with a short message on stderr and a non-zero exit, without a
traceback unless HYDRA_FULL_ERROR=1.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

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


def task(cfg) -> float | None:  # noqa: ANN001 - a DictConfig from Hydra
    from hydra.core.hydra_config import HydraConfig

    from rltrain.config import ConfigError
    from rltrain.run import run

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        info = run(cfg, run_dir, started=STARTED)
    except ConfigError as e:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        _remove_if_empty_run(run_dir)
        print(f"rltrain: error: {e}", file=sys.stderr)
        sys.exit(2)
    if info.interrupted:
        print(f"rltrain: interrupted; partial results in {run_dir}", file=sys.stderr)
        sys.exit(130)
    # the metric a Hydra sweeper optimises
    return info.best_score


def main() -> None:
    if any(arg in ("-h", "--help") for arg in sys.argv[1:]):
        print(help_text())
        return
    import hydra

    from rltrain.config import register_configs

    register_configs()
    hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")(task)()


if __name__ == "__main__":
    main()
