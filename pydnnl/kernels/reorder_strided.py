"""One reorder program per layout class: every size and stride an argument.

A reorder between plain (strided, unblocked) layouts is an elementwise map over its dims.
Here the dims, each operand's strides (source, destination, and the scale and zero-point
arrays, whose strides are those of their masked dims and 0 elsewhere) and the offsets are
kernel arguments, so one program serves every shape of a (rank, data types, operand kinds,
beta) class: an RNN's staging copies and quantizations of each batch and channel count, a
user's reorder of each tensor size. The work-items walk the elements in the order the host
gives the dims (the destination's innermost last: consecutive items write consecutive
elements).

Values as :func:`~pydnnl.kernels.reorder.build_reorder_loopy` computes them: load, RNN data
quantization (``x * scale + shift``, each operation rounded) or the RNN weights scale, then
``(x - src_zp) * src_scale / dst_scale + dst_zp``, then the store's rounding and saturation;
``beta`` adds ``beta * dst`` (f32 only).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..memory.data_types import data_type
from .clhelpers import compute_type, load_helper, store_helper
from .source import KernelSource

#: most dims a strided program takes (oneDNN's limit is 12; the plain reorders here have 6)
MAX_DIMS = 6
WG = 64
# operand kinds besides src and dst, in the order of the value computation
_OPERANDS = ("rnn_wscale", "src_zp", "src_scale", "dst_scale", "dst_zp")
_MASK_OF = {"src_zp": "src_zp_mask", "src_scale": "src_scale_mask",
            "dst_scale": "dst_scale_mask", "dst_zp": "dst_zp_mask",
            "rnn_wscale": "rnn_weights_mask"}
_INT_MAX = (1 << 31) - 1
# how each operand acts on the value (zero points are int arrays)
_APPLY = {"rnn_wscale": "({v}) * {t}", "src_zp": "({v}) - ({ct}) {t}",
          "src_scale": "({v}) * {t}", "dst_scale": "({v}) / {t}", "dst_zp": "({v}) + ({ct}) {t}"}


@dataclass(frozen=True)
class StridedReorder:
    """The program's key: what its text depends on (no size, stride or offset)."""

    nd: int
    src_dt: data_type
    dst_dt: data_type
    operands: tuple[str, ...]  # those of _OPERANDS the reorder reads
    rnn_data: bool = False
    beta: float = 0.0
    wide: bool = False  # 64-bit index arithmetic (an extent or offset beyond int)
    #: the source's and the destination's innermost stride is 1 (baked: vector accesses)
    unit: tuple[bool, bool] = (False, False)


def _plain(layout) -> tuple[int, tuple[int, ...]] | None:
    off0, per_dim = layout
    if any(blk != 1 or inner for blk, _s, inner in per_dim):
        return None
    return off0, tuple(s for _b, s, _i in per_dim)


def _mask_strides(mask: int, dims) -> tuple[int, ...]:
    """Strides of a scale array indexed row-major over the masked dims (0 elsewhere)."""
    out, n = [0] * len(dims), 1
    for d in range(len(dims) - 1, -1, -1):
        if mask >> d & 1:
            out[d] = n
            n *= dims[d]
    return tuple(out)


def strided_form(p):
    """``(key, sizes)`` of ``p`` (a ``ReorderProblem``) as a strided program, or None where
    a layout is blocked, the rank is above :data:`MAX_DIMS` or a stride is negative. ``sizes``
    maps the kernel's size arguments to their values."""
    from .reorder import _check_rnn

    src, dst = _plain(p.src_layout), _plain(p.dst_layout)
    nd = len(p.dims)
    if src is None or dst is None or not 1 <= nd <= MAX_DIMS or p.runtime:
        return None
    if p.beta != 0.0 and not (p.src_dt == p.dst_dt == data_type.f32):
        return None
    _check_rnn(p)
    strides = {"src": src[1], "dst": dst[1]}
    operands = tuple(k for k in _OPERANDS if getattr(p, _MASK_OF[k]) is not None)
    for k in operands:
        strides[k] = _mask_strides(getattr(p, _MASK_OF[k]), p.dims)
    if any(s < 0 for ss in strides.values() for s in ss):
        return None
    # the work order: the destination's innermost dim last (coalesced writes), dims of
    # extent 1 dropped (their index is 0)
    order = sorted((d for d in range(nd) if p.dims[d] > 1), key=lambda d: -dst[1][d])
    order = order or [nd - 1]
    total = 1
    for d in order:
        total *= p.dims[d]
    offs = {"src": src[0], "dst": dst[0]}
    reach = max([total] + [offs[k] + sum((p.dims[d] - 1) * strides[k][d] for d in range(nd))
                           for k in ("src", "dst")])
    key = StridedReorder(len(order), p.src_dt, p.dst_dt, operands, p.rnn_data, p.beta,
                         reach > _INT_MAX, (src[1][order[-1]] == 1, dst[1][order[-1]] == 1))
    sizes = {"outer": total // p.dims[order[-1]], "src_off": offs["src"],
             "dst_off": offs["dst"]}
    for j, d in enumerate(order):
        sizes[f"n{j}"] = p.dims[d]
        for k, ss in strides.items():
            sizes[f"{k}_s{j}"] = ss[d]
    return key, sizes


def build_strided_reorder(key: StridedReorder) -> KernelSource:
    """The program of ``key``: one work-item per element, the innermost dim along axis 0."""
    from .reorder import _RNN_DATA, _np_storage

    idx = "long" if key.wide else "int"
    ct = compute_type(key.src_dt, key.dst_dt)
    same = key.src_dt == key.dst_dt and not key.operands and not key.rnn_data
    c_type = {"float32": "float", "float64": "double", "uint16": "ushort", "int8": "char",
              "uint8": "uchar", "int32": "int"}
    s_t, d_t = (c_type[np.dtype(_np_storage(t)).name] for t in (key.src_dt, key.dst_dt))
    names = ["src", "dst"] + list(key.operands)
    params = [f"__global {s_t} const *__restrict__ src", f"__global {d_t} *__restrict__ dst"]
    for k in key.operands:
        params.append(f"__global {'int' if k.endswith('_zp') else 'float'} const "
                      f"*__restrict__ {k}")
    if key.rnn_data:
        params += ["float const rnn_scale", "float const rnn_shift"]
        names += ["rnn_scale", "rnn_shift"]
    sizes = ["outer", "src_off", "dst_off"] + [f"n{j}" for j in range(key.nd)] + [
        f"{k}_s{j}" for k in ["src", "dst"] + list(key.operands) for j in range(key.nd)]
    params += [f"long const {s}" for s in sizes]
    names += sizes
    helpers = []
    last = key.nd - 1
    # axis 0 walks the innermost dim (consecutive work-items, consecutive elements); axis 1
    # the others flattened, split back into indices once per work-item
    body = [f"{idx} const c{last} = ({idx}) get_global_id(0);",
            f"if (c{last} >= ({idx}) n{last})", "  return;",
            f"{idx} r = ({idx}) get_global_id(1);"]
    unit = dict(zip(("src", "dst"), key.unit))
    offs = {k: [f"c{last}" if unit.get(k) else f"c{last} * ({idx}) {k}_s{last}"]
            for k in ["src", "dst"] + list(key.operands)}
    for j in range(last - 1, -1, -1):
        if j:
            # the remainder from the quotient: LLVM turns a % and / pair into a freeze,
            # which Oclgrind's checker cannot run
            body += [f"{idx} const q{j} = r / ({idx}) n{j};",
                     f"{idx} const c{j} = r - q{j} * ({idx}) n{j};", f"r = q{j};"]
        else:
            body.append(f"{idx} const c0 = r;")
        for k in offs:
            offs[k].append(f"c{j} * ({idx}) {k}_s{j}")
    off = {k: " + ".join(v) for k, v in offs.items()}
    src_at = f"src[({idx}) src_off + {off['src']}]"
    dst_at = f"dst[({idx}) dst_off + {off['dst']}]"
    if same:
        value = src_at
    else:
        ld, st = load_helper(key.src_dt, ct), store_helper(key.dst_dt, ct)
        helpers += [ld[1], st[1]]
        value = f"{ld[0]}({src_at})"
        if key.rnn_data:
            helpers.append(_RNN_DATA[1])
            value = f"{_RNN_DATA[0]}({value}, rnn_scale, rnn_shift)"
        for k in key.operands:
            value = _APPLY[k].format(v=value, t=f"{k}[{off[k]}]", ct=ct)
        value = f"{st[0]}({value})"
    if key.beta != 0.0:
        beta = repr(float(key.beta))
        value = f"{value} + {dst_at}" if key.beta == 1.0 else f"{value} + {beta}f * {dst_at}"
    body.append(f"{dst_at} = {value};")
    # no required work-group size: it follows the innermost extent (at most WG)
    text = "".join(h + "\n" for h in helpers) + "\n__kernel void pydnnl_reorder_strided(" \
        + ", ".join(params) + ")\n{\n" + "".join("  " + b + "\n" for b in body) + "}\n"
    w = f"min(n{last}, {WG})"
    grid = (f"(n{last} + {w} - 1) // {w} * {w}", "outer")
    return KernelSource("pydnnl_reorder_strided", text, None, None, tuple(names), grid=grid,
                        local_grid=(w, "1"))


__all__ = ["MAX_DIMS", "StridedReorder", "build_strided_reorder", "strided_form"]
