"""kernels.conv_implicit_gemm_source writes the implicit-GEMM kernels loopy generates for the
CPU plans (the register-tile data kernel, the fill of a phase no tap reaches, the weight
packer, the backward-weights tile and its slices' reduction), text aside: the same kernel
name, argument names and order, work-group size and launch grid, and the same results bit
for bit (the tiles sum in loopy's order, with the same statement). The problems come from
the implicit-GEMM solver's own plan (a stub records its kernels): forward and strided
backward data, channels-last and channels-first outputs, run-time and baked sizes, tall and
ragged row tiles, partial column panels, groups, bias, sum and eltwise post-ops; backward
weights whole and in slices. Each kernel runs beside loopy's on the same random buffers
(outputs filled beforehand, so what either leaves unwritten is compared too) on every device
present (Intel's CPU runtime and PoCL). Forms not covered return None."""
from __future__ import annotations

import pathlib
import sys
from dataclasses import replace

import numpy as np
import pytest

from pydnnl.constants import algorithm
from pydnnl.conv_shapes import ConvProblem
from pydnnl.kernels import conv_implicit_gemm as ig
from pydnnl.kernels.conv_implicit_gemm_source import (
    igemm_data_source,
    igemm_fill_source,
    igemm_wei_source,
    wei_pack_source,
    wei_reduce_source,
)
from pydnnl.kernels.source import source_from_loopy
from pydnnl.primitives.conv.solvers import implicit_gemm as solver
from pydnnl.runtime.plan import Ref

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from printed_kernels import run_source  # noqa: E402

RELU = ("eltwise", int(algorithm.eltwise_relu), 0.0, 0.0)
LEAKY = ("eltwise", int(algorithm.eltwise_relu), 0.2, 0.0)


class _StubPlan:
    """Records the solver's kernels (family, problem, arguments) instead of building them."""

    engine = None

    def __init__(self):
        self.scratch = 0
        self.kernels = []

    def alloc(self, n, slot=None):
        off = self.scratch
        self.scratch += int(n) + 16
        return off

    def kernel(self, family, problem, build, **named):
        self.kernels.append((family, problem, build, named))


def _act(N, C, sp, tag):
    H, W = sp
    if tag == "nhwc":
        return 0, ((1, H * W * C, ()), (1, 1, ()), (1, W * C, ()), (1, C, ()))
    return 0, ((1, C * H * W, ()), (1, H * W, ()), (1, W, ()), (1, 1, ()))


def _problem(kind, mb, G, ic, oc, isp, ksz, st, pl, pr, tag, bias, post_ops):
    osp = tuple((i + a + b - k) // s + 1 for i, k, s, a, b in zip(isp, ksz, st, pl, pr))
    icg, ocg = ic // G, oc // G
    kh, kw = ksz
    # weights [G, OCg, ICg, kh, kw] as gkhwio: output channels innermost
    wei = (0, ((1, kh * kw * icg * ocg, ()), (1, 1, ()), (1, ocg, ()), (1, kw * icg * ocg, ()),
               (1, icg * ocg, ())))
    src, dst = _act(mb, ic, isp, tag), _act(mb, oc, osp, tag)
    nb = oc if kind == "fwd" else ic
    return ConvProblem(
        mb=mb, groups=G, ic=ic, oc=oc, src_spatial=tuple(isp), dst_spatial=osp,
        kernel=tuple(ksz), strides=tuple(st), dilates=(0, 0), padding_l=tuple(pl),
        padding_r=tuple(pr), kind=kind, src=src, wei=wei, dst=dst,
        src_n=mb * ic * isp[0] * isp[1], wei_n=G * icg * ocg * kh * kw,
        dst_n=mb * oc * osp[0] * osp[1], bias=(0, ((1, 1, ()),)) if bias else None,
        bias_n=nb if bias else 0, post_ops=tuple(post_ops))


def _kernels(p, tile, baked=False):
    """The solver's kernels for ``p``; ``baked``: as where sizes cannot be run-time ones."""
    plan = _StubPlan()
    keep = solver.runtime_sizes
    if baked:
        solver.runtime_sizes = lambda *a: False
    try:
        solver._data(plan, p, tile)
    finally:
        solver.runtime_sizes = keep
    return plan


# (kind, mb, G, ic, oc, in spatial, kernel, strides, pad l, pad r, tag, bias, post-ops, tile)
T16 = ig.TileParams(rows=7, cols=64, vec=16, wg=(1, 1), m_inner=True)
T8 = ig.TileParams(rows=4, cols=16, vec=8, wg=(1, 1), m_inner=False)
T4 = ig.TileParams(rows=3, cols=8, vec=4, wg=(1, 1), m_inner=True)
CASES = [
    ("fwd", 1, 1, 3, 64, (20, 22), (7, 7), (2, 2), (3, 3), (2, 3), "nhwc", True, (), T16),
    ("fwd", 2, 1, 3, 32, (9, 11), (3, 3), (1, 2), (1, 1), (1, 0), "nhwc", True,
     (("sum", 0.5, 0.0), RELU), T16),                   # a partial panel, sum, relu
    ("fwd", 2, 2, 8, 20, (7, 6), (3, 3), (1, 1), (1, 1), (1, 1), "nhwc", False, (), T8),
    ("fwd", 1, 1, 4, 12, (6, 7), (3, 3), (2, 1), (0, 1), (0, 1), "nchw", True,
     (("sum", 1.0, 0.0), LEAKY), T4),                 # lane stores, ragged panel
    ("bwd_d", 2, 1, 16, 8, (7, 9), (3, 3), (2, 2), (1, 1), (1, 1), "nhwc", False, (), T8),
    ("bwd_d", 1, 1, 4, 8, (5, 6), (1, 1), (2, 2), (0, 0), (0, 0), "nhwc", True, (RELU,), T4),
    ("bwd_d", 1, 2, 8, 8, (6, 5), (3, 3), (1, 1), (1, 1), (1, 1), "nchw", False, (), T4),
    ("fwd", 1, 1, 8, 16, (2, 2), (1, 1), (1, 1), (0, 0), (0, 0), "nhwc", True, (), T16),
]                                                        # fewer rows than a tile: ragged


def _rand(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def _compare(engine, ours, theirs, bufs, values):
    assert ours is not None
    theirs = source_from_loopy(theirs)
    for field in ("name", "arg_names", "global_size", "local_size", "grid", "build_options"):
        assert getattr(ours, field) == getattr(theirs, field), field
    a = run_source(engine, ours, bufs, values)
    b = run_source(engine, theirs, bufs, values)
    for k in bufs:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.fixture(scope="module", params=[(i, b) for b in (False, True)
                                        for i in range(len(CASES))],
                ids=lambda x: f"{x[0]}{'-baked' if x[1] else ''}")
def case(request):
    """A problem and its plan's kernels, with run-time sizes or baked ones."""
    i, baked = request.param
    kind, mb, G, ic, oc, isp, ksz, st, pl, pr, tag, bias, po, tile = CASES[i]
    p = _problem(kind, mb, G, ic, oc, isp, ksz, st, pl, pr, tag, bias, po)
    return p, _kernels(p, tile, baked)


def test_solver_kernels_printed(case):
    """Every pack, data and fill kernel of the plans above is printed (no loopy)."""
    _, plan = case
    for family, problem, build, _ in plan.kernels:
        if family in ("conv_igemm_pack_wei", "conv_igemm_data"):
            src = build(problem)
            assert src.__class__.__name__ == "KernelSource", family


def test_printed_equals_loopy(engine, case):
    p, plan = case
    scratch_n = plan.scratch + 64
    bufs_base = {"SRC": _rand(p.src_n + 8, 1), "DST": _rand(p.dst_n + 8, 2),
                 "WEI": _rand(p.wei_n, 4), "BIAS": _rand(max(p.bias_n, 1), 5),
                 "SCRATCH": _rand(scratch_n, 6)}
    for family, problem, _, named in plan.kernels:
        if family == "conv_igemm_pack_wei":
            ours, theirs = wei_pack_source(problem), ig.build_wei_pack_loopy(problem)
        elif family == "conv_igemm_data":
            ours = (igemm_data_source(problem) if all(problem.taps)
                    else igemm_fill_source(problem))
            theirs = ig.build_igemm_data_loopy(problem)
        else:
            continue
        bufs, values = {}, {}
        for k, v in named.items():
            if isinstance(v, Ref):
                if k in ours.arg_names:
                    bufs[k] = bufs_base[v.key.upper()]
            else:
                values[k] = int(v)
        _compare(engine, ours, theirs, bufs, values)


def _data_problem(case_index=0):
    kind, mb, G, ic, oc, isp, ksz, st, pl, pr, tag, bias, po, tile = CASES[case_index]
    p = _problem(kind, mb, G, ic, oc, isp, ksz, st, pl, pr, tag, bias, po)
    plan = _kernels(p, tile)
    return next(pr for f, pr, _, _ in plan.kernels if f == "conv_igemm_data")


@pytest.mark.parametrize("change", [
    {"tile": ig.TileParams(rows=4, cols=4, vec=1, wg=(1, 1))},     # scalar tile
    {"tile": ig.TileParams(rows=4, cols=4, vec=4, wg=(4, 16))},    # a GPU work-group
    {"post_ops": (("binary", 0, 0, ()),)},                          # binary post-ops
])
def test_declines(change):
    dp = _data_problem()
    assert igemm_data_source(replace(dp, **change)) is None


# backward weights: (mb, G, ic, oc, in spatial, kernel, strides, pad l, pad r, tag, splits,
# tile)
WCASES = [
    (2, 1, 3, 16, (9, 11), (3, 3), (2, 2), (1, 1), (1, 1), "nhwc", 1, T8),  # 27 rows: ragged
    (2, 2, 8, 12, (7, 6), (3, 3), (1, 1), (1, 1), (1, 1), "nhwc", 2, T4),   # slices, panel
    (1, 1, 4, 8, (6, 7), (1, 3), (1, 2), (0, 1), (0, 1), "nchw", 1, T16),   # staged, 16 wide
    (2, 1, 16, 8, (5, 5), (3, 3), (1, 1), (1, 1), (1, 1), "nhwc", 5, T8),   # 5 slices
]


@pytest.fixture(scope="module", params=range(len(WCASES)))
def wcase(request):
    """A backward-weights problem and its plan's kernels."""
    mb, G, ic, oc, isp, ksz, st, pl, pr, tag, splits, tile = WCASES[request.param]
    p = _problem("bwd_w", mb, G, ic, oc, isp, ksz, st, pl, pr, tag, False, ())
    plan = _StubPlan()
    solver._weights(plan, p, {"splits": splits}, tile)
    return p, plan


def test_weights_printed_equals_loopy(engine, wcase):
    """Bitwise: the tile sums over (image, outer point) then the innermost point, in loopy's
    order; the slices added in order."""
    p, plan = wcase
    base = {"SRC": _rand(p.src_n + 8, 1), "DST": _rand(p.dst_n + 8, 2),
            "WEI": _rand(p.wei_n, 4), "SCRATCH": _rand(plan.scratch + 64, 6)}
    seen = set()
    for family, problem, build, named in plan.kernels:
        if family == "conv_igemm_wei":
            ours, theirs = igemm_wei_source(problem), ig.build_igemm_wei_loopy(problem)
        elif family == "conv_igemm_wei_reduce":
            ours, theirs = wei_reduce_source(problem), ig.build_wei_reduce_loopy(problem)
        else:
            continue
        assert build(problem) == ours
        seen.add(family)
        bufs = {k: base[v.key.upper()] for k, v in named.items()
                if isinstance(v, Ref) and k in ours.arg_names}
        values = {k: int(v) for k, v in named.items() if not isinstance(v, Ref)}
        _compare(engine, ours, theirs, bufs, values)
    assert "conv_igemm_wei" in seen


def test_weights_declines():
    mb, G, ic, oc, isp, ksz, st, pl, pr, tag, splits, tile = WCASES[0]
    p = _problem("bwd_w", mb, G, ic, oc, isp, ksz, st, pl, pr, tag, False, ())
    plan = _StubPlan()
    solver._weights(plan, p, {"splits": 1}, tile)
    wp = next(pr for f, pr, _, _ in plan.kernels if f == "conv_igemm_wei")
    assert igemm_wei_source(replace(wp, tile=ig.TileParams(rows=4, cols=4, vec=1))) is None
    assert igemm_wei_source(replace(wp, tile=ig.TileParams(rows=4, cols=4, vec=4,
                                                           wg=(4, 16)))) is None
