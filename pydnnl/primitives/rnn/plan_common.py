"""What the forward and backward RNN plan builders share: input staging into canonical f32
layouts, weight packing, reorders, row gathers for variable lengths, execution."""
from __future__ import annotations

import numpy as np

from ...constants import ARG_WORKSPACE, rnn_direction
from ...kernels.gather import RowGather, build_row_gather
from ...kernels.reorder import ReorderProblem
from ...memory.desc import MemoryDesc
from ...runtime.gemm import Gemm, get_gemm
from ...runtime.plan import INDEX, SCRATCH, Plan, Ref
from .layout import kernel_desc, region_desc


class PlanBuilder:
    """Builds one RNN primitive's steps on a runtime :class:`~pydnnl.runtime.plan.Plan`:
    buffers are :class:`~pydnnl.runtime.plan.Ref` keyed by ``ARG_*`` numbers, ``"scratch"``
    and ``"ws"``; the scratchpad regions are the ones the pd placed (``pd.scratch``)."""

    def __init__(self, pd):
        self.pd = pd
        self.s = pd.shape
        self.engine = pd.get_engine()
        self.spec = pd._spec
        self.plan = Plan(self.engine, pd._kind, scratch_elems=pd.scratch.total)
        if "splitk" in pd.scratch:
            self.plan.splitk_off = pd.scratch["splitk"]
        self.src: dict[str, tuple[Ref, int]] = {}
        self.seq = None
        if self.s.ext.seq_lengths is not None:
            from .seqlen import SeqLayout

            self.seq = SeqLayout(self.s.ext.seq_lengths, self.s.T)

    def scalars(self) -> dict:
        """Per-execution scalar arguments (none by default)."""
        return {}

    def add_gather(self, src_ref, src_off: int, src_ld: int, dst_ref, dst_off: int, dst_ld: int,
                   width: int, index, accumulate: bool = False) -> None:
        """dst rows <- src rows through an index table (-1: zeros), uploaded at creation."""
        index = np.asarray(index, np.int32)
        i_off = self.plan.index(index)
        self.plan.kernel("rowgather", RowGather(width=width, src_ld=src_ld, dst_ld=dst_ld,
                                                accumulate=accumulate),
                         build_row_gather, dst=dst_ref, src=src_ref, idx=INDEX, d_off=dst_off,
                         s_off=src_off, i_off=i_off, nrows=index.size)

    def rows_at(self, t: int) -> int | None:
        """Rows still running at step t (None: all, or no sequence lengths)."""
        if self.seq is None or self.seq.batch[t] == self.s.N:
            return None
        return int(self.seq.batch[t])

    def gemm_rows_at(self, gemm, t: int) -> int | None:
        """The rows a per-step GEMM computes at step t: the running ones, or all where the
        GEMM is split along k or shares it among work-groups (it runs whole; the padding rows
        of its source are zero or never read, so its extra rows are too)."""
        return None if gemm.splits > 1 or gemm.ws_elems else self.rows_at(t)

    def add_copy_rows(self, src_ref, src_off: int, dst_ref, dst_off: int, rows: int,
                      width: int) -> None:
        """Copy ``rows`` (<= N) contiguous rows of ``width`` elements: one kernel per width
        (the row count is its argument)."""
        if rows <= 0:
            return
        N = self.s.N
        if getattr(self, "_iota_off", None) is None:
            self._iota_off = self.plan.index(np.arange(N, dtype=np.int32))
        k = self.plan.get("rowgather", RowGather(width=width, src_ld=width, dst_ld=width),
                          build_row_gather)
        self.plan.launch(k, dst=dst_ref, src=src_ref, idx=INDEX, d_off=dst_off,
                         s_off=src_off, i_off=self._iota_off, nrows=rows)

    def stage_inputs(self, inputs: dict, direct: tuple, as_they_lie=()) -> None:
        """Decide where each input is read from: the user's buffer, or (other layouts and data
        types) a canonical f32 copy in the scratchpad made by a reorder at the start. Inputs
        named in ``as_they_lie`` (weights already in the GEMM's panels) are read in place."""
        sc = self.pd.scratch
        for name, arg in inputs.items():
            md = self.pd._descs.get(name)
            if md is None or md.is_zero():
                continue
            if name in direct and name not in as_they_lie and md != kernel_desc(name, md):
                off = sc["in_" + name]
                self.add_reorder(Ref(arg), md, SCRATCH, region_desc(md.dims, off))
                self.src[name] = (SCRATCH, off)
            else:
                self.src[name] = (Ref(arg), 0)
        if "bias_desc" in inputs and "bias_desc" not in self.src:  # extensions.no_bias
            off = sc["zbias"]
            self.plan.zero(SCRATCH, off, sc.sizes["zbias"])
            self.src["bias_desc"] = (SCRATCH, off)

    def add_reorder(self, src_ref, src_md: MemoryDesc, dst_ref, dst_md: MemoryDesc, beta=0.0):
        self.plan.reorder(ReorderProblem.between(src_md, dst_md, beta), src_ref, dst_ref)

    def _ltr(self, d: int) -> bool:
        """Whether direction d runs left to right."""
        dr = self.s.direction
        if dr == rnn_direction.unidirectional_left2right:
            return True
        if dr == rnn_direction.unidirectional_right2left:
            return False
        return d == 0

    def _reg(self, name: str, l: int, d: int, t: int, per: int) -> int:
        """Offset of (l, d, t) in a state region of ``per`` elements per step."""
        s = self.s
        return self.ws_off[name] + ((l * s.D + d) * s.T + t) * per

    def weights_for(self, role: str, gemm, src_name: str, col_off: int, count: int,
                    stride: int) -> tuple[Ref, int, int]:
        """Where GEMM ``gemm`` reads its static B (weights) from: ``(buffer, offset of matrix 0,
        elements between matrices)``. When the kernel wants packed B, a pack kernel copies the
        ``count`` matrices into the scratchpad region ``pk_<role>`` at the start of execute."""
        ref, base = self.src[src_name]
        if not gemm.packed:
            return ref, base + col_off, stride
        off = self.pd.scratch["pk_" + role]
        pk = gemm.packer(count, stride)
        self.plan.launch(pk, gemm.packer_args(pk, ref, base + col_off, SCRATCH, off, count,
                                              stride))
        return SCRATCH, off, gemm.packed_size

    def execute(self, stream, args) -> None:
        roles = {ARG_WORKSPACE: "ws"}
        self.plan.execute(stream, args, roles, **self.scalars())


def reserve_no_bias(regions, shape) -> None:
    """A zero bias in the scratchpad for primitives created with ``no_bias``."""
    if shape.ext.no_bias:
        regions.add("zbias", shape.L * shape.D * shape.Gb * shape.DHC)


def role_gemm(engine, s, role: str, shape, b_panel: int | None = None,
              params: dict | None = None) -> Gemm:
    """The launcher of the weight GEMM ``role``. The recurrences (roles ``iter*`` forward,
    ``dh*`` backward: few rows) may be split along k on GPUs (see ``split_k``); with sequence
    lengths a split one computes every row at each step (see ``gemm_rows_at``). A GEMM of
    few rows reading every weight each step is bound by the weights' reads, not the rows:
    H200, 16 x 800 x 2400, 91 us a step unsplit against 12 split. ``b_panel``: the weights are
    stored in panels of that many columns (``ldgOi<w>o``), read as they lie, with the tile
    ``params`` where given (``heuristics.rnn.weights_panel``)."""
    if s.int8 is not None:
        return int8_gemm(engine, s, role, shape)
    split = role.startswith(("dh", "iter")) and b_panel is None
    # where the device shares a block's k among the work-groups of one launch (NVIDIA), that
    # replaces the split's second launch (its reduction)
    return get_gemm(engine, exact_half_math(s, role, shape), static_b=True, split=split,
                    b_panel=b_panel, params=params, slices=split)


def exact_half_math(s, role: str, shape):
    """``shape`` computing in the data's 16-bit type where both operands hold values of that
    type exactly: the forward's layer GEMM of a one-layer bf16 or f16 RNN (src_layer and the
    layer weights, converted to f32 copies). Tensor cores of that kind then multiply them, with
    products as exact as f32's and f32 sums (NVIDIA devices; elsewhere it runs strict). Deeper
    layers read h computed in f32, so they keep the fpmath mode."""
    from dataclasses import replace

    from ...memory.data_types import data_type

    half = {data_type.bf16: "bf16", data_type.f16: "f16"}.get(s.dt)
    if half is None or role != "layer" or s.L != 1 or shape.math is not None:
        return shape
    return replace(shape, math=half)


def int8_gemm(engine, s, role: str, shape) -> Gemm:
    """The GEMM of an int8 RNN's weight role: the one place that chooses it.

    Emulated today: the u8/s8 operands are f32 copies holding their integer values, and a
    strict f32 GEMM (no TF32/bf16 inputs, whatever the fpmath mode) sums the products. Each
    product is exact (|u8 x s8| <= 255 * 128 < 2^24), and so is every partial sum while
    k * 255 * 128 <= 2^24, i.e. k <= 514 for u8 data (k <= 1024 for s8 x s8): up to there the
    result equals oneDNN's s32 accumulator. Beyond, a sum may round like any f32 GEMM's
    (relative error <= k * 2^-24). A real integer GEMM (dot products, s32 accumulation)
    would be returned here, reading u8/s8 buffers, with the plan keeping u8/s8 states."""
    from dataclasses import replace

    split = role.startswith("iter")
    return get_gemm(engine, replace(shape, math="strict"), static_b=True, split=split)


def reserve_packed(regions, engine, roles: dict, s, stored: dict | None = None) -> None:
    """Scratchpad room for the packed weights of each GEMM role that packs them, and for the
    partial products of the roles split along k (one region: the launches run in order).
    ``stored``: weights desc name -> (panel width, tile params) of weights kept packed
    (nothing to pack)."""
    part = 0
    stored = stored or {}
    for role, (shape, src_name, _, count, _) in roles.items():
        g = role_gemm(engine, s, role, shape, *stored.get(src_name, (None, None)))
        if g.packed and src_name not in stored:
            regions.add("pk_" + role, count * g.packed_size)
        part = max(part, g.part_elems)
    if part:
        regions.add("splitk", part)
