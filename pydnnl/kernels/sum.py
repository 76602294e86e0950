"""Loopy generator of sum kernels: ``dst = sum_k scales[k] * src_k`` over any number of
inputs in one pass (each element of every input read once, dst written once).

The index space and launch shapes are those of :mod:`pydnnl.kernels.binary` (flat, or rows of
the innermost dim over the collapsed space); every tensor is read through its own layout.
With ``accumulate`` the kernel adds to dst's content (``dst += ...``): sums of more inputs
than one kernel takes run as several such launches. Buffers are f32, bf16 or f16 (``dts``), the
sum accumulates in f32 and rounds once, on the store. Pure: no engine, no argument maps.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .binary import F32, global_arg, grid, load, offset, schedule, store, type_helpers


@dataclass(frozen=True)
class SumProblem:
    """``dst (+)= sum_k scales[k] * src_k`` over logical ``dims`` (collapsed).

    ``layouts`` and ``sizes`` hold the sources' and then dst's layout over ``dims`` and storage
    elements; ``scales`` one float per source."""

    scales: tuple[float, ...]
    dims: tuple[int, ...]
    layouts: tuple
    sizes: tuple[int, ...]
    accumulate: bool = False
    wg: int = 256
    rows: bool = False
    iters: int = 1  # elements per work-item (see kernels.binary.grid)
    dts: tuple[int, ...] = ()  # data_type per buffer (sources, dst); empty: every one f32


def arg_names(n: int) -> tuple[str, ...]:
    """The kernel's buffer arguments: ``src0 .. src<n-1>, dst``."""
    return tuple(f"src{k}" for k in range(n)) + ("dst",)


def build_sum(p: SumProblem):
    """loopy TranslationUnit ``(src0, ..., src<n-1>, dst)``."""
    import loopy as lp
    from pymbolic import var

    n = len(p.scales)
    if n < 1 or len(p.layouts) != n + 1 or len(p.sizes) != n + 1:
        raise ValueError(f"sum kernel: {n} scales need {n + 1} layouts and sizes")
    dts = p.dts or (F32,) * (n + 1)
    domain, inames, idx = grid(p.dims, p.rows, p.wg, p.iters)
    dst = var("dst")[offset(p.layouts[-1], idx)]
    value = None
    for k, s in enumerate(p.scales):
        term = load(dts[k], var(f"src{k}")[offset(p.layouts[k], idx)])
        if s != 1.0:
            term = np.float32(s) * term
        value = term if value is None else value + term
    if p.accumulate:
        value = load(dts[-1], dst) + value
    insn = lp.Assignment(dst, store(dts[-1], value), within_inames=frozenset(inames))
    args = [global_arg(f"src{k}", p.sizes[k], dt=dts[k]) for k in range(n)]
    args.append(global_arg("dst", p.sizes[-1], output=True, input=p.accumulate, dt=dts[-1]))
    knl = lp.make_kernel(domain, [insn], args, name="pydnnl_sum", lang_version=(2018, 2),
                         target=lp.PyOpenCLTarget())
    knl = schedule(knl, p.dims, p.rows, p.wg, p.iters)
    helpers = type_helpers(dts if p.accumulate else dts[:-1], dts[-1:])
    if helpers:
        from .clhelpers import register_helpers

        knl = register_helpers(knl, helpers)
    return knl
