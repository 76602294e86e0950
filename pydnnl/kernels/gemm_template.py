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
32-column panels. Each with its row tiles on either grid axis (``m_inner``), one or four of
them per work-item (``m_loop``) and any finite alpha and beta (C read a vector at a time, the
moved last tile storing its own rows): the LSTM training pair's backward GEMMs (long-k
input gradients, accumulated weight gradients) and the GRU's. Either tile also over plain B
in a batch whose strides and count are run-time arguments (Winograd's tile products: res2a's
first-ever creation spent 0.34-0.39 s in loopy's generation of that GEMM), n a multiple of
the tile's width (``tests/kernels/test_gemm_template_batched.py``). Either tile over packed B
adds a bias over C's columns (alpha 1, beta 0: the im2col convolutions' forward GEMMs, which
loopy stores lane by lane; 8 kernels and 2.0 s of a ResNet-50 list's first-ever creations at
mb 1, ``tests/kernels/test_gemm_template_forms.py``). A batch over plain B may read A with a
baked leading dimension (the weight gradients' slices of the images' rows: 4 kernels, 1.3 s
at mb 1), or A transposed with m baked in whole row tiles (the weight gradients' per-image
products, C accumulated or not: 8 kernels, 3.9 s at mb 32). Packed B takes a batch with
run-time strides and count too (Winograd's products over packed weights at mb 32: 3 kernels,
1.8 s forward). A's baked leading dimension goes with packed B too (the GRU's backward GEMMs
over a slice of its gates: 2 kernels, 0.35 s of its training pair's creation). An n that is no
multiple of the vector width stores lane by lane (alpha 1, beta 0, panels of the tile's width:
conv1's backward-data GEMM, n 147). 8-wide CPUs' 6x16 tile in float8 vectors (k unrolled by
4, or not at all for n <= 16) takes every one of those forms over B in 16-column panels (or
plain, batched): on an AVX2 EPYC a cold-cache LSTM 512 inference creation went 0.64-1.0 ->
0.41-0.63 s, its training pair 2.1 -> 1.1 s, the GRU's 3.5 -> 1.2 s.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .source import KernelSource

#: the parameters the template writes (``normalize_params``'s form)
PARAMS = {"rows": 8, "cols": 48, "vec": 16, "wg": (1, 1), "k_unroll": 2,
          "local_prefetch": False, "k_tile": 16, "packed_b": True, "m_inner": False,
          "m_loop": 4}

_PRELUDE_T = """#define lid(N) ((long) get_local_id(N))
#define gid(N) ((long) get_group_id(N))
{floor_div}
__kernel void __attribute__ ((reqd_work_group_size(1, 1, 1))) gemm(__global float const \
*__restrict__ a, __global float const *__restrict__ b, __global float *__restrict__ c, long const \
a_off, long const b_off, long const c_off, {m_arg}long const ksize{ldc_arg}{n_arg}\
{batch_args}{epi_args})
{{
  float{vec} acc[{rows} * {nv}];
{arow_decl}  float{vec} bv[{nv}];
{r0_decl}
"""

#: loopy's floor division helper, printed where the kernel divides (k unrolled, row loops)
_FLOOR_DIV = """#define LOOPY_CALL_WITH_INTEGER_TYPES(MACRO_NAME) \\
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
"""


#: the final slab's k_outer, as loopy (isl) writes it for k unrolled by 2 and by 4
_FINAL_K = {2: "-1 + loopy_floor_div_pos_b_int64(1 + ksize, 2)",
            4: "loopy_floor_div_pos_b_int64(-1 + ksize, 4)"}


_BATCH_ARGS = (", long const stride_a, long const stride_b, long const stride_c, "
               "long const nbatch")


def _k_step(ind: str, k_bound: str, nv: int = 3, ku: int = 2, pw: int | None = 48,
            npan: int | None = None, gc: int = 0, ldb: int | None = None,
            lda: str = "ksize", ta_rows: str | None = None, batch: bool = False,
            vec: int = 16, rows: int = 8, ta_clamped: bool = False) -> str:
    """The k step (B loads, the tile's products) at indentation ``ind``: ``nv`` vectors of
    ``vec`` columns by ``rows`` rows, k unrolled by ``ku``, B in ``pw``-column panels (``pw``
    the tile's width, or 16 (16-wide vectors):
    the tile reads ``nv`` panels side by side, the last one clamped to panel ``npan - 1``
    where the tiles reach past n); column tiles on grid axis ``gc``. ``pw`` None: a batch
    entry (grid axis 2) of plain B with leading dimension ``ldb``. ``lda``: A's leading
    dimension as printed (``ksize``: a dense A); ``ta_rows``: A transposed, the tile's first
    row (A's column) as printed; ``ta_clamped``: those rows read through ``arow`` (the last
    tile's clamped to m). ``batch``: packed B's batch entries on grid axis 2 too.
    ``ku`` 1: one loop over k, as loopy prints a k it does not split."""
    kk = "k" if ku == 1 else f"(k_inner + k_outer * {ku})"
    k_of = "k" if ku == 1 else f"k_inner + k_outer * {ku}"
    bat = "gid(2) * stride_b + " if batch or pw is None else ""
    a_at = "a_off + gid(2) * stride_a + " if batch or pw is None else "a_off + "
    if pw is None:
        base = f"b_off + {bat}{kk} * {ldb} + gid({gc}) * {vec * nv} + jb * {vec}"
    elif pw == vec * nv:
        base = f"b_off + {bat}gid({gc}) * ksize * {pw} + {kk} * {pw} + jb * {vec}"
    else:
        panel = f"gid({gc}) * {nv} + jb"
        if npan is not None:
            panel = f"({panel} < {npan}) ? {panel} : (long) ({npan - 1})"
        base = f"b_off + {bat}({panel}) * ksize * 16 + {kk} * 16"
    a_idx = (f"{a_at}{kk} * {lda} + " + ("arow[ii]" if ta_clamped else f"{ta_rows} + ii")
             if ta_rows else f"{a_at}(r0 + ii) * {lda} + {k_of}")
    if lda != "ksize" and not bat:  # affine: loopy prints it as one sorted sum
        k_sum = "k" if ku == 1 else f"{ku} * k_outer + k_inner"
        a_idx = f"{lda} * ii + {k_sum} + a_off + {lda} * r0"
    lanes = "".join(
        f"{ind}    bv[jb].s{lane:x} = b[{base}{f' + {lane}' if lane else ''}];\n"
        for lane in range(vec))
    head = (f"{ind}for (long k = 0; k <= -1 + ksize; ++k)\n" if ku == 1 else
            f"{ind}__attribute__((opencl_unroll_hint))\n"
            f"{ind}for (long k_inner = 0; k_inner <= {k_bound}; ++k_inner)\n")
    return (head +
            f"{ind}{{\n"
            f"{ind}  __attribute__((opencl_unroll_hint))\n"
            f"{ind}  for (long jb = 0; jb <= {nv - 1}; ++jb)\n"
            f"{ind}  {{\n{lanes}{ind}  }}\n"
            f"{ind}  __attribute__((opencl_unroll_hint))\n"
            f"{ind}  for (long ii = 0; ii <= {rows - 1}; ++ii)\n"
            f"{ind}  {{\n"
            f"{ind}    __attribute__((opencl_unroll_hint))\n"
            f"{ind}    for (long jj = 0; jj <= {nv - 1}; ++jj)\n"
            f"{ind}      acc[{nv} * ii + jj] = acc[{nv} * ii + jj] + a[{a_idx}] * bv[jj];\n"
            f"{ind}  }}\n"
            f"{ind}}}\n")


def _literal(x: float) -> str:
    return repr(float(x)) + "f"


def _value(alpha: float, beta: float, vec: int = 16) -> str:
    """The stored vector: ``alpha * acc + beta * C`` as ``gemm._vector_store_insns`` prints
    it."""
    value = "acc[cacc]" if alpha == 1.0 else f"{_literal(alpha)} * acc[cacc]"
    if beta != 0.0:
        old = f"vload{vec}(0, c + cidx)"
        value += f" + {old}" if beta == 1.0 else f" + {_literal(beta)} * {old}"
    return value


def _store_nest(ind: str, i: str, j: str, n: int, ldc: int | str, nv: int, gc: int, value: str,
                rows_outer: bool, row_guard: str | None = None, c_batch: str = "0",
                rbase: str = "r0", ncols: int | str | None = None, vec: int = 16,
                rows: int = 8, row_limit: int | None = None) -> str:
    """One loop nest of vector stores (rows ``i``, vectors ``j``) at indentation ``ind``:
    vectors outer (the tiles' stores) or rows outer behind ``row_guard`` (the moved last
    tile's own rows); the column guard where n is no multiple of the tile's width (against
    ``ncols`` where given: a run-time n); ``row_limit``: rows from it on are not stored."""
    w = vec * nv
    bound = n if ncols is None else ncols
    guard = f"if (gid({gc}) * {w} + {j} * {vec} + 0 < {bound})" if n % w else None
    store = (f"long cidx = c_off + {c_batch} + ({rbase} + {i}) * {ldc} + gid({gc}) * {w} + {j} * "
             f"{vec} + 0;",
             f"long cacc = {i} * {nv} + {j};", "", f"vstore{vec}({value}, 0, c + cidx);")

    def block(d: str, lines) -> str:
        return f"{d}{{\n" + "".join(f"{d}  {x}\n" if x else "\n" for x in lines) + f"{d}}}\n"

    unroll = "__attribute__((opencl_unroll_hint))"
    if rows_outer:
        inner_ind = ind + "    "
        inner = f"{inner_ind}{unroll}\n{inner_ind}for (long {j} = 0; {j} <= {nv - 1}; ++{j})\n"
        inner += (f"{inner_ind}  {guard}\n" + block(inner_ind + "  ", store)) if guard else \
            block(inner_ind, store)
        return (f"{ind}{unroll}\n{ind}for (long {i} = 0; {i} <= {rows - 1}; ++{i})\n"
                f"{ind}  {row_guard}\n{ind}  {{\n{inner}{ind}  }}\n")
    head = f"{ind}{unroll}\n{ind}for (long {j} = 0; {j} <= {nv - 1}; ++{j})\n"
    d = ind + ("    " if guard else "  ")
    nest = f"{d}{unroll}\n{d}for (long {i} = 0; {i} <= {rows - 1}; ++{i})\n" + (
        f"{d}  if ({rbase} + {i} < {row_limit})\n" + block(d + "  ", store)
        if row_limit is not None else block(d, store))
    if guard:
        return head + f"{ind}  {guard}\n{ind}  {{\n{nest}{ind}  }}\n"
    return head + f"{ind}{{\n{nest}{ind}}}\n"


def _stores(ind: str, n: int, ldc: int | str, nv: int, gc: int, alpha: float, beta: float,
            row0: str, c_batch: str = "0", ncols: int | str | None = None, vec: int = 16,
            rows: int = 8) -> str:
    """C's stores: every tile's rows, or where C is read (beta), the moved last tile's own
    rows in a nest of their own and every other tile's in the usual one."""
    value = _value(alpha, beta, vec)
    tile = dict(ncols=ncols, vec=vec, rows=rows)
    if beta == 0.0:
        return _store_nest(ind, "is", "js", n, ldc, nv, gc, value, False, c_batch=c_batch,
                           **tile)
    edge = _store_nest(ind, "ie", "je", n, ldc, nv, gc, value, True,
                       f"if (r0 != {row0} + 0 && r0 + ie >= {row0} + 0)", c_batch, **tile)
    return (edge + f"{ind}if (r0 == {row0} + 0)\n{ind}{{\n"
            + _store_nest(ind + "  ", "is", "js", n, ldc, nv, gc, value, False, c_batch=c_batch,
                          **tile)
            + f"{ind}}}\n")


#: the bias the template adds (``GemmProblem.bias``'s layout): one value per column of C, from
#: the bias buffer's start (a convolution's or inner product's bias over output channels)
_BIAS_LAYOUT = (0, ((1, 0, ()), (1, 1, ())))


def _bias_ok(kp) -> bool:
    """Whether the template writes ``kp``'s epilogue: none, or a bias over C's columns alone
    (:data:`_BIAS_LAYOUT`) stored with alpha 1 and beta 0: loopy then stores lane by lane."""
    if kp.post_ops or kp.scales or kp.epi_swap or kp.epi_batch or kp.epi_fixed is not None:
        return False
    if kp.bias is None:
        return True
    layout, dims, _ = kp.bias
    return (layout == _BIAS_LAYOUT and tuple(dims) == (1, kp.n) and kp.alpha == 1.0
            and kp.beta == 0.0 and kp.panel_width is not None)


def _lane_stores(ind: str, n: int, ldc: int, nv: int, gc: int, bias: bool, vec: int = 16,
                 rows: int = 8) -> str:
    """C's stores lane by lane as loopy prints them (one nest per lane, the column guard per
    lane where n is no multiple of the tile's width), with a bias over columns or without
    (n no multiple of the vector width)."""
    w = vec * nv
    unroll = "__attribute__((opencl_unroll_hint))"
    out = []
    for lane in range(vec):
        if n > w:
            col = f"{w} * gid({gc}) + {{}}{vec} * js" + (f" + {lane}" if lane else "")
        else:  # one column tile: loopy drops its group index, the lane's constant goes first
            col = (f"{lane} + " if lane else "") + f"{{}}{vec} * js"
        store = (f"c[{col.format(f'{ldc} * is + ')} + c_off + {ldc} * r0] = "
                 f"acc[{nv} * is + js].s{lane:x}"
                 + (f" + bias[{col.format('')}];" if bias else ";"))
        head = f"{ind}{unroll}\n{ind}for (long js = 0; js <= {nv - 1}; ++js)\n"
        if n % w:
            d = ind + "    "
            out.append(head + f"{ind}  if (gid({gc}) * {w} + js * {vec} + {lane} < {n})\n"
                       f"{ind}  {{\n{d}{unroll}\n{d}for (long is = 0; is <= {rows - 1}; ++is)\n"
                       f"{d}  {store}\n{ind}  }}\n")
        else:
            d = ind + "  "
            out.append(head + f"{ind}{{\n{d}{unroll}\n"
                       f"{d}for (long is = 0; is <= {rows - 1}; ++is)\n"
                       f"{d}  {store}\n{ind}}}\n")
    return "".join(out)


def _canonical(kp, pw: int | None = 48):
    """The key problem the template writes, for ``kp``'s n, C's leading dimension, alpha and
    beta (and B in ``pw``-column panels; ``pw`` None: a batch with run-time strides and count
    over plain B of ``kp``'s leading dimension); A dense (``ksize`` its leading dimension)
    or, where ``kp`` bakes one, of ``kp``'s leading dimension (e.g. a weight gradient's slice
    of the images' rows)."""
    from .gemm import GemmProblem, key_problem

    k, lda = (512, 512) if kp.lda == 1 else (1, kp.lda)
    if kp.trans_a:  # m baked, k at run time
        return key_problem(GemmProblem(
            m=kp.m, n=kp.n, k=512, trans_a=True, lda=kp.lda, ldb=kp.ldb, ldc=kp.ldc,
            alpha=kp.alpha, beta=kp.beta, dtype=np.float32, acc_dtype=np.float32, batch=3,
            runtime_offsets=True, runtime_k=True))
    if pw is None:
        return key_problem(GemmProblem(
            m=3200, n=kp.n, k=k, lda=lda, ldb=kp.ldb, ldc=kp.ldc, alpha=kp.alpha,
            beta=kp.beta, dtype=np.float32, acc_dtype=np.float32, batch=3,
            stride_a=3200 * 512, stride_b=512 * kp.ldb, stride_c=3200 * kp.ldc,
            runtime_offsets=True, runtime_m="tall", runtime_k=True))
    batch = 3 if kp.batch > 1 else 1  # (a batch: run-time strides and count)
    return key_problem(GemmProblem(
        m=3200, n=kp.n, k=k, lda=lda, ldb=pw, ldc=kp.ldc, b_layout=f"panel{pw}",
        alpha=kp.alpha, beta=kp.beta, dtype=np.float32, acc_dtype=np.float32, batch=batch,
        runtime_offsets=True, runtime_m="tall", runtime_k=True, runtime_ldc=kp.runtime_ldc,
        runtime_n=kp.runtime_n))


#: the tiles the template writes besides :data:`PARAMS` (``normalize_params``'s form): 8x32
#: unrolled by 4 (the RNN's layer GEMM over weights stored in 32-column panels,
#: ``runtime.heuristics.rnn.weights_panel``)
#: and, for 8-wide CPUs (``runtime.heuristics.gemm``'s 8-wide default), 6x16 in float8 vectors
#: over B in 16-column panels, k unrolled by 4 or (its narrow form, n <= 16) not at all
TILES = (PARAMS, dict(PARAMS, cols=32, k_unroll=4),
         dict(PARAMS, rows=6, cols=16, vec=8, k_unroll=4),
         dict(PARAMS, rows=6, cols=16, vec=8, k_unroll=1))
#: row tiles per work-item the template writes (``m_loop``; any tile of :data:`TILES`, with
#: either grid order ``m_inner``)
M_LOOPS = (1, 4)


def _tile_of(p: dict) -> dict | None:
    """The entry of :data:`TILES` that ``p`` is, ``m_loop``, ``m_inner`` and ``packed_b``
    aside."""
    base = dict(p, m_loop=4, m_inner=False, packed_b=True)
    return base if base in TILES and p["m_loop"] in M_LOOPS else None


def register_source(problem, params: dict | None) -> KernelSource | None:
    """The kernel :func:`pydnnl.kernels.gemm.build_gemm` generates for ``(problem, params)``,
    as its :class:`KernelSource`, where the template covers it (see the module's doc); else
    None. B in panels of the tile's width or, read side by side, of 16 columns; row tiles
    on grid axis 1 or 0 (``m_inner``), 1 or 4 of them per work-item; any finite alpha and
    beta (C then read a vector at a time, the moved last tile storing its own rows)."""
    from .gemm import key_problem, normalize_params

    p = normalize_params(params)
    if _tile_of(p) is None:
        return None
    kp = key_problem(problem)
    R, V = p["rows"], p["vec"]
    nv, ku, w, ml = p["cols"] // V, p["k_unroll"], p["cols"], p["m_loop"]
    pw = kp.panel_width
    if V != 16 and pw is not None and pw != w:  # (narrow panels: 16-wide tiles only)
        return None
    batched = pw is None  # plain B: only a batch with run-time strides and count
    if batched and (p["packed_b"] or not kp.runtime_batch or kp.n % w or kp.trans_b
                    or kp.ldb is None or kp.ldb < kp.n):
        return None
    # A transposed (weight gradients: m baked, one row tile per work-item; a last tile past
    # m reads clamped rows and stores its own, n a multiple of the tile)
    ta = kp.trans_a
    if ta and (not batched or kp.runtime_m or ml != 1 or (kp.m % R and kp.n % w)):
        return None
    ta_clamped = ta and kp.m % R != 0
    if not batched and not p["packed_b"]:
        return None
    # a batch over packed B (Winograd's products over packed weights): run-time strides and
    # count, no epilogue
    pbatch = not batched and kp.batch > 1
    if pbatch and (not kp.runtime_batch or kp.bias is not None):
        return None
    # n no multiple of the vector width: lane stores (C not read), panels of the tile's width
    lanes = kp.bias is not None or kp.n % V
    if kp.n % V and (batched or pbatch or pw != w or kp.alpha != 1.0 or kp.beta != 0.0):
        return None
    if (not batched and pw not in (w, 16)) or kp.ldc is None or kp.ldc < kp.n \
            or not (np.isfinite(kp.alpha) and np.isfinite(kp.beta)) \
            or not _bias_ok(kp) or replace(kp, bias=None) != _canonical(kp, pw):
        return None
    # a run-time ldc (GemmProblem.runtime_ldc): one tile's vector stores, no batch
    if (kp.runtime_ldc or kp.runtime_n) and (batched or pbatch or ta or lanes):
        return None
    if kp.runtime_n and pw != w:  # (narrower panels: the last panel's index follows n)
        return None
    n, ldc = kp.n, ("ldc" if kp.runtime_ldc else kp.ldc)
    ncols = "ncols" if kp.runtime_n else n
    gr, gc = (0, 1) if p["m_inner"] else (1, 0)
    ntiles = -(-n // w)
    npan = n // V if pw == V and ntiles * nv > n // V else None
    bias = kp.bias is not None
    out = [_PRELUDE_T.format(nv=nv, rows=R, vec=V,
                             floor_div=_FLOOR_DIV if ku > 1 or ml > 1 else "",
                             batch_args=_BATCH_ARGS if batched or pbatch else "",
                             epi_args=", __global float const *__restrict__ bias" if bias
                             else "", m_arg="" if ta else "long const m, ",
                             ldc_arg=", long const ldc" if kp.runtime_ldc else "",
                             n_arg=", long const ncols" if kp.runtime_n else "",
                             r0_decl="" if ta else "  long r0;\n",
                             arow_decl=f"  long arow[{R}];\n" if ta_clamped else "")]
    ldb = kp.ldb if batched else None
    lda = "ksize" if kp.lda == 1 else str(kp.lda)
    if ml > 1:
        row0 = f"(io_inner + gid({gr}) * {ml}) * {R}"
        out.append(f"  for (long io_inner = 0; io_inner <= ((-{R * ml - R + 1} + m + -{R * ml}"
                   f" * gid({gr}) >= 0) ? (long) ({ml - 1}) : -1 + -{ml} * gid({gr}) + "
                   f"loopy_floor_div_pos_b_int64({R - 1} + m, {R})); ++io_inner)\n  {{\n")
        ind = "    "
    else:
        row0 = f"gid({gr}) * {R}"
        ind = "  "
    out.append(
        ("" if ta else f"{ind}r0 = (({row0} + 0 + {R} <= m) ? {row0} + 0 : m + -{R});\n") +
        f"{ind}__attribute__((opencl_unroll_hint))\n"
        f"{ind}for (long jz = 0; jz <= {nv - 1}; ++jz)\n{ind}{{\n"
        f"{ind}  __attribute__((opencl_unroll_hint))\n"
        f"{ind}  for (long iz = 0; iz <= {R - 1}; ++iz)\n"
        f"{ind}    acc[{nv} * iz + jz] = (float) (0.0f);\n{ind}}}\n")
    ta_rows = f"gid({gr}) * {R}" if ta else None
    if ta_clamped:
        out.append(f"{ind}__attribute__((opencl_unroll_hint))\n"
                   f"{ind}for (long ia = 0; ia <= {R - 1}; ++ia)\n"
                   f"{ind}  arow[ia] = (({ta_rows} + ia < {kp.m}) ? {ta_rows} + ia : "
                   f"(long) ({kp.m - 1}));\n")
    step = dict(nv=nv, ku=ku, pw=pw, npan=npan, gc=gc, ldb=ldb, lda=lda, ta_rows=ta_rows,
                batch=pbatch, vec=V, rows=R, ta_clamped=ta_clamped)
    if ku == 1:  # k not split: one loop
        out.append(_k_step(ind, "", **step))
    else:
        out.append(f"{ind}/* bulk slab for 'k_outer' */\n"
                   f"{ind}for (long k_outer = 0; k_outer <= -2 + "
                   f"loopy_floor_div_pos_b_int64({ku - 1} + ksize, {ku}); ++k_outer)\n"
                   f"{ind}{{\n")
        out.append(_k_step(ind + "  ", str(ku - 1), **step) + f"{ind}}}\n")
        out.append(f"{ind}/* final slab for 'k_outer' */\n{ind}{{\n"
                   f"{ind}  long const k_outer = {_FINAL_K[ku]};\n\n"
                   f"{ind}  if (k_outer >= 0)\n{ind}  {{\n")
        out.append(_k_step(ind + "    ", f"-1 + ksize + -{ku} * k_outer", **step)
                   + f"{ind}  }}\n{ind}}}\n")
    if lanes:
        out.append(_lane_stores(ind, n, ldc, nv, gc, bias, V, R))
    elif ta:  # no moved last tile: every tile stores as the C-reading baked kernel does
        out.append(_store_nest(ind, "is", "js", n, ldc, nv, gc, _value(kp.alpha, kp.beta, V),
                               False, c_batch="gid(2) * stride_c", rbase=ta_rows, vec=V,
                               rows=R, row_limit=kp.m if ta_clamped else None))
    else:
        out.append(_stores(ind, n, ldc, nv, gc, kp.alpha, kp.beta, row0,
                           "gid(2) * stride_c" if batched or pbatch else "0", ncols, V, R))
    if ml > 1:
        out.append("  }\n")
    out.append("}")
    rows = str(-(-kp.m // R)) if ta else f"(({R * ml - 1} + m) // {R * ml}) * 1"
    grid = (rows, str(ntiles)) if p["m_inner"] else (str(ntiles), rows)
    names = ("a", "b", "c", "a_off", "b_off", "c_off") + (() if ta else ("m",)) + ("ksize",) \
        + (("ldc",) if kp.runtime_ldc else ()) + (("ncols",) if kp.runtime_n else ())
    if bias:
        return KernelSource("gemm", "".join(out), None, (1, 1), names + ("bias",), grid=grid)
    if batched or pbatch:
        return KernelSource("gemm", "".join(out), None, (1, 1, 1),
                            names + ("stride_a", "stride_b", "stride_c", "nbatch"),
                            grid=grid + ("(nbatch) * 1",))
    return KernelSource("gemm", "".join(out), None, (1, 1), names, grid=grid)


__all__ = ["M_LOOPS", "PARAMS", "TILES", "register_source"]
