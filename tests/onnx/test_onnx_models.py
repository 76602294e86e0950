"""Whole models through :mod:`pydnnl.onnx` against ``onnx.reference.ReferenceEvaluator``, the
backend's errors, and ``import pydnnl`` staying free of onnx."""
from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from onnx_models import small_cnn, small_lstm  # noqa: E402

import pydnnl  # noqa: E402
from pydnnl.onnx import PydnnlBackend, onnx_invalid, onnx_unsupported  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
# float32 sums in another order than the reference's (float32 too): a few ulps per term
RTOL, ATOL = 1e-4, 1e-5


def _check(model, feeds):
    want = ReferenceEvaluator(model).run(None, feeds)
    got = PydnnlBackend.run_model(model, feeds)
    assert len(got) == len(want)
    for name, g, w in zip([o.name for o in model.graph.output], got, want):
        assert g.shape == w.shape, name
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=name)


def test_small_cnn_matches_reference():
    x = np.random.default_rng(3).standard_normal((2, 3, 16, 16)).astype(np.float32)
    _check(small_cnn(), {"x": x})


def test_small_lstm_matches_reference():
    rng = np.random.default_rng(4)
    feeds = {"x": rng.standard_normal((7, 3, 5)).astype(np.float32),
             "h0": rng.uniform(-0.5, 0.5, (2, 3, 6)).astype(np.float32),
             "c0": rng.uniform(-0.5, 0.5, (2, 3, 6)).astype(np.float32)}
    _check(small_lstm(), feeds)


def test_symbolic_batch_builds_per_shape():
    """A symbolic dim: primitives are created at the first run of each input shape."""
    model = small_cnn(batch="N")
    rep = PydnnlBackend.prepare(model)
    ref = ReferenceEvaluator(model)
    rng = np.random.default_rng(5)
    for n in (1, 3, 1):
        x = rng.standard_normal((n, 3, 16, 16)).astype(np.float32)
        for g, w in zip(rep.run([x]), ref.run(None, {"x": x})):
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
    assert len(rep._programs) == 2


def test_run_node():
    node = helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.2)
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    y, = PydnnlBackend.run_node(node, [x])
    np.testing.assert_allclose(y, np.where(x > 0, x, 0.2 * x), rtol=1e-6)


def _one_node_model(node, inputs, out_shape, inits=()):
    f = TensorProto.FLOAT
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, f, s)
                                            for n, s in inputs],
                              [helper.make_tensor_value_info(node.output[0], f, out_shape)],
                              list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_lstm_clip_names_node_and_attribute():
    from onnx import numpy_helper
    h, i = 4, 3
    inits = [numpy_helper.from_array(np.zeros((1, 4 * h, i), np.float32), "W"),
             numpy_helper.from_array(np.zeros((1, 4 * h, h), np.float32), "R")]
    node = helper.make_node("LSTM", ["x", "W", "R"], ["y"], name="enc", hidden_size=h,
                            clip=3.0)
    with pytest.raises(onnx_unsupported, match=r"LSTM node 'enc': clip .*pre-activations"):
        PydnnlBackend.prepare(_one_node_model(node, [("x", [5, 2, i])], [5, 1, 2, h], inits))


def test_unknown_operator_names_node():
    node = helper.make_node("Erf", ["x"], ["y"], name="erf0")
    with pytest.raises(onnx_unsupported, match="Erf node 'erf0': operator not supported"):
        PydnnlBackend.prepare(_one_node_model(node, [("x", [2, 2])], [2, 2]))
    assert issubclass(onnx_unsupported, pydnnl.unimplemented)


def test_wrong_input_shape():
    rep = PydnnlBackend.prepare(small_cnn())
    want = r"graph input 'x': expected shape \[2, 3, 16, 16\], got \[2, 3, 8, 8\]"
    with pytest.raises(onnx_invalid, match=want):
        rep.run([np.zeros((2, 3, 8, 8), np.float32)])


def test_import_pydnnl_does_not_import_onnx():
    code = "import sys, pydnnl; assert 'onnx' not in sys.modules, 'onnx imported'"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr


def test_dead_tensors_give_their_buffers_to_later_nodes():
    """x -> Relu -> Tanh -> Sigmoid -> Abs: each result but the output is read once, so two
    buffers serve the four results (plus the input's own)."""
    f = TensorProto.FLOAT
    ops = ["Relu", "Tanh", "Sigmoid", "Abs"]
    names = ["x", "a", "b", "c", "y"]
    nodes = [helper.make_node(op, [names[k]], [names[k + 1]], name=op.lower())
             for k, op in enumerate(ops)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", f, [64, 32])],
                              [helper.make_tensor_value_info("y", f, [64, 32])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(6).standard_normal((64, 32)).astype(np.float32)
    rep = PydnnlBackend.prepare(model)
    np.testing.assert_allclose(rep.run([x])[0], ReferenceEvaluator(model).run(None, {"x": x})[0],
                               rtol=1e-6, atol=1e-6)
    assert rep.program({"x": x}).nbytes == 3 * x.nbytes


def test_supports_device():
    assert PydnnlBackend.supports_device("CPU")
    assert PydnnlBackend.supports_device("GPU") == (
        pydnnl.engine.get_count(pydnnl.engine.kind.gpu) > 0)
    assert not PydnnlBackend.supports_device("TPU")
    with pytest.raises(onnx_invalid, match="device: expected 'CPU' or 'GPU'"):
        PydnnlBackend.prepare(small_cnn(), device="TPU")
