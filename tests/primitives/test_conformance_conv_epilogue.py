"""The convolution epilogue of a 1-D ncw problem writes its tensor once, and nothing past it.

Regression: ``benchdnn --conv --dir=FWD_D --stag=abx --dtag=abx --attr-post-ops=linear:2:1`` on
a 1-D problem failed (the linear post-op was applied twice to part of dst) and then crashed the
OpenCL compiler: Intel's CPU compiler dropped the bounds guard of the loop-free epilogue kernel,
whose last work-group is partial, so it also stored past the end of dst into host memory.
Oracles: the float64 numpy reference convolution with the post-op's closed form ``2 x + 1``,
and sentinel values after the tensor's bytes.
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyopencl as cl
import pytest

import pydnnl as dnnl
from pydnnl.reference.conv import conv_forward

dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
SENTINEL = np.float32(12345.0)


def guarded_memory(engine, md, values=None, spare=1024):
    """A memory at the start of a larger buffer whose remaining bytes hold SENTINEL."""
    n = md.get_size() // 4
    host = np.full(n + spare, SENTINEL, np.float32)
    host[:n] = 0 if values is None else md.pack(values.astype(np.float32))
    buf = cl.Buffer(engine.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                    hostbuf=host)
    return dnnl.memory(md, engine, buf), buf, n


def spare_written(engine, buf, n) -> int:
    host = np.empty(buf.size // 4, np.float32)
    cl.enqueue_copy(engine.default_queue, host, buf, is_blocking=True)
    return int(np.count_nonzero(host[n:] != SENTINEL))


# (problem, solver): 80 = 16 channels x 5 points per image, a partial second work-group of 64
@pytest.mark.parametrize("mb, ic, oc, iw, kw, pw, solver", [
    (2, 16, 16, 5, 1, 0, "im2col_gemm"),
    (2, 8, 8, 16, 3, 1, "im2col_gemm"),
    (3, 16, 17, 5, 3, 1, None),
])
@pytest.mark.parametrize("alg, alpha, beta, closed_form", [
    ("eltwise_linear", 2.0, 1.0, lambda x: 2 * x + 1),
    ("eltwise_relu", 0.0, 0.0, lambda x: np.maximum(x, 0)),
])
def test_1d_ncw_epilogue_writes_dst_once_and_nothing_past_it(engine, stream, mb, ic, oc, iw, kw,
                                                             pw, solver, alg, alpha, beta,
                                                             closed_form):
    rng = np.random.default_rng(mb * 100 + ic)
    ow = iw + 2 * pw - kw + 1
    x = rng.standard_normal((mb, ic, iw))
    w = rng.standard_normal((oc, ic, kw))
    src_md, dst_md = dnnl.memory.desc([mb, ic, iw], dt.f32, tag.ncw), \
        dnnl.memory.desc([mb, oc, ow], dt.f32, tag.ncw)
    po = dnnl.post_ops()
    po.append_eltwise(getattr(dnnl.algorithm, alg), alpha, beta)
    attr = dnnl.primitive_attr()
    attr.set_post_ops(po)
    pin = {} if solver is None else {"solver": solver}
    pd = dnnl.convolution_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_training, dnnl.algorithm.convolution_direct, src_md,
        dnnl.memory.desc([oc, ic, kw], dt.f32, tag.any), dst_md, [1], [pw], [pw], attr, **pin)
    wm = dnnl.memory(pd.weights_desc(), engine, w.astype(np.float32))
    xm, xbuf, xn = guarded_memory(engine, src_md, x)
    ym, ybuf, yn = guarded_memory(engine, dst_md)
    dnnl.convolution_forward(pd).execute(stream, {dnnl.ARG_SRC: xm, dnnl.ARG_WEIGHTS: wm,
                                                  dnnl.ARG_DST: ym})
    stream.wait()
    assert spare_written(engine, ybuf, yn) == 0, "stored past the end of dst"
    assert spare_written(engine, xbuf, xn) == 0
    want = closed_form(conv_forward(x, w, None, [1], [0], [pw], [pw], dtype=np.float64))
    np.testing.assert_allclose(ym.to_numpy(), want, rtol=1e-5, atol=1e-5)


def test_benchdnn_1d_abx_linear_post_op_command(benchdnn_engine):
    """The reported command, in a child process (a compiler crash must fail, not abort)."""
    cmd = [sys.executable, "-m", "pydnnl.benchdnn", benchdnn_engine, "--conv", "--mode=C",
           "--dir=FWD_D", "--stag=abx", "--dtag=abx", "--attr-post-ops=linear:2:1",
           "mb2ic8iw16oc8ow16kw3pw1", "ic16iw5oc16ow5kw1pw0", "g1ic17oc17_iw5ow5kw3pw1",
           "--alg=direct", "ic16iw5oc16ow5kw1pw0"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "tests:4 passed:4 " in out and "FAILED" not in out, out[-3000:]
