"""im2col + GEMM: explicit patch matrices in the scratchpad, every product through ``get_gemm``.

Per chunk of images (sized so that the column buffer stays under ``chunk_mb``):

* forward: ``im2col`` gathers the patches, one GEMM per group multiplies them with the
  weights straight into dst; a leading sum post-op rides on the GEMM's beta, the bias and an
  eltwise chain on its store where dst is channels-last and there is one group, otherwise
  they follow in one in-place epilogue;
* backward data: one GEMM per group writes the column gradient, ``col2im`` gathers it into
  diff_src with bias and post-ops (deconvolution forward);
* backward weights: ``im2col`` then one GEMM per group accumulating over the chunks
  (beta = 1 after the first), and a channel reduction for the bias gradient.

The GEMMs read activations in place when their layout is a matrix: channels-last
(``hwc``: ``[N*P, C]`` rows when images follow each other) or channels-first (``chw``: one
``[C, P]`` matrix per image, so one GEMM per image and group). Other layouts (blocked,
oddly strided) are staged through the scratchpad with the reorder kernel; likewise weights
that are not a ``[OCg, ICg*K]`` or ``[ICg*K, OCg]`` matrix per group. 1x1 stride-1 unpadded
convolutions skip ``im2col``/``col2im`` in forward and backward data: the activations are the
GEMM operands.

Speed (``format_tag.any`` picks channels-last activations and ``[ICg*K, OCg]`` weights, or
for a forward of one group whose tuned GEMM reads packed B the weights in its panels,
``A<k...>b<w>a``, read where they lie): every GEMM reads B packed in its kernel's panels (the
weights once per execution unless stored so, an activation B once per chunk); backward
descriptors given such a forward as hint reorder the panels into their own packed B in one
pass (backward data), or write them in place, one GEMM per panel (backward weights; with a
k split, GPUs: its plain result packed into them by the forward's packing kernel);
backward weights into ``[ICg*K, OCg]`` weights (or panels) writes its patches transposed,
``[ICg*K, N*P]``, so that its GEMM reads A row by row (1x1 layers too);
on GPUs that GEMM is split along its long k (``split_k``), as is backward data's where its
tiles leave the device mostly idle (expanding 1x1 layers at mb 1). See docs/performance.md.
"""
from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from ....conv_shapes import ConvProblem
from ....error import runtime_error
from ....kernels.conv_direct import largest_divisor_at_most
from ....kernels.conv_im2col import (
    Col2ImProblem,
    EpilogueProblem,
    Im2ColProblem,
    build_col2im,
    build_epilogue,
    build_im2col,
    col2im_runtime,
    epilogue_runtime,
    im2col_runtime,
)
from ....kernels.reorder import ReorderProblem
from ....kernels.transpose_source import BLOCK as TRANSPOSE_BLOCK
from ....kernels.transpose_source import TransposeProblem, build_transpose
from ....runtime.gemm import (
    GemmShape,
    gathers,
    get_gemm,
    packed_panel,
    reads_panels,
    resolved,
    split_nv_tile,
)
from ....runtime.heuristics.conv import (
    CPU_WGRAD_MAX_SLICES,
    blocked_transpose,
    copy_lanes,
    copy_rows,
    cpu_wgrad_slices,
    gathered_phases,
    gathered_wgrad,
    im2col_per_item,
    nv_resident_blocks,
    one_round_splits,
    wgrad_kmajor_patches,
)
from ....runtime.plan import MAX_PANEL, SCRATCH, Plan
from ..phases import Phase, phases_2d
from ..problem import (
    ActMatrix,
    WeiMatrix,
    act_matrix,
    dense_layout,
    panel_layout,
    panel_tag,
    panel_width_of,
    wei_matrix,
    with_offset,
)
from ..roles import BIAS, DST, SRC, WEI
from .base import Solver
from .direct import add_bias_grad


class Im2colGemmSolver(Solver):
    name = "im2col_gemm"
    family = "direct"
    act_family = "nhwc"
    wei_order = "gkio"

    def default_params(self, problem: ConvProblem, engine) -> dict:
        # CPUs: chunks whose patches stay in the last-level cache between the copy and the
        # GEMM (ResNet-50 at mb32, 2-core EPYC: 3x3 forward 77 -> 54 ms, conv1 backward
        # weights 204 -> 104 ms going from 64 to 8-16 MB); GPUs want the largest GEMMs
        if engine is not None and engine.info.is_gpu:
            # forward: one chunk up to 256 MB of patches (H200, mb 32, min ms, 64 -> 256:
            # v1.5 res3a_branch2b 0.372 -> 0.276, conv1 0.350 -> 0.329, v1.5 res5a_branch2b
            # 0.427 -> 0.409, the others within 3%); backward weights kept 64 (conv1 0.834 ->
            # 0.876 with 256, the others within noise)
            out = {"chunk_mb": 256 if problem.kind == "fwd" else 64}
            if problem.kind == "bwd_w":
                out["split_k"] = _gpu_splits(problem, engine)
            elif problem.kind == "bwd_d":
                out["split_k"] = _gpu_splits_bwd_d(problem, engine)
            return out
        if problem.kind == "bwd_w":
            # k slices that keep a short GEMM's operands in cache (heuristics.conv
            # cpu_wgrad_slices decides per GEMM, up to ``wgrad_slices``; an explicit
            # ``split_k`` instead cuts every activation-B GEMM as asked)
            return {"chunk_mb": 16, "wgrad_slices": CPU_WGRAD_MAX_SLICES}
        return {"chunk_mb": 8}

    def tuning_space(self, problem: ConvProblem, engine) -> list[dict]:
        base = self.default_params(problem, engine)
        return [{**base, "chunk_mb": c} for c in (4, 8, 16, 64, 256)]

    def workspace_bytes(self, problem: ConvProblem, params: dict | None = None) -> int:
        params = params or {"chunk_mb": 64}
        size = _build(problem, params, None, dry=True).scratch_bytes
        if _may_gather(problem):  # (a device whose GEMM gathers stages the weights instead)
            size = max(size, 4 * problem.groups * problem.ocg * problem.icg * problem.K)
        if problem.kind == "bwd_w" and int(params.get("wgrad_slices", 0)) > 1:
            # a device's rule may leave the GEMMs whole (CPUs: cpu_wgrad_slices), whose
            # plan (packed activation B) needs other scratch than the split one
            size = max(size, _build(problem, dict(params, wgrad_slices=0), None,
                                    dry=True).scratch_bytes)
        return size

    def weights_any(self, problem: ConvProblem, engine, dims: tuple) -> str | None:
        """The forward GEMM's packed panels (``A<k...>b<w>a``: output channels in panels of
        the tuned kernel's width ``w``, then taps and input channels as its k runs) where it
        multiplies channels-last rows by the weights as packed B, one group: the weights are
        then read where they lie, not packed on every execution (ResNet-50 res5a_branch2b at
        mb 1: 9.4 MB of weights). None elsewhere (the ``gkio`` order)."""
        if problem.kind != "fwd" or problem.groups != 1 or len(dims) != 2 + problem.nsp \
                or engine is None:
            return None
        seen: dict = {}
        _build(problem, self.default_params(problem, engine), None, dry=True, seen=seen)
        shape = seen.get("weights_gemm")
        w = packed_panel(engine, shape) if shape is not None else None
        return panel_tag(problem.nsp, w) if w is not None else None

    def build_plan(self, problem: ConvProblem, params: dict, engine) -> Plan:
        plan = _build(problem, params, engine, dry=False)
        reserved = self.workspace_bytes(problem, params)
        if plan.scratch_bytes > reserved:  # the descriptor's scratchpad would overflow
            raise runtime_error(f"im2col_gemm: the plan needs {plan.scratch_bytes} bytes of "
                                f"scratchpad, the descriptor reserved {reserved}")
        return plan


def _act_view(p: ConvProblem, which: str, mode: str | None) -> ActMatrix | None:
    lay, ch, sp = (p.dst, p.oc, p.dst_sp) if which == "dst" else (p.src, p.ic, p.src_sp)
    if mode is not None:
        return act_matrix(lay, p.mb, ch, sp, mode)
    return act_matrix(lay, p.mb, ch, sp, "hwc") or act_matrix(lay, p.mb, ch, sp, "chw")


def _hwc_dense(nimg: int, ch: int, sp: tuple, off: int) -> tuple[tuple, ActMatrix]:
    """A dense channels-last layout of ``[nimg, ch, sp...]`` at scratch offset ``off``."""
    nd = 2 + len(sp)
    lay = with_offset(dense_layout([nimg, ch, *sp], [0, *range(2, nd), 1]), off)
    P = 1
    for v in sp:
        P *= v
    return lay, ActMatrix("hwc", ch, P * ch, off, True)


def _baked_copy_shape(ip: Im2ColProblem, engine, col_elems: int, p: ConvProblem):
    """``ip`` with the device's work-group width, rows per work-item and index width
    (:func:`~pydnnl.runtime.heuristics.conv.copy_rows`): 32-bit where the chunk's column
    and one image of the source (its positions past the image index) stay below 2**31."""
    wg, rows, narrow = copy_rows(engine.info if engine is not None else None)
    if narrow:
        _, per = ip.src
        image = sum((n - 1) * abs(int(d[1])) for n, d in zip([1, p.ic, *p.src_sp], per))
        narrow = col_elems < 2 ** 31 and image + abs(int(ip.src[0])) < 2 ** 31
    return replace(ip, wg=wg, rows_per_item=rows, index32=narrow)


def per_item(engine) -> int:
    """Elements per work-item of the copy kernels: CPU runtimes pay per work-group."""
    return 4 if engine is not None and engine.info.is_gpu else 64


_PACK_GROUPS = 8  # activation B is packed per group up to this many groups (a kernel each)


def _progressions(offsets: list[int]) -> list[tuple[int, int, int, int]]:
    """Split ``offsets`` (in order) into runs ``(first index, count, start, stride)`` of
    evenly spaced values."""
    runs: list[tuple[int, int, int, int]] = []
    i = 0
    while i < len(offsets):
        j = i + 1
        stride = offsets[j] - offsets[i] if j < len(offsets) else 0
        while j < len(offsets) and offsets[j] - offsets[j - 1] == stride:
            j += 1
        if j - i == 1:
            stride = 0
        runs.append((i, j - i, offsets[i], stride))
        i = j
    return runs


_SPLIT_MIN_K = 512  # fewest k per slice of a split GEMM


def _gpu_splits(p: ConvProblem, engine) -> int:
    """How many k slices a GPU's backward-weights GEMM should have at most: enough that
    every compute unit gets about four work-groups of an [ICg*K, OCg] result cut into
    128 x 64 tiles (the NVIDIA default register and work-group tiles)."""
    tiles = -(-(p.icg * p.K) // 128) * -(-p.ocg // 64)
    return max(1, min(256, -(-4 * engine.info.compute_units // tiles)))


def _gpu_splits_bwd_d(p: ConvProblem, engine) -> int:
    """k slices of a GPU's backward-data GEMM (``[N*P, ICg*K] = diff_dst @ W``, k = OCg):
    only where its 128 x 64 tiles cover at most half the compute units and k is long, the
    expanding 1x1 layers at small minibatches (H200, mb 1: res5 branch2c, 49 x 512 x 2048,
    117 -> 36 us in 4 slices). Splitting more tiles lost: res4a branch1 at mb 32 (392 tiles
    in 2 slices) 0.21 -> 0.37 ms. 1 elsewhere: one GEMM, weights packed."""
    tiles = -(-(p.mb * p.P) // 128) * -(-(p.icg * p.K) // 64) * p.groups
    cap = engine.info.compute_units // tiles
    return _splits(p.ocg, cap) if cap > 1 else 1


def _splits(k: int, cap: int) -> int:
    """The largest divisor of ``k`` at most ``cap`` leaving slices of >= _SPLIT_MIN_K."""
    return largest_divisor_at_most(k, max(1, min(cap, k // _SPLIT_MIN_K)))


def _split_count(engine, shape: GemmShape, cap: int, wcap: int = 0) -> int:
    """k slices of a GEMM with an activation B (backward weights, split backward data): the
    largest divisor of k at most ``cap`` leaving slices of >= _SPLIT_MIN_K, fewer on NVIDIA
    GPUs where that count's batched blocks would overflow one round of the device
    (:func:`~pydnnl.runtime.heuristics.conv.one_round_splits`). A dry plan (no engine) takes
    the first count, the most scratch any device's choice needs."""
    if cap <= 1:  # no count asked for: CPUs' backward weights may cut by their rule
        if wcap <= 1:
            return 1
        if engine is None:  # a dry plan: the most scratch the rule may need
            return _splits(shape.k, wcap)
        if engine.info.is_gpu or shape.trans_a:
            return 1
        return cpu_wgrad_slices(engine.info, shape.m, shape.n, shape.k, wcap)
    first = _splits(shape.k, cap)
    if engine is None or first <= 1:
        return first

    def blocks_of(s: int):
        t = split_nv_tile(engine, shape, s)
        if t is None or t.mma is not None:
            return None
        return -(-shape.m // t.bm) * -(-shape.n // t.bn) * s, nv_resident_blocks(t)

    return one_round_splits(engine.info, shape.k, first, _SPLIT_MIN_K, blocks_of)


def _wgrad_splits(p: ConvProblem, params: dict, engine, Kf: int) -> bool:
    """Whether backward weights' GEMMs may be cut along k: GPUs (and a dry plan) wherever
    ``split_k`` allows, CPUs where their rule cuts the chunk's ``[Kf, OCg]`` GEMM."""
    if int(params.get("split_k", 1)) > 1:
        return True
    cap = int(params.get("wgrad_slices", 0))
    if cap <= 1 or engine is None or engine.info.is_gpu:
        return cap > 1 and engine is None
    chunk = max(1, int(float(params.get("chunk_mb", 64)) * (1 << 18)))
    nb = largest_divisor_at_most(p.mb, max(1, chunk // max(p.groups * p.P * Kf, 1)))
    return cpu_wgrad_slices(engine.info, Kf, p.ocg, nb * p.P, cap) > 1


class _Call(NamedTuple):
    """One GEMM of a chunk: ``C = op(A) @ op(B)`` at the operands' refs and offsets;
    ``weights``: B is the layer's weights (packed once per execution); ``batch``: ``(count,
    B stride, C stride)`` where it is ``count`` GEMMs in one launch, A shared."""

    shape: GemmShape
    a: object
    a_off: int
    b: object
    b_off: int
    c: object
    c_off: int
    weights: bool
    batch: tuple | None = None


def _pack_runs(calls: list, split_k: int, engine=None,
               wcap: int = 0) -> tuple[list, list, list]:
    """How a chunk's GEMMs read their activation B: ``(split, runs, rest)``: the calls split
    along k (see :func:`_emit`), the packing runs ``(slot, shape, b, start, count, stride,
    call indices)`` (one evenly spaced run of one shape's B matrices each) and the indices
    of the other calls."""
    split, rest = [], []
    for i, c in enumerate(calls):
        s = 1 if (c.weights or c.batch or (split_k <= 1 and wcap <= 1)) else \
            _split_count(engine, c.shape, split_k, wcap)
        (split if s > 1 else rest).append((i, s))
    by_shape: dict = {}
    for i, _ in rest:
        if not calls[i].weights and not calls[i].batch:
            by_shape.setdefault((calls[i].shape, calls[i].b.key), []).append(i)
    runs = []
    for (shape, key), idx in by_shape.items():
        prog = _progressions([calls[i].b_off for i in idx])
        if len(prog) > _PACK_GROUPS:
            continue
        for r, (first, count, start, stride) in enumerate(prog):
            runs.append((f"act_b{r}:{key}:{shape}", shape, calls[idx[first]].b, start, count,
                         stride, idx[first:first + count]))
    return split, runs, [i for i, _ in rest]


def _packed_elems(plan: Plan, shape: GemmShape) -> int:
    """Scratch elements :meth:`Plan.pack_b` takes per packed B of ``shape``."""
    if plan.dry:
        return shape.k * (shape.n + MAX_PANEL - 1)
    g = plan.gemm_launcher(shape, static_b=True)
    return g.packed_size if g.packed else 0


def _reserve_packs(plan: Plan, chunks: list, split_k: int, wcap: int = 0) -> None:
    """Size every packing slot for the most matrices any chunk packs into it. Chunks differ:
    backward weights' first GEMM of each group overwrites (beta 0) and the rest accumulate,
    so the first chunk packs fewer matrices of the accumulating shape than the others."""
    most: dict = {}
    for calls in chunks:
        for slot, shape, _, _, count, _, _ in _pack_runs(calls, split_k, plan.engine, wcap)[1]:
            if slot in most:
                most[slot][1] = max(most[slot][1], count)
            else:
                most[slot] = [count, count, shape]
    for slot, (first, top, shape) in most.items():
        if top > first:  # the first chunk would size the slot too small
            plan.alloc(top * _packed_elems(plan, shape), slot)


def _emit(plan: Plan, calls: list, split_k: int = 1, wgemm=None, wcap: int = 0) -> None:
    """Add a chunk's GEMMs. Weights were packed once per execution; an activation B is
    packed here, one launch per evenly spaced run of its matrices, into a scratch region all
    chunks reuse (every operand of the register-tile kernel is then read contiguously, and a
    transposed B no longer costs a cache line per element). ``split_k``: GEMMs with an
    activation B are split along k into at most this many slices (GPUs, backward weights).
    ``wgemm``: the launcher of the GEMMs with the weights as B where it is not the tuned one
    of their shape (weights stored in panels of another width)."""
    split, runs, rest = _pack_runs(calls, split_k, plan.engine, wcap)
    for i, s in split:
        c = calls[i]
        plan.gemm_split(c.shape, *c[1:7], splits=s, slot=f"split:{c.shape}")
    placed: dict[int, tuple] = {}
    for slot, shape, b, start, count, stride, idx in runs:
        ref, off0, step, packed = plan.pack_b(shape, b, start, count, stride, slot=slot)
        for j, i in enumerate(idx):
            placed[i] = (ref, off0 + j * step, packed)
    for i in rest:
        shape, a, a_off, b, b_off, c, c_off, is_w, batch = calls[i]
        if batch:  # one launch, A shared
            count, b_step, c_step = batch
            ref, off, step, params = plan.pack_b_batched(shape, count, b, b_off, b_step,
                                                         slot=f"batch_b:{shape}")
            plan.gemm_batched(shape, count, 0, step, c_step, a, a_off, ref, off, c, c_off,
                              params=params)
        elif is_w:  # forward's weights: the GEMM may carry the bias (see _build)
            plan.gemm(shape if wgemm is None else wgemm, a, a_off, b, b_off, c, c_off,
                      packed=True,
                      bias=BIAS if shape.bias is not None else None)
        elif i in placed:
            ref, off, packed = placed[i]
            plan.gemm(shape, a, a_off, ref, off, c, c_off, packed=packed)
        else:
            plan.gemm(shape, a, a_off, b, b_off, c, c_off)


def _panel_weights(plan: Plan, p: ConvProblem, shape: GemmShape, width: int) -> tuple:
    """``(wpack, launcher)`` of a forward whose weights lie in packed panels of ``width``
    columns: read in place by the tuned kernel where its panels are those (launcher None)
    or it reads panels of ``width`` side by side; otherwise (a tuned width other than the
    one the descriptor saw) reordered once per execution into the tuned kernel's packed B,
    or its plain B, in the region a dry plan reserves for packing."""
    if plan.dry:  # reserve the fallback's region (no engine: the tuned width is unknown)
        return plan.pack_b(shape, WEI, p.wei[0]), None
    shape = plan._math(shape)
    g = plan.gemm_launcher(shape, static_b=True)
    if g.packed and g.panel == width:
        return (WEI, p.wei[0], 0, True), None
    if reads_panels(plan.engine, shape, width):
        return (WEI, p.wei[0], 0, True), get_gemm(plan.engine, shape, b_panel=width)
    OCg, ICg, Kf = p.ocg, p.icg, p.icg * p.K
    size = g.packed_size if g.packed else Kf * OCg
    off = plan.alloc(size)
    if g.packed:
        lay = panel_layout(OCg, ICg, p.kernel, g.panel, off)
        copies = [ReorderProblem.f32([1, OCg, ICg, *p.kernel], p.wei, p.wei_n, lay, off + size)]
    else:  # plain B [Kf, OCg], kic order
        copies = _panel_copies(p, width, off, False)
    for rp in copies:
        plan.reorder(rp, WEI, SCRATCH)
    return (SCRATCH, off, size, True), None


def _panel_copies(p: ConvProblem, width: int, plain_off: int, to_panels: bool) -> list:
    """Reorders between weights in the forward's panels of ``width`` (``WEI``) and the plain
    ``[Kf, OCg]`` matrix (kic order, one group) at ``plain_off`` of the scratchpad, as
    strided views over ``[panels, Kf, width]`` (whole panels, then the last partial one):
    both sides then run with unit stride innermost (the blocked layout's generic reorder
    ran 10-20x slower on ResNet-50's res5 weights)."""
    OCg, Kf = p.ocg, p.icg * p.K
    off0 = p.wei[0]
    full, tail = divmod(OCg, width)
    out = []
    for n, cols, po, wo in ((full, width, 0, 0), (1 if tail else 0, tail, full * width,
                                                   full * Kf * width)):
        if n == 0:
            continue
        plain = (plain_off + po, ((1, width, ()), (1, OCg, ()), (1, 1, ())))
        panels = (off0 + wo, ((1, Kf * width, ()), (1, width, ()), (1, 1, ())))
        plain_n = plain_off + OCg * Kf
        src, dst = (plain, panels) if to_panels else (panels, plain)
        src_n, dst_n = (plain_n, p.wei_n) if to_panels else (p.wei_n, plain_n)
        out.append(ReorderProblem.f32([n, Kf, cols], src, src_n, dst, dst_n))
    return out


def _transposed_panels(plan: Plan, p: ConvProblem, shape: GemmShape,
                       width: int) -> tuple | None:
    """Backward data's weights B (``[OCg, Kf]``) from weights in the forward's panels of
    ``width``: reordered straight into the tuned kernel's packed B (panels of ``w`` columns
    of ``Kf``), one pass instead of a plain copy and its packing, where ``w`` divides ``Kf``
    (``wpack``); else None."""
    g = plan.gemm_launcher(plan._math(shape), static_b=True)
    OCg, Kf = p.ocg, p.icg * p.K
    if not g.packed or Kf % g.panel:
        return None
    wq = g.panel
    off = plan.alloc(g.packed_size)
    end = off + g.packed_size
    full, tail = divmod(OCg, width)
    for n, rows, po in ((full, width, 0), (1 if tail else 0, tail, full)):
        if n == 0:
            continue
        src = (p.wei[0] + po * Kf * width,
               ((1, Kf * width, ()), (1, 1, ()), (1, wq * width, ()), (1, width, ())))
        dst = (off + po * width * wq,
               ((1, width * wq, ()), (1, wq, ()), (1, OCg * wq, ()), (1, 1, ())))
        plan.reorder(ReorderProblem.f32([n, rows, Kf // wq, wq], src, p.wei_n, dst, end),
                     WEI, SCRATCH)
    return SCRATCH, off, g.packed_size, True


def _pack_into_panels(plan: Plan, p: ConvProblem, width: int, plain_off: int) -> bool:
    """Backward weights into the forward's panels of ``width``: the plain ``[Kf, OCg]``
    result at ``plain_off`` of the scratchpad packed into them by the forward GEMM's own
    packing kernel (one launch, as fast as the forward's packing was), where that GEMM still
    reads panels of ``width``; False otherwise (then reordered)."""
    if plan.dry:
        return False
    fwd = replace(p, kind="fwd")
    seen: dict = {}
    _build(fwd, Im2colGemmSolver().default_params(fwd, plan.engine), None, dry=True,
           seen=seen)
    shape = seen.get("weights_gemm")
    if shape is None:
        return False
    g = plan.gemm_launcher(plan._math(shape), static_b=True)
    if not g.packed or g.panel != width or g.packed_size != width * -(-p.ocg // width) * (
            p.icg * p.K):
        return False
    pk = g.packer(1, 0)
    plan.launch(pk, g.packer_args(pk, SCRATCH, plain_off, WEI, p.wei[0]))
    return True


def _gather_shape(p: ConvProblem, engine, ldb: int, trans_b: bool, T, beta: float,
                  epi: dict) -> GemmShape | None:
    """The forward's GEMM over every image with A gathered from a dense channels-last
    source (``GemmShape.a_conv``; weights B in kic order, ``ldb`` and ``trans_b`` as they
    lie), where the device's kernel takes it (:func:`gathers`: NVIDIA's hand-written kernel,
    input channels in whole k slices); else None (im2col)."""
    # (1x1 layers keep the copy: strided ones lost with the gather, H200 mb 32, min ms, copy
    # / gathered: strict res3a/res4a/res5a_branch1 0.177/0.175/0.214 / 0.267/0.256/0.276,
    # tf32 res5a_branch1 0.118 / 0.156; dense ones read the source as A already)
    if engine is None or p.kind != "fwd" or T is None or not T.fold or not _may_gather(p):
        return None
    (ih, iw), (oh, ow) = p.src_sp, p.dst_sp
    (kh, kw), (sh, sw) = p.kernel, p.strides
    geom = (ih, iw, p.ic, kh, kw, oh, ow, sh, sw, *p.padding_l,
            p.dilates[0] + 1, p.dilates[1] + 1)
    Kf = p.icg * p.K
    shape = GemmShape(m=p.mb * p.P, n=p.ocg, k=Kf, lda=Kf, ldb=ldb, ldc=T.ld,
                      trans_b=trans_b, beta=beta, a_conv=geom, **epi)
    return shape if gathers(engine, shape) else None


def _gather_wgrad_geom(p: ConvProblem, engine, ldt: int, ldw: int, split_k: int,
                       wcap: int) -> tuple | None:
    """The ``a_conv`` geometry of backward weights as one GEMM over every image, ``[Kf,
    OCg] = patches^T @ diff_dst`` with the patches gathered from the dense channels-last
    source (a transposed A, ``GemmProblem.a_conv``), where the device's kernel takes it, its
    k slices included (:func:`gathers`); else None (im2col)."""
    (ih, iw), (oh, ow) = p.src_sp, p.dst_sp
    geom = (ih, iw, p.ic, *p.kernel, oh, ow, *p.strides, *p.padding_l,
            p.dilates[0] + 1, p.dilates[1] + 1)
    Kf = p.icg * p.K
    shape = GemmShape(m=Kf, n=p.ocg, k=p.mb * p.P, lda=Kf, ldb=ldt, ldc=ldw, trans_a=True,
                      a_conv=geom)
    splits = _split_count(engine, shape, split_k, wcap)
    if not gathered_wgrad(engine.info, resolved(shape).math, splits):
        return None
    return geom if gathers(engine, shape, splits) else None


def _dense_nhwc(lay: tuple, nimg: int, ch: int, sp: tuple) -> bool:
    return lay == with_offset(dense_layout([nimg, ch, *sp], [0, 2, 3, 1]), lay[0])


def _may_gather(p: ConvProblem) -> bool:
    """Whether a device's GEMM could gather ``p``'s patches from the images (the layouts and
    geometry of :func:`_gather_shape`, :func:`_gather_bwd_d_shape` and
    :func:`_gather_bwd_d_phases`; not the device's
    rule): its plan then stages at most the weights, which may outgrow the patch matrix
    (7x7 maps at mb 1), so the scratchpad reserves for either."""
    if p.nsp != 2 or p.groups != 1 or p.K == 1:
        return False
    if p.kind == "fwd":
        return _dense_nhwc(p.src, p.mb, p.ic, p.src_sp)
    return p.kind == "bwd_d" and not p.post_ops and p.bias is None \
        and _dense_nhwc(p.dst, p.mb, p.oc, p.dst_sp) and _dense_nhwc(p.src, p.mb, p.ic, p.src_sp)


def _gather_bwd_d_shape(p: ConvProblem, engine) -> GemmShape | None:
    """Backward data of a stride-1 layer as a gathering GEMM over diff_dst (no patch
    matrix, no col2im): row (n, y, x) of diff_src sums tap (kh, kw) of diff_dst at
    ``y + ph - kh * dh``, a convolution with padding ``-ph`` and dilation ``-dh``; B is the
    weights as ``[taps][oc][ic]``. Dense channels-last diff_dst and diff_src, one group, no
    bias or post-ops, where the device's kernel takes it (:func:`gathers`); else None."""
    if engine is None or p.kind != "bwd_d" or not _may_gather(p) \
            or any(s != 1 for s in p.strides):
        return None
    (oh, ow), (ih, iw) = p.dst_sp, p.src_sp
    (kh, kw), (ph, pw) = p.kernel, p.padding_l
    geom = (oh, ow, p.oc, kh, kw, ih, iw, 1, 1, -ph, -pw, -(p.dilates[0] + 1),
            -(p.dilates[1] + 1))
    shape = GemmShape(m=p.mb * ih * iw, n=p.ic, k=p.oc * p.K, lda=p.oc * p.K, ldb=p.ic,
                      ldc=p.ic, a_conv=geom)
    return shape if gathers(engine, shape) else None


def _gathered_bwd_d(p: ConvProblem, params: dict, engine, shape: GemmShape) -> Plan:
    """The plan of :func:`_gather_bwd_d_shape`: the weights staged as ``[taps][oc][ic]``,
    one GEMM into diff_src."""
    plan = Plan(engine, "im2col_gemm", params)
    w_off = _stage_taps(plan, p, p.wei, p.kernel)
    plan.gemm(shape, DST, p.dst[0], SCRATCH, w_off, SRC, p.src[0])
    return plan


def _stage_taps(plan: Plan, p: ConvProblem, wei: tuple, taps: tuple) -> int:
    """Stage the weights ``wei`` (a layout of ``[1, OC, IC, *taps]``) as backward data's B,
    ``[taps][oc][ic]``, in the scratchpad; returns their offset."""
    dims = [1, p.oc, p.ic, *taps]
    n = p.oc * p.ic * taps[0] * taps[1]
    w_off = plan.alloc(n)
    plan.reorder(ReorderProblem.f32(dims, wei, p.wei_n, with_offset(
        dense_layout(dims, [0, 3, 4, 1, 2]), w_off), w_off + n), WEI, SCRATCH)
    return w_off


def _tap_view(layout: tuple, ph: Phase) -> tuple | None:
    """The weights ``[1, OC, IC, kh, kw]`` seen over phase ``ph``'s taps only (every
    ``step``-th from its first, per dimension), or None where their kernel dims are blocked."""
    off, terms = layout
    out = list(terms)
    for d, ph1 in ((3, ph.y), (4, ph.x)):
        blk, stride, inner = terms[d]
        if blk != 1 or inner:
            return None
        gap = ph1.taps[1] - ph1.taps[0] if len(ph1.taps) > 1 else 1
        off += ph1.taps[0] * stride
        out[d] = (1, stride * gap, ())
    return (off, tuple(out))


def _gather_bwd_d_phases(p: ConvProblem, engine) -> list | None:
    """Backward data of a strided layer as one gathering GEMM per output phase
    (:mod:`..phases`): phase ``(ry, rx)``'s rows of diff_src (every stride-th point from
    ``(ry, rx)``: C's rows scattered, ``GemmShape.c_rows``) sum its taps of diff_dst as a
    stride-1 convolution, its weights ``[taps][oc][ic]``; no patch matrix, no col2im. Dense
    channels-last diff_dst and diff_src, one group, no bias or post-ops, plain kernel dims in
    the weights, where the device's rule takes it (``gathered_phases``) and its kernel
    gathers every phase's GEMM; else None. Entries: ``(phase, shape, weights view)``, a
    phase without taps as ``(phase, None, None)``."""
    if engine is None or p.kind != "bwd_d" or all(s == 1 for s in p.strides) \
            or not _may_gather(p):
        return None
    oh, ow = p.dst_sp
    ih, iw = p.src_sp
    phases = phases_2d(p.src_sp, p.kernel, p.strides, p.padding_l, p.dilates)
    rows = [p.mb * ph.y.count * ph.x.count for ph in phases if not ph.empty]
    if not rows or not gathered_phases(engine.info, min(rows)):
        return None
    out = []
    for ph in phases:
        if ph.empty:
            out.append((ph, None, None))
            continue
        view = _tap_view(p.wei, ph)
        if view is None:
            return None
        ty, tx = len(ph.y.taps), len(ph.x.taps)
        geom = (oh, ow, p.oc, ty, tx, ph.y.count, ph.x.count, 1, 1, -ph.y.off0, -ph.x.off0,
                -ph.y.step, -ph.x.step)
        scatter = (ph.y.count, ph.x.count, ih * iw, p.strides[0] * iw, p.strides[1])
        shape = GemmShape(m=p.mb * ph.y.count * ph.x.count, n=p.ic, k=p.oc * ty * tx,
                          lda=p.oc * ty * tx, ldb=p.ic, ldc=p.ic, a_conv=geom, c_rows=scatter)
        if not gathers(engine, shape):
            return None
        out.append((ph, shape, view))
    return out


def _phased_bwd_d(p: ConvProblem, params: dict, engine, phases: list) -> Plan:
    """The plan of :func:`_gather_bwd_d_phases`: diff_src zeroed first where a phase has no
    taps; per phase its weights staged as ``[taps][oc][ic]`` and one GEMM into its rows."""
    plan = Plan(engine, "im2col_gemm", params)
    iw = p.src_sp[1]
    if any(shape is None for _, shape, _ in phases):
        plan.zero(SRC, p.src[0], p.mb * p.ic * p.src_sp[0] * iw)
    for ph, shape, view in phases:
        if shape is None:
            continue
        w_off = _stage_taps(plan, p, view, (len(ph.y.taps), len(ph.x.taps)))
        plan.gemm(shape, DST, p.dst[0], SCRATCH, w_off, SRC,
                  p.src[0] + (ph.y.r * iw + ph.x.r) * p.ic)
    return plan


def _build(p: ConvProblem, params: dict, engine, dry: bool, seen: dict | None = None) -> Plan:
    """The plan of ``p``; ``seen`` (a dry plan's caller) gets the forward's weights GEMM
    shape (``weights_gemm``) where it reads the weights as packed B over channels-last
    rows with ``[Kf, OCg]`` weights."""
    gather_d = None if dry else _gather_bwd_d_shape(p, engine)
    if gather_d is not None:
        return _gathered_bwd_d(p, params, engine, gather_d)
    phases = None if dry else _gather_bwd_d_phases(p, engine)
    if phases is not None:
        return _phased_bwd_d(p, params, engine, phases)
    plan = Plan(engine, "im2col_gemm", params, dry=dry)
    pi = per_item(engine)
    lanes = copy_lanes(engine.info if engine is not None else None)
    pi_col = im2col_per_item(engine.info if engine is not None else None, pi)
    nsp = p.nsp
    G, ICg, OCg, P, K = p.groups, p.icg, p.ocg, p.P, p.K
    Kf = ICg * K
    ops = p.post_ops
    sums = [i for i, op in enumerate(ops) if op[0] == "sum"]

    # -- the dst-side activation as a GEMM matrix ----------------------------------------------
    T = _act_view(p, "dst", None)
    staged_acc = False  # fwd: GEMM into a scratch accumulator, epilogue writes dst
    beta_fwd, sum_done = 0.0, False
    if p.kind == "fwd" and sums:
        if sums == [0] and ops[0][2] == 0 and T is not None:
            beta_fwd, sum_done = float(ops[0][1]), True
        else:
            staged_acc = True
    if p.kind == "fwd" and (T is None or staged_acc):
        staged_acc = True
        mode = "hwc"
    else:
        mode = T.mode if T is not None else "hwc"
    # forward into channels-last dst, one group: bias and eltwise post-ops ride on the GEMM's
    # store (C's columns are the output channels), sparing the in-place epilogue's pass over
    # dst and its launch (H200, mb 1 1x1 layers: a 7 us kernel and its enqueue per call)
    epi: dict = {}
    chain = ops[1:] if sum_done else ops  # what the GEMM's beta leaves
    if p.kind == "fwd" and not staged_acc and mode == "hwc" and G == 1 \
            and all(op[0] == "eltwise" for op in chain) and (p.bias is not None or chain):
        if p.bias is not None:
            epi["bias"] = ((p.bias[0], ((1, 0, ()), p.bias[1][0])), (1, p.oc), p.bias_n)
        epi["post_ops"] = tuple(chain)
    staged_T = T is None and p.kind != "fwd"
    if staged_T:
        t_off = plan.alloc(p.mb * p.oc * P)
        t_lay, T = _hwc_dense(p.mb, p.oc, p.dst_sp, t_off)
        plan.reorder(ReorderProblem.f32([p.mb, p.oc, *p.dst_sp], p.dst, p.dst_n, t_lay,
                                        t_off + p.mb * p.oc * P), DST, SCRATCH)
    t_ref = SCRATCH if staged_T else DST

    # -- weights as a GEMM matrix --------------------------------------------------------------
    W = wei_matrix(p.wei, OCg, ICg, p.kernel)
    w_ref = WEI
    # a forward that gathers its A from the images reads weights in kic order: others (oihw)
    # are staged so
    may_gather = mode == "hwc" and not staged_acc and not dry and \
        _gather_shape(p, engine, OCg, False, T, beta_fwd, epi) is not None
    if may_gather and W is not None and W.kf_order != "kic":
        W = None
    # weights stored as the forward GEMM's packed panels (format_tag.any of a forward on
    # channels-last activations, and its backward descriptors): the forward reads them in
    # place, backward data reorders them straight into its own packed B where its panels
    # allow (else, and backward weights, through the plain copy below)
    panel_w = panel_width_of(p.wei, OCg, ICg, p.kernel) if G == 1 else None
    wpanels = panel_w is not None and mode == "hwc" and p.kind == "fwd"
    # backward weights into the panels (CPUs: no k split): one GEMM per panel writes it
    # in place, [Kf, w] with row stride w, instead of a plain result packed into them
    wgrad_panels = (panel_w is not None and mode == "hwc" and p.kind == "bwd_w"
                    and not _wgrad_splits(p, params, engine, Kf))
    if wpanels or wgrad_panels:  # as [Kf, OCg] in kic order, for the GEMM shapes
        W = WeiMatrix("ko", "kic", OCg, 0, p.wei[0])
    staged_W = W is None
    w_copy = None  # the copy of staged weights into the scratchpad, added before it is read
    if staged_W:
        if mode == "hwc":  # per group [k..., ic, oc]
            order = [0, *range(3, 3 + nsp), 2, 1]
            form, kfo = "ko", "kic"
        else:  # per group [oc, ic, k...]
            order = [0, 1, 2, *range(3, 3 + nsp)]
            form, kfo = "ok", "ick"
        w_off = plan.alloc(G * OCg * Kf)
        w_lay = with_offset(dense_layout([G, OCg, ICg, *p.kernel], order), w_off)
        W = WeiMatrix(form, kfo, Kf if form == "ok" else OCg, OCg * Kf, w_off)
        w_ref = SCRATCH
        if p.kind != "bwd_w":
            w_copy = ([ReorderProblem.f32([G, OCg, ICg, *p.kernel], p.wei, p.wei_n, w_lay,
                                          w_off + G * OCg * Kf)] if panel_w is None or
                      mode != "hwc" else _panel_copies(p, panel_w, w_off, False))

    # -- 1x1 shortcut: the src-side activation is the column matrix itself ---------------------
    S = None
    # backward weights into [Kf, OCg] weights: on CPUs the patches are written transposed,
    # [Kf, N*P] per group, so that the GEMM reads its A row by row (heuristics.conv)
    kmajor = p.kind == "bwd_w" and mode == "hwc" and W.form == "ko" and \
        wgrad_kmajor_patches(engine.info if engine is not None else None, Kf)
    if p.is_1x1_dense() and not kmajor:
        S = _act_view(p, "src", mode)
        if p.kind == "bwd_d" and S is not None and sums:
            S = None  # col2im applies sums against the prior diff_src generically
    s_ref = SRC

    # -- forward through a GEMM that gathers its A from the images (no patch matrix) ---------
    gather = None
    if may_gather and S is None and not wpanels:
        gather = _gather_shape(p, engine, W.ld, W.form == "ok", T, beta_fwd, epi)

    split_k = 1 if wgrad_panels else int(params.get("split_k", 1))
    # CPUs' backward weights: k slices by their rule, up to this many (see _split_count)
    wcap = 0 if wgrad_panels or p.kind != "bwd_w" else int(params.get("wgrad_slices", 0))

    # -- backward weights through a GEMM that gathers its transposed A (no patch matrix) -------
    gather_w = None
    if not dry and p.kind == "bwd_w" and S is None and not kmajor and W.form == "ko" \
            and (W.kf_order == "kic" or p.K == 1) and T.fold and nsp == 2 and G == 1 \
            and _dense_nhwc(p.src, p.mb, p.ic, p.src_sp):
        gather_w = _gather_wgrad_geom(p, engine, T.ld, W.ld, split_k, wcap)

    # -- chunks of images ------------------------------------------------------------------------
    cap = max(1, int(float(params.get("chunk_mb", 64)) * (1 << 18)))  # float32 elements
    per_image = G * P * Kf
    direct = S is not None or gather is not None or gather_w is not None
    nb = p.mb if direct else largest_divisor_at_most(p.mb, max(1, cap // max(per_image, 1)))
    col_off = plan.alloc(nb * per_image) if not direct else 0
    acc_off = 0
    if staged_acc:
        acc_off = plan.alloc(nb * p.oc * P)
        acc_lay, T = _hwc_dense(nb, p.oc, p.dst_sp, acc_off)
        t_ref = SCRATCH
    kf_dims = [2, *range(3, 3 + nsp)] if W.kf_order == "ick" else [*range(3, 3 + nsp), 2]
    o_dims = list(range(3 + nsp, 3 + 2 * nsp))
    if kmajor:
        col_order = (1, *kf_dims, 0, *o_dims)
    else:
        col_order = tuple([1, 0, *o_dims, *kf_dims] if mode == "hwc"
                          else [1, 0, *kf_dims, *o_dims])
    fold = mode == "hwc" and T.fold and (S is None or S.fold)
    # channels-last src into the transposed patches: copy channel blocks per point
    ic_block = (largest_divisor_at_most(ICg, 16)
                if kmajor and _act_view(p, "src", "hwc") is not None else 0)

    def col_at(g: int, n_local: int) -> int:
        if kmajor:
            return col_off + g * Kf * nb * P + n_local * P
        return col_off + (g * nb + n_local) * P * Kf

    def image_groups(c0: int):
        """(first image, image count) of each GEMM of a chunk."""
        return [(c0, nb)] if fold else [(c0 + i, 1) for i in range(nb)]

    # weights as B (forward and backward data over channels-last rows): packed once per
    # execution for every group; the GEMM shape is the same for every chunk
    wpack, wgemm = None, None
    # backward data split along k reads the weights as they lie (a slice of packed panels is
    # no matrix the split GEMM takes)
    split_d = p.kind == "bwd_d" and split_k > 1
    if mode == "hwc" and p.kind in ("fwd", "bwd_d") and not split_d and gather is None:
        rows = image_groups(0)[0][1] * P
        if p.kind == "fwd":
            shape = GemmShape(m=rows, n=OCg, k=Kf, lda=Kf if S is None else S.ld, ldb=W.ld,
                              ldc=T.ld, trans_a=False, trans_b=W.form == "ok", beta=beta_fwd,
                              **epi)
        else:
            shape = GemmShape(m=rows, n=Kf, k=OCg, lda=T.ld, ldb=W.ld,
                              ldc=Kf if S is None else S.ld, trans_a=False,
                              trans_b=W.form == "ko")
        if seen is not None and p.kind == "fwd" and G == 1 and W.form == "ko":
            seen["weights_gemm"] = shape
        if wpanels:
            wpack, wgemm = _panel_weights(plan, p, shape, panel_w)
        elif panel_w is not None and p.kind == "bwd_d" and not dry:
            wpack = _transposed_panels(plan, p, shape, panel_w)
        if wpack is None:
            for rp in w_copy or ():
                plan.reorder(rp, WEI, SCRATCH)
            wpack = plan.pack_b(shape, w_ref, W.offset(0), G, W.sg)
        w_copy = None  # (read as the packed B, or copied in)
    for rp in w_copy or ():
        plan.reorder(rp, WEI, SCRATCH)

    def weights_b(g: int):
        """Where the GEMMs read group ``g``'s weights as B (packed): (ref, offset)."""
        ref, off0, step, _ = wpack
        return ref, off0 + g * step

    first = [True] * G

    def chunk_calls(c0: int) -> list:
        """The GEMMs of the chunk from image ``c0`` (in order: the first of each group
        overwrites its backward-weights result)."""
        calls: list[_Call] = []
        for g in range(G):
            for n, cnt in image_groups(c0):
                nl = n - c0
                if S is not None:
                    x_ref, x_off, x_ld = s_ref, S.offset(n, g * ICg), S.ld
                elif gather_w is not None:  # the source itself, gathered by the GEMM
                    x_ref, x_off, x_ld = SRC, p.src[0], Kf
                else:
                    x_ref, x_off = SCRATCH, col_at(g, nl)
                    x_ld = nb * P if kmajor else Kf if mode == "hwc" else P
                t_off_g = T.offset(n - c0 if staged_acc else n, g * OCg)
                w_off = W.offset(g)
                if p.kind == "fwd":
                    if mode == "hwc":
                        shape = GemmShape(m=cnt * P, n=OCg, k=Kf, lda=x_ld, ldb=W.ld, ldc=T.ld,
                                          trans_a=False, trans_b=W.form == "ok", beta=beta_fwd,
                                          **epi)
                        calls.append(_Call(shape, x_ref, x_off, *weights_b(g), t_ref, t_off_g,
                                           True))
                    else:
                        shape = GemmShape(m=OCg, n=P, k=Kf, lda=W.ld, ldb=x_ld, ldc=T.ld,
                                          trans_a=W.form == "ko", trans_b=False, beta=beta_fwd)
                        calls.append(_Call(shape, w_ref, w_off, x_ref, x_off, t_ref, t_off_g,
                                           False))
                elif p.kind == "bwd_d":
                    if mode == "hwc":
                        shape = GemmShape(m=cnt * P, n=Kf, k=OCg, lda=T.ld, ldb=W.ld, ldc=x_ld,
                                          trans_a=False, trans_b=W.form == "ko")
                        if split_d:
                            calls.append(_Call(shape, t_ref, t_off_g, w_ref, w_off, x_ref, x_off,
                                               False))
                        else:
                            calls.append(_Call(shape, t_ref, t_off_g, *weights_b(g), x_ref, x_off,
                                               True))
                    else:
                        shape = GemmShape(m=Kf, n=P, k=OCg, lda=W.ld, ldb=T.ld, ldc=x_ld,
                                          trans_a=W.form == "ok", trans_b=False)
                        calls.append(_Call(shape, w_ref, w_off, t_ref, t_off_g, x_ref, x_off,
                                           False))
                else:  # bwd_w
                    beta = 0.0 if first[g] else 1.0
                    first[g] = False
                    if mode == "hwc":
                        if W.form == "ok":
                            shape = GemmShape(m=OCg, n=Kf, k=cnt * P, lda=T.ld, ldb=x_ld,
                                              ldc=W.ld, trans_a=True, beta=beta)
                            calls.append(_Call(shape, t_ref, t_off_g, x_ref, x_off, w_ref, w_off,
                                               False))
                        elif wgrad_panels:
                            # the full panels in one batched launch (one per panel cost
                            # 25-45% at mb 1 with 16-column panels), the ragged one alone
                            full = OCg // panel_w
                            for q, cols in ([(0, panel_w)] if full else []) + (
                                    [(full, OCg - full * panel_w)] if OCg % panel_w else []):
                                shape = GemmShape(m=Kf, n=cols, k=cnt * P, lda=x_ld,
                                                  ldb=T.ld, ldc=panel_w, trans_a=not kmajor,
                                                  beta=beta)
                                calls.append(_Call(
                                    shape, x_ref, x_off, t_ref, t_off_g + q * panel_w, WEI,
                                    p.wei[0] + q * Kf * panel_w, False,
                                    (full, panel_w, Kf * panel_w) if q == 0 and full > 1
                                    else None))
                        else:
                            shape = GemmShape(m=Kf, n=OCg, k=cnt * P, lda=x_ld, ldb=T.ld,
                                              ldc=W.ld, trans_a=not kmajor, beta=beta,
                                              a_conv=gather_w)
                            calls.append(_Call(shape, x_ref, x_off, t_ref, t_off_g, w_ref, w_off,
                                               False))
                    else:
                        if W.form == "ok":
                            shape = GemmShape(m=OCg, n=Kf, k=P, lda=T.ld, ldb=x_ld, ldc=W.ld,
                                              trans_b=True, beta=beta)
                            calls.append(_Call(shape, t_ref, t_off_g, x_ref, x_off, w_ref, w_off,
                                               False))
                        else:
                            shape = GemmShape(m=Kf, n=OCg, k=P, lda=x_ld, ldb=T.ld, ldc=W.ld,
                                              trans_b=True, beta=beta)
                            calls.append(_Call(shape, x_ref, x_off, t_ref, t_off_g, w_ref, w_off,
                                               False))
        return calls

    starts = range(0, p.mb, nb)
    if gather is not None:  # every image in one GEMM, A read from the source itself
        plan.gemm(gather, SRC, p.src[0], w_ref, W.offset(0), t_ref, T.offset(0, 0),
                  bias=BIAS if gather.bias is not None else None)
        starts = range(0)
    chunks = [chunk_calls(c0) for c0 in starts]
    _reserve_packs(plan, chunks, split_k, wcap)
    # 1x1 backward weights on CPUs: the patches are the source transposed, [points,
    # channels] -> [channels, points], copied in 8x8 register blocks (heuristics.conv)
    blocked = kmajor and G == 1 and p.is_1x1_dense() and ICg % TRANSPOSE_BLOCK == 0 \
        and _dense_nhwc(p.src, p.mb, p.ic, p.src_sp) \
        and blocked_transpose(engine.info if engine is not None else None)
    for c0, calls in zip(starts, chunks):
        if blocked:
            plan.kernel("transpose8", TransposeProblem(cols=ICg, ldi=p.ic), build_transpose,
                        src=SRC, dst=SCRATCH, src_off=p.src[0] + c0 * P * p.ic,
                        dst_off=col_at(0, 0), nrows=nb * P, ldo=nb * P)
        elif S is None and gather_w is None and p.kind in ("fwd", "bwd_w"):
            ip = Im2ColProblem(nb=nb, groups=G, icg=ICg, src_sp=p.src_sp, dst_sp=p.dst_sp,
                               kernel=p.kernel, strides=p.strides, dilates=p.dilates,
                               padding_l=p.padding_l, src=p.src, src_n=p.src_n,
                               col_n=-1, order=col_order, per_item=pi_col,
                               ic_block=ic_block, lanes=lanes)
            ip, sizes = im2col_runtime(ip)
            if not sizes:  # baked sizes: the device's launch shape (heuristics.conv)
                ip = _baked_copy_shape(ip, engine, nb * G * Kf * P, p)
            plan.kernel("conv_im2col", ip, build_im2col, src=SRC, col=SCRATCH, n0=c0,
                        col_off=col_off, **sizes)
        _emit(plan, calls, split_k, wgemm, wcap)
        if p.kind == "bwd_d" and S is None:
            cp = Col2ImProblem(nb=nb, groups=G, icg=ICg, src_sp=p.src_sp, dst_sp=p.dst_sp,
                               kernel=p.kernel, strides=p.strides, dilates=p.dilates,
                               padding_l=p.padding_l, out=p.src, out_n=p.src_n, col_n=-1,
                               order=col_order, bias=p.bias, bias_n=p.bias_n, post_ops=ops,
                               per_item=pi)
            cp, sizes = col2im_runtime(cp)
            plan.kernel("conv_col2im", cp, build_col2im, col=SCRATCH, out=SRC, bias=BIAS,
                        n0=c0, col_off=col_off, **sizes)
        if staged_acc:
            ep = EpilogueProblem(nb=nb, channels=p.oc, sp=p.dst_sp, dst=p.dst, dst_n=p.dst_n,
                                 acc=(0, acc_lay[1]), acc_n=-1, bias=p.bias, bias_n=p.bias_n,
                                 post_ops=ops, per_item=pi)
            ep, sizes = epilogue_runtime(ep)
            plan.kernel("conv_epilogue", ep, build_epilogue, dst=DST, acc=SCRATCH, bias=BIAS,
                        n0=c0, acc_off=acc_off, **sizes)

    # -- in-place epilogue (bias, post-ops) ------------------------------------------------------
    if p.kind == "fwd" and not staged_acc and not epi and \
            (p.bias is not None or len(ops) > len(sums)):
        ep = EpilogueProblem(nb=p.mb, channels=p.oc, sp=p.dst_sp, dst=p.dst, dst_n=p.dst_n,
                             acc=None, acc_n=0, bias=p.bias, bias_n=p.bias_n, post_ops=ops,
                             sum_done=sum_done, per_item=pi)
        ep, sizes = epilogue_runtime(ep)
        plan.kernel("conv_epilogue", ep, build_epilogue, dst=DST, bias=BIAS, n0=0, acc_off=0,
                    **sizes)
    if p.kind == "bwd_d" and S is not None and (p.bias is not None or ops):
        ep = EpilogueProblem(nb=p.mb, channels=p.ic, sp=p.src_sp, dst=p.src, dst_n=p.src_n,
                             acc=None, acc_n=0, bias=p.bias, bias_n=p.bias_n, post_ops=ops,
                             per_item=pi)
        ep, sizes = epilogue_runtime(ep)
        plan.kernel("conv_epilogue", ep, build_epilogue, dst=SRC, bias=BIAS, n0=0, acc_off=0,
                    **sizes)
    if p.kind == "bwd_w":
        if staged_W and panel_w is not None and mode == "hwc":
            if not _pack_into_panels(plan, p, panel_w, w_off):
                for rp in _panel_copies(p, panel_w, w_off, True):
                    plan.reorder(rp, SCRATCH, WEI)
        elif staged_W:
            plan.reorder(ReorderProblem.f32([G, OCg, ICg, *p.kernel], w_lay,
                                            w_off + G * OCg * Kf, p.wei, p.wei_n), SCRATCH, WEI)
        if p.bias is not None:
            add_bias_grad(plan, p)
    return plan
