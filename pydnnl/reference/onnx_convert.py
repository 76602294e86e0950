"""Conversion between ONNX's LSTM / GRU / RNN operator tensors and oneDNN's RNN tensors.

ONNX (one layer): W [D, G*H, I], R [D, G*H, H], B [D, 2*G*H] = [Wb, Rb], P [D, 3H] (i, o, f),
initial_h / initial_c [D, N, H], Y [T, D, N, H], Y_h / Y_c [D, N, H]; gate orders LSTM
i, o, f, c and GRU z, r, h. oneDNN: weights ldigo [1, D, I, G, H], bias ldgo [1, D, Gb, H]
with oneDNN gate orders (LSTM i, f, c~, o; GRU u(=z), r, o(=h)); a single bias Wb + Rb,
except for lbr_gru where the o bias is Wb_h and the 4th bias gate is Rb_h. ONNX
bidirectional is oneDNN bidirectional_concat for one layer.
"""
from __future__ import annotations

from typing import Any

import numpy as np

#: ONNX gate blocks to take, in oneDNN order
LSTM_GATE_PERM = (0, 2, 3, 1)   # i, o, f, c -> i, f, c, o
GRU_GATE_PERM = (0, 1, 2)       # z, r, h -> u, r, o
RNN_GATE_PERM = (0,)
PEEPHOLE_PERM = (0, 2, 1)       # i, o, f -> i, f, o

ONNX_DIRECTIONS = {
    "forward": "unidirectional_left2right",
    "reverse": "unidirectional_right2left",
    "bidirectional": "bidirectional_concat",
}


class UnsupportedOnnxNode(ValueError):
    """An ONNX recurrent node uses a feature oneDNN's RNN primitive does not have."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}{': ' + detail if detail else ''}")
        self.reason = reason


def _gate_perm(op_type: str) -> tuple[int, ...]:
    return {"LSTM": LSTM_GATE_PERM, "GRU": GRU_GATE_PERM, "RNN": RNN_GATE_PERM}[op_type]


def onnx_weights_to_ldigo(op_type: str, w: np.ndarray) -> np.ndarray:
    """ONNX W [D, G*H, I] or R [D, G*H, H] -> oneDNN ldigo [1, D, I, G, H]."""
    perm = _gate_perm(op_type)
    d, gh, i = w.shape
    g = len(perm)
    h = gh // g
    w4 = w.reshape(d, g, h, i)[:, list(perm)]
    return np.ascontiguousarray(w4.transpose(0, 3, 1, 2))[None]


def onnx_bias_to_ldgo(op_type: str, b: np.ndarray | None, hidden_size: int, num_directions: int,
                      linear_before_reset: int = 0, dtype: Any = np.float32) -> np.ndarray:
    """ONNX B [D, 2*G*H] (None = zeros) -> oneDNN bias [1, D, Gb, H]."""
    perm = list(_gate_perm(op_type))
    g, h, d = len(perm), hidden_size, num_directions
    if b is None:
        b = np.zeros((d, 2 * g * h), dtype)
    wb = b[:, :g * h].reshape(d, g, h)[:, perm]
    rb = b[:, g * h:].reshape(d, g, h)[:, perm]
    if op_type == "GRU" and linear_before_reset:
        out = np.concatenate([wb[:, :2] + rb[:, :2], wb[:, 2:3], rb[:, 2:3]], axis=1)
    else:
        out = wb + rb
    return out[None]


def onnx_peephole_to_ldgo(p: np.ndarray, hidden_size: int) -> np.ndarray:
    """ONNX P [D, 3H] (i, o, f) -> oneDNN weights_peephole [1, D, 3, H] (i, f, o)."""
    d = p.shape[0]
    return np.ascontiguousarray(p.reshape(d, 3, hidden_size)[:, list(PEEPHOLE_PERM)])[None]


def onnx_state_to_ldnc(s: np.ndarray | None) -> np.ndarray | None:
    """ONNX initial_h / initial_c [D, N, H] -> oneDNN src_iter(_c) [1, D, N, H]."""
    return None if s is None else s[None]


def onednn_to_onnx_outputs(dst_layer: np.ndarray, dst_iter: np.ndarray,
                           dst_iter_c: np.ndarray | None, num_directions: int
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """oneDNN (one layer) dst_layer [T, N, D*H], dst_iter [1, D, N, H] -> ONNX Y [T, D, N, H],
    Y_h [D, N, H], Y_c [D, N, H] (None without dst_iter_c)."""
    t, n, dh = dst_layer.shape
    y = dst_layer.reshape(t, n, num_directions, dh // num_directions).transpose(0, 2, 1, 3)
    return y, dst_iter[0], None if dst_iter_c is None else dst_iter_c[0]


_RNN_ACTIVATIONS = {"tanh": "tanh", "relu": "relu", "sigmoid": "logistic",
                    "leakyrelu": "relu"}


def onnx_node_to_onednn(op_type: str, attrs: dict[str, Any], inputs: dict[str, np.ndarray | None]
                        ) -> dict[str, Any]:
    """Map one ONNX LSTM / GRU / RNN node to keyword arguments of
    :func:`pydnnl.reference.rnn.rnn_forward` (layout 0 tensors; see :func:`from_batchwise`).

    ``attrs``: the node's attributes as Python values; ``inputs``: X, W, R and the optional
    B, sequence_lens, initial_h, initial_c, P (None or absent when not given). Raises
    :class:`UnsupportedOnnxNode` for features oneDNN lacks.
    """
    if op_type not in ("LSTM", "GRU", "RNN"):
        raise UnsupportedOnnxNode("op_type", op_type)
    x, w, r = inputs["X"], inputs["W"], inputs["R"]
    d = w.shape[0]
    h = int(attrs.get("hidden_size", r.shape[-1]))
    direction = attrs.get("direction", "forward")
    if isinstance(direction, bytes):
        direction = direction.decode()
    if direction not in ONNX_DIRECTIONS:
        raise UnsupportedOnnxNode("direction", direction)
    if attrs.get("clip") is not None:
        raise UnsupportedOnnxNode("clip", str(attrs["clip"]))
    if attrs.get("input_forget", 0):
        raise UnsupportedOnnxNode("input_forget")
    if attrs.get("activation_beta"):
        raise UnsupportedOnnxNode("activation_beta")
    acts = [a.decode() if isinstance(a, bytes) else a for a in attrs.get("activations", [])]
    alphas = list(attrs.get("activation_alpha", []))
    seq = inputs.get("sequence_lens")
    t_steps = x.shape[0]
    if seq is not None and np.any(np.asarray(seq) != t_steps):
        raise UnsupportedOnnxNode("sequence_lens", "variable sequence lengths")

    kw: dict[str, Any] = {"direction": ONNX_DIRECTIONS[direction]}
    if op_type == "LSTM":
        if acts and [a.lower() for a in acts] != ["sigmoid", "tanh", "tanh"] * d:
            raise UnsupportedOnnxNode("activations", f"LSTM {acts}")
        kw["cell"] = "vanilla_lstm"
    elif op_type == "GRU":
        if acts and [a.lower() for a in acts] != ["sigmoid", "tanh"] * d:
            raise UnsupportedOnnxNode("activations", f"GRU {acts}")
        lbr = int(attrs.get("linear_before_reset", 0))
        kw["cell"] = "lbr_gru" if lbr else "vanilla_gru"
    else:
        acts = [a.lower() for a in acts] or ["tanh"] * d
        if len(set(acts)) != 1 or acts[0] not in _RNN_ACTIVATIONS:
            raise UnsupportedOnnxNode("activations", f"RNN {acts}")
        if alphas and len(set(alphas)) != 1:
            raise UnsupportedOnnxNode("activation_alpha", "differs between directions")
        kw["cell"] = "vanilla_rnn"
        kw["activation"] = _RNN_ACTIVATIONS[acts[0]]
        if acts[0] == "leakyrelu":
            kw["alpha"] = float(alphas[0]) if alphas else 0.01
    if op_type != "RNN" and alphas:
        raise UnsupportedOnnxNode("activation_alpha")

    lbr = int(attrs.get("linear_before_reset", 0)) if op_type == "GRU" else 0
    kw["src_layer"] = x
    kw["weights_layer"] = onnx_weights_to_ldigo(op_type, w)
    kw["weights_iter"] = onnx_weights_to_ldigo(op_type, r)
    kw["bias"] = onnx_bias_to_ldgo(op_type, inputs.get("B"), h, d, lbr, dtype=x.dtype)
    kw["src_iter"] = onnx_state_to_ldnc(inputs.get("initial_h"))
    kw["src_iter_c"] = onnx_state_to_ldnc(inputs.get("initial_c")) if op_type == "LSTM" else None
    if op_type == "LSTM" and inputs.get("P") is not None:
        kw["weights_peephole"] = onnx_peephole_to_ldgo(inputs["P"], h)
    return kw


def from_batchwise(inputs: dict[str, np.ndarray | None]) -> dict[str, np.ndarray | None]:
    """ONNX layout=1 inputs (X [N, T, I], states [N, D, H]) -> layout 0."""
    out = dict(inputs)
    if out.get("X") is not None:
        out["X"] = np.swapaxes(out["X"], 0, 1)
    for k in ("initial_h", "initial_c"):
        if out.get(k) is not None:
            out[k] = np.swapaxes(out[k], 0, 1)
    return out


def to_batchwise_outputs(y: np.ndarray, y_h: np.ndarray, y_c: np.ndarray | None):
    """Layout 0 outputs (Y [T, D, N, H], states [D, N, H]) -> ONNX layout=1
    (Y [N, T, D, H], states [N, D, H])."""
    return (y.transpose(2, 0, 1, 3), np.swapaxes(y_h, 0, 1),
            None if y_c is None else np.swapaxes(y_c, 0, 1))
