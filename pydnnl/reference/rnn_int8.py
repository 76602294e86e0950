"""float64 numpy reference of oneDNN's int8 RNN inference (LSTM, LSTM with projection, GRU).

Written from oneDNN's rules (``src/cpu/rnn/ref_rnn.cpp``, ``ref_postgemm_lstm.cpp``,
``ref_postgemm_lstm_projection.cpp``, ``ref_postgemm_gru.cpp`` and benchdnn's
``tests/benchdnn/rnn/ref_rnn_fwd.cpp``, ``lstm_cell.cpp``, ``gru_cell.cpp``):

- quantization ``q(x) = saturate(round_half_even(x * scale + shift))`` to [0, 255] (u8) or
  [-128, 127] (s8); dequantization ``deq(v) = (v - shift) / scale``;
- the states h (and LSTMP's pre-projection h, GRU's r * h) are kept quantized; the LSTM cell
  state c is f32 (here float64) and never quantized;
- a gate's pre-activation is ``(acc - shift * comp) / (wscale[g, o] * scale) + bias`` where acc
  is the integer sum ``x @ W + h @ U`` of the quantized data and the s8 weights, and comp the
  sum over the input channels of both weight matrices' column (g, o) (the shift's
  compensation; oneDNN folds it into the bias);
- GRU: ``u, r`` from gates 0 and 1; ``rh = q(deq(h) * r)``; gate 2's acc is ``x @ W_o + rh @
  U_o``; ``h = q(u * deq(h) + (1 - u) * o)``;
- LSTMP: ``h = q((q(ht) @ R - shift * comp_R) / (proj_scale[o] * scale))``;
- a missing src_iter is the quantized zero ``q(0)``; an f32 src_iter is quantized;
- outputs: u8/s8 dst tensors get the quantized values; f32 ones ``deq``; bidirectional_sum
  adds the two directions' quantized values saturated to the data type, and an f32 dst_layer
  is then ``(sum - 2 shift) / scale``; dst_iter_c is the f32 cell state.

Tensors use oneDNN's logical layouts (see :mod:`pydnnl.reference.rnn`).
"""
from __future__ import annotations

import numpy as np

from ..error import invalid_arguments
from .rnn import _direction_plan, _normalize_direction, _sigmoid

LIMITS = {"u8": (0.0, 255.0), "s8": (-128.0, 127.0)}


def quantize(x, scale: float, shift: float, data_type: str = "u8") -> np.ndarray:
    """oneDNN's ``qz_a1b0``: round half to even of ``x * scale + shift``, saturated."""
    lo, hi = LIMITS[data_type]
    return np.clip(np.rint(np.asarray(x, np.float64) * scale + shift), lo, hi)


def dequantize(v, scale: float, shift: float) -> np.ndarray:
    return (np.asarray(v, np.float64) - shift) / scale


def _scales(scales, n: int, what: str) -> np.ndarray:
    s = np.asarray(scales, np.float64).ravel()
    if s.size == 1:
        return np.full(n, s[0])
    if s.size != n:
        raise invalid_arguments(f"rnn_int8_forward: {what} needs 1 or {n} scales, got {s.size}")
    return s


def rnn_int8_forward(cell: str, src_layer, src_iter, src_iter_c, weights_layer, weights_iter,
                     bias, *, direction="unidirectional_left2right", data_scale: float = 1.0,
                     data_shift: float = 0.0, weights_scales=(1.0,), data_type: str = "u8",
                     src_iter_dt: str | None = None, weights_projection=None,
                     projection_scales=(1.0,), dst_layer_dt: str | None = None,
                     dst_iter_dt: str | None = None) -> dict:
    """Forward inference of an int8 ``vanilla_lstm`` or ``vanilla_gru`` stack.

    ``src_layer`` holds quantized values (``data_type``: ``"u8"`` or ``"s8"``); ``src_iter``
    quantized values too, or real values when ``src_iter_dt`` is ``"f32"`` (None: absent);
    the weights hold s8 values; ``weights_scales`` one or G * DHC values (gate-major),
    ``projection_scales`` one or DIC. ``dst_layer_dt`` / ``dst_iter_dt``: ``data_type`` (the
    default) or ``"f32"``. Returns ``dst_layer``, ``dst_iter``, ``dst_iter_c`` (None for GRU)
    as float64 arrays: quantized values or dequantized reals.
    """
    if cell not in ("vanilla_lstm", "vanilla_gru"):
        raise invalid_arguments(f"rnn_int8_forward: cell must be vanilla_lstm or vanilla_gru, "
                                f"got {cell!r}")
    if data_type not in LIMITS:
        raise invalid_arguments(f"rnn_int8_forward: data_type must be u8 or s8, got {data_type!r}")
    direction = _normalize_direction(direction)
    D, r2l = _direction_plan(direction)
    lstm = cell == "vanilla_lstm"
    sc, sh = float(data_scale), float(data_shift)
    lo, hi = LIMITS[data_type]

    def q(x):
        return quantize(x, sc, sh, data_type)

    def deq(v):
        return dequantize(v, sc, sh)

    x0 = np.asarray(src_layer, np.float64)
    wl_all = np.asarray(weights_layer, np.float64)
    wi_all = np.asarray(weights_iter, np.float64)
    b_all = np.asarray(bias, np.float64)
    L, _, _, G, DHC = wl_all.shape
    T, N, _ = x0.shape
    SIC = wi_all.shape[2]
    wsd = _scales(weights_scales, G * DHC, "weights_scales").reshape(G, DHC) * sc
    wp_all = None if weights_projection is None else np.asarray(weights_projection, np.float64)
    DIC = DHC if wp_all is None else wp_all.shape[3]
    if wp_all is not None:
        pwsd = _scales(projection_scales, DIC, "projection_scales") * sc
    if src_iter is None:
        h0 = np.full((L, D, N, SIC), q(0.0))
    elif src_iter_dt == "f32":
        h0 = q(src_iter)
    else:
        h0 = np.asarray(src_iter, np.float64)
    c0 = (np.zeros((L, D, N, DHC)) if src_iter_c is None
          else np.asarray(src_iter_c, np.float64))

    ys, h_last = [], np.zeros((L, D, N, DIC))
    c_last = np.zeros((L, D, N, DHC)) if lstm else None
    for d in range(D):
        x = x0
        for l in range(L):
            wl = wl_all[l, d].reshape(-1, G, DHC)
            wi = wi_all[l, d].reshape(SIC, G, DHC)
            comp = wl.sum(axis=0) + wi.sum(axis=0)  # [G, DHC]
            b = b_all[l, d, :G]

            def pre(acc, g, comp=comp, b=b):  # dequantized sum plus bias of gate(s) g
                return (acc - sh * comp[g]) / wsd[g] + b[g]

            h, c = h0[l, d], c0[l, d]
            y = np.zeros((T, N, DIC))
            for t in (range(T - 1, -1, -1) if r2l[d] else range(T)):
                gx = np.einsum("nk,kgo->ngo", x[t], wl)
                if lstm:
                    acc = gx + np.einsum("nk,kgo->ngo", h, wi)
                    p = pre(acc, slice(None))
                    i, f = _sigmoid(p[:, 0]), _sigmoid(p[:, 1])
                    cc, o = np.tanh(p[:, 2]), _sigmoid(p[:, 3])
                    c = f * c + i * cc
                    h_new = q(o * np.tanh(c))
                    if wp_all is not None:
                        wp = wp_all[l, d]
                        acc_p = h_new @ wp
                        h_new = q((acc_p - sh * wp.sum(axis=0)) / pwsd)
                else:
                    acc = gx[:, :2] + np.einsum("nk,kgo->ngo", h, wi[:, :2])
                    p = pre(acc, slice(0, 2))
                    u, r = _sigmoid(p[:, 0]), _sigmoid(p[:, 1])
                    hd = deq(h)
                    rh = q(hd * r)
                    o = np.tanh(pre(gx[:, 2] + rh @ wi[:, 2], 2))
                    h_new = q(u * hd + (1 - u) * o)
                y[t] = h_new
                h = h_new
            h_last[l, d] = h
            if lstm:
                c_last[l, d] = c
            x = y
        ys.append(x)

    layer_dt = dst_layer_dt or data_type
    if direction == "bidirectional_sum":
        total = np.clip(ys[0] + ys[1], lo, hi)
        dst_layer = (total - 2 * sh) / sc if layer_dt == "f32" else total
    else:
        codes = np.concatenate(ys, axis=-1) if D == 2 else ys[0]
        dst_layer = deq(codes) if layer_dt == "f32" else codes
    dst_iter = deq(h_last) if (dst_iter_dt or data_type) == "f32" else h_last
    return {"dst_layer": dst_layer, "dst_iter": dst_iter, "dst_iter_c": c_last}
