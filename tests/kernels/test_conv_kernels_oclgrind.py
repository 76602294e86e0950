"""Convolution kernels under the Oclgrind simulator: no out-of-bounds access, no use of
uninitialized values, no data race, no API misuse, and right results.

Each kernel family runs once on a tiny problem, through the primitives: direct forward (with
the zero-padding copy, bias and post-ops), backward data (padded and strided), backward
weights and the bias reduction; im2col + GEMM forward (channels-first, and blocked layouts
staged through the scratchpad with an accumulator epilogue), backward data (col2im) and
backward weights over two chunks of images; deconvolution forward (col2im with bias); Winograd
F(2x2,3x3) filter, input and output transforms. Oclgrind reports problems only on stderr, so
the kernels run in a subprocess whose stderr is read here; kernel caches are off so that every
kernel is generated and built under Oclgrind.

The kernels are built with ``-cl-opt-disable`` (``OCLGRIND_BUILD_OPTIONS``): Oclgrind 21.10's
uninitialized-value plugin aborts on LLVM's ``freeze`` instruction ("Unsupported instruction:
freeze"), which the optimizer emits when it pairs the divisions and remainders of flattened
index arithmetic, and then loses track of every later write. Unoptimized code keeps the
source's accesses one to one, which is what the checks are about.
"""
from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from oclgrind_helpers import CONV_PROBE_PRELUDE, has_oclgrind, run_probe  # noqa: E402

PROBE = "SEED = 5\n" + CONV_PROBE_PRELUDE + r"""

x = rng.standard_normal((2, 4, 5, 4)).astype(np.float32)
w = rng.standard_normal((2, 2, 2, 3, 3)).astype(np.float32)    # 2 groups
b = rng.standard_normal(4).astype(np.float32)
S, D, PL, PR = [1, 1], [0, 0], [1, 1], [1, 0]
yd = (2, 4, 5, 3)
dy = rng.standard_normal(yd).astype(np.float32)
prior = rng.standard_normal(yd).astype(np.float32)
po = dnnl.post_ops(); po.append_sum(0.5); po.append_eltwise(dnnl.algorithm.eltwise_relu, 0.1, 0)
attr = dnnl.primitive_attr(); attr.set_post_ops(po)
ref_f = R.apply_post_ops(R.conv_forward(x, w, b, S, D, PL, PR), po, prior)

def fwd(tag, wtag, solver, alg=dnnl.algorithm.convolution_auto, w=w, ref=ref_f):
    extra = {"solver": solver} if solver else {}
    pd = convolution_forward.primitive_desc(eng, dnnl.prop_kind.forward_training, alg,
        MD(x.shape, F32, tag), MD(w.shape, F32, wtag), MD([4], F32, "x"), MD(yd, F32, tag),
        S, D, PL, PR, attr, **extra)
    Y = mem(pd.dst_desc(), prior)
    convolution_forward(pd).execute(s, {dnnl.ARG_SRC: mem(pd.src_desc(), x),
        dnnl.ARG_WEIGHTS: mem(pd.weights_desc(), w), dnnl.ARG_BIAS: mem(pd.bias_desc(), b),
        dnnl.ARG_DST: Y})
    s.wait()
    return close(Y.to_numpy(), ref, 3e-5 if solver is None else 1e-5)

results["direct_fwd"] = fwd("nchw", "goihw", "direct")
results["im2col_fwd_chw"] = fwd("nchw", "goihw", "im2col_gemm")
results["im2col_fwd_blocked"] = fwd("nChw8c", "gOIhw8i8o", "im2col_gemm")
# ungrouped: 16 GEMMs (GEMMs are slow to simulate)
w1 = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
results["winograd_fwd"] = fwd("nhwc", "oihw", None, dnnl.algorithm.convolution_winograd, w1,
                              R.apply_post_ops(R.conv_forward(x, w1, b, S, D, PL, PR), po, prior))

def bwd_d(solver, strides, params=None):
    pl = [1, 1]
    geo = R.validate_conv(x.shape, w.shape, strides, D, pl, pl)
    dd = rng.standard_normal(geo.dst_dims()).astype(np.float32)
    extra = {"solver": solver, **({"solver_params": params} if params else {})}
    pd = convolution_backward_data.primitive_desc(eng, dnnl.algorithm.convolution_auto,
        MD(x.shape, F32, "nchw"), MD(w.shape, F32, "goihw"), MD(geo.dst_dims(), F32, "nchw"),
        strides, D, pl, pl, None, **extra)
    DX = mem(pd.diff_src_desc(), x)
    convolution_backward_data(pd).execute(s, {dnnl.ARG_DIFF_DST: mem(pd.diff_dst_desc(), dd),
        dnnl.ARG_WEIGHTS: mem(pd.weights_desc(), w), dnnl.ARG_DIFF_SRC: DX})
    s.wait()
    return close(DX.to_numpy(), R.conv_backward_data(dd, w, x.shape, strides, D, pl, pl))

results["direct_bwd_d_padded"] = bwd_d("direct", [1, 1])
results["direct_bwd_d_strided"] = bwd_d("direct", [2, 1])
results["im2col_bwd_d_chunks"] = bwd_d("im2col_gemm", [2, 1], {"chunk_mb": 0.0005})
# grouped 3x3: the flipped filter transform with exchanged channel roles
results["winograd_bwd_d"] = bwd_d("winograd_f2x3", [1, 1])

def bwd_w(solver, params=None):
    extra = {"solver": solver, **({"solver_params": params} if params else {})}
    pd = convolution_backward_weights.primitive_desc(eng, dnnl.algorithm.convolution_auto,
        MD(x.shape, F32, "nhwc"), MD(w.shape, F32, "any"), MD([4], F32, "x"), MD(yd, F32, "nhwc"),
        S, D, PL, PR, None, **extra)
    DW, DB = mem(pd.diff_weights_desc(), w), mem(pd.diff_bias_desc(), b)
    convolution_backward_weights(pd).execute(s, {dnnl.ARG_SRC: mem(pd.src_desc(), x),
        dnnl.ARG_DIFF_DST: mem(pd.diff_dst_desc(), dy), dnnl.ARG_DIFF_WEIGHTS: DW,
        dnnl.ARG_DIFF_BIAS: DB})
    s.wait()
    rw, rb = R.conv_backward_weights(x, dy, w.shape, S, D, PL, PR)
    return close(DW.to_numpy(), rw) and close(DB.to_numpy(), rb)

results["direct_bwd_w"] = bwd_w("direct")
results["im2col_bwd_w_chunks"] = bwd_w("im2col_gemm", {"chunk_mb": 0.0005})
# F(3x3, 2x2): partial diff_dst tiles (OW = 3), products accumulated over two image chunks
results["winograd_bwd_w_chunks"] = bwd_w("winograd_f2x3", {"chunk_mb": 0.0005})

# deconvolution forward: GEMM + col2im with bias
xd = rng.standard_normal((1, 4, 3, 3)).astype(np.float32)
wd = rng.standard_normal((2, 3, 2, 2, 2)).astype(np.float32)
bd = rng.standard_normal(6).astype(np.float32)
pd = deconvolution_forward.primitive_desc(eng, dnnl.prop_kind.forward_inference,
    dnnl.algorithm.deconvolution_direct, MD(xd.shape, F32, "nchw"), MD(wd.shape, F32, "goihw"),
    MD([6], F32, "x"), MD((1, 6, 5, 6), F32, "nchw"), [2, 2], [0, 0], [0, 0], [1, 0],
    solver="im2col_gemm")
Y = mem(pd.dst_desc())
deconvolution_forward(pd).execute(s, {dnnl.ARG_SRC: mem(pd.src_desc(), xd),
    dnnl.ARG_WEIGHTS: mem(pd.weights_desc(), wd), dnnl.ARG_BIAS: mem(pd.bias_desc(), bd),
    dnnl.ARG_DST: Y})
s.wait()
results["im2col_deconv_fwd"] = close(Y.to_numpy(), R.deconv_forward(xd, wd, bd, [2, 2], [0, 0],
                                                                     [0, 0], [1, 0]))
print(json.dumps(results))
"""

@pytest.mark.skipif(not has_oclgrind(), reason="the Oclgrind simulator is not installed")
def test_conv_kernels_clean_under_oclgrind():
    results = run_probe(PROBE, OCLGRIND_BUILD_OPTIONS="-cl-opt-disable")
    assert results == {k: True for k in results} and len(results) == 12, results


# Winograd transforms with sizes at run time (plain layouts; the probe above runs them too,
# in nchw and in image chunks for backward weights): one program over two image sizes and
# minibatches (odd and even outputs, two image chunks), backward data, and work-groups of 8
# over 12 and 13 channels (the last group along channels partial: peeled); backward data's
# flipped filter through a local tile
WINO_RT_PROBE = "SEED = 11\n" + CONV_PROBE_PRELUDE + r"""
WINO = dnnl.algorithm.convolution_winograd
po = dnnl.post_ops(); po.append_sum(0.5); po.append_eltwise(dnnl.algorithm.eltwise_relu, 0.1, 0)
attr = dnnl.primitive_attr(); attr.set_post_ops(po)
P = [1, 1]

def run(direction, xs, ic, oc, tag, params=None):
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((oc, ic, 3, 3)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    ys = (xs[0], oc, xs[2], xs[3])
    dy = rng.standard_normal(ys).astype(np.float32)
    extra = {"solver_params": params} if params else {}
    xm, wm, bm, ym = (MD(xs, F32, tag), MD(w.shape, F32, "any"), MD([oc], F32, "x"),
                      MD(ys, F32, tag))
    if direction == "fwd":
        pd = convolution_forward.primitive_desc(eng, dnnl.prop_kind.forward_training, WINO,
            xm, wm, bm, ym, [1, 1], [0, 0], P, P, attr, **extra)
        Y = mem(pd.dst_desc(), dy)
        convolution_forward(pd).execute(s, {dnnl.ARG_SRC: mem(pd.src_desc(), x),
            dnnl.ARG_WEIGHTS: mem(pd.weights_desc(), w), dnnl.ARG_BIAS: mem(pd.bias_desc(), b),
            dnnl.ARG_DST: Y})
        s.wait()
        return close(Y.to_numpy(), R.apply_post_ops(R.conv_forward(x, w, b, [1, 1], [0, 0],
                                                                    P, P), po, dy), 3e-5)
    if direction == "bwd_d":
        pd = convolution_backward_data.primitive_desc(eng, WINO, xm, wm, ym, [1, 1], [0, 0],
                                                      P, P, None, **extra)
        DX = mem(pd.diff_src_desc())
        convolution_backward_data(pd).execute(s, {dnnl.ARG_DIFF_DST: mem(pd.diff_dst_desc(), dy),
            dnnl.ARG_WEIGHTS: mem(pd.weights_desc(), w), dnnl.ARG_DIFF_SRC: DX})
        s.wait()
        return close(DX.to_numpy(), R.conv_backward_data(dy, w, xs, [1, 1], [0, 0], P, P), 3e-5)
    pd = convolution_backward_weights.primitive_desc(eng, WINO, xm, wm, bm, ym, [1, 1], [0, 0],
                                                     P, P, None, **extra)
    DW, DB = mem(pd.diff_weights_desc()), mem(pd.diff_bias_desc())
    convolution_backward_weights(pd).execute(s, {dnnl.ARG_SRC: mem(pd.src_desc(), x),
        dnnl.ARG_DIFF_DST: mem(pd.diff_dst_desc(), dy), dnnl.ARG_DIFF_WEIGHTS: DW,
        dnnl.ARG_DIFF_BIAS: DB})
    s.wait()
    rw, rb = R.conv_backward_weights(x, dy, w.shape, [1, 1], [0, 0], P, P)
    return close(DW.to_numpy(), rw, 3e-5) and close(DB.to_numpy(), rb, 3e-5)

chunks = {"chunk_mb": 0.0005}
results["rt_fwd_5x3"] = run("fwd", (1, 4, 5, 3), 4, 4, "nhwc")
results["rt_fwd_4x6_chunks"] = run("fwd", (2, 4, 4, 6), 4, 4, "nhwc", chunks)
results["rt_bwd_d_4x5"] = run("bwd_d", (1, 3, 4, 5), 3, 4, "nhwc")
# 16 x 16 channels: the flipped filter through the local tile
results["rt_bwd_d_tile"] = run("bwd_d", (1, 16, 2, 2), 16, 16, "nhwc")
results["rt_fwd_partial_wg"] = run("fwd", (1, 12, 3, 3), 12, 13, "nhwc", {"wg": 8})
results["rt_bwd_w_partial_wg"] = run("bwd_w", (1, 12, 3, 2), 12, 13, "nhwc", {"wg": 8})
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="the Oclgrind simulator is not installed")
def test_winograd_runtime_size_transforms_clean_under_oclgrind():
    results = run_probe(WINO_RT_PROBE, OCLGRIND_BUILD_OPTIONS="-cl-opt-disable")
    assert results == {k: True for k in results} and len(results) == 6, results
