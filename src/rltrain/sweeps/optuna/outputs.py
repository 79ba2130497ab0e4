"""What a sweep leaves in its directory once the study holds its trials, and the lines that
name it: ``trials.csv`` (every trial, whichever sweep ran it), the best trial's settings as a
tuned file (``conf/tuned/<algo>_<env>.yaml``) and as an experiment to train with at once
(``conf/experiment/tuned_<algo>_<env>.yaml``), both carrying the budget the settings are to be
trained with rather than the search's short one, and Optuna's plots as PNG files.

Imports :mod:`.space` and :mod:`.shared` of this package and ``rltrain.rundir.stored_data``; Optuna
and matplotlib (the ``tune`` extra) only inside functions (see the package's text)."""

from __future__ import annotations

import csv
import datetime
import logging
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from omegaconf import OmegaConf

from rltrain.rundir.stored_data import read_yaml
from rltrain.sweeps.optuna.shared import interrupted
from rltrain.sweeps.optuna.space import encode

if TYPE_CHECKING:
    import optuna

log = logging.getLogger(__name__)


def finish(study: optuna.Study, sweep_dir: Path, storage_url: str, algo: str, env: str,
           objective: str, budget_of: Callable[[optuna.trial.FrozenTrial], Budget]) -> int:
    """The sweep's end: the study's tally, ``trials.csv``, the best trial, its tuned files
    (with the budget ``budget_of`` finds for it) and the plots, each named in a line; the
    sweep's exit code (1: no trial completed, so there is no best one)."""
    from optuna.trial import TrialState  # the tune extra: see the package's text

    trials = study.get_trials(deepcopy=False)
    counts = {s: sum(t.state == s and not interrupted(t) for t in trials) for s in
              (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)}
    n_interrupted = sum(map(interrupted, trials))
    others = [f"{sum(t.state == s for t in trials)} {s.name.lower()}"
              for s in (TrialState.RUNNING, TrialState.WAITING)
              if any(t.state == s for t in trials)]
    write_trials_csv(sweep_dir / "trials.csv", trials)
    print(f"rltrain: study {study.study_name!r}: {len(trials)} trials: "
          f"{counts[TrialState.COMPLETE]} complete, {counts[TrialState.PRUNED]} pruned, "
          f"{counts[TrialState.FAIL]} failed"
          + (f", {n_interrupted} interrupted (not counted)" if n_interrupted else "")
          + "".join(f", {o}" for o in others)
          + f"; trials.csv in {sweep_dir}", flush=True)
    if not counts[TrialState.COMPLETE]:
        print("rltrain: error: no trial completed, so there is no best one", file=sys.stderr)
        return 1
    best = study.best_trial
    params = " ".join(f"{k}={encode(v)}" for k, v in best.params.items())
    print(f"rltrain: best trial {best.number}: {objective} {best.value:.6g} "
          f"({best.user_attrs.get('run_dir', '')}): {params}", flush=True)
    try:
        budget = budget_of(best)
        tuned, experiment = write_tuned(sweep_dir, best, algo, env, study.study_name, budget)
        print(f"rltrain: tuned file: {tuned} (copy it to rltrain's conf/tuned/); "
              f"to train with it now: rltrain --config-dir {sweep_dir / 'conf'} "
              f"experiment={experiment.stem}", flush=True)
        print(f"rltrain: {budget.said()}", file=sys.stdout if budget.source else sys.stderr,
              flush=True)
    except (OSError, ValueError) as e:
        log.warning(f"the tuned file could not be written: {e}")
    for name in write_plots(study, sweep_dir):
        print(f"rltrain: plot: {sweep_dir / name}", flush=True)
    if storage_url.startswith("sqlite"):
        print(f"rltrain: browse the study with: optuna-dashboard {storage_url}", flush=True)
    return 0


def write_trials_csv(path: Path, trials: list[optuna.trial.FrozenTrial]) -> None:
    keys = sorted({k for t in trials for k in t.params})
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["number", "state", "value", "duration_s", *keys, "run_dir", "error"])
        for t in trials:
            duration = t.duration.total_seconds() if t.duration is not None else ""
            value = t.value if t.value is not None else (
                t.intermediate_values[max(t.intermediate_values)]
                if t.intermediate_values else "")
            w.writerow([t.number, t.state.name.lower(), value, duration,
                        *[encode(t.params[k]) if k in t.params else "" for k in keys],
                        t.user_attrs.get("run_dir", ""), t.user_attrs.get("error", "")])


#: the trainer keys that set a run's budget (how long it trains, how it is tested, when it
#: stops): a search shortens them for its trials (an hparams_search file's max_epochs,
#: experiment=smoke, trainer.max_epochs=2 on the command line), which says nothing of the
#: budget to train the tuned settings with
BUDGET = ("max_epochs", "epoch_num_steps", "stop_score", "test_step_num_episodes")


@dataclass(frozen=True)
class Budget:
    """The budget the tuned files carry (:data:`BUDGET`'s keys), and where it comes from."""

    #: trainer key -> value
    values: dict[str, Any]
    #: where the values come from ("the budget rltrain algo=ppo env=cartpole trains with
    #: (tuned/ppo_cartpole.yaml)"); empty when only the trials' own could be had
    source: str
    #: the trials' values of the keys that differ from ``values``
    trials: dict[str, Any]
    #: why the trials' own budget is kept
    failed: str = ""

    def keys(self, values: dict[str, Any]) -> str:
        return " ".join(f"trainer.{k}={encode(v)}" for k, v in values.items())

    def said(self) -> str:
        """The line that says which budget the tuned files carry."""
        if not self.source:
            return (f"warning: the tuned files keep the best trial's budget "
                    f"({self.keys(self.values)}): {self.failed}; set those keys on the "
                    "command line for the budget to train with")
        than = f", not the trials' ({self.keys(self.trials)})" if self.trials else ""
        return (f"the tuned files carry {self.source}: {self.keys(self.values)}{than}; set "
                "those keys on the command line for another")

    def comment(self) -> str:
        """The tuned files' line on their budget (a YAML comment)."""
        if not self.source:
            return f"# budget: the best trial's ({self.failed})\n"
        than = f"; the trials trained {self.keys(self.trials)}" if self.trials else ""
        return f"# budget: {self.source}{than}\n"


def tuned_budget(best: optuna.trial.FrozenTrial, algo: str, env: str, hydra_context: Any,
                 config: Any) -> Budget:
    """The budget the tuned settings are to be trained with: :data:`BUDGET`'s keys as
    ``rltrain algo=A env=E`` composes them for the best trial's algorithm and env (the
    shipped tuned file's, else the defaults), but for a key the search itself searched.
    ``hydra_context`` and ``config`` are the sweep's (its config loader, its primary
    config's name)."""
    run_dir = Path(best.user_attrs.get("run_dir", ""))
    trial = read_yaml(run_dir / ".hydra" / "config.yaml")
    tried = (trial.get("trainer") or {}) if isinstance(trial, dict) else {}
    choices = trial_choices(run_dir / ".hydra" / "hydra.yaml")
    picks = [f"algo={choices.get('algo', algo)}", f"env={choices.get('env', env)}"]
    keys = [k for k in BUDGET if f"trainer.{k}" not in best.params]
    try:
        from hydra.types import RunMode

        cfg = hydra_context.config_loader.load_configuration(
            config_name=str(config.hydra.job.config_name), overrides=picks,
            run_mode=RunMode.RUN)
        base = OmegaConf.to_container(cfg.trainer, resolve=True)
        assert isinstance(base, dict)  # a config group's node
        tuned = OmegaConf.select(cfg, "hydra.runtime.choices.tuned", default=None)
        # an optional default names its choice whether or not the file is there
        if tuned not in hydra_context.config_loader.get_group_options("tuned"):
            tuned = None
    except Exception as e:  # noqa: BLE001 - a config that composed for the trials
        return Budget({k: tried[k] for k in keys if k in tried}, "", {},
                      f"{' '.join(picks)} did not compose ({type(e).__name__}: "
                      f"{str(e).splitlines()[0] if str(e) else ''})")
    source = (f"the budget rltrain {' '.join(picks)} trains with ("
              + (f"tuned/{tuned}.yaml)" if tuned else "no tuned file: the defaults)"))
    values = {k: base[k] for k in keys if k in base}
    return Budget(values, source, {k: tried[k] for k in values
                                   if k in tried and tried[k] != values[k]})


class _Dumper(yaml.SafeDumper):
    """YAML as the tuned files hold it: mappings as blocks, lists in one line ([64, 64])."""


_Dumper.add_representer(list, lambda d, v: d.represent_sequence(
    "tag:yaml.org,2002:seq", v, flow_style=True))


def write_tuned(sweep_dir: Path, best: optuna.trial.FrozenTrial, algo: str, env: str,
                study: str, budget: Budget | None = None) -> tuple[Path, Path]:
    """The best trial's settings (its composed algo, trainer and buffer, and any env key the
    search set) as a tuned file and as an experiment file; with ``budget``, its trainer keys
    in place of the trial's (a trial trains a search's short budget)."""
    config = Path(best.user_attrs.get("run_dir", "")) / ".hydra" / "config.yaml"
    # bounded (rltrain.rundir.stored_data); its StoredDataError is a ValueError
    cfg = read_yaml(config)
    if not isinstance(cfg, dict):
        raise ValueError(f"{config} holds no config")
    body: dict[str, Any] = {k: cfg[k] for k in ("algo", "trainer", "buffer") if k in cfg}
    if budget is not None and isinstance(body.get("trainer"), dict):
        body["trainer"] = {**body["trainer"], **budget.values}
    env_keys = {k.split(".", 1)[1]: v for k, v in best.params.items() if k.startswith("env.")}
    if env_keys:
        body["env"] = {}
        for dotted in env_keys:
            node, src = body["env"], cfg["env"]
            *parents, leaf = dotted.split(".")
            for p in parents:
                node, src = node.setdefault(p, {}), src[p]
            node[leaf] = src[leaf]
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    params = ", ".join(f"{k}={encode(v)}" for k, v in best.params.items())
    text = yaml.dump(body, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
    # the experiment file also picks the trial's algorithm and env (the groups' options, from
    # its .hydra/hydra.yaml) and, for env=gym, the env itself: on its own it trains what the
    # trial trained; the tuned file is picked by the algorithm and env, so it holds no choice
    choices = trial_choices(config.parent / "hydra.yaml")
    algo_choice, env_choice = choices.get("algo", algo), choices.get("env", env)
    experiment: dict[str, Any] = {"defaults": [{"override /algo": algo_choice},
                                               {"override /env": env_choice}]}
    if env_choice == "gym":
        experiment["env"] = {k: cfg["env"][k] for k in ("id", "kwargs", "imports", "wrappers",
                                                         "max_episode_steps")
                             if k in cfg.get("env", {})}
    head = yaml.dump(experiment, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
    said = budget.comment() if budget is not None else ""
    out = []
    for sub, name, extra in (("tuned", f"{algo}_{env}", ""),
                             ("experiment", f"tuned_{algo}_{env}", head)):
        path = sweep_dir / "conf" / sub / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# @package _global_\n# {algo} on {env}: the best trial ({best.number}, "
                        f"score {best.value:.6g}) of the Optuna study {study!r}, {stamp}\n"
                        f"# searched: {params}\n{said}{extra}{text}", encoding="utf-8")
        out.append(path)
    return out[0], out[1]


def trial_choices(path: Path) -> dict[str, str]:
    """The config groups' options a trial was composed with (``hydra.runtime.choices``)."""
    try:
        node = OmegaConf.create(read_yaml(path))
        choices = OmegaConf.select(node, "hydra.runtime.choices", default=None)
    except Exception:  # noqa: BLE001 - a trial without Hydra's record: the config's names
        return {}
    if choices is None:
        return {}
    return {str(k): str(v) for k, v in OmegaConf.to_container(choices).items()  # type: ignore[union-attr]
            if v is not None}


def write_plots(study: optuna.Study, sweep_dir: Path) -> list[str]:
    """Optuna's optimisation history and parameter importances as PNG files (needs
    matplotlib; importances need two complete trials)."""
    try:  # the tune extra; 0.8 s with Optuna's plots, paid at the end of a sweep only
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.figure import Figure
        from optuna.visualization import matplotlib as ov
    except ImportError:
        log.warning("no plots: matplotlib is not installed (pip install -e \".[tune]\")")
        return []
    written = []
    for name, plot in (("optimization_history.png", ov.plot_optimization_history),
                       ("param_importances.png", ov.plot_param_importances)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Optuna marks its matplotlib plots experimental
                ax = plot(study)
            fig = ax.figure
            assert isinstance(fig, Figure)  # each of Optuna's plots makes a figure of its own
            fig.set_size_inches(8, 5)
            fig.tight_layout()
            fig.savefig(sweep_dir / name, dpi=100)
            plt.close(fig)
            written.append(name)
        except Exception as e:  # noqa: BLE001 - e.g. importances of a one-trial study
            log.warning(f"{name} not drawn: {type(e).__name__}: {str(e).splitlines()[0]}")
    return written
