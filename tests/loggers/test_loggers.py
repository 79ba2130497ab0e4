"""The logger registry: a logger declared in one module (here, in this file) becomes a section
of the ``logger`` group's schema, is refused by name when its package is missing, is checked,
and is built only when its section turns it on; the registered loggers keep their keys and
defaults; optional packages load only when their logger is built."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from conftest import run_in_process
from rltrain.assembly.registered_schemas import typed_run_config
from rltrain.config.schemas import ConfigError, LoggerConfig
from rltrain.loggers import (
    LOGGERS,
    Logger,
    LoggerContext,
    LoggerSpec,
    build_loggers,
    check_loggers,
    logger_schema,
    register,
)


@dataclass
class NotesConfig:
    """A test logger's section: ``logger.notes.*``."""

    #: turns it on
    enabled: bool = False
    #: the file it writes, in the run directory
    filename: str = "notes.txt"


def check_notes(cfg: NotesConfig) -> None:
    if "/" in cfg.filename:
        raise ConfigError(f"logger.notes.filename must be a file name, got {cfg.filename!r}")


class NotesLogger(Logger):
    """A real, small logger: one line per epoch and one at the end, in a text file."""

    def __init__(self, cfg: NotesConfig, context: LoggerContext) -> None:
        self.path = context.run_dir / cfg.filename
        self.path.write_text(f"{context.name} from {context.resume_step}\n", encoding="utf-8")

    def log_epoch(self, record: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(f"epoch {record['epoch']} at {record[self.step_key]}\n")

    def finish(self, info: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(f"best {info['best_score']}\n")


NOTES = LoggerSpec(key="notes", schema=NotesConfig, build=NotesLogger, check=check_notes,
                   package="json", doc="notes in a text file")


@pytest.fixture
def registered():
    """Register a spec for one test, and take it out again afterwards."""
    added: list[str] = []

    def add(spec: LoggerSpec) -> LoggerSpec:
        added.append(spec.key)
        return register(spec)

    yield add
    for key in added:
        LOGGERS.pop(key, None)


def context(tmp_path: Path, resume_step: int | None = None) -> LoggerContext:
    return LoggerContext(run_dir=tmp_path, config={"seed": 0}, name="ppo-cartpole-seed0",
                         resume_step=resume_step)


def section(**overrides: Any) -> Any:
    """The logger group with the registry's schema, all optional loggers off, ``overrides``
    (dotted keys) applied as on the command line."""
    cfg = OmegaConf.structured(logger_schema())
    off = {spec.switch_key.removeprefix("logger."): False for spec in LOGGERS.values()}
    cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(
        [f"{k}={str(v).lower() if isinstance(v, bool) else v}"
         for k, v in {**off, **overrides}.items()]))
    return OmegaConf.to_object(cfg)


def test_a_registered_logger_is_a_section_of_the_schema(registered):
    before = logger_schema()
    registered(NOTES)
    schema = logger_schema()
    assert schema is not before and schema is logger_schema()  # made once per registry
    assert issubclass(schema, LoggerConfig)
    fields = {f.name: f for f in dataclasses.fields(schema)}
    assert fields["notes"].type is NotesConfig
    assert schema().notes == NotesConfig()
    # the console's own fields stay, and Hydra's store takes the schema as it is
    assert {"progress_bar", "progress_interval_s", "quiet"} <= fields.keys()
    ConfigStore.instance().store(group="test_loggers", name="with_notes", node=schema)
    cfg = OmegaConf.merge(OmegaConf.structured(schema),
                          OmegaConf.from_dotlist(["notes.filename=n.txt"]))
    assert OmegaConf.to_object(cfg).notes == NotesConfig(filename="n.txt")
    with pytest.raises(Exception, match="notes.enabeld"):
        OmegaConf.merge(cfg, OmegaConf.from_dotlist(["notes.enabeld=true"]))


def test_a_registered_logger_is_built_only_when_enabled(registered, tmp_path):
    registered(NOTES)
    assert build_loggers(section(), context(tmp_path)) == []
    assert not (tmp_path / "notes.txt").exists()

    (logger,) = build_loggers(section(**{"notes.enabled": True}), context(tmp_path, 4096))
    assert isinstance(logger, NotesLogger)
    logger.start_run({"step_key": "env_step"})
    logger.log_epoch({"epoch": 1, "env_step": 6144})
    logger.finish({"best_score": 9.5})
    assert (tmp_path / "notes.txt").read_text() == (
        "ppo-cartpole-seed0 from 4096\nepoch 1 at 6144\nbest 9.5\n")


def test_a_logger_whose_package_is_missing_is_refused_by_name(registered):
    registered(dataclasses.replace(NOTES, package="no_such_module_rltrain", extra="notes"))
    check_loggers(section())  # off: nothing needed
    with pytest.raises(ConfigError) as e:
        check_loggers(section(**{"notes.enabled": True}))
    assert str(e.value) == ('logger.notes.enabled=true needs no_such_module_rltrain: '
                            'pip install -e ".[notes]"')


def test_a_switch_whose_package_is_missing_is_refused_by_name(registered):
    registered(LoggerSpec(key="beeps", schema=bool, build=NotesLogger,
                          package="no_such_module_rltrain.sub"))
    assert logger_schema()().beeps is False
    check_loggers(section())
    with pytest.raises(ConfigError, match=r"^logger\.beeps=true needs no_such_module_rltrain\.sub: "
                                          r"pip install -e \.$"):
        check_loggers(section(beeps=True))


def test_a_loggers_own_check_runs(registered):
    registered(NOTES)
    with pytest.raises(ConfigError, match="logger.notes.filename must be a file name"):
        check_loggers(section(**{"notes.filename": "a/b.txt"}))


@pytest.mark.parametrize("spec, why", [
    (dataclasses.replace(NOTES, key="quiet"), "a name other than"),
    (dataclasses.replace(NOTES, key="not-a-name"), "a name other than"),
    (dataclasses.replace(NOTES, schema=dict), "a dataclass or bool"),
    (dataclasses.replace(NOTES, switch="on"), "no field 'on'"),
])
def test_register_refuses_a_bad_spec(spec, why):
    with pytest.raises(ValueError, match=why):
        register(spec)
    assert spec.key not in LOGGERS or LOGGERS[spec.key] is not spec


def test_two_loggers_cannot_share_a_key(registered):
    registered(NOTES)
    with pytest.raises(ValueError, match="two loggers are registered as logger.notes"):
        register(dataclasses.replace(NOTES, build=lambda cfg, ctx: Logger()))


#: the sections of the loggers rltrain ships, with their defaults (the keys users type)
SHIPPED = {
    "tensorboard": True,
    "wandb": {"enabled": False, "project": "rltrain", "entity": None, "mode": "offline",
              "group": None, "tags": []},
    "mlflow": {"enabled": False, "tracking_uri": None, "experiment": "rltrain"},
}


def test_every_registered_section_has_its_default():
    defaults = OmegaConf.to_container(OmegaConf.structured(logger_schema()))
    assert SHIPPED.keys() <= LOGGERS.keys()
    for key, expected in SHIPPED.items():
        assert defaults[key] == expected, key
    for key, spec in LOGGERS.items():
        own = spec.default if spec.schema is bool else OmegaConf.to_container(
            OmegaConf.structured(spec.schema))
        assert defaults[key] == own, key
    assert {k: defaults[k] for k in ("progress_bar", "progress_interval_s", "quiet")} == {
        "progress_bar": True, "progress_interval_s": 30.0, "quiet": False}


def test_a_stored_run_config_reads_back_with_the_logger_schema():
    stored = {"algo": {"name": "ppo"}, "env": {"name": "cartpole", "id": "CartPole-v1"},
              "trainer": {"name": "onpolicy"}, "buffer": {"size": 10},
              "logger": {"tensorboard": False, "wandb": {"enabled": True, "tags": ["a"]}}}
    cfg = typed_run_config(OmegaConf.create(stored))
    logger = OmegaConf.to_object(cfg.logger)
    assert type(logger) is logger_schema()
    assert logger.tensorboard is False and logger.wandb.tags == ["a"]
    assert logger.mlflow.experiment == "rltrain"


def test_tensorboard_false_writes_no_tb(tmp_path):
    run_dir = tmp_path / "run"
    run_in_process(run_dir, "experiment=smoke", "logger.tensorboard=false")
    assert (run_dir / "epochs.jsonl").is_file()
    assert json.loads((run_dir / "summary.json").read_text())["interrupted"] is False
    assert not (run_dir / "tb").exists()


def test_importing_the_loggers_loads_no_optional_package():
    code = ("import sys, rltrain.loggers; print(sorted(m for m in ('wandb', 'mlflow', "
            "'torch', 'tensorboard') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert res.stdout.strip() == "[]"
