"""FFT convolution kernels under the Oclgrind simulator: no out-of-bounds access, no use of
uninitialized values, no data race, no API misuse, and right results.

A tiny grouped, dilated, asymmetrically padded problem runs every pass kind through the
primitives: the forward line passes from a tensor (channels-last and channels-first) and
between temporaries, the batched GEMM on split complex operands, the inverse passes from its
quadrants with the bias and post-ops fused (forward, backward data), backward weights with
the products accumulated over several image chunks and the bias gradient, and a 1-D problem
(one pass each way). Oclgrind reports only on stderr: the kernels run in a subprocess whose
stderr is read, with the kernel caches off and ``-cl-opt-disable`` (see
test_conv_kernels_oclgrind.py for why).
"""
from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from oclgrind_helpers import CONV_PROBE_PRELUDE, has_oclgrind, run_probe  # noqa: E402

PROBE = "SEED = 8\n" + CONV_PROBE_PRELUDE + r"""

S = [1, 1]
x = rng.standard_normal((2, 4, 5, 4)).astype(np.float32)
w = rng.standard_normal((2, 3, 2, 3, 2)).astype(np.float32)    # 2 groups, 3x2 kernel
b = rng.standard_normal(6).astype(np.float32)
D, PL, PR = [0, 1], [1, 2], [1, 0]
yd = R.validate_conv(x.shape, w.shape, S, D, PL, PR).dst_dims()

def fwd(tag):
    prior = rng.standard_normal(yd).astype(np.float32)
    po = dnnl.post_ops(); po.append_sum(0.5); po.append_eltwise(dnnl.algorithm.eltwise_relu, 0.1, 0)
    attr = dnnl.primitive_attr(); attr.set_post_ops(po)
    pd = convolution_forward.primitive_desc(eng, dnnl.prop_kind.forward_training,
        dnnl.algorithm.convolution_auto, MD(x.shape, F32, tag), MD(w.shape, F32, "any"),
        MD([6], F32, "x"), MD(yd, F32, tag), S, D, PL, PR, attr, solver="fft")
    Y = mem(pd.dst_desc(), prior)
    convolution_forward(pd).execute(s, {dnnl.ARG_SRC: mem(pd.src_desc(), x),
        dnnl.ARG_WEIGHTS: mem(pd.weights_desc(), w), dnnl.ARG_BIAS: mem(pd.bias_desc(), b),
        dnnl.ARG_DST: Y})
    s.wait()
    ref = R.apply_post_ops(R.conv_forward(x, w, b, S, D, PL, PR), po, prior)
    return close(Y.to_numpy(), ref, 2e-5)

def bwd_d():
    dd = rng.standard_normal(yd).astype(np.float32)
    pd = convolution_backward_data.primitive_desc(eng, dnnl.algorithm.convolution_auto,
        MD(x.shape, F32, "nhwc"), MD(w.shape, F32, "any"), MD(yd, F32, "nhwc"),
        S, D, PL, PR, None, solver="fft")
    DX = mem(pd.diff_src_desc(), x)
    convolution_backward_data(pd).execute(s, {dnnl.ARG_DIFF_DST: mem(pd.diff_dst_desc(), dd),
        dnnl.ARG_WEIGHTS: mem(pd.weights_desc(), w), dnnl.ARG_DIFF_SRC: DX})
    s.wait()
    return close(DX.to_numpy(), R.conv_backward_data(dd, w, x.shape, S, D, PL, PR), 2e-5)

def bwd_w():
    dy = rng.standard_normal(yd).astype(np.float32)
    pd = convolution_backward_weights.primitive_desc(eng, dnnl.algorithm.convolution_auto,
        MD(x.shape, F32, "nhwc"), MD(w.shape, F32, "goihw"), MD([6], F32, "x"),
        MD(yd, F32, "nchw"), S, D, PL, PR, None, solver="fft",
        solver_params={"chunk_mb": 0.001})                    # one image per chunk
    DW, DB = mem(pd.diff_weights_desc(), w), mem(pd.diff_bias_desc(), b)
    convolution_backward_weights(pd).execute(s, {dnnl.ARG_SRC: mem(pd.src_desc(), x),
        dnnl.ARG_DIFF_DST: mem(pd.diff_dst_desc(), dy), dnnl.ARG_DIFF_WEIGHTS: DW,
        dnnl.ARG_DIFF_BIAS: DB})
    s.wait()
    rw, rb = R.conv_backward_weights(x, dy, w.shape, S, D, PL, PR)
    return close(DW.to_numpy(), rw, 2e-5) and close(DB.to_numpy(), rb)

def one_d():
    x1 = rng.standard_normal((2, 3, 9)).astype(np.float32)
    w1 = rng.standard_normal((2, 3, 4)).astype(np.float32)
    y1 = R.validate_conv(x1.shape, w1.shape, [1], [1], [2], [0]).dst_dims()
    pd = convolution_forward.primitive_desc(eng, dnnl.prop_kind.forward_inference,
        dnnl.algorithm.convolution_direct, MD(x1.shape, F32, "any"), MD(w1.shape, F32, "any"),
        None, MD(y1, F32, "any"), [1], [1], [2], [0], solver="fft")
    Y = mem(pd.dst_desc())
    convolution_forward(pd).execute(s, {dnnl.ARG_SRC: mem(pd.src_desc(), x1),
        dnnl.ARG_WEIGHTS: mem(pd.weights_desc(), w1), dnnl.ARG_DST: Y})
    s.wait()
    return close(Y.to_numpy(), R.conv_forward(x1, w1, None, [1], [1], [2], [0]), 2e-5)

results["fwd_nhwc_post_ops"] = fwd("nhwc")
results["fwd_nchw"] = fwd("nchw")
results["bwd_d"] = bwd_d()
results["bwd_w_chunks_bias"] = bwd_w()
results["fwd_1d"] = one_d()
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="the Oclgrind simulator is not installed")
def test_fft_kernels_clean_under_oclgrind():
    results = run_probe(PROBE, OCLGRIND_BUILD_OPTIONS="-cl-opt-disable")
    assert results == {k: True for k in results} and len(results) == 5, results
