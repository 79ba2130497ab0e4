"""Entry point: ``rltrain [--multirun] [--cfg job] [group=option ...] [key=value ...]``.

Hydra composes ``conf/``; :func:`task` is its job (one run, or one job of a sweep) and
:func:`rltrain.assembly.run.run` does the rest. ``rltrain resume=RUN_DIR`` goes to
:mod:`rltrain.commands.resume`; the pipe-safe streams and the fast exit are
:mod:`rltrain.process.streams`'s. Whatever the user got wrong ends in a short message on stderr and
a non-zero exit, without a traceback unless HYDRA_FULL_ERROR=1: exit 2 for input refused before
training, 1 for a run that failed while training, 128 + N for signal N.

Hydra, torch and the rest of rltrain are imported inside :func:`task` and :func:`_hydra`, not
at the top: ``rltrain --help`` and ``--version`` then answer in 0.03 s on this machine, where
importing torch alone takes 0.9 s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import rltrain
from rltrain.process import gc_pause, signals
from rltrain.process.streams import ConsoleHandler, clip_long_words, fast_exit, guard_streams

STARTED = time.perf_counter()

#: the width rltrain --help keeps to, whatever the terminal: it fits any
HELP_WIDTH = 80

USAGE = """\
rltrain: train a deep RL agent from composed YAML configs (Hydra).

usage: rltrain [--multirun] [--cfg job] [-q] [GROUP=OPTION ...] [KEY=VALUE ...]
       rltrain resume=RUN_DIR [trainer.max_epochs=N] [--trust]
       rltrain --version

examples:
{examples}

config groups (GROUP=OPTION):
{groups}
  tuned/ALGO_ENV is applied automatically when it exists.

keys (KEY=VALUE): any key that `rltrain --cfg job` prints, e.g. seed=1,
  device=cpu, trainer.max_epochs=20, algo.lr=3e-4, env.num_train_envs=16,
  env.kwargs.KEY=VALUE, env.imports=[mypkg.envs],
  env.wrappers=[gymnasium.wrappers.FlattenObservation], logger.quiet=true
  (or -q).

Each run writes outputs/<algo>-<env>/<date_time>/ (epochs.jsonl, summary.json,
tb/, checkpoints/, best/, final/); move it with hydra.run.dir=PATH. Hydra's own
options: rltrain --hydra-help.

companion commands (each has --help):
{companions}

shell completion of groups and keys: eval "$(rltrain -sc install=bash)"
  (bash; zsh: install=zsh)

A run from elsewhere (another machine or person) whose config names modules or
wrappers beyond gymnasium's is refused by resume=, rltrain-eval, -export and
-collect until you pass --trust; trust=true lets a run use a Minari dataset that
would build its env from the dataset's recorded spec.
"""

#: rltrain --help's examples: (command, what it does)
EXAMPLES = (
    ("rltrain algo=ppo env=cartpole", "train with the tuned config, stop when solved"),
    ("rltrain algo=dqn env=cartpole seed=3 trainer.max_epochs=20", ""),
    ("rltrain algo=ppo env=gym env.id=Acrobot-v1", "any registered gymnasium env"),
    ("rltrain algo=ppo env=gym env.id=Pendulum-v1 env.kwargs.g=9.81", ""),
    ("rltrain env=gym env.id=mypkg.envs:MyEnv-v0", "your own env (the module registers it)"),
    ("rltrain experiment=smoke", "a run of seconds (what CI runs)"),
    ("rltrain --multirun algo=ppo seed=0,1,2", "one run directory per job under multirun/"),
    ("rltrain --multirun hydra/launcher=joblib seed=0,1,2", "jobs in parallel processes"),
    ("rltrain --multirun hydra/launcher=batched seed=0,1,2",
     "seeds in one process, PPO's updates stacked over them"),
    ("rltrain --multirun hparams_search=ppo_cartpole hydra.sweeper.n_trials=20",
     "tune with Optuna (extra: tune)"),
    ("rltrain algo=bc env=cartpole dataset=data.h5",
     "learn offline from a dataset (make one with rltrain-collect; or dataset=minari:ID)"),
    ("rltrain --cfg job algo=dqn", "print the composed config and exit"),
)

#: rltrain --help's companion commands: (command and arguments, what it does)
COMPANIONS = (
    ("rltrain-eval RUN_DIR",
     "evaluate a trained policy on fresh envs (--video DIR records)"),
    ("rltrain-export RUN_DIR", "export the policy to ONNX, checked against torch (extra: "
                               "export)"),
    ("rltrain-collect --out FILE", "write an offline-RL dataset (a run's policy, a random one "
                                   "or a replay buffer) to learn from with dataset=FILE"),
    ("rltrain-report DIR [DIR ...]", "compare runs and sweeps: curves, scores with confidence "
                                     "intervals, report.md/html (extra: report)"),
)

#: groups a user selects; trainer follows the algorithm, tuned follows algo and env
USER_GROUPS = ("algo", "env", "buffer", "logger", "experiment", "hparams_search")


def conf_dir() -> Path:
    """The config tree: inside the installed package, or at the top of a source checkout."""
    here = Path(__file__).resolve().parents[1]  # rltrain/, this module being in commands/
    for candidate in (here / "conf", here.parents[1] / "conf"):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise FileNotFoundError(f"rltrain's conf/ directory was not found next to {here}")


def two_columns(rows: tuple[tuple[str, str], ...] | list[tuple[str, str]],
                column: int) -> list[str]:
    """Help lines of (left, right) pairs within :data:`HELP_WIDTH`: the right text starts at
    ``column`` and wraps under itself, at spaces; a left text that reaches the column puts
    the right one on the lines below it."""
    lines = []
    for left, right in rows:
        wrapped = textwrap.wrap(right, HELP_WIDTH - column, break_long_words=False,
                                break_on_hyphens=False)
        first = f"  {left}"
        if wrapped and len(first) < column:
            lines.append(first.ljust(column) + wrapped.pop(0))
        else:
            lines.append(first)
        lines += [" " * column + line for line in wrapped]
    return lines


def help_text() -> str:
    """``rltrain --help``, every line within :data:`HELP_WIDTH` columns: the lists of each
    group's options (read from conf/) wrap under themselves."""
    root = conf_dir()
    groups = [(f"{group}:", ", ".join(sorted(p.stem for p in (root / group).glob("*.yaml"))))
              for group in USER_GROUPS]
    return USAGE.format(examples="\n".join(two_columns(EXAMPLES, 49)),
                        groups="\n".join(two_columns(groups, 18)),
                        companions="\n".join(two_columns(COMPANIONS, 33)))


def version_text() -> str:
    # here, not at the top: importlib.metadata takes 20 ms, which every run would pay
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for package in ("hydra-core", "torch", "gymnasium"):
        with contextlib.suppress(PackageNotFoundError):
            parts.append(f"{package} {version(package)}")
    return f"rltrain {rltrain.__version__} ({', '.join(parts)})"


# --------------------------------------------------------------------------- outcomes
class _Done(BaseException):
    """Ends a single run with an exit code; a BaseException, so that it passes Hydra's job
    runner (which records any Exception as a failed job) on its way to main()."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _say(message: str) -> None:
    print(f"rltrain: {message}", file=sys.stderr, flush=True)


def _full_error() -> bool:
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


# --------------------------------------------------------------------------- the Hydra job
def task(cfg: Any) -> Any:
    """One Hydra job (a single run, or one job of a sweep); returns the metric a sweeper
    optimises: the best test score, or for an Optuna trial its objective and status. A job
    in a joblib or Ray worker prefixes its lines and ends with the sweep
    (:func:`rltrain.sweeps.workers.job_in_worker`)."""
    from hydra.core.hydra_config import HydraConfig

    from rltrain.sweeps.workers import job_in_worker

    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode is None or hydra_cfg.mode.name == "RUN":
        return _task(cfg)
    with job_in_worker(hydra_cfg.job.num):
        return _task(cfg)


def _task(cfg: Any) -> Any:
    from hydra.core.hydra_config import HydraConfig

    from rltrain.assembly.checked_config import plain
    from rltrain.assembly.lifecycle import RunContext
    from rltrain.assembly.orchestrator import Ended, train
    from rltrain.config.schemas import ConfigError, overrides_as_typed
    from rltrain.rundir import directory as rundir
    from rltrain.rundir import trust
    from rltrain.sweeps import attempts, batch_scheduler, status, stopping, workers
    from rltrain.sweeps.command import STATE

    hydra_cfg = HydraConfig.get()
    single = hydra_cfg.mode is None or hydra_cfg.mode.name == "RUN"
    run_dir = Path(hydra_cfg.runtime.output_dir)
    # as typed: an override such as seed='${seed}' must not be resolved just to be listed
    overrides = overrides_as_typed(hydra_cfg.overrides.task)
    label = "" if single else f"job {hydra_cfg.job.num}: "
    # a worker's or a batch member's lines start with the job already
    said = "" if workers.parallel_job() or batch_scheduler.current() is not None else label
    if not single:
        if signals.in_sweep_worker():
            signals.quiet()
        if stopping.stop_requested(Path(str(hydra_cfg.sweep.dir))):
            status.write_status(run_dir, "not started", "the sweep was stopped before this "
                                "job began")
            return None
    _set_console_level(cfg)

    # what an earlier attempt left, before this one logs anything: a warning while the run is
    # built opens rltrain.log, which is this attempt's own and must survive its acceptance
    stale = rundir.leftovers(run_dir)

    def accept() -> None:
        note = rundir.failed_attempt_note(run_dir, stale)
        if note is not None:
            _say(f"note: {note}")
        rundir.remove_leftovers(run_dir, stale)
        if "rltrain.log" in stale:
            rundir.reopen_logs(run_dir)
        rundir.write_hydra_snapshot(run_dir, cfg, HydraConfig.instance().cfg, overrides)

    shown = [o[2:] if o.startswith("++") else o for o in overrides]
    command = " ".join(["rltrain", *(sys.argv[1:] if single else shown)])
    # the command typed here is consent to the code its config names: recorded, so that
    # rltrain-eval, resume= and a requeued job trust this run's files (rltrain.rundir.trust)
    trust.record(trust.env_surface(plain(cfg.get("env"))), command)
    ctx = RunContext(run_dir, command=command, overrides=shown, on_accept=accept,
                     started=STARTED if single else time.perf_counter())
    # a sweep run again into its directory, or a job requeued after a timeout
    again = not single and bool(rundir.holds_run(run_dir))
    if again:
        done = attempts.earlier_attempt(run_dir, overrides, said)
        if done is not None:
            return done.get("best_score")
    try:
        if again:
            ended = attempts.continue_job(run_dir, ctx, said, consent=bool(cfg.get("trust")),
                                          full_error=_full_error())
        else:
            with rundir.claim(run_dir, remove_empty=not (single and STATE.run_dir_existed),
                              made=STATE.made if single else ()):
                ended = train(cfg, ctx, label=said, full_error=_full_error())
    except (ConfigError, rundir.RunDirError) as e:  # the directory is not this run's to use
        if _full_error():
            raise
        ended = Ended(2, f"error: {said}{clip_long_words(str(e))}", error=e)
    if not single:
        _record_failure(ended, run_dir, cfg, overrides)
    if ended.message is not None:
        _say(ended.message)
    signals.hand_over_preemption()  # a submitit job: requeued now, and resumed when it runs
    if single:
        if ended.code:
            raise _Done(ended.code)
        if not cfg.logger.get("quiet"):
            print(rundir.next_step(run_dir), flush=True)
        assert ended.info is not None  # it trained: every other end has a code
        return ended.info.best_score
    return _job_result(ended, ctx, label)


def _record_failure(ended: Any, run_dir: Path, cfg: Any, overrides: list[str]) -> None:
    """A sweep job that did not train says why in its directory (the sweep's list reads it):
    refused (the directory is another run's, or cannot be used), or failed before training
    (with the config snapshot a failed job's directory keeps)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from rltrain.config.schemas import ConfigError
    from rltrain.rundir import directory as rundir
    from rltrain.sweeps import status
    from rltrain.trainers import failure_text

    if isinstance(ended.error, rundir.RunDirError):
        status.refuse(run_dir, clip_long_words(str(ended.error)))
    elif isinstance(ended.error, ConfigError):
        status.write_status(run_dir, "failed", str(ended.error))
        if not (run_dir / ".hydra").exists():
            rundir.write_hydra_snapshot(run_dir, OmegaConf.create(cfg),
                                        HydraConfig.instance().cfg, overrides)
    elif ended.error is not None:
        status.write_status(run_dir, "failed", failure_text(ended.error))


def _job_result(ended: Any, ctx: Any, label: str) -> Any:
    """What a sweep job returns to Hydra's launcher: the best score (an Optuna trial: its
    objective and status), None when it stopped, or JobFailed when it failed or was refused."""
    from rltrain.rundir import directory as rundir
    from rltrain.sweeps.jobs import JobFailed

    if ended.code in (1, 2) and isinstance(ended.error, rundir.RunDirError):
        raise JobFailed(f"rltrain: {label}not run: {ctx.run_dir} is not this job's to use")
    if ended.code in (1, 2):
        raise JobFailed(f"rltrain: {label}failed (see {ctx.run_dir}/summary.json)")
    if ended.code:
        return None
    info = ended.info
    assert info is not None  # it trained: every other end has a code
    if ctx.trial is not None:  # an Optuna trial: what the sweeper tells the study
        return {"value": ctx.trial.value(), "status": info.status, "epochs": info.epochs,
                "run_dir": str(ctx.run_dir)}
    return info.best_score


def _set_console_level(cfg: Any) -> None:
    """``logger.quiet``: the console shows warnings and errors only (rltrain.log keeps all)."""
    from omegaconf import OmegaConf  # with Hydra: see the module docstring

    quiet = bool(OmegaConf.select(cfg, "logger.quiet", default=False))
    for handler in logging.getLogger().handlers:
        if isinstance(handler, ConsoleHandler) or (isinstance(
                handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)):
            handler.setLevel(logging.WARNING if quiet else logging.NOTSET)


# --------------------------------------------------------------------------- main
def _hydra(argv: list[str]) -> tuple[int, bool]:
    """Run Hydra's main; returns the exit code and whether it was a sweep."""
    import hydra

    from rltrain.assembly.registered_schemas import register_configs
    from rltrain.commands import command_line as overrides
    from rltrain.commands.hydra_compat import (
        brief_plugin_errors,
        skip_batch_validation,
        skip_mode_probe,
    )
    from rltrain.config.schemas import ConfigError
    from rltrain.sweeps import outcome
    from rltrain.sweeps.command import STATE, judge
    from rltrain.sweeps.jobs import JobFailed
    from rltrain.trainers import failure_text

    multirun = any(a in ("-m", "--multirun") for a in argv)
    STATE.command = ["rltrain", *sys.argv[1:]]  # as typed, for the sweep's last line
    shown = next((a for a in argv if a in ("--cfg", "-c", "--info", "-i")), None)
    if multirun and shown is not None:  # Hydra's own answer is a traceback
        return _error(f"--multirun and {shown} do not go together: {shown} prints the config "
                      "of one run; drop --multirun (the sweep's settings show with "
                      f"{shown} hydra)"), multirun
    search = next((a for a in argv if a.startswith("hparams_search=")), None)
    if search is not None and not multirun and not any(a in ("--cfg", "-c") for a in argv):
        return _error(f"{search} is a search space for the Optuna sweeper: tune with "
                      f"rltrain --multirun {search} (extra: tune)"), multirun
    try:
        argv = overrides.prepare(argv, conf_dir())
    except ConfigError as e:
        return _error(str(e)), multirun
    sys.argv = [sys.argv[0], *argv]
    register_configs()
    if shown in ("--cfg", "-c") and _after(argv, shown) in ("job", "all"):
        print(_tuned_note(argv), flush=True)
    if multirun and not _full_error():
        def could_not_run(e: Exception) -> str:
            if STATE.directory is not None and outcome.jobs_ran(STATE.directory):
                # a launcher's error once jobs ran: a failed sweep (exit 1), listed job by job
                return f"rltrain: error: a job of the sweep failed: {failure_text(e)}"
            judge(2)  # the sweep could not start: no job report
            return f"rltrain: error: the sweep could not run: {failure_text(e)}"

        brief_plugin_errors(could_not_run, said=(JobFailed,))
    if not multirun:
        skip_mode_probe(argv)
    else:
        skip_batch_validation()
    code = 0
    try:
        hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")(task)()
    except _Done as e:
        code = e.code
    except SystemExit as e:  # Hydra's own exit after reporting an error
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except signals.EarlyStop as e:
        code = 128 + e.signum
        if not multirun:
            _say(signals.stopped_before_training(e.signum))
    state = STATE
    if multirun and state.outcome == 2:  # the sweeper refused to start, and said why
        code = 2
    elif multirun and state.directory is not None:
        quiet = any(a.lower() in ("logger.quiet=true", "++logger.quiet=true") for a in argv)
        failed, interrupted, total = outcome.report(state.directory, quiet)
        if signals.requested() is not None:
            code = 128 + (signals.requested() or 0)
        elif state.outcome is not None:
            code = state.outcome
        elif failed:
            code = 1
    return code, multirun


def _after(argv: list[str], flag: str) -> str | None:
    """The value following ``flag`` in ``argv``, if any."""
    i = argv.index(flag) if flag in argv else -1
    return argv[i + 1] if 0 <= i < len(argv) - 1 else None


def _tuned_note(argv: list[str]) -> str:
    """For ``--cfg``: which tuned file the printed config holds, as a YAML comment (the
    output stays YAML). The tuned file is an optional default, so Hydra's own output does not
    say whether one applied."""
    from hydra import compose, initialize_config_dir

    overrides = [a for a in argv if "=" in a and not a.startswith("-")]
    extra = _after(argv, "--config-dir") or _after(argv, "-cd")
    if extra:  # the user's config directory, searched as Hydra does for the run
        overrides.append(f"hydra.searchpath=[file://{Path(extra).absolute()}]")
    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
            cfg = compose("config", overrides=overrides, return_hydra_config=True)
        choice = str(cfg.hydra.runtime.choices.get("tuned"))
    except Exception as e:  # noqa: BLE001 - Hydra says what is wrong when it composes next
        return f"# tuned: not known ({type(e).__name__})"
    path = conf_dir() / "tuned" / f"{choice}.yaml"
    if path.is_file():
        return f"# tuned: tuned/{choice}.yaml applied (over the algorithm's generic defaults)"
    return f"# tuned: none for {choice} (the algorithm's generic defaults hold)"


#: the shells Hydra's completion plugins serve
SHELLS = ("bash", "zsh", "fish")


def completion_command(words: list[str]) -> tuple[str, str]:
    """``-sc``'s one word, ``install=SHELL``, ``uninstall=SHELL`` or ``query=SHELL``, as
    (command, shell); ValueError saying what is wrong for anything else (Hydra's answer is a
    traceback). Checked before anything heavy is imported.

    ``query`` is what the installed completion function runs, with the line it completes in
    the environment (``COMP_LINE``)."""
    example = ('eval "$(rltrain -sc install=bash)" (or install=zsh; '
               "rltrain -sc install=fish | source)")
    command, _, shell = words[0].partition("=") if len(words) == 1 else ("", "", "")
    if command not in ("install", "uninstall", "query"):
        given = " ".join(words) or "nothing"
        raise ValueError(f"-sc (--shell-completion) takes one of install=SHELL, "
                          f"uninstall=SHELL or query=SHELL, got {given}; e.g. {example}")
    if shell not in SHELLS:
        raise ValueError(f"-sc {words[0]}: no completion for the shell {shell!r}; shells: "
                          f"{', '.join(SHELLS)}")
    if command == "query" and "COMP_LINE" not in os.environ:
        raise ValueError(f"-sc {words[0]} is what the installed completion function runs, "
                          "with the line to complete in COMP_LINE; to install completion: "
                          f"{example}")
    return command, shell


#: zsh runs bash's completion functions through bashcompinit, which needs compinit: loaded
#: here when the shell has not loaded them, so that ``eval "$(rltrain -sc install=zsh)"``
#: works on its own
_ZSH_PREAMBLE = """\
(( $+functions[compdef] )) || { autoload -U +X compinit && compinit -i }
(( $+functions[complete] )) || { autoload -U +X bashcompinit && bashcompinit }"""

#: config groups rltrain composes itself (schemas, the tuned file): not offered to complete
_INTERNAL_GROUPS = ("schema", "tuned")


def _shell_completion(argv: list[str]) -> int:
    """``rltrain -sc install|uninstall|query=SHELL``: Hydra's completion plugins, with zsh's
    bash-compatibility loaded on install, the completion rule removed on uninstall (Hydra
    leaves it pointing at the function it unsets), and rltrain's internal groups left out of
    the answers."""
    import io

    words = [a for a in argv if a not in ("-sc", "--shell-completion")]
    command, shell = completion_command(words)  # checked in main
    if command == "install" and shell == "zsh":
        print(_ZSH_PREAMBLE)
    if command == "uninstall" and shell in ("bash", "zsh"):
        print(f"complete -r {Path(sys.argv[0]).name} 2> /dev/null")
    answer = io.StringIO()
    with contextlib.redirect_stdout(answer) if command == "query" else contextlib.nullcontext():
        code = _hydra_main()
    if command == "query":
        sep = "\n" if shell == "fish" else " "
        offered = answer.getvalue().split("\n" if shell == "fish" else None)
        print(sep.join(w for w in offered if w and not w.split("\t")[0].startswith(
            _INTERNAL_GROUPS)))
    return code


def _complete(argv: list[str]) -> int:
    """``rltrain -sc ...`` and ``rltrain --hydra-help``: Hydra over the schemas as plain values,
    kept between calls so that neither imports torch nor the algorithms
    (rltrain.commands.completion); the first one after an install or a change of rltrain imports
    them to write the cache."""
    from rltrain.commands import completion

    snapshot = completion.cached()
    if snapshot is None:
        from rltrain.assembly.registered_schemas import plain_schemas

        snapshot = plain_schemas()
        completion.write(snapshot)
    completion.register(snapshot)
    sys.argv = [sys.argv[0], *argv]
    if argv == ["--hydra-help"]:
        return _hydra_main()
    return _shell_completion(argv)


def _hydra_main() -> int:
    """Hydra's main over ``conf/`` with ``sys.argv``: its exit code."""
    import hydra

    try:
        hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")(task)()
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


def _error(message: str, code: int = 2) -> int:
    _say(f"error: {clip_long_words(message)}")
    return code


def main() -> None:
    guard_streams()
    # a log line that cannot be written (a full disk) is dropped, not printed as a traceback
    logging.raiseExceptions = False
    args = sys.argv[1:]
    if any(arg in ("-h", "--help") for arg in args):
        print(help_text())
        return
    if args == ["--version"] or args == ["-V"]:
        print(version_text())
        return
    if any(a in ("-sc", "--shell-completion") for a in args):
        try:
            completion_command([a for a in args if a not in ("-sc", "--shell-completion")])
        except ValueError as e:
            fast_exit(_error(str(e)))
        fast_exit(_complete(args))
    if args == ["--hydra-help"]:  # Hydra's help over the plain schemas, as completion's
        fast_exit(_complete(args))
    gc_pause.hold()  # until training begins: rltrain.process.gc_pause says why
    signals.startup()
    if any(a in ("-q", "--quiet") for a in args):
        quiet = [] if any(a.startswith("resume=") for a in args) else ["logger.quiet=true"]
        if quiet and not any(a.startswith("hydra/hydra_logging=") for a in args):
            quiet.append("hydra/hydra_logging=disabled")  # Hydra's own "Launching N jobs"
        args = [a for a in args if a not in ("-q", "--quiet")] + quiet
    multirun = False
    try:
        if any(arg.startswith("resume=") for arg in args):
            from rltrain.commands.resume import resume  # a run's imports: see the module docstring

            code = resume(args, say=_say, started=STARTED, full_error=_full_error())
        else:
            code, multirun = _hydra(args)
    except (signals.EarlyStop, Exception) as e:  # noqa: BLE001 - re-raised but for a signal's
        signum = e.signum if isinstance(e, signals.EarlyStop) else signals.stopped_at_startup()
        if signum is None:
            raise
        _say(signals.stopped_before_training(signum))
        code = 128 + signum
    if multirun:
        # a sweep's launcher may hold worker processes and threads that a normal exit ends
        logging.shutdown()
        sys.exit(code)
    fast_exit(code)


if __name__ == "__main__":
    main()
