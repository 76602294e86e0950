"""pydnnl.compat.miopen, common part and convolutions, used only through MIOpen's API.

Oracles: a brute-force numpy convolution written here from MIOpen's definitions (cross-
correlation; transposed convolution as the scatter of each input point through the filter,
cropped by the padding, output padding adding rows at the end), the output-size formulas of
MIOpen's documentation, pydnnl's float64 numpy reference (``pydnnl.reference.conv``) for the
backward passes, and the adjoint identities <conv(x, w), dy> = <x, bwd_data(dy, w)> =
<w, bwd_weights(x, dy)> evaluated with the brute-force forward.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.compat import miopen as M
from pydnnl.reference import conv as R

F32 = dnnl.memory.data_type.f32
SENTINEL = 1234.5          # what sits in the gaps of strided tensors (must stay untouched)


# -------------------------------------------------------------------------------------------------
# MIOpen semantics written from its documentation
# -------------------------------------------------------------------------------------------------
def out_size(mode, i, k, p, s, d, a=0):
    """MIOpen's documented output length of one spatial dimension."""
    if mode == M.miopenTranspose:
        return max(1, s * (i - 1) + 1 + d * (k - 1) - 2 * p + a)
    return max(1, int((i + 2 * p - (1 + d * (k - 1))) / s) + 1)


def brute_forward(x, w, mode, pads, strides, dils, groups, adj=None):
    """y of a MIOpen convolution: cross-correlation, or for miopenTranspose the scatter of
    each input point through w [C_in, C_out/G, k...]."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    nsp = x.ndim - 2
    k = w.shape[2:]
    taps = list(itertools.product(*[range(v) for v in k]))
    n, c = x.shape[:2]
    if mode == M.miopenConvolution:
        kout = w.shape[0]
        out = [out_size(mode, x.shape[2 + i], k[i], pads[i], strides[i], dils[i])
               for i in range(nsp)]
        xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pads])
        y = np.zeros((n, kout, *out))
        cg, kg = c // groups, kout // groups
        for t in taps:
            sl = tuple(slice(t[i] * dils[i], t[i] * dils[i] + (out[i] - 1) * strides[i] + 1,
                             strides[i]) for i in range(nsp))
            xs = xp[(slice(None), slice(None)) + sl]
            for g in range(groups):
                wg = w[(slice(g * kg, (g + 1) * kg), slice(None)) + t]
                y[:, g * kg:(g + 1) * kg] += np.einsum("nc...,kc->nk...",
                                                       xs[:, g * cg:(g + 1) * cg], wg)
        return y
    adj = adj or (0,) * nsp
    cin, cog = w.shape[0], w.shape[1]
    cig = cin // groups
    full = [(x.shape[2 + i] - 1) * strides[i] + dils[i] * (k[i] - 1) + 1 + adj[i]
            for i in range(nsp)]
    big = np.zeros((n, cog * groups, *full))
    for t in taps:
        sl = tuple(slice(t[i] * dils[i], t[i] * dils[i] + (x.shape[2 + i] - 1) * strides[i] + 1,
                         strides[i]) for i in range(nsp))
        for g in range(groups):
            wg = w[(slice(g * cig, (g + 1) * cig), slice(None)) + t]
            big[(slice(None), slice(g * cog, (g + 1) * cog)) + sl] += np.einsum(
                "nc...,co->no...", x[:, g * cig:(g + 1) * cig], wg)
    out = [out_size(mode, x.shape[2 + i], k[i], pads[i], strides[i], dils[i], adj[i])
           for i in range(nsp)]
    return big[(slice(None), slice(None)) + tuple(slice(p, p + o) for p, o in zip(pads, out))]


def ref_backward(case, x, w, dy):
    """(dx, dw) from pydnnl's numpy reference, translated to MIOpen's conventions here."""
    nsp = x.ndim - 2
    d1 = [d - 1 for d in case.dils]
    if case.mode == M.miopenConvolution:
        dx = R.conv_backward_data(dy, w, x.shape, case.strides, d1, case.pads, case.pads,
                                  groups=case.groups, dtype=np.float64)
        dw, _ = R.conv_backward_weights(x, dy, w.shape, case.strides, d1, case.pads, case.pads,
                                        groups=case.groups, with_bias=False, dtype=np.float64)
        return dx, dw
    adj = case.adj or (0,) * nsp
    pr = [p - a for p, a in zip(case.pads, adj)]
    wd = R.deconv_weights_from_io(w, case.groups)
    dx = R.deconv_backward_data(dy, wd, x.shape, case.strides, d1, case.pads, pr,
                                dtype=np.float64)
    dwd, _ = R.deconv_backward_weights(x, dy, wd.shape, case.strides, d1, case.pads, pr,
                                       with_bias=False, dtype=np.float64)
    return dx, R.deconv_weights_to_io(dwd, grouped=case.groups > 1)


# -------------------------------------------------------------------------------------------------
# plumbing: tensors in flat memories, read back through their strides
# -------------------------------------------------------------------------------------------------
def nchw_strides(dims):
    out, s = [], 1
    for d in reversed(dims):
        out.append(s)
        s *= d
    return list(reversed(out))


def nhwc_strides(dims):
    """Channels innermost (MIOpen describes NHWC tensors with NCHW-ordered strides)."""
    n, c, *sp = dims
    st = nchw_strides([n, *sp, c])
    return [st[0], st[-1], *st[1:-1]]


def padded_strides(dims, pad=2):
    """Packed except that the innermost rows are ``pad`` elements longer (gaps)."""
    st, s = [0] * len(dims), 1
    for i in reversed(range(len(dims))):
        st[i] = s
        s *= dims[i] + (pad if i == len(dims) - 1 else 0)
    return st


class Tensor:
    """A MIOpen tensor descriptor plus a flat pydnnl memory holding it (gaps = SENTINEL)."""

    def __init__(self, eng, dims, strides=None, values=None):
        self.dims, self.strides = list(dims), list(strides or nchw_strides(dims))
        self.desc = M.miopenCreateTensorDescriptor()
        M.miopenSetTensorDescriptor(self.desc, M.miopenFloat, len(dims), self.dims,
                                    None if strides is None else self.strides)
        self.n = M.miopenGetTensorNumBytes(self.desc) // 4
        self.mem = dnnl.memory(dnnl.memory.desc([self.n], F32, dnnl.memory.format_tag.a), eng)
        self.flat = np.full(self.n, SENTINEL, np.float32)
        if values is not None:
            self.set(values)
        else:
            self.mem.write(self.flat)

    def _view(self, flat):
        return np.lib.stride_tricks.as_strided(flat, self.dims,
                                               [s * flat.itemsize for s in self.strides])

    def set(self, values):
        flat = np.full(self.n, SENTINEL, np.float32)
        self._view(flat)[...] = values
        self.flat = flat
        self.mem.write(flat)

    def raw(self):
        return self.mem.to_numpy()

    def get(self):
        return self._view(self.raw()).copy()

    def gaps_untouched(self):
        raw = self.raw()
        mask = np.ones(self.n, bool)
        self._view(mask)[...] = False
        return bool(np.all(raw[mask] == SENTINEL))


def close(got, want, tol=1e-4):
    want = np.asarray(want, np.float64)
    scale = max(1.0, float(np.abs(want).max()))
    err = float(np.abs(got - want).max())
    assert err <= tol * scale, f"max error {err} (scale {scale})"


@pytest.fixture(scope="module")
def eng(cpu_engine):
    return cpu_engine


@pytest.fixture(scope="module")
def H(eng):
    return M.miopenCreateWithStream(dnnl.stream(eng))


@pytest.fixture(autouse=True)
def private_perf_db(tmp_path_factory, monkeypatch):
    """Find writes the perf database: keep it out of the user's."""
    monkeypatch.setenv("PYDNNL_PERF_DB", str(tmp_path_factory.getbasetemp() / "perf.sqlite"))


def conv_desc(mode, pads, strides, dils, groups=1, adj=None):
    c = M.miopenCreateConvolutionDescriptor()
    if len(pads) == 2:
        M.miopenInitConvolutionDescriptor(c, mode, *pads, *strides, *dils)
    else:
        M.miopenInitConvolutionNdDescriptor(c, len(pads), list(pads), list(strides), list(dils),
                                            mode)
    M.miopenSetConvolutionGroupCount(c, groups)
    if adj is not None:
        M.miopenSetTransposeConvNdOutputPadding(c, len(adj), list(adj))
    return c


class Case:
    def __init__(self, name, mode, xdims, wdims, pads, strides, dils, groups=1, adj=None,
                 layout="packed"):
        self.name, self.mode, self.xdims, self.wdims = name, mode, xdims, wdims
        self.pads, self.strides, self.dils, self.groups, self.adj = pads, strides, dils, groups, adj
        self.layout = layout

    def __repr__(self):
        return self.name

    def setup(self, eng, seed=0):
        """(conv desc, x, w, y tensors, x, w arrays)."""
        rng = np.random.default_rng(seed)
        c = conv_desc(self.mode, self.pads, self.strides, self.dils, self.groups, self.adj)
        xs = padded_strides(self.xdims) if self.layout == "strided" else None
        xt = Tensor(eng, self.xdims, xs)
        wt = Tensor(eng, self.wdims)
        _, ydims = M.miopenGetConvolutionNdForwardOutputDim(c, xt.desc, wt.desc)
        yt = Tensor(eng, ydims, nhwc_strides(ydims) if self.layout == "strided" else None)
        x = rng.standard_normal(self.xdims).astype(np.float32)
        w = rng.standard_normal(self.wdims).astype(np.float32)
        xt.set(x)
        wt.set(w)
        return c, xt, wt, yt, x, w


CONV, TRANS = M.miopenConvolution, M.miopenTranspose
CASES = [
    Case("2d_strided_tensors", CONV, (2, 3, 6, 5), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1),
         layout="strided"),
    Case("2d_groups_stride_dilation", CONV, (2, 4, 9, 8), (6, 2, 3, 2), (1, 0), (2, 1), (2, 1), 2),
    Case("depthwise", CONV, (1, 4, 6, 6), (4, 1, 3, 3), (1, 1), (1, 1), (1, 1), 4),
    Case("1d", CONV, (2, 3, 10), (5, 3, 3), (2,), (2,), (1,)),
    Case("3d", CONV, (1, 2, 4, 5, 4), (3, 2, 2, 3, 2), (1, 0, 1), (1, 2, 1), (1, 1, 1)),
    Case("transpose_groups_outpad", TRANS, (2, 4, 4, 5), (4, 3, 3, 3), (1, 1), (2, 2), (1, 1), 2,
         (1, 0)),
    Case("transpose_3d", TRANS, (1, 2, 3, 3, 2), (2, 2, 2, 2, 3), (0, 1, 1), (1, 2, 2),
         (1, 1, 2), 1, (0, 1, 0)),
]
# (algorithm, alpha, beta): the direct solver with blending, GEMM overwriting
RUNS = [(1, 0.75, -1.5), (0, 1.0, 0.0), (5, 1.5, 0.5)]


def workspace(eng, nbytes):
    n = max(1, -(-nbytes // 4))
    return dnnl.memory(dnnl.memory.desc([n], F32, dnnl.memory.format_tag.a), eng), nbytes


# -------------------------------------------------------------------------------------------------
# enums, handles, descriptors
# -------------------------------------------------------------------------------------------------
SEED_ENUMERATORS = {
    # the RNN page
    "miopenRNNRELU": 0, "miopenRNNTANH": 1, "miopenLSTM": 2, "miopenGRU": 3,
    "miopenRNNlinear": 0, "miopenRNNskip": 1, "miopenRNNdefault": 0, "miopenRNNfundamental": 1,
    "miopenRNNunidirection": 0, "miopenRNNbidirection": 1, "miopenRNNNoBias": 0,
    "miopenRNNwithBias": 1, "miopenRNNAlgoGEMM": 0,
    # the convolution page
    "miopenConvolution": 0, "miopenTranspose": 1, "miopenGroupConv": 2, "miopenDepthwise": 3,
    "miopenConvolutionFwdAlgoGEMM": 0, "miopenConvolutionFwdAlgoDirect": 1,
    "miopenConvolutionFwdAlgoFFT": 2, "miopenConvolutionFwdAlgoWinograd": 3,
    "miopenConvolutionFwdAlgoImplicitGEMM": 5, "miopenConvolutionBwdWeightsAlgoGEMM": 0,
    "miopenConvolutionBwdWeightsAlgoDirect": 1, "miopenConvolutionBwdWeightsAlgoWinograd": 3,
    "miopenConvolutionBwdWeightsAlgoImplicitGEMM": 5, "miopenConvolutionBwdDataAlgoGEMM": 0,
    "miopenConvolutionBwdDataAlgoDirect": 1, "miopenConvolutionBwdDataAlgoFFT": 2,
    "miopenConvolutionBwdDataAlgoWinograd": 3, "miopenTransposeBwdDataAlgoGEMM": 4,
    "miopenConvolutionBwdDataAlgoImplicitGEMM": 5,
    # types and statuses the pages use
    "miopenHalf": 0, "miopenFloat": 1, "miopenStatusSuccess": 0, "miopenStatusBadParm": 3,
    "miopenStatusNotImplemented": 6, "miopenStatusUnknownError": 7,
}


def test_enumerators_have_miopen_values():
    for name, value in SEED_ENUMERATORS.items():
        assert int(getattr(M, name)) == value, name
        assert name in M.__all__
    assert M.miopenLSTM is M.miopenRNNMode_t.miopenLSTM
    assert isinstance(M.miopenConvolutionFwdAlgoWinograd, M.miopenConvFwdAlgorithm_t)


def test_handle(eng):
    h = M.miopenCreate()
    assert isinstance(h.engine, dnnl.engine) and isinstance(h.stream, dnnl.stream)
    assert M.miopenGetStream(h) is h.stream
    s = dnnl.stream(eng)
    h2 = M.miopenCreateWithStream(s)
    assert h2.stream is s and h2.engine == eng
    s2 = dnnl.stream(eng)
    M.miopenSetStream(h2, s2)
    assert M.miopenGetStream(h2) is s2
    M.miopenDestroy(h2)
    with pytest.raises(M.MIOpenError) as e:
        M.miopenGetStream(h2)
    assert e.value.status == M.miopenStatusBadParm
    with pytest.raises(M.MIOpenError) as e:
        M.miopenCreateWithStream("queue")
    assert e.value.status == M.miopenStatusBadParm
    ooo = dnnl.stream(eng, dnnl.stream.flags.out_of_order)
    if ooo.out_of_order:
        with pytest.raises(M.MIOpenError, match="in-order"):
            M.miopenCreateWithStream(ooo)
    assert issubclass(M.MIOpenError, dnnl.error)


def test_tensor_descriptors():
    d = M.miopenCreateTensorDescriptor()
    M.miopenSet4dTensorDescriptor(d, M.miopenFloat, 2, 3, 4, 5)
    assert M.miopenGet4dTensorDescriptor(d) == (M.miopenFloat, 2, 3, 4, 5, 60, 20, 5, 1)
    assert M.miopenGetTensorDescriptorSize(d) == 4
    assert M.miopenGetTensorNumBytes(d) == 2 * 3 * 4 * 5 * 4
    M.miopenSetTensorDescriptor(d, M.miopenHalf, 3, [2, 3, 4], [20, 1, 5])
    assert M.miopenGetTensorDescriptor(d) == (M.miopenHalf, [2, 3, 4], [20, 1, 5])
    assert M.miopenGetTensorNumBytes(d) == (1 * 20 + 2 * 1 + 3 * 5 + 1) * 2
    M.miopenSetTensorDescriptor(d, M.miopenFloat, 5, [1, 2, 3, 4, 5], None)
    assert M.miopenGetTensorDescriptor(d)[2] == [120, 60, 20, 5, 1]
    for call, args in [
            (M.miopenSet4dTensorDescriptor, (d, 4, 1, 1, 1, 1)),          # no such type
            (M.miopenSet4dTensorDescriptor, (d, M.miopenFloat, 1, 0, 1, 1)),
            (M.miopenSetTensorDescriptor, (d, M.miopenFloat, 3, [1, 2], None)),
            (M.miopenSetTensorDescriptor, (d, M.miopenFloat, 2, [1, 2], [0, 1])),
            (M.miopenSetTensorDescriptor, (d, M.miopenFloat, 2, [1, 2.5], None)),
            (M.miopenGet4dTensorDescriptor, (d,)),                         # it is 5-D now
            (M.miopenGetTensorDescriptor, (M.miopenCreateTensorDescriptor(),)),   # never set
            (M.miopenGetTensorDescriptor, (None,))]:
        with pytest.raises(M.MIOpenError) as e:
            call(*args)
        assert e.value.status == M.miopenStatusBadParm, call.__name__
    assert M.miopenGetTensorDescriptor(d)[1] == [1, 2, 3, 4, 5]    # failed calls changed nothing


def test_convolution_descriptors():
    c = M.miopenCreateConvolutionDescriptor()
    assert M.miopenGetConvolutionDescriptor(c) == (M.miopenConvolution, 0, 0, 1, 1, 1, 1)
    M.miopenInitConvolutionDescriptor(c, M.miopenTranspose, 1, 2, 3, 4, 5, 6)
    assert M.miopenGetConvolutionDescriptor(c) == (M.miopenTranspose, 1, 2, 3, 4, 5, 6)
    M.miopenInitConvolutionDescriptor(c, M.miopenDepthwise, 0, 0, 1, 1, 1, 1)
    assert M.miopenGetConvolutionDescriptor(c)[0] == M.miopenConvolution  # deprecated mode
    M.miopenInitConvolutionNdDescriptor(c, 3, [1, 2, 3], [2, 2, 1], [1, 2, 1], M.miopenConvolution)
    assert M.miopenGetConvolutionNdDescriptor(c, 3) == (3, [1, 2, 3], [2, 2, 1], [1, 2, 1],
                                                        M.miopenConvolution)
    assert M.miopenGetConvolutionNdDescriptor(c, 2)[1] == [1, 2]
    M.miopenSetConvolutionGroupCount(c, 4)
    assert M.miopenGetConvolutionGroupCount(c) == 4
    M.miopenSetTransposeConvNdOutputPadding(c, 3, [1, 0, 0])
    unknown = [(M.miopenGetConvolutionDescriptor, (c,)),                   # not 2-D
               (M.miopenGetConvolutionNdDescriptor, (c, 4)),
               (M.miopenSetTransposeConvOutputPadding, (c, 1, 1)),
               (M.miopenSetTransposeConvNdOutputPadding, (c, 2, [1, 1]))]
    badparm = [(M.miopenInitConvolutionDescriptor, (c, M.miopenConvolution, -1, 0, 1, 1, 1, 1)),
               (M.miopenInitConvolutionDescriptor, (c, M.miopenConvolution, 0, 0, 0, 1, 1, 1)),
               (M.miopenInitConvolutionDescriptor, (c, M.miopenConvolution, 0, 0, 1, 1, 1, 0)),
               (M.miopenInitConvolutionDescriptor, (c, 7, 0, 0, 1, 1, 1, 1)),
               (M.miopenInitConvolutionNdDescriptor, (c, 3, [0, 0], [1, 1, 1], [1, 1, 1],
                                                      M.miopenConvolution)),
               (M.miopenSetConvolutionGroupCount, (c, 0)),
               (M.miopenGetConvolutionDescriptor, ("conv",))]
    for status, calls in ((M.miopenStatusUnknownError, unknown), (M.miopenStatusBadParm, badparm)):
        for call, args in calls:
            with pytest.raises(M.MIOpenError) as e:
                call(*args)
            assert e.value.status == status, (call.__name__, args)
    assert M.miopenGetConvolutionNdDescriptor(c, 3)[1] == [1, 2, 3]     # untouched
    M.miopenDestroyConvolutionDescriptor(c)
    with pytest.raises(M.MIOpenError):
        M.miopenGetConvolutionGroupCount(c)


OUTDIM_CASES = [
    # mode, x dims, w dims, pads, strides, dilations, groups, output padding
    (CONV, (2, 3, 7, 9), (5, 3, 3, 2), (0, 1), (1, 2), (1, 1), 1, None),
    (CONV, (1, 8, 10, 11), (8, 2, 3, 3), (2, 1), (3, 2), (2, 3), 4, None),
    (CONV, (1, 4, 5, 6, 7), (4, 1, 3, 3, 3), (1, 0, 2), (2, 1, 3), (1, 2, 1), 4, None),
    (CONV, (1, 2, 9), (3, 2, 4), (1,), (3,), (2,), 1, None),
    (TRANS, (2, 6, 4, 5), (6, 2, 3, 3), (1, 0), (2, 3), (1, 2), 3, (1, 2)),
    (TRANS, (1, 4, 3, 3, 2), (4, 5, 2, 3, 2), (0, 1, 1), (2, 1, 3), (1, 1, 2), 1, (1, 0, 2)),
]


@pytest.mark.parametrize("mode,xd,wd,pads,strides,dils,groups,adj", OUTDIM_CASES)
def test_output_dims_follow_the_formula(eng, mode, xd, wd, pads, strides, dils, groups, adj):
    c = conv_desc(mode, pads, strides, dils, groups, adj)
    x, w = Tensor(eng, xd), Tensor(eng, wd)
    nd, dims = M.miopenGetConvolutionNdForwardOutputDim(c, x.desc, w.desc)
    ch = wd[0] if mode == CONV else wd[1] * groups
    want = [xd[0], ch] + [out_size(mode, xd[2 + i], wd[2 + i], pads[i], strides[i], dils[i],
                                   adj[i] if adj else 0) for i in range(len(pads))]
    assert nd == len(xd) and dims == want
    assert list(brute_forward(np.zeros(xd), np.zeros(wd), mode, pads, strides, dils, groups,
                              adj).shape) == want
    if len(pads) == 2:
        assert list(M.miopenGetConvolutionForwardOutputDim(c, x.desc, w.desc)) == want
    else:
        with pytest.raises(M.MIOpenError) as e:
            M.miopenGetConvolutionForwardOutputDim(c, x.desc, w.desc)
        assert e.value.status == M.miopenStatusUnknownError


def test_output_dims_errors(eng):
    c = conv_desc(CONV, (0, 0), (1, 1), (1, 1))
    x, w = Tensor(eng, (1, 3, 5, 5)), Tensor(eng, (4, 2, 3, 3))
    with pytest.raises(M.MIOpenError, match="channels") as e:
        M.miopenGetConvolutionNdForwardOutputDim(c, x.desc, w.desc)
    assert e.value.status == M.miopenStatusBadParm
    t = conv_desc(TRANS, (0, 0), (2, 2), (1, 1), 1, (2, 0))        # output padding >= stride
    with pytest.raises(M.MIOpenError, match="output padding") as e:
        M.miopenGetConvolutionNdForwardOutputDim(t, x.desc, Tensor(eng, (3, 2, 3, 3)).desc)
    assert e.value.status == M.miopenStatusBadParm


# -------------------------------------------------------------------------------------------------
# forward, backward data, backward weights against the oracles
# -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("algo,alpha,beta", RUNS, ids=["direct-blend", "gemm", "implicit-blend"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_forward(H, eng, case, algo, alpha, beta):
    c, xt, wt, yt, x, w = case.setup(eng)
    prior = np.random.default_rng(1).standard_normal(yt.dims).astype(np.float32)
    yt.set(prior)
    ws, nbytes = workspace(eng, M.miopenConvolutionForwardGetWorkSpaceSize(
        H, wt.desc, xt.desc, c, yt.desc))
    M.miopenConvolutionForward(H, alpha, xt.desc, xt.mem, wt.desc, wt.mem, c, algo, beta,
                               yt.desc, yt.mem, ws, nbytes)
    H.stream.wait()
    want = alpha * brute_forward(x, w, case.mode, case.pads, case.strides, case.dils,
                                 case.groups, case.adj) + beta * prior
    close(yt.get(), want)
    assert yt.gaps_untouched() and xt.gaps_untouched()


@pytest.mark.parametrize("algo,alpha,beta", RUNS, ids=["direct-blend", "gemm", "implicit-blend"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_backward_data(H, eng, case, algo, alpha, beta):
    c, xt, wt, yt, x, w = case.setup(eng)
    rng = np.random.default_rng(2)
    dy = rng.standard_normal(yt.dims).astype(np.float32)
    prior = rng.standard_normal(xt.dims).astype(np.float32)
    dyt, dxt = yt, xt
    dyt.set(dy)
    dxt.set(prior)
    ws, nbytes = workspace(eng, M.miopenConvolutionBackwardDataGetWorkSpaceSize(
        H, dyt.desc, wt.desc, c, dxt.desc))
    M.miopenConvolutionBackwardData(H, alpha, dyt.desc, dyt.mem, wt.desc, wt.mem, c, algo, beta,
                                    dxt.desc, dxt.mem, ws, nbytes)
    H.stream.wait()
    got = dxt.get()
    dx_ref, _ = ref_backward(case, x, w, dy)
    close(got, alpha * dx_ref + beta * prior)
    assert dxt.gaps_untouched()
    # the adjoint of the brute-force forward: <conv(x', w), dy> = <x', bwd_data(dy, w)>
    y1 = brute_forward(prior, w, case.mode, case.pads, case.strides, case.dils, case.groups,
                       case.adj)
    lhs = float(np.sum(y1 * dy))
    rhs = float(np.sum(prior * (got - beta * prior) / alpha))
    assert abs(lhs - rhs) <= 1e-4 * max(1.0, abs(lhs), float(np.sum(np.abs(y1 * dy))))


@pytest.mark.parametrize("algo,alpha,beta", RUNS, ids=["direct-blend", "gemm", "implicit-blend"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_backward_weights(H, eng, case, algo, alpha, beta):
    c, xt, wt, yt, x, w = case.setup(eng)
    rng = np.random.default_rng(3)
    dy = rng.standard_normal(yt.dims).astype(np.float32)
    prior = rng.standard_normal(wt.dims).astype(np.float32)
    yt.set(dy)
    wt.set(prior)
    ws, nbytes = workspace(eng, M.miopenConvolutionBackwardWeightsGetWorkSpaceSize(
        H, yt.desc, xt.desc, c, wt.desc))
    M.miopenConvolutionBackwardWeights(H, alpha, yt.desc, yt.mem, xt.desc, xt.mem, c, algo,
                                       beta, wt.desc, wt.mem, ws, nbytes)
    H.stream.wait()
    got = wt.get()
    _, dw_ref = ref_backward(case, x, w, dy)
    close(got, alpha * dw_ref + beta * prior)
    # <conv(x, w'), dy> = <w', bwd_weights(x, dy)>
    y1 = brute_forward(x, prior, case.mode, case.pads, case.strides, case.dils, case.groups,
                       case.adj)
    lhs = float(np.sum(y1 * dy))
    rhs = float(np.sum(prior * (got - beta * prior) / alpha))
    assert abs(lhs - rhs) <= 1e-4 * max(1.0, abs(lhs), float(np.sum(np.abs(y1 * dy))))


@pytest.mark.parametrize("case", [CASES[1], CASES[5]], ids=str)
def test_every_device(engine, case):
    """The same calls on each device present (the rest of the file runs on the default CPU)."""
    h = M.miopenCreateWithStream(dnnl.stream(engine))
    for algo, alpha, beta in RUNS:
        test_forward(h, engine, case, algo, alpha, beta)
        test_backward_data(h, engine, case, algo, alpha, beta)
        test_backward_weights(h, engine, case, algo, alpha, beta)
    test_forward_bias(h, engine, 0.5, 2.0)
    test_backward_bias(h, engine, -2.0, 0.5)
    M.miopenDestroy(h)


def test_winograd_every_direction(H, eng):
    case = Case("wino", CONV, (1, 4, 6, 7), (8, 4, 3, 3), (1, 1), (1, 1), (1, 1))
    c, xt, wt, yt, x, w = case.setup(eng)
    ws, n = workspace(eng, M.miopenConvolutionForwardGetWorkSpaceSize(H, wt.desc, xt.desc, c,
                                                                      yt.desc))
    M.miopenConvolutionForward(H, 1.0, xt.desc, xt.mem, wt.desc, wt.mem, c,
                               M.miopenConvolutionFwdAlgoWinograd, 0.0, yt.desc, yt.mem, ws, n)
    H.stream.wait()
    close(yt.get(), brute_forward(x, w, CONV, (1, 1), (1, 1), (1, 1), 1))
    dy = np.random.default_rng(9).standard_normal(yt.dims).astype(np.float32)
    yt.set(dy)
    ws, n = workspace(eng, M.miopenConvolutionBackwardDataGetWorkSpaceSize(H, yt.desc, wt.desc,
                                                                           c, xt.desc))
    M.miopenConvolutionBackwardData(H, 1.0, yt.desc, yt.mem, wt.desc, wt.mem, c,
                                    M.miopenConvolutionBwdDataAlgoWinograd, 0.0, xt.desc,
                                    xt.mem, ws, n)
    H.stream.wait()
    close(xt.get(), ref_backward(case, x, w, dy)[0])
    xt.set(x)
    ws, n = workspace(eng, M.miopenConvolutionBackwardWeightsGetWorkSpaceSize(
        H, yt.desc, xt.desc, c, wt.desc))
    M.miopenConvolutionBackwardWeights(H, 1.0, yt.desc, yt.mem, xt.desc, xt.mem, c,
                                       M.miopenConvolutionBwdWeightsAlgoWinograd, 0.0, wt.desc,
                                       wt.mem, ws, n)
    H.stream.wait()
    close(wt.get(), ref_backward(case, x, w, dy)[1])


def test_beta_zero_ignores_nan_outputs(H, eng):
    """beta = 0 means the old output is not read (MIOpen), not multiplied by zero."""
    case = CASES[1]
    c, xt, wt, yt, x, w = case.setup(eng)
    for call in ("fwd", "bwd_w"):
        out = yt if call == "fwd" else wt
        out.set(np.full(out.dims, np.nan, np.float32))
        if call == "fwd":
            M.miopenConvolutionForward(H, 2.0, xt.desc, xt.mem, wt.desc, wt.mem, c, 1, 0.0,
                                       yt.desc, yt.mem, *workspace(eng, 1 << 20))
            H.stream.wait()
            close(yt.get(), 2.0 * brute_forward(x, w, CONV, case.pads, case.strides, case.dils,
                                                case.groups))
        else:
            yt.set(np.ones(yt.dims, np.float32))
            M.miopenConvolutionBackwardWeights(H, 2.0, yt.desc, yt.mem, xt.desc, xt.mem, c, 1,
                                               0.0, wt.desc, wt.mem, *workspace(eng, 1 << 20))
            H.stream.wait()
            assert np.isfinite(wt.get()).all()


@pytest.mark.parametrize("case", [CASES[0], CASES[2]], ids=str)
def test_fft_forward_and_backward_data(H, eng, case):
    """The FFT algorithms (stride 1) with blending; backward weights has no FFT in MIOpen."""
    c, xt, wt, yt, x, w = case.setup(eng)
    rng = np.random.default_rng(8)
    prior = rng.standard_normal(yt.dims).astype(np.float32)
    yt.set(prior)
    ws, nbytes = workspace(eng, M.miopenConvolutionForwardGetWorkSpaceSize(
        H, wt.desc, xt.desc, c, yt.desc))
    M.miopenConvolutionForward(H, 0.5, xt.desc, xt.mem, wt.desc, wt.mem, c,
                               M.miopenConvolutionFwdAlgoFFT, 2.0, yt.desc, yt.mem, ws, nbytes)
    H.stream.wait()
    close(yt.get(), 0.5 * brute_forward(x, w, case.mode, case.pads, case.strides, case.dils,
                                        case.groups, case.adj) + 2.0 * prior)
    dy = rng.standard_normal(yt.dims).astype(np.float32)
    yt.set(dy)
    ws, nbytes = workspace(eng, M.miopenConvolutionBackwardDataGetWorkSpaceSize(
        H, yt.desc, wt.desc, c, xt.desc))
    M.miopenConvolutionBackwardData(H, 1.0, yt.desc, yt.mem, wt.desc, wt.mem, c,
                                    M.miopenConvolutionBwdDataAlgoFFT, 0.0, xt.desc, xt.mem,
                                    ws, nbytes)
    H.stream.wait()
    close(xt.get(), ref_backward(case, x, w, dy)[0])
    with pytest.raises(M.MIOpenError) as e:
        M.miopenConvolutionBackwardWeights(H, 1.0, yt.desc, yt.mem, xt.desc, xt.mem, c, 2, 0.0,
                                           wt.desc, wt.mem, ws, nbytes)
    assert e.value.status == M.miopenStatusBadParm


# -------------------------------------------------------------------------------------------------
# Find and the workspace
# -------------------------------------------------------------------------------------------------
def _check_perf(count, perf, enum_cls, attr, limit):
    assert count == len(perf) >= 1
    times = [p.time for p in perf]
    assert times == sorted(times) and all(t > 0 for t in times)
    algos = [getattr(p, attr) for p in perf]
    assert all(isinstance(a, enum_cls) for a in algos) and len(set(algos)) == len(algos)
    assert all(0 <= p.memory <= limit for p in perf)


@pytest.mark.parametrize("case", [CASES[1], CASES[5]], ids=str)
def test_find_then_run_the_fastest(H, eng, case):
    c, xt, wt, yt, x, w = case.setup(eng)
    rng = np.random.default_rng(4)
    n_fwd = M.miopenConvolutionForwardGetWorkSpaceSize(H, wt.desc, xt.desc, c, yt.desc)
    ws, nbytes = workspace(eng, n_fwd)
    y_before = yt.raw()
    count, perf = M.miopenFindConvolutionForwardAlgorithm(
        H, xt.desc, xt.mem, wt.desc, wt.mem, c, yt.desc, yt.mem, 4, ws, nbytes, False)
    _check_perf(count, perf, M.miopenConvFwdAlgorithm_t, "fwd_algo", nbytes)
    assert np.array_equal(yt.raw(), y_before, equal_nan=True)         # Find does not write y
    ws0, n0 = workspace(eng, perf[0].memory)
    M.miopenConvolutionForward(H, 1.0, xt.desc, xt.mem, wt.desc, wt.mem, c, perf[0].fwd_algo,
                               0.0, yt.desc, yt.mem, ws0, n0)
    H.stream.wait()
    close(yt.get(), brute_forward(x, w, case.mode, case.pads, case.strides, case.dils,
                                  case.groups, case.adj))
    one = M.miopenFindConvolutionForwardAlgorithm(
        H, xt.desc, xt.mem, wt.desc, wt.mem, c, yt.desc, yt.mem, 1, ws, nbytes, False)
    assert one[0] == 1 and len(one[1]) == 1

    dy = rng.standard_normal(yt.dims).astype(np.float32)
    yt.set(dy)
    n_bd = M.miopenConvolutionBackwardDataGetWorkSpaceSize(H, yt.desc, wt.desc, c, xt.desc)
    ws, nbytes = workspace(eng, n_bd)
    count, perf = M.miopenFindConvolutionBackwardDataAlgorithm(
        H, yt.desc, yt.mem, wt.desc, wt.mem, c, xt.desc, xt.mem, 4, ws, nbytes, False)
    _check_perf(count, perf, M.miopenConvBwdDataAlgorithm_t, "bwd_data_algo", nbytes)
    M.miopenConvolutionBackwardData(H, 1.0, yt.desc, yt.mem, wt.desc, wt.mem, c,
                                    perf[0].bwd_data_algo, 0.0, xt.desc, xt.mem, ws,
                                    perf[0].memory)
    H.stream.wait()
    dx_ref, dw_ref = ref_backward(case, x, w, dy)
    close(xt.get(), dx_ref)

    xt.set(x)
    n_bw = M.miopenConvolutionBackwardWeightsGetWorkSpaceSize(H, yt.desc, xt.desc, c, wt.desc)
    ws, nbytes = workspace(eng, n_bw)
    count, perf = M.miopenFindConvolutionBackwardWeightsAlgorithm(
        H, yt.desc, yt.mem, xt.desc, xt.mem, c, wt.desc, wt.mem, 4, ws, nbytes, False)
    _check_perf(count, perf, M.miopenConvBwdWeightsAlgorithm_t, "bwd_weights_algo", nbytes)
    M.miopenConvolutionBackwardWeights(H, 1.0, yt.desc, yt.mem, xt.desc, xt.mem, c,
                                       perf[0].bwd_weights_algo, 0.0, wt.desc, wt.mem, ws,
                                       perf[0].memory)
    H.stream.wait()
    close(wt.get(), dw_ref)


def test_find_respects_the_workspace_given(H, eng):
    """Algorithms needing more workspace than given are left out (all of them: BadParm)."""
    case = Case("unpadded", CONV, (1, 3, 6, 6), (4, 3, 3, 3), (0, 0), (1, 1), (1, 1))
    c, xt, wt, yt, x, w = case.setup(eng)
    # ask for every algorithm: with 4, the slowest of the five (a race on a loaded machine)
    # falls off the list
    every = len(M.miopenConvFwdAlgorithm_t)
    args = (H, xt.desc, xt.mem, wt.desc, wt.mem, c, yt.desc, yt.mem, every)
    need = M.miopenConvolutionForwardGetWorkSpaceSize(H, wt.desc, xt.desc, c, yt.desc)
    _, full = M.miopenFindConvolutionForwardAlgorithm(*args, *workspace(eng, need), False)
    _, none = M.miopenFindConvolutionForwardAlgorithm(*args, None, 0, False)
    assert M.miopenConvolutionFwdAlgoGEMM in [p.fwd_algo for p in full]     # im2col columns
    assert [p.fwd_algo for p in none] == [M.miopenConvolutionFwdAlgoDirect]
    assert none[0].memory == 0
    padded = CASES[1]                    # the direct solver pads the input in the workspace
    c, xt, wt, yt, x, w = padded.setup(eng)
    with pytest.raises(M.MIOpenError, match="more workspace") as e:
        M.miopenFindConvolutionForwardAlgorithm(H, xt.desc, xt.mem, wt.desc, wt.mem, c, yt.desc,
                                                yt.mem, 4, None, 0, False)
    assert e.value.status == M.miopenStatusBadParm


def test_workspace_is_enough_and_needed(H, eng):
    """The size the query returns runs every algorithm; less fails before writing y."""
    case = CASES[0]
    c, xt, wt, yt, x, w = case.setup(eng)
    need = M.miopenConvolutionForwardGetWorkSpaceSize(H, wt.desc, xt.desc, c, yt.desc)
    assert need > 0                      # im2col + GEMM of a 3x3 filter keeps its columns there
    ws, n = workspace(eng, need)
    want = brute_forward(x, w, CONV, case.pads, case.strides, case.dils, 1)
    for algo in (0, 1, 3):
        yt.set(np.zeros(yt.dims, np.float32))
        M.miopenConvolutionForward(H, 1.0, xt.desc, xt.mem, wt.desc, wt.mem, c, algo, 0.0,
                                   yt.desc, yt.mem, ws, n)
        H.stream.wait()
        close(yt.get(), want)
    before = yt.raw()
    with pytest.raises(M.MIOpenError, match="workspace") as e:
        M.miopenConvolutionForward(H, 1.0, xt.desc, xt.mem, wt.desc, wt.mem, c, 0, 0.0,
                                   yt.desc, yt.mem, None, 0)
    assert e.value.status == M.miopenStatusBadParm
    assert np.array_equal(yt.raw(), before)


# -------------------------------------------------------------------------------------------------
# bias
# -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (0.5, 2.0)])
def test_forward_bias(H, eng, alpha, beta):
    rng = np.random.default_rng(5)
    y0 = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    b = rng.standard_normal((1, 3, 1, 1)).astype(np.float32)
    yt = Tensor(eng, y0.shape, nhwc_strides(list(y0.shape)), y0)
    bt = Tensor(eng, b.shape, [3 * 2, 2, 1, 1], b)                   # a gap after each entry
    M.miopenConvolutionForwardBias(H, alpha, bt.desc, bt.mem, beta, yt.desc, yt.mem)
    H.stream.wait()
    # MIOpen adds with y as both operand and result: alpha*y + alpha*b + beta*y
    close(yt.get(), alpha * (y0 + b) + beta * y0)
    assert bt.get().tolist() == b.tolist() and bt.gaps_untouched()


@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (-2.0, 0.5)])
def test_backward_bias(H, eng, alpha, beta):
    rng = np.random.default_rng(6)
    dy = rng.standard_normal((3, 4, 2, 3, 2)).astype(np.float32)
    db0 = rng.standard_normal((1, 4, 1, 1, 1)).astype(np.float32)
    dyt = Tensor(eng, dy.shape, padded_strides(list(dy.shape)), dy)
    dbt = Tensor(eng, db0.shape, values=db0)
    M.miopenConvolutionBackwardBias(H, alpha, dyt.desc, dyt.mem, beta, dbt.desc, dbt.mem)
    H.stream.wait()
    close(dbt.get(), alpha * dy.astype(np.float64).sum(axis=(0, 2, 3, 4), keepdims=True)
          + beta * db0)


# -------------------------------------------------------------------------------------------------
# bad arguments: the status MIOpen returns, outputs untouched
# -------------------------------------------------------------------------------------------------
def test_bad_arguments_leave_outputs_untouched(H, eng):
    case = CASES[1]
    c, xt, wt, yt, x, w = case.setup(eng)
    prior = np.random.default_rng(7).standard_normal(yt.dims).astype(np.float32)
    yt.set(prior)
    ws, n = workspace(eng, 1 << 16)
    small = Tensor(eng, [4])
    half = M.miopenCreateTensorDescriptor()
    M.miopenSetTensorDescriptor(half, M.miopenHalf, 4, xt.dims, None)
    wrong_y = Tensor(eng, [yt.dims[0], yt.dims[1], yt.dims[2] + 1, yt.dims[3]])
    bad_w = Tensor(eng, [6, 3, 3, 2])                                # 3 channels per group
    wino = conv_desc(CONV, (1, 0), (2, 1), (2, 1), 2)                # strided, dilated
    other = [e for e in (dnnl.engine(dnnl.engine.kind.cpu, i)
                         for i in range(dnnl.engine.get_count(dnnl.engine.kind.cpu)))
             if e != eng]

    def fwd(**kw):
        a = dict(handle=H, alpha=1.0, xDesc=xt.desc, x=xt.mem, wDesc=wt.desc, w=wt.mem,
                 convDesc=c, algo=1, beta=0.5, yDesc=yt.desc, y=yt.mem, workSpace=ws,
                 workSpaceSize=n)
        a.update(kw)
        M.miopenConvolutionForward(*a.values())

    cases = [
        (M.miopenStatusBadParm, "dims", dict(yDesc=wrong_y.desc, y=wrong_y.mem)),
        (M.miopenStatusBadParm, "channel", dict(wDesc=bad_w.desc, w=bad_w.mem)),
        (M.miopenStatusBadParm, "bytes", dict(x=small.mem)),
        (M.miopenStatusBadParm, "NULL", dict(w=None)),
        (M.miopenStatusBadParm, "types", dict(xDesc=half)),
        (M.miopenStatusBadParm, "algo", dict(algo=4)),
        (M.miopenStatusBadParm, "alpha", dict(alpha="1")),
        (M.miopenStatusBadParm, "workSpaceSize", dict(workSpaceSize=n + 4)),
        (M.miopenStatusBadParm, "convDesc", dict(convDesc=None)),
        (M.miopenStatusNotImplemented, "FFT needs stride 1",
         dict(convDesc=wino, algo=M.miopenConvolutionFwdAlgoFFT)),
        (M.miopenStatusNotImplemented, "winograd", dict(convDesc=wino, algo=3)),
    ]
    if other:
        ym = dnnl.memory(yt.mem.get_desc(), other[0])
        cases.append((M.miopenStatusBadParm, "lives on", dict(y=ym)))
    for status, what, kw in cases:
        with pytest.raises(M.MIOpenError, match=what) as e:
            fwd(**kw)
        assert e.value.status == status, what
        assert isinstance(e.value, dnnl.error)
    H.stream.wait()
    assert np.array_equal(yt.get(), prior)

    # the backward passes and the bias calls check theirs too
    with pytest.raises(M.MIOpenError) as e:
        M.miopenConvolutionBackwardData(H, 1.0, yt.desc, yt.mem, wt.desc, wt.mem, c, 1, 0.0,
                                        wrong_y.desc, xt.mem, ws, n)
    assert e.value.status == M.miopenStatusBadParm
    with pytest.raises(M.MIOpenError) as e:
        M.miopenConvolutionBackwardWeights(H, 1.0, yt.desc, yt.mem, xt.desc, xt.mem, c, 2, 0.0,
                                           wt.desc, wt.mem, ws, n)       # no such algorithm
    assert e.value.status == M.miopenStatusBadParm
    db = Tensor(eng, [1, 5, 1, 1])
    with pytest.raises(M.MIOpenError, match="channels") as e:
        M.miopenConvolutionBackwardBias(H, 1.0, yt.desc, yt.mem, 0.0, db.desc, db.mem)
    assert e.value.status == M.miopenStatusBadParm
    bb = Tensor(eng, [1, 6, 2, 1])
    with pytest.raises(M.MIOpenError, match="broadcast") as e:
        M.miopenConvolutionForwardBias(H, 1.0, bb.desc, bb.mem, 0.0, yt.desc, yt.mem)
    assert e.value.status == M.miopenStatusBadParm
    H.stream.wait()
    assert np.array_equal(yt.get(), prior) and db.gaps_untouched()
    with pytest.raises(M.MIOpenError) as e:
        M.miopenConvolutionForwardGetWorkSpaceSize(H, wt.desc, xt.desc, c, wrong_y.desc)
    assert e.value.status == M.miopenStatusBadParm
    with pytest.raises(M.MIOpenError) as e:
        M.miopenFindConvolutionForwardAlgorithm(H, xt.desc, xt.mem, wt.desc, wt.mem, c, yt.desc,
                                                yt.mem, 0, ws, n, False)
    assert e.value.status == M.miopenStatusBadParm


# -------------------------------------------------------------------------------------------------
# the documentation's status table says what the module has
# -------------------------------------------------------------------------------------------------
def test_docs_status_table_matches_the_module():
    import pathlib
    import re

    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "compat_miopen.md").read_text()
    rows = dict(re.findall(r"^\| `(miopen\w+)`(?: \(struct\))? \| (\w+)", doc, re.M))
    assert len(rows) == 22 + 2 + 24     # the convolution page, its structs, the RNN page
    for name, status in rows.items():
        assert status in ("done", "planned"), name
        assert hasattr(M, name) == (status == "done"), name
    public = [n for n in M.__all__ if n.startswith("miopen") and callable(getattr(M, n))
              and not isinstance(getattr(M, n), type) and not n.endswith("_t")]
    for name in public:
        assert f"`{name}`" in doc, name
    assert M.miopenGetErrorString(M.miopenStatusBadParm) == "miopenStatusBadParm"
