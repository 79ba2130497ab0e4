"""W&B (offline) and MLflow (a local SQLite store) as loggers, through the real CLI (what they
print, with their own logging kept off the console); what they hold is read back with their
own formats and APIs."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from conftest import read_jsonl, refusal, resume_in_process

SMOKE = ["experiment=smoke", "logger.tensorboard=false"]


def test_mlflow_holds_the_config_every_epoch_and_the_summary(cli, tmp_path):
    pytest.importorskip("mlflow", reason="mlflow (extra: mlflow) is not installed")
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_dir = tmp_path / "run"
    res = cli(*SMOKE, "logger.mlflow.enabled=true", f"logger.mlflow.tracking_uri={uri}",
              "algo.lr=0.0123", f"hydra.run.dir={run_dir}")
    assert res.returncode == 0, res.stderr
    assert "INFO mlflow" not in res.stderr + res.stdout
    client = MlflowClient(tracking_uri=uri)
    run_id = (run_dir / ".mlflow_run_id").read_text()
    # where it logs, said before the store is made (seconds of blank console) and after
    assert f"mlflow: logging to {uri} (creating the store" in res.stdout
    assert (f"mlflow: run {run_id} created in experiment 'rltrain'; browse it with: mlflow ui "
            f"--backend-store-uri {uri}") in res.stdout
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["algo.lr"] == "0.0123"
    assert run.data.params["env.id"] == "CartPole-v1"
    assert run.data.tags["rltrain.run_dir"] == str(run_dir)
    records = read_jsonl(run_dir / "epochs.jsonl")
    history = client.get_metric_history(run.info.run_id, "test/return_mean")
    assert [(m.step, m.value) for m in history] == [
        (r["env_step"], r["test"]["return_mean"]) for r in records]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert run.data.metrics["summary/best_score"] == summary["best_score"]

    # a resumed run continues the same MLflow run (resumed in this process)
    assert resume_in_process(run_dir, "trainer.max_epochs=3") == (0, [])
    history = client.get_metric_history(run.info.run_id, "test/return_mean")
    assert [m.step for m in history] == [r["env_step"] for r in read_jsonl(
        run_dir / "epochs.jsonl")]
    assert len(client.search_runs([run.info.experiment_id])) == 1


def wandb_records(path: Path) -> list:
    """The records of a W&B run file (``run-<id>.wandb``): W&B's header, then LevelDB-style
    log blocks of 32 KiB holding serialised ``wandb_internal_pb2.Record`` messages."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:7] == b":W&B\xe1\xbe\x00", "not a W&B run file of the known version"
    pos, block, payloads, pending = 7, 32768, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's zero tail
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 1:  # full
            payloads.append(chunk)
        elif kind == 2:  # first
            pending = chunk
        elif kind == 3:  # middle
            pending += chunk
        elif kind == 4:  # last
            payloads.append(pending + chunk)
        else:
            break
    return [pb.Record.FromString(p) for p in payloads]


def test_wandb_offline_holds_the_config_every_epoch_and_the_summary(cli, tmp_path):
    pytest.importorskip("wandb", reason="wandb (extra: wandb) is not installed")
    run_dir = tmp_path / "run"
    res = cli(*SMOKE, "logger.wandb.enabled=true", "algo.lr=0.0123",
              f"hydra.run.dir={run_dir}", env={"WANDB_MODE": "offline", "WANDB_SILENT": "true"})
    assert res.returncode == 0, res.stderr
    run_id = (run_dir / ".wandb_id").read_text()
    (path,) = (run_dir / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb")
    assert f"wandb: offline run {run_id} in {path.parent}; upload it with: wandb sync " \
        f"{path.parent}" in res.stdout
    records = wandb_records(path)

    def items(update) -> dict:
        return {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in update}

    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    config = items(run.config.update)
    algo = config["algo"]
    assert algo.get("value", algo)["lr"] == 0.0123  # some versions wrap values
    history = [items(r.history.item) for r in records
               if r.WhichOneof("record_type") == "history"]
    epochs = read_jsonl(run_dir / "epochs.jsonl")
    assert [(h["_step"], h["test/return_mean"]) for h in history] == [
        (r["env_step"], r["test"]["return_mean"]) for r in epochs]
    summary = {}
    for r in records:
        if r.WhichOneof("record_type") == "summary":
            summary.update(items(r.summary.update))
    assert summary["best_score"] == json.loads((run_dir / "summary.json").read_text())[
        "best_score"]
    assert summary["status"] == "completed"


def test_a_wrong_wandb_mode_is_one_line(tmp_path):
    message = refusal(tmp_path / "run", *SMOKE, "logger.wandb.mode=sometimes",
                      "logger.wandb.enabled=true")
    assert "logger.wandb.mode must be offline or online, got 'sometimes'" in message
    assert "Traceback" not in message and "\n" not in message


def test_a_tracker_that_is_not_installed_names_the_extra(monkeypatch):
    import dataclasses

    from rltrain.config.schemas import ConfigError
    from rltrain.loggers import LOGGERS, check_loggers, logger_schema

    monkeypatch.setitem(LOGGERS, "mlflow", dataclasses.replace(
        LOGGERS["mlflow"], package="no_such_module_rltrain"))
    cfg = logger_schema()()
    check_loggers(cfg)  # off: nothing needed
    cfg.mlflow.enabled = True
    with pytest.raises(ConfigError, match=r'needs no_such_module_rltrain: pip install -e '
                                           r'"\.\[mlflow\]"'):
        check_loggers(cfg)
