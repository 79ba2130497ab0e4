"""What a person reads: epoch lines that fit 120 columns and give the real rate, progress in
logs that are not a terminal, quiet runs, --version, logging choices, TensorBoard's HParams,
and exit handlers that still run."""

from __future__ import annotations

import io
import json
import re
import subprocess

import pytest
from rich.console import Console
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from conftest import RLTRAIN, cli_env
from rltrain.algorithms import ALGORITHMS
from rltrain.loggers import LINE_WIDTH, ConsoleLogger

SMOKE = ["experiment=smoke"]


class Clock:
    """A clock the test moves by hand: the logger's rate is then exact."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def record(**values) -> dict:
    r = {"epoch": 3, "env_step": 6144, "train/return_mean": 23.4, "test/return_mean": 187.25,
         "test/return_std": 12.1, "best/score": 187.25, "best/epoch": 3,
         "update/pg_loss": -0.0123, "update/v_loss": 12.3, "update/entropy": 0.61,
         "update/approx_kl": 0.012}
    r.update(values)
    return r


def logger(clock: Clock, out: io.StringIO, **kwargs) -> ConsoleLogger:
    console = Console(file=out, width=80, force_terminal=False, highlight=False)
    kwargs.setdefault("stats", ALGORITHMS["ppo"].console)
    return ConsoleLogger(50, console=console, clock=clock, **kwargs)


def test_epoch_line_gives_the_real_rate_and_the_run_eta():
    clock, out = Clock(), io.StringIO()
    log = logger(clock, out, progress_interval_s=1e9)
    log.start_run({"planned_env_steps": 102_400, "env_step": 4096})
    log.start_epoch(3, 2048)
    log.advance(2048)
    clock.now += 1.0  # the epoch, test and saving included, took one second
    line = log.epoch_line(record())
    assert "2.0k sps" in line  # 2048 env steps over the epoch's 1 s, not collection speed
    assert "6.1k/102.4k steps" in line
    assert "eta 0:47" in line  # (102,400 - 6,144) steps left at 2,048 steps/s: 47 s
    assert line.startswith("epoch   3/50")
    assert "test 187.2±12.1" in line and "best 187.2 (3)" in line
    assert line.endswith("eta 0:47 | pg -0.0123 vf 12.3")  # the losses that fit
    assert len(line) <= LINE_WIDTH
    # the trainer's record carries the same rate, measured by the trainer: it is what shows
    assert "1.2k sps" in log.epoch_line(record(steps_per_s=1234.0))


@pytest.mark.parametrize("big", [False, True])
def test_epoch_lines_fit_120_columns_whatever_the_numbers(big):
    clock, out = Clock(), io.StringIO()
    log = logger(clock, out)
    log.max_epochs = 10_000
    log.start_run({"planned_env_steps": 9_999_000_000 if big else 0, "env_step": 0})
    log.start_epoch(9999, 10**9)
    log.advance(123_456)
    clock.now += 1e-3
    values = {"epoch": 9999, "env_step": 9_999_000_000, "train/return_mean": -1234567.8,
              "test/return_mean": -9876543.2e3, "test/return_std": 1234567.8e3,
              "best/score": -9876543.2e3, "best/epoch": 9999} if big else {
        "epoch": 9999, "best/epoch": 9999}
    line = log.epoch_line(record(**values))
    assert len(line) <= LINE_WIDTH, (len(line), line)
    assert "epoch 9999/10000" in line


@pytest.mark.parametrize("width", [60, 80, 100])
def test_epoch_lines_fit_a_narrow_terminal_dropping_what_matters_least(width):
    clock, out = Clock(), io.StringIO()
    log = logger(clock, out)
    log.start_run({"planned_env_steps": 102_400, "env_step": 4096})
    log.start_epoch(3, 2048)
    log.advance(2048)
    clock.now += 1.0
    wide, narrow = log.epoch_line(record()), log.epoch_line(record(), width)
    assert len(narrow) <= width and len(wide) > width
    for kept in ("epoch   3/50", "6.1k/102.4k steps", "test 187.2±12.1"):
        assert kept in narrow  # what a narrow line keeps, whole: never a split number
    assert "pg " not in narrow  # the losses go first
    words = narrow.split()
    assert all(w in wide.split() for w in words)  # fields dropped whole, none cut


def test_the_warmup_shows_and_counts_towards_the_eta_not_the_rate():
    """SAC on Pendulum: 1,000 random steps, then 2 epochs of 1,000 learning steps. The ETA is
    the learning steps left at the learning rate; at the end it is 0, not the warm-up's
    1,000 steps over again."""
    clock, out = Clock(), io.StringIO()
    log = logger(clock, out, progress_interval_s=1e9)
    log.start_run({"planned_env_steps": 3000, "env_step": 0})
    log.start_warmup(1000)
    for _ in range(10):
        clock.now += 0.05  # random steps: 2,000 steps/s
        log.advance(100)
    assert out.getvalue().startswith("warm-up: 1,000 env steps of random actions")
    log.start_epoch(1, 1000)
    clock.now += 10.0  # learning: 100 steps/s
    log.advance(1000)
    first = log.epoch_line(record(epoch=1, env_step=2000, steps_per_s=100.0))
    assert "eta 0:10" in first  # 1,000 steps left at 100 steps/s
    log.start_epoch(2, 1000)
    clock.now += 10.0
    log.advance(1000)
    last = log.epoch_line(record(epoch=2, env_step=3000, steps_per_s=100.0))
    assert "3.0k/3.0k steps" in last and "eta 0:00" in last


def test_warnings_are_labelled_on_stderr_and_info_on_stdout(cli, tmp_path):
    """A warning (the registered reward threshold under a changed time limit) is on stderr
    as `warning: ...`; the run's own lines stay on stdout."""
    res = cli(*SMOKE, "env.max_episode_steps=100", f"hydra.run.dir={tmp_path / 'run'}")
    assert res.returncode == 0, res.stderr
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings and "reward threshold 475" in warnings[0], res.stderr
    assert "warning:" not in res.stdout and "env CartPole-v1" in res.stdout
    assert "\x1b[" not in res.stderr  # no colour codes off a terminal


def test_the_console_handler_folds_info_lines_on_a_terminal_only():
    from rltrain.streams import fit

    line = ("env Pendulum-v1: 1 train / 10 test envs (same-step autoreset), obs (3,), "
            "actions Box(1,), reward threshold -200.0, episodes of at most 200 steps")
    folded = fit(line, 60)
    assert all(len(x) <= 60 for x in folded.splitlines()) and len(folded.splitlines()) == 3
    assert folded.split() == line.split()  # only spaces changed: no number split
    assert fit(line, None) == line  # a log file or pipe keeps whole lines


def test_progress_lines_when_stdout_is_not_a_terminal():
    clock, out = Clock(), io.StringIO()
    log = logger(clock, out, progress_interval_s=30.0)
    log.start_run({"planned_env_steps": 100_000, "env_step": 0})
    log.start_epoch(1, 10_000)
    for _ in range(10):  # a training step every 5 s: a line at most every 30 s
        clock.now += 5.0
        log.advance(1000)
    lines = out.getvalue().splitlines()
    # 94,000 steps of the run left at 200 steps/s: 470 s
    assert lines == ["  epoch 1/50: 6,000/10,000 steps, 200 steps/s, epoch eta 0:20, run eta 7:50"]


def test_quiet_prints_only_where_the_run_went_and_still_writes_everything(tmp_path):
    for name, flag in (("short", "-q"), ("key", "logger.quiet=true")):
        run_dir = tmp_path / name
        res = subprocess.run([str(RLTRAIN), *SMOKE, flag, f"hydra.run.dir={run_dir}"],
                             cwd=tmp_path, capture_output=True, text=True, env=cli_env())
        assert res.returncode == 0, res.stderr
        assert res.stdout == f"run directory: {run_dir}\n" and res.stderr == ""
        assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"
        assert "run directory" in (run_dir / "rltrain.log").read_text()


def test_version_is_rltrains(cli):
    import rltrain

    res = cli("--version")
    assert res.returncode == 0
    assert res.stdout.startswith(f"rltrain {rltrain.__version__} (hydra-core ")


def test_a_hydra_job_logging_choice_is_respected(cli, tmp_path):
    run_dir = tmp_path / "run"
    res = cli(*SMOKE, "hydra/job_logging=disabled", f"hydra.run.dir={run_dir}")
    assert res.returncode == 0, res.stderr
    assert "env CartPole-v1" not in res.stdout  # rltrain's own console logging replaced
    assert not (run_dir / "rltrain.log").exists()
    assert "epoch   2/2" in res.stdout  # epoch lines are the console logger's, not logging's


def test_the_summary_names_the_whole_run_directory_and_what_to_do_next(cli, tmp_path):
    run_dir = tmp_path / ("a-very-long-directory-name-" * 6) / "run"
    res = cli(*SMOKE, f"hydra.run.dir={run_dir}", env={"COLUMNS": "60"})
    assert res.returncode == 0, res.stderr
    assert f"run directory: {run_dir}\n" in res.stdout
    assert "…" not in res.stdout
    # the command's whole time besides training's (start-up was left out: 0.7 s shown for a
    # 6.4 s command), and what to do next, in one line at the end
    table = " ".join(re.sub(r"[│┃]", " ", res.stdout).split())  # the folded rows, joined
    assert re.search(r"\d+\.\ds training \(collect", table)
    assert re.search(r"\d+\.\ds in all, start-up included", table)
    last = res.stdout.splitlines()[-1]
    assert last.startswith(f"next: rltrain-eval {run_dir} "), last


def test_tensorboard_has_the_config_and_hparams(cli, tmp_path):
    run_dir = tmp_path / "run"
    res = cli(*SMOKE, "algo.lr=0.0007", f"hydra.run.dir={run_dir}")
    assert res.returncode == 0, res.stderr
    acc = EventAccumulator(str(run_dir / "tb"))
    acc.Reload()
    content = acc.PluginTagToContent("hparams")
    start = next(plugin_data_pb2.HParamsPluginData.FromString(c).session_start_info
                 for c in content.values()
                 if plugin_data_pb2.HParamsPluginData.FromString(c).HasField("session_start_info"))
    assert start.hparams["algo.lr"].number_value == pytest.approx(0.0007)
    assert start.hparams["env.id"].string_value == "CartPole-v1"
    experiment = next(plugin_data_pb2.HParamsPluginData.FromString(c).experiment
                      for c in content.values()
                      if plugin_data_pb2.HParamsPluginData.FromString(c).HasField("experiment"))
    assert {m.name.tag for m in experiment.metric_infos} == {"best/score", "test/return_mean"}
    assert "config/text_summary" in acc.Tags()["tensors"]
    text = acc.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert re.search(r"lr: 0\.0007", text)


def test_atexit_handlers_run_at_the_end_of_a_run(cli, tmp_path):
    """A single run ends without the interpreter's teardown, but after running the exit
    handlers a user's package registered (here, at import through env.imports)."""
    marker = tmp_path / "atexit.txt"
    res = cli(*SMOKE, "env.imports=[fault_envs]", f"hydra.run.dir={tmp_path / 'run'}",
              env={"RLTRAIN_TEST_ATEXIT_FILE": str(marker)})
    assert res.returncode == 0, res.stderr
    assert marker.read_text().startswith("atexit ran in pid ")
    res = cli(*SMOKE, "env.imports=[fault_envs]", "trainer.max_epochs=0",
              env={"RLTRAIN_TEST_ATEXIT_FILE": str(tmp_path / "on-error.txt")})
    assert res.returncode == 2  # an error exit runs them too (the module was imported)
    assert (tmp_path / "on-error.txt").exists() is False or (
        tmp_path / "on-error.txt").read_text().startswith("atexit ran")
