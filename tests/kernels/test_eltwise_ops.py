"""The eltwise OpenCL expressions (``pydnnl.kernels.eltwise_ops``) compiled in tiny kernels on
every device, against the float64 numpy reference (itself checked against finite differences
and closed forms at the edge conventions: relu at 0, clip at its bounds, round's halves)."""
from __future__ import annotations

import numpy as np
import pyopencl as cl
import pytest

from pydnnl.constants import algorithm as A
from pydnnl.error import invalid_arguments
from pydnnl.kernels import eltwise_ops as ops
from pydnnl.reference import eltwise as ref

N = 64

# (algorithm, alpha, beta, domain, edge points); domain "pos" draws x in (0.05, 4)
CASES = [
    (A.eltwise_relu, 0.0, 0.0, "all", [0.0, -0.0, 1e-30]),
    (A.eltwise_relu, 0.1, 0.0, "all", [0.0]),
    (A.eltwise_relu, -0.5, 0.0, "all", [0.0]),
    (A.eltwise_tanh, 0.0, 0.0, "all", [0.0, 9.0, -9.0]),
    (A.eltwise_elu, 1.0, 0.0, "all", [0.0]),
    (A.eltwise_elu, 0.5, 0.0, "all", [0.0]),
    (A.eltwise_square, 0.0, 0.0, "all", [0.0]),
    (A.eltwise_abs, 0.0, 0.0, "all", [0.0, -0.0]),
    (A.eltwise_sqrt, 0.0, 0.0, "pos", [1.0, 4.0]),
    (A.eltwise_linear, 2.0, -0.5, "all", [0.0]),
    (A.eltwise_soft_relu, 1.0, 0.0, "all", [0.0, 30.0, -30.0, 100.0]),
    (A.eltwise_soft_relu, 2.0, 0.0, "all", [0.0, 50.0]),
    (A.eltwise_soft_relu, -1.0, 0.0, "all", [0.0, -50.0]),
    (A.eltwise_soft_relu, 0.5, 0.0, "all", [0.0]),
    (A.eltwise_hardsigmoid, 0.25, 0.5, "all", [-2.0, 2.0, 0.0]),
    (A.eltwise_hardswish, 0.25, 0.5, "all", [-2.0, 2.0, 0.0]),
    (A.eltwise_logistic, 0.0, 0.0, "all", [0.0, 20.0, -20.0, -100.0]),
    (A.eltwise_exp, 0.0, 0.0, "all", [0.0]),
    (A.eltwise_gelu_tanh, 0.0, 0.0, "all", [0.0]),
    (A.eltwise_gelu_erf, 0.0, 0.0, "all", [0.0]),
    (A.eltwise_swish, 1.0, 0.0, "all", [0.0]),
    (A.eltwise_swish, -0.5, 0.0, "all", [0.0]),
    (A.eltwise_log, 0.0, 0.0, "pos", [1.0]),
    (A.eltwise_clip, -0.5, 1.5, "all", [-0.5, 1.5]),
    (A.eltwise_clip_v2, -0.5, 1.5, "all", [-0.5, 1.5]),
    (A.eltwise_clip_v2, 0.25, 0.25, "all", [0.25]),
    (A.eltwise_pow, 2.0, 3.0, "all", [0.0]),
    (A.eltwise_pow, 0.5, 0.5, "pos", [1.0]),
    (A.eltwise_pow, 1.5, 0.0, "all", [0.0]),
    (A.eltwise_pow, 1.0, 1.0, "all", [0.0]),
    (A.eltwise_pow, -1.0, 2.0, "all", [0.0]),
    (A.eltwise_pow, 1.0, -1.0, "pos", [1.0]),
    (A.eltwise_round, 0.0, 0.0, "all", [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997]),
    (A.eltwise_mish, 0.0, 0.0, "all", [0.0, 30.0, -30.0, 100.0]),
    (A.eltwise_relu_use_dst_for_bwd, 0.0, 0.0, "all", [0.0]),
    (A.eltwise_relu_use_dst_for_bwd, 0.2, 0.0, "all", [0.0]),
    (A.eltwise_tanh_use_dst_for_bwd, 0.0, 0.0, "all", [0.0]),
    (A.eltwise_elu_use_dst_for_bwd, 1.0, 0.0, "all", [0.0]),
    (A.eltwise_sqrt_use_dst_for_bwd, 0.0, 0.0, "pos", [1.0]),
    (A.eltwise_logistic_use_dst_for_bwd, 0.0, 0.0, "all", [0.0]),
    (A.eltwise_exp_use_dst_for_bwd, 0.0, 0.0, "all", [0.0]),
    (A.eltwise_clip_v2_use_dst_for_bwd, -0.5, 1.5, "all", [-0.5, 1.5]),
]
IDS = [f"{a.name[8:]}-{al:g}-{be:g}" for a, al, be, _, _ in CASES]


def _inputs(i, domain, edges):
    rng = np.random.default_rng(1000 + i)
    n = N - len(edges)
    x = rng.uniform(0.05, 4.0, n) if domain == "pos" else rng.uniform(-4.0, 4.0, n)
    x = np.concatenate([np.asarray(edges, np.float64), x]).astype(np.float32)
    dd = rng.standard_normal(N).astype(np.float32)
    return x, dd


def _v_of(alg, x, alpha, beta):
    """What the backward reads: src, or dst (the float32 forward) for the use_dst variants."""
    if ops.uses_dst(alg):
        return ref.eltwise_forward(alg, x, alpha, beta).astype(np.float32)
    return x


def _program_source() -> str:
    parts = []
    for i, (alg, alpha, beta, _, _) in enumerate(CASES):
        parts.append(
            f"__kernel void f{i}(__global const float *x, __global float *y) {{\n"
            f"  const int i = get_global_id(0);\n  const float s = x[i];\n"
            f"  y[i] = {ops.forward_expr(alg, 's', alpha, beta)};\n}}\n")
        if alg not in ops.NO_BACKWARD:
            parts.append(
                f"__kernel void b{i}(__global const float *dd, __global const float *v,"
                f" __global float *ds) {{\n  const int i = get_global_id(0);\n"
                f"  const float g = dd[i];\n  const float w = v[i];\n"
                f"  ds[i] = {ops.backward_expr(alg, 'g', 'w', alpha, beta)};\n}}\n")
    return "\n".join(parts)


@pytest.fixture(scope="module")
def program(engine):
    return cl.Program(engine.context, _program_source()).build()


def _run(stream, prog, name, *arrays):
    ctx = stream.queue.context
    mf = cl.mem_flags
    bufs = [cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a) for a in arrays]
    out = np.full(N, np.nan, np.float32)
    ob = cl.Buffer(ctx, mf.WRITE_ONLY, out.nbytes)
    getattr(prog, name)(stream.queue, (N,), None, *bufs, ob)
    cl.enqueue_copy(stream.queue, out, ob, is_blocking=True)
    return out


def _assert_close(got, want, scale, what):
    got64 = got.astype(np.float64)
    both_nan = np.isnan(got64) & np.isnan(want)
    same_inf = np.isinf(want) & (got64 == want)
    err = np.abs(got64 - want)
    tol = 2e-5 * np.abs(want) + 2e-6 * scale
    bad = ~(both_nan | same_inf | (err <= tol))
    assert not bad.any(), (f"{what}: {bad.sum()} mismatches, first at {np.argmax(bad)}: "
                           f"got {got[bad][:4]}, want {want[bad][:4]}")


@pytest.mark.parametrize("case", range(len(CASES)), ids=IDS)
def test_forward_expr(engine, stream, program, case):
    alg, alpha, beta, domain, edges = CASES[case]
    x, _ = _inputs(case, domain, edges)
    got = _run(stream, program, f"f{case}", x)
    want = ref.eltwise_forward(alg, x, alpha, beta)
    _assert_close(got, want, np.maximum(1.0, np.abs(x)), f"{alg.name} forward")


@pytest.mark.parametrize("case", range(len(CASES)), ids=IDS)
def test_backward_expr(engine, stream, program, case):
    alg, alpha, beta, domain, edges = CASES[case]
    if alg in ops.NO_BACKWARD:
        with pytest.raises(invalid_arguments, match="round"):
            ops.backward_expr(alg, "g", "w", alpha, beta)
        return
    x, dd = _inputs(case, domain, edges)
    v = _v_of(alg, x, alpha, beta)
    got = _run(stream, program, f"b{case}", dd, v)
    want = ref.eltwise_backward(alg, dd, v, alpha, beta)
    _assert_close(got, want, np.abs(dd) * np.maximum(1.0, np.abs(x)), f"{alg.name} backward")


# ---- the reference itself: finite differences and closed forms (no device) ----

@pytest.mark.parametrize("case", range(len(CASES)), ids=IDS)
def test_reference_backward_is_the_derivative(case):
    alg, alpha, beta, domain, _ = CASES[case]
    if alg in ops.NO_BACKWARD:
        return
    rng = np.random.default_rng(7 + case)
    x = rng.uniform(0.05, 4.0, 200) if domain == "pos" else rng.uniform(-4.0, 4.0, 200)
    # stay away from the kinks (0, the clip bounds, hardsigmoid's corners), where the
    # derivative is a convention checked below
    kinks = np.array([0.0, alpha, beta, -2.0, 2.0])
    x = x[np.min(np.abs(x[:, None] - kinks[None, :]), axis=1) > 1e-3]
    h = 1e-6
    fd = (ref.eltwise_forward(alg, x + h, alpha, beta)
          - ref.eltwise_forward(alg, x - h, alpha, beta)) / (2 * h)
    v = ref.eltwise_forward(alg, x, alpha, beta) if ops.uses_dst(alg) else x
    got = ref.eltwise_backward(alg, np.ones_like(x), v, alpha, beta)
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-7)


def test_reference_edge_conventions():
    f, b = ref.eltwise_forward, ref.eltwise_backward
    # relu: derivative at 0 is alpha, from src and from dst
    assert b(A.eltwise_relu, 2.0, 0.0, 0.1, 0) == pytest.approx(0.2)
    assert b(A.eltwise_relu_use_dst_for_bwd, 2.0, 0.0, 0.1, 0) == pytest.approx(0.2)
    assert f(A.eltwise_relu, -3.0, 0.1, 0) == pytest.approx(-0.3)
    # clip: upper bound passes the gradient, lower bound does not; clip_v2 neither
    assert b(A.eltwise_clip, 1.0, -0.5, -0.5, 1.5) == 0.0
    assert b(A.eltwise_clip, 1.0, 1.5, -0.5, 1.5) == 1.0
    assert b(A.eltwise_clip_v2, 1.0, 1.5, -0.5, 1.5) == 0.0
    assert b(A.eltwise_clip_v2, 1.0, -0.5, -0.5, 1.5) == 0.0
    assert b(A.eltwise_clip_v2_use_dst_for_bwd, 1.0, 1.0, -0.5, 1.5) == 1.0
    assert f(A.eltwise_clip, 7.0, -0.5, 1.5) == 1.5
    # round: half to even
    np.testing.assert_array_equal(f(A.eltwise_round, [0.5, 1.5, 2.5, -0.5, -2.5]),
                                  [0.0, 2.0, 2.0, -0.0, -2.0])
    # abs at 0, pow with beta 0, hardswish's corners
    assert b(A.eltwise_abs, 3.0, 0.0) == 0.0
    assert b(A.eltwise_pow, 3.0, 2.0, 1.5, 0.0) == 0.0
    assert f(A.eltwise_pow, 2.0, 1.5, 0.0) == 1.5
    assert b(A.eltwise_hardswish, 3.0, 2.0, 0.25, 0.5) == 3.0
    assert b(A.eltwise_hardswish, 3.0, -2.0, 0.25, 0.5) == 0.0
    assert b(A.eltwise_hardsigmoid, 3.0, 2.0, 0.25, 0.5) == 0.0
    # soft_relu's alpha (v3): log(1 + e^(alpha s)) / alpha; alpha = -1 is logsigmoid
    assert f(A.eltwise_soft_relu, 1.0, 2.0) == pytest.approx(np.log1p(np.exp(2.0)) / 2)
    assert f(A.eltwise_soft_relu, 1.0, -1.0) == pytest.approx(np.log(1 / (1 + np.exp(-1.0))))
    # linear, elu, gelu closed forms
    assert f(A.eltwise_linear, 3.0, 2.0, -1.0) == 5.0
    assert f(A.eltwise_elu, -1.0, 0.5) == pytest.approx(0.5 * (np.exp(-1.0) - 1))
    assert f(A.eltwise_gelu_erf, 1.0) == pytest.approx(0.8413447460685429)


# ---- the module's contract (no device) ----

def test_supported_and_uses_dst():
    eltwise = {a for a in A if a.name.startswith("eltwise_")}
    assert ops.SUPPORTED == eltwise and len(ops.SUPPORTED) == 28
    assert {a for a in ops.SUPPORTED if ops.uses_dst(a)} == {
        a for a in eltwise if a.name.endswith("_use_dst_for_bwd")}
    assert ops.uses_dst(int(A.eltwise_exp_use_dst_for_bwd))
    assert not ops.uses_dst(A.eltwise_exp)


@pytest.mark.parametrize("bad", [A.convolution_direct, A.undef, 12345, "relu", None])
def test_non_eltwise_algorithms_are_refused(bad):
    with pytest.raises(invalid_arguments, match="algorithm"):
        ops.forward_expr(bad, "x", 0.0, 0.0)
    with pytest.raises(invalid_arguments, match="algorithm"):
        ops.backward_expr(bad, "g", "x", 0.0, 0.0)
    with pytest.raises(invalid_arguments):
        ops.uses_dst(bad)


@pytest.mark.parametrize("v", [0.0, 1.0, -1.0, 0.1, 1 / 3, 1e-30, 3.4e38, -2.5e-7, 16777217.0])
def test_literals_read_back_exactly(v):
    s = ops.lit(v)
    assert s.endswith("f") or s.endswith("f)")
    assert np.float32(s.strip("()").rstrip("f")) == np.float32(v)
    assert "." in s or "e" in s
