"""kernels.conv_fft_source prints the FFT convolution's line passes loopy generates
(kernels.conv_fft): the same kernel name, argument names and order, work-group size and launch
grid, and the same results. The passes come from the solver's own plans of small problems
(forward with a bias, backward data, backward weights; 1-D, 2-D with a prime length and
dilation, 3-D; channels-first, channels-last and blocked layouts; image chunks, so ``n0``);
a representative set (every kind of source and destination, real, half-spectrum and complex
lines, a bias, a partial last work-group) runs beside loopy's kernel on the same random
buffers, the outputs filled beforehand so that what either leaves unwritten is compared too.
Passes with post-ops go to loopy. Convolutions through the primitives against the numpy
reference: tests/primitives/conv/test_conv_fft.py."""
from __future__ import annotations

import pathlib
import sys
from dataclasses import replace

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.kernels.conv_fft import build_fft_pass, build_fft_pass_loopy, fft_program
from pydnnl.kernels.conv_fft_source import fft_pass_source
from pydnnl.kernels.source import source_from_loopy
from pydnnl.primitives.conv.solvers import fft as fft_solver
from pydnnl.runtime.plan import Plan

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from printed_kernels import run_source  # noqa: E402

MD, F32 = dnnl.memory.desc, dnnl.memory.data_type.f32
AUTO = dnnl.algorithm.convolution_auto

# (name, src dims, weights dims, strides, dilates, pad_l, pad_r, src/dst tag, weights tag)
PROBLEMS = [
    ("2d_prime_dilated", [2, 3, 9, 5], [4, 3, 3, 2], [1, 1], [2, 1], [1, 1], [1, 0],
     "nchw", "oihw"),
    ("2d_nhwc_k5", [2, 4, 8, 7], [3, 4, 5, 5], [1, 1], [0, 0], [2, 1], [2, 3], "nhwc", "hwio"),
    ("1d_k9", [3, 2, 20], [5, 2, 9], [1], [0], [4], [4], "ncw", "oiw"),
    ("3d_k3", [1, 2, 5, 4, 6], [3, 2, 3, 3, 3], [1, 1, 1], [0, 0, 0], [1, 1, 1], [1, 1, 1],
     "ncdhw", "oidhw"),
    ("2d_blocked", [2, 16, 6, 6], [16, 16, 3, 3], [1, 1], [0, 0], [1, 1], [1, 1], "nChw16c",
     "OIhw16i16o"),
]


def _out_dims(src, wei, s, d, pl, pr):
    sp = [(i + a + b - (dd + 1) * (k - 1) - 1) // st + 1
          for i, k, st, dd, a, b in zip(src[2:], wei[2:], s, d, pl, pr)]
    return [src[0], wei[0], *sp]


def _passes(engine, monkeypatch, prob, attr=None) -> list:
    """The FFT passes of the problem's three directions (the solver's dry plans)."""
    _, src, wei, s, d, pl, pr, tag, wtag = prob
    dst = _out_dims(src, wei, s, d, pl, pr)
    args = (s, d, pl, pr)
    mds = (MD(src, F32, tag), MD(wei, F32, wtag), MD([wei[0]], F32, "x"), MD(dst, F32, tag))
    extra = {"attr": attr} if attr is not None else {}
    fwd = dnnl.convolution_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_training, AUTO, *mds, *args, solver="fft", **extra)
    pds = [fwd]
    if attr is None:
        pds.append(dnnl.convolution_backward_data.primitive_desc(
            engine, AUTO, mds[0], mds[1], mds[3], *args, fwd, solver="fft"))
        pds.append(dnnl.convolution_backward_weights.primitive_desc(
            engine, AUTO, *mds, *args, fwd, solver="fft",
            solver_params={"chunk_mb": 0.001}))  # image chunks: n0
    seen = []
    orig = Plan.kernel

    def kernel(self, family, problem, build, **named):
        if family == "conv_fft" and problem not in seen:
            seen.append(problem)
        return orig(self, family, problem, build, **named)

    with monkeypatch.context() as m:
        m.setattr(Plan, "kernel", kernel)
        for pd in pds:
            fft_solver._build(pd._problem_, pd._params, None, dry=True)
    return seen


def _features(p) -> tuple:
    return (p.src[0], p.dst[0], p.in_real, p.half, p.out_real, p.bias is not None,
            p.inverse, int(np.prod(p.lines)) % max(1, min(p.wg, int(np.prod(p.lines)))) != 0)


@pytest.fixture(scope="module")
def representative(request):
    """Passes of every problem, one per combination of features, with loopy's kernel of
    each (generated once: 2-3 s a pass)."""
    from pydnnl.engine import engine as make

    eng = make(dnnl.engine.kind.cpu, 0) if dnnl.engine.get_count(dnnl.engine.kind.cpu) \
        else make(dnnl.engine.kind.any, 0)
    mp = pytest.MonkeyPatch()
    try:
        chosen, feats = [], set()
        for prob in PROBLEMS:
            for p in _passes(eng, mp, prob):
                f = _features(p)
                if f not in feats:
                    feats.add(f)
                    chosen.append((prob[0], p, source_from_loopy(build_fft_pass_loopy(p))))
    finally:
        mp.undo()
    return chosen


def _subscripts(expr, out: list) -> None:
    from pymbolic.mapper import WalkMapper

    class _W(WalkMapper):
        def map_subscript(self, e, *args, **kw):
            out.append(e)
            return super().map_subscript(e, *args, **kw)

    _W()(expr)


def _buffers(p, values: dict, rng) -> dict:
    """Random buffers as large as the pass's loads and stores reach (every work-item's
    addresses evaluated with the run-time offsets of ``values``)."""
    from pymbolic import evaluate

    prog = fft_program(p)
    subs: list = []
    for _, e in prog.temps:
        _subscripts(e, subs)
    for at, e in prog.stores:
        _subscripts(at, subs)
        _subscripts(e, subs)
    f = np.arange(prog.total, dtype=np.int64)
    size: dict = {}
    for sub in subs:
        idx = np.broadcast_to(evaluate(sub.index, {"f": f, **values}), f.shape)
        assert idx.min() >= 0
        name = sub.aggregate.name
        size[name] = max(size.get(name, 0), int(idx.max()) + 1)
    return {k: rng.standard_normal(n + 3).astype(np.float32) for k, n in size.items()}


def test_covers_every_feature(representative):
    feats = {_features(p) for _, p, _ in representative}
    assert {f[0] for f in feats} == {"tensor", "planar", "quad"}
    assert {f[1] for f in feats} == {"tensor", "planar"}
    assert any(f[3] for f in feats) and any(f[5] for f in feats) and any(f[7] for f in feats)


def test_printed_passes_compute_what_loopy_generates(first_engine, representative):
    """(On the first device: the same program's two texts; the FFT convolutions' own tests
    run the printed passes on every device.)"""
    engine = first_engine
    rng = np.random.default_rng(5)
    values = {"in_off": 3, "out_off": 5, "n0": 1}
    for name, p0, theirs in representative:
        for p in (p0, replace(p0, lid_lines=True)):  # GPUs' index form, CPUs'
            ours = fft_pass_source(p)
            assert ours is not None and build_fft_pass(p) == ours
            assert (ours.name, ours.arg_names, ours.global_size, ours.local_size) == \
                (theirs.name, theirs.arg_names, theirs.global_size, theirs.local_size), name
            bufs = _buffers(p, values, rng)
            a = run_source(engine, ours, bufs, values)["out"]
            b = run_source(engine, theirs, bufs, values)["out"]
            scale = np.abs(b).max()
            assert np.abs(a - b).max() <= 1e-6 * scale, (name, p)


def test_post_ops_go_to_loopy(engine, monkeypatch):
    po = dnnl.post_ops()
    po.append_eltwise(dnnl.algorithm.eltwise_relu, 0.0, 0.0)
    attr = dnnl.primitive_attr()
    attr.set_post_ops(po)
    passes = _passes(engine, monkeypatch, PROBLEMS[0], attr)
    with_ops = [p for p in passes if p.post_ops]
    assert with_ops and all(fft_pass_source(p) is None for p in with_ops)
    assert all(fft_pass_source(p) is not None for p in passes if not p.post_ops)
