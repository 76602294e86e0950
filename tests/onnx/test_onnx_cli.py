"""``python -m pydnnl.onnx model.onnx --inputs x.npy`` on the small CNN."""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from onnx_models import small_cnn  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_cli_prints_shapes_and_node_times(tmp_path):
    model = small_cnn()
    onnx.save(model, tmp_path / "model.onnx")
    x = np.random.default_rng(7).standard_normal((2, 3, 16, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = subprocess.run(
        [sys.executable, "-m", "pydnnl.onnx", str(tmp_path / "model.onnx"), "--inputs",
         str(tmp_path / "x.npy"), "--repeat", "2", "--save", str(tmp_path / "out")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "output probs: shape [2, 5] float32" in out, out
    assert "output m2: shape [2, 8] float32" in out, out
    for node in model.graph.node:      # one line per node: name, op type, ms (or why none)
        line = rf"^{node.name}\s+{node.op_type}\s+(\d+\.\d+|view|fused into \w+)$"
        assert re.search(line, out, re.M), (node.name, out)
    assert re.search(r"^flatten\s+Flatten\s+view$", out, re.M), out
    assert re.search(r"^relu1\s+Relu\s+fused into conv1$", out, re.M), out
    assert re.search(r"^lrelu2\s+LeakyRelu\s+\d", out, re.M), out   # after a BatchNorm
    want = ReferenceEvaluator(model).run(None, {"x": x})
    for i, w in enumerate(want):
        np.testing.assert_allclose(np.load(tmp_path / f"out{i}.npy"), w, rtol=1e-4, atol=1e-5)
