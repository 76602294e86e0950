"""A transposing copy of a row-major matrix in 8x8 register blocks, written without loopy.

``dst[dst_off + c * ldo + r] = src[src_off + r * ldi + c]`` for ``r < nrows`` and ``c < cols``:
the patches of a 1x1 layer's backward weights on a CPU (the channels-last source's ``[points,
channels]`` into ``[channels, points]``, the GEMM's A read row by row). One work-item takes 8
rows and walks every column in 8x8 blocks: eight ``float8`` loads of the rows, eight
``float8`` stores of the columns, the block turned in registers. (The channel-block im2col,
one work-item per point, gathered across its neighbours and ran 5-10x slower on the 2-core
EPYC: ResNet-50 res2b_branch2a at mb 1, [3136, 256], 1.7-1.8 ms against 0.17.) A last
work-item past ``nrows`` copies its rows element by element. ``nrows`` and ``ldo`` are
arguments (one program for every minibatch and image size); ``cols`` (a multiple of 8) and
``ldi`` are baked. Pure: returns a :class:`KernelSource`.
"""
from __future__ import annotations

from dataclasses import dataclass

from .source import KernelSource

__all__ = ["TransposeProblem", "build_transpose", "BLOCK"]

BLOCK = 8


@dataclass(frozen=True)
class TransposeProblem:
    """``cols`` columns (a multiple of :data:`BLOCK`) of rows ``ldi`` elements apart."""

    cols: int
    ldi: int

    def __post_init__(self):
        if self.cols <= 0 or self.cols % BLOCK or self.ldi < self.cols:
            raise ValueError(f"TransposeProblem: cols must be a positive multiple of {BLOCK} "
                             f"and ldi at least cols, got cols {self.cols}, ldi {self.ldi}")


def build_transpose(p: TransposeProblem) -> KernelSource:
    """The kernel ``transpose8``: arguments ``src, dst, src_off, dst_off, nrows, ldo``; one
    work-item (a work-group of one) per 8 rows."""
    B, ldi = BLOCK, p.ldi
    loads = "".join(f"      float8 const a{i} = vload8(0, in + {i * ldi} + c0);\n"
                    for i in range(B))
    stores = "".join(
        f"      vstore8((float8)({', '.join(f'a{i}.s{j}' for i in range(B))}), 0, "
        f"out + (c0 + {j}) * ldo);\n" for j in range(B))
    src = (
        "__kernel void __attribute__((reqd_work_group_size(1, 1, 1)))\n"
        "transpose8(__global float const *__restrict__ src, __global float *__restrict__ dst, "
        "long const src_off, long const dst_off, long const nrows, long const ldo)\n"
        "{\n"
        f"  long const r0 = (long) get_global_id(0) * {B};\n"
        f"  __global float const *in = src + src_off + r0 * {ldi};\n"
        "  __global float *out = dst + dst_off + r0;\n"
        f"  if (r0 + {B} <= nrows)\n"
        "  {\n"
        f"    for (long c0 = 0; c0 < {p.cols}; c0 += {B})\n"
        "    {\n"
        f"{loads}{stores}"
        "    }\n"
        "  }\n"
        "  else\n"
        "    for (long r = 0; r < nrows - r0; ++r)\n"
        f"      for (long c = 0; c < {p.cols}; ++c)\n"
        f"        out[c * ldo + r] = in[r * {ldi} + c];\n"
        "}\n")
    return KernelSource("transpose8", src, None, (1,),
                        ("src", "dst", "src_off", "dst_off", "nrows", "ldo"),
                        grid=(f"(nrows + {B - 1}) // {B}",))
