"""OpenCL source of the f32 reorder between plain (strided, unblocked) layouts, written without
loopy (:func:`~pydnnl.kernels.reorder.build_reorder_loopy`'s kernel).

Every staging reorder of a convolution's first creation on the CPU is this form (in its
run-time form, :func:`~pydnnl.kernels.reorder.runtime_form`: offsets and the outer size as
arguments): the ResNet-50 list's backward data asks for 22 of them, 3-10 ms of loopy kernel
building each plus its code generation and, for the first, loopy's import. The printer writes
loopy's text byte for byte with loopy 2025.2 (same name, arguments, work-group size, grid,
statement, loop nest (extent-1 sequential dims as blocks declaring their index) and index
sums: the constant offset first, terms in dim order, a dim split over work-groups after them as
``W*s * gid(0) + s * lid(0)``, the run-time offset last); ``tests/kernels/test_reorder_source.py``
compares the texts and runs both kernels.

Declined (None: loopy keeps them): data type conversions, scales, zero points, RNN
quantization, blocked layouts, the local dim being the run-time outer dim, more than 10 dims,
negative strides and constants beyond int (the run-time outer size and offsets are long
arguments, as in loopy's).
"""
from __future__ import annotations

import numpy as np

from ..memory.data_types import data_type
from .printing import float_ptr, kernel_head, plain_layout
from .source import KernelSource

_PRELUDE = ("#define lid(N) ((int) get_local_id(N))\n"
            "#define gid(N) ((int) get_group_id(N))\n\n")
_INT_MAX = (1 << 31) - 1


def _indent(text: str) -> str:
    """``text`` with every non-blank line indented two spaces (loopy's blank lines stay
    empty)."""
    return "".join("  " + x if x.strip() else x for x in text.splitlines(True))


def _under(body: str) -> str:
    """``body`` as the statement of a for or if: a block as it is, else indented."""
    return body if body.startswith("{") else _indent(body)


def _term(coef: int, name: str) -> str | None:
    """``coef * name`` as loopy prints it (no term for 0, no factor for 1)."""
    if coef == 0:
        return None
    return name if coef == 1 else f"{coef} * {name}"


def _beta_literal(beta: float) -> str | None:
    """``beta`` as loopy prints a float32 constant, or None where unsure of its spelling."""
    b = np.float32(beta)
    if not np.isfinite(b) or float(b) != beta:
        return None
    text = repr(float(b))
    if "e" in text or "inf" in text or "nan" in text:
        return None
    return text + "f"


def reorder_source(p, params: dict | None = None) -> KernelSource | None:
    """The kernel of :func:`~pydnnl.kernels.reorder.build_reorder_loopy` for ``p`` (a
    ``ReorderProblem``) and ``params`` where covered (see the module doc), else None."""
    from .reorder import _pick_local_dim, _scaled

    wg = int(dict(params or {}).get("wg", 32))
    nd = len(p.dims)
    if (not 1 <= nd <= 10 or wg < 1 or _scaled(p)
            or not p.src_dt == p.dst_dt == data_type.f32):
        return None
    beta = None
    if p.beta != 0.0:
        beta = _beta_literal(p.beta)
        if beta is None:
            return None
    src, dst = plain_layout(p.src_layout), plain_layout(p.dst_layout)
    if src is None or dst is None:
        return None
    dims = ((1 << 20,) + tuple(p.dims[1:])) if p.runtime else tuple(p.dims)
    # constants beyond int (loopy may spell them otherwise) and negative strides: loopy's
    if (any(s < 0 for lay in (src, dst) for s in lay[1])
            or max(lay[0] + max(lay[1]) * max(wg, 1) for lay in (src, dst)) > _INT_MAX):
        return None
    ld = _pick_local_dim(p, dims)
    if dims[ld] == 1 or (p.runtime and ld == 0):
        return None
    split = dims[ld] >= wg
    others = sorted((d for d in range(nd) if d != ld), key=lambda d: -dims[d])
    axis = {d: k + (1 if split else 0) for k, d in enumerate(others[:2])}
    loops = sorted(others[2:])  # nested in dim order
    w = wg if split else dims[ld]
    groups0 = -(-dims[ld] // wg) if split else 1

    def index(lay, run_off: str) -> str:
        off0, strides = lay
        terms = [str(off0)] if off0 and not p.runtime else []
        # loopy substitutes a split dim after the others were summed: its terms come last
        lane = ([_term(w * strides[ld], "gid(0)")] if groups0 > 1 else []) + [
            _term(strides[ld], "lid(0)")]
        for d in range(nd):
            s = strides[d]
            if d == ld:
                if not split:
                    terms += lane
            elif d in axis:
                if dims[d] > 1:
                    terms.append(_term(s, f"gid({axis[d]})"))
            elif dims[d] > 1:  # (an extent-1 loop is the constant 0)
                terms.append(_term(s, f"i{d}"))
        if split:
            terms += lane
        if p.runtime:
            terms.append(run_off)
        terms = [t for t in terms if t is not None]
        return " + ".join(terms) if terms else "0"

    tgt = f"dst[{index(dst, 'dst_off')}]"
    value = f"src[{index(src, 'src_off')}]"
    if beta is not None:
        value += f" + {tgt}" if p.beta == 1.0 else f" + {beta} * {tgt}"
    body = f"{tgt} = {value};\n"
    # inside out: an extent-1 loop is a block declaring its index, the others for loops;
    # loopy sets a block under a for or if at the same indentation
    for d in reversed(loops):
        if dims[d] == 1:
            body = f"{{\n  int const i{d} = 0;\n\n{_indent(body)}}}\n"
        else:
            body = f"for (int i{d} = 0; i{d} <= {dims[d] - 1}; ++i{d})\n{_under(body)}"
    if split and dims[ld] % wg:
        body = f"if ({dims[ld] - 1} + -{wg} * gid(0) + -1 * lid(0) >= 0)\n{_under(body)}"
    body = _indent(body)
    params_c = [float_ptr("src", True), float_ptr("dst", False)]
    names = ("src", "dst")
    if p.runtime:
        params_c += ["long const src_off", "long const dst_off", "long const d0"]
        names += ("src_off", "dst_off", "d0")
    text = _PRELUDE + kernel_head("pydnnl_reorder", (w,), params_c) + body + "}"
    # group counts per axis: the split dim's on axis 0, else the first other dim's
    tagged = others[:2]
    groups = ([groups0] if split else []) + [0 if d == 0 and p.runtime else dims[d]
                                             for d in tagged]
    groups = groups or [1]
    local = (w,) + (1,) * (len(groups) - 1)
    if p.runtime:  # dim 0 (tagged: never the local dim) counts d0 groups
        grid = tuple(f"(d0) * {local[k]}" if g == 0 else str(g * local[k])
                     for k, g in enumerate(groups))
        return KernelSource("pydnnl_reorder", text, None, local, names, grid=grid)
    return KernelSource("pydnnl_reorder", text, tuple(g * n for g, n in zip(groups, local)),
                        local, names)

__all__ = ["reorder_source"]
