"""MIOpen's convolution API on pydnnl's convolution and deconvolution primitives.

Translation only: MIOpen's descriptors become pydnnl memory descs over the caller's buffers
(no copies: grouped and transposed weights are strided views), MIOpen's algorithms become
pydnnl solvers, and the work runs in primitives:

* forward: ``convolution_forward`` (``miopenTranspose``: ``deconvolution_forward``), alpha and
  beta as fused post-ops (``eltwise_linear(alpha)``, ``sum(beta)``);
* backward data / weights: the ``*_backward_data`` / ``*_backward_weights`` primitives; with
  alpha != 1 or beta != 0 they write a scratch tensor that a 1x1 depthwise convolution (weights
  alpha, post-op ``sum(beta)``) blends into the output;
* bias forward: a copy of y (reorder), then a 1x1 depthwise convolution with y's copy as input
  and b as its bias; bias backward: the bias gradient of a 1x1 depthwise backward-weights
  convolution of dy.

MIOpen's workspace is the primitives' scratchpad (``scratchpad_mode.user``). Find runs
:meth:`pydnnl.convolution_forward.find` (and its backward and deconvolution twins), which
times every solver and stores the best in pydnnl's perf database.

Beyond MIOpen: any alpha and beta (MIOpen implements alpha = 1, beta = 0 for 2-D problems and
for the bias gradient), and no Find is needed before a convolution call.
"""
from __future__ import annotations

import numpy as np

from ...attr import post_ops, primitive_attr
from ...constants import (
    ARG_BIAS,
    ARG_DIFF_BIAS,
    ARG_DIFF_DST,
    ARG_DIFF_SRC,
    ARG_DIFF_WEIGHTS,
    ARG_DST,
    ARG_FROM,
    ARG_SCRATCHPAD,
    ARG_SRC,
    ARG_TO,
    ARG_WEIGHTS,
    algorithm,
    prop_kind,
    scratchpad_mode,
)
from ...conv_shapes import miopen_output_spatial
from ...error import unimplemented
from ...memory import memory
from ...memory.data_types import data_type
from ...memory.desc import MemoryDesc
from ...primitives import (
    convolution_backward_data,
    convolution_backward_weights,
    convolution_forward,
    deconvolution_backward_data,
    deconvolution_backward_weights,
    deconvolution_forward,
    reorder,
)
from ._common import (
    Handle,
    S,
    TensorDescriptor,
    api,
    bad,
    check_enum,
    check_handle,
    check_int,
    check_ints,
    check_memory,
    check_scalar,
    check_tensor,
    fail,
    memory_bytes,
    packed_strides,
    pydnnl_type,
    tensor_md,
    view,
)
from ._enums import (
    miopenConvAlgorithm_t,
    miopenConvBwdDataAlgorithm_t,
    miopenConvBwdWeightsAlgorithm_t,
    miopenConvFwdAlgorithm_t,
    miopenConvolutionMode_t,
    miopenDataType_t,
)

_F32 = data_type.f32

# MIOpen algorithm value -> pydnnl solver (FFT: forward and backward data, as in MIOpen)
_SOLVER = {0: "im2col_gemm", 1: "direct", 2: "fft", 3: "winograd_f2x3", 4: "im2col_gemm",
           5: "implicit_gemm"}
_ALGO = {"im2col_gemm": 0, "direct": 1, "fft": 2, "winograd_f2x3": 3, "implicit_gemm": 5}

# (transpose mode, direction) -> primitive; a transposed convolution is a deconvolution
_PRIM = {(False, "fwd"): convolution_forward, (False, "bwd_d"): convolution_backward_data,
         (False, "bwd_w"): convolution_backward_weights, (True, "fwd"): deconvolution_forward,
         (True, "bwd_d"): deconvolution_backward_data,
         (True, "bwd_w"): deconvolution_backward_weights}
# descriptor names and execution arguments of the x, w and y roles of each direction
_NAMES = {"fwd": ("src_desc", "weights_desc", "dst_desc"),
          "bwd_d": ("diff_src_desc", "weights_desc", "diff_dst_desc"),
          "bwd_w": ("src_desc", "diff_weights_desc", "diff_dst_desc")}
_ARGS = {"fwd": (ARG_SRC, ARG_WEIGHTS, ARG_DST), "bwd_d": (ARG_DIFF_SRC, ARG_WEIGHTS, ARG_DIFF_DST),
         "bwd_w": (ARG_SRC, ARG_DIFF_WEIGHTS, ARG_DIFF_DST)}
_ALGO_ENUM = {"fwd": miopenConvFwdAlgorithm_t, "bwd_d": miopenConvBwdDataAlgorithm_t,
              "bwd_w": miopenConvBwdWeightsAlgorithm_t}


# -- descriptors and result structs --------------------------------------------------------------
class ConvolutionDescriptor:
    """``miopenConvolutionDescriptor_t``. A new one is MIOpen's default: 2-D, convolution mode,
    padding 0, stride 1, dilation 1, one group."""

    def __init__(self):
        self._init(2, miopenConvolutionMode_t.miopenConvolution, (0, 0), (1, 1), (1, 1))
        self._destroyed = False

    def _init(self, nsp, mode, pads, strides, dilations) -> None:
        self.spatial_dim = nsp
        self.mode = mode
        self.pads, self.strides, self.dilations = tuple(pads), tuple(strides), tuple(dilations)
        self.trans_output_pads = (0,) * nsp
        self.group_count = 1

    def __repr__(self) -> str:
        return (f"miopenConvolutionDescriptor({self.mode.name}, pads={list(self.pads)}, "
                f"strides={list(self.strides)}, dilations={list(self.dilations)}, "
                f"groups={self.group_count}, output_pads={list(self.trans_output_pads)})")


miopenConvolutionDescriptor_t = ConvolutionDescriptor


class miopenConvAlgoPerf_t:
    """One Find result: the algorithm (read it as ``fwd_algo``, ``bwd_data_algo`` or
    ``bwd_weights_algo``, MIOpen's union), ``time`` in ms and the workspace ``memory`` in
    bytes it needs."""

    __slots__ = ("_algo", "time", "memory")

    def __init__(self, algo: int = 0, time: float = 0.0, memory: int = 0):
        self._algo, self.time, self.memory = int(algo), float(time), int(memory)

    def _as(self, cls):
        try:
            return cls(self._algo)
        except ValueError:
            return self._algo

    @property
    def fwd_algo(self) -> miopenConvFwdAlgorithm_t:
        return self._as(miopenConvFwdAlgorithm_t)

    @property
    def bwd_data_algo(self) -> miopenConvBwdDataAlgorithm_t:
        return self._as(miopenConvBwdDataAlgorithm_t)

    @property
    def bwd_weights_algo(self) -> miopenConvBwdWeightsAlgorithm_t:
        return self._as(miopenConvBwdWeightsAlgorithm_t)

    def __eq__(self, other) -> bool:
        return (isinstance(other, miopenConvAlgoPerf_t) and
                (self._algo, self.time, self.memory) == (other._algo, other.time, other.memory))

    def __repr__(self) -> str:
        return (f"miopenConvAlgoPerf_t(algo={self._as(miopenConvAlgorithm_t)!r}, "
                f"time={self.time:.4g} ms, memory={self.memory})")


class miopenConvSolution_t:
    """MIOpen's immediate-mode solution record (kept for ported code; no immediate-mode
    functions are provided)."""

    __slots__ = ("time", "workspace_size", "solution_id", "algorithm")

    def __init__(self, time: float = 0.0, workspace_size: int = 0, solution_id: int = 0,
                 algorithm: int = 0):
        self.time, self.workspace_size = float(time), int(workspace_size)
        self.solution_id, self.algorithm = int(solution_id), miopenConvAlgorithm_t(algorithm)

    def __repr__(self) -> str:
        return (f"miopenConvSolution_t(time={self.time}, workspace_size={self.workspace_size}, "
                f"solution_id={self.solution_id}, algorithm={self.algorithm!r})")


def _check_conv(where: str, conv) -> ConvolutionDescriptor:
    if not isinstance(conv, ConvolutionDescriptor):
        bad(f"{where}: convDesc must be a miopenConvolutionDescriptor_t, got {conv!r}")
    if conv._destroyed:
        bad(f"{where}: convDesc was destroyed")
    return conv


def _check_mode(where: str, c_mode) -> miopenConvolutionMode_t:
    m = check_enum(where, "c_mode", miopenConvolutionMode_t, c_mode)
    # MIOpen maps its deprecated group and depthwise modes onto plain convolution
    if m in (miopenConvolutionMode_t.miopenGroupConv, miopenConvolutionMode_t.miopenDepthwise):
        m = miopenConvolutionMode_t.miopenConvolution
    return m


@api
def miopenCreateConvolutionDescriptor() -> ConvolutionDescriptor:
    return ConvolutionDescriptor()


@api
def miopenInitConvolutionDescriptor(convDesc: ConvolutionDescriptor, c_mode, pad_h: int,
                                    pad_w: int, stride_h: int, stride_w: int, dilation_h: int,
                                    dilation_w: int) -> None:
    """A 2-D convolution (symmetric padding; dilation 1 is a dense kernel)."""
    where = "miopenInitConvolutionDescriptor"
    c = _check_conv(where, convDesc)
    mode = _check_mode(where, c_mode)
    pads = (check_int(where, "pad_h", pad_h, 0), check_int(where, "pad_w", pad_w, 0))
    strides = (check_int(where, "stride_h", stride_h, 1), check_int(where, "stride_w", stride_w, 1))
    dil = (check_int(where, "dilation_h", dilation_h, 1),
           check_int(where, "dilation_w", dilation_w, 1))
    c._init(2, mode, pads, strides, dil)


@api
def miopenInitConvolutionNdDescriptor(convDesc: ConvolutionDescriptor, spatialDim: int, padA,
                                      strideA, dilationA, c_mode) -> None:
    """A convolution over ``spatialDim`` dimensions (pydnnl runs 1 to 3)."""
    where = "miopenInitConvolutionNdDescriptor"
    c = _check_conv(where, convDesc)
    n = check_int(where, "spatialDim", spatialDim, 1)
    pads = check_ints(where, "padA", padA, n, 0)
    strides = check_ints(where, "strideA", strideA, n, 1)
    dil = check_ints(where, "dilationA", dilationA, n, 1)
    mode = _check_mode(where, c_mode)
    c._init(n, mode, pads, strides, dil)


@api
def miopenGetConvolutionDescriptor(convDesc: ConvolutionDescriptor) -> tuple:
    """``(c_mode, pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w)`` of a 2-D
    descriptor."""
    where = "miopenGetConvolutionDescriptor"
    c = _check_conv(where, convDesc)
    if c.spatial_dim != 2:
        fail(S.miopenStatusUnknownError, f"{where}: this API only deals with 2-D convolution; "
                                         f"convDesc is {c.spatial_dim}-D")
    return (c.mode, *c.pads, *c.strides, *c.dilations)


@api
def miopenGetConvolutionNdDescriptor(convDesc: ConvolutionDescriptor,
                                     requestedSpatialDim: int) -> tuple:
    """``(spatialDim, padA, strideA, dilationA, c_mode)``, the lists holding the first
    ``requestedSpatialDim`` entries."""
    where = "miopenGetConvolutionNdDescriptor"
    c = _check_conv(where, convDesc)
    n = check_int(where, "requestedSpatialDim", requestedSpatialDim, 0)
    if n > c.spatial_dim:
        fail(S.miopenStatusUnknownError, f"{where}: requestedSpatialDim {n} is larger than the "
                                         f"descriptor's spatial dimension {c.spatial_dim}")
    return c.spatial_dim, list(c.pads[:n]), list(c.strides[:n]), list(c.dilations[:n]), c.mode


@api
def miopenSetConvolutionGroupCount(convDesc: ConvolutionDescriptor, groupCount: int) -> None:
    """Groups (depthwise: as many groups as input channels)."""
    where = "miopenSetConvolutionGroupCount"
    _check_conv(where, convDesc).group_count = check_int(where, "groupCount", groupCount, 1)


@api
def miopenGetConvolutionGroupCount(convDesc: ConvolutionDescriptor) -> int:
    return _check_conv("miopenGetConvolutionGroupCount", convDesc).group_count


@api
def miopenSetTransposeConvOutputPadding(convDesc: ConvolutionDescriptor, adj_h: int,
                                        adj_w: int) -> None:
    """Output padding of a 2-D transposed convolution (each smaller than its stride)."""
    where = "miopenSetTransposeConvOutputPadding"
    c = _check_conv(where, convDesc)
    if c.spatial_dim != 2:
        fail(S.miopenStatusUnknownError, f"{where}: this API only deals with 2-D convolution; "
                                         f"convDesc is {c.spatial_dim}-D")
    c.trans_output_pads = (check_int(where, "adj_h", adj_h, 0), check_int(where, "adj_w", adj_w, 0))


@api
def miopenSetTransposeConvNdOutputPadding(convDesc: ConvolutionDescriptor, spatialDim: int,
                                          adjA) -> None:
    where = "miopenSetTransposeConvNdOutputPadding"
    c = _check_conv(where, convDesc)
    n = check_int(where, "spatialDim", spatialDim)
    if n != c.spatial_dim:
        fail(S.miopenStatusUnknownError, f"{where}: spatialDim {n} is not the descriptor's "
                                         f"spatial dimension {c.spatial_dim}")
    c.trans_output_pads = check_ints(where, "adjA", adjA, n, 0)


@api
def miopenDestroyConvolutionDescriptor(convDesc: ConvolutionDescriptor) -> None:
    _check_conv("miopenDestroyConvolutionDescriptor", convDesc)._destroyed = True


# -- geometry ------------------------------------------------------------------------------------
def _output_dims(where: str, c: ConvolutionDescriptor, xd: TensorDescriptor,
                 wd: TensorDescriptor, names=("inputTensorDesc", "filterDesc")) -> list[int]:
    """The output lengths MIOpen's ``GetForwardOutputTensor`` computes, with its checks."""
    nsp = c.spatial_dim
    for name, d in zip(names, (xd, wd)):
        if len(d.dims) != nsp + 2:
            bad(f"{where}: {name} has {len(d.dims)} dims {list(d.dims)}; a {nsp}-D convolution "
                f"needs {nsp + 2}")
    if xd.data_type != wd.data_type:
        bad(f"{where}: {names[0]} is {xd.data_type.name} but {names[1]} is {wd.data_type.name}")
    (n, in_c), (wk, wc) = xd.dims[:2], wd.dims[:2]
    g = c.group_count
    if _transposed(c):
        if in_c != wk or (g > 1 and wk % g):
            bad(f"{where}: channels do not match: a transposed convolution reads {in_c} input "
                f"channels, the filter {list(wd.dims)} takes {wk}" +
                (f" (which must divide into {g} groups)" if g > 1 else ""))
        for i, (a, s) in enumerate(zip(c.trans_output_pads, c.strides)):
            if a >= s:
                bad(f"{where}: output padding {a} of spatial dim {i} must be smaller than its "
                    f"stride {s}")
    elif (g == 1 and in_c != wc) or (g > 1 and (in_c % wc or wk % (in_c // wc))):
        bad(f"{where}: channels do not match: the input has {in_c} channels, the filter "
            f"{list(wd.dims)} reads {wc} per group with {g} group(s)")
    out = _raw_output(c, xd, wd)
    return [n, wc * g if _transposed(c) else wk, *(max(1, v) for v in out)]


def _transposed(c: ConvolutionDescriptor) -> bool:
    return c.mode == miopenConvolutionMode_t.miopenTranspose


def _raw_output(c: ConvolutionDescriptor, xd: TensorDescriptor, wd: TensorDescriptor):
    """Output lengths before MIOpen clamps them to >= 1."""
    return miopen_output_spatial(xd.dims[2:], wd.dims[2:], c.pads, c.strides, c.dilations,
                                 _transposed(c), c.trans_output_pads)


@api
def miopenGetConvolutionForwardOutputDim(convDesc: ConvolutionDescriptor,
                                         inputTensorDesc: TensorDescriptor,
                                         filterDesc: TensorDescriptor) -> tuple:
    """``(n, c, h, w)`` of a 2-D convolution's output."""
    where = "miopenGetConvolutionForwardOutputDim"
    c = _check_conv(where, convDesc)
    xd = check_tensor(where, "inputTensorDesc", inputTensorDesc)
    wd = check_tensor(where, "filterDesc", filterDesc)
    if c.spatial_dim != 2:
        fail(S.miopenStatusUnknownError, f"{where}: this API only deals with 2-D convolution; "
                                         f"convDesc is {c.spatial_dim}-D")
    return tuple(_output_dims(where, c, xd, wd))


@api
def miopenGetConvolutionNdForwardOutputDim(convDesc: ConvolutionDescriptor,
                                           inputTensorDesc: TensorDescriptor,
                                           filterDesc: TensorDescriptor) -> tuple:
    """``(nDim, outputTensorDimA)``."""
    where = "miopenGetConvolutionNdForwardOutputDim"
    c = _check_conv(where, convDesc)
    xd = check_tensor(where, "inputTensorDesc", inputTensorDesc)
    wd = check_tensor(where, "filterDesc", filterDesc)
    dims = _output_dims(where, c, xd, wd)
    return len(dims), dims


class _Problem:
    """A validated convolution in pydnnl's terms: x, w, y are the descriptors in forward roles
    (a transposed convolution's x is its input)."""

    def __init__(self, where: str, c: ConvolutionDescriptor, xd: TensorDescriptor,
                 wd: TensorDescriptor, yd: TensorDescriptor, names: tuple[str, str, str]):
        self.where = where
        nsp = c.spatial_dim
        for name, d in zip(names, (xd, wd, yd)):
            if len(d.dims) != nsp + 2:
                bad(f"{where}: {name} has {len(d.dims)} dims {list(d.dims)}; a {nsp}-D "
                    f"convolution needs {nsp + 2}")
        if not xd.data_type == wd.data_type == yd.data_type:
            bad(f"{where}: tensor types differ: {names[0]} {xd.data_type.name}, {names[1]} "
                f"{wd.data_type.name}, {names[2]} {yd.data_type.name}")
        self.transpose = _transposed(c)
        g = self.groups = c.group_count
        x_c, (wk, wc) = xd.dims[1], wd.dims[:2]
        if self.transpose:
            if x_c % g or wk != x_c:
                bad(f"{where}: invalid group number or filter: {names[0]} has {x_c} channels, "
                    f"{names[1]} {list(wd.dims)} expects {wk}, groups {g}")
        elif x_c % g or wk % g or x_c // g != wc:
            bad(f"{where}: invalid group number or filter channel number: {names[0]} has {x_c} "
                f"channels, {names[1]} is {list(wd.dims)} (K, C/groups, ...), groups {g}")
        want = _output_dims(where, c, xd, wd, names[:2])
        if self.transpose:
            fits = all(v >= 1 for v in _raw_output(c, xd, wd))
        else:   # the dilated filter within the padded input
            fits = all(i + 2 * p >= 1 + d * (k - 1) for i, k, d, p in
                       zip(xd.dims[2:], wd.dims[2:], c.dilations, c.pads))
        if not fits:
            bad(f"{where}: the filter {list(wd.dims[2:])} with dilations {list(c.dilations)} "
                f"does not fit the padded input {list(xd.dims[2:])} (pads {list(c.pads)})")
        if list(yd.dims) != want:
            bad(f"{where}: {names[2]} dims {list(yd.dims)} are not the output dims {want} of "
                f"this convolution (miopenGetConvolutionNdForwardOutputDim)")
        if nsp not in (1, 2, 3):
            fail(S.miopenStatusNotImplemented,
                 f"{where}: pydnnl runs 1-D to 3-D convolutions, not {nsp}-D")
        pydnnl_type(where, names[0], xd.data_type)
        if xd.data_type != miopenDataType_t.miopenFloat:
            fail(S.miopenStatusNotImplemented,
                 f"{where}: pydnnl's convolutions run miopenFloat, got {xd.data_type.name}")
        self.nsp = nsp
        self.strides = list(c.strides)
        self.dilates = [d - 1 for d in c.dilations]           # oneDNN counts from 0
        self.padding_l = list(c.pads)
        # a transposed convolution's output padding trims less at the end
        self.padding_r = ([p - a for p, a in zip(c.pads, c.trans_output_pads)]
                          if self.transpose else list(c.pads))
        self.x, self.w, self.y = xd, wd, yd
        self.key = (self.transpose, g, tuple(self.strides), tuple(self.dilates),
                    tuple(self.padding_l), tuple(self.padding_r))

    def wei_md(self, dims, strides) -> MemoryDesc:
        """pydnnl's view of MIOpen weights ``dims``/``strides`` (no copy)."""
        g, k = self.groups, list(dims[2:])
        sa, sb, sk = strides[0], strides[1], list(strides[2:])
        if not self.transpose:
            if g == 1:
                return MemoryDesc(dims, _F32, strides)
            # [K, C/G, k...] -> [G, K/G, C/G, k...]
            return MemoryDesc([g, dims[0] // g, dims[1], *k], _F32,
                              [sa * (dims[0] // g), sa, sb, *sk])
        # MIOpen [C_in, C_out/G, k...] -> oneDNN deconvolution [G, C_out/G, C_in/G, k...]
        if g == 1:
            return MemoryDesc([dims[1], dims[0], *k], _F32, [sb, sa, *sk])
        return MemoryDesc([g, dims[1], dims[0] // g, *k], _F32,
                          [sa * (dims[0] // g), sb, sa, *sk])


# -- primitives ----------------------------------------------------------------------------------
def _attr(alpha: float = 1.0, beta: float = 0.0, user_scratchpad: bool = False) -> primitive_attr:
    attr = primitive_attr()
    if user_scratchpad:
        attr.set_scratchpad_mode(scratchpad_mode.user)
    ops = post_ops()
    if alpha != 1.0:
        ops.append_eltwise(algorithm.eltwise_linear, alpha, 0.0)
    if beta != 0.0:
        # beta = 0 leaves the output unread (MIOpen's semantics), so NaNs there do not leak
        ops.append_sum(beta)
    if len(ops):
        attr.set_post_ops(ops)
    return attr


def _pd(h: Handle, p: _Problem, direction: str, mds, solver=None, params=None, attr=None):
    head = (h.engine, prop_kind.forward_inference) if direction == "fwd" else (h.engine,)
    kw = dict(zip(_NAMES[direction], mds))
    kw.update(strides=p.strides, dilates=p.dilates, padding_l=p.padding_l,
              padding_r=p.padding_r)
    if attr is not None:
        kw["attr"] = attr
    if solver is not None:
        kw["solver"] = solver
        if params:
            kw["solver_params"] = dict(params)
    return _PRIM[(p.transpose, direction)].primitive_desc(*head, algorithm.convolution_auto, **kw)


def _algos(direction: str) -> dict:
    """Solver -> MIOpen algorithm value for the algorithms MIOpen has in ``direction``
    (backward weights has no FFT)."""
    values = {m.value for m in _ALGO_ENUM[direction]}
    return {s: a for s, a in _ALGO.items() if a in values}


def _solver(where: str, direction: str, algo) -> str:
    a = check_enum(where, "algo", _ALGO_ENUM[direction], algo)
    s = _SOLVER.get(int(a))
    if s is None:
        have = [m.name for m in _ALGO_ENUM[direction] if m.value in _SOLVER]
        fail(S.miopenStatusNotImplemented,
             f"{where}: pydnnl has no solver for {a.name}; it implements {', '.join(have)}")
    return s


def _conv_prim(h: Handle, p: _Problem, direction: str, mds, solver: str, alpha: float,
               beta: float):
    """The (primitive desc, primitive) for one problem, solver and alpha/beta, built once per
    handle. Parameters come from this handle's Find, else from the perf database when Find
    stored this solver as the problem's best, else the solver's defaults."""
    pkey = (direction, p.key, tuple(mds))
    params = h.find_params.get(pkey + (solver,))

    def make():
        attr = _attr(alpha, beta, user_scratchpad=True)
        pd = None
        if params is None:
            auto = _pd(h, p, direction, mds, attr=attr)
            if auto.get_solver() == solver:
                pd = auto
        if pd is None:
            pd = _pd(h, p, direction, mds, solver, params, attr)
        return pd, _PRIM[(p.transpose, direction)](pd)

    return h.cached(pkey + (solver, alpha, beta), make)


def _axpby_prim(h: Handle, dims, src_md: MemoryDesc, dst_md: MemoryDesc, alpha: float,
                beta: float):
    """``dst = alpha * src + beta * dst`` over tensors of ``dims`` (3 to 5 dims): a 1x1
    depthwise convolution whose weights are alpha."""
    nsp = len(dims) - 2
    c = dims[1]
    w_md = MemoryDesc([c, 1, 1] + [1] * nsp, _F32, packed_strides([c, 1, 1] + [1] * nsp))

    def make():
        pd = convolution_forward.primitive_desc(
            h.engine, prop_kind.forward_inference, algorithm.convolution_auto, src_desc=src_md,
            weights_desc=w_md, dst_desc=dst_md, strides=[1] * nsp, padding_l=[0] * nsp,
            padding_r=[0] * nsp, attr=_attr(1.0, beta))
        return pd, convolution_forward(pd)

    pd, prim = h.cached(("axpby", src_md, dst_md, beta), make)
    w = h.temp(("alpha", w_md, alpha), w_md, np.full(w_md.dims, alpha, np.float32))
    return prim, w


def _workspace(where: str, h: Handle, workSpace, workSpaceSize):
    size = check_int(where, "workSpaceSize", workSpaceSize, 0)
    if workSpace is None:
        if size:
            bad(f"{where}: workSpace is NULL but workSpaceSize is {size}")
        return None, 0
    check_memory(where, "workSpace", h, workSpace)
    if memory_bytes(workSpace) < size:
        bad(f"{where}: workSpaceSize is {size} bytes but workSpace holds "
            f"{memory_bytes(workSpace)}")
    return workSpace, size


def _scratch(where: str, h: Handle, pd, ws, size: int) -> dict:
    need = pd.workspace_bytes()
    if need == 0:
        return {}
    if size < need:
        bad(f"{where}: the algorithm needs {need} bytes of workspace, got {size} "
            f"(query the size with the *GetWorkSpaceSize call)")
    return {ARG_SCRATCHPAD: memory(pd.scratchpad_desc(), h.engine, ws.buffer)}


def _views(where: str, h: Handle, p: _Problem, names, mems) -> list[memory]:
    """Validated views of the x, w and y memories."""
    x, w, y = mems
    out = []
    for i, (name, d, m) in enumerate(zip(names, (p.x, p.w, p.y), (x, w, y))):
        check_memory(where, name.replace("Desc", ""), h, m)
        md = p.wei_md(d.dims, d.strides) if i == 1 else tensor_md(where, name, d)
        out.append(view(where, name.replace("Desc", ""), h, md, m))
    return out


_OUT = {"fwd": 2, "bwd_d": 0, "bwd_w": 1}   # which of x, w, y a direction writes


def _out_tmp_md(p: _Problem, direction: str) -> MemoryDesc:
    """The packed scratch output a backward primitive writes before the alpha/beta blend."""
    i = _OUT[direction]
    d = (p.x, p.w, p.y)[i]
    strides = packed_strides(d.dims)
    return p.wei_md(d.dims, strides) if i == 1 else MemoryDesc(d.dims, _F32, strides)


def _run(where: str, h: Handle, p: _Problem, direction: str, names, mems, algo, alpha, beta,
         workSpace, workSpaceSize) -> None:
    """One convolution call: validate everything, build (or reuse) the primitives, enqueue."""
    alpha = check_scalar(where, "alpha", alpha)
    beta = check_scalar(where, "beta", beta)
    solver = _solver(where, direction, algo)
    ws, size = _workspace(where, h, workSpace, workSpaceSize)
    views = _views(where, h, p, names, mems)
    out_i = _OUT[direction]
    blend = direction != "fwd" and (alpha != 1.0 or beta != 0.0)
    mds = [v.get_desc() for v in views]
    if blend:
        # the backward primitives have no post-ops: write a scratch tensor, then blend it in
        d = (p.x, p.w, p.y)[out_i]
        mds[out_i] = _out_tmp_md(p, direction)
        pd, prim = _conv_prim(h, p, direction, mds, solver, 1.0, 0.0)
        flat_src = MemoryDesc(d.dims, _F32, packed_strides(d.dims))
        flat_dst = MemoryDesc(d.dims, _F32, d.strides)
        blend_prim, alpha_w = _axpby_prim(h, list(d.dims), flat_src, flat_dst, alpha, beta)
    else:
        pd, prim = _conv_prim(h, p, direction, mds, solver, alpha, beta)
    args = dict(zip(_ARGS[direction], views))
    args.update(_scratch(where, h, pd, ws, size))
    if not blend:
        prim.execute(h.stream, args)
        return
    tmp = h.temp(("out", mds[out_i]), mds[out_i])
    out = args[_ARGS[direction][out_i]]
    args[_ARGS[direction][out_i]] = tmp
    prim.execute(h.stream, args)
    blend_prim.execute(h.stream, {
        ARG_SRC: memory(flat_src, h.engine, tmp.buffer), ARG_WEIGHTS: alpha_w,
        ARG_DST: memory(flat_dst, h.engine, out.buffer)})


def _problem(where, handle, convDesc, descs, names):
    h = check_handle(where, handle)
    c = _check_conv(where, convDesc)
    ds = [check_tensor(where, n, d) for n, d in zip(names, descs)]
    return h, _Problem(where, c, *ds, names)


# -- workspace and Find --------------------------------------------------------------------------
def _workspace_size(h: Handle, p: _Problem, direction: str) -> int:
    """The most scratchpad any solver needs, with or without alpha and beta (their post-ops or
    the backward passes' scratch output can change a solver's needs)."""
    where = p.where
    views = [p.wei_md(d.dims, d.strides) if i == 1 else tensor_md(where, "tensor", d)
             for i, d in enumerate((p.x, p.w, p.y))]
    variants = [(views, None)]
    if direction == "fwd":
        variants.append((views, _attr(2.0, 0.5)))
    else:
        tmp = list(views)
        tmp[_OUT[direction]] = _out_tmp_md(p, direction)
        variants.append((tmp, None))
    need = 0
    for solver in _algos(direction):
        for mds, attr in variants:
            params = h.find_params.get((direction, p.key, tuple(mds), solver))
            try:
                pd = _pd(h, p, direction, mds, solver, params, attr)
            except unimplemented:
                continue
            need = max(need, pd.workspace_bytes())
    return need


def _find(where: str, h: Handle, p: _Problem, direction: str, names, mems, requestAlgoCount,
          workSpace, workSpaceSize, exhaustiveSearch) -> tuple[int, list[miopenConvAlgoPerf_t]]:
    req = check_int(where, "requestAlgoCount", requestAlgoCount, 1)
    if not isinstance(exhaustiveSearch, (bool, int, np.integer)):
        bad(f"{where}: exhaustiveSearch must be a bool, got {exhaustiveSearch!r}")
    ws, size = _workspace(where, h, workSpace, workSpaceSize)
    views = _views(where, h, p, names, mems)
    mds = [v.get_desc() for v in views]
    head = (h.engine, prop_kind.forward_inference) if direction == "fwd" else (h.engine,)
    kw = dict(zip(_NAMES[direction], mds))
    results = _PRIM[(p.transpose, direction)].find(
        *head, **kw, strides=p.strides, dilates=p.dilates, padding_l=p.padding_l,
        padding_r=p.padding_r, exhaustive=bool(exhaustiveSearch))
    best = {}
    for r in results:                                  # fastest first
        a = _algos(direction).get(r.solver)
        if a is None or a in best or r.workspace_bytes > size:
            continue
        best[a] = r
    if not best:
        least = min(r.workspace_bytes for r in results)
        bad(f"{where}: every algorithm needs more workspace than the {size} bytes given "
            f"(at least {least})")
    pkey = (direction, p.key, tuple(mds))
    for r in best.values():
        h.find_params[pkey + (r.solver,)] = dict(r.params)
    h.forget(pkey)
    enum_cls = _ALGO_ENUM[direction]
    perf = [miopenConvAlgoPerf_t(enum_cls(a), r.time_ms, r.workspace_bytes)
            for a, r in best.items()][:req]
    return len(perf), perf


# -- forward -------------------------------------------------------------------------------------
_FWD_NAMES = ("xDesc", "wDesc", "yDesc")


@api
def miopenConvolutionForwardGetWorkSpaceSize(handle: Handle, wDesc: TensorDescriptor,
                                             xDesc: TensorDescriptor,
                                             convDesc: ConvolutionDescriptor,
                                             yDesc: TensorDescriptor) -> int:
    """The largest workspace (bytes) any forward algorithm needs for this problem."""
    where = "miopenConvolutionForwardGetWorkSpaceSize"
    h, p = _problem(where, handle, convDesc, (xDesc, wDesc, yDesc), _FWD_NAMES)
    return _workspace_size(h, p, "fwd")


@api
def miopenFindConvolutionForwardAlgorithm(handle: Handle, xDesc: TensorDescriptor, x: memory,
                                          wDesc: TensorDescriptor, w: memory,
                                          convDesc: ConvolutionDescriptor,
                                          yDesc: TensorDescriptor, y: memory,
                                          requestAlgoCount: int, workSpace: memory | None,
                                          workSpaceSize: int, exhaustiveSearch: bool) -> tuple:
    """Time every algorithm (pydnnl's Find, remembered in the perf database):
    ``(returnedAlgoCount, perfResults)``, fastest first, those fitting ``workSpaceSize``.
    ``y`` is not written."""
    where = "miopenFindConvolutionForwardAlgorithm"
    h, p = _problem(where, handle, convDesc, (xDesc, wDesc, yDesc), _FWD_NAMES)
    return _find(where, h, p, "fwd", _FWD_NAMES, (x, w, y), requestAlgoCount, workSpace,
                 workSpaceSize, exhaustiveSearch)


@api
def miopenConvolutionForward(handle: Handle, alpha: float, xDesc: TensorDescriptor, x: memory,
                             wDesc: TensorDescriptor, w: memory,
                             convDesc: ConvolutionDescriptor, algo: miopenConvFwdAlgorithm_t,
                             beta: float, yDesc: TensorDescriptor, y: memory,
                             workSpace: memory | None, workSpaceSize: int) -> None:
    """``y = alpha * conv(x, w) + beta * y`` with algorithm ``algo``."""
    where = "miopenConvolutionForward"
    h, p = _problem(where, handle, convDesc, (xDesc, wDesc, yDesc), _FWD_NAMES)
    _run(where, h, p, "fwd", _FWD_NAMES, (x, w, y), algo, alpha, beta, workSpace, workSpaceSize)


@api
def miopenConvolutionForwardBias(handle: Handle, alpha: float, bDesc: TensorDescriptor,
                                 b: memory, beta: float, yDesc: TensorDescriptor,
                                 y: memory) -> None:
    """``y = alpha * (y + b) + beta * y`` with b broadcast over all but the channel dimension
    (MIOpen's tensor-add with y as both operand and result)."""
    where = "miopenConvolutionForwardBias"
    h = check_handle(where, handle)
    a, bt = check_scalar(where, "alpha", alpha), check_scalar(where, "beta", beta)
    bd, yd = check_tensor(where, "bDesc", bDesc), check_tensor(where, "yDesc", yDesc)
    if len(bd.dims) != len(yd.dims):
        bad(f"{where}: bDesc has {len(bd.dims)} dims {list(bd.dims)}, yDesc "
            f"{len(yd.dims)} {list(yd.dims)}")
    if bd.data_type != yd.data_type:
        bad(f"{where}: bDesc is {bd.data_type.name}, yDesc {yd.data_type.name}")
    if any(bv not in (1, yv) for bv, yv in zip(bd.dims, yd.dims)):
        bad(f"{where}: bDesc dims {list(bd.dims)} do not broadcast to yDesc dims {list(yd.dims)}")
    c = yd.dims[1] if len(yd.dims) > 1 else 0
    if list(bd.dims) != [1, c] + [1] * (len(yd.dims) - 2) or not 3 <= len(yd.dims) <= 5:
        fail(S.miopenStatusNotImplemented,
             f"{where}: pydnnl adds per-channel biases [1, C, 1...] to 3- to 5-dim tensors; got "
             f"bDesc {list(bd.dims)}, yDesc {list(yd.dims)}")
    pydnnl_type(where, "yDesc", yd.data_type)
    if yd.data_type != miopenDataType_t.miopenFloat:
        fail(S.miopenStatusNotImplemented, f"{where}: pydnnl runs miopenFloat, got "
                                           f"{yd.data_type.name}")
    check_memory(where, "b", h, b)
    check_memory(where, "y", h, y)
    b_md = MemoryDesc([c], _F32, [bd.strides[1]])
    B, Y = view(where, "b", h, b_md, b), view(where, "y", h, tensor_md(where, "yDesc", yd), y)
    nsp = len(yd.dims) - 2
    tmp_md = MemoryDesc(yd.dims, _F32, packed_strides(yd.dims))
    ones_md = MemoryDesc([c, 1, 1] + [1] * nsp, _F32, packed_strides([c, 1, 1] + [1] * nsp))
    y_md = Y.get_desc()

    def make():
        # y is both read and written: copy it first, since a kernel must not read a buffer
        # it writes through another argument
        cpd = reorder.primitive_desc(h.engine, y_md, h.engine, tmp_md)
        fpd = convolution_forward.primitive_desc(
            h.engine, prop_kind.forward_inference, algorithm.convolution_auto, src_desc=tmp_md,
            weights_desc=ones_md, bias_desc=b_md, dst_desc=y_md, strides=[1] * nsp,
            padding_l=[0] * nsp, padding_r=[0] * nsp, attr=_attr(a, bt))
        return reorder(cpd), convolution_forward(fpd)

    copy, add = h.cached(("fwd_bias", y_md, b_md, a, bt), make)
    tmp = h.temp(("out", tmp_md), tmp_md)
    ones = h.temp(("ones", ones_md), ones_md, np.ones(ones_md.dims, np.float32))
    copy.execute(h.stream, {ARG_FROM: Y, ARG_TO: tmp})
    add.execute(h.stream, {ARG_SRC: tmp, ARG_WEIGHTS: ones, ARG_BIAS: B, ARG_DST: Y})


# -- backward data -------------------------------------------------------------------------------
_BWD_D_NAMES = ("dxDesc", "wDesc", "dyDesc")


@api
def miopenConvolutionBackwardDataGetWorkSpaceSize(handle: Handle, dyDesc: TensorDescriptor,
                                                  wDesc: TensorDescriptor,
                                                  convDesc: ConvolutionDescriptor,
                                                  dxDesc: TensorDescriptor) -> int:
    where = "miopenConvolutionBackwardDataGetWorkSpaceSize"
    h, p = _problem(where, handle, convDesc, (dxDesc, wDesc, dyDesc), _BWD_D_NAMES)
    return _workspace_size(h, p, "bwd_d")


@api
def miopenFindConvolutionBackwardDataAlgorithm(handle: Handle, dyDesc: TensorDescriptor,
                                               dy: memory, wDesc: TensorDescriptor, w: memory,
                                               convDesc: ConvolutionDescriptor,
                                               dxDesc: TensorDescriptor, dx: memory,
                                               requestAlgoCount: int, workSpace: memory | None,
                                               workSpaceSize: int,
                                               exhaustiveSearch: bool) -> tuple:
    """``(returnedAlgoCount, perfResults)`` for backward data, fastest first; ``dx`` is not
    written."""
    where = "miopenFindConvolutionBackwardDataAlgorithm"
    h, p = _problem(where, handle, convDesc, (dxDesc, wDesc, dyDesc), _BWD_D_NAMES)
    return _find(where, h, p, "bwd_d", _BWD_D_NAMES, (dx, w, dy), requestAlgoCount, workSpace,
                 workSpaceSize, exhaustiveSearch)


@api
def miopenConvolutionBackwardData(handle: Handle, alpha: float, dyDesc: TensorDescriptor,
                                  dy: memory, wDesc: TensorDescriptor, w: memory,
                                  convDesc: ConvolutionDescriptor,
                                  algo: miopenConvBwdDataAlgorithm_t, beta: float,
                                  dxDesc: TensorDescriptor, dx: memory,
                                  workSpace: memory | None, workSpaceSize: int) -> None:
    """``dx = alpha * conv_backward_data(dy, w) + beta * dx``."""
    where = "miopenConvolutionBackwardData"
    h, p = _problem(where, handle, convDesc, (dxDesc, wDesc, dyDesc), _BWD_D_NAMES)
    _run(where, h, p, "bwd_d", _BWD_D_NAMES, (dx, w, dy), algo, alpha, beta, workSpace,
         workSpaceSize)


# -- backward weights ----------------------------------------------------------------------------
_BWD_W_NAMES = ("xDesc", "dwDesc", "dyDesc")


@api
def miopenConvolutionBackwardWeightsGetWorkSpaceSize(handle: Handle, dyDesc: TensorDescriptor,
                                                     xDesc: TensorDescriptor,
                                                     convDesc: ConvolutionDescriptor,
                                                     dwDesc: TensorDescriptor) -> int:
    where = "miopenConvolutionBackwardWeightsGetWorkSpaceSize"
    h, p = _problem(where, handle, convDesc, (xDesc, dwDesc, dyDesc), _BWD_W_NAMES)
    return _workspace_size(h, p, "bwd_w")


@api
def miopenFindConvolutionBackwardWeightsAlgorithm(handle: Handle, dyDesc: TensorDescriptor,
                                                  dy: memory, xDesc: TensorDescriptor,
                                                  x: memory, convDesc: ConvolutionDescriptor,
                                                  dwDesc: TensorDescriptor, dw: memory,
                                                  requestAlgoCount: int,
                                                  workSpace: memory | None, workSpaceSize: int,
                                                  exhaustiveSearch: bool) -> tuple:
    """``(returnedAlgoCount, perfResults)`` for backward weights, fastest first; ``dw`` is not
    written."""
    where = "miopenFindConvolutionBackwardWeightsAlgorithm"
    h, p = _problem(where, handle, convDesc, (xDesc, dwDesc, dyDesc), _BWD_W_NAMES)
    return _find(where, h, p, "bwd_w", _BWD_W_NAMES, (x, dw, dy), requestAlgoCount, workSpace,
                 workSpaceSize, exhaustiveSearch)


@api
def miopenConvolutionBackwardWeights(handle: Handle, alpha: float, dyDesc: TensorDescriptor,
                                     dy: memory, xDesc: TensorDescriptor, x: memory,
                                     convDesc: ConvolutionDescriptor,
                                     algo: miopenConvBwdWeightsAlgorithm_t, beta: float,
                                     dwDesc: TensorDescriptor, dw: memory,
                                     workSpace: memory | None, workSpaceSize: int) -> None:
    """``dw = alpha * conv_backward_weights(x, dy) + beta * dw``."""
    where = "miopenConvolutionBackwardWeights"
    h, p = _problem(where, handle, convDesc, (xDesc, dwDesc, dyDesc), _BWD_W_NAMES)
    _run(where, h, p, "bwd_w", _BWD_W_NAMES, (x, dw, dy), algo, alpha, beta, workSpace,
         workSpaceSize)


@api
def miopenConvolutionBackwardBias(handle: Handle, alpha: float, dyDesc: TensorDescriptor,
                                  dy: memory, beta: float, dbDesc: TensorDescriptor,
                                  db: memory) -> None:
    """``db = alpha * sum(dy over all but the channel dimension) + beta * db``; db is
    [1, C, 1...]."""
    where = "miopenConvolutionBackwardBias"
    h = check_handle(where, handle)
    a, bt = check_scalar(where, "alpha", alpha), check_scalar(where, "beta", beta)
    dyd, dbd = check_tensor(where, "dyDesc", dyDesc), check_tensor(where, "dbDesc", dbDesc)
    check_memory(where, "dy", h, dy)
    check_memory(where, "db", h, db)
    if len(dyd.dims) < 2 or len(dbd.dims) < 2 or dyd.dims[1] != dbd.dims[1]:
        bad(f"{where}: dbDesc {list(dbd.dims)} must have dyDesc's {list(dyd.dims)[1:2]} "
            f"channels in dimension 1")
    if any(v != 1 for i, v in enumerate(dbd.dims) if i != 1):
        bad(f"{where}: dbDesc dims {list(dbd.dims)} must be 1 except the channel dimension")
    if dyd.data_type != dbd.data_type:
        bad(f"{where}: dyDesc is {dyd.data_type.name}, dbDesc {dbd.data_type.name}")
    if not 3 <= len(dyd.dims) <= 5:
        fail(S.miopenStatusNotImplemented,
             f"{where}: pydnnl reduces 3- to 5-dim tensors, got dyDesc {list(dyd.dims)}")
    pydnnl_type(where, "dyDesc", dyd.data_type)
    if dyd.data_type != miopenDataType_t.miopenFloat:
        fail(S.miopenStatusNotImplemented, f"{where}: pydnnl runs miopenFloat, got "
                                           f"{dyd.data_type.name}")
    blend = a != 1.0 or bt != 0.0
    if blend and not 3 <= len(dbd.dims) <= 5:
        fail(S.miopenStatusNotImplemented, f"{where}: with alpha != 1 or beta != 0 dbDesc must "
                                           f"have 3 to 5 dims, got {list(dbd.dims)}")
    c, nsp = dyd.dims[1], len(dyd.dims) - 2
    DY = view(where, "dy", h, tensor_md(where, "dyDesc", dyd), dy)
    db_md = MemoryDesc([c], _F32, [dbd.strides[1]])
    DB = view(where, "db", h, db_md, db)
    bias_md = MemoryDesc([c], _F32, [1]) if blend else db_md
    # depthwise 1x1 backward weights: its bias gradient is the channel sum of diff_dst
    dw_md = MemoryDesc([c, 1, 1] + [1] * nsp, _F32, packed_strides([c, 1, 1] + [1] * nsp))
    dy_md = DY.get_desc()

    def make():
        pd = convolution_backward_weights.primitive_desc(
            h.engine, algorithm.convolution_auto, src_desc=dy_md, diff_weights_desc=dw_md,
            diff_bias_desc=bias_md, diff_dst_desc=dy_md, strides=[1] * nsp,
            padding_l=[0] * nsp, padding_r=[0] * nsp)
        return convolution_backward_weights(pd)

    prim = h.cached(("bwd_bias", dy_md, bias_md), make)
    if blend:
        full_src = MemoryDesc(dbd.dims, _F32, packed_strides(dbd.dims))
        full_dst = MemoryDesc(dbd.dims, _F32, dbd.strides)
        DBF = view(where, "db", h, full_dst, db)
        blend_prim, alpha_w = _axpby_prim(h, list(dbd.dims), full_src, full_dst, a, bt)
    dw_tmp = h.temp(("out", dw_md), dw_md)
    if not blend:
        prim.execute(h.stream, {ARG_SRC: DY, ARG_DIFF_DST: DY, ARG_DIFF_WEIGHTS: dw_tmp,
                                ARG_DIFF_BIAS: DB})
        return
    tmp = h.temp(("out", bias_md), bias_md)
    prim.execute(h.stream, {ARG_SRC: DY, ARG_DIFF_DST: DY, ARG_DIFF_WEIGHTS: dw_tmp,
                            ARG_DIFF_BIAS: tmp})
    blend_prim.execute(h.stream, {ARG_SRC: memory(full_src, h.engine, tmp.buffer),
                                  ARG_WEIGHTS: alpha_w, ARG_DST: DBF})


__all__ = ["miopenConvolutionDescriptor_t", "miopenConvAlgoPerf_t", "miopenConvSolution_t",
           "miopenCreateConvolutionDescriptor", "miopenInitConvolutionDescriptor",
           "miopenInitConvolutionNdDescriptor", "miopenGetConvolutionDescriptor",
           "miopenGetConvolutionNdDescriptor", "miopenSetConvolutionGroupCount",
           "miopenGetConvolutionGroupCount", "miopenSetTransposeConvOutputPadding",
           "miopenSetTransposeConvNdOutputPadding", "miopenGetConvolutionForwardOutputDim",
           "miopenGetConvolutionNdForwardOutputDim", "miopenConvolutionForwardGetWorkSpaceSize",
           "miopenFindConvolutionForwardAlgorithm", "miopenConvolutionForward",
           "miopenConvolutionForwardBias", "miopenFindConvolutionBackwardDataAlgorithm",
           "miopenConvolutionBackwardData", "miopenConvolutionBackwardDataGetWorkSpaceSize",
           "miopenConvolutionBackwardWeightsGetWorkSpaceSize",
           "miopenFindConvolutionBackwardWeightsAlgorithm", "miopenConvolutionBackwardWeights",
           "miopenConvolutionBackwardBias", "miopenDestroyConvolutionDescriptor"]
