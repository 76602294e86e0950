"""Fused post-ops under the Oclgrind simulator: the GEMM epilogue (bias, sum, eltwise,
broadcast binary operands, scales) of matmul and inner product, and binary operands read by
a convolution's store, with no invalid access, race or uninitialized read, and right results;
operands of bf16, f16 and s8 data types converted where they are loaded (a loopy kernel and a
kernel written as OpenCL C text)."""
from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from oclgrind_helpers import has_oclgrind, run_probe  # noqa: E402

PROBE = r"""
import json
import numpy as np
import pydnnl as dnnl
from pydnnl.reference import conv as R
from pydnnl.reference.post_ops import apply_post_ops

MD, F32, A = dnnl.memory.desc, dnnl.memory.data_type.f32, dnnl.algorithm
eng = dnnl.engine.from_name("Oclgrind")
assert eng.is_simulator
s = dnnl.stream(eng)
rng = np.random.default_rng(1)
results = {}

def chain(dst_dims, binaries):
    po = dnnl.post_ops()
    po.append_sum(0.5)
    po.append_eltwise(A.eltwise_gelu_tanh, 0.0, 0.0)
    ops = {}
    for alg, dims in binaries:
        ops[po.len()] = rng.standard_normal(dims).astype(np.float32)
        po.append_binary(alg, MD(list(dims), F32, "abcd"[:len(dims)]))
    attr = dnnl.primitive_attr()
    attr.set_post_ops(po)
    return attr, po, ops

def operands(pd, ops):
    out = {}
    for i, v in ops.items():
        arg = dnnl.ARG_ATTR_MULTIPLE_POST_OP(i) | dnnl.ARG_SRC_1
        out[arg] = dnnl.memory(pd.query_md(dnnl.query.exec_arg_md, arg), eng, v)
    return out

def close(got, ref):
    return bool(np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max())

# batched matmul with a broadcast bias and binary operands
x = rng.standard_normal((2, 3, 5)).astype(np.float32)
w = rng.standard_normal((2, 5, 4)).astype(np.float32)
b = rng.standard_normal((1, 1, 4)).astype(np.float32)
prior = rng.standard_normal((2, 3, 4)).astype(np.float32)
attr, po, ops = chain((2, 3, 4), [(A.binary_add, (2, 1, 4)), (A.binary_ge, (1, 3, 1))])
pd = dnnl.matmul.primitive_desc(eng, MD([2, 3, 5], F32, "abc"), MD([2, 5, 4], F32, "abc"),
                                MD([1, 1, 4], F32, "abc"), MD([2, 3, 4], F32, "abc"), attr)
D = dnnl.memory(pd.dst_desc(), eng, prior)
args = {dnnl.ARG_SRC: dnnl.memory(pd.src_desc(), eng, x),
        dnnl.ARG_WEIGHTS: dnnl.memory(pd.weights_desc(), eng, w),
        dnnl.ARG_BIAS: dnnl.memory(MD([1, 1, 4], F32, "abc"), eng, b), dnnl.ARG_DST: D}
args.update(operands(pd, ops))
dnnl.matmul(pd).execute(s, args)
s.wait()
ref = apply_post_ops(np.matmul(x.astype(np.float64), w) + b, po, prior, ops)
results["matmul"] = close(D.to_numpy(), ref)

# convolution (direct solver) with per-channel and full binary operands
x = rng.standard_normal((1, 3, 5, 5)).astype(np.float32)
w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
prior = rng.standard_normal((1, 4, 5, 5)).astype(np.float32)
attr, po, ops = chain((1, 4, 5, 5), [(A.binary_mul, (1, 4, 1, 1)), (A.binary_max, (1, 4, 5, 5))])
pd = dnnl.convolution_forward.primitive_desc(
    eng, dnnl.prop_kind.forward_inference, A.convolution_direct, MD([1, 3, 5, 5], F32, "abcd"),
    MD([4, 3, 3, 3], F32, "abcd"), MD([1, 4, 5, 5], F32, "abcd"), [1, 1], [1, 1], [1, 1],
    attr=attr, solver="direct")
D = dnnl.memory(pd.dst_desc(), eng, prior)
args = {dnnl.ARG_SRC: dnnl.memory(pd.src_desc(), eng, x),
        dnnl.ARG_WEIGHTS: dnnl.memory(pd.weights_desc(), eng, w), dnnl.ARG_DST: D}
args.update(operands(pd, ops))
dnnl.convolution_forward(pd).execute(s, args)
s.wait()
ref = R.conv_forward(x, w, None, (1, 1), (0, 0), (1, 1), (1, 1), dtype=np.float64)
results["conv"] = close(D.to_numpy(), apply_post_ops(ref, po, prior, ops))

# the same convolution with a per-channel prelu (its weights read as a binary operand)
po = dnnl.post_ops()
po.append_prelu(2)
attr = dnnl.primitive_attr()
attr.set_post_ops(po)
pd = dnnl.convolution_forward.primitive_desc(
    eng, dnnl.prop_kind.forward_inference, A.convolution_direct, MD([1, 3, 5, 5], F32, "abcd"),
    MD([4, 3, 3, 3], F32, "abcd"), MD([1, 4, 5, 5], F32, "abcd"), [1, 1], [1, 1], [1, 1],
    attr=attr, solver="direct")
pw = rng.standard_normal((1, 4, 1, 1)).astype(np.float32)
D = dnnl.memory(pd.dst_desc(), eng)
args = {dnnl.ARG_SRC: dnnl.memory(pd.src_desc(), eng, x),
        dnnl.ARG_WEIGHTS: dnnl.memory(pd.weights_desc(), eng, w), dnnl.ARG_DST: D,
        dnnl.ARG_ATTR_MULTIPLE_POST_OP(0) | dnnl.ARG_WEIGHTS:
            dnnl.memory(MD([1, 4, 1, 1], F32, "abcd"), eng, pw)}
dnnl.convolution_forward(pd).execute(s, args)
s.wait()
results["conv_prelu"] = close(D.to_numpy(), np.where(ref > 0, ref, ref * pw))
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="the Oclgrind OpenCL platform is not installed")
def test_fused_post_ops_under_oclgrind():
    # unoptimized builds: Oclgrind's uninitialized-value plugin aborts on the ``freeze``
    # instructions LLVM's optimizer emits for the convolution's index arithmetic
    results = run_probe(PROBE, OCLGRIND_BUILD_OPTIONS="-cl-opt-disable")
    assert results == {"matmul": True, "conv": True, "conv_prelu": True}, results


PROBE_ELTWISE_SOFTMAX_POOL = r"""
import json
import numpy as np
import pydnnl as dnnl
from pydnnl.reference.eltwise import eltwise_forward as ref_eltwise
from pydnnl.reference.pooling import pooling_forward as ref_pool
from pydnnl.reference.post_ops import apply_post_ops
from pydnnl.reference.softmax import softmax_forward as ref_softmax

MD, F32, A = dnnl.memory.desc, dnnl.memory.data_type.f32, dnnl.algorithm
INF = dnnl.prop_kind.forward_inference
eng = dnnl.engine.from_name("Oclgrind")
assert eng.is_simulator
s = dnnl.stream(eng)
rng = np.random.default_rng(2)
results = {}

def chain(entries):
    po, ops = dnnl.post_ops(), {}
    for e in entries:
        if e[0] == "binary":
            ops[po.len()] = rng.standard_normal(e[2]).astype(np.float32)
            po.append_binary(e[1], MD(list(e[2]), F32, e[3]))
        else:
            po.append_eltwise(*e)
    attr = dnnl.primitive_attr()
    attr.set_post_ops(po)
    return attr, po, ops

def run(prim, pd, x, ops):
    args = {dnnl.ARG_SRC: dnnl.memory(pd.src_desc(), eng, x)}
    for i, v in ops.items():
        arg = dnnl.ARG_ATTR_MULTIPLE_POST_OP(i) | dnnl.ARG_SRC_1
        args[arg] = dnnl.memory(pd.query_md(dnnl.query.exec_arg_md, arg), eng, v)
    args[dnnl.ARG_DST] = dst = dnnl.memory(pd.dst_desc(), eng)
    if not pd.workspace_desc().is_zero():
        args[dnnl.ARG_WORKSPACE] = dnnl.memory(pd.workspace_desc(), eng)
    prim(pd).execute(s, args)
    s.wait()
    return dst.to_numpy()

def close(got, ref):
    return bool(np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max())

# eltwise: the flat kernel reading a per-channel operand at the element's position, and the
# strided kernel over a blocked layout
for name, tag, c in (("eltwise_flat", "abcd", 3), ("eltwise_strided", "aBcd16b", 16)):
    x = rng.standard_normal((2, c, 3, 3)).astype(np.float32)
    attr, po, ops = chain([("binary", A.binary_add, (1, c, 1, 1), "abcd"),
                           ("binary", A.binary_max, (2, 1, 3, 3), "abcd")])
    md = MD([2, c, 3, 3], F32, tag)
    pd = dnnl.eltwise_forward.primitive_desc(eng, INF, A.eltwise_relu, md, md, 0.1, 0.0, attr)
    ref = apply_post_ops(ref_eltwise(A.eltwise_relu, x.astype(np.float64), 0.1, 0.0), po,
                         None, ops)
    results[name] = close(run(dnnl.eltwise_forward, pd, x, ops), ref)

# softmax: a row kernel (axis innermost) and the strided kernel (axis 1 of nchw)
for name, dims, tag, axis in (("softmax_row", (3, 40), "ab", 1),
                              ("softmax_strided", (2, 5, 2, 3), "abcd", 1)):
    x = rng.standard_normal(dims).astype(np.float32)
    per = tuple(v if d == axis else 1 for d, v in enumerate(dims))
    attr, po, ops = chain([("binary", A.binary_mul, per, tag), (A.eltwise_linear, 2.0, 0.5),
                           ("binary", A.binary_add, dims, tag)])
    md = MD(list(dims), F32, tag)
    pd = dnnl.softmax_forward.primitive_desc(eng, INF, A.softmax_accurate, md, md, axis, attr)
    ref = apply_post_ops(ref_softmax(A.softmax_accurate, x, axis), po, None, ops)
    results[name] = close(run(dnnl.softmax_forward, pd, x, ops), ref)

# pooling: max 3x3/2 with padding, per-channel and full operands
x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
attr, po, ops = chain([("binary", A.binary_sub, (1, 3, 1, 1), "abcd"),
                       (A.eltwise_tanh, 0.0, 0.0), ("binary", A.binary_mul, (2, 3, 3, 3), "acdb")])
pd = dnnl.pooling_forward.primitive_desc(
    eng, dnnl.prop_kind.forward_training, A.pooling_max, MD([2, 3, 6, 6], F32, "abcd"),
    MD([2, 3, 3, 3], F32, "abcd"), [2, 2], [3, 3], [0, 0], [1, 1], [1, 1], attr)
ref = apply_post_ops(ref_pool(x, "max", [3, 3], [2, 2], [0, 0], [1, 1], [1, 1])[0], po, None,
                     ops)
results["pooling"] = close(run(dnnl.pooling_forward, pd, x, ops), ref)
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="the Oclgrind OpenCL platform is not installed")
def test_eltwise_softmax_pooling_post_ops_under_oclgrind():
    # unoptimized builds, as above: the uninitialized-value plugin aborts on ``freeze``
    # instructions in the pooling kernel's index arithmetic
    results = run_probe(PROBE_ELTWISE_SOFTMAX_POOL, OCLGRIND_BUILD_OPTIONS="-cl-opt-disable")
    assert results == {k: True for k in ("eltwise_flat", "eltwise_strided", "softmax_row",
                                         "softmax_strided", "pooling")}, results


PROBE_SCALES = r"""
import json
import numpy as np
import pydnnl as dnnl
from pydnnl.reference.post_ops import apply_post_ops

MD, F32, A = dnnl.memory.desc, dnnl.memory.data_type.f32, dnnl.algorithm
SRC, WEI, DST, BIAS = dnnl.ARG_SRC, dnnl.ARG_WEIGHTS, dnnl.ARG_DST, dnnl.ARG_BIAS
eng = dnnl.engine.from_name("Oclgrind")
assert eng.is_simulator
s = dnnl.stream(eng)
rng = np.random.default_rng(3)
results = {}

def attr(wei_mask):
    po = dnnl.post_ops()
    po.append_sum(0.5)
    po.append_eltwise(A.eltwise_relu, 0.0, 0.0)
    a = dnnl.primitive_attr()
    for arg, mask in ((SRC, 0), (WEI, wei_mask), (DST, 0)):
        a.set_scales_mask(arg, mask)
    a.set_post_ops(po)
    return a, po

def run(prim, pd, ins, prior, nwei):
    sv = {SRC: np.float32([0.5]), WEI: rng.uniform(0.5, 2, nwei).astype(np.float32),
          DST: np.float32([2.0])}
    args = {a: dnnl.memory(pd.query_md(dnnl.query.exec_arg_md, a), eng, v) for a, v in ins.items()}
    args[DST] = dst = dnnl.memory(pd.dst_desc(), eng, prior)
    for a, v in sv.items():
        args[dnnl.ARG_ATTR_SCALES | a] = dnnl.memory(MD([v.size], F32, "a"), eng, v)
    prim(pd).execute(s, args)
    s.wait()
    return dst.to_numpy(), sv

def close(got, ref):
    return bool(np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max())

# batched matmul writing a transposed dst (C holds dst^T: per-N scales follow C's rows)
x = rng.standard_normal((2, 3, 5)).astype(np.float32)
w = rng.standard_normal((2, 5, 4)).astype(np.float32)
b = rng.standard_normal((1, 1, 4)).astype(np.float32)
prior = rng.standard_normal((2, 3, 4)).astype(np.float32)
at, po = attr(4)
pd = dnnl.matmul.primitive_desc(eng, MD([2, 3, 5], F32, "abc"), MD([2, 5, 4], F32, "abc"),
                                MD([1, 1, 4], F32, "abc"), MD([2, 3, 4], F32, "acb"), at)
got, sv = run(dnnl.matmul, pd, {SRC: x, WEI: w, BIAS: b}, prior, 4)
v = 0.5 * np.matmul(x.astype(np.float64), w) * sv[WEI] + b
results["matmul"] = close(got, apply_post_ops(v, po, prior) / 2.0)

# inner product over an image, weights scales per output channel
x = rng.standard_normal((3, 2, 2, 2)).astype(np.float32)
w = rng.standard_normal((5, 2, 2, 2)).astype(np.float32)
b = rng.standard_normal(5).astype(np.float32)
prior = rng.standard_normal((3, 5)).astype(np.float32)
at, po = attr(1)
pd = dnnl.inner_product_forward.primitive_desc(
    eng, dnnl.prop_kind.forward_inference, MD([3, 2, 2, 2], F32, "abcd"),
    MD([5, 2, 2, 2], F32, "abcd"), MD([5], F32, "a"), MD([3, 5], F32, "ab"), at)
got, sv = run(dnnl.inner_product_forward, pd, {SRC: x, WEI: w, BIAS: b}, prior, 5)
v = 0.5 * (x.reshape(3, -1).astype(np.float64) @ w.reshape(5, -1).T) * sv[WEI] + b
results["inner_product"] = close(got, apply_post_ops(v, po, prior) / 2.0)
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="the Oclgrind OpenCL platform is not installed")
def test_gemm_scales_under_oclgrind():
    """Scales (src and dst common, weights per output channel) in the GEMM epilogue of a
    batched matmul with a transposed dst and of an inner product, with a bias, a sum and a
    relu: no invalid access, race or uninitialized read, and right results."""
    results = run_probe(PROBE_SCALES, OCLGRIND_BUILD_OPTIONS="-cl-opt-disable")
    assert results == {"matmul": True, "inner_product": True}, results


PROBE_OPERAND_TYPES = r"""
import json
import numpy as np
import pydnnl as dnnl
from pydnnl.memory.data_types import bf16_bits_to_f32, f32_to_bf16_bits
from pydnnl.reference.pooling import pooling_forward as ref_pool

MD, DT, A = dnnl.memory.desc, dnnl.memory.data_type, dnnl.algorithm
F32 = DT.f32
eng = dnnl.engine.from_name("Oclgrind")
assert eng.is_simulator
s = dnnl.stream(eng)
rng = np.random.default_rng(4)
results = {}

def stored(v, dt):
    if dt == DT.bf16:
        return bf16_bits_to_f32(f32_to_bf16_bits(v)).astype(np.float64)
    return np.asarray(v.astype(np.float16) if dt == DT.f16 else v, np.float64)

def chain(entries):
    po, ops = dnnl.post_ops(), []
    for alg, dims, dt, tag in entries:
        v = (rng.integers(-7, 8, size=dims).astype(np.int8) if dt == DT.s8
             else rng.standard_normal(dims).astype(np.float32))
        ops.append((po.len(), v, dt))
        po.append_binary(alg, MD(list(dims), dt, tag))
    attr = dnnl.primitive_attr()
    attr.set_post_ops(po)
    return attr, ops

def operands(pd, ops):
    out = {}
    for i, v, _ in ops:
        arg = dnnl.ARG_ATTR_MULTIPLE_POST_OP(i) | dnnl.ARG_SRC_1
        out[arg] = dnnl.memory(pd.query_md(dnnl.query.exec_arg_md, arg), eng, v)
    return out

def close(got, ref):
    return bool(np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max())

# matmul (a loopy GEMM epilogue): bf16 per column, f16 full (transposed), s8 per row
x = rng.standard_normal((3, 5)).astype(np.float32)
w = rng.standard_normal((5, 4)).astype(np.float32)
attr, ops = chain([(A.binary_add, (1, 4), DT.bf16, "ab"), (A.binary_mul, (3, 4), DT.f16, "ba"),
                   (A.binary_sub, (3, 1), DT.s8, "ab")])
pd = dnnl.matmul.primitive_desc(eng, MD([3, 5], F32, "ab"), MD([5, 4], F32, "ab"),
                                MD([3, 4], F32, "ab"), attr)
D = dnnl.memory(pd.dst_desc(), eng)
dnnl.matmul(pd).execute(s, {dnnl.ARG_SRC: dnnl.memory(pd.src_desc(), eng, x),
                            dnnl.ARG_WEIGHTS: dnnl.memory(pd.weights_desc(), eng, w),
                            dnnl.ARG_DST: D, **operands(pd, ops)})
s.wait()
ref = ((x.astype(np.float64) @ w + stored(ops[0][1], DT.bf16)) * stored(ops[1][1], DT.f16)
       - stored(ops[2][1], DT.s8))
results["matmul"] = close(D.to_numpy(), ref)

# pooling (OpenCL C text): bf16 per channel, f16 full in another layout
x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
attr, ops = chain([(A.binary_add, (1, 3, 1, 1), DT.bf16, "abcd"),
                   (A.binary_max, (2, 3, 2, 2), DT.f16, "acdb")])
pd = dnnl.pooling_forward.primitive_desc(
    eng, dnnl.prop_kind.forward_inference, A.pooling_max, MD([2, 3, 4, 4], F32, "abcd"),
    MD([2, 3, 2, 2], F32, "abcd"), [2, 2], [2, 2], [0, 0], [0, 0], [0, 0], attr)
D = dnnl.memory(pd.dst_desc(), eng)
dnnl.pooling_forward(pd).execute(s, {dnnl.ARG_SRC: dnnl.memory(pd.src_desc(), eng, x),
                                     dnnl.ARG_DST: D, **operands(pd, ops)})
s.wait()
ref = ref_pool(x, "max", [2, 2], [2, 2], [0, 0], [0, 0], [0, 0])
ref = np.maximum((ref[0] if isinstance(ref, tuple) else ref) + stored(ops[0][1], DT.bf16),
                 stored(ops[1][1], DT.f16))
results["pooling"] = close(D.to_numpy(), ref)
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="the Oclgrind OpenCL platform is not installed")
def test_typed_post_op_operands_under_oclgrind():
    # unoptimized builds, as above
    results = run_probe(PROBE_OPERAND_TYPES, OCLGRIND_BUILD_OPTIONS="-cl-opt-disable")
    assert results == {"matmul": True, "pooling": True}, results
