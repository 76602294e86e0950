"""LSTM, GRU and RNN on pydnnl's RNN primitives. Weights, biases and peepholes are converted
from ONNX's gate orders once, on the host (``pydnnl.reference.onnx_convert``), then reordered
into the layouts the primitive chose; X, the states and the outputs stay on the device (ONNX's
layout=1 is a strided desc, not a copy)."""
from __future__ import annotations

import numpy as np

from ... import (
    algorithm,
    gru_forward,
    lbr_gru_forward,
    lstm_forward,
    prop_kind,
    reorder,
    rnn_direction,
    rnn_extensions,
    vanilla_rnn_forward,
)
from ...constants import (
    ARG_BIAS,
    ARG_DST_ITER,
    ARG_DST_ITER_C,
    ARG_DST_LAYER,
    ARG_FROM,
    ARG_SRC_ITER,
    ARG_SRC_ITER_C,
    ARG_SRC_LAYER,
    ARG_TO,
    ARG_WEIGHTS_ITER,
    ARG_WEIGHTS_LAYER,
    ARG_WEIGHTS_PEEPHOLE,
)
from ...memory import memory
from ...memory.desc import MemoryDesc
from ...memory.format_tags import format_tag
from ...reference import onnx_convert as oc
from ..errors import invalid, unsupported
from ..tensors import F32, plain_md
from . import op

_CLS = {"vanilla_lstm": lstm_forward, "vanilla_gru": gru_forward,
        "lbr_gru": lbr_gru_forward, "vanilla_rnn": vanilla_rnn_forward}
_ACT = {"tanh": algorithm.eltwise_tanh, "relu": algorithm.eltwise_relu,
        "logistic": algorithm.eltwise_logistic}
# why a feature onnx_convert refuses has no oneDNN counterpart
_WHY = {
    "clip": "ONNX clips the gates' pre-activations; oneDNN's RNN cells have no such clip "
            "(rnn_extensions' cell_clip bounds the LSTM cell state instead)",
    "activations": "oneDNN's LSTM and GRU cells have fixed activations (sigmoid, tanh); "
                   "vanilla RNN takes one of tanh, relu, sigmoid for both directions",
    "activation_alpha": "oneDNN's cells take no activation parameters (but RNN's LeakyRelu)",
    "activation_beta": "oneDNN's cells take no activation parameters",
    "input_forget": "oneDNN's LSTM has no coupled input-forget gate",
    "direction": "expected forward, reverse or bidirectional",
}


def _upload(b, arr: np.ndarray, pd_desc: MemoryDesc) -> memory:
    """A host array (plain layout) reordered once into the primitive's layout."""
    arr = np.ascontiguousarray(arr, np.float32)
    user = memory(plain_md(arr.shape), b.engine, arr)
    if pd_desc == user.get_desc():
        return user
    packed = memory(pd_desc, b.engine)
    b.run_once(reorder(user, packed), {ARG_FROM: user, ARG_TO: packed})
    return packed


def _state_md(layout: int, d: int, n: int, h: int) -> MemoryDesc:
    """oneDNN's [1, D, N, H] state over ONNX's [D, N, H] (layout 0) or [N, D, H] (layout 1)."""
    if layout == 0:
        return plain_md([1, d, n, h])
    return plain_md([1, n, d, h]).permute_axes([0, 2, 1, 3])


@op("LSTM", "GRU", "RNN")
def recurrent(b, node, a):
    op_type = node.op_type
    a = dict(a)
    layout = int(a.pop("layout", 0))
    if layout not in (0, 1):
        raise invalid(node, f"attribute layout={layout}; expected 0 or 1")
    x = b.value(0, "X")
    if len(x.shape) != 3:
        raise invalid(node, f"X must be 3-D, got shape {list(x.shape)}")
    t, n, i = x.shape if layout == 0 else (x.shape[1], x.shape[0], x.shape[2])
    w, r = b.const(1, "W"), b.const(2, "R")
    host = {"X": np.broadcast_to(np.float32(0), (t, n, i)), "W": w, "R": r,
            "B": b.const(3, "B"), "P": b.const(7, "P") if op_type == "LSTM" else None}
    if any(v is not None and v.dtype != np.float32 for v in host.values()):
        raise unsupported(node, "W, R, B and P must be float32")
    try:
        kw = oc.onnx_node_to_onednn(op_type, a, host)
    except oc.UnsupportedOnnxNode as e:
        raise unsupported(node, f"{e.reason} ({e}): {_WHY.get(e.reason, 'not supported')}") \
            from None
    d, h = w.shape[0], r.shape[-1]
    if w.shape[2] != i:
        raise invalid(node, f"W {list(w.shape)} expects input size {w.shape[2]}, X has {i}")
    ext = None
    lens = b.const(4, "sequence_lens")
    if lens is not None:
        lens = [int(v) for v in lens.reshape(-1)]
        if len(lens) != n or min(lens) < 1 or max(lens) > t:
            raise invalid(node, f"sequence_lens {lens} must hold {n} lengths in 1..{t}")
        if min(lens) < t:
            ext = rnn_extensions(seq_lengths=tuple(lens))
    cell = kw["cell"]
    dlc = d * h
    any_ = format_tag.any
    wl, wi, bias = kw["weights_layer"], kw["weights_iter"], kw["bias"]
    descs = {
        "src_layer_desc": (plain_md([t, n, i]) if layout == 0
                           else plain_md([n, t, i]).permute_axes([1, 0, 2])),
        "weights_layer_desc": MemoryDesc(list(wl.shape), F32, any_),
        "weights_iter_desc": MemoryDesc(list(wi.shape), F32, any_),
        "bias_desc": plain_md(bias.shape),
        "dst_layer_desc": (plain_md([t, n, dlc]) if layout == 0
                           else plain_md([n, t, dlc]).permute_axes([1, 0, 2])),
    }
    args = {}
    states = [(5, "initial_h", "src_iter_desc", ARG_SRC_ITER)]
    if cell == "vanilla_lstm":
        states.append((6, "initial_c", "src_iter_c_desc", ARG_SRC_ITER_C))
    for idx, what, name, arg in states:
        if b.has(idx):
            v = b.value(idx, what)
            want = (d, n, h) if layout == 0 else (n, d, h)
            if v.shape != want:
                raise invalid(node, f"{what} must have shape {list(want)}, got "
                                    f"{list(v.shape)}")
            sv = v.view([1, d, n, h], _state_md(layout, d, n, h))
            descs[name] = sv.md
            args[arg] = sv.mem
    peep = kw.get("weights_peephole")
    if peep is not None:
        descs["weights_peephole_desc"] = plain_md(peep.shape)
    y = b.alloc([n, t, d, h] if layout == 1 else [t, n, d, h])
    outs = [(1, "dst_iter_desc", ARG_DST_ITER)]
    if cell == "vanilla_lstm":
        outs.append((2, "dst_iter_c_desc", ARG_DST_ITER_C))
    states_out = {}
    for k, name, arg in outs:
        if b.wants(k):
            v = b.alloc([d, n, h] if layout == 0 else [n, d, h])
            sv = v.view([1, d, n, h], _state_md(layout, d, n, h))
            descs[name] = sv.md
            args[arg] = sv.mem
            states_out[k] = v
    head = [b.engine, prop_kind.forward_inference]
    extra = {}
    if cell == "vanilla_rnn":
        head.append(_ACT[kw["activation"]])
        extra["alpha"] = float(kw.get("alpha", 0.0))
    head.append(getattr(rnn_direction, kw["direction"]))
    if ext is not None:
        extra["extensions"] = ext
    pd = _CLS[cell].primitive_desc(*head, **descs, **extra)
    yl = y.view([t, n, dlc], descs["dst_layer_desc"])
    args[ARG_SRC_LAYER] = x.view([t, n, i], descs["src_layer_desc"]).mem
    args[ARG_WEIGHTS_LAYER] = _upload(b, wl, pd.weights_layer_desc())
    args[ARG_WEIGHTS_ITER] = _upload(b, wi, pd.weights_iter_desc())
    args[ARG_BIAS] = _upload(b, bias, pd.bias_desc())
    if peep is not None:
        args[ARG_WEIGHTS_PEEPHOLE] = _upload(b, peep, pd.weights_peephole_desc())
    args[ARG_DST_LAYER] = yl.mem
    b.execute(_CLS[cell](pd), args)
    if layout == 1:
        b.set(0, y.view([n, t, d, h]))
    elif d == 1:
        b.set(0, y.view([t, 1, n, h]))
    else:
        # dst_layer is [T, N, D*H]; ONNX's Y is [T, D, N, H]: one reorder
        out = b.alloc([t, d, n, h])
        b.copy(y.view([t, d, n, h], plain_md([t, n, d, h]).permute_axes([0, 2, 1, 3])), out)
        b.set(0, out)
    for k, v in states_out.items():
        b.set(k, v)
