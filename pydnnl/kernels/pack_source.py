"""OpenCL source of the register-tile GEMM's B packer with every size at run time.

:func:`~pydnnl.kernels.copy_source.pack_b_source` prints one packer per baked k, n, ``ldb``,
panel width, matrix count and stride: a GRU 512 T=50 N=64 training pair asked for 7 of
them, which Intel's CPU compiler built for 15-17 ms each inside a merged program (8 of the
pair's 23 kernels). :func:`pack_b_runtime_source` takes all of those as arguments, so one
program per transposition serves every packer of a device (the plan asks for it where
:func:`pydnnl.runtime.heuristics.packing.runtime_packer` says so).

It writes what ``BPacking.build`` (and :func:`~pydnnl.kernels.copy_source.pack_b_source`)
write, to the same places: matrix ``t`` of ``nmat`` (its B at ``b_off + t * b_stride``,
addressed ``B[kk, j] = b[kk * ldb + j]``, or ``b[j * ldb + kk]`` transposed) goes to
``bp_off + t * bp_stride`` in panels of ``panel`` columns, ``ksize * panel`` elements each
(``bp[panel_index * ksize * panel + kk * panel + lane]``), columns past n as zeros. The launch
is the baked packer's: work-group axis 0 over blocks of 16 rows of k (``panel`` lanes along
a panel's columns), axis 1 over the panels, axis 2 over the matrices. A copy, so its output
equals the baked packers' bit for bit (``tests/kernels/test_pack_source.py``).
"""
from __future__ import annotations

from .printing import float_ptr as _ptr
from .source import KernelSource

#: the kernel's arguments, in order
ARG_NAMES = ("b", "bp", "b_off", "bp_off", "ksize", "n", "ldb", "panel", "b_stride",
             "bp_stride", "nmat")


def pack_b_runtime_source(trans_b: bool) -> KernelSource:
    """The float32 packer of B (``trans_b``: B stored transposed, as ``(n, k)`` rows of
    ``ldb``) with k, n, ``ldb``, the panel width, offsets, the matrices' count and both
    strides given per launch (arguments :data:`ARG_NAMES`)."""
    at = "j * ldb + kk" if trans_b else "kk * ldb + j"
    params = [_ptr("b", True), _ptr("bp", False)] + [f"long const {n}" for n in ARG_NAMES[2:]]
    text = (
        "#define lid(N) ((long) get_local_id(N))\n"
        "#define gid(N) ((long) get_group_id(N))\n\n"
        f"__kernel void pack_b({', '.join(params)})\n"
        "{\n"
        "  long const j = gid(1) * panel + lid(0);\n"
        "  long const k0 = gid(0) * 16;\n"
        "  long const kend = (ksize - k0 >= 16) ? k0 + 16 : ksize;\n"
        "  __global float const *const src = b + b_off + gid(2) * b_stride;\n"
        "  __global float *const dst = bp + bp_off + gid(2) * bp_stride"
        " + gid(1) * ksize * panel + lid(0);\n"
        "  if (j < n)\n"
        "  {\n"
        "    for (long kk = k0; kk < kend; ++kk)\n"
        f"      dst[kk * panel] = src[{at}];\n"
        "  }\n"
        "  else\n"
        "  {\n"
        "    for (long kk = k0; kk < kend; ++kk)\n"
        "      dst[kk * panel] = 0.0f;\n"
        "  }\n"
        "}\n")
    return KernelSource("pack_b", text, None, None, ARG_NAMES,
                        grid=("((15 + ksize) // 16) * panel", "(n + panel - 1) // panel",
                              "nmat"),
                        local_grid=("panel", "1", "1"))


def runtime_args(ksize: int, n: int, ldb: int, panel: int, count: int, b_stride: int,
                 bp_stride: int) -> dict:
    """The size arguments of :func:`pack_b_runtime_source` by name (offsets and buffers
    apart)."""
    return {"ksize": ksize, "n": n, "ldb": ldb, "panel": panel, "nmat": count,
            "b_stride": b_stride if count > 1 else 0,
            "bp_stride": bp_stride if count > 1 else 0}


__all__ = ["ARG_NAMES", "pack_b_runtime_source", "runtime_args"]
