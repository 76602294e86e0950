"""Plain numpy reference of oneDNN's RNN primitive: forward and analytic backward (BPTT).

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
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..cells import CellSpec, get_cell

DIRECTIONS = (
    "unidirectional_left2right",
    "unidirectional_right2left",
    "bidirectional_concat",
    "bidirectional_sum",
)
ACTIVATIONS = ("relu", "tanh", "logistic")

_LSTM, _RNN = "vanilla_lstm", "vanilla_rnn"
_VANILLA_GRUS = ("vanilla_gru", "vanilla_augru")
_LBR_GRUS = ("lbr_gru", "lbr_augru")


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


def _normalize_direction(direction: Any) -> str:
    if isinstance(direction, str):
        d = direction.lower()
        if d.startswith("dnnl_"):
            d = d[5:]
        if d in DIRECTIONS:
            return d
    elif isinstance(direction, (int, np.integer)) and 1 <= int(direction) <= 4:
        return DIRECTIONS[int(direction) - 1]
    raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")


def _normalize_activation(activation: Any) -> str:
    a = str(activation).lower()
    for prefix in ("dnnl_", "eltwise_"):
        if a.startswith(prefix):
            a = a[len(prefix):]
    if a == "sigmoid":
        a = "logistic"
    if a not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
    return a


def _check_shape(name: str, arr: np.ndarray, expected: tuple) -> None:
    if tuple(arr.shape) != tuple(expected):
        raise ValueError(f"{name}: expected shape {tuple(expected)}, got {tuple(arr.shape)}")


# --------------------------------------------------------------------------------------------
# one cell, one time step
# --------------------------------------------------------------------------------------------
def cell_forward_step(
    cell: str | int | CellSpec,
    x: np.ndarray,
    h_prev: np.ndarray,
    c_prev: np.ndarray | None,
    w_layer: np.ndarray,
    w_iter: np.ndarray,
    bias: np.ndarray,
    *,
    activation: str = "tanh",
    alpha: float = 0.0,
    peephole: np.ndarray | None = None,
    projection: np.ndarray | None = None,
    att: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray | None, dict[str, np.ndarray]]:
    """One time step of one layer and direction.

    Shapes: x [N, SLC], h_prev [N, SIC], c_prev [N, DHC], w_layer [SLC, G, DHC],
    w_iter [SIC, G, DHC], bias [Gb, DHC], peephole [3, DHC], projection [DHC, DIC], att [N].
    Returns (h_t [N, DIC], c_t [N, DHC] or None, saved values for the backward step).
    """
    spec = get_cell(cell)
    n = x.shape[0]
    g, dhc = w_layer.shape[1], w_layer.shape[2]
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
    w_layer: np.ndarray,
    w_iter: np.ndarray,
    *,
    peephole: np.ndarray | None = None,
    projection: np.ndarray | None = None,
) -> dict[str, np.ndarray | None]:
    """Backward of :func:`cell_forward_step` given d loss / d h_t and d loss / d c_t.

    Returns dx, dh_prev, dc_prev and this step's contributions dw_layer, dw_iter, dbias
    (over all Gb bias gates), dpeephole, dprojection, datt.
    """
    spec = get_cell(cell)
    x, h_prev = s["x"], s["h_prev"]
    n = x.shape[0]
    slc, g, dhc = w_layer.shape
    sic = w_iter.shape[0]
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
    out.update(
        dx=dgx2 @ w_layer.reshape(slc, g * dhc).T,
        dh_prev=dh_prev,
        dw_layer=(x.T @ dgx2).reshape(slc, g, dhc),
        dw_iter=dw_iter.reshape(sic, g, dhc),
        dbias=dbias,
    )
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


def rnn_forward(
    cell: str | int | CellSpec,
    src_layer: np.ndarray,
    src_iter: np.ndarray | None,
    src_iter_c: np.ndarray | None,
    weights_layer: np.ndarray,
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
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, dict[str, Any]]:
    """Forward pass; returns (dst_layer, dst_iter, dst_iter_c, cache).

    Computes in ``dtype`` (default: the result type of the given arrays). ``cache`` holds
    what :func:`rnn_backward` needs. ``activation`` and ``alpha`` apply to vanilla_rnn only.
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
        raise ValueError(f"src_layer: expected 3 dims [T, N, SLC], got "
                         f"{None if src_layer is None else np.shape(src_layer)}")
    T, N, SLC = a["src_layer"].shape
    wl, wi = a["weights_layer"], a["weights_iter"]
    if wl.ndim != 5:
        raise ValueError(f"weights_layer: expected 5 dims [L, D, SLC, G, DHC], got {wl.shape}")
    L, D, _, G, DHC = wl.shape
    D_expected, reverse = _direction_plan(direction)
    if D != D_expected:
        raise ValueError(f"weights_layer: direction {direction} needs D = {D_expected}, "
                         f"got D = {D} (shape {wl.shape})")
    if G != spec.n_gates:
        raise ValueError(f"weights_layer: cell {spec.name} has {spec.n_gates} gates, "
                         f"got G = {G} (shape {wl.shape})")
    _check_shape("weights_layer", wl, (L, D, SLC, G, DHC))
    if wi.ndim != 5:
        raise ValueError(f"weights_iter: expected 5 dims [L, D, SIC, G, DHC], got {wi.shape}")
    SIC = wi.shape[2]
    _check_shape("weights_iter", wi, (L, D, SIC, G, DHC))

    proj = a.get("weights_projection")
    peep = a.get("weights_peephole")
    if (proj is not None or peep is not None) and not spec.supports_projection:
        raise ValueError(f"weights_peephole / weights_projection: cell {spec.name} takes "
                         f"neither (LSTM only)")
    if proj is not None:
        if proj.ndim != 4:
            raise ValueError(f"weights_projection: expected [L, D, DHC, DIC], got {proj.shape}")
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
            raise ValueError(f"src_iter_c: cell {spec.name} has no cell state, pass None")
        c0 = None
    att = a.get("attention")
    if spec.has_attention:
        if att is None:
            raise ValueError(f"attention: cell {spec.name} needs attention [T, N, 1]")
        if att.shape not in ((T, N), (T, N, 1)):
            raise ValueError(f"attention: expected shape ({T}, {N}, 1) or ({T}, {N}), "
                             f"got {att.shape}")
        att2 = att.reshape(T, N)
    else:
        if att is not None:
            raise ValueError(f"attention: cell {spec.name} takes no attention, pass None")
        att2 = None
    if spec.requires_sic_eq_dhc and SIC != DHC:
        raise ValueError(f"weights_iter: cell {spec.name} needs SIC == DHC, got SIC = {SIC}, "
                         f"DHC = {DHC}")
    if T > 1 and SIC != DIC:
        raise ValueError(f"weights_iter: with T > 1 the state fed back has DIC = {DIC} "
                         f"channels, but SIC = {SIC}")
    if L > 1 and SLC != DIC:
        raise ValueError(f"weights_layer: with L > 1 layers above the first read DIC = {DIC} "
                         f"channels, but SLC = {SLC}")

    # ---- compute
    dst_iter = np.zeros((L, D, N, DIC), dtype)
    dst_iter_c = np.zeros((L, D, N, DHC), dtype) if spec.has_cell_state else None
    steps: dict[tuple[int, int], list[dict[str, Any]]] = {}
    tops = []
    for d in range(D):
        order = range(T - 1, -1, -1) if reverse[d] else range(T)
        x = a["src_layer"]
        for l in range(L):
            y = np.zeros((T, N, DIC), dtype)
            h = h0[l, d]
            c = c0[l, d] if c0 is not None else None
            saved: list[dict[str, Any]] = [None] * T  # type: ignore[list-item]
            for t in order:
                h, c, saved[t] = cell_forward_step(
                    spec, x[t], h, c, wl[l, d], wi[l, d], b[l, d],
                    activation=activation, alpha=alpha,
                    peephole=None if peep is None else peep[l, d],
                    projection=None if proj is None else proj[l, d],
                    att=None if att2 is None else att2[t])
                y[t] = h
            dst_iter[l, d] = h
            if dst_iter_c is not None:
                dst_iter_c[l, d] = c
            steps[(l, d)] = saved
            x = y
        tops.append(x)
    if direction == "bidirectional_concat":
        dst_layer = np.concatenate(tops, axis=2)
    elif direction == "bidirectional_sum":
        dst_layer = tops[0] + tops[1]
    else:
        dst_layer = tops[0]

    cache = {
        "cell": spec, "direction": direction, "reverse": reverse, "dtype": dtype,
        "dims": {"T": T, "N": N, "L": L, "D": D, "SLC": SLC, "SIC": SIC, "DHC": DHC,
                 "DIC": DIC, "G": G},
        "weights_layer": wl, "weights_iter": wi, "bias": b, "weights_peephole": peep,
        "weights_projection": proj, "attention_shape": None if att is None else att.shape,
        "steps": steps,
    }
    return dst_layer, dst_iter, dst_iter_c, cache


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
    diff_attention (None where the forward had no such tensor; diff_src_iter is always given,
    as the gradient with respect to the initial state, zero or not).
    """
    spec = get_cell(cell)
    if spec.name != cache["cell"].name:
        raise ValueError(f"cell: the cache was made by {cache['cell'].name}, got {spec.name}")
    dims, dtype = cache["dims"], cache["dtype"]
    T, N, L, D = dims["T"], dims["N"], dims["L"], dims["D"]
    SLC, SIC, DHC, DIC = dims["SLC"], dims["SIC"], dims["DHC"], dims["DIC"]
    direction, reverse = cache["direction"], cache["reverse"]
    wl, wi, b = cache["weights_layer"], cache["weights_iter"], cache["bias"]
    peep, proj = cache["weights_peephole"], cache["weights_projection"]

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
        raise ValueError(f"diff_dst_iter_c: cell {spec.name} has no cell state, pass None")

    d_src_layer = np.zeros((T, N, SLC), dtype)
    d_src_iter = np.zeros((L, D, N, SIC), dtype)
    d_src_iter_c = np.zeros((L, D, N, DHC), dtype) if spec.has_cell_state else None
    d_wl = np.zeros_like(wl)
    d_wi = np.zeros_like(wi)
    d_b = np.zeros_like(b)
    d_peep = None if peep is None else np.zeros_like(peep)
    d_proj = None if proj is None else np.zeros_like(proj)
    d_att = None if cache["attention_shape"] is None else np.zeros((T, N), dtype)

    for d in range(D):
        if direction == "bidirectional_concat":
            dy = ddl[:, :, d * DIC:(d + 1) * DIC]
        else:
            dy = ddl
        backward_order = range(T) if reverse[d] else range(T - 1, -1, -1)
        for l in range(L - 1, -1, -1):
            saved = cache["steps"][(l, d)]
            dh = ddi[l, d].copy()
            dc = ddc[l, d].copy() if spec.has_cell_state else None
            c_in = SLC if l == 0 else DIC
            dx = np.zeros((T, N, c_in), dtype)
            for t in backward_order:
                g = cell_backward_step(
                    spec, saved[t], dy[t] + dh, dc, wl[l, d], wi[l, d],
                    peephole=None if peep is None else peep[l, d],
                    projection=None if proj is None else proj[l, d])
                dx[t] = g["dx"]
                dh, dc = g["dh_prev"], g["dc_prev"]
                d_wl[l, d] += g["dw_layer"]
                d_wi[l, d] += g["dw_iter"]
                d_b[l, d] += g["dbias"]
                if d_peep is not None:
                    d_peep[l, d] += g["dpeephole"]
                if d_proj is not None:
                    d_proj[l, d] += g["dprojection"]
                if d_att is not None:
                    d_att[t] += g["datt"]
            d_src_iter[l, d] = dh
            if d_src_iter_c is not None:
                d_src_iter_c[l, d] = dc
            dy = dx
        d_src_layer += dy

    return {
        "diff_src_layer": d_src_layer,
        "diff_src_iter": d_src_iter,
        "diff_src_iter_c": d_src_iter_c,
        "diff_weights_layer": d_wl,
        "diff_weights_iter": d_wi,
        "diff_bias": d_b,
        "diff_weights_peephole": d_peep,
        "diff_weights_projection": d_proj,
        "diff_attention": None if d_att is None else d_att.reshape(cache["attention_shape"]),
    }
