"""Plain numpy reference of oneDNN's RNN primitive: forward and analytic backward (BPTT),
with the features MIOpen, cuDNN, PyTorch and MXNet add to oneDNN's model.

Written by hand from oneDNN's cell equations; it takes only structural facts (gate counts)
from :mod:`pydnnl.cells`, never the formula expressions, so that tests can check the two
against each other.

All tensors are numpy arrays in oneDNN's logical layouts:

=====================  ===================  ==============================================
tensor                 shape                notes
=====================  ===================  ==============================================
src_layer              [T, N, SLC]          tnc
src_iter               [L, D, N, SIC]       None = zeros
src_iter_c             [L, D, N, DHC]       LSTM only; None = zeros
weights_layer          [L, D, SLC, G, DHC]  ldigo
weights_iter           [L, D, SIC, G, DHC]  ldigo
bias                   [L, D, Gb, DHC]      ldgo; Gb = G + 1 for the LBR kinds; None = zeros
weights_peephole       [L, D, 3, DHC]       LSTM only, gate order i, f, o
weights_projection     [L, D, DHC, DIC]     LSTM only (ldio)
attention              [T, N] or [T, N, 1]  AUGRU kinds only
dst_layer              [T, N, DLC]          DLC = 2 DIC for bidirectional_concat, else DIC
dst_iter               [L, D, N, DIC]
dst_iter_c             [L, D, N, DHC]       LSTM only (None otherwise)
=====================  ===================  ==============================================

Directions follow oneDNN: each direction runs the whole stack of L layers on its own (layer
l of direction d reads layer l-1 of the same direction, layer 0 reads src_layer); only the
last layer's outputs are joined (concatenated along channels, left-to-right first, or
summed). Right-to-left processes t = T-1 .. 0 and writes its output at the same t.

The attention input of the AUGRU kinds applies at time t to every layer and direction
(oneDNN itself allows only one layer, left-to-right).

Extensions (keyword arguments of :func:`rnn_forward`, all off by default):

``seq_lengths`` [N]
    sequence n uses steps t < len[n] only (padded form, lengths in any order). dst_layer is
    zero at t >= len[n]; dst_iter / dst_iter_c hold the state after each sequence's last valid
    step (left-to-right: t = len[n] - 1; right-to-left starts at t = len[n] - 1 from the
    initial state and ends at t = 0). Backward ignores diff_dst_layer at padded positions,
    feeds diff_dst_iter(_c) in at each sequence's last valid step and returns zeros in
    diff_src_layer there. :func:`pack_padded` / :func:`unpack_packed` convert to and from
    PyTorch's packed form.
``layer_bidirectional``
    per-layer bidirectional stacks (bidirectional_concat only): layer l >= 1 of both
    directions reads [h_fwd, h_bwd] of layer l-1 (2 DIC channels; with L > 1, SLC = 2 DIC).
``dropout_scales`` [L-1, D, T, N, DIC]
    layer l's output of direction d is multiplied by dropout_scales[l, d] where layer l+1 reads
    it (not in the recurrence, not in dst_iter, never on the top layer). Dropout's scales are
    0 or 1 / (1 - p); any non-negative values are accepted.
``skip_input``
    layer 0 has no input matrix: src_layer (SLC = DHC) is added to every gate's
    pre-activation; weights_layer[0] is not read (weights_layer may be None when L = 1) and
    its gradient is zero.
``no_bias``
    there is no bias (bias must be None) and backward returns diff_bias None.
``clip``, ``clip_nan``
    LSTM only: the new cell state is clamped into [min, max] before o tanh(c) is computed and
    before it is carried on (a peephole o gate sees the clamped value). A NaN cell state
    propagates, unless ``clip_nan``: the clamp is then fmin(fmax(c, min), max), which maps NaN
    to min. Backward passes no gradient through a pre-clamp value that is not strictly inside
    (min, max) or is NaN.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..cells import CellSpec, get_cell
from ..error import invalid_arguments

DIRECTIONS = (
    "unidirectional_left2right",
    "unidirectional_right2left",
    "bidirectional_concat",
    "bidirectional_sum",
)
ACTIVATIONS = ("relu", "tanh", "logistic")

_LSTM, _RNN = "vanilla_lstm", "vanilla_rnn"
_VANILLA_GRUS = ("vanilla_gru", "vanilla_augru")
# --------------------------------------------------------------------------------------------
# elementwise helpers
# --------------------------------------------------------------------------------------------
def _sigmoid(x: np.ndarray) -> np.ndarray:
    # 1 / (1 + exp(-x)) without overflow for large |x|
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _act(activation: str, alpha: float, x: np.ndarray) -> np.ndarray:
    if activation == "relu":
        return np.where(x > 0, x, x * alpha)
    if activation == "tanh":
        return np.tanh(x)
    return _sigmoid(x)


def _act_grad(activation: str, alpha: float, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """d act / d x at pre-activation x with output y."""
    if activation == "relu":
        return np.where(x > 0, 1.0, alpha).astype(x.dtype)
    if activation == "tanh":
        return 1 - y * y
    return y * (1 - y)


def _clamp(c: np.ndarray, clip: tuple[float, float], clip_nan: bool) -> np.ndarray:
    lo, hi = (c.dtype.type(v) for v in clip)
    if clip_nan:
        return np.fmin(np.fmax(c, lo), hi)  # fmax prefers the number: NaN becomes lo
    return np.minimum(np.maximum(c, lo), hi)  # maximum / minimum propagate NaN


def _normalize_direction(direction: Any) -> str:
    if isinstance(direction, str):
        d = direction.lower()
        if d.startswith("dnnl_"):
            d = d[5:]
        if d in DIRECTIONS:
            return d
    elif isinstance(direction, (int, np.integer)) and 1 <= int(direction) <= 4:
        return DIRECTIONS[int(direction) - 1]
    raise invalid_arguments(f"direction must be one of {', '.join(DIRECTIONS)}, "
                            f"got {direction!r}")


def _normalize_activation(activation: Any) -> str:
    a = str(activation).lower()
    for prefix in ("dnnl_", "eltwise_"):
        if a.startswith(prefix):
            a = a[len(prefix):]
    if a == "sigmoid":
        a = "logistic"
    if a not in ACTIVATIONS:
        raise invalid_arguments(f"activation must be one of {', '.join(ACTIVATIONS)}, "
                                f"got {activation!r}")
    return a


def _check_shape(name: str, arr: np.ndarray, expected: tuple) -> None:
    if tuple(arr.shape) != tuple(expected):
        raise invalid_arguments(f"{name}: expected shape {tuple(expected)}, "
                                f"got {tuple(arr.shape)}")


def _check_lengths(name: str, lengths: Any, T: int, N: int) -> np.ndarray:
    """Validated sequence lengths: N integers in [1, T]."""
    lens = np.asarray(lengths)
    if lens.dtype == bool or not np.issubdtype(lens.dtype, np.integer):
        raise invalid_arguments(f"{name}: expected integers, got dtype {lens.dtype}")
    _check_shape(name, lens, (N,))
    if N and (lens.min() < 1 or lens.max() > T):
        raise invalid_arguments(f"{name}: expected values in [1, T = {T}], got {lens.tolist()}")
    return lens.astype(np.int64)


# --------------------------------------------------------------------------------------------
# one cell, one time step
# --------------------------------------------------------------------------------------------
def cell_forward_step(
    cell: str | int | CellSpec,
    x: np.ndarray,
    h_prev: np.ndarray,
    c_prev: np.ndarray | None,
    w_layer: np.ndarray | None,
    w_iter: np.ndarray,
    bias: np.ndarray,
    *,
    activation: str = "tanh",
    alpha: float = 0.0,
    peephole: np.ndarray | None = None,
    projection: np.ndarray | None = None,
    att: np.ndarray | None = None,
    clip: tuple[float, float] | None = None,
    clip_nan: bool = False,
) -> tuple[np.ndarray, np.ndarray | None, dict[str, np.ndarray]]:
    """One time step of one layer and direction.

    Shapes: x [N, SLC], h_prev [N, SIC], c_prev [N, DHC], w_layer [SLC, G, DHC],
    w_iter [SIC, G, DHC], bias [Gb, DHC], peephole [3, DHC], projection [DHC, DIC], att [N].
    ``w_layer`` None is skip input (x, with SLC = DHC, added to every gate); ``clip`` clamps
    the LSTM cell state (see the module docstring).
    Returns (h_t [N, DIC], c_t [N, DHC] or None, saved values for the backward step).
    """
    spec = get_cell(cell)
    n = x.shape[0]
    g, dhc = w_iter.shape[1], w_iter.shape[2]
    if w_layer is None:
        gx = x[:, None, :] + bias[:g]
    else:
        gx = (x @ w_layer.reshape(w_layer.shape[0], g * dhc)).reshape(n, g, dhc) + bias[:g]
    s: dict[str, Any] = {"x": x, "h_prev": h_prev, "gx": gx}

    if spec.name == _RNN:
        gh = (h_prev @ w_iter.reshape(w_iter.shape[0], g * dhc)).reshape(n, g, dhc)
        pre = gx[:, 0] + gh[:, 0]
        h = _act(activation, alpha, pre)
        s.update(pre=pre, h=h, activation=activation, alpha=alpha)
        return h, None, s

    if spec.name == _LSTM:
        gh = (h_prev @ w_iter.reshape(w_iter.shape[0], g * dhc)).reshape(n, g, dhc)
        pre = gx + gh
        pi, pf, pc, po = pre[:, 0], pre[:, 1], pre[:, 2], pre[:, 3]
        if peephole is not None:
            pi = pi + peephole[0] * c_prev
            pf = pf + peephole[1] * c_prev
        i, f, cc = _sigmoid(pi), _sigmoid(pf), np.tanh(pc)
        c = f * c_prev + i * cc
        if clip is not None:
            # the clamp passes gradient only strictly inside the range (False for NaN)
            s.update(c_pre=c, c_pass=(c > clip[0]) & (c < clip[1]))
            c = _clamp(c, clip, clip_nan)
        if peephole is not None:
            po = po + peephole[2] * c
        o = _sigmoid(po)
        tc = np.tanh(c)
        ht = o * tc
        h = ht @ projection if projection is not None else ht
        s.update(c_prev=c_prev, i=i, f=f, cc=cc, o=o, c=c, tc=tc, ht=ht)
        return h, c, s

    # GRU family
    u = _sigmoid(gx[:, 0] + h_prev @ w_iter[:, 0])
    r = _sigmoid(gx[:, 1] + h_prev @ w_iter[:, 1])
    if spec.name in _VANILLA_GRUS:
        rh = r * h_prev
        o = np.tanh(gx[:, 2] + rh @ w_iter[:, 2])
        s.update(rh=rh)
    else:
        gho = h_prev @ w_iter[:, 2] + bias[3]
        o = np.tanh(gx[:, 2] + r * gho)
        s.update(gho=gho)
    if spec.has_attention:
        ut = (1 - att[:, None]) * u
        s.update(att=att)
    else:
        ut = u
    h = ut * h_prev + (1 - ut) * o
    s.update(u=u, r=r, o=o, ut=ut)
    return h, None, s


def cell_backward_step(
    cell: str | int | CellSpec,
    s: dict[str, Any],
    dh: np.ndarray,
    dc: np.ndarray | None,
    w_layer: np.ndarray | None,
    w_iter: np.ndarray,
    *,
    peephole: np.ndarray | None = None,
    projection: np.ndarray | None = None,
) -> dict[str, np.ndarray | None]:
    """Backward of :func:`cell_forward_step` given d loss / d h_t and d loss / d c_t.

    Returns dx, dh_prev, dc_prev and this step's contributions dw_layer (None for skip input,
    ``w_layer`` None), dw_iter, dbias (over all Gb bias gates), dpeephole, dprojection, datt.
    """
    spec = get_cell(cell)
    x, h_prev = s["x"], s["h_prev"]
    n = x.shape[0]
    sic, g, dhc = w_iter.shape
    out: dict[str, Any] = {"dc_prev": None, "dpeephole": None, "dprojection": None,
                           "datt": None}
    dbias = np.zeros((spec.n_bias_gates, dhc), dtype=dh.dtype)

    if spec.name == _RNN:
        dgx = (dh * _act_grad(s["activation"], s["alpha"], s["pre"], s["h"]))[:, None, :]
        dgh = dgx
        dh_prev = dgh.reshape(n, g * dhc) @ w_iter.reshape(sic, g * dhc).T
        dw_iter = h_prev.T @ dgh.reshape(n, g * dhc)
    elif spec.name == _LSTM:
        i, f, cc, o, c, tc, c_prev = (s[k] for k in ("i", "f", "cc", "o", "c", "tc", "c_prev"))
        if projection is not None:
            out["dprojection"] = s["ht"].T @ dh
            dht = dh @ projection.T
        else:
            dht = dh
        dpo = dht * tc * o * (1 - o)
        dct = dc + dht * o * (1 - tc * tc)
        if peephole is not None:
            dct = dct + dpo * peephole[2]
        if "c_pass" in s:
            # dct is d loss / d clamped c; the clamp passes it only where it did not clamp
            dct = np.where(s["c_pass"], dct, 0).astype(dct.dtype)
        dpi = dct * cc * i * (1 - i)
        dpf = dct * c_prev * f * (1 - f)
        dpc = dct * i * (1 - cc * cc)
        dc_prev = dct * f
        if peephole is not None:
            dc_prev = dc_prev + dpi * peephole[0] + dpf * peephole[1]
            out["dpeephole"] = np.stack([(dpi * c_prev).sum(0), (dpf * c_prev).sum(0),
                                         (dpo * c).sum(0)])
        out["dc_prev"] = dc_prev
        dgx = np.stack([dpi, dpf, dpc, dpo], axis=1)
        dgh = dgx
        dh_prev = dgh.reshape(n, g * dhc) @ w_iter.reshape(sic, g * dhc).T
        dw_iter = h_prev.T @ dgh.reshape(n, g * dhc)
    else:
        u, r, o, ut = s["u"], s["r"], s["o"], s["ut"]
        dut = dh * (h_prev - o)
        do = dh * (1 - ut)
        dh_prev = dh * ut
        if spec.has_attention:
            du = dut * (1 - s["att"][:, None])
            out["datt"] = -(dut * u).sum(1)
        else:
            du = dut
        dpu = du * u * (1 - u)
        dpo = do * (1 - o * o)
        dw_iter = np.zeros((sic, g, dhc), dtype=dh.dtype)
        if spec.name in _VANILLA_GRUS:
            drh = dpo @ w_iter[:, 2].T
            dw_iter[:, 2] = s["rh"].T @ dpo
            dr = drh * h_prev
            dh_prev = dh_prev + drh * r
            dgh_o = None
        else:
            dr = dpo * s["gho"]
            dgh_o = dpo * r
            dw_iter[:, 2] = h_prev.T @ dgh_o
            dh_prev = dh_prev + dgh_o @ w_iter[:, 2].T
            dbias[3] = dgh_o.sum(0)
        dpr = dr * r * (1 - r)
        dw_iter[:, 0] = h_prev.T @ dpu
        dw_iter[:, 1] = h_prev.T @ dpr
        dh_prev = dh_prev + dpu @ w_iter[:, 0].T + dpr @ w_iter[:, 1].T
        dw_iter = dw_iter.reshape(sic, g * dhc)
        dgx = np.stack([dpu, dpr, dpo], axis=1)

    dgx2 = dgx.reshape(n, g * dhc)
    dbias[:g] += dgx.sum(0)
    if w_layer is None:
        # skip input: x entered every gate unchanged
        dx, dw_layer = dgx.sum(1), None
    else:
        slc = w_layer.shape[0]
        dx = dgx2 @ w_layer.reshape(slc, g * dhc).T
        dw_layer = (x.T @ dgx2).reshape(slc, g, dhc)
    out.update(
        dx=dx,
        dh_prev=dh_prev,
        dw_layer=dw_layer,
        dw_iter=dw_iter.reshape(sic, g, dhc),
        dbias=dbias,
    )
    return out


# --------------------------------------------------------------------------------------------
# variable lengths: padded <-> packed
# --------------------------------------------------------------------------------------------
def pack_padded(x: np.ndarray, lengths: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Padded x [T, N, ...] to PyTorch's packed form: (data [sum_t batch_t, ...],
    batch_sizes [max(lengths)], sorted_indices [N]).

    Sequences are ordered by decreasing length (stable for ties); the rows of step t are the
    first batch_sizes[t] of them, steps one after another.
    """
    x = np.asarray(x)
    if x.ndim < 2:
        raise invalid_arguments(f"x: expected at least 2 dims [T, N, ...], got shape {x.shape}")
    T, N = x.shape[:2]
    lens = _check_lengths("lengths", lengths, T, N)
    order = np.argsort(-lens, kind="stable")
    batch_sizes = np.array([int((lens > t).sum()) for t in range(int(lens.max()))], np.int64)
    data = np.concatenate([x[t, order[:bs]] for t, bs in enumerate(batch_sizes)])
    return data, batch_sizes, order


def unpack_packed(data: np.ndarray, batch_sizes: Any, sorted_indices: Any, T: int) -> np.ndarray:
    """Packed (data, batch_sizes, sorted_indices) back to padded x [T, N, ...] with zeros at
    padded positions; the inverse of :func:`pack_padded`. ``sorted_indices`` None means the
    sequences are already in decreasing length order."""
    data = np.asarray(data)
    bs = np.asarray(batch_sizes)
    if bs.ndim != 1 or bs.size == 0 or not np.issubdtype(bs.dtype, np.integer):
        raise invalid_arguments(f"batch_sizes: expected a non-empty 1-D integer array, got "
                                f"shape {bs.shape}, dtype {bs.dtype}")
    if bs.min() < 1 or np.any(np.diff(bs) > 0):
        raise invalid_arguments(f"batch_sizes: expected positive non-increasing values, "
                                f"got {bs.tolist()}")
    if not isinstance(T, (int, np.integer)) or T < bs.size:
        raise invalid_arguments(f"T: expected an integer >= len(batch_sizes) = {bs.size}, "
                                f"got {T!r}")
    if data.ndim < 1 or data.shape[0] != bs.sum():
        raise invalid_arguments(f"data: expected sum(batch_sizes) = {int(bs.sum())} rows, "
                                f"got shape {data.shape}")
    N = int(bs[0])
    if sorted_indices is None:
        order = np.arange(N)
    else:
        order = np.asarray(sorted_indices)
        if order.shape != (N,) or not np.array_equal(np.sort(order), np.arange(N)):
            raise invalid_arguments(f"sorted_indices: expected a permutation of 0 .. {N - 1}, "
                                    f"got {order.tolist()}")
    out = np.zeros((int(T), N) + data.shape[1:], data.dtype)
    start = np.concatenate([[0], np.cumsum(bs)])
    for t, b in enumerate(bs):
        out[t, order[:b]] = data[start[t]:start[t + 1]]
    return out


# --------------------------------------------------------------------------------------------
# the whole primitive
# --------------------------------------------------------------------------------------------
def _direction_plan(direction: str) -> tuple[int, list[bool]]:
    """(D, [runs right-to-left for each d])."""
    if direction == "unidirectional_left2right":
        return 1, [False]
    if direction == "unidirectional_right2left":
        return 1, [True]
    return 2, [False, True]


@dataclass(frozen=True)
class _Extensions:
    """The validated extension arguments of one forward call (kept in the cache)."""

    valid: np.ndarray | None  # [T, N] bool: step t of sequence n is real (seq_lengths)
    layer_bidirectional: bool
    dropout: np.ndarray | None  # [L-1, D, T, N, DIC]
    skip_input: bool
    no_bias: bool
    clip: tuple[float, float] | None
    clip_nan: bool


def _validate_extensions(spec: CellSpec, direction: str, dims: dict[str, int], dtype: Any,
                         wl_given: bool, bias_given: bool, *, seq_lengths: Any,
                         layer_bidirectional: bool, dropout_scales: Any, skip_input: bool,
                         no_bias: bool, clip: Any, clip_nan: bool) -> _Extensions:
    T, N, L, D = dims["T"], dims["N"], dims["L"], dims["D"]
    SLC, DHC, DIC = dims["SLC"], dims["DHC"], dims["DIC"]

    valid = None
    if seq_lengths is not None:
        lens = _check_lengths("seq_lengths", seq_lengths, T, N)
        valid = np.arange(T)[:, None] < lens[None, :]

    if layer_bidirectional and direction != "bidirectional_concat":
        raise invalid_arguments(f"layer_bidirectional: needs direction bidirectional_concat, "
                                f"got {direction}")
    layer_in = 2 * DIC if layer_bidirectional else DIC
    if L > 1 and SLC != layer_in:
        what = "2 * DIC" if layer_bidirectional else "DIC"
        raise invalid_arguments(
            f"weights_layer: with L > 1{' and layer_bidirectional' if layer_bidirectional else ''}"
            f" layers above the first read {what} = {layer_in} channels, but SLC = {SLC}")

    if skip_input:
        if SLC != DHC:
            raise invalid_arguments(f"skip_input: needs SLC == DHC, got SLC = {SLC}, "
                                    f"DHC = {DHC}")
    if not wl_given and not (skip_input and L == 1):
        raise invalid_arguments("weights_layer: required unless skip_input with L == 1, "
                                "got None")

    if no_bias and bias_given:
        raise invalid_arguments("bias: must be None with no_bias=True, got an array")

    dropout = None
    if dropout_scales is not None:
        dropout = np.asarray(dropout_scales).astype(dtype, copy=False)
        _check_shape("dropout_scales", dropout, (L - 1, D, T, N, DIC))
        if not np.all(np.isfinite(dropout)) or np.any(dropout < 0):
            raise invalid_arguments("dropout_scales: expected finite non-negative values "
                                    "(0 or 1 / (1 - p))")
        if L == 1:
            dropout = None

    if clip is not None:
        if spec.name != _LSTM:
            raise invalid_arguments(f"clip: the cell state clamp is for vanilla_lstm only, "
                                    f"got cell {spec.name}")
        try:
            lo, hi = (float(v) for v in clip)
        except (TypeError, ValueError):
            raise invalid_arguments(f"clip: expected (min, max), got {clip!r}") from None
        if not lo <= hi:
            raise invalid_arguments(f"clip: expected min <= max, got min = {lo}, max = {hi}")
        clip = (lo, hi)
    elif clip_nan:
        raise invalid_arguments("clip_nan: needs clip = (min, max), got clip None")

    return _Extensions(valid=valid, layer_bidirectional=bool(layer_bidirectional),
                       dropout=dropout, skip_input=bool(skip_input), no_bias=bool(no_bias),
                       clip=clip, clip_nan=bool(clip_nan))


def _dropped(y: np.ndarray, ext: _Extensions, l: int, d: int) -> np.ndarray:
    """Layer l's output of direction d as layer l+1 reads it."""
    return y if ext.dropout is None else y * ext.dropout[l, d]


def _layer_input(l: int, d: int, src: np.ndarray, outs: dict, ext: _Extensions,
                 D: int) -> np.ndarray:
    """What layer l of direction d reads: src_layer, or layer l-1's output(s)."""
    if l == 0:
        return src
    if ext.layer_bidirectional:
        return np.concatenate([_dropped(outs[(l - 1, e)], ext, l - 1, e) for e in range(D)],
                              axis=2)
    return _dropped(outs[(l - 1, d)], ext, l - 1, d)


def _forward_layer(spec: CellSpec, x: np.ndarray, h: np.ndarray, c: np.ndarray | None,
                   order: range, valid: np.ndarray | None, att: np.ndarray | None,
                   **step_kw: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, list]:
    """One layer, one direction over all steps: (y [T, N, DIC], last h, last c, saved)."""
    T = x.shape[0]
    saved: list[dict[str, Any]] = [None] * T  # type: ignore[list-item]
    ys: list[np.ndarray] = [None] * T  # type: ignore[list-item]
    for t in order:
        h_new, c_new, saved[t] = cell_forward_step(
            spec, x[t], h, c, att=None if att is None else att[t], **step_kw)
        if valid is not None:
            # a finished (or not yet started) sequence keeps its state and outputs zeros
            m = valid[t][:, None]
            h_new = np.where(m, h_new, h)
            if c is not None:
                c_new = np.where(m, c_new, c)
            ys[t] = np.where(m, h_new, 0).astype(h_new.dtype)
        else:
            ys[t] = h_new
        h, c = h_new, c_new
    return np.stack(ys), h, c, saved


def rnn_forward(
    cell: str | int | CellSpec,
    src_layer: np.ndarray,
    src_iter: np.ndarray | None,
    src_iter_c: np.ndarray | None,
    weights_layer: np.ndarray | None,
    weights_iter: np.ndarray,
    bias: np.ndarray | None,
    *,
    direction: str | int = "unidirectional_left2right",
    activation: str = "tanh",
    alpha: float = 0.0,
    weights_peephole: np.ndarray | None = None,
    weights_projection: np.ndarray | None = None,
    attention: np.ndarray | None = None,
    dtype: Any = None,
    seq_lengths: Any = None,
    layer_bidirectional: bool = False,
    dropout_scales: np.ndarray | None = None,
    skip_input: bool = False,
    no_bias: bool = False,
    clip: tuple[float, float] | None = None,
    clip_nan: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, dict[str, Any]]:
    """Forward pass; returns (dst_layer, dst_iter, dst_iter_c, cache).

    Computes in ``dtype`` (default: the result type of the given data arrays). ``cache`` holds
    what :func:`rnn_backward` needs. ``activation`` and ``alpha`` apply to vanilla_rnn only.
    The extension arguments (seq_lengths .. clip_nan) are described in the module docstring.
    """
    spec = get_cell(cell)
    direction = _normalize_direction(direction)
    activation = _normalize_activation(activation)

    arrays = {"src_layer": src_layer, "src_iter": src_iter, "src_iter_c": src_iter_c,
              "weights_layer": weights_layer, "weights_iter": weights_iter, "bias": bias,
              "weights_peephole": weights_peephole, "weights_projection": weights_projection,
              "attention": attention}
    given = {k: np.asarray(v) for k, v in arrays.items() if v is not None}
    if dtype is None:
        dtype = np.result_type(*[a.dtype for a in given.values()])
        if not np.issubdtype(dtype, np.floating):
            dtype = np.dtype(np.float32)
    dtype = np.dtype(dtype)
    a = {k: v.astype(dtype, copy=False) for k, v in given.items()}

    # ---- structural validation
    if "src_layer" not in a or a["src_layer"].ndim != 3:
        raise invalid_arguments(f"src_layer: expected 3 dims [T, N, SLC], got "
                                f"{None if src_layer is None else np.shape(src_layer)}")
    T, N, SLC = a["src_layer"].shape
    wl, wi = a.get("weights_layer"), a.get("weights_iter")
    if wi is None or wi.ndim != 5:
        raise invalid_arguments(f"weights_iter: expected 5 dims [L, D, SIC, G, DHC], got "
                                f"{None if wi is None else wi.shape}")
    if wl is not None and wl.ndim != 5:
        raise invalid_arguments(f"weights_layer: expected 5 dims [L, D, SLC, G, DHC], "
                                f"got {wl.shape}")
    # the dims come from weights_layer where given (weights_iter when skip input omits it)
    ref_name, ref = ("weights_layer", wl) if wl is not None else ("weights_iter", wi)
    L, D, _, G, DHC = ref.shape
    D_expected, reverse = _direction_plan(direction)
    if D != D_expected:
        raise invalid_arguments(f"{ref_name}: direction {direction} needs D = {D_expected}, "
                                f"got D = {D} (shape {ref.shape})")
    if G != spec.n_gates:
        raise invalid_arguments(f"{ref_name}: cell {spec.name} has {spec.n_gates} gates, "
                                f"got G = {G} (shape {ref.shape})")
    if wl is not None:
        _check_shape("weights_layer", wl, (L, D, SLC, G, DHC))
    SIC = wi.shape[2]
    _check_shape("weights_iter", wi, (L, D, SIC, G, DHC))

    proj = a.get("weights_projection")
    peep = a.get("weights_peephole")
    if (proj is not None or peep is not None) and not spec.supports_projection:
        raise invalid_arguments(f"weights_peephole / weights_projection: cell {spec.name} "
                                f"takes neither (LSTM only)")
    if proj is not None:
        if proj.ndim != 4:
            raise invalid_arguments(f"weights_projection: expected [L, D, DHC, DIC], "
                                    f"got {proj.shape}")
        DIC = proj.shape[3]
        _check_shape("weights_projection", proj, (L, D, DHC, DIC))
    else:
        DIC = DHC
    if peep is not None:
        _check_shape("weights_peephole", peep, (L, D, 3, DHC))
    b = a.get("bias")
    if b is None:
        b = np.zeros((L, D, spec.n_bias_gates, DHC), dtype)
    _check_shape("bias", b, (L, D, spec.n_bias_gates, DHC))
    h0 = a.get("src_iter")
    if h0 is None:
        h0 = np.zeros((L, D, N, SIC), dtype)
    _check_shape("src_iter", h0, (L, D, N, SIC))
    if spec.has_cell_state:
        c0 = a.get("src_iter_c")
        if c0 is None:
            c0 = np.zeros((L, D, N, DHC), dtype)
        _check_shape("src_iter_c", c0, (L, D, N, DHC))
    else:
        if "src_iter_c" in a:
            raise invalid_arguments(f"src_iter_c: cell {spec.name} has no cell state, "
                                    f"pass None")
        c0 = None
    att = a.get("attention")
    if spec.has_attention:
        if att is None:
            raise invalid_arguments(f"attention: cell {spec.name} needs attention [T, N, 1]")
        if att.shape not in ((T, N), (T, N, 1)):
            raise invalid_arguments(f"attention: expected shape ({T}, {N}, 1) or ({T}, {N}), "
                                    f"got {att.shape}")
        att2 = att.reshape(T, N)
    else:
        if att is not None:
            raise invalid_arguments(f"attention: cell {spec.name} takes no attention, "
                                    f"pass None")
        att2 = None
    if spec.requires_sic_eq_dhc and SIC != DHC:
        raise invalid_arguments(f"weights_iter: cell {spec.name} needs SIC == DHC, "
                                f"got SIC = {SIC}, DHC = {DHC}")
    if T > 1 and SIC != DIC:
        raise invalid_arguments(f"weights_iter: with T > 1 the state fed back has DIC = {DIC} "
                                f"channels, but SIC = {SIC}")
    dims = {"T": T, "N": N, "L": L, "D": D, "SLC": SLC, "SIC": SIC, "DHC": DHC, "DIC": DIC,
            "G": G}
    ext = _validate_extensions(
        spec, direction, dims, dtype, wl is not None, "bias" in a, seq_lengths=seq_lengths,
        layer_bidirectional=layer_bidirectional, dropout_scales=dropout_scales,
        skip_input=skip_input, no_bias=no_bias, clip=clip, clip_nan=clip_nan)

    # ---- compute
    src = a["src_layer"]
    if ext.valid is not None:
        # padded positions are never read; zeroing them keeps whatever they hold (NaN
        # included) out of the masked arithmetic of the batched steps
        src = np.where(ext.valid[:, :, None], src, 0).astype(dtype)
        if att2 is not None:
            att2 = np.where(ext.valid, att2, 0).astype(dtype)
    dst_iter = np.zeros((L, D, N, DIC), dtype)
    dst_iter_c = np.zeros((L, D, N, DHC), dtype) if spec.has_cell_state else None
    steps: dict[tuple[int, int], list[dict[str, Any]]] = {}
    outs: dict[tuple[int, int], np.ndarray] = {}
    for l in range(L):
        for d in range(D):
            x = _layer_input(l, d, src, outs, ext, D)
            order = range(T - 1, -1, -1) if reverse[d] else range(T)
            outs[(l, d)], h, c, steps[(l, d)] = _forward_layer(
                spec, x, h0[l, d], None if c0 is None else c0[l, d], order, ext.valid, att2,
                w_layer=None if (ext.skip_input and l == 0) else wl[l, d], w_iter=wi[l, d],
                bias=b[l, d], activation=activation, alpha=alpha,
                peephole=None if peep is None else peep[l, d],
                projection=None if proj is None else proj[l, d],
                clip=ext.clip, clip_nan=ext.clip_nan)
            dst_iter[l, d] = h
            if dst_iter_c is not None:
                dst_iter_c[l, d] = c
    tops = [outs[(L - 1, d)] for d in range(D)]
    if direction == "bidirectional_concat":
        dst_layer = np.concatenate(tops, axis=2)
    elif direction == "bidirectional_sum":
        dst_layer = tops[0] + tops[1]
    else:
        dst_layer = tops[0]

    cache = {
        "cell": spec, "direction": direction, "reverse": reverse, "dtype": dtype,
        "dims": dims,
        "weights_layer": wl, "weights_iter": wi, "bias": b, "weights_peephole": peep,
        "weights_projection": proj, "attention_shape": None if att is None else att.shape,
        "steps": steps, "extensions": ext,
    }
    return dst_layer, dst_iter, dst_iter_c, cache


def _backward_layer(spec: CellSpec, saved: list, dy: np.ndarray, dh: np.ndarray,
                    dc: np.ndarray | None, order: range, valid: np.ndarray | None,
                    grads: dict[str, Any], **step_kw: Any) -> tuple[np.ndarray, np.ndarray,
                                                                    np.ndarray | None]:
    """BPTT through one layer and direction; ``order`` is the backward order of steps.

    Adds the weight gradients into ``grads`` (arrays for this layer and direction, None where
    absent) and returns (d input [T, N, C_in], d initial h, d initial c).
    """
    dxs: list[np.ndarray] = [None] * dy.shape[0]  # type: ignore[list-item]
    for t in order:
        dh_t, dc_t = dy[t] + dh, dc
        if valid is not None:
            # a padded step passes the state gradient through untouched and takes no
            # diff_dst_layer; its rows enter the cell step as zeros so add nothing
            m = valid[t][:, None]
            dh_t = np.where(m, dh_t, 0).astype(dh.dtype)
            if dc is not None:
                dc_t = np.where(m, dc, 0).astype(dc.dtype)
        g = cell_backward_step(spec, saved[t], dh_t, dc_t, **step_kw)
        if valid is not None:
            dxs[t] = np.where(m, g["dx"], 0).astype(dh.dtype)
            dh = np.where(m, g["dh_prev"], dh)
            if dc is not None:
                dc = np.where(m, g["dc_prev"], dc)
        else:
            dxs[t], dh, dc = g["dx"], g["dh_prev"], g["dc_prev"]
        for key in ("dw_layer", "dw_iter", "dbias", "dpeephole", "dprojection"):
            if grads[key] is not None:
                grads[key] += g[key]
        if grads["datt"] is not None:
            grads["datt"][t] += g["datt"]
    return np.stack(dxs), dh, dc


def _route_input_grad(dx: np.ndarray, l: int, d: int, dys: dict, d_src_layer: np.ndarray,
                      ext: _Extensions, D: int, DIC: int) -> None:
    """Send d loss / d (input of layer l, direction d) to where that input came from (the
    mirror of :func:`_layer_input`)."""
    if l == 0:
        d_src_layer += dx
        return
    sources = ([(e, dx[:, :, e * DIC:(e + 1) * DIC]) for e in range(D)]
               if ext.layer_bidirectional else [(d, dx)])
    for e, part in sources:
        part = _dropped(part, ext, l - 1, e)
        if (l - 1, e) in dys:
            dys[(l - 1, e)] = dys[(l - 1, e)] + part
        else:
            dys[(l - 1, e)] = part


def rnn_backward(
    cell: str | int | CellSpec,
    cache: dict[str, Any],
    diff_dst_layer: np.ndarray,
    diff_dst_iter: np.ndarray | None = None,
    diff_dst_iter_c: np.ndarray | None = None,
) -> dict[str, np.ndarray | None]:
    """Backward pass (BPTT) for the forward pass that produced ``cache``.

    Returns a dict with diff_src_layer, diff_src_iter, diff_src_iter_c, diff_weights_layer,
    diff_weights_iter, diff_bias, diff_weights_peephole, diff_weights_projection and
    diff_attention (None where the forward had no such tensor or had ``no_bias=True``;
    diff_src_iter is always given, as the gradient with respect to the initial state, zero
    or not). With skip input, diff_weights_layer[0] is zero.
    """
    spec = get_cell(cell)
    if spec.name != cache["cell"].name:
        raise invalid_arguments(f"cell: the cache was made by {cache['cell'].name}, "
                                f"got {spec.name}")
    dims, dtype = cache["dims"], cache["dtype"]
    T, N, L, D = dims["T"], dims["N"], dims["L"], dims["D"]
    SLC, SIC, DHC, DIC = dims["SLC"], dims["SIC"], dims["DHC"], dims["DIC"]
    direction, reverse = cache["direction"], cache["reverse"]
    wl, wi, b = cache["weights_layer"], cache["weights_iter"], cache["bias"]
    peep, proj = cache["weights_peephole"], cache["weights_projection"]
    ext: _Extensions = cache["extensions"]

    DLC = 2 * DIC if direction == "bidirectional_concat" else DIC
    ddl = np.asarray(diff_dst_layer, dtype=dtype)
    _check_shape("diff_dst_layer", ddl, (T, N, DLC))
    if diff_dst_iter is not None:
        ddi = np.asarray(diff_dst_iter, dtype=dtype)
        _check_shape("diff_dst_iter", ddi, (L, D, N, DIC))
    else:
        ddi = np.zeros((L, D, N, DIC), dtype)
    if spec.has_cell_state:
        if diff_dst_iter_c is not None:
            ddc = np.asarray(diff_dst_iter_c, dtype=dtype)
            _check_shape("diff_dst_iter_c", ddc, (L, D, N, DHC))
        else:
            ddc = np.zeros((L, D, N, DHC), dtype)
    elif diff_dst_iter_c is not None:
        raise invalid_arguments(f"diff_dst_iter_c: cell {spec.name} has no cell state, "
                                f"pass None")

    d_src_layer = np.zeros((T, N, SLC), dtype)
    d_src_iter = np.zeros((L, D, N, SIC), dtype)
    d_src_iter_c = np.zeros((L, D, N, DHC), dtype) if spec.has_cell_state else None
    d_wl = None if wl is None else np.zeros_like(wl)
    d_wi = np.zeros_like(wi)
    d_b = np.zeros_like(b)
    d_peep = None if peep is None else np.zeros_like(peep)
    d_proj = None if proj is None else np.zeros_like(proj)
    d_att = None if cache["attention_shape"] is None else np.zeros((T, N), dtype)

    # d loss / d output of layer l, direction d (before dropout), filled top-down
    dys: dict[tuple[int, int], np.ndarray] = {}
    for d in range(D):
        dys[(L - 1, d)] = (ddl[:, :, d * DIC:(d + 1) * DIC]
                           if direction == "bidirectional_concat" else ddl)
    for l in range(L - 1, -1, -1):
        for d in range(D):
            skip = ext.skip_input and l == 0
            grads = {"dw_layer": None if skip else d_wl[l, d], "dw_iter": d_wi[l, d],
                     "dbias": d_b[l, d], "dpeephole": None if peep is None else d_peep[l, d],
                     "dprojection": None if proj is None else d_proj[l, d], "datt": d_att}
            order = range(T) if reverse[d] else range(T - 1, -1, -1)
            dx, d_src_iter[l, d], dc = _backward_layer(
                spec, cache["steps"][(l, d)], dys.pop((l, d)), ddi[l, d].copy(),
                ddc[l, d].copy() if spec.has_cell_state else None, order, ext.valid, grads,
                w_layer=None if skip else wl[l, d], w_iter=wi[l, d],
                peephole=None if peep is None else peep[l, d],
                projection=None if proj is None else proj[l, d])
            if d_src_iter_c is not None:
                d_src_iter_c[l, d] = dc
            _route_input_grad(dx, l, d, dys, d_src_layer, ext, D, DIC)

    return {
        "diff_src_layer": d_src_layer,
        "diff_src_iter": d_src_iter,
        "diff_src_iter_c": d_src_iter_c,
        "diff_weights_layer": d_wl,
        "diff_weights_iter": d_wi,
        "diff_bias": None if ext.no_bias else d_b,
        "diff_weights_peephole": d_peep,
        "diff_weights_projection": d_proj,
        "diff_attention": None if d_att is None else d_att.reshape(cache["attention_shape"]),
    }

