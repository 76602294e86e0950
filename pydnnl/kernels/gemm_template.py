"""The register-tile GEMM's OpenCL source for CPUs' commonest case, written without loopy.

The LSTM's and GRU's GEMMs on 16-wide CPUs (``runtime.heuristics.gemm``'s wide default: an 8x48
register tile in float16 vectors, k unrolled by 2, 4 row tiles per work-item, B packed in
48-column panels, run-time m, k and offsets, float32, no epilogue) take one kernel whose only
compile-time sizes are n and C's leading dimension. :func:`register_source` emits it for those
problems byte for byte as loopy generates it (``tests/kernels/test_gemm_template.py`` compares
them), so that a first-ever creation neither imports loopy for it nor spends loopy's 0.15-0.2 s
on its code generation; every other problem returns None and goes to loopy. It also writes
the two tiles an RNN's inference weights stored in panels take (``TILES``): the same 8x48
tile reading B in 16-column panels three side by side, and an 8x32 tile unrolled by 4 over
32-column panels.
"""
from __future__ import annotations

import numpy as np

from .source import KernelSource

#: the parameters the template writes (``normalize_params``'s form)
PARAMS = {"rows": 8, "cols": 48, "vec": 16, "wg": (1, 1), "k_unroll": 2,
          "local_prefetch": False, "k_tile": 16, "packed_b": True, "m_inner": False,
          "m_loop": 4}

_PRELUDE_T = """#define lid(N) ((long) get_local_id(N))
#define gid(N) ((long) get_group_id(N))
#define LOOPY_CALL_WITH_INTEGER_TYPES(MACRO_NAME) \\
    MACRO_NAME(int8, char) \\
    MACRO_NAME(int16, short) \\
    MACRO_NAME(int32, int) \\
    MACRO_NAME(int64, long)
#define LOOPY_DEFINE_FLOOR_DIV_POS_B(SUFFIX, TYPE) \\
    static inline TYPE loopy_floor_div_pos_b_##SUFFIX(TYPE a, TYPE b) \\
    {{ \\
        if (a<0) \\
            a = a - (b-1); \\
        return a/b; \\
    }}
LOOPY_CALL_WITH_INTEGER_TYPES(LOOPY_DEFINE_FLOOR_DIV_POS_B)
#undef LOOPY_DEFINE_FLOOR_DIV_POS_B
#undef LOOPY_CALL_WITH_INTEGER_TYPES

__kernel void __attribute__ ((reqd_work_group_size(1, 1, 1))) gemm(__global float const \
*__restrict__ a, __global float const *__restrict__ b, __global float *__restrict__ c, long const \
a_off, long const b_off, long const c_off, long const m, long const ksize)
{{
  float16 acc[8 * {nv}];
  float16 bv[{nv}];
  long r0;

  for (long io_inner = 0; io_inner <= ((-25 + m + -32 * gid(1) >= 0) ? (long) (3) : -1 + -4 \
* gid(1) + loopy_floor_div_pos_b_int64(7 + m, 8)); ++io_inner)
  {{
    r0 = (((io_inner + gid(1) * 4) * 8 + 0 + 8 <= m) ? (io_inner + gid(1) * 4) * 8 + 0 : m + -8);
    __attribute__((opencl_unroll_hint))
    for (long jz = 0; jz <= {nvm1}; ++jz)
    {{
      __attribute__((opencl_unroll_hint))
      for (long iz = 0; iz <= 7; ++iz)
        acc[{nv} * iz + jz] = (float) (0.0f);
    }}
    /* bulk slab for 'k_outer' */
{bulk}
    {{
"""


#: the final slab's k_outer, as loopy (isl) writes it for k unrolled by 2 and by 4
_FINAL_K = {2: "-1 + loopy_floor_div_pos_b_int64(1 + ksize, 2)",
            4: "loopy_floor_div_pos_b_int64(-1 + ksize, 4)"}


def _final_open(ku: int) -> str:
    return ("    /* final slab for 'k_outer' */\n    {\n"
            f"      long const k_outer = {_FINAL_K[ku]};\n\n"
            "      if (k_outer >= 0)\n      {\n")


def _k_step(ind: str, k_bound: str, nv: int = 3, ku: int = 2, pw: int = 48,
            npan: int | None = None) -> str:
    """The k step (B loads, the tile's products) at indentation ``ind``: ``nv`` vectors of 16
    columns, k unrolled by ``ku``, B in ``pw``-column panels (``pw`` the tile's width, or 16:
    the tile reads ``nv`` panels side by side, the last one clamped to panel ``npan - 1``
    where the tiles reach past n)."""
    kk = f"(k_inner + k_outer * {ku})"
    if pw == 16 * nv:
        base = f"b_off + gid(0) * ksize * {pw} + {kk} * {pw} + jb * 16"
    else:
        panel = f"gid(0) * {nv} + jb"
        if npan is not None:
            panel = f"({panel} < {npan}) ? {panel} : (long) ({npan - 1})"
        base = f"b_off + ({panel}) * ksize * 16 + {kk} * 16"
    lanes = "".join(
        f"{ind}    bv[jb].s{lane:x} = b[{base}{f' + {lane}' if lane else ''}];\n"
        for lane in range(16))
    return (f"{ind}__attribute__((opencl_unroll_hint))\n"
            f"{ind}for (long k_inner = 0; k_inner <= {k_bound}; ++k_inner)\n"
            f"{ind}{{\n"
            f"{ind}  __attribute__((opencl_unroll_hint))\n"
            f"{ind}  for (long jb = 0; jb <= {nv - 1}; ++jb)\n"
            f"{ind}  {{\n{lanes}{ind}  }}\n"
            f"{ind}  __attribute__((opencl_unroll_hint))\n"
            f"{ind}  for (long ii = 0; ii <= 7; ++ii)\n"
            f"{ind}  {{\n"
            f"{ind}    __attribute__((opencl_unroll_hint))\n"
            f"{ind}    for (long jj = 0; jj <= {nv - 1}; ++jj)\n"
            f"{ind}      acc[{nv} * ii + jj] = acc[{nv} * ii + jj] + a[a_off + (r0 + ii) * "
            f"ksize + k_inner + k_outer * {ku}] * bv[jj];\n"
            f"{ind}  }}\n"
            f"{ind}}}\n")


def _stores(n: int, ldc: int, nv: int = 3) -> str:
    w = 16 * nv
    guard = n % w != 0
    ind = "        " if guard else "      "
    body = (f"{ind}__attribute__((opencl_unroll_hint))\n"
            f"{ind}for (long is = 0; is <= 7; ++is)\n"
            f"{ind}{{\n"
            f"{ind}  long cidx = c_off + 0 + (r0 + is) * {ldc} + gid(0) * {w} + js * 16 + 0;\n"
            f"{ind}  long cacc = is * {nv} + js;\n\n"
            f"{ind}  vstore16(acc[cacc], 0, c + cidx);\n"
            f"{ind}}}\n")
    head = ("    __attribute__((opencl_unroll_hint))\n"
            f"    for (long js = 0; js <= {nv - 1}; ++js)\n")
    if guard:
        return head + f"      if (gid(0) * {w} + js * 16 + 0 < {n})\n      {{\n{body}      }}\n"
    return head + f"    {{\n{body}    }}\n"


def _canonical(kp, pw: int = 48):
    """The key problem the template writes, for ``kp``'s n and C's leading dimension (and B
    in ``pw``-column panels)."""
    from .gemm import GemmProblem, key_problem

    return key_problem(GemmProblem(
        m=3200, n=kp.n, k=512, lda=512, ldb=pw, ldc=kp.ldc, b_layout=f"panel{pw}",
        dtype=np.float32, acc_dtype=np.float32, runtime_offsets=True, runtime_m="tall",
        runtime_k=True))


#: the tiles the template writes besides :data:`PARAMS` (``normalize_params``'s form): 8x32
#: unrolled by 4 (the RNN's layer GEMM over weights stored in 32-column panels,
#: ``runtime.heuristics.rnn.weights_panel``)
TILES = (PARAMS, dict(PARAMS, cols=32, k_unroll=4))


def register_source(problem, params: dict | None) -> KernelSource | None:
    """The kernel :func:`pydnnl.kernels.gemm.build_gemm` generates for ``(problem, params)``,
    as its :class:`KernelSource`, where the template covers it (see the module's doc); else
    None. B in panels of the tile's width or, read side by side, of 16 columns."""
    from .gemm import key_problem, normalize_params

    p = normalize_params(params)
    if p not in TILES:
        return None
    kp = key_problem(problem)
    nv, ku, w = p["cols"] // 16, p["k_unroll"], p["cols"]
    pw = kp.panel_width
    if pw not in (w, 16) or kp.n % 16 or kp.ldc is None or kp.ldc < kp.n \
            or kp != _canonical(kp, pw):
        return None
    n, ldc = kp.n, kp.ldc
    ntiles = -(-n // w)
    npan = n // 16 if pw == 16 and ntiles * nv > n // 16 else None
    bulk = (f"    for (long k_outer = 0; k_outer <= -2 + loopy_floor_div_pos_b_int64({ku - 1} + "
            f"ksize, {ku}); ++k_outer)")
    prelude = _PRELUDE_T.format(nv=nv, nvm1=nv - 1, bulk=bulk)
    src = (prelude + _k_step("      ", str(ku - 1), nv, ku, pw, npan) + "    }\n"
           + _final_open(ku)
           + _k_step("        ", f"-1 + ksize + -{ku} * k_outer", nv, ku, pw, npan)
           + "      }\n    }\n" + _stores(n, ldc, nv) + "  }\n}")
    return KernelSource("gemm", src, None, (1, 1),
                        ("a", "b", "c", "a_off", "b_off", "c_off", "m", "ksize"),
                        grid=(str(ntiles), "((31 + m) // 32) * 1"))


__all__ = ["PARAMS", "TILES", "register_source"]
