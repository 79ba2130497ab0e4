"""Eval and export of image and Dict policies through the real commands: rltrain-eval runs the
saved policy on the env's own observations, and rltrain-export writes an ONNX graph whose
inputs are the env's raw observation (uint8 images; one input per Dict key, named after it)
and checks it against torch on 256 random observations."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from conftest import command, run_in_process
from pixel_envs import DICT_ID, PIXELS_ID
from rltrain.commands import evaluate, export

CASES = {
    "image": (PIXELS_ID, "dqn", [("obs", onnx.TensorProto.UINT8, ["batch", 12, 12, 2])]),
    "dict": (DICT_ID, "sac", [("flag", onnx.TensorProto.INT64, ["batch"]),
                              ("image", onnx.TensorProto.UINT8, ["batch", 6, 6, 1]),
                              ("pos", onnx.TensorProto.FLOAT, ["batch", 2])]),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_eval_and_export_take_the_envs_own_observations(tmp_path, kind):
    env_id, algo, inputs = CASES[kind]
    run_dir = tmp_path / "run"
    # SAC's per-key encoders cost 15 ms a gradient step here: a quarter of them will do
    extra = [] if algo == "dqn" else ["env.kwargs.continuous=true",
                                      "trainer.update_step_num_gradient_steps_per_sample=0.25"]
    run_in_process(run_dir, "experiment=smoke", f"algo={algo}", "env=gym",
                   f"env.id=pixel_envs:{env_id}", *extra)

    res = command(evaluate.main, run_dir, "--episodes", "2")
    assert res.returncode == 0, res.stderr
    returns = json.loads((run_dir / "eval.json").read_text())["returns"]
    assert len(returns) == 2 and all(0 <= r <= 20 for r in returns)

    out = tmp_path / "policy.onnx"
    res = command(export.main, run_dir, "--out", out)
    assert res.returncode == 0, res.stderr
    assert "onnxruntime check on 256 random observations: ONNX matches torch" in res.stdout
    graph = onnx.load(str(out)).graph
    got = [(i.name, i.type.tensor_type.elem_type,
            [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim])
           for i in graph.input]
    assert got == inputs
    # the graph runs on what the env gives, as it gives it
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    feed = {name: np.zeros([3, *dims[1:]], dtype=onnx.helper.tensor_dtype_to_np_dtype(t))
            for name, t, dims in inputs}
    assert len(session.run(["action"], feed)[0]) == 3
