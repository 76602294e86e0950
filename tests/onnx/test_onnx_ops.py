"""Single ONNX nodes through :mod:`pydnnl.onnx` in forms the node tests leave out (src0
broadcasts, batch-broadcast MatMul, Gemm with a computed C, constant weights reordered into
the layout a convolution chose, legacy Softmax coercion, ...), against
``onnx.reference.ReferenceEvaluator``."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from pydnnl.onnx import PydnnlBackend

F = TensorProto.FLOAT


def _case(op, in_shapes, attrs=None, consts=None, opset=17, n_out=1):
    """A one-node model: float inputs of ``in_shapes`` (None: an empty optional input), and
    ``consts`` {input position: array} as initializers."""
    consts = consts or {}
    names, gin, inits = [], [], []
    for k in range(len(in_shapes) + len(consts)):
        if k in consts:
            names.append(f"c{k}")
            inits.append(numpy_helper.from_array(consts[k], f"c{k}"))
        else:
            shape = in_shapes[len([j for j in range(k) if j not in consts])]
            if shape is None:
                names.append("")
                continue
            names.append(f"i{k}")
            gin.append(helper.make_tensor_value_info(f"i{k}", F, shape))
    outs = [f"o{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outs, name="n0", **(attrs or {}))
    graph = helper.make_graph([node], "g", gin, [helper.make_empty_tensor_value_info(o)
                                                 for o in outs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    # the checker wants typed outputs: take them from shape inference
    from onnx import shape_inference
    inferred = shape_inference.infer_shapes(model)
    del model.graph.output[:]
    model.graph.output.extend(inferred.graph.output)
    return model


R = np.random.default_rng(0)


def _u(*s):
    return R.uniform(-1, 1, s).astype(np.float32)


CASES = {
    "sub_both_broadcast": _case("Sub", [[3, 1], [1, 4]]),
    "add_rank_mismatch": _case("Add", [[4], [2, 3, 4]]),
    "div_src0_broadcast": _case("Div", [[3, 1], [2, 3, 4]]),
    "greater_bcast": _case("Greater", [[3, 1], [4]]),
    "max_three": _case("Max", [[2, 3], [3], [1, 1]]),
    "sum_bcast": _case("Sum", [[3, 4], [4], [1, 1]]),
    "mean_same": _case("Mean", [[3, 4], [3, 4], [3, 4]]),
    "matmul_batch_bcast": _case("MatMul", [[2, 1, 3, 4], [5, 4, 6]]),
    "matmul_1d_left": _case("MatMul", [[4], [2, 4, 3]]),
    "gemm_all": _case("Gemm", [[4, 3], [5, 4], [1, 5]],
                      {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}),
    "gemm_const_b": _case("Gemm", [[2, 3]], {"beta": 0.0}, consts={1: _u(3, 4), 2: _u(4)}),
    "transpose_4d": _case("Transpose", [[2, 3, 4, 5]], {"perm": [2, 0, 3, 1]}),
    "logsoftmax_axis0": _case("LogSoftmax", [[3, 4, 2]], {"axis": 0}),
    "reduce_l2_axes_input": _case("ReduceL2", [[2, 3, 4]], {"keepdims": 0},
                                  consts={1: np.array([0, -1], np.int64)}, opset=18),
    "reduce_logsumexp": _case("ReduceLogSumExp", [[2, 3, 4]], {"axes": [1]}, opset=17),
    "layernorm_axis1": _case("LayerNormalization", [[2, 3, 4, 2], [3, 4, 2], [3, 4, 2]],
                             {"axis": 1}, n_out=3),
    "concat_three": _case("Concat", [[2, 3, 4], [2, 1, 4], [2, 2, 4]], {"axis": -2}),
    "clip_max_only": _case("Clip", [[3, 4], None], consts={2: np.array(0.25, np.float32)}),
    "conv1d_same_lower_const_w": _case("Conv", [[2, 4, 9]],
                                       {"auto_pad": "SAME_LOWER", "group": 2, "strides": [2]},
                                       consts={1: _u(6, 2, 4), 2: _u(6)}),
    "conv3d_dilated": _case("Conv", [[1, 2, 6, 7, 5]], {"dilations": [2, 1, 1],
                                                         "pads": [1, 0, 1, 1, 0, 1]},
                            consts={1: _u(3, 2, 2, 3, 3)}),
    # group=1: onnx's reference ConvTranspose fails on groups here (the node tests cover them)
    "convtranspose_const_w": _case("ConvTranspose", [[2, 4, 5, 4]],
                                   {"strides": [2, 3], "output_padding": [1, 2],
                                    "pads": [1, 0, 0, 1]},
                                   consts={1: _u(4, 3, 3, 3), 2: _u(3)}),
    "maxpool_ceil_dilated": _case("MaxPool", [[1, 2, 9, 8]],
                                  {"kernel_shape": [3, 2], "strides": [2, 2],
                                   "dilations": [2, 1], "ceil_mode": 1}),
    "averagepool_same_upper": _case("AveragePool", [[1, 2, 7, 6]],
                                    {"kernel_shape": [3, 3], "strides": [2, 2],
                                     "auto_pad": "SAME_UPPER"}),
    "batchnorm_3d": _case("BatchNormalization", [[2, 3, 4, 2, 2]], {"epsilon": 1e-3},
                          consts={1: _u(3), 2: _u(3), 3: _u(3),
                                  4: R.uniform(0.5, 1.5, 3).astype(np.float32)}),
    "hardswish": _case("HardSwish", [[3, 4]]),
    "pow_scalar": _case("Pow", [[3, 4]], consts={1: np.array(3.0, np.float32)}),
    "squeeze_unsqueeze_flatten": None,
}


def _shape_chain():
    nodes = [helper.make_node("Unsqueeze", ["x", "ax"], ["u"], name="u"),
             helper.make_node("Squeeze", ["u", "ax"], ["s"], name="s"),
             helper.make_node("Flatten", ["s"], ["f"], name="f", axis=-1),
             helper.make_node("Reshape", ["f", "shp"], ["r"], name="r"),
             helper.make_node("Relu", ["r"], ["y"], name="relu")]
    inits = [numpy_helper.from_array(np.array([0, 3], np.int64), "ax"),
             numpy_helper.from_array(np.array([0, -1, 2], np.int64), "shp")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 3, 4])],
                              [helper.make_tensor_value_info("y", F, [6, 2, 2])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


CASES["squeeze_unsqueeze_flatten"] = _shape_chain()


@pytest.mark.parametrize("name", sorted(CASES))
def test_node_matches_reference(name):
    model = CASES[name]
    rng = np.random.default_rng(1)
    feeds = {vi.name: rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim])
             .astype(np.float32) for vi in model.graph.input}
    want = ReferenceEvaluator(model).run(None, feeds)
    got = PydnnlBackend.run_model(model, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_before_opset13_coerces_to_2d(op):
    """Opset < 13: the input is seen as [prod(dims[:axis]), prod(dims[axis:])]. onnx's
    reference evaluator applies the opset-13 rule to every opset, so the oracle is an opset-13
    graph of that 2-D form."""
    x = np.random.default_rng(2).standard_normal((2, 3, 4)).astype(np.float32)
    got, = PydnnlBackend.run_model(_case(op, [[2, 3, 4]], {"axis": 1}, opset=11), {"i0": x})
    want, = ReferenceEvaluator(_case(op, [[2, 12]], {"axis": 1})).run(
        None, {"i0": x.reshape(2, 12)})
    np.testing.assert_allclose(got, want.reshape(2, 3, 4), rtol=1e-5, atol=1e-6)


def _gelu_subgraph(expose_erf: bool):
    f = TensorProto.FLOAT
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"], name="div"),
             helper.make_node("Erf", ["d"], ["e"], name="erf"),
             helper.make_node("Add", ["e", "one"], ["a"], name="add"),
             helper.make_node("Mul", ["x", "a"], ["m"], name="mul"),
             helper.make_node("Mul", ["m", "half"], ["y"], name="gelu_out")]
    inits = [numpy_helper.from_array(np.array(v, np.float32), n)
             for n, v in (("sqrt2", 2 ** 0.5), ("one", 1.0), ("half", 0.5))]
    outs = [helper.make_tensor_value_info("y", f, [3, 4])]
    if expose_erf:
        outs.append(helper.make_tensor_value_info("e", f, [3, 4]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", f, [3, 4])], outs,
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_exact_gelu_subgraph_runs_as_one_primitive():
    model = _gelu_subgraph(False)
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    rep = PydnnlBackend.prepare(model)
    got, = rep.run([x])
    want, = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    times = []
    rep.run([x], timings=times)
    assert [(n, op) for n, op, _ in times] == [("gelu_out", "Gelu")]


def test_gelu_subgraph_with_a_used_intermediate_is_not_fused():
    from pydnnl.onnx import onnx_unsupported
    with pytest.raises(onnx_unsupported, match="Erf node 'erf': operator not supported"):
        PydnnlBackend.prepare(_gelu_subgraph(True))


def _producer_activation(producer, act, in_shapes, consts, attrs=None, act_attrs=None,
                         expose=False, opset=17):
    """``producer`` then ``act`` on its output (also a graph output with ``expose``)."""
    f = TensorProto.FLOAT
    names, gin, inits = [], [], []
    for k, shape in enumerate(in_shapes):
        names.append(f"i{k}")
        gin.append(helper.make_tensor_value_info(f"i{k}", f, shape))
    for k, arr in consts.items():
        names.insert(k, f"c{k}")
        inits.append(numpy_helper.from_array(arr, f"c{k}"))
    nodes = [helper.make_node(producer, names, ["p"], name="prod", **(attrs or {})),
             helper.make_node(act, ["p"], ["y"], name="act", **(act_attrs or {}))]
    outs = ["y", "p"] if expose else ["y"]
    graph = helper.make_graph(nodes, "g", gin, [helper.make_empty_tensor_value_info(o)
                                                for o in outs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    from onnx import shape_inference
    inferred = shape_inference.infer_shapes(model)
    del model.graph.output[:]
    model.graph.output.extend(inferred.graph.output)
    return model


FUSED = {
    "gemm_relu": ("Gemm", "Relu", [[4, 3], [1, 5]], {1: _u(3, 5)}, {"alpha": 2.0}, None),
    "matmul_sigmoid": ("MatMul", "Sigmoid", [[2, 3, 4]], {1: _u(4, 6)}, None, None),
    "conv_leakyrelu": ("Conv", "LeakyRelu", [[1, 2, 6, 6]], {1: _u(4, 2, 3, 3), 2: _u(4)},
                       {"pads": [1, 1, 1, 1]}, {"alpha": 0.2}),
    "convtranspose_tanh": ("ConvTranspose", "Tanh", [[1, 2, 4, 4]], {1: _u(2, 3, 3, 3)},
                           {"strides": [2, 2]}, None),
    "conv_gelu_tanh": ("Conv", "Gelu", [[1, 2, 5, 5]], {1: _u(3, 2, 3, 3)}, None,
                       {"approximate": "tanh"}),
}


@pytest.mark.parametrize("expose", [False, True], ids=["fused", "output_kept"])
@pytest.mark.parametrize("name", sorted(FUSED))
def test_activation_fused_into_producer(name, expose):
    """An activation whose input feeds nothing else runs as the producer's eltwise post-op;
    when the producer's output is also a graph output it runs on its own."""
    producer, act, shapes, consts, attrs, act_attrs = FUSED[name]
    model = _producer_activation(producer, act, shapes, consts, attrs, act_attrs, expose,
                                 opset=20 if act == "Gelu" else 17)    # Gelu: opset 20
    rng = np.random.default_rng(4)
    feeds = {vi.name: rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim])
             .astype(np.float32) for vi in model.graph.input}
    rep = PydnnlBackend.prepare(model)
    times = []
    got = rep.run(feeds, timings=times)
    for g, w in zip(got, ReferenceEvaluator(model).run(None, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    act_time = dict((n, t) for n, _, t in times)["act"]
    assert (act_time is None) == (not expose)


def _residual(op: str, swap: bool, other_shape):
    """conv(x) <op> other -> Relu, ``other`` an input of ``other_shape`` (swap: other first)."""
    f = TensorProto.FLOAT
    ins = ["o", "c"] if swap else ["c", "o"]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node(op, ins, ["s"], name="res"),
             helper.make_node("Relu", ["s"], ["y"], name="relu")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", f, [2, 3, 5, 5]),
                     helper.make_tensor_value_info("o", f, other_shape)],
        [helper.make_empty_tensor_value_info("y")],
        [numpy_helper.from_array(_u(4, 3, 3, 3), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    from onnx import shape_inference
    out = shape_inference.infer_shapes(model).graph.output
    del model.graph.output[:]
    model.graph.output.extend(out)
    return model


@pytest.mark.parametrize("op,swap,other_shape,fused", [
    ("Add", False, [2, 4, 5, 5], True),
    ("Add", True, [2, 4, 5, 5], True),          # commutes: fused with the conv second
    ("Mul", False, [1, 4, 1, 1], True),         # per-channel broadcast operand
    ("Sub", False, [4, 1, 5], True),
    ("Sub", True, [2, 4, 5, 5], False),         # other - conv: not dst op src1
    ("Div", False, [3, 2, 4, 5, 5], False),     # the result is larger than the conv's dst
])
def test_binary_after_producer_fused_as_post_op(op, swap, other_shape, fused):
    model = _residual(op, swap, other_shape)
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal((2, 3, 5, 5)).astype(np.float32),
             "o": rng.uniform(0.5, 1.5, other_shape).astype(np.float32)}
    rep = PydnnlBackend.prepare(model)
    times = []
    got, = rep.run(feeds, timings=times)
    want, = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    notes = {s.name: s.note for s in rep.program(feeds).steps}
    assert (notes["res"] == "fused into conv") == fused, notes
    assert (notes["relu"] == "fused into conv") == fused, notes


B = TensorProto.BOOL


def _where_model(shapes, consts=None):
    """One Where node: condition ``c`` (bool), ``x``, ``y`` (float) graph inputs of
    ``shapes``, or initializers from ``consts`` {name: array}."""
    consts = consts or {}
    gin = [helper.make_tensor_value_info(n, B if n == "c" else F, s)
           for n, s in zip("cxy", shapes) if n not in consts]
    node = helper.make_node("Where", ["c", "x", "y"], ["o"], name="w")
    graph = helper.make_graph([node], "g", gin, [helper.make_empty_tensor_value_info("o")],
                              [numpy_helper.from_array(v, n) for n, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    from onnx import shape_inference
    inferred = shape_inference.infer_shapes(model)
    del model.graph.output[:]
    model.graph.output.extend(inferred.graph.output)
    return model


def _feeds(model, seed=3):
    rng = np.random.default_rng(seed)
    out = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        out[vi.name] = (rng.random(shape) < 0.5 if vi.type.tensor_type.elem_type == B
                        else rng.standard_normal(shape).astype(np.float32))
    return out


WHERE_CASES = {
    "same_shapes": ([[2, 3], [2, 3], [2, 3]], None),
    # the condition broadcast to X's shape (src2 must have src0's dims)
    "cond_broadcast": ([[3], [2, 3], [2, 3]], None),
    # condition and X both broadcast to their common shape, Y broadcast by select itself
    "cond_and_x_broadcast": ([[2, 1, 4], [3, 1], [2, 3, 4]], None),
    "y_broadcast_scalar_cond": ([[], [2, 3], [1, 3]], None),
    "scalar_x_const": ([[2, 3, 4], None, [4]], {"x": np.array(-5.0, np.float32)}),
    "cond_const": ([None, [2, 3, 4], []], {"c": np.array([True, False, True, False])}),
}


@pytest.mark.parametrize("name", sorted(WHERE_CASES))
def test_where_matches_reference(name):
    """Where through binary_select: a bool condition (a graph input here) converted to s8 and
    the inputs broadcast as select needs, against onnx's reference evaluator (exact)."""
    shapes, consts = WHERE_CASES[name]
    model = _where_model(shapes, consts)
    for seed in (3, 4):     # a second run with other values reuses the program
        feeds = _feeds(model, seed)
        want = ReferenceEvaluator(model).run(None, feeds)[0]
        got = PydnnlBackend.run_model(model, feeds)[0]
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_where_of_computed_condition_and_constants():
    """A computed condition (Greater, broadcast to X's shape) and an all-constant Where
    (shape arithmetic, on the host) in one graph."""
    nodes = [helper.make_node("Greater", ["a", "t"], ["g"], name="gt"),
             helper.make_node("Relu", ["b"], ["r"], name="relu"),
             helper.make_node("Where", ["g", "r", "b"], ["w"], name="w"),
             helper.make_node("Where", ["cc", "s0", "s1"], ["shp"], name="wc"),
             helper.make_node("Reshape", ["w", "shp"], ["y"], name="reshape")]
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "t"),
             numpy_helper.from_array(np.array([True, False]), "cc"),
             numpy_helper.from_array(np.array([6, 0], np.int64), "s0"),
             numpy_helper.from_array(np.array([0, 4], np.int64), "s1")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("a", F, [3, 1]),
                     helper.make_tensor_value_info("b", F, [2, 3, 4])],
        [helper.make_tensor_value_info("y", F, [6, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = _feeds(model)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = PydnnlBackend.run_model(model, feeds)[0]
    np.testing.assert_array_equal(got, want)


def test_where_refusals_name_the_node():
    from pydnnl.onnx import onnx_invalid, onnx_unsupported

    # integer X: the backend computes in float32 (select's f32 sources)
    model = _where_model([[2, 3], None, [2, 3]], {"x": np.ones((2, 3), np.int64)})
    with pytest.raises(onnx_unsupported, match="Where node 'w'.*int64"):
        PydnnlBackend.prepare(model)
    model = _where_model([[2, 3], [2, 3], [2, 3]])
    feeds = _feeds(model)
    feeds["c"] = feeds["c"].astype(np.float32)
    with pytest.raises(onnx_invalid, match="graph input 'c': expected bool"):
        PydnnlBackend.run_model(model, feeds)


def test_expand_zeros_keep_their_own_buffer():
    """Expand's zeros are written once: a buffer freed by an earlier tensor (here Relu's
    result, last read by ReduceSum) would be overwritten by its producer on every run."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("ReduceSum", ["r", "ax"], ["s"], name="sum", keepdims=1),
             helper.make_node("Expand", ["s", "shape"], ["y"], name="expand")]
    inits = [numpy_helper.from_array(np.array([0], np.int64), "ax"),
             numpy_helper.from_array(np.array([4, 8], np.int64), "shape")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [4, 8])],
                              [helper.make_tensor_value_info("y", F, [4, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = _feeds(model)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_allclose(PydnnlBackend.run_model(model, feeds)[0], want, rtol=1e-5,
                               atol=1e-5)
