"""kernels.copy_source writes the kernels loopy generates for the CPU plans' im2col
channel-block copy, run-time-size bias gradient, per-channel slice sums and B packer, text
aside: the same kernel name, argument names and order, work-group size and launch grid, and
the same results (the same sums in the same order: compared exactly where loopy's order is
kept). Each covered problem's kernel runs beside loopy's on the same random buffers (outputs
filled beforehand, so what either leaves unwritten is compared too), on every device present
(Intel's CPU runtime and PoCL): channels-last sources inside larger tensors with offsets,
groups, padding and strides and dilations, a chunk start ``n0``, partial work-groups, point
counts below, at and past whole chunks, channel counts below the lanes, ragged panels. The
problems they do not cover return None (they go to loopy)."""
from __future__ import annotations

import pathlib
import sys
from dataclasses import replace

import numpy as np
import pytest

from pydnnl.constants import algorithm
from pydnnl.kernels import gemm as fam
from pydnnl.kernels.channel_sums import (
    ChannelSlices,
    build_channel_slices,
    build_channel_slices_loopy,
)
from pydnnl.kernels.conv_im2col import (
    BiasGradProblem,
    Col2ImProblem,
    EpilogueProblem,
    Im2ColProblem,
    SplitKReduceProblem,
    bias_grad_runtime,
    build_bias_grad,
    build_bias_grad_loopy,
    build_col2im,
    build_col2im_loopy,
    build_epilogue,
    build_epilogue_loopy,
    build_im2col,
    build_im2col_loopy,
    build_splitk_reduce,
    build_splitk_reduce_loopy,
    col2im_runtime,
    epilogue_runtime,
    im2col_runtime,
)
from pydnnl.kernels.copy_source import (
    bias_grad_source,
    channel_slices_source,
    col2im_source,
    epilogue_source,
    im2col_baked_source,
    im2col_rt_source,
    im2col_source,
    pack_b_source,
    splitk_reduce_source,
)
from pydnnl.kernels.source import KernelSource, source_from_loopy

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from printed_kernels import packer_case, run_source  # noqa: E402


def _run(engine, src: KernelSource, bufs: dict, values: dict) -> dict:
    return run_source(engine, src, bufs, values)


def _compare(engine, ours: KernelSource, theirs, bufs: dict, values: dict,
             exact: bool = True) -> None:
    assert ours is not None
    theirs = source_from_loopy(theirs) if not isinstance(theirs, KernelSource) else theirs
    for field in ("name", "arg_names", "global_size", "local_size", "grid", "build_options"):
        assert getattr(ours, field) == getattr(theirs, field), field
    a = _run(engine, ours, bufs, values)
    b = _run(engine, theirs, bufs, values)
    for k in bufs:
        if exact:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        else:
            scale = max(1.0, float(np.abs(b[k]).max()))
            np.testing.assert_allclose(a[k], b[k], rtol=0, atol=1e-6 * scale, err_msg=k)


def _rand(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


# {{{ im2col

def _nhwc(N, C, H, W, padded: bool) -> tuple:
    """``[N, C, H, W]`` channels-last, dense or inside a larger tensor with an offset."""
    if not padded:
        return 0, ((1, H * W * C, ()), (1, 1, ()), (1, W * C, ()), (1, C, ()))
    wp = W + 2
    return 5, ((1, (H + 1) * wp * C, ()), (1, 1, ()), (1, wp * C, ()), (1, C, ()))


# (G, ICg, H, W, kernel, strides, dilates, padding_l, padding_r, mb, nb, n0, order, block,
#  padded source)
_IM2COL = [
    (1, 64, 56, 56, (1, 1), (1, 1), (0, 0), (0, 0), (0, 0), 1, 1, 0, (1, 2, 3, 4, 0, 5, 6),
     16, False),                                      # res2a_branch2c's backward weights
    (1, 3, 20, 22, (7, 7), (2, 2), (0, 0), (3, 3), (2, 3), 1, 1, 0, (1, 3, 4, 2, 0, 5, 6),
     3, False),                                       # conv1's, smaller
    (1, 32, 9, 70, (3, 3), (1, 1), (0, 0), (1, 1), (1, 1), 3, 2, 1, (1, 3, 4, 2, 0, 5, 6),
     16, True),                                       # a partial work-group, n0, offset
    (2, 32, 8, 9, (3, 3), (2, 2), (1, 0), (1, 2), (0, 1), 2, 2, 0, (1, 2, 3, 4, 0, 5, 6),
     16, False),                                      # groups, dilation, asymmetric pads
    (1, 16, 7, 7, (1, 1), (2, 2), (0, 0), (0, 0), (0, 0), 2, 2, 0, (1, 2, 3, 4, 0, 5, 6),
     16, True),                                       # strided 1x1
]


@pytest.mark.parametrize("case", _IM2COL, ids=range(len(_IM2COL)))
def test_im2col_equals_loopy(engine, case):
    G, ICg, H, W, ks, st, dl, pl, pr, mb, nb, n0, order, B, padded = case
    OH = (H + pl[0] + pr[0] - ((ks[0] - 1) * (dl[0] + 1) + 1)) // st[0] + 1
    OW = (W + pl[1] + pr[1] - ((ks[1] - 1) * (dl[1] + 1) + 1)) // st[1] + 1
    C = G * ICg
    src = _nhwc(mb, C, H, W, padded)
    n_src = src[0] + sum((d - 1) * s for d, (_, s, _) in zip((mb, C, H, W), src[1])) + 3
    p = Im2ColProblem(nb=nb, groups=G, icg=ICg, src_sp=(H, W), dst_sp=(OH, OW), kernel=ks,
                      strides=st, dilates=dl, padding_l=pl, src=src, src_n=n_src, col_n=-1,
                      order=order, per_item=64, ic_block=B, lanes=16)
    q, sizes = im2col_runtime(p)
    assert q is not p
    ours = im2col_source(q)
    assert build_im2col(q) == ours
    col_n = nb * C * ks[0] * ks[1] * OH * OW
    bufs = {"src": _rand(n_src, 1), "col": _rand(col_n + 11, 2)}
    _compare(engine, ours, build_im2col_loopy(q), bufs,
             {"n0": n0, "col_off": 7, **sizes})


def _nchw(N, C, H, W, padded: bool) -> tuple:
    if not padded:
        return 0, ((1, C * H * W, ()), (1, H * W, ()), (1, W, ()), (1, 1, ()))
    wp = W + 3
    return 4, ((1, (C + 1) * H * wp, ()), (1, H * wp, ()), (1, wp, ()), (1, 1, ()))


# (G, ICg, H, W, kernel, strides, dilates, padding_l, padding_r, mb, nb, n0, order,
#  source kind, padded source, per_item, lanes)
_PAD = (0, 1, 3, 4, 5, 6, 2)  # the implicit-GEMM zero-padding copy: channels innermost
_IM2COL_BAKED = [
    (1, 3, 30, 30, (1, 1), (1, 1), (0, 0), (3, 3), (2, 2), 1, 1, 0, _PAD, "nhwc", False,
     64, 16),                                         # conv1's stage copy, smaller
    (1, 3, 224, 224, (1, 1), (1, 1), (0, 0), (3, 3), (2, 2), 2, 2, 0, _PAD, "nhwc", False,
     64, 16),                                         # conv1's, two images
    (1, 5, 9, 11, (1, 1), (1, 1), (0, 0), (1, 0), (1, 2), 3, 2, 1, _PAD, "nhwc", True,
     64, 16),                                         # n0, an offset, asymmetric pads
    (1, 6, 8, 9, (1, 1), (1, 1), (0, 0), (2, 1), (2, 1), 2, 2, 0, tuple(range(7)), "nchw",
     True, 64, 16),                                   # direct's dense nchw padding copy
    (2, 4, 9, 10, (3, 3), (2, 1), (0, 1), (1, 2), (1, 2), 2, 2, 0, tuple(range(7)), "nchw",
     False, 64, 16),                                  # a 3x3 column, loops in a work-item
    (1, 8, 12, 12, (3, 3), (1, 1), (0, 0), (1, 1), (1, 1), 1, 1, 0, (1, 0, 5, 6, 3, 4, 2),
     "nchw", False, 4, 256),                          # a GPU's launch shape
]


def _baked_problem(case) -> tuple:
    """(problem, its buffers, n0) of an ``_IM2COL_BAKED``-style case."""
    G, ICg, H, W, ks, st, dl, pl, pr, mb, nb, n0, order, kind, padded, pi, lanes = case
    OH = (H + pl[0] + pr[0] - ((ks[0] - 1) * (dl[0] + 1) + 1)) // st[0] + 1
    OW = (W + pl[1] + pr[1] - ((ks[1] - 1) * (dl[1] + 1) + 1)) // st[1] + 1
    C = G * ICg
    src = (_nhwc if kind == "nhwc" else _nchw)(mb, C, H, W, padded)
    n_src = src[0] + sum((d - 1) * s for d, (_, s, _) in zip((mb, C, H, W), src[1])) + 3
    p = Im2ColProblem(nb=nb, groups=G, icg=ICg, src_sp=(H, W), dst_sp=(OH, OW), kernel=ks,
                      strides=st, dilates=dl, padding_l=pl, src=src, src_n=n_src, col_n=-1,
                      order=order, per_item=pi, lanes=lanes)
    col_n = nb * C * ks[0] * ks[1] * OH * OW
    return p, {"src": _rand(n_src, 1), "col": _rand(col_n + 11, 2)}, n0


@pytest.mark.parametrize("case", _IM2COL_BAKED, ids=range(len(_IM2COL_BAKED)))
def test_im2col_baked_equals_loopy(engine, case):
    p, bufs, n0 = _baked_problem(case)
    if case[13] == "nhwc" and p.icg < 16:
        assert im2col_runtime(p) == (p, {})  # (what the plans ask for: baked)
    ours = im2col_baked_source(p)
    assert build_im2col(p) == ours
    _compare(engine, ours, build_im2col_loopy(p), bufs, {"n0": n0, "col_off": 7})


# (the baked cases' index) a GPU's launch shape of them: 256 work-items, 4 rows each (a ragged
# last row block where the rows do not divide), 32-bit indices; plus conv1's forward column
# (rows of taps and channels), smaller
_ROWS_CASES = [0, 2, 4, 5, (1, 3, 20, 22, (7, 7), (2, 2), (0, 0), (3, 3), (2, 3), 2, 2, 0,
                            (0, 5, 6, 1, 3, 4, 2), "nhwc", True, 4, 256)]


@pytest.mark.parametrize("case", _ROWS_CASES, ids=range(len(_ROWS_CASES)))
def test_im2col_baked_rows_per_item_equals_loopy(engine, case):
    """``rows_per_item`` and ``index32`` (the printer's alone) copy what loopy's kernel of
    the same problem copies, into the same places, and nothing else."""
    p, bufs, n0 = _baked_problem(_IM2COL_BAKED[case] if isinstance(case, int) else case)
    ours = im2col_baked_source(replace(p, wg=256, rows_per_item=4, index32=True))
    assert ours is not None and "long const a0" not in ours.source
    vals = {"n0": n0, "col_off": 7}
    a = _run(engine, ours, bufs, vals)
    b = _run(engine, source_from_loopy(build_im2col_loopy(p)), bufs, vals)
    np.testing.assert_array_equal(a["col"], b["col"])


def test_im2col_declines():
    base = dict(nb=1, groups=1, icg=16, src_sp=(8, 8), dst_sp=(8, 8), kernel=(1, 1),
                strides=(1, 1), dilates=(0, 0), padding_l=(0, 0),
                src=_nhwc(1, 16, 8, 8, False), src_n=1024, col_n=-1,
                order=(1, 2, 3, 4, 0, 5, 6), per_item=64, lanes=16)
    # no channel block (the plain grid), baked sizes, one spatial dim: loopy
    q, _ = im2col_runtime(Im2ColProblem(**base, ic_block=0))
    assert im2col_source(q) is None and im2col_baked_source(q) is None
    assert im2col_source(Im2ColProblem(**base, ic_block=16)) is None
    assert im2col_baked_source(Im2ColProblem(**base, ic_block=16)) is None
    blocked = (0, ((1, 1024, ()), (1, 16, ((8, 1),)), (1, 128, ()), (1, 16, ())))
    assert im2col_baked_source(Im2ColProblem(**dict(base, src=blocked))) is None
    q, _ = im2col_runtime(Im2ColProblem(**dict(
        base, src_sp=(8,), dst_sp=(8,), kernel=(1,), strides=(1,), dilates=(0,),
        padding_l=(0,), src=(0, ((1, 128, ()), (1, 1, ()), (1, 16, ()))),
        order=(1, 2, 3, 0, 4)), ic_block=16))
    assert im2col_source(q) is None

# }}}


# {{{ bias gradient

# (mb, channels, points, layout kind, wg)
_BIAS = [
    (1, 256, 3136, "nhwc", 64), (1, 64, 12544, "nhwc", 64), (2, 48, 100, "nhwc", 64),
    (3, 16, 1, "nhwc", 16), (2, 24, 256, "nchw", 64), (1, 8, 700, "nchw", 32),
    (1, 256, 197, "part", 64), (4, 32, 512, "part", 128),
]


def _t_layout(kind, mb, C, P):
    if kind == "nhwc":
        return 3, ((1, P * C, ()), (1, 1, ()), (1, C, ()))
    if kind == "nchw":
        return 0, ((1, C * P, ()), (1, P, ()), (1, 1, ()))
    return 9, ((1, P * C, ()), (1, 1, ()), (1, C, ()))  # the slices' sums (one "image")


@pytest.mark.parametrize("case", _BIAS, ids=range(len(_BIAS)))
def test_bias_grad_equals_loopy(engine, case):
    mb, C, P, kind, wg = case
    t = _t_layout(kind, mb, C, P)
    n_t = t[0] + mb * C * P + 5
    bias = (2, ((1, 1, ()),))
    p = BiasGradProblem(mb=mb, channels=C, sp=(P,), t=t, t_n=n_t, bias=bias, bias_n=C + 4,
                        wg=wg)
    q, sizes = bias_grad_runtime(p)
    ours = bias_grad_source(q)
    assert build_bias_grad(q) == ours
    bufs = {"t": _rand(n_t, 3), "bias": _rand(C + 4, 4)}
    _compare(engine, ours, build_bias_grad_loopy(q), bufs, sizes)


def test_bias_grad_declines():
    p = BiasGradProblem(mb=1, channels=16, sp=(64,), t=_t_layout("nhwc", 1, 16, 64), t_n=1024,
                        bias=(0, ((1, 1, ()),)), bias_n=16, wg=64)
    assert bias_grad_source(p) is None  # baked sizes: loopy's other kernel
    q, _ = bias_grad_runtime(p)
    from dataclasses import replace
    assert bias_grad_source(replace(q, wg=48)) is None

# }}}


# {{{ channel slices

@pytest.mark.parametrize("C, row_stride, wg, nrows, rps, nslices",
                         [(256, 256, 16, 3136, 196, 16), (64, 64, 16, 12544, 100, 126),
                          (24, 40, 16, 50, 7, 8), (3, 3, 16, 9, 16, 1), (48, 48, 64, 33, 4, 9)])
def test_channel_slices_equals_loopy(engine, C, row_stride, wg, nrows, rps, nslices):
    p = ChannelSlices(channels=C, row_stride=row_stride, wg=wg)
    ours = channel_slices_source(p)
    assert build_channel_slices(p) == ours
    n_t = 5 + nrows * row_stride
    bufs = {"t": _rand(n_t, 5), "part": _rand(3 + nslices * C + 8, 6)}
    _compare(engine, ours, build_channel_slices_loopy(p), bufs,
             {"t_off": 5, "part_off": 3, "nrows": nrows, "rps": rps, "nslices": nslices})

# }}}


# {{{ B packer

@pytest.mark.parametrize("n, ldb, width, k", [(256, 256, 32, 3136), (64, 64, 48, 40),
                                              (100, 130, 48, 17), (16, 16, 16, 5),
                                              (96, 96, 32, 1)])
def test_pack_b_equals_loopy(engine, n, ldb, width, k):
    src = fam.GemmProblem(m=1, n=n, k=1, ldb=ldb, runtime_offsets=True, runtime_k=True)
    params = dict(fam.normalize_params(None), cols=width, packed_b=True)
    if width == 48:
        params.update(rows=8, vec=16)
    pk = fam.pack_b(src, params)
    ours = pack_b_source(pk)
    npan = -(-n // width)
    bufs = {"b": _rand(4 + k * ldb, 7), "bp": _rand(6 + npan * width * k + 3, 8)}
    _compare(engine, ours, pk.build(), bufs, {"b_off": 4, "bp_off": 6, "ksize": k})


# (n, k, ldb, trans_b, count, stride_b, width): compile-time k, one or several B
_PACK_BAKED = [(32, 3136, 256, False, 8, 32, 32),     # res2a's weight gradient into panels
               (64, 40, 64, False, 1, 0, 32), (100, 17, 130, False, 3, 140, 48),
               (70, 24, 30, True, 1, 0, 32), (48, 9, 12, True, 2, 48 * 12 + 5, 16)]


@pytest.mark.parametrize("case", _PACK_BAKED, ids=range(len(_PACK_BAKED)))
def test_pack_b_baked_equals_loopy(engine, case):
    k, width, count = case[1], case[6], case[4]
    pk, npan, span = packer_case(case)
    ours = pack_b_source(pk)
    bufs = {"b": _rand(4 + span + 3, 7), "bp": _rand(6 + count * npan * width * k + 3, 8)}
    _compare(engine, ours, pk.build(), bufs, {"b_off": 4, "bp_off": 6})


def test_pack_b_declines():
    params = dict(fam.normalize_params(None), cols=32, packed_b=True)
    for src in (fam.GemmProblem(m=1, n=64, k=8, ldb=8, trans_b=True, runtime_k=True,
                                runtime_offsets=True),
                fam.GemmProblem(m=1, n=64, k=8, ldb=64),
                fam.GemmProblem(m=1, n=64, k=8, ldb=64, b_offset=3, runtime_offsets=True)):
        assert pack_b_source(fam.pack_b(src, params)) is None

# }}}


# {{{ col2im and the run-time im2col without channel blocks

_RELU = ("eltwise", int(algorithm.eltwise_relu), 0.0, 0.0)
_LEAKY = ("eltwise", int(algorithm.eltwise_relu), 0.1, 0.0)
# (G, ICg, H, W, kernel, strides, dilates, padding_l, padding_r, mb, nb, n0, column order,
#  tag, padded, bias, post-ops, run-time sizes)
_COL2IM = [
    (1, 3, 20, 22, (7, 7), (2, 2), (0, 0), (3, 3), (2, 3), 1, 1, 0, (0, 3, 4, 5, 6, 1, 2),
     "nhwc", False, False, (), False),                # conv1's backward data, smaller: baked
    (1, 32, 9, 10, (3, 3), (2, 2), (0, 0), (1, 1), (1, 1), 2, 2, 0, (0, 3, 4, 5, 6, 1, 2),
     "nhwc", False, False, (), True),                 # 3x3/2 channels-last: a1 in a loop
    (1, 16, 7, 6, (3, 3), (1, 1), (0, 0), (1, 1), (1, 1), 3, 2, 1, (1, 2, 3, 4, 0, 5, 6),
     "nhwc", True, True, (("sum", 1.0, 0.0), _RELU), True),   # n0, an offset, bias, sum
    (2, 8, 8, 9, (3, 3), (2, 1), (1, 0), (1, 2), (0, 1), 2, 2, 0, (1, 2, 3, 4, 0, 5, 6),
     "nchw", False, True, (_LEAKY,), True),           # groups, dilation, the width on lanes
    (1, 4, 19, 5, (1, 1), (2, 2), (0, 0), (0, 0), (0, 0), 1, 1, 0, (0, 1, 2, 3, 4, 5, 6),
     "nchw", True, False, (("sum", 0.5, 0.0),), False),       # baked channels-first
    (2, 16, 6, 6, (3, 3), (1, 1), (0, 0), (1, 1), (1, 1), 2, 2, 0, (0, 3, 4, 5, 6, 1, 2),
     "nhwc", False, False, (), False),                # baked, groups
]


def _col2im_problem(case):
    G, ICg, H, W, ks, st, dl, pl, pr, mb, nb, n0, order, tag, padded, bias, po, rt = case
    OH = (H + pl[0] + pr[0] - ((ks[0] - 1) * (dl[0] + 1) + 1)) // st[0] + 1
    OW = (W + pl[1] + pr[1] - ((ks[1] - 1) * (dl[1] + 1) + 1)) // st[1] + 1
    C = G * ICg
    out = (_nhwc if tag == "nhwc" else _nchw)(mb, C, H, W, padded)
    n_out = out[0] + sum((d - 1) * s for d, (_, s, _) in zip((mb, C, H, W), out[1])) + 3
    p = Col2ImProblem(nb=nb, groups=G, icg=ICg, src_sp=(H, W), dst_sp=(OH, OW), kernel=ks,
                      strides=st, dilates=dl, padding_l=pl, out=out, out_n=n_out, col_n=-1,
                      order=order, bias=(1, ((1, 1, ()),)) if bias else None,
                      bias_n=C + 2 if bias else 0, post_ops=po, per_item=64)
    col_n = nb * C * ks[0] * ks[1] * OH * OW
    return p, n_out, col_n


@pytest.mark.parametrize("case", _COL2IM, ids=range(len(_COL2IM)))
def test_col2im_equals_loopy(engine, case):
    """Bitwise: each point's taps summed in loopy's order, then bias and post-ops."""
    p, n_out, col_n = _col2im_problem(case)
    if case[-1]:
        q, sizes = col2im_runtime(p)
        assert q is not p
    else:  # baked: conv1's (fewer than 16 channels, channels-last) or as asked
        q, sizes = p, {}
        if case[1] < 16 and case[13] == "nhwc":
            assert col2im_runtime(p) == (p, {})
    ours = col2im_source(q)
    assert build_col2im(q) == ours
    bufs = {"col": _rand(col_n + 9, 1), "out": _rand(n_out, 2)}
    if q.bias is not None:
        bufs["bias"] = _rand(q.bias_n, 3)
    _compare(engine, ours, build_col2im_loopy(q), bufs,
             {"n0": case[11], "col_off": 9, **sizes})


@pytest.mark.parametrize("printer", ["col2im", "epilogue"])
def test_grid_printers_decline(printer):
    """col2im's and the epilogue's printers leave sums with a zero point and binary post-ops
    to loopy."""
    from dataclasses import replace
    p, source = ((_col2im_problem(_COL2IM[1])[0], col2im_source) if printer == "col2im"
                 else (_epi_problem(_EPI[0])[0], epilogue_source))
    assert source(replace(p, post_ops=(("sum", 1.0, 2.0),))) is None
    binary = ("binary", int(algorithm.binary_add), 1, ((1, 0, ()),) * 4)
    assert source(replace(p, post_ops=(binary,))) is None


# {{{ the im2col + GEMM epilogue

# (dst tag, accumulator (None: in place), mb, nb, n0, C, H, W, bias, post-ops, sum done,
#  per item, run-time sizes)
_SUM_RELU = (("sum", 0.5, 0.0), _RELU)
_EPI = [
    ("nchw", "nhwc", 3, 2, 1, 12, 5, 7, True, _SUM_RELU, False, 64, False),   # a chunk, n0
    ("nhwc", "nhwc", 2, 2, 0, 20, 3, 5, True, (_LEAKY,), False, 1, True),
    ("nhwc", None, 2, 2, 0, 24, 4, 3, True, _SUM_RELU, True, 4, True),         # sum done
    ("nchw", None, 1, 1, 0, 6, 9, 11, False, (("sum", 1.0, 0.0),), False, 64, False),
    ("nhwc", "nhwc", 2, 2, 0, 3, 7, 7, False, (), False, 64, False),           # 3 channels
]


def _epi_problem(case):
    tag, acc, mb, nb, n0, C, H, W, bias, po, done, pi, rt = case
    lay = _nhwc if tag == "nhwc" else _nchw
    dst = lay(mb, C, H, W, not rt)  # (run-time forms need the points to fold: dense)
    n_dst = dst[0] + sum((d - 1) * s for d, (_, s, _) in zip((mb, C, H, W), dst[1])) + 3
    acc_lay = None if acc is None else _nhwc(nb, C, H, W, False)
    p = EpilogueProblem(nb=nb, channels=C, sp=(H, W), dst=dst, dst_n=n_dst, acc=acc_lay,
                        acc_n=-1 if acc else 0, bias=(2, ((1, 1, ()),)) if bias else None,
                        bias_n=C + 2 if bias else 0, post_ops=po, sum_done=done, per_item=pi)
    return p, n_dst, nb * C * H * W


@pytest.mark.parametrize("case", _EPI, ids=range(len(_EPI)))
def test_epilogue_equals_loopy(engine, case):
    """Bitwise: the accumulator (or dst itself) plus the bias, then the post-ops."""
    p, n_dst, n_acc = _epi_problem(case)
    q, sizes = epilogue_runtime(p) if case[-1] else (p, {})
    assert (q is not p) == case[-1]
    ours = epilogue_source(q)
    assert build_epilogue(q) == ours
    bufs = {"dst": _rand(n_dst, 1)}
    if q.acc is not None:
        bufs["acc"] = _rand(n_acc + 5, 2)
    if q.bias is not None:
        bufs["bias"] = _rand(q.bias_n, 3)
    _compare(engine, ours, build_epilogue_loopy(q), bufs,
             {"n0": case[4], "acc_off": 5, **sizes})


# (G, ICg, H, W, kernel, strides, dilates, padding_l, padding_r, mb, nb, n0, order, tag,
#  padded)
_IM2COL_RT = [
    (1, 128, 12, 12, (3, 3), (2, 2), (0, 0), (1, 1), (1, 1), 1, 1, 0, (1, 2, 0, 5, 6, 3, 4),
     "nhwc", False),                                  # v1.5 res3a_branch2b's, smaller
    (1, 8, 9, 10, (3, 3), (1, 1), (0, 0), (1, 1), (1, 1), 3, 2, 1, (0, 1, 2, 3, 4, 5, 6),
     "nchw", True),                                   # the width on the lanes, n0, offset
    (2, 16, 7, 8, (2, 3), (1, 2), (1, 0), (0, 1), (1, 1), 2, 2, 0, (1, 2, 0, 5, 6, 3, 4),
     "nhwc", True),                                   # groups, dilation
]


@pytest.mark.parametrize("case", _IM2COL_RT, ids=range(len(_IM2COL_RT)))
def test_im2col_runtime_plain_equals_loopy(engine, case):
    G, ICg, H, W, ks, st, dl, pl, pr, mb, nb, n0, order, tag, padded = case
    OH = (H + pl[0] + pr[0] - ((ks[0] - 1) * (dl[0] + 1) + 1)) // st[0] + 1
    OW = (W + pl[1] + pr[1] - ((ks[1] - 1) * (dl[1] + 1) + 1)) // st[1] + 1
    C = G * ICg
    src = (_nhwc if tag == "nhwc" else _nchw)(mb, C, H, W, padded)
    n_src = src[0] + sum((d - 1) * s for d, (_, s, _) in zip((mb, C, H, W), src[1])) + 3
    p = Im2ColProblem(nb=nb, groups=G, icg=ICg, src_sp=(H, W), dst_sp=(OH, OW), kernel=ks,
                      strides=st, dilates=dl, padding_l=pl, src=src, src_n=n_src, col_n=-1,
                      order=order, per_item=64)
    q, sizes = im2col_runtime(p)
    assert q is not p
    ours = im2col_rt_source(q)
    assert build_im2col(q) == ours
    col_n = nb * C * ks[0] * ks[1] * OH * OW
    bufs = {"src": _rand(n_src, 1), "col": _rand(col_n + 11, 2)}
    _compare(engine, ours, build_im2col_loopy(q), bufs, {"n0": n0, "col_off": 7, **sizes})

# }}}


# {{{ split-k reduction

@pytest.mark.parametrize("m, n, ldc, beta, wg, splits", [
    (147, 64, 64, 0.0, 64, 3),        # conv1's weight gradient (147 x 64) in slices
    (20, 100, 103, 1.0, 64, 5),       # a partial work-group, C accumulated
    (5, 30, 33, 0.5, 16, 1), (7, 16, 16, -2.0, 64, 0),   # no slice: C untouched
])
def test_splitk_reduce_equals_loopy(engine, m, n, ldc, beta, wg, splits):
    """Bitwise: the slices summed in order, then ``beta * C``."""
    from pydnnl.kernels.sizevars import size_var

    p = SplitKReduceProblem(m=m, n=n, splits=size_var("nsplits"), ldc=ldc, beta=beta, wg=wg)
    ours = splitk_reduce_source(p)
    assert build_splitk_reduce(p) == ours
    bufs = {"part": _rand(3 + max(splits, 1) * m * n, 9), "c": _rand(5 + m * ldc, 10)}
    _compare(engine, ours, build_splitk_reduce_loopy(p), bufs,
             {"part_off": 3, "c_off": 5, "nsplits": splits})

# }}}
