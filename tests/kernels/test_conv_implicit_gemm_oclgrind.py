"""Implicit-GEMM convolution kernels under the Oclgrind simulator: no out-of-bounds access, no
use of uninitialized values, no data race, no API misuse, and right results.

Each kernel runs on a tiny problem through the primitives: the weight packing and the data
kernel (forward with the zero-padding copy, bias and post-ops; backward data strided, so one
launch per phase, one phase reached by no tap), backward weights split (partials plus the
reduction) and unsplit (written through the weights' layout), both with the bias gradient, and
the vector tiles CPUs use. The simulator is a GPU device, so the GPU defaults run (several
work-items per work-group, scalar tiles) unless parameters say otherwise. Oclgrind reports
only on stderr: the kernels run in a subprocess whose stderr is read, with the kernel caches
off and ``-cl-opt-disable`` (see test_conv_kernels_oclgrind.py for why).
"""
from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from oclgrind_helpers import CONV_PROBE_PRELUDE, has_oclgrind, run_probe  # noqa: E402

PROBE = "SEED = 6\n" + CONV_PROBE_PRELUDE + r"""

x = rng.standard_normal((2, 4, 5, 4)).astype(np.float32)
w = rng.standard_normal((2, 3, 2, 3, 2)).astype(np.float32)    # 2 groups, 3x2 kernel
b = rng.standard_normal(6).astype(np.float32)
D, PL, PR = [0, 1], [1, 1], [1, 0]

def geo(S):
    return R.validate_conv(x.shape, w.shape, S, D, PL, PR).dst_dims()

def fwd(S, params=None, tag="nhwc"):
    yd = geo(S)
    prior = rng.standard_normal(yd).astype(np.float32)
    po = dnnl.post_ops(); po.append_sum(0.5); po.append_eltwise(dnnl.algorithm.eltwise_relu, 0.1, 0)
    attr = dnnl.primitive_attr(); attr.set_post_ops(po)
    extra = {"solver_params": params} if params else {}
    pd = convolution_forward.primitive_desc(eng, dnnl.prop_kind.forward_training,
        dnnl.algorithm.convolution_auto, MD(x.shape, F32, tag), MD(w.shape, F32, "any"),
        MD([6], F32, "x"), MD(yd, F32, tag), S, D, PL, PR, attr, solver="implicit_gemm", **extra)
    Y = mem(pd.dst_desc(), prior)
    convolution_forward(pd).execute(s, {dnnl.ARG_SRC: mem(pd.src_desc(), x),
        dnnl.ARG_WEIGHTS: mem(pd.weights_desc(), w), dnnl.ARG_BIAS: mem(pd.bias_desc(), b),
        dnnl.ARG_DST: Y})
    s.wait()
    ref = R.apply_post_ops(R.conv_forward(x, w, b, S, D, PL, PR), po, prior)
    return close(Y.to_numpy(), ref)

def bwd_d(S, params=None):
    dd = rng.standard_normal(geo(S)).astype(np.float32)
    extra = {"solver_params": params} if params else {}
    pd = convolution_backward_data.primitive_desc(eng, dnnl.algorithm.convolution_auto,
        MD(x.shape, F32, "nhwc"), MD(w.shape, F32, "any"), MD(geo(S), F32, "nhwc"),
        S, D, PL, PR, None, solver="implicit_gemm", **extra)
    DX = mem(pd.diff_src_desc(), x)
    convolution_backward_data(pd).execute(s, {dnnl.ARG_DIFF_DST: mem(pd.diff_dst_desc(), dd),
        dnnl.ARG_WEIGHTS: mem(pd.weights_desc(), w), dnnl.ARG_DIFF_SRC: DX})
    s.wait()
    return close(DX.to_numpy(), R.conv_backward_data(dd, w, x.shape, S, D, PL, PR))

def bwd_w(S, params=None, wtag="any"):
    dy = rng.standard_normal(geo(S)).astype(np.float32)
    extra = {"solver_params": params} if params else {}
    pd = convolution_backward_weights.primitive_desc(eng, dnnl.algorithm.convolution_auto,
        MD(x.shape, F32, "nhwc"), MD(w.shape, F32, wtag), MD([6], F32, "x"),
        MD(geo(S), F32, "nchw"), S, D, PL, PR, None, solver="implicit_gemm", **extra)
    DW, DB = mem(pd.diff_weights_desc(), w), mem(pd.diff_bias_desc(), b)
    convolution_backward_weights(pd).execute(s, {dnnl.ARG_SRC: mem(pd.src_desc(), x),
        dnnl.ARG_DIFF_DST: mem(pd.diff_dst_desc(), dy), dnnl.ARG_DIFF_WEIGHTS: DW,
        dnnl.ARG_DIFF_BIAS: DB})
    s.wait()
    rw, rb = R.conv_backward_weights(x, dy, w.shape, S, D, PL, PR)
    return close(DW.to_numpy(), rw) and close(DB.to_numpy(), rb)

CPU_TILE = {"rows": 3, "cols": 4, "vec": 4, "wg": (1, 1)}
results["fwd_padded_post_ops"] = fwd([1, 1])
results["fwd_nchw_cpu_tile"] = fwd([2, 1], CPU_TILE, tag="nchw")
results["bwd_d_phases"] = bwd_d([2, 2])
results["bwd_d_cpu_tile"] = bwd_d([1, 1], CPU_TILE)
results["bwd_w_split"] = bwd_w([1, 1], {"splits": 2})
results["bwd_w_unsplit_goihw"] = bwd_w([2, 1], {**CPU_TILE, "splits": 1}, wtag="goihw")
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="the Oclgrind simulator is not installed")
def test_implicit_gemm_kernels_clean_under_oclgrind():
    results = run_probe(PROBE, OCLGRIND_BUILD_OPTIONS="-cl-opt-disable")
    assert results == {k: True for k in results} and len(results) == 6, results
