"""Host arrays on their way to an algorithm's device (``Algorithm._tensor``): the values and
dtypes the losses receive; on CUDA, the page-locked copies that do not wait against the plain
ones."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch

from conftest import compose_run
from rltrain.assembly.build import Parts, build_parts, build_trainer
from rltrain.assembly.checked_config import settings
from rltrain.common.types import Progress


@contextmanager
def built(*overrides: str) -> Iterator[Parts]:
    parts = build_parts(settings(compose_run("experiment=smoke", *overrides)))
    try:
        yield parts
    finally:
        parts.close()


def test_host_arrays_reach_the_device_as_asked():
    """Every kind of host value a batch holds arrives with its values and the asked dtype:
    read-only and reversed (negative-stride) arrays, integer indices, a Python list asked for
    as float64 (no pass through float32 on the way)."""
    with built("algo=sac", "env=pendulum") as parts:
        algo = parts.algorithm
        x = np.arange(12, dtype=np.float64).reshape(3, 4) / 7
        readonly = x.copy()
        readonly.flags.writeable = False
        cases = [(x, torch.float32), (readonly, torch.float32), (x[::-1], torch.float64),
                 (np.array([3, 0, 2]), torch.long), (np.arange(5, dtype=np.uint8), torch.uint8)]
        for value, dtype in cases:
            got = algo._tensor(value, dtype)
            assert got.dtype == dtype and got.device == algo.device
            np.testing.assert_array_equal(got.numpy(), np.asarray(value).astype(got.numpy().dtype))
        fine = [0.1, 1 / 3]
        got = algo._tensor(fine, torch.float64)
        assert got.tolist() == fine  # float64 throughout: 1/3 survives to the last bit


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
@pytest.mark.parametrize("algo_name, env", [("sac", "pendulum"), ("dqn", "cartpole")])
def test_pinned_copies_train_as_plain_copies(algo_name, env, device):
    """On CUDA, the page-locked, non-waiting copies of each batch give bit for bit the updates
    of plain copies: each copy is ordered before the kernels that read it. (On the CPU, which
    copies nothing, two plain runs: the check itself.)"""
    finals = []
    for pinned in ((True, False) if device == "cuda" else (False, False)):
        overrides = [f"algo={algo_name}", f"env={env}", f"device={device}", "seed=3"]
        s = settings(compose_run("experiment=smoke", *overrides))
        parts = build_parts(s)
        try:
            trainer = build_trainer(s, parts)
            algo, buffer = parts.algorithm, parts.storage.buffer
            assert not algo.pinned_copies  # the default for eager losses
            algo.pinned_copies = pinned
            assert parts.train_collector is not None
            parts.train_collector.collect(trainer.random_policy, n_steps=600)
            for i in range(20):
                batch = trainer.reader.batch(buffer, 64, 0.5)
                algo.update(batch, progress=Progress(0, i, 0.5))
            finals.append({k: v.detach().cpu().clone() for k, v in algo.state_dict().items()})
        finally:
            parts.close()
    assert finals[0].keys() == finals[1].keys()
    for k in finals[0]:
        assert torch.equal(finals[0][k], finals[1][k]), k
