"""The transposing copy in 8x8 register blocks (``kernels.transpose_source``): against numpy
on every device here (rows ragged to the block, source rows wider than the copy, offsets),
under Oclgrind with its stderr read, and in the plan of a 1x1 layer's backward weights on
CPUs against the reference."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.kernels.transpose_source import TransposeProblem, build_transpose

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from oclgrind_helpers import KERNEL_PROBE_PRELUDE, has_oclgrind, run_probe  # noqa: E402
from printed_kernels import run_source  # noqa: E402


@pytest.mark.parametrize("rows, cols, ldi, ldo", [(64, 16, 16, 64), (37, 24, 40, 45),
                                                  (5, 8, 8, 7), (3136 // 4, 64, 64, 800)])
def test_transpose_matches_numpy(engine, rows, cols, ldi, ldo):
    src = build_transpose(TransposeProblem(cols=cols, ldi=ldi))
    rng = np.random.default_rng(rows)
    s_off, d_off = 3, 5
    a = rng.standard_normal(s_off + rows * ldi).astype(np.float32)
    out = np.full(d_off + cols * ldo, 7.0, np.float32)
    got = run_source(engine, src, {"src": a, "dst": out},
                     {"src_off": s_off, "dst_off": d_off, "nrows": rows, "ldo": ldo})["dst"]
    want = out.copy()
    m = a[s_off:].reshape(rows, ldi)[:, :cols]
    for c in range(cols):
        want[d_off + c * ldo:d_off + c * ldo + rows] = m[:, c]
    np.testing.assert_array_equal(got, want)  # (and nothing else written)


def test_problem_checks_name_the_field():
    with pytest.raises(ValueError, match="cols"):
        TransposeProblem(cols=12, ldi=12)
    with pytest.raises(ValueError, match="ldi"):
        TransposeProblem(cols=16, ldi=8)


def test_1x1_backward_weights_copies_blocks_on_cpus(engine, stream):
    """ResNet-like 1x1 backward weights (channels-last, ragged point count): the CPU plan
    copies its patches with the blocked transpose, and the weight gradient matches the
    reference."""
    from pydnnl.reference import conv as R

    MD, F32 = dnnl.memory.desc, dnnl.memory.data_type.f32
    mb, ic, oc, h, w = 3, 24, 16, 5, 7
    rng = np.random.default_rng(5)
    x = rng.standard_normal((mb, ic, h, w)).astype(np.float32)
    dy = rng.standard_normal((mb, oc, h, w)).astype(np.float32)
    args = ([1, 1], [0, 0], [0, 0], [0, 0])
    src, dst = MD(list(x.shape), F32, "nhwc"), MD(list(dy.shape), F32, "nhwc")
    fwd = dnnl.convolution_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_training, dnnl.algorithm.convolution_direct, src,
        MD([oc, ic, 1, 1], F32, "any"), None, dst, *args, solver="im2col_gemm")
    pd = dnnl.convolution_backward_weights.primitive_desc(
        engine, dnnl.algorithm.convolution_direct, src, MD([oc, ic, 1, 1], F32, "hwio"),
        None, dst, *args, fwd, solver="im2col_gemm")
    prim = dnnl.convolution_backward_weights(pd)
    names = [getattr(getattr(st, "kernel", None), "name", "") for st in prim._plan.steps]
    assert ("transpose8" in names) == (not engine.info.is_gpu), names
    dw = dnnl.memory(pd.diff_weights_desc(), engine)
    prim.execute(stream, {dnnl.ARG_SRC: dnnl.memory(src, engine, x),
                          dnnl.ARG_DIFF_DST: dnnl.memory(dst, engine, dy),
                          dnnl.ARG_DIFF_WEIGHTS: dw})
    stream.wait()
    want = R.conv_backward_weights(x, dy, [oc, ic, 1, 1], *args, dtype=np.float64)[0]
    got = dw.to_numpy()
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


PROBE = "SEED = 2\n" + KERNEL_PROBE_PRELUDE + r"""
from pydnnl.kernels.transpose_source import TransposeProblem, build_transpose

for rows, cols, ldi, ldo in ((19, 16, 24, 21), (8, 8, 8, 8)):
    src = build_transpose(TransposeProblem(cols=cols, ldi=ldi))
    a = rng.standard_normal(rows * ldi).astype(np.float32)
    out = np.zeros(cols * ldo, np.float32)
    A, O = buf(a), buf(out)
    Kernel(eng.context, eng.device, src)(s, A.buffer, O.buffer, np.int64(0), np.int64(0),
                                         np.int64(rows), np.int64(ldo))
    s.wait()
    got = O.to_numpy().reshape(cols, ldo)[:, :rows]
    results[f"{rows}x{cols}"] = bool(np.array_equal(got, a.reshape(rows, ldi)[:, :cols].T))
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="the Oclgrind platform is not installed")
def test_transpose_under_oclgrind():
    """Out-of-bounds accesses (the ragged last rows), races and API misuse. The
    uninitialized-value check stays off: its plugin crashes the simulator (a segmentation
    fault, no report) on the kernel's float8 shuffles."""
    results = run_probe(PROBE, OCLGRIND_UNINITIALIZED="0")
    assert results and all(results.values()), results
