"""The replay buffer's device copy (``buffer.on_device``, ``ReplayBuffer.mirror_on``): every
one-step transition gathered from it is the host buffer's, bit for bit, through every way
the buffer is written (blocks in lockstep and masked, wrap-around, blocks larger than a
lane, a restored state); and a run learns the same with it as without. On a CPU the copy is
torch tensors on the CPU: the same code as on an accelerator."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import (
    learning_records,
    random_dataset,
    refusal,
    resume_in_process,
    run_in_process,
)
from rltrain.data.reading import read
from rltrain.data.storage import ReplayBuffer
from rltrain.data.transforms.nstep import NStepReturns
from test_buffers import episodes

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"))]


def assert_mirrors(buf: ReplayBuffer, rng: np.random.Generator) -> None:
    """Every stored transition, and a random batch, read the same from the copy."""
    lanes = np.concatenate([np.full(int(n), lane) for lane, n in enumerate(buf.size)])
    positions = np.concatenate([np.arange(int(n)) for n in buf.size])
    if len(lanes) == 0:
        return
    pick = rng.integers(0, len(lanes), size=64)
    for ls, ps in ((lanes, positions), (lanes[pick], positions[pick])):
        host = buf.transitions(ls, ps)
        device = buf.device_transitions(ls, ps)
        for name, h, d in zip(("obs", "act", "rew", "terminated", "next_obs"), host, device,
                              strict=True):
            assert d.device.type == buf.mirror.device.type
            assert d.cpu().numpy().tobytes() == np.ascontiguousarray(h).tobytes(), name


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("next_step", [False, True], ids=["same-step", "next-step"])
@pytest.mark.parametrize(("lanes", "capacity"), [(1, 1), (3, 7), (4, 40)])
def test_the_device_copy_reads_as_the_host_buffer(device, next_step, lanes, capacity):
    """Episodes with ends, masked steps, bit-level differences in next observations (-0.0,
    NaN payloads), blocks longer than a lane: checked after every block, then after the
    buffer's state is restored into a fresh buffer with a copy."""
    rng = np.random.default_rng(lanes * 100 + capacity + next_step)
    buf = ReplayBuffer(lanes, capacity, (3,), (), np.int64)
    buf.mirror_on(torch.device(device))
    for block in episodes(rng, lanes, 30, next_step=next_step):
        valid = block.pop("valid")
        buf.extend(block["obs"], block["act"], block["rew"], block["next_obs"],
                   block["terminated"], block["truncated"], None if valid.all() else valid)
        assert_mirrors(buf, rng)
    restored = ReplayBuffer(lanes, capacity, (3,), (), np.int64)
    restored.mirror_on(torch.device(device))
    restored.load_state_dict(buf.state_dict())
    assert_mirrors(restored, rng)


@pytest.mark.parametrize("device", DEVICES)
def test_a_copy_made_after_the_writes_and_a_one_step_batch_from_it(device):
    """A copy made of a buffer already written (a dataset loaded, then copied) reads as the
    host buffer; a one-step batch gathered from it carries the host batch's values, the
    discount float32 gamma or 0, as tensors on the device. An n-step batch (n > 1) still
    comes from the host arrays."""
    rng = np.random.default_rng(5)
    buf = ReplayBuffer(2, 50, (4,), (2,), np.float32)
    for block in episodes(rng, 2, 6, obs_shape=(4,)):
        valid = block.pop("valid")
        act = rng.normal(size=(*valid.shape, 2)).astype(np.float32)
        buf.extend(block["obs"], act, block["rew"], block["next_obs"], block["terminated"],
                   block["truncated"], None if valid.all() else valid)
    host_lanes = rng.integers(0, 2, size=32)
    positions = rng.integers(0, buf.size.min(), size=32)
    plain = read(buf, host_lanes, positions, [NStepReturns(1, 0.99)])
    buf.mirror_on(torch.device(device))
    assert_mirrors(buf, rng)
    on_device = read(buf, host_lanes, positions, [NStepReturns(1, 0.99)])
    for name in ("obs", "act", "rew", "next_obs", "discount"):
        value = getattr(on_device, name)
        assert isinstance(value, torch.Tensor) and value.device.type == device
        assert value.cpu().numpy().tobytes() == getattr(plain, name).tobytes(), name
    assert isinstance(read(buf, host_lanes, positions, [NStepReturns(3, 0.99)]).obs, np.ndarray)


def test_a_frame_stacked_buffer_refuses_a_device_copy():
    buf = ReplayBuffer(1, 8, (4, 5, 5), (), np.int64, obs_dtype=np.uint8, frame_stack=4)
    with pytest.raises(ValueError, match="holds whole observations"):
        buf.mirror_on(torch.device("cpu"))


# --------------------------------------------------------------------------- whole runs
RUNS = {
    "sac": ["algo=sac", "env=pendulum", "trainer.max_epochs=2", "trainer.epoch_num_steps=600",
            "trainer.random_warmup_env_steps=300"],
    "dqn-prioritized": ["algo=dqn", "env=cartpole", "algo.n_step=1", "buffer=prioritized",
                        "trainer.max_epochs=2", "trainer.epoch_num_steps=1000",
                        "env.normalize.reward=true"],
}


@pytest.mark.parametrize("device", DEVICES)
# SAC with the slow checks (15 s on the 2-core machine)
@pytest.mark.parametrize("name", [pytest.param("sac", marks=pytest.mark.slow), "dqn-prioritized"])
def test_a_run_learns_the_same_with_the_replay_on_the_device(tmp_path, caplog, name, device):
    """Every learning record with the device copy (``buffer.on_device=true``)
    is the run's without, which an online run's default (null) is (continuous actions;
    discrete ones with prioritised replay, its importance weights and priority updates, and
    scaled rewards)."""
    same_with_and_without(tmp_path, caplog, [*RUNS[name], "seed=2"], device, ("true", "null"))


def same_with_and_without(tmp_path: Path, caplog: pytest.LogCaptureFixture, args: list[str],
                          device: str, settings: tuple[str, str]) -> None:
    """Runs ``args`` with the first ``buffer.on_device`` setting (which must keep a copy)
    and the second (which must not): the same learning records."""
    caplog.set_level(logging.INFO)
    runs, logged = [], []
    for on in settings:
        caplog.clear()
        runs.append(tmp_path / on)
        run_in_process(runs[-1], *args, f"device={device}", f"buffer.on_device={on}",
                       "logger.tensorboard=false")
        logged.append(caplog.text)
    copied, host = runs
    assert f"replay buffer: a copy on {device}" in logged[0]
    assert "replay buffer: a copy" not in logged[1]
    assert learning_records(copied) == learning_records(host)


@pytest.mark.parametrize("device", DEVICES)
def test_an_offline_run_learns_the_same_from_a_dataset_on_the_device(tmp_path, caplog, device):
    """The dataset, loaded, copied to the device whole; BC's batches gathered there: by
    default (null) on CUDA, asked for (true) on a CPU, where the default keeps none."""
    data = random_dataset(tmp_path / "random.npz", episodes=6)
    same_with_and_without(tmp_path, caplog, ["algo=bc", "env=cartpole", f"dataset={data}",
                                          "trainer.max_epochs=2", "trainer.epoch_num_steps=200"],
                          device, ("true", "null") if device == "cpu" else ("null", "false"))


def test_a_run_with_the_replay_on_the_device_resumes_exactly(tmp_path, caplog):
    """Resumed from its epoch-1 checkpoint, the device copy is made again from the restored
    buffer: the records are the unbroken run's."""
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    # a gradient step every 4 env steps, not every one: each epoch still samples the device
    # copy 100 times, and the resume is what is checked
    run_in_process(full, *RUNS["sac"][:2], "trainer.max_epochs=3", "trainer.epoch_num_steps=400",
                   "trainer.random_warmup_env_steps=200", "buffer.on_device=true", "seed=4",
                   "logger.tensorboard=false", "trainer.collection_step_num_env_steps=4",
                   "trainer.update_step_num_gradient_steps_per_sample=0.25")
    shutil.copytree(full, resumed)
    checkpoints = resumed / "checkpoints"
    (first,) = checkpoints.glob("ckpt_*_00001.pt")
    first_bytes = first.read_bytes()
    for path in checkpoints.glob("*.pt"):
        path.unlink()
    (checkpoints / "last.pt").write_bytes(first_bytes)
    caplog.set_level(logging.INFO)
    assert resume_in_process(resumed) == (0, [])
    assert any(m.startswith("resumed at epoch 1") and m.endswith("(exact)")
               for m in caplog.messages), caplog.messages
    assert learning_records(resumed) == learning_records(full)


@pytest.mark.parametrize(("args", "why"), [
    (["algo=dqn", "env=cartpole", "algo.n_step=3"], "builds n-step batches (algo.n_step=3)"),
    (["algo=ppo", "env=cartpole"], None),  # on-policy: no replay buffer, nothing to copy
])
def test_what_cannot_have_the_replay_on_the_device_is_refused_by_name(tmp_path, args, why):
    args = [*args, "buffer.on_device=true", "trainer.max_epochs=1",
            "trainer.epoch_num_steps=300", *(["trainer.random_warmup_env_steps=100"]
                                               if "algo=dqn" in args else [])]
    if why is None:
        assert run_in_process(tmp_path / "run", *args).status == "completed"
        return
    message = refusal(tmp_path / "run", *args)
    assert "\n" not in message, message
    assert "buffer.on_device=true: no copy of the replay buffer on cpu" in message
    assert why in message and "buffer.on_device=null" in message
