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

from conftest import RLTRAIN, cli_env, refusal, run_in_process
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
    wide, narrow = log.epoch_line(record(), 200), log.epoch_line(record(), width)
    assert len(narrow) <= width and len(wide) > width
    for kept in ("epoch   3/50", "6.1k/102.4k steps", "test 187.2±12.1"):
        assert kept in narrow  # what a narrow line keeps, whole: never a split number
    assert "ent " not in narrow and "kl " not in narrow  # stats past the first two go first
    words = narrow.split()
    assert all(w in wide.split() for w in words)  # fields dropped whole, none cut


PONG = {"epoch": 1, "env_step": 102_400, "train/return_mean": -20.95, "test/return_mean": -21.0,
        "test/return_std": 0.0, "best/score": -21.0, "best/epoch": 1, "steps_per_s": 1234.0,
        "timing/collect": 50.0, "timing/update": 20.0, "timing/test": 30.0}


@pytest.mark.parametrize("algo", ["ppo", "dqn", "sac", "iql"])
@pytest.mark.parametrize("width", [80, 100, 120, 200])
def test_epoch_lines_fit_80_to_200_columns_and_keep_the_key_stats_where_they_fit(algo, width):
    """Issue 45: at 120 columns the first epoch line of an Atari PPO run dropped vf. The
    algorithm's first two stats now go after the rate and the train return, and a wide
    terminal gets everything."""
    clock, out = Clock(), io.StringIO()
    log = logger(clock, out, stats=ALGORITHMS[algo].console)
    log.max_epochs = 100
    log.start_run({"planned_env_steps": 10_240_000, "env_step": 0})
    log.start_epoch(1, 102_400)
    log.advance(102_400)
    clock.now += 100.0
    stats = ALGORITHMS[algo].console
    r = {**PONG, **{f"update/{key}": v for (key, _), v in
                    zip(stats, [-0.00502, 0.0283, 1.79, 0.0123], strict=False)}}
    line = log.epoch_line(r, width)
    assert len(line) <= width, (len(line), line)
    for kept in ("epoch   1/100", "102.4k/10.2M steps", "test -21.0±0.0"):
        assert kept in line
    labels = [f" {label} " for _, label in stats]
    if width >= 120:  # the first two stats fit: they are there, whatever else goes
        assert all(label in line for label in labels[:2]), line
    if width >= 200:
        assert all(label in line for label in labels) and "1.2k sps (30% test)" in line
    if width <= 100:
        assert "1.2k sps" not in line and "train " not in line  # before the key stats


def test_an_epoch_smaller_than_a_collection_step_counts_truthfully():
    """Issue 45: an epoch of 512 env steps whose collection step is 2,048 ran 2,048 and said
    "2,048/512 steps ... eta -1:59:12". The trainer now says 2,048 (whole collection steps);
    an epoch that runs past what it was told (collecting whole episodes) counts on, and no
    ETA is ever negative."""
    clock, out = Clock(), io.StringIO()
    log = logger(clock, out, progress_interval_s=0.0)
    log.start_run({"planned_env_steps": 2048, "env_step": 0})
    log.start_epoch(1, 512)  # told less than it runs
    clock.now += 10.0
    log.advance(2048)
    (line,) = out.getvalue().splitlines()
    assert line.startswith("  epoch 1/50: 2,048/2,048 steps, 205 steps/s, epoch eta 0:00")
    assert "-" not in line.replace("epoch 1/50", "")  # no negative duration anywhere


def test_a_long_test_step_shows_its_progress_and_counts_in_the_eta():
    """Issue 45: 176 s of greedy Atari test games printed nothing, and the ETA knew nothing
    of them. Off a terminal the test step now prints progress lines (episodes, steps, its own
    ETA), and the run's ETA counts the tests left at what one took."""
    clock, out = Clock(), io.StringIO()
    log = logger(clock, out, progress_interval_s=30.0)
    log.start_run({"planned_env_steps": 4000, "env_step": 0})
    log.start_epoch(1, 1000)
    clock.now += 10.0  # learning: 100 steps/s
    log.advance(1000)
    log.start_test(1, 4)
    for step in range(1, 181):  # a test of 180 s: 4 episodes of 45 s
        clock.now += 1.0
        log.test_progress(step * 40, step // 45)
    lines = out.getvalue().splitlines()
    progress = [line for line in lines if "testing," in line]
    assert len(progress) >= 5, lines  # one every 30 s
    # at 50 s, one episode of 4 ended: 150 s left of this test; the run's ETA: 3,000 steps
    # at 100 steps/s (30 s), those 150 s, and 49 more tests of 200 s
    assert progress[1] == ("  epoch 1/50: testing, 1/4 episodes, 2,000 steps, test eta 2:30, "
                           "run eta 2:46:20"), progress
    # once it is over: 30 s of learning and 49 tests of what this one took (180 s)
    log.log_epoch(record(epoch=1, env_step=1000, steps_per_s=1000 / 190))
    line = out.getvalue().splitlines()[-1]
    eta = 3000 / 100 + 49 * 180
    assert f"eta {int(eta) // 3600}:{int(eta) % 3600 // 60:02d}:{int(eta) % 60:02d}" in line
    assert "5 sps" in line  # the epoch's real rate: its test took nearly all of it


def test_test_episodes_cut_by_the_cap_show_in_the_epoch_line():
    clock, out = Clock(), io.StringIO()
    log = logger(clock, out)
    log.start_run({"planned_env_steps": 102_400, "env_step": 4096})
    log.start_epoch(3, 2048)
    log.advance(2048)
    assert "test 187.2±12.1 (2 cut)" in log.epoch_line(record(**{"test/n_cut": 2}))
    assert "cut" not in log.epoch_line(record(**{"test/n_cut": 0}))


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
    from rltrain.process.streams import fit

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


def test_tensorboard_has_the_config_and_hparams(tmp_path):
    run_dir = tmp_path / "run"
    run_in_process(run_dir, *SMOKE, "algo.lr=0.0007")
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


# --------------------------------------------------------------------------- echoed values
def test_echo_shortens_spaces_arrays_lists_and_strings():
    """Issue 45: a refusal echoed MiniGrid's observation space in 55 lines (its bounds
    array). One helper says any value in a line."""
    import gymnasium as gym
    import numpy as np

    from rltrain.process.streams import echo

    image = gym.spaces.Box(0, np.array([[[10, 5, 3]] * 7] * 7), (7, 7, 3), np.uint8)
    minigrid = gym.spaces.Dict({"direction": gym.spaces.Discrete(4), "image": image})
    assert echo(minigrid) == ("Dict('direction': Discrete(4), 'image': Box(0, 3 to 10, "
                              "(7, 7, 3), uint8))")
    assert echo(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)) == "Box(0, 255, (4, 84, 84), uint8)"
    assert echo(np.arange(10_000).reshape(100, 100)) == "array of shape (100, 100) int64, 0 to 9999"
    assert echo(np.arange(3)) == "array([0, 1, 2])"
    assert echo(list(range(10_000))).endswith(", ...] (10,000 items)")
    long = echo("x" * 100_000)
    assert "[100,000 characters]" in long and len(long) < 120
    assert echo({"a": 1, "b": [1, 2]}) == "{'a': 1, 'b': [1, 2]}"
    for value in (minigrid, np.zeros((50, 50)), list(range(10_000)), "y" * 10_000):
        assert "\n" not in echo(value) and len(echo(value)) <= 160


def test_every_message_a_command_prints_has_its_echoed_arrays_folded():
    """The net under every command's error line and the console's log lines: a value echoed
    whole (numpy prints a (7, 7, 3) array in 55 lines) reaches the console short."""
    import numpy as np

    from rltrain.process.streams import clip_long_words

    bounds = np.array([[[10, 5, 3]] * 7] * 7)
    message = clip_long_words(f"no encoder takes Box(0, {bounds}, (7, 7, 3), uint8); use auto")
    assert message == ("no encoder takes Box(0, [10 5 3 ... 10 5 3] (147 values), (7, 7, 3), "
                       "uint8); use auto")
    assert clip_long_words(f"x {np.zeros(400)} y") == "x [0. ...] (400 values, all 0.) y"
    short = "keep [1, 2, 3], envs.envs[0-7] and (a, b) as they are"
    assert clip_long_words(short) == short


def test_the_console_keeps_file_only_detail_for_rltrain_log(tmp_path, capsys):
    """A record marked FILE_ONLY (the values behind a one-line warning) goes to rltrain.log
    alone; the console's other lines are shortened as the error lines are."""
    import logging

    from rltrain.process.streams import FILE_ONLY, ConsoleHandler

    log = logging.getLogger("rltrain.test_console")
    log.propagate = False
    log.setLevel(logging.INFO)
    file = logging.FileHandler(tmp_path / "rltrain.log")
    log.handlers[:] = [ConsoleHandler(), file]
    try:
        log.warning("one line a user understands")
        log.info("the 614 values, one a line", extra=FILE_ONLY)
        log.info("echoed: [" + ", ".join(map(str, range(1000))) + "]")
    finally:
        file.close()
        log.handlers[:] = []
    said = capsys.readouterr()
    assert said.err == "warning: one line a user understands\n"
    assert said.out == "echoed: [0 1 2 ... 997 998 999] (1,000 values)\n"
    written = (tmp_path / "rltrain.log").read_text()
    assert "the 614 values" in written and "998, 999]" in written


def test_a_refusal_echoing_minigrids_space_is_one_short_line(tmp_path):
    """Issue 45: algo.encoder=nature on MiniGrid refused rightly, in 55 lines."""
    pytest.importorskip("minigrid", reason="needs the minigrid extra")
    message = refusal(tmp_path / "run", "env=minigrid", "algo.encoder=nature")
    (line,) = f"rltrain: error: {message}".splitlines()  # as the CLI prints it
    assert "Box(0, 3 to 10, (7, 7, 3), uint8)" in line and "use algo.encoder=auto" in line
    assert len(line) < 250, line


def test_wrapper_entries_are_said_as_a_user_writes_them():
    """Issue 45: the run's header printed env.wrappers as Python dicts ({'name': ...,
    'kwargs': {'keep_dim': False}}); it says them in YAML's flow style, as they are
    written."""
    from rltrain.config.schemas import flow_text

    assert flow_text({"name": "GrayscaleObservation", "kwargs": {"keep_dim": False}}) == (
        "{name: GrayscaleObservation, kwargs: {keep_dim: false}}")
    assert flow_text("rltrain.envs.wrappers.FireReset") == "rltrain.envs.wrappers.FireReset"
    assert flow_text({"name": "x", "train_only": True, "kwargs": {"a": None, "b": [1, 0.5]}}) == (
        "{name: x, train_only: true, kwargs: {a: null, b: [1, 0.5]}}")
    assert flow_text({"_target_": "m.W", "s": "a: b", "t": "true"}) == (
        '{_target_: m.W, s: "a: b", t: "true"}')


# --------------------------------------------------------------------------- inexact state
BOX2D = [f"{kind} envs: envs.envs[{i}].env.env.env.env.env.road[{j}] (Box2D.Box2D.b2Body)"
         for kind, n in (("train", 8), ("test", 2)) for i in range(n) for j in range(300)] + [
    f"train envs: envs.envs[{i}].env.env.env.env.env.surf (pygame.surface.Surface)"
    for i in range(8)]
STICKY = [f"train envs: envs.envs[{i}].env.env.env.env.ale (ale_py.ALEInterface: sticky "
          "actions: ALE's saved state does not hold everything they depend on, so the frames "
          "after a resume may differ from an unbroken run's "
          "(env.kwargs.repeat_action_probability=0 resumes exactly))" for i in range(8)]


def test_a_state_checkpoints_cannot_hold_is_said_in_one_line_a_user_understands():
    """Issue 45: CarRacing's warning listed internals (envs.envs[0-7].env.env.env...) and ended
    "and 614 more". It now names what is not saved, what a resume does, and the setting that
    changes it (or that none does); the values go to rltrain.log."""
    from rltrain.assembly.lifecycle import (
        partial_state_line,
        resume_note_line,
        state_detail,
        unsaved_state_line,
    )

    line = unsaved_state_line("CarRacing-v3", BOX2D)
    assert line == (
        "the envs' state cannot be saved exactly: checkpoints do not hold CarRacing-v3's train "
        "and test envs' Box2D physics and pygame drawing state, so a resume starts fresh "
        "episodes from a seeded reset and its records will differ from an unbroken run's (no "
        "setting changes this; 3,008 values, listed in rltrain.log)")
    async_line = unsaved_state_line("Pendulum-v1", [
        "train envs: envs (gymnasium.vector.async_vector_env.AsyncVectorEnv: sub-envs run in "
        "other processes)"])
    assert "env.vectorization=sync saves them; 1 value," in async_line
    sticky = partial_state_line("ALE/Pong-v5", STICKY)
    assert "envs.envs" not in sticky and sticky.count("sticky actions") == 1
    assert "(env.kwargs.repeat_action_probability=0 resumes exactly)" in sticky
    detail = state_detail(BOX2D)
    assert "  train envs: envs.envs[0-7].env.env.env.env.env.road[299] (Box2D.Box2D.b2Body)" in (
        detail.splitlines())
    note = ("the train envs' state could not be restored (envs.envs[0-7].env.world: not "
            "captured in the snapshot (Box2D.Box2D.b2World); left as it is; and 613 more): "
            "training continues with fresh episodes from a seeded reset")
    assert resume_note_line(note) == (
        "the train envs' state could not be restored (Box2D physics; no setting changes this; "
        "listed in rltrain.log): training continues with fresh episodes from a seeded reset")
    assert resume_note_line("no episode was in flight") == "no episode was in flight"


def test_a_terminal_shows_bars_for_the_epoch_and_its_test_step():
    """On a terminal the epoch's bar, then the test step's (episodes, steps, its ETA), both
    transient; then the epoch's line, as wide as the terminal."""
    clock, out = Clock(), io.StringIO()
    console = Console(file=out, width=200, force_terminal=True, highlight=False)
    log = ConsoleLogger(50, console=console, clock=clock, stats=ALGORITHMS["ppo"].console)
    assert log.progress_bar
    log.start_run({"planned_env_steps": 102_400, "env_step": 0})
    log.start_epoch(1, 512)
    clock.now += 1.0
    log.advance(2048)  # past what it was told: the bar's total follows
    assert log._progress is not None and log._progress.tasks[0].total == 2048
    log.start_test(1, 4)
    for step in range(1, 9):
        clock.now += 0.5
        log.test_progress(step * 100, step // 2)
    task = log._progress.tasks[0]
    assert (task.completed, task.total, task.fields["steps"]) == (4, 4, "800")
    log.log_epoch(record(epoch=1, env_step=2048, steps_per_s=400.0))
    assert log._progress is None
    line = [x for x in out.getvalue().splitlines() if "epoch   1/50" in x][-1]
    assert "kl 0.012" in line  # 200 columns: every stat
