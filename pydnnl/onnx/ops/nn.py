"""Conv / ConvTranspose (``convolution_forward`` / ``deconvolution_forward``), pooling
(``pooling_forward``), BatchNormalization and LayerNormalization (inference), Softmax and
LogSoftmax (``softmax_forward``)."""
from __future__ import annotations

import math

import numpy as np

from ... import (
    algorithm,
    batch_normalization_forward,
    convolution_forward,
    deconvolution_forward,
    layer_normalization_forward,
    normalization_flags,
    pooling_forward,
    prop_kind,
    reorder,
    softmax_forward,
)
from ...constants import (
    ARG_BIAS,
    ARG_DST,
    ARG_FROM,
    ARG_MEAN,
    ARG_SCALE,
    ARG_SHIFT,
    ARG_SRC,
    ARG_TO,
    ARG_VARIANCE,
    ARG_WEIGHTS,
)
from ...memory import memory
from ...memory.desc import MemoryDesc
from ...memory.format_tags import format_tag
from ..errors import invalid, unsupported
from ..tensors import F32, plain_md
from . import axis_of, op
from .elementwise import eltwise
from .linalg import with_post_ops

INFER = prop_kind.forward_inference


def _spatial(b, a, name: str, nd: int, default: int) -> list[int]:
    v = [int(x) for x in a.get(name, [default] * nd)]
    if len(v) != nd:
        raise invalid(b.node, f"attribute {name}={v} must have {nd} entries (one per spatial "
                              f"dim)")
    return v


def _pads(b, a, nd: int, ins, dk, strides) -> tuple[list[int], list[int]]:
    """Begin and end padding of Conv / pooling, auto_pad resolved."""
    auto = a.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pl, pr = [], []
        for i, k, s in zip(ins, dk, strides):
            total = max((math.ceil(i / s) - 1) * s + k - i, 0)
            lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
            pl.append(lo)
            pr.append(total - lo)
        return pl, pr
    if auto == "VALID":
        return [0] * nd, [0] * nd
    if auto != "NOTSET":
        raise unsupported(b.node, f"auto_pad={auto!r}")
    pads = _spatial(b, a, "pads", 2 * nd, 0)
    return pads[:nd], pads[nd:]


def _weights(b, i: int, pd_weights, given: MemoryDesc, what: str):
    """A weights memory in the layout the primitive chose: constants are reordered into it
    once, here; graph inputs stay plain (the primitive was created with their desc)."""
    v = b.value(i, what)
    user = memory(given, b.engine, v.mem.get_data_handle())
    if pd_weights == given:
        return user
    packed = memory(pd_weights, b.engine)
    b.run_once(reorder(user, packed), {ARG_FROM: user, ARG_TO: packed})
    return packed


@op("Conv")
def conv(b, node, a):
    x = b.value(0, "X")
    wv = b.value(1, "W")
    if len(x.shape) < 3 or len(x.shape) > 5:
        raise unsupported(node, f"X of rank {len(x.shape)}; 1-D to 3-D convolutions only")
    nd = len(x.shape) - 2
    n, c = x.shape[:2]
    m, cg = wv.shape[:2]
    g = int(a.get("group", 1))
    if c != cg * g or m % g:
        raise invalid(node, f"X has {c} channels, W {list(wv.shape)} with group={g} expects "
                            f"{cg * g}")
    ks = list(wv.shape[2:])
    strides = _spatial(b, a, "strides", nd, 1)
    dil = _spatial(b, a, "dilations", nd, 1)
    dk = [(k - 1) * d + 1 for k, d in zip(ks, dil)]
    pl, pr = _pads(b, a, nd, x.shape[2:], dk, strides)
    out = [(i + lo + hi - k) // s + 1 for i, lo, hi, k, s in zip(x.shape[2:], pl, pr, dk, strides)]
    if min(out) < 1:
        raise invalid(node, f"output spatial dims {out} are empty")
    wdims = list(wv.shape) if g == 1 else [g, m // g, cg] + ks
    given = plain_md(wdims)
    const_w = b.is_const(1)
    wmd = MemoryDesc(wdims, F32, format_tag.any) if const_w else given
    dst = b.alloc([n, m] + out)
    bias = b.value(2, "B") if b.has(2) else None
    descs = [x.md, wmd] + ([bias.md] if bias is not None else []) + [dst.md]
    args = {ARG_SRC: x.mem, ARG_DST: dst.mem}
    attr = with_post_ops(b, args, dst.shape)
    pd = convolution_forward.primitive_desc(
        b.engine, INFER, algorithm.convolution_auto, *descs, strides,
        [d - 1 for d in dil], pl, pr, attr=attr)
    args[ARG_WEIGHTS] = _weights(b, 1, pd.weights_desc(), given, "W")
    if bias is not None:
        args[ARG_BIAS] = bias.mem
    b.execute(convolution_forward(pd), args)
    b.set(0, dst)


@op("ConvTranspose")
def conv_transpose(b, node, a):
    x = b.value(0, "X")
    wv = b.value(1, "W")
    if len(x.shape) < 3 or len(x.shape) > 5:
        raise unsupported(node, f"X of rank {len(x.shape)}; 1-D to 3-D deconvolutions only")
    nd = len(x.shape) - 2
    n, c = x.shape[:2]
    g = int(a.get("group", 1))
    if wv.shape[0] != c or c % g:
        raise invalid(node, f"W {list(wv.shape)} must be [C={c}, M/group, k...] with C "
                            f"divisible by group={g}")
    mg = wv.shape[1]
    m = mg * g
    ks = list(wv.shape[2:])
    strides = _spatial(b, a, "strides", nd, 1)
    dil = _spatial(b, a, "dilations", nd, 1)
    outpad = _spatial(b, a, "output_padding", nd, 0)
    dk = [(k - 1) * d + 1 for k, d in zip(ks, dil)]
    ins = x.shape[2:]
    auto = a.get("auto_pad", "NOTSET")
    full = [s * (i - 1) + op_ + k for i, s, op_, k in zip(ins, strides, outpad, dk)]
    if "output_shape" in a or auto in ("SAME_UPPER", "SAME_LOWER"):
        want = ([int(v) for v in a["output_shape"]][-nd:] if "output_shape" in a
                else [i * s for i, s in zip(ins, strides)])
        pl, pr = [], []
        for f, w in zip(full, want):
            total = f - w
            lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
            pl.append(lo)
            pr.append(total - lo)
    elif auto == "VALID":
        pl, pr = [0] * nd, [0] * nd
    else:
        pl, pr = _pads(b, a, nd, ins, dk, strides)
    out = [f - lo - hi for f, lo, hi in zip(full, pl, pr)]
    if min(out) < 1:
        raise invalid(node, f"output spatial dims {out} are empty")
    # ONNX W [C, M/g, k...] is oneDNN's [(g,) OC/g, IC/g, k...] with the channel dims swapped:
    # a strided view, read in place
    if g == 1:
        given = plain_md(wv.shape).permute_axes([1, 0] + list(range(2, nd + 2)))
    else:
        given = plain_md([g, c // g, mg] + ks).permute_axes([0, 2, 1] +
                                                            list(range(3, nd + 3)))
    wdims = given.get_dims()
    const_w = b.is_const(1)
    wmd = MemoryDesc(wdims, F32, format_tag.any) if const_w else given
    dst = b.alloc([n, m] + out)
    bias = b.value(2, "B") if b.has(2) else None
    descs = [x.md, wmd] + ([bias.md] if bias is not None else []) + [dst.md]
    # oneDNN's output size has no output_padding term: it is a smaller end padding
    args = {ARG_SRC: x.mem, ARG_DST: dst.mem}
    attr = with_post_ops(b, args, dst.shape)
    pd = deconvolution_forward.primitive_desc(
        b.engine, INFER, algorithm.deconvolution_direct, *descs, strides,
        [d - 1 for d in dil], pl, [hi - o for hi, o in zip(pr, outpad)], attr=attr)
    args[ARG_WEIGHTS] = _weights(b, 1, pd.weights_desc(), given, "W")
    if bias is not None:
        args[ARG_BIAS] = bias.mem
    b.execute(deconvolution_forward(pd), args)
    b.set(0, dst)


def _pool(b, node, x, alg, kernel, strides, dil, pl, pr):
    dk = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    out = [(i + lo + hi - k) // s + 1 for i, lo, hi, k, s in zip(x.shape[2:], pl, pr, dk, strides)]
    if min(out) < 1:
        raise invalid(node, f"output spatial dims {out} are empty")
    dst = b.alloc(list(x.shape[:2]) + out)
    pd = pooling_forward.primitive_desc(b.engine, INFER, alg, x.md, dst.md, strides, kernel,
                                        [d - 1 for d in dil], pl, pr)
    b.execute(pooling_forward(pd), {ARG_SRC: x.mem, ARG_DST: dst.mem})
    return dst


@op("MaxPool", "AveragePool")
def pool(b, node, a):
    x = b.value(0, "X")
    if len(x.shape) < 3 or len(x.shape) > 5:
        raise unsupported(node, f"X of rank {len(x.shape)}; 1-D to 3-D pooling only")
    if b.wants(1):
        raise unsupported(node, "the Indices output (oneDNN's workspace holds window "
                                "positions, not flat indices)")
    nd = len(x.shape) - 2
    if "kernel_shape" not in a:
        raise invalid(node, "attribute kernel_shape is required")
    kernel = _spatial(b, a, "kernel_shape", nd, 1)
    strides = _spatial(b, a, "strides", nd, 1)
    dil = _spatial(b, a, "dilations", nd, 1)
    dk = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    pl, pr = _pads(b, a, nd, x.shape[2:], dk, strides)
    if a.get("ceil_mode", 0):
        # a larger end padding gives ceil's output size; a window starting in the end
        # padding is dropped, as ONNX does
        pr2 = []
        for i, lo, hi, k, s in zip(x.shape[2:], pl, pr, dk, strides):
            o = -(-(i + lo + hi - k) // s) + 1
            if (o - 1) * s >= i + lo:
                o -= 1
            pr2.append((o - 1) * s + k - i - lo)
        pr = pr2
    if node.op_type == "MaxPool":
        if a.get("storage_order", 0):
            raise unsupported(node, "storage_order=1 (only meaningful with Indices)")
        alg = algorithm.pooling_max
    else:
        alg = (algorithm.pooling_avg_include_padding if a.get("count_include_pad", 0)
               else algorithm.pooling_avg_exclude_padding)
    b.set(0, _pool(b, node, x, alg, kernel, strides, dil, pl, pr))


@op("GlobalAveragePool", "GlobalMaxPool")
def global_pool(b, node, a):
    x = b.value(0, "X")
    if len(x.shape) < 3 or len(x.shape) > 5:
        raise unsupported(node, f"X of rank {len(x.shape)}; 1-D to 3-D pooling only")
    nd = len(x.shape) - 2
    alg = (algorithm.pooling_max if node.op_type == "GlobalMaxPool"
           else algorithm.pooling_avg_exclude_padding)
    b.set(0, _pool(b, node, x, alg, list(x.shape[2:]), [1] * nd, [1] * nd, [0] * nd, [0] * nd))


@op("BatchNormalization")
def batch_norm(b, node, a):
    if a.get("training_mode", 0):
        raise unsupported(node, "training_mode=1 (running statistics outputs); inference "
                                "only")
    if any(b.wants(i) for i in range(1, 5)):
        raise unsupported(node, "outputs beyond Y (mean, var, saved statistics): inference "
                                "only")
    x = b.value(0, "X")
    if not 2 <= len(x.shape) <= 5:
        raise unsupported(node, f"X of rank {len(x.shape)}; 2 to 5 dims")
    flags = (normalization_flags.use_global_stats | normalization_flags.use_scale
             | normalization_flags.use_shift)
    dst = b.alloc(x.shape)
    pd = batch_normalization_forward.primitive_desc(b.engine, INFER, x.md, dst.md,
                                                    float(a.get("epsilon", 1e-5)), flags)
    args = {ARG_SRC: x.mem, ARG_DST: dst.mem}
    for i, (arg, what) in enumerate(((ARG_SCALE, "scale"), (ARG_SHIFT, "B"),
                                     (ARG_MEAN, "input_mean"), (ARG_VARIANCE, "input_var")),
                                    start=1):
        v = b.value(i, what)
        if v.shape != (x.shape[1],):
            raise invalid(node, f"{what} must have shape [{x.shape[1]}], got {list(v.shape)}")
        args[arg] = v.mem
    b.execute(batch_normalization_forward(pd), args)
    b.set(0, dst)


@op("LayerNormalization")
def layer_norm(b, node, a):
    x = b.value(0, "X")
    rank = len(x.shape)
    axis = axis_of(b, int(a.get("axis", -1)), rank)
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    inner = int(np.prod(x.shape[axis:], dtype=np.int64))
    eps = float(a.get("epsilon", 1e-5))
    xv = x.view((outer, inner))
    flags = normalization_flags.use_scale
    scale = b.value(1, "Scale")
    bias = b.value(2, "B") if b.has(2) else None
    for v, what in ((scale, "Scale"), (bias, "B")):
        if v is not None and v.size != inner:
            raise unsupported(node, f"{what} of shape {list(v.shape)} broadcast over "
                                    f"{list(x.shape[axis:])}: only full-size {what} "
                                    f"(layer_normalization's [C])")
    if bias is not None:
        flags |= normalization_flags.use_shift
    stats = b.wants(1) or b.wants(2)
    dst = b.alloc(x.shape)
    dv = dst.view((outer, inner))
    args = {ARG_SRC: xv.mem, ARG_DST: dv.mem, ARG_SCALE: scale.view((inner,)).mem}
    if bias is not None:
        args[ARG_SHIFT] = bias.view((inner,)).mem
    stat_shape = tuple(x.shape[:axis]) + (1,) * (rank - axis)
    if stats:
        mean, var = b.alloc((outer,)), b.alloc((outer,))
        pd = layer_normalization_forward.primitive_desc(
            b.engine, prop_kind.forward_training, xv.md, dv.md, mean.md, eps, flags)
        args[ARG_MEAN], args[ARG_VARIANCE] = mean.mem, var.mem
    else:
        pd = layer_normalization_forward.primitive_desc(b.engine, INFER, xv.md, dv.md, eps,
                                                        flags)
    b.execute(layer_normalization_forward(pd), args)
    b.set(0, dst)
    if stats:
        b.set(1, mean.view(stat_shape))
        if b.wants(2):
            # InvStdDev = (var + eps)^-1/2
            t = eltwise(b, var, algorithm.eltwise_linear, 1.0, eps)
            b.set(2, eltwise(b, t, algorithm.eltwise_pow, 1.0, -0.5).view(stat_shape))


@op("Softmax", "LogSoftmax")
def softmax(b, node, a):
    x = b.value(0, "input")
    rank = len(x.shape)
    alg = algorithm.softmax_log if node.op_type == "LogSoftmax" else algorithm.softmax_accurate
    if b.opset >= 13:
        axis = axis_of(b, int(a.get("axis", -1)), rank)
        xv = x
    else:
        # before opset 13 the input is coerced to 2-D at axis
        axis0 = a.get("axis", 1)
        axis0 = rank if axis0 == rank else axis_of(b, axis0, rank)
        xv = x.view((int(np.prod(x.shape[:axis0], dtype=np.int64)),
                     int(np.prod(x.shape[axis0:], dtype=np.int64))))
        axis = 1
    dst = b.alloc(x.shape)
    dv = dst.view(xv.shape)
    pd = softmax_forward.primitive_desc(b.engine, INFER, alg, xv.md, dv.md, axis)
    b.execute(softmax_forward(pd), {ARG_SRC: xv.mem, ARG_DST: dv.mem})
    b.set(0, dst)
