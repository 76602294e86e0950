"""Shared helpers of the convolution primitive tests (no tests here).

``run_op`` builds a (de)convolution primitive of one direction through the public API,
executes it on random data and returns what it computed next to the float64 numpy reference
(``pydnnl.reference.conv``), which was itself checked against ONNX and finite differences.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import pydnnl as dnnl
from pydnnl.conv_shapes import validate_conv
from pydnnl.primitives.conv import (
    convolution_backward_data,
    convolution_backward_weights,
    convolution_forward,
    deconvolution_backward_data,
    deconvolution_backward_weights,
    deconvolution_forward,
)
from pydnnl.reference import conv as R

F32 = dnnl.memory.data_type.f32
MD = dnnl.memory.desc
PRIMS = {("conv", "fwd"): convolution_forward, ("conv", "bwd_d"): convolution_backward_data,
         ("conv", "bwd_w"): convolution_backward_weights,
         ("deconv", "fwd"): deconvolution_forward, ("deconv", "bwd_d"): deconvolution_backward_data,
         ("deconv", "bwd_w"): deconvolution_backward_weights}


@dataclass(frozen=True)
class Case:
    """A (de)convolution problem in oneDNN terms: src [mb, ic, in...], weights grouped
    [g, oc/g, ic/g, k...] (or [oc, ic/g, k...] when not ``grouped``)."""

    name: str
    mb: int
    g: int
    ic: int
    oc: int
    insp: tuple
    k: tuple
    s: tuple
    d: tuple
    pl: tuple
    pr: tuple
    grouped: bool = True

    @property
    def nsp(self) -> int:
        return len(self.insp)

    def wdims(self) -> tuple:
        if self.grouped:
            return (self.g, self.oc // self.g, self.ic // self.g, *self.k)
        return (self.oc, self.ic // self.g, *self.k)

    def geom(self, deconv: bool):
        return validate_conv((self.mb, self.ic, *self.insp), self.wdims(), self.s, self.d,
                             self.pl, self.pr, deconvolution=deconv)

    def __str__(self) -> str:
        return self.name


def act_tag(family: str, nsp: int) -> str:
    return {"nchw": ("abc", "abcd", "abcde"), "nhwc": ("acb", "acdb", "acdeb")}[family][nsp - 1]


@dataclass
class Result:
    got: dict
    ref: dict
    pd: object
    info: dict = field(default_factory=dict)


def _rand(rng, shape):
    return rng.standard_normal(shape).astype(np.float32)


def run_op(engine, stream, op: str, direction: str, case: Case, *, solver=None,
           algorithm=None, tags=None, bias=True, attr=None, post_ops=(), seed=0,
           keywords=False, solver_params=None) -> Result:
    """Run one direction of a (de)convolution; returns outputs and float64 reference values.

    ``tags``: dict logical name (src, wei, dst) -> format tag (default ``any``);
    ``post_ops``: the post-op list given to the reference (``attr`` carries the same).
    """
    rng = np.random.default_rng(seed)
    deconv = op == "deconv"
    geo = case.geom(deconv)
    sdims, wdims, ddims = (case.mb, case.ic, *case.insp), case.wdims(), geo.dst_dims()
    tags = dict(tags or {})
    t = {k: tags.get(k, "any") for k in ("src", "wei", "dst")}
    src_md, wei_md = MD(sdims, F32, t["src"]), MD(wdims, F32, t["wei"])
    dst_md = MD(ddims, F32, t["dst"])
    bias_md = MD((case.oc,), F32, "any") if bias else None
    strides, dil, pl, pr = list(case.s), list(case.d), list(case.pl), list(case.pr)
    if algorithm is None:
        algorithm = (dnnl.algorithm.convolution_auto if not deconv
                     else dnnl.algorithm.deconvolution_direct)
    extra = {} if solver is None else {"solver": solver}
    if solver_params is not None:
        extra["solver_params"] = solver_params
    fwd_cls = PRIMS[(op, "fwd")]
    x = _rand(rng, sdims)
    w = _rand(rng, wdims)
    b = _rand(rng, (case.oc,)) if bias else None
    dy = _rand(rng, ddims)
    prior = _rand(rng, ddims)
    ref_fwd = R.deconv_forward if deconv else R.conv_forward
    ref_bwd_d = R.deconv_backward_data if deconv else R.conv_backward_data
    ref_bwd_w = R.deconv_backward_weights if deconv else R.conv_backward_weights
    if direction == "fwd":
        if keywords:
            pd = fwd_cls.primitive_desc(
                engine, dnnl.prop_kind.forward_training, algorithm, src_desc=src_md,
                weights_desc=wei_md, bias_desc=bias_md, dst_desc=dst_md, strides=strides,
                dilates=dil, padding_l=pl, padding_r=pr, attr=attr, **extra)
        else:
            pd = fwd_cls.primitive_desc(engine, dnnl.prop_kind.forward_training, algorithm,
                                        src_md, wei_md, bias_md, dst_md, strides, dil, pl, pr,
                                        attr, **extra)
        X = dnnl.memory(pd.src_desc(), engine, x)
        W = dnnl.memory(pd.weights_desc(), engine, w)
        Y = dnnl.memory(pd.dst_desc(), engine, prior)
        args = {dnnl.ARG_SRC: X, dnnl.ARG_WEIGHTS: W, dnnl.ARG_DST: Y}
        if bias:
            args[dnnl.ARG_BIAS] = dnnl.memory(pd.bias_desc(), engine, b)
        PRIMS[(op, "fwd")](pd).execute(stream, args)
        stream.wait()
        ref = ref_fwd(x, w, b, case.s, case.d, case.pl, case.pr, dtype=np.float64)
        if post_ops:
            ref = R.apply_post_ops(ref, post_ops, prior.astype(np.float64))
        return Result({"dst": Y.to_numpy()}, {"dst": ref}, pd)
    hint_alg = dnnl.algorithm.deconvolution_direct if deconv else dnnl.algorithm.convolution_auto
    hint_extra = {} if solver in (None, "winograd_f2x3") else {"solver": solver}
    hint = fwd_cls.primitive_desc(engine, dnnl.prop_kind.forward_training, hint_alg, src_md,
                                  wei_md, bias_md, dst_md, strides, dil, pl, pr, **hint_extra)
    if direction == "bwd_d":
        pd = PRIMS[(op, "bwd_d")].primitive_desc(engine, algorithm, src_md, wei_md, dst_md,
                                                 strides, dil, pl, pr, hint, **extra)
        DX = dnnl.memory(pd.diff_src_desc(), engine, _rand(rng, sdims))
        W = dnnl.memory(pd.weights_desc(), engine, w)
        DY = dnnl.memory(pd.diff_dst_desc(), engine, dy)
        PRIMS[(op, "bwd_d")](pd).execute(stream, {dnnl.ARG_DIFF_DST: DY, dnnl.ARG_WEIGHTS: W,
                                                  dnnl.ARG_DIFF_SRC: DX})
        stream.wait()
        ref = ref_bwd_d(dy, w, sdims, case.s, case.d, case.pl, case.pr, dtype=np.float64)
        return Result({"diff_src": DX.to_numpy()}, {"diff_src": ref}, pd)
    pd = PRIMS[(op, "bwd_w")].primitive_desc(engine, algorithm, src_md, wei_md, bias_md, dst_md,
                                             strides, dil, pl, pr, hint, **extra)
    X = dnnl.memory(pd.src_desc(), engine, x)
    DY = dnnl.memory(pd.diff_dst_desc(), engine, dy)
    DW = dnnl.memory(pd.diff_weights_desc(), engine, _rand(rng, wdims))
    args = {dnnl.ARG_SRC: X, dnnl.ARG_DIFF_DST: DY, dnnl.ARG_DIFF_WEIGHTS: DW}
    if bias:
        DB = dnnl.memory(pd.diff_bias_desc(), engine, _rand(rng, (case.oc,)))
        args[dnnl.ARG_DIFF_BIAS] = DB
    PRIMS[(op, "bwd_w")](pd).execute(stream, args)
    stream.wait()
    rw, rb = ref_bwd_w(x, dy, wdims, case.s, case.d, case.pl, case.pr, with_bias=bias,
                       dtype=np.float64)
    got, ref = {"diff_weights": DW.to_numpy()}, {"diff_weights": rw}
    if bias:
        got["diff_bias"], ref["diff_bias"] = DB.to_numpy(), rb
    return Result(got, ref, pd)


def assert_close(res: Result, rtol: float = 1e-5, what: str = "") -> None:
    """Every output within ``rtol`` of the reference, relative to the output's magnitude
    (the largest reference entry: f32 sums of products round relative to their terms, so an
    entry near zero is judged against its tensor's scale, not its own)."""
    for k, ref in res.ref.items():
        got = res.got[k]
        assert got.shape == ref.shape, (k, got.shape, ref.shape)
        scale = max(float(np.abs(ref).max()), 1e-30)
        err = float(np.abs(got.astype(np.float64) - ref).max()) / scale
        assert err <= rtol, (f"{what} {k}: max error {err:.3g} of the magnitude {scale:.3g} "
                             f"(rtol {rtol})")


def post_ops_attr(ops):
    """(primitive_attr, reference op list) of ``[('sum', scale, zp) | (alg, alpha, beta)]``."""
    po = dnnl.post_ops()
    for op in ops:
        if op[0] == "sum":
            po.append_sum(op[1], op[2] if len(op) > 2 else 0)
        else:
            po.append_eltwise(op[0], op[1], op[2])
    attr = dnnl.primitive_attr()
    attr.set_post_ops(po)
    return attr, po
