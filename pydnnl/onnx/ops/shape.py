"""Shape operators as views of the producer's buffer (Reshape, Flatten, Squeeze, Unsqueeze,
Identity) or ``reorder``s from strided views (Transpose, Slice, Gather with constant
indices), Concat (``concat``) and Constant (a host array, uploaded when a node reads it)."""
from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from ... import concat
from ...constants import ARG_DST, ARG_MULTIPLE_SRC
from ...memory.desc import MemoryDesc
from ..errors import invalid, unsupported
from ..tensors import F32, plain_strides
from . import axis_of, op


def _host_or_value(b, i: int, what: str):
    """A host constant (shape arithmetic on int64 tensors stays on the host) or a device
    value."""
    name = b.node.input[i]
    if name in b.consts:
        return b.consts[name]
    return b.value(i, what)


def _reshape(b, x, shape):
    if isinstance(x, np.ndarray):
        return x.reshape(shape)
    return x.view(shape)


@op("Identity")
def identity(b, node, a):
    b.set(0, _host_or_value(b, 0, "input"))


@op("Dropout")
def dropout(b, node, a):
    # inference, or training with ratio 0: the identity, every mask element kept
    mode = b.const(2, "training_mode") if b.opset >= 12 else None
    training = (mode is not None and bool(mode)) or (b.opset < 7 and a.get("is_test", 0) == 0)
    if training:
        ratio = b.const(1, "ratio") if b.opset >= 12 else np.array(a.get("ratio", 0.5))
        if ratio is None or float(ratio) != 0.0:
            raise unsupported(node, "training mode with a non-zero ratio (random masks)")
    x = _host_or_value(b, 0, "data")
    b.set(0, x)
    b.set(1, np.ones(x.shape, bool))


@op("Constant")
def constant(b, node, a):
    if "value" in a:
        arr = numpy_helper.to_array(node.attribute[0].t)
    elif "value_float" in a:
        arr = np.array(a["value_float"], np.float32)
    elif "value_floats" in a:
        arr = np.array(a["value_floats"], np.float32)
    elif "value_int" in a:
        arr = np.array(a["value_int"], np.int64)
    elif "value_ints" in a:
        arr = np.array(a["value_ints"], np.int64)
    else:
        raise unsupported(node, f"attribute {sorted(a)} (sparse or string constants)")
    b.set(0, arr)


@op("Reshape")
def reshape(b, node, a):
    x = _host_or_value(b, 0, "data")
    shape = [int(v) for v in b.const(1, "shape").reshape(-1)]
    allowzero = a.get("allowzero", 0)
    src = tuple(x.shape)
    out = []
    for i, d in enumerate(shape):
        if d == 0 and not allowzero:
            if i >= len(src):
                raise invalid(node, f"shape {shape}: 0 at position {i} copies a dim the input "
                                    f"{list(src)} does not have")
            out.append(src[i])
        else:
            out.append(d)
    if out.count(-1) > 1:
        raise invalid(node, f"shape {shape} has more than one -1")
    size = int(np.prod(src, dtype=np.int64))
    if -1 in out:
        rest = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        out[out.index(-1)] = size // rest if rest else 0
    if int(np.prod(out, dtype=np.int64)) != size:
        raise invalid(node, f"shape {shape} (-> {out}) does not hold the input's {size} "
                            f"elements (shape {list(src)})")
    b.set(0, _reshape(b, x, out))


@op("Flatten")
def flatten(b, node, a):
    x = _host_or_value(b, 0, "input")
    rank = len(x.shape)
    axis = int(a.get("axis", 1))
    if not -rank <= axis <= rank:
        raise invalid(node, f"axis {axis} is out of range for a tensor of rank {rank}")
    axis = axis + rank if axis < 0 else axis
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    b.set(0, _reshape(b, x, (outer, int(np.prod(x.shape[axis:], dtype=np.int64)))))


def _axes(b, a, i: int) -> list[int] | None:
    if b.opset >= 13:
        v = b.const(i, "axes")
        return None if v is None else [int(x) for x in v.reshape(-1)]
    return a.get("axes")


@op("Squeeze")
def squeeze(b, node, a):
    x = _host_or_value(b, 0, "data")
    rank = len(x.shape)
    axes = _axes(b, a, 1)
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    axes = {axis_of(b, ax, rank, "axes entry") for ax in axes}
    for ax in axes:
        if x.shape[ax] != 1:
            raise invalid(node, f"axis {ax} has size {x.shape[ax]}, not 1 (input shape "
                                f"{list(x.shape)})")
    b.set(0, _reshape(b, x, [d for i, d in enumerate(x.shape) if i not in axes]))


@op("Unsqueeze")
def unsqueeze(b, node, a):
    x = _host_or_value(b, 0, "data")
    axes = _axes(b, a, 1)
    if axes is None:
        raise invalid(node, "axes are required")
    rank = len(x.shape) + len(axes)
    axes = sorted(axis_of(b, ax, rank, "axes entry") for ax in axes)
    if len(set(axes)) != len(axes):
        raise invalid(node, f"axes {axes} repeat an axis")
    shape = list(x.shape)
    for ax in axes:
        shape.insert(ax, 1)
    b.set(0, _reshape(b, x, shape))


@op("Transpose")
def transpose(b, node, a):
    x = _host_or_value(b, 0, "data")
    rank = len(x.shape)
    perm = [int(p) for p in a.get("perm", list(range(rank))[::-1])]
    if sorted(perm) != list(range(rank)):
        raise invalid(node, f"perm {perm} is not a permutation of 0..{rank - 1}")
    if isinstance(x, np.ndarray):
        b.set(0, np.ascontiguousarray(x.transpose(perm)))
        return
    shape = tuple(x.shape[p] for p in perm)
    if rank <= 1 or perm == list(range(rank)):
        b.set(0, x)
        return
    # input axis perm[i] becomes output axis i: the input desc relabeled, then one reorder
    inverse = [0] * rank
    for i, p in enumerate(perm):
        inverse[p] = i
    src = x.view(shape, x.md.permute_axes(inverse))
    dst = b.alloc(shape)
    b.copy(src, dst)
    b.set(0, dst)


@op("Concat")
def concat_(b, node, a):
    if "axis" not in a:
        raise invalid(node, "attribute axis is required")
    names = [n for n in node.input if n]
    if names and all(n in b.consts for n in names):    # shape arithmetic on constants
        arrs = [b.consts[n] for n in names]
        b.set(0, np.concatenate(arrs, axis=axis_of(b, a["axis"], max(arrs[0].ndim, 1))))
        return
    srcs = [b.value(i, f"inputs[{i}]") for i in range(len(node.input)) if b.has(i)]
    rank = len(srcs[0].shape)
    axis = axis_of(b, a["axis"], rank)
    if len(srcs) == 1:
        b.set(0, srcs[0])
        return
    shape = list(srcs[0].shape)
    shape[axis] = sum(s.shape[axis] for s in srcs)
    dst = b.alloc(shape)
    pd = concat.primitive_desc(b.engine, dst.md, axis, [s.md for s in srcs])
    args = {ARG_MULTIPLE_SRC + i: s.mem for i, s in enumerate(srcs)}
    args[ARG_DST] = dst.mem
    b.execute(concat(pd), args)
    b.set(0, dst)


def _strided(v, dims, strides, offset: int):
    """A view of ``v``'s buffer with explicit element strides and offset."""
    md = MemoryDesc([int(d) for d in dims] or [1], F32, tuple(int(s) for s in strides) or (1,))
    md.offset0 = int(offset)
    return v.view(dims, md)


@op("Gather")
def gather(b, node, a):
    idx = b.const(1, "indices")
    axis = int(a.get("axis", 0))
    name = node.input[0]
    if name in b.consts:
        data = b.consts[name]
        b.set(0, np.take(data, idx, axis=axis_of(b, axis, data.ndim)))
        return
    x = b.value(0, "data")
    rank = len(x.shape)
    axis = axis_of(b, axis, rank)
    n = x.shape[axis]
    flat = [int(i) + n if int(i) < 0 else int(i) for i in np.asarray(idx).reshape(-1)]
    if any(not 0 <= i < n for i in flat):
        raise invalid(node, f"indices {np.asarray(idx).tolist()} out of range for axis {axis} "
                            f"of size {n}")
    st = plain_strides(x.shape)
    outer, inner = list(x.shape[:axis]), list(x.shape[axis + 1:])
    out_shape = outer + list(np.shape(idx)) + inner
    dst = b.alloc(out_shape)
    dst_st = plain_strides(outer + [len(flat)] + inner)
    # one reorder per index: data's slice into its place in dst
    for k, i in enumerate(flat):
        src = _strided(x, outer + inner, st[:axis] + st[axis + 1:], i * st[axis])
        to = _strided(dst, outer + inner, dst_st[:axis] + dst_st[axis + 1:], k * dst_st[axis])
        b.copy(src, to)
    b.set(0, dst)


@op("Slice")
def slice_(b, node, a):
    if b.opset >= 10:
        starts, ends = b.const(1, "starts"), b.const(2, "ends")
        axes, steps = b.const(3, "axes"), b.const(4, "steps")
    else:
        starts, ends = np.array(a["starts"]), np.array(a["ends"])
        axes, steps = (np.array(a["axes"]) if "axes" in a else None), None
    name = node.input[0]
    x = b.consts[name] if name in b.consts else b.value(0, "data")
    rank = len(x.shape)
    axes = list(range(len(starts))) if axes is None else [int(v) for v in axes.reshape(-1)]
    steps = [1] * len(axes) if steps is None else [int(v) for v in steps.reshape(-1)]
    sl = [slice(None)] * rank
    for ax, s0, e0, st in zip(axes, starts.reshape(-1), ends.reshape(-1), steps):
        sl[axis_of(b, ax, rank, "axes entry")] = slice(int(s0), int(e0), st)
    if isinstance(x, np.ndarray):
        b.set(0, np.ascontiguousarray(x[tuple(sl)]))
        return
    if any(s.step is not None and s.step < 1 for s in sl):
        raise unsupported(node, f"steps {steps}: negative steps on a computed tensor")
    ranges = [range(d)[s] for d, s in zip(x.shape, sl)]
    dims = [len(r) for r in ranges]
    if min(dims, default=1) == 0:
        raise unsupported(node, f"an empty slice (output shape {dims})")
    st = plain_strides(x.shape)
    src = _strided(x, dims, [s * r.step for s, r in zip(st, ranges)],
                   sum(s * r.start for s, r in zip(st, ranges)))
    dst = b.alloc(dims)
    b.copy(src, dst)
    b.set(0, dst)
