"""The register-tile GEMM's OpenCL source for CPUs' commonest case, written without loopy.

The LSTM's and GRU's GEMMs on 16-wide CPUs (``runtime.heuristics.gemm``'s wide default: an 8x48
register tile in float16 vectors, k unrolled by 2, 4 row tiles per work-item, B packed in
48-column panels, run-time m, k and offsets, float32, no epilogue) take one kernel whose only
compile-time sizes are n and C's leading dimension. :func:`register_source` emits it for those
problems byte for byte as loopy generates it (``tests/kernels/test_gemm_template.py`` compares
them), so that a first-ever creation neither imports loopy for it nor spends loopy's 0.15-0.2 s
on its code generation; every other problem returns None and goes to loopy.
"""
from __future__ import annotations

import numpy as np

from .source import KernelSource

#: the parameters the template writes (``normalize_params``'s form)
PARAMS = {"rows": 8, "cols": 48, "vec": 16, "wg": (1, 1), "k_unroll": 2,
          "local_prefetch": False, "k_tile": 16, "packed_b": True, "m_inner": False,
          "m_loop": 4}

_PRELUDE = """#define lid(N) ((long) get_local_id(N))
#define gid(N) ((long) get_group_id(N))
#define LOOPY_CALL_WITH_INTEGER_TYPES(MACRO_NAME) \\
    MACRO_NAME(int8, char) \\
    MACRO_NAME(int16, short) \\
    MACRO_NAME(int32, int) \\
    MACRO_NAME(int64, long)
#define LOOPY_DEFINE_FLOOR_DIV_POS_B(SUFFIX, TYPE) \\
    static inline TYPE loopy_floor_div_pos_b_##SUFFIX(TYPE a, TYPE b) \\
    { \\
        if (a<0) \\
            a = a - (b-1); \\
        return a/b; \\
    }
LOOPY_CALL_WITH_INTEGER_TYPES(LOOPY_DEFINE_FLOOR_DIV_POS_B)
#undef LOOPY_DEFINE_FLOOR_DIV_POS_B
#undef LOOPY_CALL_WITH_INTEGER_TYPES

__kernel void __attribute__ ((reqd_work_group_size(1, 1, 1))) gemm(__global float const \
*__restrict__ a, __global float const *__restrict__ b, __global float *__restrict__ c, long const \
a_off, long const b_off, long const c_off, long const m, long const ksize)
{
  float16 acc[8 * 3];
  float16 bv[3];
  long r0;

  for (long io_inner = 0; io_inner <= ((-25 + m + -32 * gid(1) >= 0) ? (long) (3) : -1 + -4 \
* gid(1) + loopy_floor_div_pos_b_int64(7 + m, 8)); ++io_inner)
  {
    r0 = (((io_inner + gid(1) * 4) * 8 + 0 + 8 <= m) ? (io_inner + gid(1) * 4) * 8 + 0 : m + -8);
    __attribute__((opencl_unroll_hint))
    for (long jz = 0; jz <= 2; ++jz)
    {
      __attribute__((opencl_unroll_hint))
      for (long iz = 0; iz <= 7; ++iz)
        acc[3 * iz + jz] = (float) (0.0f);
    }
    /* bulk slab for 'k_outer' */
    for (long k_outer = 0; k_outer <= -2 + loopy_floor_div_pos_b_int64(1 + ksize, 2); ++k_outer)
    {
"""

_FINAL_OPEN = """    /* final slab for 'k_outer' */
    {
      long const k_outer = -1 + loopy_floor_div_pos_b_int64(1 + ksize, 2);

      if (k_outer >= 0)
      {
"""


def _k_step(ind: str, k_bound: str) -> str:
    """The k step (B loads, the tile's products) at indentation ``ind``."""
    lanes = "".join(
        f"{ind}    bv[jb].s{lane:x} = b[b_off + gid(0) * ksize * 48 + (k_inner + k_outer * 2)"
        f" * 48 + jb * 16{f' + {lane}' if lane else ''}];\n" for lane in range(16))
    return (f"{ind}__attribute__((opencl_unroll_hint))\n"
            f"{ind}for (long k_inner = 0; k_inner <= {k_bound}; ++k_inner)\n"
            f"{ind}{{\n"
            f"{ind}  __attribute__((opencl_unroll_hint))\n"
            f"{ind}  for (long jb = 0; jb <= 2; ++jb)\n"
            f"{ind}  {{\n{lanes}{ind}  }}\n"
            f"{ind}  __attribute__((opencl_unroll_hint))\n"
            f"{ind}  for (long ii = 0; ii <= 7; ++ii)\n"
            f"{ind}  {{\n"
            f"{ind}    __attribute__((opencl_unroll_hint))\n"
            f"{ind}    for (long jj = 0; jj <= 2; ++jj)\n"
            f"{ind}      acc[3 * ii + jj] = acc[3 * ii + jj] + a[a_off + (r0 + ii) * ksize + "
            f"k_inner + k_outer * 2] * bv[jj];\n"
            f"{ind}  }}\n"
            f"{ind}}}\n")


def _stores(n: int, ldc: int) -> str:
    guard = n % 48 != 0
    ind = "        " if guard else "      "
    body = (f"{ind}__attribute__((opencl_unroll_hint))\n"
            f"{ind}for (long is = 0; is <= 7; ++is)\n"
            f"{ind}{{\n"
            f"{ind}  long cidx = c_off + 0 + (r0 + is) * {ldc} + gid(0) * 48 + js * 16 + 0;\n"
            f"{ind}  long cacc = is * 3 + js;\n\n"
            f"{ind}  vstore16(acc[cacc], 0, c + cidx);\n"
            f"{ind}}}\n")
    head = ("    __attribute__((opencl_unroll_hint))\n"
            "    for (long js = 0; js <= 2; ++js)\n")
    if guard:
        return head + f"      if (gid(0) * 48 + js * 16 + 0 < {n})\n      {{\n{body}      }}\n"
    return head + f"    {{\n{body}    }}\n"


def _canonical(kp):
    """The key problem the template writes, for ``kp``'s n and C's leading dimension."""
    from .gemm import GemmProblem, key_problem

    return key_problem(GemmProblem(
        m=3200, n=kp.n, k=512, lda=512, ldb=48, ldc=kp.ldc, b_layout="panel48",
        dtype=np.float32, acc_dtype=np.float32, runtime_offsets=True, runtime_m="tall",
        runtime_k=True))


def register_source(problem, params: dict | None) -> KernelSource | None:
    """The kernel :func:`pydnnl.kernels.gemm.build_gemm` generates for ``(problem, params)``,
    as its :class:`KernelSource`, where the template covers it (see the module's doc); else
    None."""
    from .gemm import key_problem, normalize_params

    if normalize_params(params) != PARAMS:
        return None
    kp = key_problem(problem)
    if kp.n % 16 or kp.ldc is None or kp.ldc < kp.n or kp != _canonical(kp):
        return None
    n, ldc = kp.n, kp.ldc
    src = (_PRELUDE + _k_step("      ", "1") + "    }\n" + _FINAL_OPEN
           + _k_step("        ", "-1 + ksize + -2 * k_outer") + "      }\n    }\n"
           + _stores(n, ldc) + "  }\n}")
    return KernelSource("gemm", src, None, (1, 1),
                        ("a", "b", "c", "a_off", "b_off", "c_off", "m", "ksize"),
                        grid=(str(-(-n // 48)), "((31 + m) // 32) * 1"))


__all__ = ["PARAMS", "register_source"]
