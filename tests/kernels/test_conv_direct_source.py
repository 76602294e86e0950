"""kernels.conv_direct_source writes the direct convolution kernels loopy generates, text aside:
the same kernel name, argument names and order, work-group size and launch grid, and the same
results bit for bit (each tile entry sums the taps in loopy's loop order with the same
statement, then adds the bias and runs the post-ops). Forward, backward data and backward
weights (stride-1 backward data: loopy's kernel stays with strides); 1-D to 3-D; baked sizes
(with a partial last work-group) and run-time ones (the width's last work-group moved back,
bounds tested or not); plain, channels-last and blocked layouts; groups, strides, dilation,
asymmetric padding; channel tiles; bias, sum and eltwise post-ops, binary ones with operands of
other types. Each kernel runs beside loopy's on the same random buffers (outputs filled
beforehand, so what either leaves unwritten is compared too) on every device present. Register
tiles along the width stay with loopy."""
from __future__ import annotations

import pathlib
import sys
from dataclasses import replace

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.constants import algorithm
from pydnnl.conv_shapes import ConvProblem
from pydnnl.kernels.conv_common import grouped_layout
from pydnnl.kernels.conv_direct import (
    DirectParams,
    build_direct,
    build_direct_loopy,
    direct_runtime,
)
from pydnnl.kernels.conv_direct_source import direct_source
from pydnnl.kernels.post_ops import src1_storage
from pydnnl.kernels.reorder import layout_of
from pydnnl.kernels.source import KernelSource, launch_size, source_from_loopy

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from printed_kernels import run_source  # noqa: E402

F32 = dnnl.memory.data_type.f32
RELU = ("eltwise", int(algorithm.eltwise_relu), 0.1, 0.0)
TANH = ("eltwise", int(algorithm.eltwise_tanh), 0.0, 0.0)


def _problem(kind, mb, G, ic, oc, isp, ksz, st, dil, pl, pr, tag, wtag, bias, post_ops):
    osp = tuple((i + a + b - ((k - 1) * (d + 1) + 1)) // s + 1
                for i, k, s, d, a, b in zip(isp, ksz, st, dil, pl, pr))
    md = lambda dims, t: dnnl.memory.desc(list(dims), F32, t)  # noqa: E731
    src, dst = md([mb, ic, *isp], tag), md([mb, oc, *osp], tag)
    wdims = ([G] if G > 1 else []) + [oc // G, ic // G, *ksz]
    wei = md(wdims, wtag)
    nb = oc if kind == "fwd" else ic
    return ConvProblem(
        mb=mb, groups=G, ic=ic, oc=oc, src_spatial=tuple(isp), dst_spatial=osp,
        kernel=tuple(ksz), strides=tuple(st), dilates=tuple(dil), padding_l=tuple(pl),
        padding_r=tuple(pr), kind=kind, src=layout_of(src), wei=grouped_layout(wei, G > 1),
        dst=layout_of(dst), src_n=src.get_size() // 4, wei_n=wei.get_size() // 4,
        dst_n=dst.get_size() // 4, bias=(0, ((1, 1, ()),)) if bias else None,
        bias_n=nb if bias else 0, post_ops=tuple(post_ops))


# (kind, mb, G, ic, oc, in spatial, kernel, strides, dilation, pad l, pad r, tag, weights tag,
#  bias, post-ops, DirectParams, form: "baked" | "runtime" (bounds tested) | "padded" (no bounds
#  tested, as after the solver's padding copies: these problems read inside their inputs))
CASES = [
    ("fwd", 2, 1, 3, 4, (6, 9), (3, 3), (1, 1), (0, 0), (1, 1), (1, 1), "nchw", "oihw", True,
     (), DirectParams(1, 8), "baked"),                       # 9 wide: a partial group
    ("fwd", 1, 2, 4, 6, (7, 8), (3, 2), (2, 1), (1, 0), (2, 0), (1, 1), "nhwc", "goihw", False,
     (("sum", 0.5, 0.0), RELU), DirectParams(3, 4), "baked"),
    ("fwd", 2, 1, 4, 8, (5, 19), (3, 3), (1, 2), (0, 0), (1, 1), (0, 1), "nchw", "oihw", True,
     (TANH,), DirectParams(4, 8), "runtime"),
    ("fwd", 1, 1, 16, 16, (4, 5), (3, 3), (1, 1), (0, 0), (1, 1), (1, 1), "nChw8c",
     "OIhw8i8o", True, (("sum", 1.0, 0.0),), DirectParams(2, 4), "baked"),
    ("fwd", 2, 3, 3, 3, (24,), (5,), (1,), (1,), (0,), (0,), "ncw", "goiw", True, (),
     DirectParams(1, 16), "padded"),                         # depthwise 1-D
    ("fwd", 1, 1, 4, 6, (5, 6), (2, 2), (1, 1), (0, 0), (0, 0), (1, 1), "nchw", "oihw", True,
     (RELU,), DirectParams(2, 4, 1, False), "baked"),        # 32-bit indices
    ("bwd_d", 2, 1, 4, 6, (7, 8), (3, 3), (1, 1), (0, 0), (1, 1), (1, 0), "nchw", "oihw",
     False, (), DirectParams(2, 4), "baked"),
    ("bwd_d", 1, 2, 6, 4, (6, 20), (3, 3), (1, 1), (0, 0), (1, 1), (1, 1), "nhwc", "goihw",
     True, (("sum", 0.25, 0.0), RELU), DirectParams(3, 8), "runtime"),
    ("bwd_d", 2, 1, 4, 4, (5, 18), (3, 3), (1, 1), (1, 1), (4, 4), (4, 4), "nchw", "oihw",
     False, (), DirectParams(1, 16), "padded"),
    ("bwd_d", 1, 1, 2, 3, (3, 4, 5), (2, 2, 3), (1, 1, 1), (0, 1, 0), (0, 1, 1), (1, 0, 1),
     "ncdhw", "oidhw", False, (), DirectParams(1, 4), "baked"),
    ("bwd_w", 2, 1, 3, 4, (6, 9), (3, 3), (1, 1), (0, 0), (1, 1), (1, 1), "nchw", "oihw",
     False, (), DirectParams(1, 8), "baked"),
    ("bwd_w", 3, 2, 4, 6, (7, 8), (3, 2), (2, 1), (1, 0), (2, 0), (1, 1), "nhwc", "goihw",
     False, (), DirectParams(3, 16), "runtime"),
    ("bwd_w", 2, 1, 4, 8, (6, 7), (3, 3), (1, 1), (0, 0), (0, 0), (0, 0), "nchw", "oihw",
     False, (), DirectParams(2, 8), "padded"),
    # binary post-ops: a per-channel f32 add, a whole-tensor s8 mul, a per-image bf16 max
    # (operands in their own types), between a sum and an eltwise
    ("fwd", 2, 1, 3, 4, (6, 9), (3, 3), (1, 1), (0, 0), (1, 1), (1, 1), "nchw", "oihw", True,
     ("per_oc:f32:binary_add", ("sum", 0.5, 0.0), "full:s8:binary_mul", RELU,
      "per_mb:bf16:binary_max"), DirectParams(2, 8), "baked"),
    ("bwd_d", 1, 2, 6, 4, (6, 20), (3, 3), (1, 1), (0, 0), (1, 1), (1, 1), "nhwc", "goihw",
     True, ("per_oc:f32:binary_div", "full:f32:binary_ge"), DirectParams(3, 8), "baked"),
]


def _binary(spec: str, out_dims: tuple) -> tuple:
    """A binary post-op entry (``kernels.post_ops``' form) over the destination's dims:
    ``"<per_oc|per_mb|full>:<type>:<algorithm>"``, its operand plain and dense."""
    kind, dt, alg = spec.split(":")
    dims = {"per_oc": (1, out_dims[1]) + (1,) * (len(out_dims) - 2),
            "per_mb": (out_dims[0],) + (1,) * (len(out_dims) - 1), "full": out_dims}[kind]
    strides, st = [], 1
    for d in reversed(dims):
        strides.insert(0, st if d > 1 else 0)
        st *= d
    layout = (0, tuple((1, s, ()) for s in strides))
    a = int(getattr(algorithm, alg))
    entry = a if dt == "f32" else (a, int(getattr(dnnl.memory.data_type, dt)))
    return ("binary", entry, layout, dims, st)


def _key(case):
    kind, mb, G, ic, oc, isp, ksz, st, dil, pl, pr, tag, wtag, bias, po, params, form = case
    p = _problem(kind, mb, G, ic, oc, isp, ksz, st, dil, pl, pr, tag, wtag, bias, ())
    out_dims = (mb, oc if kind == "fwd" else ic, *(p.dst_sp if kind == "fwd" else p.src_sp))
    p = replace(p, post_ops=tuple(_binary(x, out_dims) if isinstance(x, str) else x
                                  for x in po))
    if kind == "bwd_w":
        p = replace(p, bias=None, bias_n=0)
    if form == "baked":
        return p, p, params, None, {}
    q, values, guards = direct_runtime(p, form == "padded", params)
    assert guards is not None, "the case was meant to take run-time sizes"
    return p, q, params, guards, values


def _rand(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


@pytest.mark.parametrize("case", CASES, ids=[f"{i}-{c[0]}-{c[11]}-{c[16]}-t{c[15].tile}"
                                             for i, c in enumerate(CASES)])
def test_printed_equals_loopy(engine, case):
    p, q, params, guards, values = _key(case)
    ours = direct_source(q, params, guards)
    assert ours is not None
    assert build_direct(q, params, guards) == ours  # what the solver gets
    theirs = source_from_loopy(build_direct_loopy(q, params, guards))
    for field in ("name", "arg_names", "global_size", "local_size", "build_options"):
        assert getattr(ours, field) == getattr(theirs, field), field
    assert launch_size(ours, values) == launch_size(theirs, values)
    bufs = {"src": _rand(p.src_n + 8, 1), "wei": _rand(p.wei_n, 2), "dst": _rand(p.dst_n + 8, 3)}
    if "bias" in ours.arg_names:
        bufs["bias"] = _rand(p.bias_n, 4)
    for i, op in enumerate(p.post_ops):  # binary operands, stored in their types
        if op[0] == "binary":
            typ = src1_storage(op)
            raw = _rand(op[4], 10 + i) * 4
            bufs[f"po{i}_src1"] = (raw.astype(typ) if typ != np.uint16
                                   else (raw.view(np.uint32) >> 16).astype(np.uint16))
    a = run_source(engine, ours, bufs, values)
    b = run_source(engine, theirs, bufs, values)
    out = {"fwd": "dst", "bwd_d": "src", "bwd_w": "wei"}[p.kind]
    assert not np.array_equal(a[out], bufs[out])  # the kernel wrote its output
    for k in bufs:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.parametrize("change", [
    {"strides": (2, 1)},  # backward data: loopy's kernel measured faster
    {"params": DirectParams(1, 4, wtile=2)},
])
def test_declines(change):
    p, q, params, guards, _ = _key(CASES[0])
    if "params" in change:
        params = change["params"]
    else:
        q = replace(q, kind="bwd_d", strides=change["strides"])
    assert direct_source(q, params, guards) is None
    assert not isinstance(build_direct(q, params, guards), KernelSource)
