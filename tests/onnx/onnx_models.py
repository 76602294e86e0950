"""Small models built with ``onnx.helper`` for the model and command-line tests."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def _init(name: str, arr: np.ndarray):
    return numpy_helper.from_array(np.asarray(arr, np.float32), name)


def small_cnn(seed: int = 0, batch: int | str = 2) -> "onnx.ModelProto":  # noqa: F821
    """Conv (pads) -> Relu -> MaxPool -> grouped Conv (stride 2, dilation) -> BatchNorm ->
    LeakyRelu -> ConvTranspose -> GlobalAveragePool -> Flatten -> Gemm (transB) -> Softmax,
    plus a side branch Add / ReduceMean, on [batch, 3, 16, 16]."""
    rng = np.random.default_rng(seed)
    u = lambda *s: rng.uniform(-0.5, 0.5, s)  # noqa: E731
    inits = [
        _init("w1", u(8, 3, 3, 3)), _init("b1", u(8)),
        _init("w2", u(8, 4, 3, 3)), _init("b2", u(8)),
        _init("bn_s", rng.uniform(0.5, 1.5, 8)), _init("bn_b", u(8)),
        _init("bn_m", u(8)), _init("bn_v", rng.uniform(0.5, 1.5, 8)),
        _init("wt", u(8, 4, 2, 2)),
        _init("fc_w", u(5, 4)), _init("fc_b", u(5)),
        _init("ofs", u(1, 8, 1, 1)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], name="conv2", group=2,
                         strides=[2, 2], dilations=[1, 1], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c2", "bn_s", "bn_b", "bn_m", "bn_v"], ["n2"],
                         name="bn2", epsilon=1e-3),
        helper.make_node("LeakyRelu", ["n2"], ["r2"], name="lrelu2", alpha=0.1),
        helper.make_node("ConvTranspose", ["r2", "wt"], ["t3"], name="deconv3", strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["t3"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
        helper.make_node("Add", ["r2", "ofs"], ["a2"], name="add_ofs"),
        helper.make_node("ReduceMean", ["a2"], ["m2"], name="mean_hw", axes=[2, 3],
                         keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "small_cnn", [helper.make_tensor_value_info("x", F, [batch, 3, 16, 16])],
        [helper.make_tensor_value_info("probs", F, [batch, 5]),
         helper.make_tensor_value_info("m2", F, [batch, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def small_lstm(seed: int = 1, t: int = 7, n: int = 3, i: int = 5, h: int = 6):
    """Bidirectional LSTM (peepholes, initial states) -> Transpose / Reshape to [T, N, 2H] ->
    GRU (linear_before_reset, layout 1 after a Transpose) -> MatMul -> Tanh."""
    rng = np.random.default_rng(seed)
    u = lambda *s: rng.uniform(-0.4, 0.4, s)  # noqa: E731
    inits = [
        _init("W", u(2, 4 * h, i)), _init("R", u(2, 4 * h, h)), _init("B", u(2, 8 * h)),
        _init("P", u(2, 3 * h)),
        _init("Wg", u(1, 3 * h, 2 * h)), _init("Rg", u(1, 3 * h, h)), _init("Bg", u(1, 6 * h)),
        _init("Wo", u(h, 4)),
        numpy_helper.from_array(np.array([t, n, 2 * h], np.int64), "shape_tn2h"),
    ]
    nodes = [
        helper.make_node("LSTM", ["x", "W", "R", "B", "", "h0", "c0", "P"], ["y", "yh", "yc"],
                         name="lstm", hidden_size=h, direction="bidirectional"),
        helper.make_node("Transpose", ["y"], ["yt"], name="y_tndh", perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["yt", "shape_tn2h"], ["y2"], name="y_tn2h"),
        helper.make_node("Transpose", ["y2"], ["yb"], name="batch_first", perm=[1, 0, 2]),
        helper.make_node("GRU", ["yb", "Wg", "Rg", "Bg"], ["gy", "gh"], name="gru",
                         hidden_size=h, linear_before_reset=1, layout=1),
        helper.make_node("MatMul", ["gy", "Wo"], ["o"], name="proj"),
        helper.make_node("Tanh", ["o"], ["out"], name="tanh"),
    ]
    graph = helper.make_graph(
        nodes, "small_lstm",
        [helper.make_tensor_value_info("x", F, [t, n, i]),
         helper.make_tensor_value_info("h0", F, [2, n, h]),
         helper.make_tensor_value_info("c0", F, [2, n, h])],
        [helper.make_tensor_value_info("out", F, [n, t, 1, 4]),
         helper.make_tensor_value_info("gh", F, [n, 1, h]),
         helper.make_tensor_value_info("yh", F, [2, n, h]),
         helper.make_tensor_value_info("yc", F, [2, n, h])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
