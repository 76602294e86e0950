"""RNN forward primitives against ONNX, an implementation nobody here wrote: the LSTM / GRU /
RNN node test cases shipped in the onnx wheel (their stored expected outputs), and random
problems run through ``onnx.reference.ReferenceEvaluator`` (single recurrent nodes, and
unrolled graphs of plain ops for the vanilla RNN activations ONNX's RNN evaluator lacks).

Tensors are mapped with :mod:`pydnnl.reference.onnx_convert` (gate orders: ONNX LSTM i,o,f,c
-> oneDNN i,f,c,o; peephole i,o,f -> i,f,o; GRU z,r,h = u,r,o; ONNX bidirectional = oneDNN
bidirectional_concat for one layer) and run through the pydnnl primitive on every device.
"""
from __future__ import annotations

import functools
import importlib
import pathlib
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from rnn_helpers import ACT_ALG, F32, assert_close, stable_seed, tag  # noqa: E402

import pydnnl as dnnl  # noqa: E402
from pydnnl.reference import onnx_convert as oc  # noqa: E402

_CLS = {"vanilla_lstm": dnnl.lstm_forward, "vanilla_gru": dnnl.gru_forward,
        "lbr_gru": dnnl.lbr_gru_forward, "vanilla_rnn": dnnl.vanilla_rnn_forward}


# --------------------------------------------------------------------------------------------
# running a mapped ONNX node through the primitive
# --------------------------------------------------------------------------------------------
def run_primitive(engine, stream, kw: dict, prop: str = "forward_inference", *,
                  batchwise_raw: dict | None = None):
    """Run the oneDNN problem ``kw`` (keyword arguments of rnn_forward, as produced by
    ``onnx_convert.onnx_node_to_onednn``) through the pydnnl primitive in f32.

    Returns (dst_layer, dst_iter, dst_iter_c) as logical arrays. With ``batchwise_raw``
    (ONNX layout=1: ``{"X": [N, T, I] array}``), src_layer and dst_layer are declared ``ntc``
    and dst_iter ``cabd`` (N outermost), X's bytes are copied into the buffer as they are,
    and the raw output buffers are returned reshaped to ONNX's layout-1 Y [N, T, D, H] and
    Y_h [N, D, H] instead.
    """
    cell = kw["cell"]
    cls = _CLS[cell]
    x = kw["src_layer"].astype(np.float32)
    wl = kw["weights_layer"].astype(np.float32)
    wi = kw["weights_iter"].astype(np.float32)
    b = kw["bias"].astype(np.float32)
    T, N, SLC = x.shape
    L, D, _, G, H = wl.shape
    DLC = 2 * H if kw["direction"] == "bidirectional_concat" else H
    md = lambda dims, t: dnnl.memory.desc(list(dims), F32, t)  # noqa: E731
    raw = batchwise_raw is not None
    descs = {
        "src_layer_desc": md(x.shape, tag.ntc if raw else tag.tnc),
        "weights_layer_desc": md(wl.shape, tag.ldigo),
        "weights_iter_desc": md(wi.shape, tag.ldigo),
        "bias_desc": md(b.shape, tag.ldgo),
        "dst_layer_desc": md((T, N, DLC), tag.ntc if raw else tag.tnc),
        "dst_iter_desc": md((L, D, N, H), "cabd" if raw else tag.ldnc),
    }
    vals = {"src_layer_desc": x, "weights_layer_desc": wl, "weights_iter_desc": wi,
            "bias_desc": b}
    if kw.get("src_iter") is not None:
        descs["src_iter_desc"] = md(kw["src_iter"].shape, tag.ldnc)
        vals["src_iter_desc"] = kw["src_iter"].astype(np.float32)
    if cell == "vanilla_lstm":
        descs["dst_iter_c_desc"] = md((L, D, N, H), tag.ldnc)
        if kw.get("src_iter_c") is not None:
            descs["src_iter_c_desc"] = md(kw["src_iter_c"].shape, tag.ldnc)
            vals["src_iter_c_desc"] = kw["src_iter_c"].astype(np.float32)
        if kw.get("weights_peephole") is not None:
            descs["weights_peephole_desc"] = md(kw["weights_peephole"].shape, tag.ldgo)
            vals["weights_peephole_desc"] = kw["weights_peephole"].astype(np.float32)
    head = [engine, getattr(dnnl.prop_kind, prop)]
    extra = {}
    if cell == "vanilla_rnn":
        head.append(ACT_ALG[kw.get("activation", "tanh")])
        extra["alpha"] = kw.get("alpha", 0.0)
    head.append(getattr(dnnl.rnn_direction, kw["direction"]))
    pd = cls.primitive_desc(*head, **descs, **extra)

    args = {}
    arg_of = {"src_layer_desc": dnnl.ARG_SRC_LAYER, "src_iter_desc": dnnl.ARG_SRC_ITER,
              "src_iter_c_desc": dnnl.ARG_SRC_ITER_C, "weights_layer_desc": dnnl.ARG_WEIGHTS_LAYER,
              "weights_iter_desc": dnnl.ARG_WEIGHTS_ITER,
              "weights_peephole_desc": dnnl.ARG_WEIGHTS_PEEPHOLE, "bias_desc": dnnl.ARG_BIAS,
              "dst_layer_desc": dnnl.ARG_DST_LAYER, "dst_iter_desc": dnnl.ARG_DST_ITER,
              "dst_iter_c_desc": dnnl.ARG_DST_ITER_C}
    for name, v in vals.items():
        if name == "src_layer_desc" and raw:
            m = dnnl.memory(descs[name], engine)
            import pyopencl as cl
            cl.enqueue_copy(engine.default_queue, m.get_data_handle(),
                            np.ascontiguousarray(batchwise_raw["X"], np.float32), is_blocking=True)
            args[arg_of[name]] = m
        else:
            args[arg_of[name]] = dnnl.memory(descs[name], engine, v)
    outs = {}
    for name in ("dst_layer_desc", "dst_iter_desc", "dst_iter_c_desc"):
        if name in descs:
            m = dnnl.memory(descs[name], engine)
            m.write(np.full(descs[name].get_dims(), np.nan, np.float32))
            outs[name] = args[arg_of[name]] = m
    if prop == "forward_training":
        args[dnnl.ARG_WORKSPACE] = dnnl.memory(pd.workspace_desc(), engine)
    cls(pd).execute(stream, args)
    stream.wait()
    if raw:
        y = outs["dst_layer_desc"].read_raw().reshape(N, T, D, H)
        yh = outs["dst_iter_desc"].read_raw().reshape(N, D, H)
        return y, yh, None
    dl = outs["dst_layer_desc"].to_numpy()
    di = outs["dst_iter_desc"].to_numpy()
    dc = outs["dst_iter_c_desc"].to_numpy() if "dst_iter_c_desc" in outs else None
    return dl, di, dc


def primitive_onnx_outputs(engine, stream, op_type, attrs, inputs, prop="forward_inference"):
    """ONNX (Y, Y_h, Y_c) of one layout-0 node computed by the pydnnl primitive."""
    kw = oc.onnx_node_to_onednn(op_type, attrs, inputs)
    D = kw["weights_layer"].shape[1]
    dl, di, dc = run_primitive(engine, stream, kw, prop)
    return oc.onednn_to_onnx_outputs(dl, di, dc, D)


# --------------------------------------------------------------------------------------------
# 1. the ONNX node test cases (expected outputs stored in the wheel)
# --------------------------------------------------------------------------------------------
EXPECTED_CASES = {
    "test_lstm_defaults", "test_lstm_with_initial_bias", "test_lstm_with_peepholes",
    "test_lstm_batchwise", "test_lstm_reverse", "test_lstm_bidirectional",
    "test_gru_defaults", "test_gru_with_initial_bias", "test_gru_seq_length",
    "test_gru_batchwise", "test_gru_reverse", "test_gru_bidirectional",
    "test_simple_rnn_defaults", "test_simple_rnn_with_initial_bias", "test_rnn_seq_length",
    "test_simple_rnn_batchwise", "test_simple_rnn_reverse", "test_simple_rnn_bidirectional",
}


@functools.lru_cache(maxsize=None)
def onnx_rnn_node_cases():
    """The LSTM / GRU / RNN node test cases of ``onnx.backend.test.case.node``.

    Importing a case module runs its export functions, which append to the package-level
    list ``_NodeTestCases``; a module imports once per process, so when another test file
    imported it first (through collect_testcases for another op, which drops the cases) it
    is reloaded.
    """
    import onnx.backend.test.case.node as node_pkg

    def ours():
        return {c.name: c for c in node_pkg._NodeTestCases
                if c.model is not None and c.model.graph.node[0].op_type in ("LSTM", "GRU", "RNN")}

    for m, op in (("lstm", "LSTM"), ("gru", "GRU"), ("rnn", "RNN")):
        name = f"onnx.backend.test.case.node.{m}"
        saved, node_pkg._TargetOpType = node_pkg._TargetOpType, None
        try:
            if name not in sys.modules:
                importlib.import_module(name)
            elif not any(c.model.graph.node[0].op_type == op for c in ours().values()):
                importlib.reload(sys.modules[name])
        finally:
            node_pkg._TargetOpType = saved
    cases = ours()
    return tuple(cases[k] for k in sorted(cases))


def _case_io(case):
    node = case.model.graph.node[0]
    (ins, outs), = case.data_sets
    inputs = dict(zip([n for n in node.input if n], ins))
    outputs, k = {}, 0
    for pos, n in enumerate(node.output):
        if n:
            outputs[pos] = outs[k]
            k += 1
    return node, inputs, outputs


def test_onnx_node_cases_present():
    names = {c.name for c in onnx_rnn_node_cases()}
    assert EXPECTED_CASES <= names, f"missing ONNX node cases: {EXPECTED_CASES - names}"


@pytest.mark.parametrize("case", onnx_rnn_node_cases(), ids=lambda c: c.name)
def test_onnx_node_case_on_primitive(engine, stream, case):
    node, inputs, outputs = _case_io(case)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    layout = int(attrs.pop("layout", 0))
    assert layout in (0, 1), layout
    assert outputs, case.name
    # every case of the wheel maps onto oneDNN (none uses clip, variable lengths, ...)
    kw = oc.onnx_node_to_onednn(node.op_type, attrs,
                                oc.from_batchwise(inputs) if layout == 1 else inputs)
    D = kw["weights_layer"].shape[1]
    if layout == 1:
        # ONNX layout 1 is oneDNN's ntc: hand X's bytes over as they are
        got = run_primitive(engine, stream, kw, batchwise_raw={"X": inputs["X"]})
    else:
        got = oc.onednn_to_onnx_outputs(*run_primitive(engine, stream, kw), D)
    for pos, want in outputs.items():
        assert got[pos] is not None, f"{case.name}: output {pos} missing"
        assert_close(got[pos], want, f"{case.name} output {node.output[pos]}")


# --------------------------------------------------------------------------------------------
# 2. random problems through ONNX's ReferenceEvaluator
# --------------------------------------------------------------------------------------------
_ONNX_INPUTS = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]
T, N, I, H = 3, 2, 5, 6


def run_onnx_node(op_type, inputs, **attrs):
    """One ONNX recurrent node through ReferenceEvaluator (in float64); (Y, Y_h, Y_c)."""
    names = _ONNX_INPUTS if op_type == "LSTM" else _ONNX_INPUTS[:6]
    node_inputs = [n if inputs.get(n) is not None else "" for n in names]
    while node_inputs and node_inputs[-1] == "":
        node_inputs.pop()
    outputs = ["Y", "Y_h", "Y_c"] if op_type == "LSTM" else ["Y", "Y_h"]
    node = helper.make_node(op_type, node_inputs, outputs, **attrs)
    g_in = [helper.make_tensor_value_info(n, TensorProto.DOUBLE, None) for n in node_inputs if n]
    g_out = [helper.make_tensor_value_info(n, TensorProto.DOUBLE, None) for n in outputs]
    model = helper.make_model(helper.make_graph([node], "g", g_in, g_out))
    feeds = {n: inputs[n].astype(np.float64) for n in node_inputs if n}
    res = ReferenceEvaluator(model).run(None, feeds)
    return tuple(res) + ((None,) if op_type != "LSTM" else ())


def random_onnx_inputs(op_type, direction, *, peephole=False, init=False, seed=0):
    """Random ONNX tensors (f32 values; the evaluator gets them widened to f64)."""
    rng = np.random.default_rng(seed)
    D = 2 if direction == "bidirectional" else 1
    G = {"LSTM": 4, "GRU": 3, "RNN": 1}[op_type]

    def rnd(*shape, s=0.5):
        return (rng.standard_normal(shape) * s).astype(np.float32)

    inp = {"X": rnd(T, N, I, s=1.0), "W": rnd(D, G * H, I), "R": rnd(D, G * H, H),
           "B": rnd(D, 2 * G * H)}
    if init:
        inp["initial_h"] = rnd(D, N, H, s=1.0)
        if op_type == "LSTM":
            inp["initial_c"] = rnd(D, N, H, s=1.0)
    if peephole:
        inp["P"] = rnd(D, 3 * H)
    return inp


def _compare(got, want, what):
    for name, w, g in zip(["Y", "Y_h", "Y_c"], want, got):
        if w is None:
            assert g is None, f"{what}: {name} should be absent"
            continue
        assert_close(g, w, f"{what} {name}")


@pytest.mark.sampled(every=5)
@pytest.mark.parametrize("prop", ["forward_inference", "forward_training"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("init", [False, True], ids=["zero_state", "initial_state"])
@pytest.mark.parametrize("variant", ["LSTM", "LSTM_peephole", "GRU_lbr0", "GRU_lbr1", "RNN_Tanh"])
def test_random_node_matches_onnx_evaluator(engine, stream, variant, init, direction, prop):
    """LSTM (with peepholes P: ONNX order i, o, f), GRU linear_before_reset 0 (gru_forward)
    and 1 (lbr_gru_forward), RNN Tanh; ONNX bidirectional = bidirectional_concat."""
    op_type = variant.split("_")[0]
    attrs = {"hidden_size": H, "direction": direction}
    if op_type == "GRU":
        attrs["linear_before_reset"] = int(variant[-1])
    inputs = random_onnx_inputs(op_type, direction, peephole=variant == "LSTM_peephole",
                                init=init, seed=stable_seed(variant, init, direction))
    want = run_onnx_node(op_type, inputs, **attrs)
    got = primitive_onnx_outputs(engine, stream, op_type, attrs, inputs, prop)
    _compare(got, want, variant)


def test_gru_lbr_flag_selects_the_primitive(engine, stream):
    """Guard against a vacuous comparison: the two GRU flavours differ on this data, and
    each primitive matches only its own ONNX flavour."""
    inputs = random_onnx_inputs("GRU", "forward", init=True, seed=3)
    base = {"hidden_size": H, "direction": "forward"}
    y0 = run_onnx_node("GRU", inputs, linear_before_reset=0, **base)[0]
    y1 = run_onnx_node("GRU", inputs, linear_before_reset=1, **base)[0]
    assert np.abs(y0 - y1).max() > 1e-3
    g0 = primitive_onnx_outputs(engine, stream, "GRU", {**base, "linear_before_reset": 0},
                                inputs)[0]
    g1 = primitive_onnx_outputs(engine, stream, "GRU", {**base, "linear_before_reset": 1},
                                inputs)[0]
    assert_close(g0, y0, "lbr 0")
    assert_close(g1, y1, "lbr 1")
    assert np.abs(g0 - y1).max() > 1e-3 and np.abs(g1 - y0).max() > 1e-3


def _onnx_unrolled_rnn(feeds, act, alpha, reverse):
    """An unrolled ONNX graph (Gather, MatMul, Add, activation) of one vanilla RNN direction,
    evaluated in float64: X [T, N, I], Wt [I, H], Rt [H, H], Bs [H], h0 [N, H] -> [T, N, H]."""
    nodes = [helper.make_node("Constant", [], [f"t{t}"],
                              value=helper.make_tensor(f"tv{t}", TensorProto.INT64, [], [t]))
             for t in range(T)]
    h = "h0"
    for t in (range(T - 1, -1, -1) if reverse else range(T)):
        nodes += [
            helper.make_node("Gather", ["X", f"t{t}"], [f"x{t}"], axis=0),
            helper.make_node("MatMul", [f"x{t}", "Wt"], [f"xw{t}"]),
            helper.make_node("MatMul", [h, "Rt"], [f"hr{t}"]),
            helper.make_node("Add", [f"xw{t}", f"hr{t}"], [f"s{t}"]),
            helper.make_node("Add", [f"s{t}", "Bs"], [f"a{t}"]),
            helper.make_node(act, [f"a{t}"], [f"y{t}"], **({"alpha": alpha} if alpha else {})),
        ]
        h = f"y{t}"
    dbl = TensorProto.DOUBLE
    g_in = [helper.make_tensor_value_info(n, dbl, None) for n in ("X", "Wt", "Rt", "Bs", "h0")]
    g_out = [helper.make_tensor_value_info(f"y{t}", dbl, None) for t in range(T)]
    model = helper.make_model(helper.make_graph(nodes, "unrolled", g_in, g_out))
    feeds = {k: v.astype(np.float64) for k, v in feeds.items()}
    return np.stack(ReferenceEvaluator(model).run(None, feeds))


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("act,alpha", [("Relu", None), ("LeakyRelu", 0.1), ("Sigmoid", None)])
def test_rnn_activations_match_unrolled_onnx(engine, stream, act, alpha, direction):
    """RNN Relu (and LeakyRelu = oneDNN relu with alpha, Sigmoid = logistic): ONNX's RNN
    evaluator implements only Tanh, so the oracle is the unrolled graph of plain ONNX ops."""
    D = 2 if direction == "bidirectional" else 1
    attrs = {"hidden_size": H, "direction": direction, "activations": [act] * D}
    if alpha is not None:
        attrs["activation_alpha"] = [alpha] * D
    inputs = random_onnx_inputs("RNN", direction, init=True, seed=stable_seed(act, direction))
    ys, yhs = [], []
    for d in range(D):
        rev = d == 1 or direction == "reverse"
        feeds = {"X": inputs["X"], "Wt": inputs["W"][d].T.copy(), "Rt": inputs["R"][d].T.copy(),
                 "Bs": inputs["B"][d, :H].astype(np.float64) + inputs["B"][d, H:],
                 "h0": inputs["initial_h"][d]}
        y = _onnx_unrolled_rnn(feeds, act, alpha, rev)
        ys.append(y)
        yhs.append(y[0] if rev else y[-1])
    want = (np.stack(ys, axis=1), np.stack(yhs), None)
    if act == "Relu":
        assert (want[0] == 0).any(), "the data should exercise relu's clamp"
    if act == "LeakyRelu":
        assert (want[0] < 0).any(), "the data should exercise the negative slope"
    got = primitive_onnx_outputs(engine, stream, "RNN", attrs, inputs)
    _compare(got, want, f"RNN {act}")
