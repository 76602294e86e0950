"""GEMMs as primitives' plans use them: fixed sizes, run-time buffer offsets, tuned parameters.

``get_gemm(engine, shape)`` returns a launcher ``g(stream, a, a_off, b, b_off, c, c_off)``
computing, row-major, ``C[m, n] = alpha * op(A)[m, k] @ op(B)[k, n] + beta * C`` where the
offsets (in elements) change per call: one kernel serves every time step, layer and direction.
The kernel is the tuned GEMM family of :mod:`pydnnl.kernels.gemm` reading B as it lies (no
packing); its parameters come from the perf database or the device default
(``PYDNNL_TUNING=fast|exhaustive`` searches and stores them).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .compiler import get_kernel


@dataclass(frozen=True)
class GemmShape:
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    trans_a: bool = False
    trans_b: bool = False
    alpha: float = 1.0
    beta: float = 0.0


def _problem(shape: GemmShape, panel: int | None = None):
    from .gemm import GemmProblem, panel_layout

    return GemmProblem(m=shape.m, n=shape.n, k=shape.k, trans_a=shape.trans_a,
                       trans_b=shape.trans_b if panel is None else False, alpha=shape.alpha,
                       beta=shape.beta, lda=shape.lda, ldb=shape.ldb if panel is None else None,
                       ldc=shape.ldc, runtime_offsets=True,
                       b_layout="plain" if panel is None else panel_layout(panel))


def choose_params(engine, shape: GemmShape, static_b: bool) -> dict:
    """Tuned parameters for ``shape`` on ``engine`` (perf database, default or search).

    ``static_b``: B is a weight the plan may pack once per execution into panels (the
    parameters then may ask for packed B); otherwise B is read as it lies.
    """
    from . import gemm as fam
    from ..tuning import choose

    prob = _problem(shape)

    def norm(p):
        p = fam.normalize_params(p)
        return p if static_b else dict(p, packed_b=False)

    default = norm(_shape_default(engine, prob, fam.default_params(engine)))

    def candidates():
        seen, out = set(), []
        for p in fam.search_space(prob, engine):
            p = norm(p)
            key = repr(sorted(p.items()))
            if key not in seen and fam.is_valid(prob, p, engine):
                seen.add(key)
                out.append(p)
        return out

    def make_launch(params):
        from ..memory.pool import BufferPool

        pr = _problem(shape, params["cols"] if params["packed_b"] else None)
        kern = _build(engine, pr, params)
        pool = BufferPool.of(engine)
        bufs = [pool.take(max(pr.size(w), 1) * 4) for w in "abc"]
        vals = {"a": bufs[0], "b": bufs[1], "c": bufs[2], "a_off": np.int64(0),
                "b_off": np.int64(0), "c_off": np.int64(0)}
        args = [vals[n] for n in kern.src.arg_names]
        return lambda s: kern(s, *args)

    return choose(engine, "gemm", (fam.GENERATOR_VERSION, prob, static_b), default, candidates,
                  make_launch)


# Measured on an H100 through NVIDIA's OpenCL (exhaustive searches, 2026-11): 64-row GEMMs
# (the RNN recurrence) want 4x2 tiles on 32x4 work-items over 64-deep local tiles (17 us at
# 64x2048x512, 41 us at 64x4096x1024; 2x2 on 32x8 over 32: 20 and 49 us); large ones 8x4
# tiles on 32x8 over 32.
_NVIDIA_SMALL_M = {"rows": 4, "cols": 2, "wg": (32, 4), "k_tile": 64}
# up to 4 rows (a GEMV, e.g. an RNN step at batch 1): one row per work-item, 64 x 2 of them
# along N (1 x 7040 x 1760: 30.7 us split in 4, against 42 us with the 64-row tiles)
_NVIDIA_TINY_M = {"rows": 1, "cols": 2, "wg": (64, 2), "k_tile": 64}
_NVIDIA_LARGE = {"rows": 8, "cols": 4, "wg": (32, 8), "k_tile": 32}


def _shape_default(engine, prob, default: dict) -> dict:
    """The device default, refined by the problem's shape where measurements say so."""
    from . import gemm as fam

    info = engine.info
    if info.type != "gpu" or "nvidia" not in info.vendor.lower() or not default.get("local_prefetch"):
        return default
    cand = dict(default, **(_NVIDIA_TINY_M if prob.m <= 4 else
                            _NVIDIA_SMALL_M if prob.m <= 256 else _NVIDIA_LARGE))
    return cand if fam.is_valid(prob, fam.normalize_params(cand), engine) else default


def _build(engine, prob, params):
    from . import gemm as fam

    return get_kernel(engine, "gemm", fam.cache_key(prob, params),
                      lambda: fam.build_gemm(prob, params))


# Split-k: fewest k per slice, the most work-groups per compute unit a split may reach, and
# the k from which a GEMM splits even when its grid already covers the compute units.
_SPLIT_MIN_K = 256
_SPLIT_GROUPS_PER_CU = 8
_SPLIT_LONG_K = 1536
_SPLIT_SHORTEST_K = 1024  # below: never (at k = 512 the extra launch always cost more)


def split_k(engine, shape: GemmShape, params: dict) -> int:
    """How many k slices to cut ``shape`` into on ``engine`` (1: no split).

    GPUs only, and only GEMMs whose C covers at most half the compute units with work-groups
    (few rows and columns and a long k, like the backward recurrence of an RNN: 64 x 512 x
    2048 ran 121 us per step on an H100 unsplit, 6 of the 9.4 ms of an LSTM forward+backward)
    or whose k is at least ``_SPLIT_LONG_K``. Then k is cut into the most power-of-two slices
    that keep at least ``_SPLIT_MIN_K`` each and at most ``_SPLIT_GROUPS_PER_CU`` work-groups
    per unit. Measured on an H100 with ``benchmarks/gemm_split.py``: 64x512x2048 56 -> 20 us
    (8 slices), 32x1760x7040 348 -> 79 us (16), 1x7040x1760 84 -> 42 us (4), 512x2048x3200
    307 -> 243 us (8); GEMMs with a short k (below ``_SPLIT_SHORTEST_K``), or that fill the
    units already with k below ``_SPLIT_LONG_K`` (64x2048x512, 64x4096x1024, 1024^3), only
    lose by it: an RNN forward step of 64 x 512 x 512 split in two ran 1.2 -> 1.7 ms.
    """
    info = engine.info
    if info.type != "gpu" or not params.get("local_prefetch") or params.get("packed_b"):
        return 1
    bm = params["wg"][1] * params["rows"]
    bn = params["wg"][0] * params["cols"]
    groups = -(-shape.m // bm) * -(-shape.n // bn)
    units = max(1, info.compute_units)
    if shape.k < _SPLIT_SHORTEST_K or (2 * groups > units and shape.k < _SPLIT_LONG_K):
        return 1
    s = 1
    while (groups * s * 2 <= _SPLIT_GROUPS_PER_CU * units and shape.k % (2 * s) == 0
           and shape.k // (2 * s) >= _SPLIT_MIN_K):
        s *= 2
    return s


class Gemm:
    """Launcher of one GEMM kernel with run-time offsets.

    When ``packed`` is true the kernel reads B packed in panels of ``panel`` columns
    (``packed_size`` elements per matrix): the plan packs its weights with :meth:`packer`.

    With ``split=True`` the launcher may cut k into ``splits`` slices (:func:`split_k`): one
    batched kernel writes the slices' products into ``part_elems`` elements of a caller's
    buffer (``part``, e.g. a scratchpad region), a second kernel adds them (and ``beta * C``)
    into C. Calls then pass ``part`` and ``part_off``.
    """

    def __init__(self, engine, shape: GemmShape, static_b: bool = False, split: bool = False):
        self.engine = engine
        self.shape = shape
        self.params = choose_params(engine, shape, static_b)
        self.packed = bool(self.params["packed_b"])
        self.panel = self.params["cols"] if self.packed else None
        self.splits = split_k(engine, shape, self.params) if split else 1
        self.part_elems = 0
        self.reduce = None
        if self.splits > 1:
            self._build_split()
        else:
            prob = _problem(shape, self.panel)
            self.packed_size = prob.extent("b") if self.packed else 0
            self.kernel = _build(engine, prob, self.params)
        self._names = self.kernel.src.arg_names

    def _build_split(self) -> None:
        from . import gemm as fam
        from .conv_im2col import SplitKReduceProblem, build_splitk_reduce

        sh, S = self.shape, self.splits
        m, n, ks = sh.m, sh.n, sh.k // S
        self.params = choose_params(self.engine, replace(sh, k=ks, ldc=n, beta=0.0), False)
        self.packed, self.panel, self.packed_size = False, None, 0
        prob = fam.GemmProblem(
            m=m, n=n, k=ks, trans_a=sh.trans_a, trans_b=sh.trans_b, alpha=sh.alpha, beta=0.0,
            lda=sh.lda, ldb=sh.ldb, ldc=n, batch=S,
            stride_a=ks * (sh.lda if sh.trans_a else 1),
            stride_b=ks * (1 if sh.trans_b else sh.ldb), stride_c=m * n, runtime_offsets=True)
        self.kernel = _build(self.engine, prob, self.params)
        red = SplitKReduceProblem(m=m, n=n, splits=S, ldc=sh.ldc, beta=sh.beta, wg=64)
        self.reduce = get_kernel(self.engine, "splitk_reduce", red,
                                 lambda: build_splitk_reduce(red))
        self.part_elems = S * m * n

    def bound(self, fargs) -> list:
        """Bound launches (see :meth:`Kernel.bound`) of one call with arguments
        ``(a, a_off, b, b_off, c, c_off[, part, part_off])``."""
        if self.splits == 1:
            return [self.kernel.bound(self.ordered(*fargs[:6]))]
        a, a_off, b, b_off, c, c_off, part, part_off = fargs
        red = {"part": part, "c": c, "part_off": np.int64(part_off), "c_off": np.int64(c_off)}
        return [self.kernel.bound(self.ordered(a, a_off, b, b_off, part, part_off)),
                self.reduce.bound([red[nm] for nm in self.reduce.src.arg_names])]

    def packer(self, b_offset: int, count: int, stride: int, dst_offset: int):
        """Kernel ``pack_b(b, bp)``: ``count`` B matrices of this GEMM's shape, the first at
        ``b_offset`` of ``b`` and then every ``stride`` elements, into consecutive panels
        from ``dst_offset`` of ``bp`` (``packed_size`` elements apart)."""
        from . import gemm as fam

        sh = self.shape
        src = fam.GemmProblem(m=sh.m, n=sh.n, k=sh.k, trans_b=sh.trans_b, ldb=sh.ldb,
                              b_offset=b_offset, batch=count, stride_b=stride)
        pk = fam.pack_b(src, self.params)
        assert pk.problem.stride_b in (None, self.packed_size) or count == 1
        return get_kernel(self.engine, "gemm_pack", (fam.GENERATOR_VERSION, src, self.panel,
                                                      dst_offset),
                          lambda: pk.build(dst_offset))

    def activation_packer(self):
        """Kernel packing one B of this GEMM's shape into its panels, both places given per
        launch: arguments ``(b, bp, b_off, bp_off)`` in the order of :meth:`packer_args`.
        For B that changes every execution (activations), with one kernel for every
        offset."""
        from . import gemm as fam

        sh = self.shape
        src = fam.GemmProblem(m=sh.m, n=sh.n, k=sh.k, trans_b=sh.trans_b, ldb=sh.ldb,
                              runtime_offsets=True)
        pk = fam.pack_b(src, self.params)
        return get_kernel(self.engine, "gemm_pack", (fam.GENERATOR_VERSION, src, self.panel,
                                                      "runtime"), lambda: pk.build())

    @staticmethod
    def packer_args(kernel, b, b_off, bp, bp_off) -> tuple:
        vals = {"b": b, "bp": bp, "b_off": np.int64(b_off), "bp_off": np.int64(bp_off)}
        return tuple(vals[n] for n in kernel.src.arg_names)

    def ordered(self, a, a_off, b, b_off, c, c_off) -> list:
        """The kernel's arguments, in its order, for these buffers and offsets."""
        vals = {"a": a, "b": b, "c": c, "a_off": np.int64(a_off), "b_off": np.int64(b_off),
                "c_off": np.int64(c_off)}
        return [vals[n] for n in self._names]

    def __call__(self, stream, a, a_off, b, b_off, c, c_off, part=None, part_off=0,
                 wait_for=None):
        if self.splits == 1:
            return self.kernel(stream, *self.ordered(a, a_off, b, b_off, c, c_off),
                               wait_for=wait_for)
        if part is None:
            from ..error import invalid_arguments

            raise invalid_arguments(f"gemm {self.shape.m}x{self.shape.n}x{self.shape.k}: split "
                                    f"in {self.splits} slices, needs a part buffer of "
                                    f"{self.part_elems} elements, got none")
        evt = self.kernel(stream, *self.ordered(a, a_off, b, b_off, part, part_off),
                          wait_for=wait_for)
        red = {"part": part, "c": c, "part_off": np.int64(part_off), "c_off": np.int64(c_off)}
        return self.reduce(stream, *[red[nm] for nm in self.reduce.src.arg_names],
                           wait_for=[evt] if wait_for is not None else None)

    def flops(self) -> int:
        return 2 * self.shape.m * self.shape.n * self.shape.k

    def global_size_for_rows(self, rows: int) -> tuple[int, ...]:
        """The launch grid that computes at least C's first ``rows`` rows (whole row groups,
        so up to one group's rows more): a plan whose active rows shrink launches less."""
        p, sh = self.params, self.shape
        if self.splits > 1:
            raise ValueError("Gemm.global_size_for_rows: a split GEMM always runs whole")
        if sh.trans_a:
            return self.kernel.src.global_size  # not used with a shrinking m
        gs = list(self.kernel.src.global_size)
        ls = list(self.kernel.src.local_size) + [1] * 3
        wm = p["wg"][1]
        if p["local_prefetch"]:
            ax, span = 1, wm * p["rows"]
        else:
            mt = -(-sh.m // p["rows"])
            ax = 0 if p["m_inner"] else 1
            span = wm * min(p["m_loop"], mt) * p["rows"]
        groups = -(-max(rows, 1) // span)
        gs[ax] = min(gs[ax], groups * ls[ax])
        return tuple(gs)


_cache: dict = {}


def get_gemm(engine, shape: GemmShape, static_b: bool = False, split: bool = False) -> Gemm:
    """The GEMM launcher for ``shape``; ``static_b`` allows a kernel that reads packed B,
    ``split`` one that cuts k into slices (the caller then provides the partial buffer)."""
    key = (id(engine.context), shape, static_b, split)
    g = _cache.get(key)
    if g is None:
        g = _cache[key] = Gemm(engine, shape, static_b, split)
    return g
