"""bf16 and f16 convolutions and deconvolutions (every direction): the combinations of oneDNN's
data type table, computed in f32 on converted copies, against the float64 reference evaluated
on the rounded inputs; the combinations the table lacks, and the scratchpad the copies take.
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from test_conv_helpers import PRIMS, Case, post_ops_attr  # noqa: E402

import pydnnl as dnnl  # noqa: E402
from pydnnl.error import invalid_arguments, unimplemented  # noqa: E402
from pydnnl.reference import conv as R  # noqa: E402

DT = dnnl.memory.data_type
MD = dnnl.memory.desc
FWD = dnnl.prop_kind.forward_training
# unit roundoff of each output type: round to nearest is within half an ulp, at most
# 2^-p * |x| for p significant bits (bf16 8, f16 11); f32 outputs are not rounded again
UNIT_ROUNDOFF = {DT.bf16: 2.0 ** -8, DT.f16: 2.0 ** -11, DT.f32: 0.0}
# an f16 result below its smallest normal (2^-14) rounds to a multiple of 2^-24: half of that
ABS_FLOOR = {DT.bf16: 0.0, DT.f16: 2.0 ** -25, DT.f32: 0.0}
# the f32 tests' bound on the solvers' f32 sums, relative to the tensor's magnitude (Winograd
# and FFT transforms round more: benchdnn's conv driver uses the same three figures)
F32_RTOL = {"winograd_f2x3": 3e-5, "fft": 2e-5}

C2D = Case("2d", 2, 1, 8, 16, (7, 7), (3, 3), (1, 1), (0, 0), (1, 1), (1, 1), grouped=False)
C3D = Case("3d", 1, 1, 4, 6, (4, 4, 3), (3, 3, 3), (1, 1, 1), (0, 0, 0), (1, 1, 1), (1, 1, 1),
           grouped=False)
STRIDED = Case("strided_padded", 2, 1, 6, 8, (9, 8), (3, 2), (2, 2), (0, 1), (2, 1), (1, 0),
               grouped=False)
GROUPED = Case("grouped", 2, 2, 8, 12, (6, 6), (3, 3), (1, 1), (0, 0), (1, 1), (1, 1))
DECONV = Case("deconv", 2, 1, 6, 4, (5, 4), (3, 3), (2, 2), (0, 0), (1, 1), (0, 1),
              grouped=False)


def _values(mem: dnnl.memory) -> np.ndarray:
    return mem.to_numpy().astype(np.float64)


def _mem(engine, md, rng) -> dnnl.memory:
    """A memory of ``md`` holding random values (rounded to its data type on the way in)."""
    return dnnl.memory(md, engine, rng.standard_normal(md.dims).astype(np.float32))


def _tolerance(ref: np.ndarray, scale: float, out_dt, solver: str) -> np.ndarray:
    """Per element: the f32 computation's error (the f32 tests' bound relative to the sum's
    magnitude ``scale``), then the output's rounding to ``out_dt`` (half an ulp of a value
    that far from the reference: u * (|ref| + f32 error)), and f16's subnormal spacing."""
    f32 = F32_RTOL.get(solver, 1e-5) * scale
    u = UNIT_ROUNDOFF[out_dt]
    return f32 + u * (np.abs(ref) + f32) + ABS_FLOOR[out_dt]


def _assert_close(got, ref, scale, out_dt, solver, what):
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    tol = _tolerance(ref, scale, out_dt, solver)
    bad = np.abs(got - ref) > tol
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.size} beyond the tolerance, max "
                           f"error {float(np.abs(got - ref).max()):.3g} (solver {solver})")


def run(engine, stream, op, direction, case, dt, *, out_dt=None, bias_dt=None, bias=True,
        post_ops=(), solver=None, attr=None, tags=None, wei_dt=None):
    """Run one direction with ``dt`` data (``out_dt``: the output's type, default ``dt``;
    ``bias_dt`` likewise; ``wei_dt``: the weights' type in forward and backward data, default
    ``dt``) and check every output against the float64 reference of the values the memories
    hold. Returns the primitive descriptor."""
    rng = np.random.default_rng(7)
    deconv = op == "deconv"
    geo = case.geom(deconv)
    sdims, wdims, ddims = (case.mb, case.ic, *case.insp), case.wdims(), geo.dst_dims()
    out_dt, bias_dt, wei_dt = out_dt or dt, bias_dt or out_dt or dt, wei_dt or dt
    t = {"src": "any", "wei": "any", "dst": "any", **(tags or {})}
    fwd, bwd_d, bwd_w = (PRIMS[(op, d)] for d in ("fwd", "bwd_d", "bwd_w"))
    alg = dnnl.algorithm.convolution_auto
    geom = (list(case.s), list(case.d), list(case.pl), list(case.pr))
    pin = {} if solver is None else {"solver": solver}
    ref_fwd, ref_bwd_d, ref_bwd_w = (getattr(R, f"{'deconv' if deconv else 'conv'}_{d}") for d
                                     in ("forward", "backward_data", "backward_weights"))
    ref_geom = (case.s, case.d, case.pl, case.pr)
    if direction == "fwd":
        bmd = MD([case.oc], bias_dt, "any") if bias else None
        pd = fwd.primitive_desc(engine, FWD, alg, MD(sdims, dt, t["src"]),
                                MD(wdims, wei_dt, t["wei"]), bmd, MD(ddims, out_dt, t["dst"]),
                                *geom, attr, **pin)
        X, W = _mem(engine, pd.src_desc(), rng), _mem(engine, pd.weights_desc(), rng)
        Y = _mem(engine, pd.dst_desc(), rng)  # the prior content a sum post-op reads
        args = {dnnl.ARG_SRC: X, dnnl.ARG_WEIGHTS: W, dnnl.ARG_DST: Y}
        b = None
        if bias:
            args[dnnl.ARG_BIAS] = B = _mem(engine, pd.bias_desc(), rng)
            b = _values(B)
        prior = _values(Y)
        fwd(pd).execute(stream, args)
        stream.wait()
        ref = ref_fwd(_values(X), _values(W), b, *ref_geom, dtype=np.float64)
        scale = float(np.abs(ref).max())
        if post_ops:
            ref = R.apply_post_ops(ref, post_ops, prior)
        _assert_close(_values(Y), ref, scale, out_dt, pd.get_solver(), "dst")
        return pd
    hint = fwd.primitive_desc(engine, FWD, alg, MD(sdims, dt, t["src"]),
                              MD(wdims, dt, t["wei"]), None, MD(ddims, dt, t["dst"]), *geom)
    if direction == "bwd_d":
        pd = bwd_d.primitive_desc(engine, alg, MD(sdims, out_dt, t["src"]),
                                  MD(wdims, wei_dt, t["wei"]), MD(ddims, dt, t["dst"]), *geom,
                                  hint, attr, **pin)
        DX, W = _mem(engine, pd.diff_src_desc(), rng), _mem(engine, pd.weights_desc(), rng)
        DY = _mem(engine, pd.diff_dst_desc(), rng)
        bwd_d(pd).execute(stream, {dnnl.ARG_DIFF_DST: DY, dnnl.ARG_WEIGHTS: W,
                                   dnnl.ARG_DIFF_SRC: DX})
        stream.wait()
        ref = ref_bwd_d(_values(DY), _values(W), sdims, *ref_geom, dtype=np.float64)
        _assert_close(_values(DX), ref, float(np.abs(ref).max()), out_dt, pd.get_solver(),
                      "diff_src")
        return pd
    bmd = MD([case.oc], bias_dt, "any") if bias else None
    pd = bwd_w.primitive_desc(engine, alg, MD(sdims, dt, t["src"]), MD(wdims, out_dt, t["wei"]),
                              bmd, MD(ddims, dt, t["dst"]), *geom, hint, attr, **pin)
    X, DY = _mem(engine, pd.src_desc(), rng), _mem(engine, pd.diff_dst_desc(), rng)
    DW = _mem(engine, pd.diff_weights_desc(), rng)
    args = {dnnl.ARG_SRC: X, dnnl.ARG_DIFF_DST: DY, dnnl.ARG_DIFF_WEIGHTS: DW}
    if bias:
        args[dnnl.ARG_DIFF_BIAS] = DB = _mem(engine, pd.diff_bias_desc(), rng)
    bwd_w(pd).execute(stream, args)
    stream.wait()
    rw, rb = ref_bwd_w(_values(X), _values(DY), wdims, *ref_geom, with_bias=bias,
                       dtype=np.float64)
    _assert_close(_values(DW), rw, float(np.abs(rw).max()), out_dt, pd.get_solver(),
                  "diff_weights")
    if bias:
        _assert_close(_values(DB), rb, float(np.abs(rb).max()), bias_dt, pd.get_solver(),
                      "diff_bias")
    return pd


LOW = [DT.bf16, DT.f16]
LOW_IDS = ["bf16", "f16"]

# (op, direction, case, output type: None = the data's, bias type: None = the output's)
SWEEP = [
    ("conv", "fwd", C2D, None, None),
    ("conv", "fwd", C2D, DT.f32, DT.f32),
    ("conv", "fwd", C3D, None, DT.f32),
    ("conv", "fwd", STRIDED, None, None),
    ("conv", "fwd", GROUPED, DT.f32, None),
    ("conv", "bwd_d", C2D, None, None),
    ("conv", "bwd_d", STRIDED, DT.f32, None),
    ("conv", "bwd_d", GROUPED, None, None),
    ("conv", "bwd_w", C2D, None, None),
    ("conv", "bwd_w", STRIDED, DT.f32, DT.f32),
    ("conv", "bwd_w", GROUPED, DT.f32, None),
    ("deconv", "fwd", DECONV, None, None),
    ("deconv", "bwd_d", DECONV, None, None),
    ("deconv", "bwd_w", DECONV, DT.f32, None),
]


@pytest.mark.parametrize("dt", LOW, ids=LOW_IDS)
@pytest.mark.parametrize("op, direction, case, out_dt, bias_dt", SWEEP,
                         ids=[f"{o}-{d}-{c}-{'same' if t is None else t.name}-"
                              f"{'out' if b is None else b.name}" for o, d, c, t, b in SWEEP])
def test_matches_reference(first_engine, op, direction, case, out_dt, bias_dt, dt):
    stream = dnnl.stream(first_engine)
    if out_dt == DT.f32 and bias_dt is None:
        bias_dt = dt
    pd = run(first_engine, stream, op, direction, case, dt, out_dt=out_dt, bias_dt=bias_dt)
    assert pd.impl_info_str().endswith(":f32_on_converted_copies")


# f32 data with bf16/f16 weights (benchdnn's --dt=f32:bf16:f32 and f32:f16:f32): forward and
# backward data of convolutions and deconvolutions, as oneDNN's reference implementations
# admit; the output and bias are f32, so the f32 bound alone applies
MIXED = [
    ("conv", "fwd", C2D),
    ("conv", "fwd", C3D),
    ("conv", "fwd", STRIDED),
    ("conv", "fwd", GROUPED),
    ("conv", "bwd_d", STRIDED),
    ("conv", "bwd_d", GROUPED),
    ("deconv", "fwd", DECONV),
    ("deconv", "bwd_d", DECONV),
]


@pytest.mark.parametrize("wei_dt", LOW, ids=LOW_IDS)
@pytest.mark.parametrize("op, direction, case", MIXED,
                         ids=[f"{o}-{d}-{c}" for o, d, c in MIXED])
def test_f32_data_with_low_precision_weights(first_engine, op, direction, case, wei_dt):
    pd = run(first_engine, dnnl.stream(first_engine), op, direction, case, DT.f32,
             wei_dt=wei_dt)
    assert pd.weights_desc().data_type == wei_dt
    data = pd.src_desc() if direction == "fwd" else pd.diff_dst_desc()
    assert data.data_type == DT.f32
    assert pd.impl_info_str().endswith(":f32_on_converted_copies")


@pytest.mark.parametrize("wei_dt", LOW, ids=LOW_IDS)
def test_f32_data_low_precision_weights_post_ops_channels_last(engine, stream, wei_dt):
    """dst = relu(2 * (conv + bias + dst_prior) + 1), nhwc, on every device."""
    attr, ops = post_ops_attr([("sum", 1.0), (dnnl.algorithm.eltwise_linear, 2.0, 1.0),
                               (dnnl.algorithm.eltwise_relu, 0.0, 0.0)])
    run(engine, stream, "conv", "fwd", STRIDED, DT.f32, wei_dt=wei_dt, attr=attr,
        post_ops=ops, tags={"src": "nhwc", "dst": "nhwc"})


@pytest.mark.parametrize("wei_dt", LOW, ids=LOW_IDS)
def test_low_precision_weights_are_converted_exactly(engine, stream, wei_dt):
    """A 1x1 convolution of one-hot f32 src reproduces each weight: dst[0, o, 0, w] =
    W[o, w] exactly, so the f32 copy of the weights holds their values unchanged (huge,
    tiny and subnormal ones included)."""
    oc, ic = 5, 6
    rng = np.random.default_rng(11)
    span = 12 if wei_dt == DT.f16 else 40  # f16's finite range ends below 2^16
    w = rng.standard_normal((oc, ic, 1, 1)) * 2.0 ** rng.integers(-span, span, (oc, ic, 1, 1))
    w[0, 0] = 2.0 ** -20 if wei_dt == DT.f16 else 2.0 ** -130  # subnormal in each type
    pd = dnnl.convolution_forward.primitive_desc(
        engine, FWD, dnnl.algorithm.convolution_auto, MD([1, ic, 1, ic], DT.f32, "nchw"),
        MD([oc, ic, 1, 1], wei_dt, "oihw"), None, MD([1, oc, 1, ic], DT.f32, "nchw"),
        [1, 1], [0, 0], [0, 0])
    W = dnnl.memory(pd.weights_desc(), engine, w.astype(np.float32))
    X = dnnl.memory(pd.src_desc(), engine, np.eye(ic, dtype=np.float32).reshape(1, ic, 1, ic))
    Y = dnnl.memory(pd.dst_desc(), engine)
    dnnl.convolution_forward(pd).execute(stream, {dnnl.ARG_SRC: X, dnnl.ARG_WEIGHTS: W,
                                                  dnnl.ARG_DST: Y})
    stream.wait()
    stored = W.to_numpy().astype(np.float32).reshape(oc, ic)  # the bf16/f16 values, widened
    assert stored[0, 0] != 0.0
    np.testing.assert_array_equal(Y.to_numpy().reshape(oc, ic), stored)


@pytest.mark.parametrize("dt", LOW, ids=LOW_IDS)
def test_relu_sum_post_ops_read_the_rounded_prior_dst(engine, stream, dt):
    """dst = 0.5 * dst_prior + relu(conv + bias): the prior bf16/f16 dst is converted in
    before the solver and the result out after it, on every device."""
    attr, ops = post_ops_attr([(dnnl.algorithm.eltwise_relu, 0.0, 0.0), ("sum", 0.5)])
    run(engine, stream, "conv", "fwd", C2D, dt, attr=attr, post_ops=ops,
        tags={"src": "nhwc", "dst": "nhwc"})


@pytest.mark.parametrize("solver", ["direct", "im2col_gemm", "implicit_gemm", "winograd_f2x3",
                                    "fft"])
def test_every_solver_on_converted_copies(first_engine, solver):
    run(first_engine, dnnl.stream(first_engine), "conv", "fwd", C2D, DT.bf16, solver=solver)


def test_scratchpad_counts_the_copies_in_both_modes(first_engine):
    eng = first_engine
    stream = dnnl.stream(eng)
    dims = ([2, 8, 7, 7], [16, 8, 3, 3], [2, 16, 7, 7])
    geom = ([1, 1], [0, 0], [1, 1], [1, 1])

    def pd_of(dt, attr=None):
        return dnnl.convolution_forward.primitive_desc(
            eng, FWD, dnnl.algorithm.convolution_auto, *(MD(d, dt, t) for d, t in
                                                         zip(dims, ("nchw", "oihw", "nchw"))),
            *geom, attr, solver="im2col_gemm")

    f32, low = pd_of(DT.f32), pd_of(DT.bf16)
    copies = 4 * sum(int(np.prod(d)) for d in dims)
    assert low.scratchpad_desc().get_size() >= f32.scratchpad_desc().get_size() + copies
    attr = dnnl.primitive_attr()
    attr.set_scratchpad_mode(dnnl.scratchpad_mode.user)
    user = pd_of(DT.bf16, attr)
    assert user.scratchpad_desc() == low.scratchpad_desc()
    rng = np.random.default_rng(1)
    X, W = _mem(eng, low.src_desc(), rng), _mem(eng, low.weights_desc(), rng)
    outs = []
    for pd in (low, user):
        Y = dnnl.memory(pd.dst_desc(), eng)
        args = {dnnl.ARG_SRC: X, dnnl.ARG_WEIGHTS: W, dnnl.ARG_DST: Y}
        if pd is user:
            args[dnnl.ARG_SCRATCHPAD] = dnnl.memory(pd.scratchpad_desc(), eng)
        dnnl.convolution_forward(pd).execute(stream, args)
        stream.wait()
        outs.append(Y.to_numpy())
    np.testing.assert_array_equal(outs[0], outs[1])
    with pytest.raises(invalid_arguments, match="SCRATCHPAD"):  # user mode: it is required
        dnnl.convolution_forward(user).execute(stream, {dnnl.ARG_SRC: X, dnnl.ARG_WEIGHTS: W,
                                                        dnnl.ARG_DST: dnnl.memory(
                                                            user.dst_desc(), eng)})


# (direction, {descriptor: data type} over bf16 data, the descriptor the error names)
REFUSED = [
    ("fwd", {"wei": DT.f32}, "weights_desc"),  # src bf16 pairs with bf16 weights only
    ("fwd", {"dst": DT.f16}, "dst_desc"),  # bf16 data: dst bf16 or f32
    ("fwd", {"bias": DT.f16}, "bias_desc"),
    ("fwd", {"src": DT.f32}, "dst_desc"),  # f32 src with bf16 weights: dst f32
    ("fwd", {"src": DT.f32, "dst": DT.f32}, "bias_desc"),  # ... and bias f32
    ("fwd", {"src": DT.f32, "wei": DT.s8, "dst": DT.f32, "bias": DT.f32}, "weights_desc"),
    ("bwd_d", {"dst": DT.f32}, "diff_src_desc"),  # f32 diff_dst with bf16 weights: f32
    ("fwd", {"src": DT.s8, "wei": DT.u8}, "weights_desc"),  # int8 takes s8 weights only
    ("bwd_d", {"src": DT.f16}, "diff_src_desc"),  # diff_src bf16 or f32
    ("bwd_d", {"wei": DT.f32}, "weights_desc"),
    ("bwd_w", {"wei": DT.f16}, "diff_weights_desc"),  # diff_weights bf16 or f32
    ("bwd_w", {"dst": DT.f32}, "diff_dst_desc"),
    ("bwd_w", {"src": DT.f32, "dst": DT.f32}, "diff_weights_desc"),  # not where written
]


@pytest.mark.parametrize("direction, change, named", REFUSED,
                         ids=[f"{d}-{'-'.join(f'{k}_{v.name}' for k, v in c.items())}"
                              for d, c, _ in REFUSED])
def test_combinations_outside_the_table_are_unimplemented(first_engine, direction, change,
                                                          named):
    eng = first_engine
    c = C2D
    dims = {"src": (c.mb, c.ic, *c.insp), "wei": c.wdims(), "dst": c.geom(False).dst_dims(),
            "bias": (c.oc,)}
    md = {k: MD(v, change.get(k, DT.bf16), "any" if k != "bias" else "a")
          for k, v in dims.items()}
    geom = (list(c.s), list(c.d), list(c.pl), list(c.pr))
    A = dnnl.algorithm.convolution_auto
    with pytest.raises(unimplemented, match=named):
        if direction == "fwd":
            dnnl.convolution_forward.primitive_desc(eng, FWD, A, md["src"], md["wei"],
                                                    md["bias"], md["dst"], *geom)
        elif direction == "bwd_d":
            dnnl.convolution_backward_data.primitive_desc(eng, A, md["src"], md["wei"],
                                                          md["dst"], *geom)
        else:
            dnnl.convolution_backward_weights.primitive_desc(eng, A, md["src"], md["wei"],
                                                             md["bias"], md["dst"], *geom)


def test_a_wrong_memory_leaves_the_output_untouched(first_engine):
    eng = first_engine
    stream = dnnl.stream(eng)
    c = C2D
    pd = dnnl.convolution_forward.primitive_desc(
        eng, FWD, dnnl.algorithm.convolution_auto, MD((c.mb, c.ic, *c.insp), DT.bf16, "nchw"),
        MD(c.wdims(), DT.bf16, "oihw"), None, MD(c.geom(False).dst_dims(), DT.bf16, "nchw"),
        list(c.s), list(c.d), list(c.pl), list(c.pr))
    rng = np.random.default_rng(3)
    X = _mem(eng, MD(pd.src_desc().dims, DT.f32, "nchw"), rng)  # f32 where bf16 is due
    W, Y = _mem(eng, pd.weights_desc(), rng), _mem(eng, pd.dst_desc(), rng)
    before = Y.to_numpy().copy()
    with pytest.raises(invalid_arguments, match="SRC"):
        dnnl.convolution_forward(pd).execute(stream, {dnnl.ARG_SRC: X, dnnl.ARG_WEIGHTS: W,
                                                      dnnl.ARG_DST: Y})
    stream.wait()
    np.testing.assert_array_equal(Y.to_numpy(), before)
