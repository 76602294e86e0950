"""pydnnl.compat.miopen, the RNN half, used only through MIOpen's API.

Oracles: MIOpen's weight packing written here as a walk over the buffer in MIOpen's order
(all matrices by layer, direction, paramID, then all biases) and MIOpen's closed size formula
G H D (I + H + (L - 1)(D + 1) H) + 2 L D G H; pydnnl's float64 numpy reference
(``pydnnl.reference.rnn``) run one layer at a time on the padded sequences, with the weights
unpacked from the MIOpen buffer by that walk, MIOpen's gates mapped by hand (LSTM i, f, o, g;
GRU z, r, c linear-before-reset) and the layers chained here (dropout masks from
``pydnnl.reference.philox`` as documented).
"""
from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.compat import miopen as M
from pydnnl.reference import rnn as R
from pydnnl.reference.philox import dropout_scales

F32 = dnnl.memory.data_type.f32
SENTINEL = 777.0
GATES = {M.miopenRNNRELU: 1, M.miopenRNNTANH: 1, M.miopenLSTM: 4, M.miopenGRU: 3}


# -------------------------------------------------------------------------------------------------
# MIOpen's packing, walked in buffer order
# -------------------------------------------------------------------------------------------------
def walk(mode, H, L, D, I, skip, bias):
    """{("w", api layer, paramID): (offset, rows, cols)} and {("b", layer, biasID): offset}
    in buffer order, and the total element count."""
    G = GATES[mode]
    out, off = {}, 0
    for l in range(L):
        width = (0 if skip else I) if l == 0 else D * H
        for first, cols in ((0, width), (G, H)):       # input matrices, then hidden ones
            for d in range(D):
                for p in range(G):
                    if cols:        # skip mode: layer 0 has no input matrices
                        out[("w", l * D + d, first + p)] = (off, H, cols)
                    off += H * cols
    if bias:
        for l in range(L):
            for first in (0, G):                        # input-GEMM biases, then hidden-GEMM
                for d in range(D):
                    for p in range(G):
                        out[("b", l * D + d, first + p)] = (off, H, 1)
                        off += H
    return out, off


def size_formula(mode, H, L, D, I, skip, bias):
    G = GATES[mode]
    return G * H * D * ((0 if skip else I) + H + (L - 1) * (D + 1) * H) + (
        2 * L * G * H * D if bias else 0)


# oneDNN gate j <- MIOpen gate block ORDER[j]
ORDER = {M.miopenRNNRELU: [0], M.miopenRNNTANH: [0], M.miopenLSTM: [0, 1, 3, 2],
         M.miopenGRU: [0, 1, 2]}
CELL = {M.miopenRNNRELU: ("vanilla_rnn", "relu"), M.miopenRNNTANH: ("vanilla_rnn", "tanh"),
        M.miopenLSTM: ("vanilla_lstm", "tanh"), M.miopenGRU: ("lbr_gru", "tanh")}


class Case:
    def __init__(self, mode, H, L, bi, I, skip=False, bias=True, batches=(3, 3, 2, 1), p=0.0):
        self.mode, self.H, self.L, self.D, self.I = mode, H, L, 2 if bi else 1, I
        self.skip, self.bias, self.batches, self.p = skip, bias, list(batches), p
        self.G = GATES[mode]
        self.T, self.N, self.S = len(batches), batches[0], sum(batches)
        self.lens = [sum(1 for b in batches if b > n) for n in range(self.N)]
        self.layout, self.n_params = walk(mode, H, L, self.D, I, skip, bias)

    def __repr__(self):
        return (f"{M.miopenRNNMode_t(self.mode).name[6:]}-H{self.H}L{self.L}D{self.D}I{self.I}"
                f"{'-skip' if self.skip else ''}{'' if self.bias else '-nobias'}"
                f"{f'-p{self.p}' if self.p else ''}")

    # -- weights in oneDNN's terms, per layer -----------------------------------------------------
    def matrix(self, w, layer, pid):
        off, rows, cols = self.layout[("w", layer, pid)]
        return w[off:off + rows * cols].reshape(rows, cols)

    def bias_vec(self, w, layer, bid):
        off = self.layout[("b", layer, bid)][0]
        return w[off:off + self.H]

    def layer_weights(self, w, l):
        """(wl [1, D, C, G, H] or None, wi [1, D, H, G, H], bias [1, D, Gb, H] or None)."""
        G, D = self.G, self.D
        order = ORDER[self.mode]
        skip0 = self.skip and l == 0
        wl = None if skip0 else np.stack([np.stack(
            [self.matrix(w, l * D + d, order[j]).T for j in range(G)], 1) for d in range(D)])[None]
        wi = np.stack([np.stack([self.matrix(w, l * D + d, G + order[j]).T for j in range(G)], 1)
                       for d in range(D)])[None]
        if not self.bias:
            return wl, wi, None
        b = []
        for d in range(D):
            bw = [self.bias_vec(w, l * D + d, k) for k in range(G)]
            br = [self.bias_vec(w, l * D + d, G + k) for k in range(G)]
            if self.mode == M.miopenGRU:   # u = z pair, r = r pair, o = W_c's, u' = R_c's
                b.append(np.stack([bw[0] + br[0], bw[1] + br[1], bw[2], br[2]]))
            else:
                b.append(np.stack([bw[order[j]] + br[order[j]] for j in range(G)]))
        return wl, wi, np.stack(b)[None]

    def pack_grads(self, grads):
        """Per-layer reference gradients (dwl, dwi, db) -> a flat dw in MIOpen's packing."""
        G, H, D = self.G, self.H, self.D
        order = ORDER[self.mode]
        dw = np.full(self.n_params, np.nan)
        for l, (dwl, dwi, db) in enumerate(grads):
            for d in range(D):
                for j in range(G):
                    for first, t in ((0, dwl), (G, dwi)):
                        if t is None:
                            continue
                        off, rows, cols = self.layout[("w", l * D + d, first + order[j])]
                        dw[off:off + rows * cols] = t[0, d, :, j, :].T.reshape(-1)
                if db is None:
                    continue
                pairs = ([(0, [0, G]), (1, [1, G + 1]), (2, [2]), (3, [G + 2])]
                         if self.mode == M.miopenGRU else
                         [(j, [order[j], G + order[j]]) for j in range(G)])
                for j, bids in pairs:
                    for bid in bids:
                        off = self.layout[("b", l * D + d, bid)][0]
                        dw[off:off + H] = db[0, d, j]
        assert not np.isnan(dw).any()
        return dw


def pad(case, rows):
    """Packed [S, C] rows -> padded [T, N, C] (zeros after each sequence's end)."""
    return R.unpack_packed(rows, case.batches, None, case.T)


def packed(case, x):
    return R.pack_padded(x, case.lens)[0]


def masks(case, calls):
    """The documented dropout scales of call ``calls`` (0-based) of the dropout descriptor:
    one Philox key per primitive (seed, seed + 1), counter block call * M + l * D + d."""
    if not case.p or case.L == 1:
        return {}
    D, T, N, H = case.D, case.T, case.N, case.H
    groups = [range(case.L)] if case.I == D * H else [range(0, 1), range(1, case.L)]
    out = {}
    for gi, g in enumerate(groups):
        dropped = list(g) if gi < len(groups) - 1 else list(g)[:-1]
        per_call = len(dropped) * D
        for l in dropped:
            out[l] = np.concatenate([dropout_scales(
                SEED + gi, calls * per_call + (l - g.start) * D + d, T * N * H, case.p)
                .reshape(T, N, H) for d in range(D)], axis=2)
    return out


SEED = 1234


def reference(case, w, x, hx, cx, dy=None, dhy=None, dcy=None, drop=None):
    """Forward (and backward) of the MIOpen network, one layer at a time: returns
    (y, hy, cy, grads) with y packed, grads = (dx packed, dhx, dcx, dw packed) or None."""
    cell, act = CELL[case.mode]
    D, L = case.D, case.L
    direction = "bidirectional_concat" if D == 2 else "unidirectional_left2right"
    lstm = case.mode == M.miopenLSTM
    drop = drop or {}
    inp = pad(case, x)
    caches, hys, cys, outs = [], [], [], []
    for l in range(L):
        wl, wi, b = case.layer_weights(w, l)
        y, hy, cy, cache = R.rnn_forward(
            cell, inp, None if hx is None else hx[l * D:(l + 1) * D][None],
            (cx[l * D:(l + 1) * D][None] if cx is not None else None) if lstm else None,
            wl, wi, b, direction=direction, activation=act, dtype=np.float64,
            seq_lengths=case.lens, layer_bidirectional=D == 2, skip_input=case.skip and l == 0,
            no_bias=not case.bias)
        caches.append(cache)
        hys.append(hy[0])
        cys.append(cy[0] if lstm else None)
        outs.append(y)
        inp = y * drop[l] if l in drop else y
    y = packed(case, outs[-1])
    hy = np.concatenate(hys)
    cy = np.concatenate(cys) if lstm else None
    if dy is None:
        return y, hy, cy, None
    ddl = pad(case, dy)
    grads = [None] * L
    dhx, dcx = [None] * L, [None] * L
    for l in reversed(range(L)):
        g = R.rnn_backward(cell, caches[l], ddl,
                           None if dhy is None else dhy[l * D:(l + 1) * D][None],
                           None if dcy is None else dcy[l * D:(l + 1) * D][None])
        grads[l] = (g["diff_weights_layer"] if not (case.skip and l == 0) else None,
                    g["diff_weights_iter"], g["diff_bias"])
        dhx[l] = g["diff_src_iter"][0]
        dcx[l] = g["diff_src_iter_c"][0] if lstm else None
        ddl = g["diff_src_layer"]
        if l - 1 in drop:
            ddl = ddl * drop[l - 1]
    return y, hy, cy, (packed(case, ddl), np.concatenate(dhx),
                       np.concatenate(dcx) if lstm else None, case.pack_grads(grads))


# -------------------------------------------------------------------------------------------------
# the MIOpen side
# -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def eng(cpu_engine):
    return cpu_engine


@pytest.fixture(scope="module")
def handle(eng):
    return M.miopenCreateWithStream(dnnl.stream(eng))


def tdesc(dims, dt=None):
    d = M.miopenCreateTensorDescriptor()
    M.miopenSetTensorDescriptor(d, M.miopenFloat if dt is None else dt, len(dims), list(dims))
    return d


def mem(h, values=None, n=None):
    """A device buffer of n floats (or holding ``values``)."""
    n = int(np.size(values)) if n is None else n
    m = dnnl.memory(dnnl.memory.desc([n], F32, dnnl.memory.format_tag.a), h.engine)
    m.write(np.full(n, SENTINEL, np.float32) if values is None
            else np.asarray(values, np.float32).reshape(-1))
    return m


def read(h, m, n=None):
    h.stream.wait()
    a = m.to_numpy()
    return a if n is None else a[:n]


def rnn_desc(case, dropout=None):
    r = M.miopenCreateRNNDescriptor()
    args = (case.H, case.L)
    rest = (M.miopenRNNskip if case.skip else M.miopenRNNlinear,
            M.miopenRNNbidirection if case.D == 2 else M.miopenRNNunidirection, case.mode,
            M.miopenRNNwithBias if case.bias else M.miopenRNNNoBias, M.miopenRNNdefault,
            M.miopenFloat)
    if dropout is None:
        M.miopenSetRNNDescriptor(r, *args, *rest)
    else:
        M.miopenSetRNNDescriptor_V2(r, *args, dropout, *rest)
    return r


class Net:
    """A case set up through the API: descriptors, random weights written with
    miopenSetRNNLayerParam/Bias, buffers of the queried sizes."""

    def __init__(self, h, case, seed=0, dropout=None):
        self.h, self.case = h, case
        c = case
        self.r = rnn_desc(c, dropout)
        self.xd = [tdesc([b, c.I]) for b in c.batches]
        self.yd = [tdesc([b, c.D * c.H]) for b in c.batches]
        self.hd = tdesc([c.L * c.D, c.N, c.H])
        self.nbytes = M.miopenGetRNNParamsSize(h, self.r, self.xd[0], M.miopenFloat)
        self.wd = M.miopenCreateTensorDescriptor()
        M.miopenGetRNNParamsDescriptor(h, self.r, self.xd[0], self.wd, M.miopenFloat)
        rng = np.random.default_rng(seed)
        self.w_host = rng.uniform(-0.6, 0.6, c.n_params)
        self.w = mem(h, n=self.nbytes // 4)
        self.set_weights(self.w_host)
        self.ws_bytes = M.miopenGetRNNWorkspaceSize(h, self.r, c.T, self.xd)
        self.rs_bytes = M.miopenGetRNNTrainingReserveSize(h, self.r, c.T, self.xd)
        self.ws = mem(h, n=self.ws_bytes // 4)
        self.rs = mem(h, n=self.rs_bytes // 4)
        self.x = rng.uniform(-1, 1, (c.S, c.I))
        self.hx = rng.uniform(-0.5, 0.5, (c.L * c.D, c.N, c.H))
        self.cx = rng.uniform(-0.5, 0.5, (c.L * c.D, c.N, c.H))

    def set_weights(self, w):
        """Through miopenSetRNNLayerParam / miopenSetRNNLayerBias, block by block."""
        c, h = self.case, self.h
        for (kind, layer, ident), (off, rows, cols) in c.layout.items():
            block = w[off:off + rows * cols]
            if kind == "w":
                d = tdesc([rows, cols])
                M.miopenSetRNNLayerParam(h, self.r, layer, self.xd[0], self.wd, self.w, ident, d,
                                         mem(h, block))
            else:
                d = tdesc([rows])
                M.miopenSetRNNLayerBias(h, self.r, layer, self.xd[0], self.wd, self.w, ident, d,
                                        mem(h, block))

    def forward(self, training, hx=True, cx=True, hy=True, cy=True):
        c, h = self.case, self.h
        n_st = c.L * c.D * c.N * c.H
        self.xm, self.ym = mem(h, self.x), mem(h, n=c.S * c.D * c.H)
        self.hxm = mem(h, self.hx) if hx else None
        self.cxm = mem(h, self.cx) if cx else None
        self.hym = mem(h, n=n_st) if hy else None
        self.cym = mem(h, n=n_st) if cy else None
        args = (h, self.r, c.T, self.xd, self.xm, self.hd, self.hxm, self.hd, self.cxm, self.wd,
                self.w, self.yd, self.ym, self.hd, self.hym, self.hd, self.cym, self.ws,
                self.ws_bytes)
        if training:
            M.miopenRNNForwardTraining(*args, self.rs, self.rs_bytes)
        else:
            M.miopenRNNForwardInference(*args)
        out = [read(h, self.ym).reshape(c.S, c.D * c.H)]
        for m in (self.hym, self.cym):
            out.append(None if m is None else read(h, m).reshape(c.L * c.D, c.N, c.H))
        return out

    def backward(self, dy, dhy=None, dcy=None, dhx=True, dcx=True):
        c, h = self.case, self.h
        n_st = c.L * c.D * c.N * c.H
        self.dxm = mem(h, n=c.S * c.I)
        dhxm = mem(h, n=n_st) if dhx else None
        dcxm = mem(h, n=n_st) if dcx else None
        M.miopenRNNBackwardData(
            h, self.r, c.T, self.yd, self.ym, self.yd, mem(h, dy), self.hd,
            None if dhy is None else mem(h, dhy), self.hd, None if dcy is None else mem(h, dcy),
            self.wd, self.w, self.hd, self.hxm, self.hd, self.cxm, self.xd, self.dxm, self.hd,
            dhxm, self.hd, dcxm, self.ws, self.ws_bytes, self.rs, self.rs_bytes)
        self.dw = mem(h, n=self.nbytes // 4)     # full of SENTINEL: must be overwritten
        M.miopenRNNBackwardWeights(h, self.r, c.T, self.xd, self.xm, self.hd, self.hxm, self.yd,
                                   self.ym, self.wd, self.dw, self.ws, self.ws_bytes, self.rs,
                                   self.rs_bytes)
        return (read(h, self.dxm).reshape(c.S, c.I),
                None if dhxm is None else read(h, dhxm).reshape(c.L * c.D, c.N, c.H),
                None if dcxm is None else read(h, dcxm).reshape(c.L * c.D, c.N, c.H),
                read(h, self.dw))


def close(got, want, what, tol=2e-4):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs {want.shape}"
    err = np.max(np.abs(got - want) / (1 + np.abs(want))) if got.size else 0.0
    assert err < tol, f"{what}: max relative error {err:.3g}"


# -------------------------------------------------------------------------------------------------
# sizes, offsets, parameters
# -------------------------------------------------------------------------------------------------
MODES = [M.miopenRNNRELU, M.miopenRNNTANH, M.miopenLSTM, M.miopenGRU]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: M.miopenRNNMode_t(m).name)
def test_params_size_and_offsets(handle, mode):
    H, I = 3, 5
    for L in (1, 2, 3):
        for bi in (False, True):
            for skip in (False, True):
                for bias in (True, False):
                    inp = H if skip else I
                    case = Case(mode, H, L, bi, inp, skip, bias)
                    r = rnn_desc(case)
                    x = tdesc([2, inp])
                    nbytes = M.miopenGetRNNParamsSize(handle, r, x, M.miopenFloat)
                    want = size_formula(mode, H, L, case.D, inp, skip, bias)
                    assert nbytes == 4 * want == 4 * case.n_params, repr(case)
                    wd = M.miopenCreateTensorDescriptor()
                    M.miopenGetRNNParamsDescriptor(handle, r, x, wd, M.miopenFloat)
                    dt, dims, _ = M.miopenGetTensorDescriptor(wd)
                    assert dt == M.miopenFloat and np.prod(dims) == want
                    assert dims[1] == case.D * case.G * H
                    for (kind, layer, ident), (off, rows, cols) in case.layout.items():
                        d = M.miopenCreateTensorDescriptor()
                        if kind == "w":
                            got = M.miopenGetRNNLayerParamOffset(r, layer, x, ident, d)
                            size = M.miopenGetRNNLayerParamSize(handle, r, layer, x, ident)
                            assert M.miopenGetTensorDescriptor(d)[1] == [rows, cols]
                        else:
                            got = M.miopenGetRNNLayerBiasOffset(r, layer, x, ident, d)
                            size = M.miopenGetRNNLayerBiasSize(handle, r, layer, ident)
                            assert M.miopenGetTensorDescriptor(d)[1] == [rows]
                        assert got == off, f"{case} {kind} layer {layer} id {ident}"
                        assert size == 4 * rows * cols
                    if skip:   # layer 0's input matrices do not exist
                        for layer in range(case.D):
                            for pid in range(case.G):
                                assert M.miopenGetRNNLayerParamSize(handle, r, layer, x, pid) == 0
                                with pytest.raises(M.MIOpenError) as e:
                                    M.miopenGetRNNLayerParamOffset(
                                        r, layer, x, pid, M.miopenCreateTensorDescriptor())
                                assert e.value.status == M.miopenStatusBadParm


def test_set_then_get_round_trips(handle):
    case = Case(M.miopenLSTM, 3, 2, True, 4)
    net = Net(handle, case)
    w = read(handle, net.w)
    np.testing.assert_array_equal(w, net.w_host.astype(np.float32))
    for (kind, layer, ident), (off, rows, cols) in case.layout.items():
        d = M.miopenCreateTensorDescriptor()
        out = mem(handle, n=rows * cols + 2)        # two extra floats must stay untouched
        if kind == "w":
            M.miopenGetRNNLayerParam(handle, net.r, layer, net.xd[0], net.wd, net.w, ident, d, out)
        else:
            M.miopenGetRNNLayerBias(handle, net.r, layer, net.xd[0], net.wd, net.w, ident, d, out)
        got = read(handle, out)
        np.testing.assert_array_equal(got[:rows * cols], w[off:off + rows * cols])
        assert np.all(got[rows * cols:] == SENTINEL)
    # NULL output: only the descriptor is filled
    d = M.miopenCreateTensorDescriptor()
    M.miopenGetRNNLayerParam(handle, net.r, 2, net.xd[0], net.wd, net.w, 1, d, None)
    assert M.miopenGetTensorDescriptor(d)[1] == [3, 6]      # layer 1: [H, 2H]


def test_skip_mode_layer0_input_ids_are_bad(handle):
    case = Case(M.miopenGRU, 4, 2, False, 4, skip=True)
    net = Net(handle, case)
    before = read(handle, net.w)
    for pid in range(case.G):
        for fn, extra in ((M.miopenGetRNNLayerParam, None),
                          (M.miopenSetRNNLayerParam, mem(handle, np.zeros(16)))):
            d = tdesc([4, 4])
            with pytest.raises(M.MIOpenError) as e:
                fn(handle, net.r, 0, net.xd[0], net.wd, net.w, pid, d,
                   extra if extra is not None else mem(handle, n=16))
            assert e.value.status == M.miopenStatusBadParm
            assert "skip" in str(e.value)
    np.testing.assert_array_equal(read(handle, net.w), before)
    # its hidden matrices and both biases are there (MIOpen keeps the input-bias slots)
    d = M.miopenCreateTensorDescriptor()
    assert M.miopenGetRNNLayerParamOffset(net.r, 0, net.xd[0], case.G, d) == 0
    assert M.miopenGetRNNLayerBiasOffset(net.r, 0, net.xd[0], 0, d) == case.layout[("b", 0, 0)][0]


def test_descriptor_get_and_sizes(handle):
    case = Case(M.miopenGRU, 5, 2, True, 3)
    r = rnn_desc(case)
    assert M.miopenGetRNNDescriptor(r) == (M.miopenGRU, M.miopenRNNdefault, M.miopenRNNlinear,
                                           M.miopenRNNbidirection, M.miopenRNNwithBias, 5, 2)
    dd = M.miopenCreateDropoutDescriptor()
    states = mem(handle, n=M.miopenDropoutGetStatesSize(handle) // 4)
    M.miopenSetDropoutDescriptor(dd, handle, 0.25, states, M.miopenDropoutGetStatesSize(handle),
                                 99, False, False, M.MIOPEN_RNG_PSEUDO_XORWOW)
    assert M.miopenGetDropoutDescriptor(dd, handle) == (0.25, states, 99, False, False,
                                                        M.MIOPEN_RNG_PSEUDO_XORWOW)
    r2 = rnn_desc(case, dd)
    assert M.miopenGetRNNDescriptor_V2(r2) == (5, 2, dd, M.miopenRNNlinear,
                                               M.miopenRNNbidirection, M.miopenGRU,
                                               M.miopenRNNwithBias, M.miopenRNNdefault,
                                               M.miopenFloat)
    xd = [tdesc([b, 3]) for b in case.batches]
    assert M.miopenGetRNNInputTensorSize(handle, r, case.T, xd) == case.S * 3 * 4
    assert M.miopenGetRNNHiddenTensorSize(handle, r, case.T, xd) == 2 * 2 * case.N * 5 * 4
    for fn in (M.miopenGetRNNWorkspaceSize, M.miopenGetRNNTrainingReserveSize):
        assert fn(handle, r, case.T, xd) > 0
    M.miopenDestroyRNNDescriptor(r)
    with pytest.raises(M.MIOpenError, match="destroyed"):
        M.miopenGetRNNWorkspaceSize(handle, r, case.T, xd)


# -------------------------------------------------------------------------------------------------
# forward and backward against the reference
# -------------------------------------------------------------------------------------------------
CASES = [
    Case(M.miopenLSTM, 4, 2, False, 3),                       # layer 0 runs alone
    Case(M.miopenGRU, 3, 2, True, 5, batches=(4, 2, 2)),      # bidirectional, layer 0 alone
    Case(M.miopenRNNRELU, 4, 1, True, 2, batches=(2, 1, 1, 1, 1)),
    Case(M.miopenLSTM, 4, 2, False, 4, skip=True, bias=False),   # one stack, skip + no bias
    Case(M.miopenRNNTANH, 3, 2, True, 3, skip=True),          # skip, bidirectional: two groups
    Case(M.miopenGRU, 3, 3, False, 3, bias=False, batches=(3, 3, 3)),   # one stack of three
]


@pytest.fixture(scope="module")
def nets(handle):
    return {}


def run_case(handle, nets, case):
    if repr(case) not in nets:
        net = Net(handle, case, seed=len(nets))
        y, hy, cy = net.forward(True)
        rng = np.random.default_rng(7)
        c = case
        dy = rng.uniform(-1, 1, (c.S, c.D * c.H))
        dhy = rng.uniform(-1, 1, (c.L * c.D, c.N, c.H))
        dcy = rng.uniform(-1, 1, (c.L * c.D, c.N, c.H))
        lstm = c.mode == M.miopenLSTM
        grads = net.backward(dy, dhy, dcy if lstm else None)
        want = reference(c, net.w_host, net.x, net.hx, net.cx if lstm else None, dy, dhy,
                         dcy if lstm else None)
        nets[repr(case)] = (net, (y, hy, cy), grads, want)
    return nets[repr(case)]


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_forward_training_matches_reference(handle, nets, case):
    _, (y, hy, cy), _, (wy, why, wcy, _) = run_case(handle, nets, case)
    close(y, wy, "y")
    close(hy, why, "hy")
    if case.mode == M.miopenLSTM:
        close(cy, wcy, "cy")


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_backward_matches_reference(handle, nets, case):
    _, _, (dx, dhx, dcx, dw), (_, _, _, (wdx, wdhx, wdcx, wdw)) = run_case(handle, nets, case)
    close(dx, wdx, "dx")
    close(dhx, wdhx, "dhx")
    if case.mode == M.miopenLSTM:
        close(dcx, wdcx, "dcx")
    close(dw, wdw, "dw")


@pytest.mark.parametrize("case", CASES[:2], ids=repr)
def test_inference_equals_training_and_null_states(handle, nets, case):
    net, (y, hy, cy), _, _ = run_case(handle, nets, case)
    yi, hyi, cyi = net.forward(False)
    close(yi, y, "y")
    close(hyi, hy, "hy")
    # hx, cx NULL: zero initial state; hy, cy NULL: not written
    y0, hy0, cy0 = net.forward(False, hx=False, cx=False, hy=False, cy=False)
    assert hy0 is None and cy0 is None
    close(y0, reference(case, net.w_host, net.x, None, None)[0], "y from a zero state")


def test_backward_weights_overwrites_and_null_gradients(handle, nets):
    """BackwardWeights writes every element of dw (the SENTINEL fill is gone, as checked in
    the reference comparison); dhy/dcy NULL are zero; dhx/dcx NULL are not written."""
    case = CASES[0]
    net, _, _, _ = run_case(handle, nets, case)
    rng = np.random.default_rng(3)
    dy = rng.uniform(-1, 1, (case.S, case.D * case.H))
    net.forward(True)
    dx, dhx, dcx, dw = net.backward(dy, None, None, dhx=False, dcx=False)
    assert dhx is None and dcx is None
    want = reference(case, net.w_host, net.x, net.hx, net.cx, dy)[3]
    close(dx, want[0], "dx")
    close(dw, want[3], "dw")
    # a second BackwardWeights into the same dw gives the same values (overwrite, no sum)
    M.miopenRNNBackwardWeights(handle, net.r, case.T, net.xd, net.xm, net.hd, net.hxm, net.yd,
                               net.ym, net.wd, net.dw, net.ws, net.ws_bytes, net.rs, net.rs_bytes)
    np.testing.assert_array_equal(read(handle, net.dw), dw)


# -------------------------------------------------------------------------------------------------
# dropout
# -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", [Case(M.miopenLSTM, 3, 2, False, 3, p=0.4),
                                  Case(M.miopenGRU, 3, 3, True, 2, p=0.3, batches=(3, 2, 1))],
                         ids=repr)
def test_dropout_between_layers_matches_reference(handle, case):
    dd = M.miopenCreateDropoutDescriptor()
    n = M.miopenDropoutGetStatesSize(handle)
    M.miopenSetDropoutDescriptor(dd, handle, case.p, mem(handle, n=n // 4 + 1), n, SEED, False,
                                 False, M.MIOPEN_RNG_PSEUDO_XORWOW)
    net = Net(handle, case, seed=11, dropout=dd)
    rng = np.random.default_rng(5)
    lstm = case.mode == M.miopenLSTM
    for call in range(2):       # each call draws new masks
        y, hy, cy = net.forward(True)
        dy = rng.uniform(-1, 1, (case.S, case.D * case.H))
        dx, dhx, dcx, dw = net.backward(dy)
        drop = masks(case, call)
        want = reference(case, net.w_host, net.x, net.hx, net.cx if lstm else None, dy,
                         drop=drop)
        close(y, want[0], f"y, call {call}")
        close(hy, want[1], f"hy, call {call}")
        close(dx, want[3][0], f"dx, call {call}")
        close(dw, want[3][3], f"dw, call {call}")
        plain = reference(case, net.w_host, net.x, net.hx, net.cx if lstm else None)[0]
        assert not np.allclose(y, plain, atol=1e-3), "dropout changed nothing"
    # inference ignores dropout
    close(net.forward(False)[0], plain, "inference y")
    assert dd.calls == 2


# -------------------------------------------------------------------------------------------------
# bad inputs: a clear error, the right status, outputs untouched
# -------------------------------------------------------------------------------------------------
def bad_call(fn, *args, status=M.miopenStatusBadParm, match=None, **kw):
    with pytest.raises(M.MIOpenError, match=match) as e:
        fn(*args, **kw)
    assert e.value.status == status, str(e.value)
    return e.value


def test_bad_inputs_leave_outputs_untouched(handle, nets):
    case = CASES[0]
    net, _, _, _ = run_case(handle, nets, case)
    c, h = case, handle
    n_st = c.L * c.D * c.N * c.H
    x, y, hy = mem(h, net.x), mem(h, n=c.S * c.D * c.H), mem(h, n=n_st)

    def fwd(xd=net.xd, yd=net.yd, w=net.w, ws=net.ws, ws_bytes=net.ws_bytes, hd=net.hd,
            rs=net.rs, rs_bytes=net.rs_bytes):
        M.miopenRNNForwardTraining(h, net.r, c.T, xd, x, hd, None, hd, None, net.wd, w, yd, y,
                                   hd, hy, hd, None, ws, ws_bytes, rs, rs_bytes)

    rising = [tdesc([b, c.I]) for b in (2, 3, 1, 1)]
    bad_call(fwd, rising, [tdesc([b, c.D * c.H]) for b in (2, 3, 1, 1)],
             match=r"xDesc\[1\] has batch 3 > 2.*never increase")
    bad_call(fwd, net.xd, [tdesc([b, c.D * c.H + 1]) for b in c.batches], match="yDesc vectors")
    bad_call(fwd, w=mem(h, n=c.n_params - 1), match=r"w holds \d+ bytes, miopenGetRNNParamsSize")
    bad_call(fwd, ws_bytes=net.ws_bytes - 4, match="workSpaceNumBytes")
    bad_call(fwd, rs=mem(h, n=4), match="reserveSpace holds 16 bytes")
    bad_call(fwd, hd=tdesc([c.L * c.D, c.N + 1, c.H]), match="hyDesc dims")
    assert np.all(read(h, y) == SENTINEL) and np.all(read(h, hy) == SENTINEL)
    # skip mode needs input size == hidden size
    skip = Case(M.miopenLSTM, 4, 1, False, 4, skip=True)
    r = rnn_desc(skip)
    bad_call(M.miopenGetRNNParamsSize, h, r, tdesc([2, 3]), M.miopenFloat,
             match="miopenRNNskip mode the input size must equal the hidden size 4")
    # unknown enumerators, bad sizes
    d = M.miopenCreateRNNDescriptor()
    for i, v in enumerate((7, 2, 9, 5)):       # rnnMode, direction, inMode, biasMode
        args = [d, 4, 1, M.miopenRNNlinear, M.miopenRNNunidirection, M.miopenLSTM,
                M.miopenRNNwithBias, M.miopenRNNdefault, M.miopenFloat]
        args[[5, 4, 3, 6][i]] = v
        bad_call(M.miopenSetRNNDescriptor, *args, match="must be a miopenRNN")
    bad_call(M.miopenSetRNNDescriptor, d, 0, 1, 0, 0, 2, 1, 0, M.miopenFloat, match="hsize")
    bad_call(M.miopenSetRNNDescriptor, d, 4, 1, 0, 0, 2, 1, 0, M.miopenHalf,
             status=M.miopenStatusNotImplemented)
    e = bad_call(M.miopenSetRNNDescriptor, d, 4, 1, 0, 0, 2, 1, 0, M.miopenHalf,
                 status=M.miopenStatusNotImplemented)
    assert isinstance(e, dnnl.unimplemented)
    bad_call(M.miopenGetRNNLayerParamOffset, net.r, c.L * c.D, net.xd[0], 0,
             M.miopenCreateTensorDescriptor(), match=r"layer must be in \[0, 2\)")
    bad_call(M.miopenGetRNNLayerBiasOffset, net.r, 0, net.xd[0], 2 * c.G,
             M.miopenCreateTensorDescriptor(), match=r"biasID must be in \[0, 8\)")
    # a too small output buffer for GetRNNLayerParam: nothing written
    small = mem(h, n=3)
    bad_call(M.miopenGetRNNLayerParam, h, net.r, 0, net.xd[0], net.wd, net.w, 0,
             M.miopenCreateTensorDescriptor(), small, match="layerParam holds 12 bytes")
    assert np.all(read(h, small) == SENTINEL)
    # BackwardWeights without BackwardData on this workspace
    other = mem(h, n=net.ws_bytes // 4)
    dw = mem(h, n=c.n_params)
    bad_call(M.miopenRNNBackwardWeights, h, net.r, c.T, net.xd, x, net.hd, None, net.yd, y,
             net.wd, dw, other, net.ws_bytes, net.rs, net.rs_bytes,
             match="call miopenRNNBackwardData")
    assert np.all(read(h, dw) == SENTINEL)


def test_every_device(engine, first_device):
    """One two-primitive LSTM and one bidirectional GRU on the first device, the GRU on the
    others (their kernels are the primitives' own, checked there)."""
    h = M.miopenCreateWithStream(dnnl.stream(engine))
    for case in (CASES[0], CASES[1]) if first_device else (CASES[1],):
        got = run_case(h, {}, case)
        (y, hy, _), (dx, _, _, dw), want = got[1], got[2], got[3]
        close(y, want[0], "y")
        close(hy, want[1], "hy")
        close(dx, want[3][0], "dx")
        close(dw, want[3][3], "dw")


# -------------------------------------------------------------------------------------------------
# the docs list every function
# -------------------------------------------------------------------------------------------------
RNN_PAGE = """miopenCreateRNNDescriptor miopenGetRNNDescriptor miopenGetRNNDescriptor_V2
miopenDestroyRNNDescriptor miopenSetRNNDescriptor miopenSetRNNDescriptor_V2
miopenGetRNNWorkspaceSize miopenGetRNNTrainingReserveSize miopenGetRNNParamsSize
miopenGetRNNParamsDescriptor miopenGetRNNInputTensorSize miopenGetRNNHiddenTensorSize
miopenGetRNNLayerParamSize miopenGetRNNLayerBiasSize miopenGetRNNLayerParam miopenGetRNNLayerBias
miopenSetRNNLayerParam miopenSetRNNLayerBias miopenGetRNNLayerParamOffset
miopenGetRNNLayerBiasOffset miopenRNNForwardTraining miopenRNNBackwardData
miopenRNNBackwardWeights miopenRNNForwardInference miopenCreateDropoutDescriptor
miopenDestroyDropoutDescriptor miopenDropoutGetStatesSize miopenSetDropoutDescriptor
miopenRestoreDropoutDescriptor miopenGetDropoutDescriptor""".split()


def test_status_table_lists_every_rnn_function():
    root = pathlib.Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "compat_miopen_rnn.md").read_text()
    rows = dict(re.findall(r"^\| `(miopen\w+)` \| (\w+)", doc, re.M))
    for name in RNN_PAGE:
        assert rows.get(name) == "done", name
        assert callable(getattr(M, name)) and name in M.__all__, name
