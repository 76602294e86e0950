"""kernels.conv_winograd_source writes the Winograd transforms loopy generates
(kernels.conv_winograd), text aside: the same kernel name, argument names and order,
work-group size and launch grid, and the same results. Each covered problem's kernel runs
beside loopy's on the same random buffers (inputs, and outputs filled beforehand, so that
what either leaves unwritten is compared too): every stage; channels-last, channels-first and
strided activations with an offset; padding 0, 1, 2 and asymmetric; partial tiles; several
images with a chunk start ``n0``; groups; a bias; the filter transform along the output
channels, across 16 x 16 channels and through the local tile (flipped or not); the weight
gradient along either channel dim with one or two slices. The problems it does not cover
return None (they go to loopy). Convolutions through the primitives, against the numpy
reference, are in tests/primitives/conv (and under Oclgrind in test_conv_kernels_oclgrind)."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

from pydnnl.constants import algorithm as A
from pydnnl.kernels.conv_winograd import (
    WinogradProblem,
    build_winograd,
    build_winograd_loopy,
    wgrad_along_oc,
    winograd_runtime,
)
from pydnnl.kernels.conv_winograd_source import winograd_source
from pydnnl.kernels.sizevars import size_var
from pydnnl.kernels.source import KernelSource, source_from_loopy

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from printed_kernels import run_source  # noqa: E402

_NO_SPACE = dict(nb=0, src_sp=(), dst_sp=(), padding_l=())


def _act(kind: str, N: int, C: int, H: int, W: int) -> tuple:
    """An activation layout ``[N, C, H, W]``: nhwc, nchw, or nhwc inside a larger tensor
    (padded rows and channels, an offset)."""
    if kind == "nhwc":
        st, off0 = (H * W * C, 1, W * C, C), 0
    elif kind == "nchw":
        st, off0 = (C * H * W, H * W, W, 1), 0
    else:
        cp, wp = C + 3, W + 2
        st, off0 = ((H + 1) * wp * cp, 1, wp * cp, cp), 5
    return off0, tuple((1, s, ()) for s in st)


def _wei(kind: str, G: int, OC: int, IC: int) -> tuple:
    """Grouped weights ``[G, OC, IC, 3, 3]``: gkio (``[G][3][3][IC][OC]``) or oihw."""
    if kind == "gkio":
        st = (9 * IC * OC, 1, OC, 3 * IC * OC, IC * OC)
    else:
        st = (OC * IC * 9, IC * 9, 9, 3, 1)
    if G == 1:
        st = (0,) + st[1:]
    return 0, tuple((1, s, ()) for s in st)


def _swap(layout: tuple) -> tuple:
    off0, per = layout
    per = list(per)
    per[1], per[2] = per[2], per[1]
    return off0, tuple(per)


def _extent(layout: tuple, dims) -> int:
    off0, per = layout
    return int(off0) + sum((d - 1) * st for d, (_, st, _) in zip(dims, per)) + 1


def _run(engine, src: KernelSource, bufs: dict, values: dict) -> dict:
    return run_source(engine, src, bufs, values)


def _compare(engine, p: WinogradProblem, bufs: dict, values: dict) -> None:
    ours = winograd_source(p)
    assert ours is not None
    theirs = source_from_loopy(build_winograd_loopy(p))
    for field in ("name", "arg_names", "global_size", "local_size", "grid", "build_options"):
        assert getattr(ours, field) == getattr(theirs, field), field
    assert build_winograd(p) is ours or build_winograd(p) == ours
    a = _run(engine, ours, bufs, values)
    b = _run(engine, theirs, bufs, values)
    for k in bufs:
        scale = max(1.0, float(np.abs(b[k]).max()))
        np.testing.assert_allclose(a[k], b[k], rtol=0, atol=1e-6 * scale, err_msg=k)


def _rand(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def _tile_case(stage, kind, G, Cg, H, W, pl, pr, nb, mb, bias=False):
    C = G * Cg
    OH, OW = H + pl[0] + pr[0] - 2, W + pl[1] + pr[1] - 2
    if stage == "input":
        act = _act(kind, mb, C, H, W)
        dims = (mb, C, H, W)
    else:
        act = _act(kind, mb, C, OH, OW)
        dims = (mb, C, OH, OW)
    common = dict(nb=nb, groups=G, icg=Cg, ocg=Cg, src_sp=(H, W), dst_sp=(OH, OW),
                  padding_l=pl, act=act, act_n=_extent(act, dims))
    if bias:
        common.update(bias=(2, ((1, 1, ()),)), bias_n=C + 2)
    p, values = winograd_runtime(WinogradProblem(stage, **common))
    assert p.runtime
    T = values["ntiles"]
    off = 7
    n_act = _extent(act, dims) + 3
    n_tr = off + 16 * G * T * Cg + 5
    name_act = {"input": "src", "dy": "dy", "output": "dst"}[stage]
    name_tr = {"input": "v", "dy": "u", "output": "mm"}[stage]
    bufs = {name_act: _rand(n_act, 1), name_tr: _rand(n_tr, 2)}
    if bias:
        bufs["bias"] = _rand(C + 2, 3)
    n0 = mb - nb
    values.update({"n0": n0, f"{'m' if stage == 'output' else name_tr}_off": off})
    return p, bufs, values


TILE_CASES = [
    # stage, layout, groups, channels a group, H, W, pad_l, pad_r, images a chunk, mb
    ("input", "nhwc", 1, 64, 7, 5, (1, 1), (1, 1), 1, 1),
    ("input", "nhwc", 1, 16, 6, 6, (1, 1), (1, 1), 2, 3),
    ("input", "nchw", 2, 12, 5, 8, (0, 2), (1, 0), 1, 2),
    ("input", "strided", 1, 24, 7, 7, (2, 2), (2, 2), 2, 2),  # backward data's padding
    ("input", "nhwc", 3, 40, 4, 9, (0, 0), (0, 0), 1, 1),
    ("dy", "nhwc", 1, 64, 7, 5, (1, 1), (1, 1), 1, 1),
    ("dy", "nchw", 2, 12, 6, 6, (1, 1), (1, 1), 2, 3),
    ("dy", "strided", 1, 24, 5, 8, (0, 2), (1, 0), 1, 2),
    ("output", "nhwc", 1, 64, 7, 5, (1, 1), (1, 1), 1, 1),
    ("output", "nchw", 2, 12, 5, 8, (0, 2), (1, 0), 2, 3),
    ("output", "strided", 1, 24, 6, 6, (1, 1), (1, 1), 1, 2),
]


@pytest.mark.parametrize("case, bias", [(c, b) for c in TILE_CASES
                                         for b in ((False, True) if c[0] == "output"
                                                   else (False,))],
                         ids=lambda v: "-".join(map(str, v[:5])) if isinstance(v, tuple)
                         else f"bias{int(v)}")
def test_tile_stage_equals_loopy(engine, case, bias):
    """Only the output stage adds a bias."""
    p, bufs, values = _tile_case(*case, bias=bias)
    _compare(engine, p, bufs, values)


FILTER_CASES = [
    # weights, groups, OCg, ICg, flip (backward data: channel roles exchanged)
    ("gkio", 1, 64, 64, False),    # along OC, 64 a work-group
    ("gkio", 1, 64, 64, True),     # flipped: through the local 16 x 16 tile
    ("gkio", 2, 24, 40, True),     # across 16 x 16 channels without the tile (8 x 8)
    ("oihw", 1, 32, 48, False),    # across, through the tile
    ("oihw", 2, 20, 12, False),    # across, no tile
    ("gkio", 3, 48, 8, False),
]


@pytest.mark.parametrize("case", FILTER_CASES, ids=lambda c: "-".join(map(str, c)))
def test_filter_transform_equals_loopy(engine, case):
    kind, G, OCg, ICg, flip = case
    # the plan's forward view: backward data's weights with OC and IC exchanged
    wei = _wei(kind, G, ICg, OCg) if flip else _wei(kind, G, OCg, ICg)
    dims = (G, ICg, OCg, 3, 3) if flip else (G, OCg, ICg, 3, 3)
    n = _extent(wei, dims)
    if flip:
        wei = _swap(wei)
    p = WinogradProblem("filter", **_NO_SPACE, groups=G, icg=ICg, ocg=OCg, wei=wei, wei_n=n,
                        flip=flip)
    off = 3
    bufs = {"wei": _rand(n, 4), "u": _rand(off + 16 * G * ICg * OCg + 2, 5)}
    _compare(engine, p, bufs, {"u_off": off})


WGRAD_CASES = [
    # weights, groups, OCg, ICg, slices
    ("gkio", 1, 64, 64, 1),   # along OC (res2a)
    ("gkio", 2, 24, 40, 2),
    ("oihw", 1, 64, 64, 1),   # along IC, across 16 x 16
    ("oihw", 2, 20, 12, 2),
    ("oihw", 1, 48, 7, 1),
]


@pytest.mark.parametrize("case", WGRAD_CASES, ids=lambda c: "-".join(map(str, c)))
def test_wgrad_transform_equals_loopy(engine, case):
    kind, G, OCg, ICg, S = case
    wei = _wei(kind, G, OCg, ICg)
    n = _extent(wei, (G, OCg, ICg, 3, 3))
    p = WinogradProblem("wgrad", **_NO_SPACE, groups=G, icg=ICg, ocg=OCg, wei=wei, wei_n=n,
                        slices=S, along_oc=wgrad_along_oc(wei))
    off = 9
    bufs = {"mm": _rand(off + 16 * G * S * OCg * ICg + 1, 6), "wei": _rand(n, 7)}
    _compare(engine, p, bufs, {"m_off": off})


def test_declines_what_it_does_not_cover():
    p, _, _ = _tile_case("output", "nhwc", 1, 64, 7, 5, (1, 1), (1, 1), 1, 1)
    assert winograd_source(p) is not None
    relu = ("eltwise", int(A.eltwise_relu), 0.0, 0.0)
    from dataclasses import replace

    assert winograd_source(replace(p, post_ops=(relu,))) is None
    # baked sizes (blocked layouts and binary post-ops keep them)
    baked = WinogradProblem("input", nb=1, groups=1, icg=64, ocg=64, src_sp=(7, 5),
                            dst_sp=(7, 5), padding_l=(1, 1),
                            act=_act("nhwc", 1, 64, 7, 5), act_n=7 * 5 * 64)
    assert winograd_source(baked) is None
    # a partial work-group along channels (67: no divisor from 16 to 64): loopy peels it
    q, _, _ = _tile_case("input", "nhwc", 1, 67, 5, 5, (1, 1), (1, 1), 1, 1)
    assert winograd_source(q) is None
    # blocked weights, depthwise channel counts, a run-time slice count
    blocked = (0, ((1, 0, ()), (16, 1, ((16, 16),)), (1, 16, ()), (1, 0, ()), (1, 0, ())))
    assert winograd_source(WinogradProblem("filter", **_NO_SPACE, groups=1, icg=16, ocg=16,
                                           wei=blocked, wei_n=16 * 16 * 9)) is None
    dw = WinogradProblem("filter", **_NO_SPACE, groups=32, icg=1, ocg=1,
                         wei=_wei("gkio", 32, 1, 1), wei_n=32 * 9)
    assert winograd_source(dw) is None
    wg = WinogradProblem("wgrad", **_NO_SPACE, groups=1, icg=64, ocg=64,
                         wei=_wei("gkio", 1, 64, 64), wei_n=64 * 64 * 9,
                         slices=size_var("nslices"), along_oc=True)
    assert winograd_source(wg) is None


def test_same_transform_matrices():
    from pydnnl.kernels import conv_winograd as L
    from pydnnl.kernels import conv_winograd_source as S

    assert (S.BT, S.G_, S.AT, S.G2, S.AT2) == (L.BT, L.G_, L.AT, L.G2, L.AT2)
