"""The tuned GEMM launcher plans use: fixed sizes, run-time buffer offsets, tuned parameters.

``get_gemm(engine, shape)`` returns a launcher ``g(stream, a, a_off, b, b_off, c, c_off)``
computing, row-major, ``C[m, n] = alpha * op(A)[m, k] @ op(B)[k, n] + beta * C`` where the
offsets (in elements) change per call: one kernel serves every time step, layer and direction.
The kernel is the GEMM family of :mod:`pydnnl.kernels.gemm`; its parameters come from the perf
database or the device default of :mod:`pydnnl.runtime.heuristics.gemm`
(``PYDNNL_TUNING=fast|exhaustive`` searches and stores them). Where those rules pick it
(``nv_tile``: large GEMMs on NVIDIA GPUs) the hand-written kernel of
:mod:`pydnnl.kernels.gemm_nv` runs instead (``Gemm.params`` is then None).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..error import invalid_arguments, runtime_error
from ..kernels import gemm as fam
from ..kernels import gemm_nv, pack_source
from ..kernels.conv_im2col import SplitKReduceProblem, build_splitk_reduce
from ..kernels.gemm_template import register_source
from ..kernels.sizevars import size_var
from ..kernels.source import launch_size
from ..tuning import choose
from .heuristics import gemm as rules
from .heuristics import packing
from .heuristics.gemm_slices import sliced_tile
from .kernel_cache import get_kernel


def _nv_tile(info, prob: fam.GemmProblem, math: str, slices: bool = False):
    """The hand-written kernel's blocking (:func:`rules.nv_tile`), with k shared over a
    block's work-groups where ``slices`` lets the caller bind their workspace."""
    tile = rules.nv_tile(info, prob, math)
    return sliced_tile(info, prob, tile, math or "strict") if slices else tile


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
    #: a fused epilogue (see :class:`~pydnnl.kernels.gemm.GemmProblem`): bias operand
    #: ``(layout, dims, nelems)``, post-op chain and how C's elements map to positions
    bias: tuple | None = None
    post_ops: tuple = ()
    epi_batch: tuple = ()
    epi_fixed: tuple | None = None
    epi_swap: bool = False
    #: the epilogue's scales (``GemmProblem.scales``): ``(which, dims)`` entries; the caller
    #: binds their kernel arguments (``<which>_scale``, :func:`~pydnnl.kernels.gemm.scale_name`)
    #: as epilogue operands (``Plan.gemm``'s ``epilogue``)
    scales: tuple = ()
    #: what the product may compute in: "strict" (f32), "tf32", "bf16" or "f16" (the fpmath
    #: mode allows tensor cores of that kind; kernels without them compute in f32 all the
    #: same); None: the mode in
    #: force where the launcher is made (see :mod:`pydnnl.runtime.fpmath`)
    math: str | None = None
    #: A gathered from channels-last images (``GemmProblem.a_conv``: an implicit-GEMM
    #: convolution); only where :func:`gathers` says the device's kernel takes it
    a_conv: tuple | None = None
    #: C's rows scattered over a strided grid (``GemmProblem.c_rows``: one phase of a
    #: strided backward data); only where :func:`gathers` says the device's kernel takes it
    c_rows: tuple | None = None

    @property
    def has_epilogue(self) -> bool:
        return self.bias is not None or bool(self.post_ops) or bool(self.scales)

    def plain(self) -> "GemmShape":
        """The same GEMM without its epilogue (tuning keys: the epilogue costs next to
        nothing against the product, so plain and fused GEMMs share tuned parameters)."""
        return replace(self, bias=None, post_ops=(), epi_batch=(), epi_fixed=None,
                       epi_swap=False, scales=(), math=None)


def _problem(shape: GemmShape, panel: int | None = None, runtime_m: str | None = None,
             runtime_k: bool = False, runtime_ldc: bool = False, runtime_n: bool = False,
             **batch) -> fam.GemmProblem:
    return fam.GemmProblem(m=shape.m, n=shape.n, k=shape.k, trans_a=shape.trans_a,
                       trans_b=shape.trans_b if panel is None else False, alpha=shape.alpha,
                       beta=shape.beta, lda=shape.lda, ldb=shape.ldb if panel is None else None,
                       ldc=shape.ldc, runtime_offsets=True,
                       b_layout="plain" if panel is None else fam.panel_layout(panel),
                       bias=shape.bias, post_ops=shape.post_ops, epi_batch=shape.epi_batch,
                       epi_fixed=shape.epi_fixed, epi_swap=shape.epi_swap,
                       scales=shape.scales, runtime_m=runtime_m, runtime_k=runtime_k,
                       runtime_ldc=runtime_ldc, runtime_n=runtime_n, a_conv=shape.a_conv,
                       c_rows=shape.c_rows, **batch)


def gathers(engine, shape: GemmShape, splits: int = 1) -> bool:
    """Whether ``get_gemm`` runs ``shape`` (with ``a_conv`` or ``c_rows``) on the device:
    the hand-written NVIDIA kernel's rule picks a tile that gathers A and scatters C's rows
    (no other kernel does); with ``splits`` > 1, whether the batched kernel of
    :meth:`Plan.gemm_split`'s k slices does."""
    shape = resolved(shape)
    if engine is None or (shape.a_conv is None and shape.c_rows is None):
        return False
    if splits > 1:
        if shape.k % splits:
            return False
        part, prob = _split_problem(shape, splits)
        tile = rules.nv_tile(engine.info, prob, part.math)
        return tile is not None and gemm_nv.supports(prob, tile)
    tile = _nv_tile(engine.info, _problem(shape), shape.math)
    return tile is not None and gemm_nv.supports(_nv_problem(shape, tile), tile)


def _epilogue_shares_m(shape: GemmShape) -> bool:
    """Whether ``shape``'s epilogue leaves kernels of every m alike: no binary post-op (their
    operands' layouts span the destination), a bias and scales broadcast along C's rows
    (their layouts name no m). Other epilogues still run with a run-time m, but their
    operands' layouts key the kernel per m: the row clamps would buy nothing."""
    from ..kernels import post_ops as po

    if po.has_binary(shape.post_ops):
        return False
    row = -1 if shape.epi_swap else -2
    dims = [d for _, d in shape.scales if len(d) >= -row]
    if shape.bias is not None:
        dims.append(shape.bias[1])
    return all(d[row] == 1 for d in dims)


def _fits32(shape: GemmShape, batch: dict) -> bool:
    return fam.fits_int32(_problem(shape, **batch))


def runtime_m(shape: GemmShape, params: dict | None, batch: int = 1,
              strides: dict | None = None) -> str | None:
    """How the kernel for ``shape`` takes its row count at run time (one program for every m
    of its tile class; see ``GemmProblem.runtime_m``); ``params`` None: the hand-written
    NVIDIA kernel. Register tiles: ``"tall"`` where m fills a tile, ``"any"`` below; local
    tiles and the NVIDIA kernel: ``"any"`` (their row clamps sit in the tile loads, outside
    the product); None where m stays baked (transposed A, m == 1: one class of its own, an
    epilogue whose operands follow m (:func:`_epilogue_shares_m`), the NVIDIA kernel with
    a batch, and local tiles over buffers past 32-bit indices: their run-time
    sizes index in int32). A batch (``batch`` entries ``strides`` apart, the keywords of
    :func:`_problem`) takes its strides at run time too. Local tiles cost 2-5% with a
    run-time m on the H100 (figures at
    :func:`runtime_k`); the NVIDIA kernel nothing (at :func:`_nv_problem`). Measured on the
    AVX-512 Xeon with packed B: "tall" kernels run within 1-2% of baked ones, "any" kernels
    (per-row clamps) 4-6% below; at m == 1 the baked kernel's rows all read row 0, which the
    compiler merges (1x2048x512: 0.94-0.96 of it as "any")."""
    if shape.trans_a or shape.m == 1 or not _epilogue_shares_m(shape):
        return None
    if params is None:  # an epilogue along C's columns (a bias per column) takes it too
        return "any" if batch == 1 else None
    if params["local_prefetch"]:
        return "any" if _fits32(shape, _batch(batch, strides)) else None
    return "tall" if shape.m >= params["rows"] else "any"


def runtime_ldc(shape: GemmShape, params: dict | None, packed: bool) -> bool:
    """Whether the kernel for ``shape`` takes C's leading dimension at run time
    (``GemmProblem.runtime_ldc``): register tiles over packed B (``packed``) with a run-time
    m, one batch entry, no epilogue, n a multiple of the vectors (the forms
    :mod:`pydnnl.kernels.gemm_template` prints). The stride only enters the address of each
    vector store: GRU 512 T=50 N=64's two forward recurrent GEMMs (C 1024 and 512 wide)
    then share one program (a GEMM cost 55-60 ms of compilation inside a merged program on
    the 2-core AVX-512 Xeon); run time within noise (min ms, GRU training 116.9-121.9 ->
    116.9-120.8, LSTM 144.3-146.3 -> 143.5-149.0, alternating rounds)."""
    return (params is not None and not params["local_prefetch"] and packed
            and not shape.has_epilogue and not shape.trans_a and shape.n % 16 == 0
            and runtime_m(shape, params) is not None)


def runtime_n(shape: GemmShape, params: dict | None, panel: int | None) -> bool:
    """Whether the column guard of the kernel for ``shape`` compares with a run-time n
    (``GemmProblem.runtime_n``): the kernels :func:`runtime_ldc` covers whose last column
    tile reaches past n, over B packed in panels of the tile's width. The guard stays where
    it was (one compare per vector store): GRU 512 T=50 N=64's two recurrent weight
    gradients (1024 and 512 columns in 48-column tiles) then share one program. Kernel
    times baked -> run-time (10th percentile, load 4.4): 512x1024x3200 15983 -> 16110 us,
    3200x2048x512 32638 -> 32793, 64x2048x512 358 -> 354, 64x1024x512 170 -> 171."""
    return (runtime_ldc(shape, params, panel is not None) and panel == params["cols"]
            and shape.n % params["cols"] != 0)


def _batch(batch: int, strides: dict | None) -> dict:
    """The batch keywords of :func:`_problem` (none for one entry)."""
    return dict(batch=batch, **(strides or {})) if batch > 1 else {}


def runtime_k(shape: GemmShape, params: dict | None, batch: int = 1,
              strides: dict | None = None) -> bool:
    """Whether the kernel for ``shape`` takes its reduction length at run time (weight
    gradients, whose k is T*N or the batch; a batch takes its strides at run time too, an
    epilogue never depends on k); register tiles:
    plain B whose ragged columns cost at most one clamped k step; local tiles: k at least
    one k tile (a shorter k keeps its smaller tile) and 32-bit indices; ``params`` None (the
    hand-written NVIDIA kernel): one batch entry without an epilogue, where its tile allows
    (see :func:`_nv_problem`).
    Local tiles measured on the H100 (us, baked / run-time m / run-time m and k): 64x512x512
    17.7 / 18.5 / 18.8, 64x2048x512 17.9 / 18.8 / 19.7, 4x2048x512 13.8 / 14.1 / 14.1,
    64x512x2048 54.9 / 57.6 / 58.5, 200x1024x256 16.1 / 16-19 / 15.8 (k a whole number of
    k tiles; see ``kernels.gemm.cache_key``)."""
    if params is None:
        return not shape.has_epilogue and batch == 1
    if params["local_prefetch"]:
        return shape.k >= params["k_tile"] and _fits32(shape, _batch(batch, strides))
    cols = params["cols"]
    np_ = -(-shape.n // cols) * cols
    plain_ragged = not params["packed_b"] and not shape.trans_b and np_ > shape.n
    return not plain_ragged or np_ - shape.n <= shape.ldb


def choose_params(engine, shape: GemmShape, static_b: bool, batch: int = 1) -> dict:
    """Tuned parameters for ``shape`` on ``engine`` (perf database, default or search).

    ``static_b``: B is a weight the plan may pack once per execution into panels (the
    parameters then may ask for packed B); otherwise B is read as it lies. ``batch``: GEMMs
    of this shape one launch computes (the default's blocking counts their work-groups).
    """
    shape = shape.plain()
    prob = _problem(shape)
    info = engine.info

    def norm(p):
        p = fam.normalize_params(p)
        return p if static_b else dict(p, packed_b=False)

    default = norm(rules.shape_default(info, prob, rules.default_params(info), batch))

    def candidates():
        seen, out = set(), []
        for p in rules.search_space(prob, info):
            p = norm(p)
            key = repr(sorted(p.items()))
            if key not in seen and rules.is_valid(prob, p, info):
                seen.add(key)
                out.append(p)
        return out

    def make_launch(params):
        from ..memory.pool import BufferPool

        pr = _problem(shape, params["cols"] if params["packed_b"] else None,
                      runtime_m(shape, params), runtime_k(shape, params))
        kern = _build(engine, pr, params)
        pool = BufferPool.of(engine)
        bufs = [pool.take(max(pr.size(w), 1) * 4) for w in "abc"]
        vals = {"a": bufs[0], "b": bufs[1], "c": bufs[2], "a_off": np.int64(0),
                "b_off": np.int64(0), "c_off": np.int64(0), "m": np.int64(shape.m),
                "ksize": np.int64(shape.k)}
        args = [vals[n] for n in kern.src.arg_names]
        return lambda s: kern(s, *args)

    return choose(engine, "gemm", (fam.GENERATOR_VERSION, prob, static_b), default, candidates,
                  make_launch)


def resolved(shape: GemmShape) -> GemmShape:
    """``shape`` with its math decided: the fpmath mode in force where it is left open."""
    if shape.math is not None:
        return shape
    from .fpmath import gemm_math

    return replace(shape, math=gemm_math())


def packed_panel(engine, shape: GemmShape, slices: bool = False) -> int | None:
    """Columns per panel of the packed B that :func:`get_gemm` (``static_b=True``, and
    ``slices``) reads for ``shape`` on ``engine``, or None where it reads plain B (the
    hand-written NVIDIA kernel, or tuned parameters without packing): the layout a weights
    ``any`` resolves to."""
    shape = resolved(shape)
    if _nv_tile(engine.info, _problem(shape), shape.math, slices) is not None:
        return None
    params = choose_params(engine, shape, static_b=True)
    return int(params["cols"]) if params["packed_b"] else None


def _build_nv(engine, prob, tile, aligned: bool = False):
    # keyed without a run-time m or k: one program for every size of the tile class
    return get_kernel(engine, "gemm_nv", (gemm_nv.GENERATOR_VERSION, fam.key_problem(prob),
                                          tile, aligned),
                      lambda: gemm_nv.build_gemm_nv(prob, tile, aligned))


def _nv_problem(shape: GemmShape, tile) -> fam.GemmProblem:
    """The hand-written kernel's problem for ``shape`` with ``tile``: m at run time where it
    can be (:func:`runtime_m`), k too on the tensor cores (:func:`runtime_k`).

    Measured on the H100 (2026-11, us, baked / run-time, copies with compiled-in offsets):
    a run-time m costs nothing (1024x1024x512 33.1 / 33.2; 64x2048x512 16.5 / 16.7;
    1000x2048x512 54.2 / 55.1; 512x2048x2048 A transposed 113.4 / 113.4). A run-time k
    costs the SIMT kernel its k-loop schedule (1024x1024x512 33.1 / 35.9; 2048x2048x512
    98.1 / 100.8; weight gradients, A transposed: 512x2048x1024 58.3 / 77.7, 512x2048x2048
    113.4 / 152.4), so the SIMT kernel keeps k baked (a new k compiles a program); the TF32
    kernel loses nothing (1024^3 37 / 37-38 with run-time offsets, 512x2048x2048 A
    transposed 64.1 / 63.5, 2048x2048x512 48.8 / 48.5) and takes k at run time, whole
    slices only (a partial last slice is baked), and not where its blocks share k among
    work-groups (the shares are counted at build time) nor where it gathers A from images
    (the taps are counted at build time)."""
    rk = runtime_k(shape, None) and tile.mma is not None and tile.kslices == 1 \
        and shape.k % tile.bk == 0 and shape.a_conv is None
    return _problem(shape, None, runtime_m(shape, None), rk)


def _build(engine, prob, params):
    # the wide CPU default's source comes from a template where it covers the problem
    # (kernels.gemm_template: the same bytes, without loopy's code generation)
    return get_kernel(engine, "gemm", fam.cache_key(prob, params),
                      lambda: register_source(prob, params) or fam.build_gemm(prob, params))


class Gemm:
    """Launcher of one GEMM kernel with run-time offsets.

    When ``packed`` is true the kernel reads B packed in panels of ``panel`` columns
    (``packed_size`` elements per matrix): the plan packs its weights with :meth:`packer`.

    With ``split=True`` the launcher may cut k into ``splits`` slices (:func:`split_k`): one
    batched kernel writes the slices' products into ``part_elems`` elements of a caller's
    buffer (``part``, e.g. a scratchpad region), a second kernel adds them (and ``beta * C``)
    into C. Calls then pass ``part`` and ``part_off``.
    """

    def __init__(self, engine, shape: GemmShape, static_b: bool = False, split: bool = False,
                 b_panel: int | None = None, params: dict | None = None,
                 slices: bool = False):
        self.engine = engine
        self.shape = shape
        self._sizes: dict = {}  # run-time sizes of the (split) kernel, by argument name
        #: floats of workspace each call binds (``ws``, ``ws_off``): a kernel whose blocks
        #: share k among work-groups (``slices``), see :func:`pydnnl.kernels.gemm_nv.workspace`
        self.ws_elems = 0
        self.ws_counters = 0  # floats from the workspace's start to its counters
        self._kernel = None  # (the plain path builds it on first use: see kernel)
        # the hand-written NVIDIA kernel where the device rules pick it: plain B, never split
        # into launches (its blocks may share k among work-groups of one launch)
        self.nv_tile = _nv_tile(engine.info, _problem(shape), shape.math, slices)
        if self.nv_tile is not None:
            self.params = None
            self.packed, self.panel, self.packed_size = False, None, 0
            self.splits, self.part_elems, self.reduce = 1, 0, None
            prob = _nv_problem(shape, self.nv_tile)
            self.ws_elems = gemm_nv.workspace(prob, self.nv_tile)
            self.ws_counters = gemm_nv.counters_at(prob, self.nv_tile)
            self._kernel = _build_nv(engine, prob, self.nv_tile)
            # calls whose offsets keep float4 accesses aligned (nearly all) run the copy that
            # assumes so: the general kernel's per-access test costs 10-15%
            self._aligned = _build_nv(engine, prob, self.nv_tile, aligned=True)
            self._static: dict = {}
            return
        if shape.a_conv is not None or shape.c_rows is not None:
            raise invalid_arguments(f"gemm {shape.m}x{shape.n}x{shape.k}: no kernel on this "
                                    f"device gathers A from images or scatters C's rows "
                                    f"(see gathers())")
        self.params = (choose_params(engine, shape, static_b) if params is None
                       else fam.normalize_params(params))
        self.packed = bool(self.params["packed_b"])
        self.panel = self.params["cols"] if self.packed else None
        if b_panel is not None:
            # B arrives already packed in panels of b_panel columns (weights stored that way)
            if not (self.packed and fam.sub_panels_fit(b_panel, self.params)):
                raise invalid_arguments(
                    f"gemm {shape.m}x{shape.n}x{shape.k}: its tuned kernel cannot read B in "
                    f"panels of {b_panel} (params {self.params}); see reads_panels()")
            self.panel = b_panel
            split = False
        # an epilogue needs the whole sum: GEMMs with one never split k
        self.splits = rules.split_k(engine.info, shape.m, shape.n, shape.k,
                                    self.params) if split and not shape.has_epilogue else 1
        self.part_elems = 0
        self.reduce = None
        if self.splits > 1:
            self.splits = self._tensor_core_splits(self.splits)
            self._build_split()
        else:
            prob = _problem(shape, self.panel, runtime_m(shape, self.params),
                            runtime_k(shape, self.params),
                            runtime_ldc(shape, self.params, self.packed),
                            runtime_n(shape, self.params, self.panel))
            self.packed_size = prob.extent("b") if self.packed else 0
            self._prob = prob  # its kernel is built when first asked for (see get_gemm)

    @property
    def kernel(self):
        """The GEMM kernel (the split one's batched product); built on first use."""
        if self._kernel is None:
            self._kernel = _build(self.engine, self._prob, self.params)
        return self._kernel

    @property
    def _names(self) -> tuple:
        return self.kernel.src.arg_names

    def _split_strides(self, S: int) -> dict:
        sh = self.shape
        ks = sh.k // S
        return dict(stride_a=ks * (sh.lda if sh.trans_a else 1),
                    stride_b=ks * (1 if sh.trans_b else sh.ldb), stride_c=sh.m * sh.n)

    def _tensor_core_splits(self, S: int) -> int:
        """Where the fpmath mode allows tensor cores, the most slices (at most ``S``, halving)
        whose batched products the hand-written kernel's tensor-core tiles take (their k a
        multiple of the tile's depth): thin per-step products with a long k then run on them
        instead of the SIMT family. H200, DeepSpeech2-like training step with TF32 (32 x 7040 x
        1760 forward in 4 slices of 440, 32 x 1760 x 7040 backward in 16): SIMT 62 and 65 us a
        step; on the tensor cores in 2 and 8 slices 50 and 49 us; the whole training 9.6 ->
        8.2-8.3 ms (cuDNN with TF32: 3.9-4.2). Slice counts that are not powers of two (5, 10,
        11 slices of 352, 176, 160) failed in NVIDIA's OpenCL compiler (error -9999). Else
        ``S``."""
        sh = self.shape
        if sh.math not in gemm_nv.MMA_KINDS:
            return S
        t = S
        while t > 1:
            if sh.k % t == 0:
                part = replace(sh, k=sh.k // t, ldc=sh.n, beta=0.0)
                prob = _problem(part, **_batch(t, self._split_strides(t)))
                tile = rules.nv_tile(self.engine.info, prob, sh.math)
                if tile is not None and part.k % tile.bk == 0:  # whole slices, as measured
                    return t
            t //= 2
        return S

    def _build_split(self) -> None:
        sh, S = self.shape, self.splits
        m, n, ks = sh.m, sh.n, sh.k // S
        self.params = choose_params(self.engine, replace(sh, k=ks, ldc=n, beta=0.0), False,
                                    batch=S)
        self.packed, self.panel, self.packed_size = False, None, 0
        part_shape = replace(sh, k=ks, ldc=n, beta=0.0)
        strides = self._split_strides(S)
        self._kernel = gemm_kernel(self.engine, part_shape, self.params, batch=S, **strides)
        self._sizes = batch_sizes(part_shape, **strides, batch=S)
        self.reduce = splitk_reduce(self.engine, sh)
        self.part_elems = S * m * n

    def bound(self, fargs, extra: dict | None = None) -> list:
        """Bound launches (see :meth:`Kernel.bound`) of one call with arguments
        ``(a, a_off, b, b_off, c, c_off[, part, part_off])``; ``extra`` names the epilogue's
        operands by kernel argument (``bias``, ``po<i>_src1``, ``src_scale``, ...)."""
        if self.splits == 1:
            a, a_off, b, b_off, c, c_off = fargs[:6]
            k = self._static_nv(int(a_off), int(b_off), int(c_off))
            if k is not None:
                vals = {"a": a, "b": b, "c": c, "m": np.int64(self.shape.m),
                        "ksize": np.int64(self.shape.k), **(extra or {})}
                return [k.bound(_in_order(k, vals))]
            return [self._kernel_for(*fargs[:6]).bound(self.ordered(*fargs[:6], extra=extra))]
        a, a_off, b, b_off, c, c_off, part, part_off = fargs
        red = {"part": part, "c": c, "part_off": np.int64(part_off), "c_off": np.int64(c_off),
               "nsplits": np.int64(self.splits)}
        return [self.kernel.bound(self.ordered(a, a_off, b, b_off, part, part_off)),
                self.reduce.bound([red[nm] for nm in self.reduce.src.arg_names])]

    def packer(self, count: int, stride: int):
        """Kernel packing ``count`` B matrices of this GEMM's shape, the first at ``b_off``
        of ``b`` and then every ``stride`` elements, into consecutive panels from ``bp_off``
        of ``bp`` (``packed_size`` elements apart); both offsets are given per launch, in the
        order of :meth:`packer_args`. Packing never reads m, and the offsets are arguments:
        one program serves every batch and scratchpad placement; one B not transposed takes
        k at run time too (an activation whose rows are spatial points, e.g. im2col's
        backward weights)."""
        sh = self.shape
        if packing.runtime_packer(self.engine.info):
            return self._runtime_packer()
        rk = count == 1 and not sh.trans_b
        src = fam.GemmProblem(m=1, n=sh.n, k=1 if rk else sh.k, trans_b=sh.trans_b,
                              ldb=sh.ldb, batch=count, stride_b=None if rk else stride,
                              runtime_offsets=True, runtime_k=rk)
        pk = fam.pack_b(src, self.params)
        assert pk.problem.stride_b in (None, self.packed_size) or count == 1
        return get_kernel(self.engine, "gemm_pack", (fam.GENERATOR_VERSION, src, self.panel,
                                                      "runtime"), lambda: _packer_source(pk))

    def activation_packer(self):
        """Kernel packing one B of this GEMM's shape into its panels, both places given per
        launch: arguments ``(b, bp, b_off, bp_off)`` in the order of :meth:`packer_args`.
        For B that changes every execution (activations), with one kernel for every
        offset."""
        sh = self.shape
        if packing.runtime_packer(self.engine.info):
            return self._runtime_packer()
        rk = not sh.trans_b  # B's rows are k: one kernel for every k (T*N in weight gradients)
        src = fam.GemmProblem(m=1, n=sh.n, k=1 if rk else sh.k, trans_b=sh.trans_b,
                              ldb=sh.ldb, runtime_offsets=True, runtime_k=rk)
        pk = fam.pack_b(src, self.params)
        return get_kernel(self.engine, "gemm_pack", (fam.GENERATOR_VERSION, src, self.panel,
                                                      "runtime"), lambda: _packer_source(pk))

    def _runtime_packer(self):
        """The packer of every k, n, ``ldb``, panel width and matrix count
        (:func:`~pydnnl.kernels.pack_source.pack_b_runtime_source`): one program per
        transposition of B on the device."""
        from ..kernels.pack_source import pack_b_runtime_source

        trans = bool(self.shape.trans_b)
        return get_kernel(self.engine, "gemm_pack_rt", ("f32", trans),
                          lambda: pack_b_runtime_source(trans))

    def packer_args(self, kernel, b, b_off, bp, bp_off, count: int = 1,
                    stride: int = 0) -> tuple:
        """A packer's arguments, in its order: buffers, offsets and the sizes it takes at
        run time (``count`` and ``stride`` as given to :meth:`packer`)."""
        sh = self.shape
        vals = {"b": b, "bp": bp, "b_off": np.int64(b_off), "bp_off": np.int64(bp_off),
                "ksize": np.int64(sh.k)}
        if kernel.src.arg_names == pack_source.ARG_NAMES:
            sizes = pack_source.runtime_args(sh.k, sh.n, sh.ldb, int(self.params["cols"]),
                                             count, stride, self.packed_size)
            vals.update((name, np.int64(v)) for name, v in sizes.items())
        return tuple(vals[n] for n in kernel.src.arg_names)

    def _static_nv(self, a_off: int, b_off: int, c_off: int):
        """The hand-written kernel with these offsets compiled in, or None (other kernels, or
        this GEMM already has MAX_STATIC_NV such copies: plans that walk many sub-matrices
        keep the one run-time-offset kernel). Constant offsets let NVIDIA's compiler schedule
        the loads better: H100, 1024^3 with 64x128 blocks 68.9 -> 57.8 us, 64x2048x512 with
        32x64 blocks 20.9 -> 15.4 us (offsets in registers cost the same as int or long,
        with or without restrict)."""
        if self.nv_tile is None:
            return None
        key = (a_off, b_off, c_off)
        k = self._static.get(key)
        if k is None and len(self._static) < MAX_STATIC_NV:
            prob = replace(_nv_problem(self.shape, self.nv_tile), runtime_offsets=False,
                           a_offset=a_off, b_offset=b_off, c_offset=c_off)
            k = self._static[key] = _build_nv(self.engine, prob, self.nv_tile,
                                              aligned=gemm_nv.aligned_offsets(prob))
        return k

    def _kernel_for(self, a, a_off, b, b_off, c, c_off):
        """The kernel for a call with these offsets (:attr:`kernel` serves every call)."""
        if self.nv_tile is not None and gemm_nv.aligned_offsets(
                _problem(self.shape), int(a_off), int(b_off), int(c_off)):
            return self._aligned
        return self.kernel

    def ordered(self, a, a_off, b, b_off, c, c_off, extra: dict | None = None) -> list:
        """The kernel's arguments, in its order, for these buffers and offsets."""
        vals = {"a": a, "b": b, "c": c, "a_off": np.int64(a_off), "b_off": np.int64(b_off),
                "c_off": np.int64(c_off), "m": np.int64(self.shape.m),
                "ksize": np.int64(self.shape.k), "ldc": np.int64(self.shape.ldc),
                "ncols": np.int64(self.shape.n),
                **self._sizes, **(extra or {})}
        return _in_order(self.kernel, vals)

    def __call__(self, stream, a, a_off, b, b_off, c, c_off, part=None, part_off=0,
                 wait_for=None):
        if self.ws_elems:
            raise invalid_arguments(f"gemm {self.shape.m}x{self.shape.n}x{self.shape.k}: its "
                                    f"blocks share k, so it runs through a plan (Plan.gemm), "
                                    f"which binds their workspace")
        if self.splits == 1:
            return self._kernel_for(a, a_off, b, b_off, c, c_off)(
                stream, *self.ordered(a, a_off, b, b_off, c, c_off), wait_for=wait_for)
        if part is None:
            raise invalid_arguments(f"gemm {self.shape.m}x{self.shape.n}x{self.shape.k}: split "
                                    f"in {self.splits} slices, needs a part buffer of "
                                    f"{self.part_elems} elements, got none")
        evt = self.kernel(stream, *self.ordered(a, a_off, b, b_off, part, part_off),
                          wait_for=wait_for)
        red = {"part": part, "c": c, "part_off": np.int64(part_off), "c_off": np.int64(c_off),
               "nsplits": np.int64(self.splits)}
        return self.reduce(stream, *[red[nm] for nm in self.reduce.src.arg_names],
                           wait_for=[evt] if wait_for is not None else None)

    def flops(self) -> int:
        return 2 * self.shape.m * self.shape.n * self.shape.k

    def global_size_for_rows(self, rows: int) -> tuple[int, ...]:
        """The launch grid that computes at least C's first ``rows`` rows (whole row groups,
        so up to one group's rows more): a plan whose active rows shrink launches less."""
        p, sh = self.params, self.shape
        if self.splits > 1 or self.ws_elems:
            raise ValueError("Gemm.global_size_for_rows: a split GEMM always runs whole")
        if self.nv_tile is not None:  # axis 1: one work-group per bm rows
            src = self.kernel.src
            gs = list(src.global_size if src.grid is None else launch_size(src, {"m": sh.m}))
            if not sh.trans_a:
                gs[1] = min(gs[1], -(-max(rows, 1) // self.nv_tile.bm))
            return tuple(gs)
        if self.kernel.src.grid is not None:  # runtime m: the grid of the first rows
            return launch_size(self.kernel.src, {"m": min(max(rows, 1), sh.m)})
        full = self.kernel.src.global_size
        if sh.trans_a:
            return full  # not used with a shrinking m
        gs = list(full)
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


def _in_order(kernel, vals: dict) -> list:
    """``kernel``'s arguments in its order from ``vals`` (by argument name)."""
    missing = [n for n in kernel.src.arg_names if n not in vals]
    if missing:
        raise KeyError(f"{kernel.name}: kernel arguments {missing} not bound (an epilogue's "
                       f"operands come from the plan's epilogue mapping)")
    return [vals[n] for n in kernel.src.arg_names]


_cache: dict = {}
# copies of the hand-written kernel with compiled-in offsets per GEMM (see Gemm._static_nv)
MAX_STATIC_NV = 4


def _packer_source(pk):
    """A packer's kernel: printed where :func:`~pydnnl.kernels.copy_source.pack_b_source`
    covers it (one B with run-time offsets and k: no loopy in a first-ever creation), else
    loopy's."""
    from ..kernels.copy_source import pack_b_source

    src = pack_b_source(pk)
    return src if src is not None else pk.build()


def get_gemm(engine, shape: GemmShape, static_b: bool = False, split: bool = False,
             b_panel: int | None = None, params: dict | None = None,
             slices: bool = False, kernel: bool = True) -> Gemm:
    """The GEMM launcher for ``shape``; ``static_b`` allows a kernel that reads packed B,
    ``split`` one that cuts k into slices (the caller then provides the partial buffer);
    ``b_panel``: B is given packed in panels of that many columns (``panel<w>``, see
    :func:`reads_panels`), never packed by the plan; ``params``: the register tile to use
    instead of the tuned one (a layout-bound caller's device rule, e.g. a tile as wide as the
    panels its weights are stored in); ``slices``: the caller binds a workspace (``ws``,
    ``ws_off``; :meth:`Plan.gemm` does), so the hand-written NVIDIA kernel may share k among
    the work-groups of a block (:mod:`~pydnnl.runtime.heuristics.gemm_slices`);
    ``kernel=False``: the caller asks only for the tuned tile and its packing (e.g. a batched
    GEMM's panels), and the launcher's own kernel is not built until something launches it
    (every other caller gets it built here, at creation, never at execution)."""
    shape = resolved(shape)
    pkey = None if params is None else repr(sorted(fam.normalize_params(params).items()))
    key = (id(engine.context), shape, static_b, split, b_panel, pkey, slices)
    g = _cache.get(key)
    if g is None:
        g = _cache[key] = Gemm(engine, shape, static_b or b_panel is not None, split, b_panel,
                               params, slices)
    if kernel:
        g.kernel  # noqa: B018 (built now)
    return g


def reads_panels(engine, shape: GemmShape, width: int) -> bool:
    """Whether the tuned kernel of ``shape`` (weights B, ``static_b``) can read B stored in
    panels of ``width`` columns (``get_gemm(..., b_panel=width)``): a register tile reading
    packed B whose width is a multiple of ``width``, itself a multiple of its vectors. Weights
    kept in that layout (a ``format_tag.any`` resolved to it) then need no packing per
    execution."""
    shape = resolved(shape)
    if rules.nv_tile(engine.info, _problem(shape), shape.math) is not None:
        return False
    params = choose_params(engine, shape, static_b=True)
    return bool(params["packed_b"]) and fam.sub_panels_fit(width, params)


def gemm_kernel(engine, shape: GemmShape, params: dict, batch: int = 1, stride_a: int = 0,
                stride_b: int = 0, stride_c: int = 0, panel: int | None = None):
    # (an epilogue in ``shape`` goes into the kernel; ``params`` were tuned without it)
    """The kernel of ``batch`` GEMMs of ``shape`` (operand ``t`` at ``off + t * stride``),
    plain B (``panel``: B packed in panels of that many columns, as :meth:`Gemm.packer`
    writes them for ``params``), run-time offsets, with ``params``. Its run-time sizes (m, k
    and the batch strides where the rules make them arguments: :func:`runtime_m`,
    :func:`runtime_k`) are bound by name from :func:`batch_sizes`: one program serves, e.g.,
    every tile count of Winograd's batched products."""
    shape = resolved(shape)
    bk = _batch(batch, dict(stride_a=stride_a, stride_b=stride_b, stride_c=stride_c))
    if panel is None:
        prob = _problem(shape, **bk)
        tile = rules.nv_tile(engine.info, prob, shape.math)
        if tile is not None:
            if (prob.a_conv is not None or prob.c_rows is not None) and \
                    not gemm_nv.supports(prob, tile):
                raise runtime_error(f"gemm: the gathering GEMM {prob} has no kernel here "
                                    f"(the caller checks gathers() first)")
            return _build_nv(engine, prob, tile)
    strides = {k: v for k, v in bk.items() if k != "batch"}
    prob = _problem(shape, panel, runtime_m(shape, params, batch, strides),
                    runtime_k(shape, params, batch, strides), **bk)
    return _build(engine, prob, params)


def batch_sizes(shape: GemmShape, stride_a: int = 0, stride_b: int = 0,
                stride_c: int = 0, batch: int = 1) -> dict:
    """Values of every run-time size a GEMM kernel of ``shape`` may take, by argument name
    (a launch binds those its kernel names)."""
    return {"m": np.int64(shape.m), "ksize": np.int64(shape.k),
            "stride_a": np.int64(stride_a), "stride_b": np.int64(stride_b),
            "stride_c": np.int64(stride_c), "nbatch": np.int64(batch)}


def splitk_reduce(engine, shape: GemmShape):
    """The kernel adding the partial products (``m x n`` each) and ``beta * C`` into C:
    arguments ``part, c, part_off, c_off`` and the slice count ``nsplits`` (a run-time
    value: the split rules follow k, e.g. a weight gradient's minibatch)."""
    red = SplitKReduceProblem(m=shape.m, n=shape.n, splits=size_var("nsplits"), ldc=shape.ldc,
                              beta=shape.beta, wg=rules.splitk_reduce_wg(engine.info))
    return get_kernel(engine, "splitk_reduce", red, lambda: build_splitk_reduce(red))


def split_nv_tile(engine, shape: GemmShape, splits: int):
    """The hand-written NVIDIA kernel's blocking that :meth:`Plan.gemm_split` launches for
    ``shape`` cut into ``splits`` k slices (one batched GEMM of ``k / splits`` each), or None
    where the loopy family runs them (other devices, shapes the kernel does not take)."""
    part, prob = _split_problem(resolved(shape), splits)
    return rules.nv_tile(engine.info, prob, part.math)


def _split_problem(shape: GemmShape, splits: int) -> tuple:
    """``(part, problem)``: the shape of one of :meth:`Plan.gemm_split`'s ``splits`` k slices
    of ``shape`` and the kernel problem of their batched GEMM."""
    ks = shape.k // splits
    part = replace(shape, k=ks, ldc=shape.n, beta=0.0)
    strides = dict(stride_a=ks * (shape.lda if shape.trans_a else 1),
                   stride_b=ks * (1 if shape.trans_b else shape.ldb),
                   stride_c=shape.m * shape.n)
    return part, _problem(part, **_batch(splits, strides))
