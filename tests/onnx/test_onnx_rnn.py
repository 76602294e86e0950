"""LSTM / GRU / RNN nodes through :mod:`pydnnl.onnx`: directions, layouts, initial states and
linear_before_reset against ``onnx.reference.ReferenceEvaluator``; sequence_lens against the
evaluator run on each sequence alone (it ignores sequence_lens); the vanilla RNN activations
its RNN lacks against an unrolled graph of MatMul / Add / activation nodes; the attributes
oneDNN's cells do not have raise errors naming node and attribute."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from pydnnl.onnx import PydnnlBackend, onnx_unsupported

F = TensorProto.FLOAT
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
T, N, I, H = 5, 3, 4, 3


def _model(op, attrs, t=T, n=N, d=1, lens=None, layout=0, states=False, seed=0):
    g = GATES[op]
    rng = np.random.default_rng(seed)
    u = lambda *s: rng.uniform(-0.5, 0.5, s).astype(np.float32)  # noqa: E731
    inits = [numpy_helper.from_array(u(d, g * H, I), "W"),
             numpy_helper.from_array(u(d, g * H, H), "R"),
             numpy_helper.from_array(u(d, 2 * g * H), "B")]
    ins = ["x", "W", "R", "B", ""]
    if lens is not None:
        inits.append(numpy_helper.from_array(np.array(lens, np.int32), "L"))
        ins[4] = "L"
    state = [d, n, H] if layout == 0 else [n, d, H]
    gin = [helper.make_tensor_value_info("x", F, [t, n, I] if layout == 0 else [n, t, I])]
    if states:
        ins.append("h0")
        gin.append(helper.make_tensor_value_info("h0", F, state))
        if op == "LSTM":
            ins.append("c0")
            gin.append(helper.make_tensor_value_info("c0", F, state))
    node = helper.make_node(op, ins, ["y", "yh"], name="rnn0", hidden_size=H, layout=layout,
                            **attrs)
    out = [helper.make_tensor_value_info("y", F, [t, d, n, H] if layout == 0 else [n, t, d, H]),
           helper.make_tensor_value_info("yh", F, state)]
    graph = helper.make_graph([node], "g", gin, out, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(model, seed=1):
    rng = np.random.default_rng(seed)
    return {vi.name: rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim])
            .astype(np.float32) for vi in model.graph.input}


CASES = [(op, direction, layout, states)
         for op in ("LSTM", "GRU", "RNN")
         for direction in ("forward", "reverse", "bidirectional")
         for layout, states in ((0, False), (1, True))]


@pytest.mark.parametrize("op,direction,layout,states", CASES)
def test_matches_reference(op, direction, layout, states):
    d = 2 if direction == "bidirectional" else 1
    model = _model(op, {"direction": direction}, d=d, layout=layout, states=states)
    feeds = _feeds(model)
    for g, w in zip(PydnnlBackend.run_model(model, feeds),
                    ReferenceEvaluator(model).run(None, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_gru_linear_before_reset_matches_reference():
    model = _model("GRU", {"linear_before_reset": 1, "direction": "bidirectional"}, d=2,
                   states=True)
    feeds = _feeds(model)
    for g, w in zip(PydnnlBackend.run_model(model, feeds),
                    ReferenceEvaluator(model).run(None, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op,direction,lens", [("LSTM", "forward", [5, 3, 2]),
                                               ("LSTM", "bidirectional", [2, 5, 1]),
                                               ("GRU", "reverse", [2, 5, 4]),
                                               ("RNN", "bidirectional", [3, 1, 5])])
def test_sequence_lens(op, direction, lens):
    d = 2 if direction == "bidirectional" else 1
    x = np.random.default_rng(2).standard_normal((T, N, I)).astype(np.float32)
    y, yh = PydnnlBackend.run_model(_model(op, {"direction": direction}, d=d, lens=lens),
                                    {"x": x})
    for k, ln in enumerate(lens):
        alone = _model(op, {"direction": direction}, t=ln, n=1, d=d)
        ry, ryh = ReferenceEvaluator(alone).run(None, {"x": x[:ln, k:k + 1]})
        np.testing.assert_allclose(y[:ln, :, k:k + 1], ry, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(yh[:, k:k + 1], ryh, rtol=1e-5, atol=1e-6)
        assert not np.any(y[ln:, :, k]), "Y past a sequence's end is zero"


def _unrolled_rnn(model, act: str, alpha: float | None):
    """The same RNN as plain MatMul / Add / activation nodes (forward, no initial state)."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    w, r, b = inits["W"][0], inits["R"][0], inits["B"][0]
    consts = [numpy_helper.from_array(np.ascontiguousarray(w.T), "Wt"),
              numpy_helper.from_array(np.ascontiguousarray(r.T), "Rt"),
              numpy_helper.from_array(b[:H] + b[H:], "Bs"),
              numpy_helper.from_array(np.zeros((N, H), np.float32), "h_init")]
    nodes, prev, hs = [], "h_init", []
    extra = {"alpha": alpha} if alpha is not None else {}
    for t in range(T):
        nodes += [
            helper.make_node("Gather", ["x", f"i{t}"], [f"x{t}"], axis=0),
            helper.make_node("MatMul", [f"x{t}", "Wt"], [f"a{t}"]),
            helper.make_node("MatMul", [prev, "Rt"], [f"b{t}"]),
            helper.make_node("Add", [f"a{t}", f"b{t}"], [f"c{t}"]),
            helper.make_node("Add", [f"c{t}", "Bs"], [f"d{t}"]),
            helper.make_node(act, [f"d{t}"], [f"h{t}"], **extra),
        ]
        consts.append(numpy_helper.from_array(np.array(t, np.int64), f"i{t}"))
        prev = f"h{t}"
        hs.append(prev)
    nodes.append(helper.make_node("Concat", hs, ["ycat"], axis=0))
    graph = helper.make_graph(nodes, "unrolled", [helper.make_tensor_value_info("x", F, [T, N, I])],
                              [helper.make_tensor_value_info("ycat", F, [T * N, H])], consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("act,alpha", [("Relu", None), ("Sigmoid", None), ("LeakyRelu", 0.3)])
def test_rnn_activations_match_unrolled_reference(act, alpha):
    attrs = {"activations": [act]}
    if alpha is not None:
        attrs["activation_alpha"] = [alpha]
    model = _model("RNN", attrs)
    x = np.random.default_rng(3).standard_normal((T, N, I)).astype(np.float32)
    y, yh = PydnnlBackend.run_model(model, {"x": x})
    want, = ReferenceEvaluator(_unrolled_rnn(model, act, alpha)).run(None, {"x": x})
    np.testing.assert_allclose(y.reshape(T * N, H), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(yh[0], want[-N:], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op,attrs,match", [
    ("LSTM", {"clip": 2.0}, "clip"),
    ("LSTM", {"activations": ["Sigmoid", "Tanh", "Relu"]}, "activations"),
    ("LSTM", {"input_forget": 1}, "input_forget"),
    ("GRU", {"activation_alpha": [1.0, 1.0]}, "activation_alpha"),
    ("RNN", {"activations": ["Relu", "Tanh"], "direction": "bidirectional"}, "activations"),
])
def test_unsupported_attributes_name_node_and_attribute(op, attrs, match):
    d = 2 if attrs.get("direction") == "bidirectional" else 1
    with pytest.raises(onnx_unsupported, match=rf"{op} node 'rnn0': {match}"):
        PydnnlBackend.prepare(_model(op, attrs, d=d))


def test_computed_weights_name_the_input():
    model = _model("GRU", {})
    w = model.graph.initializer[0]
    model.graph.node.insert(0, helper.make_node("Neg", ["W0"], ["W"], name="w_neg"))
    w.name = "W0"
    with pytest.raises(onnx_unsupported, match=r"GRU node 'rnn0': W \(input 1, 'W'\) must be a "
                                               r"constant"):
        PydnnlBackend.prepare(model)
