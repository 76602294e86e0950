"""The forward RNN plan: the ordered kernel launches of one problem, built once.

Per direction and layer: one GEMM over all time steps for the input (``gx = x @ W``), then
per step the recurrent GEMM of each cell stage (``gh = h_prev @ U``) followed by the stage's
elementwise kernel generated from the cell spec, then (LSTMP) the projection GEMM. Inputs
given in other layouts than the kernels read are reordered into the scratchpad first;
outputs are reordered from the state regions into the user's layouts at the end.
"""
from __future__ import annotations

import numpy as np

from ...constants import (
    ARG_AUGRU_ATTENTION,
    ARG_BIAS,
    ARG_DST_ITER,
    ARG_DST_ITER_C,
    ARG_DST_LAYER,
    ARG_SRC_ITER,
    ARG_SRC_ITER_C,
    ARG_SRC_LAYER,
    ARG_WEIGHTS_ITER,
    ARG_WEIGHTS_LAYER,
    ARG_WEIGHTS_PEEPHOLE,
    ARG_WEIGHTS_PROJECTION,
    rnn_direction,
)
from ...kernels.rnn_elementwise import ElementwiseProblem, build_elementwise
from ...kernels.rnn_int8 import (
    ColumnSums,
    Finish,
    ProjRequant,
    Quantize,
    build_column_sums,
    build_finish,
    build_proj_requant,
    build_quantize,
)
from ...kernels.rnn_persistent import PersistentProblem, build_persistent
from ...kernels.rnn_persistent_grid import GridProblem, build_grid
from ...memory.data_types import data_type
from ...memory.desc import MemoryDesc
from ...runtime.gemm import GemmShape, choose_params
from ...runtime.heuristics import rnn as rnn_rules
from ...runtime.plan import INDEX, SCRATCH, Ref
from .layout import (
    Regions,
    dropout_active,
    dropout_masks,
    has_xin,
    kernel_desc,
    lbr,
    region_desc,
    xin_offset,
)
from .plan_common import (
    PlanBuilder,
    exact_half_math,
    reserve_no_bias,
    reserve_packed,
    role_gemm,
)
from .seqlen import layer_rows

_INPUTS = {"src_layer_desc": ARG_SRC_LAYER, "src_iter_desc": ARG_SRC_ITER,
           "src_iter_c_desc": ARG_SRC_ITER_C, "attention_desc": ARG_AUGRU_ATTENTION,
           "weights_layer_desc": ARG_WEIGHTS_LAYER, "weights_iter_desc": ARG_WEIGHTS_ITER,
           "weights_peephole_desc": ARG_WEIGHTS_PEEPHOLE,
           "weights_projection_desc": ARG_WEIGHTS_PROJECTION, "bias_desc": ARG_BIAS}
# inputs the kernels read directly (src_iter/src_iter_c are always copied into h0/c0)
_DIRECT = ("src_layer_desc", "attention_desc", "weights_layer_desc", "weights_iter_desc",
           "weights_peephole_desc", "weights_projection_desc", "bias_desc")


def fused_recurrence(engine, s, training: bool) -> bool:
    """Whether the cell kernels compute their stage's recurrent GEMM themselves (see
    ``ElementwiseProblem.fused_k``) where the device rule says so; not when training an LBR
    cell, whose backward reads the GEMM results from the workspace; not for int8, whose
    cells add the two GEMMs' integer sums before dequantizing them."""
    return (rnn_rules.fuse_recurrent_gemm(engine.info, s.N, s.SIC, s.G)
            and not (training and lbr(s)) and s.int8 is None)


def persistent_recurrence(engine, s, training: bool) -> bool:
    """Whether one launch runs all steps of a layer and direction (one work-group, see
    :mod:`pydnnl.kernels.rnn_persistent`) where the device rule says so: not with a projection
    (its GEMM sits between steps) or int8; with sequence lengths each step reads its running
    rows from a table."""
    return (not s.projection and s.int8 is None
            and s.SIC == s.DHC == s.DIC
            and rnn_rules.persistent_recurrence(engine.info, s.N, s.DHC, s.G))


def grid_problem(engine, s, training: bool) -> GridProblem | None:
    """The grid-wide one-launch recurrence of this problem (several work-groups meeting at a
    barrier each step, see :mod:`pydnnl.kernels.rnn_persistent_grid`) where the device rule
    gives it channels per group; None otherwise. Same exclusions as the one-group form, except
    sequence lengths: each step reads its running row count and packed rows from a table, and
    the rows past their sequence's end carry their state."""
    if not (not s.projection and s.int8 is None and s.SIC == s.DHC == s.DIC):
        return None

    one_stage = len(s.spec.forward_stages(s.peephole)) == 1

    def make(jb, kc=32, ks=1, swizzle=False, rn=None, wglobal=False):
        if rn is None:
            rn = rnn_rules.grid_rows_per_item(s.N) if one_stage else 1
        return GridProblem(s.spec.name, s.peephole, s.activation, s.alpha, s.DHC, s.N, jb,
                           kc=kc, rn=rn, ks=ks, swizzle=swizzle, clip=clip_key(s),
                           store_gates=training, store_gh=training and lbr(s),
                           wglobal=wglobal, seq=s.ext.seq_lengths is not None)

    info = engine.info
    jb = rnn_rules.grid_recurrence(info, s.N, s.DHC, lambda jb: make(jb).local_bytes(s.G))
    if jb is None:
        # the weight slice outgrows local memory: one-stage cells read it from global memory
        cu = max(info.compute_units or 1, 1)
        if not one_stage or make(-(-s.DHC // cu)).local_bytes(s.G) <= info.local_mem_bytes:
            return None
        shape = rnn_rules.grid_global_weights(info, s.N, s.DHC, s.G)
        if shape is None:
            return None
        jb, ks, rn = shape
        kc = rnn_rules.grid_global_chunk_columns(
            lambda kc: kc % ks == 0 and make(jb, kc, ks, rn=rn, wglobal=True)
            .local_bytes(s.G) <= info.local_mem_bytes)
        g = make(jb, kc, ks, rn=rn, wglobal=True)
        return g if g.local_bytes(s.G) <= info.local_mem_bytes else None

    def chunk(swizzle):
        return rnn_rules.grid_chunk_columns(
            s.DHC, lambda kc: make(jb, kc, swizzle=swizzle).local_bytes(s.G)
            <= info.local_mem_bytes)

    kc = chunk(False)
    # one-stage cells stage unpadded, swizzled rows where that lets a wider chunk fit
    swizzle = one_stage and chunk(True) > kc
    kc = chunk(True) if swizzle else kc
    ks = rnn_rules.grid_k_split(info, make(jb).items) if one_stage else 1
    return make(jb, kc, ks, swizzle)


def recurrence_kind(engine, s, training: bool) -> str:
    """How the forward runs its recurrence, as ``impl_info_str`` says it: ``cell`` (a
    recurrent GEMM and a cell kernel per step), ``fused_cell`` (one kernel per step),
    ``one_group`` or ``grid`` (one launch per layer and direction)."""
    if persistent_recurrence(engine, s, training):
        return "one_group"
    if grid_problem(engine, s, training) is not None:
        return "grid"
    return "fused_cell" if fused_recurrence(engine, s, training) else "cell"


def h_in_dst(pd) -> bool:
    """Whether the per-step kernels write the top layer's h straight into dst_layer instead
    of a state region copied there at the end (LSTM 512 inference: a 1.1 ms copy of 6.5 MB):
    inference (training keeps h in the workspace), one direction, f32 dst_layer laid out
    as the state region ([T, N, DIC] dense), no sequence lengths, projection, dropout, int8
    or one-launch recurrence."""
    s = pd.shape
    if pd.training or s.D != 1 or s.ext.seq_lengths is not None or s.projection \
            or s.int8 is not None or dropout_active(s, pd.training):
        return False
    md = pd._descs["dst_layer_desc"]
    if md != region_desc([s.T, s.N, s.DIC], 0):
        return False
    eng = pd.get_engine()
    return not (persistent_recurrence(eng, s, False) or grid_problem(eng, s, False) is not None)


#: weights whose ``format_tag.any`` may resolve to the GEMM's panels (inference), and the
#: role kind of the GEMMs reading them (``heuristics.rnn.weights_panel``)
PANEL_WEIGHTS = {"weights_layer_desc": "layer", "weights_iter_desc": "iter"}


def panel_desc(dims, width: int) -> MemoryDesc:
    """``ldgOi<width>o`` weights ``[L, D, I, G, O]`` (f32): per layer, direction and gate, O in
    panels of ``width`` channels, each panel I rows of ``width`` contiguous values; as a GEMM's
    B (``[I, G * O]``) that is B packed in panels of ``width`` columns, none crossing a gate."""
    return MemoryDesc(list(dims), data_type.f32, f"abdEc{width}e")


def weights_panels(engine, s, training: bool) -> dict:
    """Weights desc name -> ``(panel width, tile params or None)`` for the weights whose
    ``any`` resolves to ``ldgOi<w>o`` (:func:`panel_desc`), read by their GEMMs as they lie
    (``heuristics.rnn.weights_panel``): inference in f32 (oneDNN too packs RNN weights for
    inference only), a recurrent GEMM and cell kernel per step (the one-launch and fused
    recurrences read the weights as they lie), each gate a whole number of panels. Other
    weights resolve to ``ldigo`` and are packed at every execution."""
    if training or s.dt != data_type.f32 or s.int8 is not None or s.ext.skip_input \
            or not engine.info.is_cpu:  # (heuristics.rnn.weights_panel: CPUs only)
        return {}
    if (persistent_recurrence(engine, s, training) or grid_problem(engine, s, training)
            is not None or fused_recurrence(engine, s, training)):
        return {}
    out = {}
    roles = weight_gemms(s)
    for name, kind in PANEL_WEIGHTS.items():
        picks = set()
        for role, (shape, src, *_) in roles.items():
            if src != name:
                continue
            # the tuned parameters only: building the launcher here would compile the
            # plain-panel kernel that the stored panels then make unused (0.1-0.2 s of a
            # first-ever creation); CPUs never split k
            params = choose_params(engine, exact_half_math(s, role, shape), static_b=True)
            pick = None
            if params["packed_b"]:
                pick = rnn_rules.weights_panel(engine.info, kind, params, s.DHC)
            if pick is None or s.DHC % pick[0]:
                picks.add(None)
            else:
                picks.add((pick[0], None if pick[1] is None else tuple(sorted(pick[1].items()))))
        if len(picks) == 1 and None not in picks:
            w, params = picks.pop()
            out[name] = (w, None if params is None else dict(params))
    return out


def stored_panels(pd) -> dict:
    """Weights desc name -> ``(panel width, tile params)`` for the weights given in the panels
    :func:`weights_panels` allows (read as they lie, never packed per execution)."""
    out = {}
    for name, (w, params) in getattr(pd, "_weights_panels", {}).items():
        md = pd._descs.get(name)
        if md is not None and not md.is_zero() and md == panel_desc(md.dims, w):
            out[name] = (w, params)
    return out


def weight_gemms(s, fused: bool = False) -> dict:
    """GEMMs of the forward that read weights: role -> (shape, weights desc, first column,
    matrices (L*D), elements between matrices). ``fused``: no recurrent GEMMs (the cell
    kernels compute them)."""
    G, DHC, N = s.G, s.DHC, s.N

    spec = s.spec
    roles = {}
    if not (s.ext.skip_input and s.L == 1):  # a lone skip-input layer has no input GEMM
        roles["layer"] = (GemmShape(m=layer_rows(s), n=G * DHC, k=s.SLC, lda=s.SLC, ldb=G * DHC,
                                    ldc=G * DHC), "weights_layer_desc", 0, s.L * s.D,
                          s.SLC * G * DHC)
    for k, st in enumerate(spec.forward_stages(s.peephole) if not fused else ()):
        gates = st.recurrent_gemm.gates
        g0, ng = spec.gate_names.index(gates[0]), len(gates)
        roles[f"iter{k}"] = (GemmShape(m=N, n=ng * DHC, k=s.SIC, lda=s.SIC, ldb=G * DHC,
                                       ldc=ng * DHC), "weights_iter_desc", g0 * DHC, s.L * s.D,
                             s.SIC * G * DHC)
    if s.projection:
        roles["proj"] = (GemmShape(m=N, n=s.DIC, k=DHC, lda=DHC, ldb=s.DIC, ldc=s.DIC),
                         "weights_projection_desc", 0, s.L * s.D, DHC * s.DIC)
    return roles


def scratch_regions(pd) -> Regions:
    """Scratchpad regions of a forward primitive (state regions too, in inference)."""
    s = pd.shape
    r = Regions()
    if not pd.training:
        for name, _off in pd.ws_regions.offsets.items():
            r.add("st_" + name, pd.ws_regions.sizes[name])
    if s.ext.seq_lengths is None:
        r.add("gx", s.T * s.N * s.G * s.DHC)
    else:
        # packed rows, plus one step of slack: a step's kernel reads N rows from its start
        r.add("gx", (layer_rows(s) + s.N) * s.G * s.DHC)
        r.add("xp", layer_rows(s) * max(s.SLC, s.layer_in))
        r.add("h0u", s.L * s.D * s.N * max(s.SIC, s.DHC))
        r.add("yo", s.T * s.N * s.DIC)
        r.add("io", s.L * s.D * s.N * max(s.DIC, s.DHC))
    r.add("gh", s.N * s.G * s.DHC)
    if s.spec.reads_reset_state:
        r.add("rh", s.N * s.DHC)
    stored = stored_panels(pd)
    for name in _DIRECT:
        md = pd._descs.get(name)
        if md is not None and not md.is_zero() and md != kernel_desc(name, md) \
                and name not in stored:
            r.add("in_" + name, md.nelems())
    if s.ext.dropout_output and dropout_active(s, pd.training):
        r.add("yd", s.T * s.N * s.DIC)
    if _sum_in_scratch(pd):
        r.add("ysum", pd._descs["dst_layer_desc"].nelems())
    reserve_no_bias(r, s)
    if s.int8 is not None:
        _reserve_int8(r, pd)
    eng = pd.get_engine()
    one_launch = persistent_recurrence(eng, s, pd.training)
    grid = None if one_launch else grid_problem(eng, s, pd.training)
    if grid is not None:
        r.add("grid_bar", 2 * s.L * s.D)  # per layer and direction: counter, flag (int32)
    fused = one_launch or grid is not None or fused_recurrence(eng, s, pd.training)
    reserve_packed(r, eng, weight_gemms(s, fused), s, stored)
    return r


def _sum_in_scratch(pd) -> bool:
    """bidirectional_sum into a non-f32 dst_layer: the directions are added in f32 in the
    scratchpad, then rounded once (an accumulating reorder takes f32 only)."""
    return (pd.shape.direction == rnn_direction.bidirectional_sum
            and pd._descs["dst_layer_desc"].data_type != data_type.f32)


def _reserve_int8(r: Regions, pd) -> None:
    """The int8 path's regions: dequantization factors and scale products (copied from the
    plan's constant table at each execution), the compensated bias and projection sums, and
    the outputs before their final conversion."""
    s, q = pd.shape, pd.int8
    GD = s.G * s.DHC
    r.add("q_dq", GD)
    if q.compensated:
        r.add("q_wsd", GD)
        r.add("q_bias", s.L * s.D * s.Gb * s.DHC)
    if s.projection:
        r.add("q_pwsd", s.DIC)
        if q.compensated:
            r.add("q_pcomp", s.L * s.D * s.DIC)
    r.add("q_out", s.T * s.N * s.DLC)
    if s.with_dst_iter and q.types.dst_iter == data_type.f32:
        r.add("q_iter", s.L * s.D * s.N * s.DIC)


def quant_key(pd) -> tuple | None:
    """(data scale, data shift, lo, hi) of an int8 primitive, None otherwise."""
    q = getattr(pd, "int8", None)
    if q is None:
        return None
    lo, hi = q.types.limits
    return (q.data_scale, q.data_shift, float(lo), float(hi))


def clip_key(s):
    """The cell-state clip of the elementwise kernels: (min, max, nan_to_min) or None."""
    c = s.ext.cell_clip
    return None if c is None else (c[0], c[1], bool(s.ext.cell_clip_nan))


class ForwardPlanBuilder(PlanBuilder):
    """Kernels and launch arguments of one forward RNN problem."""

    def __init__(self, pd):
        PlanBuilder.__init__(self, pd)
        s, eng, spec = self.s, self.engine, self.spec
        self.ws_key = "ws" if pd.training else "scratch"
        ws_off = pd.ws_regions.offsets if pd.training else {
            k: pd.scratch["st_" + k] for k in pd.ws_regions.offsets}
        self.ws_off = ws_off
        sc = pd.scratch

        self.stored = stored_panels(pd)
        self.stage_inputs(_INPUTS, _DIRECT, as_they_lie=self.stored)
        self.quant = quant_key(pd)
        if self.quant is not None:
            self._int8_prepare()

        # -- initial states into h0 / c0 ---------------------------------------------------------
        for name, reg, width in (("src_iter_desc", "h0", s.SIC), ("src_iter_c_desc", "c0", s.DHC)):
            if reg not in pd.ws_regions:
                continue
            md = pd._descs.get(name)
            dims = [s.L, s.D, s.N, width]
            if md is not None and not md.is_zero() and self.seq is not None:
                # sequences are processed sorted by length: sort the initial states too
                self.add_reorder(Ref(_INPUTS[name]), md, SCRATCH,
                                 region_desc(dims, sc["h0u"]))
                self.add_gather(SCRATCH, sc["h0u"], width, Ref(self.ws_key),
                                ws_off[reg], width, width, self.seq.sort_index(s.L * s.D))
            elif md is not None and not md.is_zero():
                self.add_reorder(Ref(_INPUTS[name]), md, Ref(self.ws_key),
                                  region_desc(dims, ws_off[reg]))
            else:
                self.plan.zero(Ref(self.ws_key), ws_off[reg], int(np.prod(dims)))
            if reg == "h0" and self.quant is not None and (
                    md is None or md.is_zero() or md.data_type == data_type.f32):
                # oneDNN's copy_init_iter: f32 states are quantized, no state is q(0)
                self.plan.kernel("rnn_int8_quantize", Quantize(self.quant), build_quantize,
                                 x=Ref(self.ws_key), off=ws_off[reg], count=int(np.prod(dims)))

        # -- kernels -----------------------------------------------------------------------------
        DHC, N = s.DHC, s.N
        self.persistent = persistent_recurrence(eng, s, pd.training)
        grid = None if self.persistent else grid_problem(eng, s, pd.training)
        self.grid = grid is not None
        self.fused = not (self.persistent or self.grid) and fused_recurrence(eng, s, pd.training)
        self.h_in_dst = h_in_dst(pd)
        roles = weight_gemms(s, self.fused or self.persistent or self.grid)
        self.gemm, self.wsrc = {}, {}
        for role, (shape, src_name, col, count, stride) in roles.items():
            w, params = self.stored.get(src_name, (None, None))
            g = self.gemm[role] = role_gemm(eng, s, role, shape, w, params)
            if w is not None:
                # ldgOi<w>o: the gates from column col start col / w panels of k rows in
                ref, base = self.src[src_name]
                self.wsrc[role] = (ref, base + col * shape.k, stride)
                continue
            self.wsrc[role] = self.weights_for(role, g, src_name, col, count, stride)
        self.stage_kernels = []
        GD = s.G * DHC
        if self.persistent:
            self.recurrence = self.plan.get("rnn_persistent", PersistentProblem(
                spec.name, s.peephole, s.activation, s.alpha, DHC, clip=clip_key(s),
                store_gates=pd.training, store_gh=pd.training and lbr(s),
                u_private=rnn_rules.persistent_private_weights(eng.info, s.G, DHC),
                seq=self.seq is not None),
                build_persistent)
        if self.grid:
            self.recurrence = self.plan.get("rnn_persistent_grid", grid, build_grid)
            self.plan.zero(SCRATCH, pd.scratch["grid_bar"], 2 * s.L * s.D)
        for k, st in enumerate(spec.forward_stages(s.peephole)
                               if not (self.persistent or self.grid) else ()):
            fuse = {}
            if self.fused:
                g0 = spec.gate_names.index(st.recurrent_gemm.gates[0])
                ref, base = self.src["weights_iter_desc"]
                # weights [L*D][SIC][G*DHC] as they lie: this stage's gates from column g0*DHC
                self.wsrc[f"iter{k}"] = (ref, base + g0 * DHC, s.SIC * GD)
                fuse = dict(fused_k=s.SIC, ld_u=GD,
                            ld_src=s.SIC if st.recurrent_gemm.source == "h_prev" else DHC)
            ep = ElementwiseProblem(spec.name, k, s.peephole, s.activation, s.alpha, DHC,
                                    ld_h_prev=s.SIC, ld_h=DHC if s.projection else s.DIC,
                                    clip=clip_key(s), wg=rnn_rules.cell_wg(eng.info, DHC),
                                    store_gates=pd.training, quant=self.quant,
                                    tanh_exp=rnn_rules.cell_tanh_via_exp(eng.info, pd.training),
                                    **fuse)
            kern = self.plan.get("rnn_elementwise", ep, build_elementwise)
            self.stage_kernels.append((st, kern, self.gemm.get(f"iter{k}"), f"iter{k}"))

        self.dropout = None
        self.drop_slots: list[int] = []
        self.executions = 0  # dropout counter: advances by one per execution
        if dropout_active(s, pd.training):
            from ...runtime.dropout import get_dropout

            self.dropout = get_dropout(eng, rows=s.T * N, cols=s.DIC, ld_x=s.DIC, ld_y=s.layer_in)
            self.dropout_out = get_dropout(eng, rows=s.T * N, cols=s.DIC, ld_x=s.DIC, ld_y=s.DIC)
        # layer by layer, both directions: a per-layer bidirectional layer reads both
        # directions of the one below
        if self.seq is not None and pd.training:
            # steps compute only the running sequences: padding rows of the states backward
            # reads stay zero (finite) instead of whatever the buffer held
            for reg in ("h", "ht"):
                if reg in self.ws_off:
                    self.plan.zero(Ref(self.ws_key), self.ws_off[reg], pd.ws_regions.sizes[reg])
        for l in range(s.L):
            for d in range(s.D):
                self._plan_layer(l, d)
            # after both directions: in inference the next input reuses this layer's region
            for d in range(s.D):
                if l < s.L - 1 and has_xin(s, pd.training):
                    self._plan_next_input(l, d)
        self._plan_outputs()

    def scalars(self) -> dict:
        """Dropout counter offsets of this execution: (execution, layer, direction) -> one
        Philox counter block, ``execution * (L - 1) * D + l * D + d``."""
        if not self.drop_slots:
            return {}
        base = self.executions * dropout_masks(self.s)
        out = {}
        for i in self.drop_slots:
            off = base + i
            out[f"drop_lo{i}"] = np.uint32(off & 0xFFFFFFFF)
            out[f"drop_hi{i}"] = np.uint32((off >> 32) & 0xFFFFFFFF)
        self.executions += 1
        return out

    def _add_dropout(self, launcher, l: int, d: int, x_off: int, y_ref, y_off: int) -> None:
        """Layer l's output (direction d) through its dropout mask, kept in the workspace."""
        from ...kernels.dropout import FWD_ARGS

        s, ws = self.s, Ref(self.ws_key)
        i = l * s.D + d
        m_off = self.ws_off["mask"] * 4 + i * s.T * s.N * s.DIC  # bytes
        args = launcher.ordered(ws, x_off, y_ref, y_off, ws, m_off, s.ext.dropout_seed, 0,
                                s.ext.dropout)
        # the counter offset changes with every execution: bound per launch
        args[FWD_ARGS.index("offset_lo")] = Ref(f"drop_lo{i}")
        args[FWD_ARGS.index("offset_hi")] = Ref(f"drop_hi{i}")
        self.plan.launch(launcher.kernel, args)
        self.drop_slots.append(i)

    def _xin(self, l: int, d: int) -> tuple[int, int]:
        """(offset, row stride) of the input of layer l >= 1, direction d, in the state buffer."""
        return xin_offset(self.s, self.pd.training, self.ws_off["xin"], l, d)

    def _plan_next_input(self, l: int, d: int) -> None:
        """Layer l's output as layer l+1 reads it: dropped out and/or placed beside the other
        direction's."""
        s = self.s
        ws = Ref(self.ws_key)
        off, ld = self._xin(l + 1, d)
        if s.ext.layer_bidirectional:
            off += d * s.DIC
        h_off = self._reg("h", l, d, 0, s.N * s.DIC)
        if self.dropout is not None:
            self._add_dropout(self.dropout, l, d, h_off, ws, off)
            return
        self.add_reorder(ws, region_desc([s.T, s.N, s.DIC], h_off), ws,
                         region_desc([s.T, s.N, s.DIC], off, strides=[s.N * ld, ld, 1]))

    # -- helpers ---------------------------------------------------------------------------------
    def _plan_layer(self, l: int, d: int) -> None:
        s, pd = self.s, self.pd
        G, DHC, N, T = s.G, s.DHC, s.N, s.T
        ws = Ref(self.ws_key)
        scr = SCRATCH
        sc = pd.scratch
        ld = l * s.D + d
        # layer GEMM over all steps
        if l == 0:
            a_ref, a_off = self.src["src_layer_desc"]
        elif "xin" in self.ws_off:
            a_ref, a_off = ws, self._xin(l, d)[0]
        else:
            a_ref, a_off = ws, self._reg("h", l - 1, d, 0, N * s.DIC)
        seq = self.seq
        if seq is not None and not (l == 0 and s.ext.packed):
            # the layer GEMM reads the valid rows only, packed step after step
            width = s.SLC if l == 0 else s.layer_in
            self.add_gather(a_ref, a_off, width, scr, sc["xp"], width, width,
                            seq.pack_index(src_sorted=l > 0))
            a_ref, a_off = scr, sc["xp"]
        rows = [seq.S, 1] if seq is not None else [T, N]
        if l == 0 and s.ext.skip_input:
            # no input matrix: x goes to every gate's pre-activation
            gx_view = [rows[1] * G * DHC, G * DHC, 1]
            for g in range(G):
                self.add_reorder(a_ref, region_desc(rows + [DHC], a_off), scr,
                                 region_desc(rows + [DHC], sc["gx"] + g * DHC, strides=gx_view))
        else:
            w_ref, w_off, w_step = self.wsrc["layer"]
            self.plan.gemm(self.gemm["layer"], a_ref, a_off, w_ref, w_off + ld * w_step, scr,
                           sc["gx"])
        b_ref, b_off = self.src["bias_desc"]
        b_off += ld * s.Gb * DHC
        peep = self.src.get("weights_peephole_desc")
        att = self.src.get("attention_desc")
        training = pd.training
        if self.persistent or self.grid:
            self._plan_recurrence(l, d, b_ref, b_off, peep, att)
            return
        order = range(T) if self._ltr(d) else range(T - 1, -1, -1)
        prev_t = None
        for t in order:
            if seq is not None and prev_t is not None and not self._ltr(d):
                # sequences whose last step is t start here, from the initial state: put it
                # where this step reads the previous state (padding rows of step t + 1)
                a, b = seq.new_rows(t)
                for reg, width in (("h", s.DIC), ("c", DHC)):
                    if reg in self.ws_off and b > a:
                        self.add_copy_rows(ws, self.ws_off[reg + "0"] + (ld * N + a) * width, ws,
                                           self._reg(reg, l, d, prev_t, N * width) + a * width,
                                           b - a, width)
            h_prev_ref = ws
            if prev_t is None:
                h_prev_off = self.ws_off["h0"] + ld * N * s.SIC
                c_prev_off = self.ws_off["c0"] + ld * N * DHC if "c0" in self.ws_off else 0
            else:
                h_prev_ref, h_prev_off = self._h_at(l, d, prev_t)
                c_prev_off = self._reg("c", l, d, prev_t, N * DHC) if "c" in self.ws_off else 0
            gates_off = (self._reg("gates", l, d, t, N * G * DHC) if training
                         else self.ws_off["gates"])
            gh_base = self._reg("gh", l, d, t, N * G * DHC) if "gh" in self.ws_off else None
            h_ref, h_out = ((ws, self._reg("ht", l, d, t, N * DHC)) if s.projection
                            else self._h_at(l, d, t))
            c_out = self._reg("c", l, d, t, N * DHC) if "c" in self.ws_off else 0
            gh_col = 0
            for st, kern, gemm, role in self.stage_kernels:
                ng = len(st.recurrent_gemm.gates)
                u_ref, u_base, u_step = self.wsrc[role]
                u_off = u_base + ld * u_step
                if gh_base is not None:
                    gh_ref, gh_off = ws, gh_base + gh_col
                else:
                    gh_ref, gh_off = scr, sc["gh"] + gh_col
                gh_col += N * ng * DHC
                # the GEMM's source: h_prev, or rh = r * h_prev written by the previous stage
                src_ref, src_off = ((h_prev_ref, h_prev_off)
                                    if st.recurrent_gemm.source == "h_prev"
                                    else (scr, sc["rh"]))
                if gemm is not None:
                    self.plan.gemm(gemm, src_ref, src_off, u_ref, u_off, gh_ref, gh_off,
                                   rows=self.gemm_rows_at(gemm, t))
                vals = {
                    "gates": ws if training else Ref(self.ws_key), "gx": scr, "bias": b_ref,
                    "gh": gh_ref, "h_prev": h_prev_ref, "c_prev": ws, "c": ws, "h": h_ref,
                    "rh": scr,
                    "peep": peep[0] if peep else None, "att": att[0] if att else None,
                    "gx_off": sc["gx"] + (t * N if seq is None else int(seq.off[t])) * G * DHC,
                    "bias_off": b_off,
                    "h_prev_off": h_prev_off, "c_prev_off": c_prev_off, "c_off": c_out,
                    "h_off": h_out, "peep_off": (peep[1] + ld * 3 * DHC) if peep else 0,
                    "att_off": (att[1] + t * N) if att else 0, "gates_off": gates_off,
                    "gh_off": gh_off, "rh_off": sc["rh"] if "rh" in sc else 0,
                    "src": src_ref, "src_off": src_off, "u": u_ref, "u_off": u_off,
                    "batch": N, "dq": scr, "dq_off": sc["q_dq"] if "q_dq" in sc else 0,
                }
                self.plan.launch(kern, rows=self.rows_at(t), **vals)
            if s.projection:
                r_ref, r_base, r_step = self.wsrc["proj"]
                self.plan.gemm(self.gemm["proj"], ws, h_out, r_ref, r_base + ld * r_step, ws,
                               self._reg("h", l, d, t, N * s.DIC), rows=self.rows_at(t))
                if self.quant is not None:
                    self._int8_requant_projection(self._reg("h", l, d, t, N * s.DIC), ld)
            prev_t = t

    def _h_at(self, l: int, d: int, t: int) -> tuple[Ref, int]:
        """Where step t of layer l, direction d, keeps its h: the state region, or
        (``h_in_dst``, the top layer) the user's dst_layer itself."""
        s = self.s
        if self.h_in_dst and l == s.L - 1:
            return Ref(ARG_DST_LAYER), t * s.N * s.DIC
        return Ref(self.ws_key), self._reg("h", l, d, t, s.N * s.DIC)

    def _plan_recurrence(self, l: int, d: int, b_ref, b_off: int, peep, att) -> None:
        """All steps of layer l, direction d, in one launch (one work-group, or the grid-wide
        form): offsets are those of step 0 (the kernel adds t times a step's size)."""
        s, pd = self.s, self.pd
        N, DHC = s.N, s.DHC
        ws, ld = Ref(self.ws_key), l * s.D + d
        u_ref, u_base = self.src["weights_iter_desc"]
        none = (SCRATCH, 0)  # arguments the cell does not read
        gates = ((ws, self._reg("gates", l, d, 0, N * s.G * DHC)) if pd.training else none)
        gh = (ws, self._reg("gh", l, d, 0, N * s.G * DHC)) if "gh" in self.ws_off else none
        vals = {
            "gx": SCRATCH, "gx_off": pd.scratch["gx"], "bias": b_ref, "bias_off": b_off,
            "u": u_ref, "u_off": u_base + ld * s.SIC * s.G * DHC,
            "h0": ws, "h0_off": self.ws_off["h0"] + ld * N * s.SIC,
            "c0": ws, "c0_off": self.ws_off["c0"] + ld * N * DHC if "c0" in self.ws_off else 0,
            "h": ws, "h_off": self._reg("h", l, d, 0, N * s.DIC),
            "c": ws, "c_off": self._reg("c", l, d, 0, N * DHC) if "c" in self.ws_off else 0,
            "gates": gates[0], "gates_off": gates[1], "gh": gh[0], "gh_off": gh[1],
            "peep": peep[0] if peep else SCRATCH,
            "peep_off": (peep[1] + ld * 3 * DHC) if peep else 0,
            "att": att[0] if att else SCRATCH, "att_off": att[1] if att else 0,
            "steps": s.T, "reverse": 0 if self._ltr(d) else 1, "batch": N,
        }
        if self.grid:
            vals.update(rh=SCRATCH, rh_off=pd.scratch["rh"] if "rh" in pd.scratch else 0,
                        bar=SCRATCH, bar_off=pd.scratch["grid_bar"] + 2 * ld)
        if self.seq is not None:
            # step t's running rows, then where they start among the packed rows of gx
            if getattr(self, "_seq_table", None) is None:
                self._seq_table = self.plan.index(np.concatenate([self.seq.batch, self.seq.off]))
            vals.update(seq=INDEX, seq_off=self._seq_table)
        self.plan.launch(self.recurrence, **vals)

    # -- int8 ------------------------------------------------------------------------------------
    def _int8_prepare(self) -> None:
        """Per execution, before the layers: the creation-time scale factors into the
        scratchpad, and (u8 with a data shift) the compensated bias and projection sums. The
        GEMMs read the f32 copies of the u8/s8 inputs and weights that stage_inputs made."""
        s, pd, sc = self.s, self.pd, self.pd.scratch
        q = pd.int8
        consts = [("q_dq", q.dequant_factors())]
        if q.compensated:
            consts.append(("q_wsd", q.weights_data_scales()))
        if s.projection:
            consts.append(("q_pwsd", q.weights_data_scales(projection=True)))
        for name, vals in consts:
            # f32 bits ride in the plan's int32 table; the copy moves them unchanged
            i_off = self.plan.index(np.asarray(vals, np.float32).view(np.int32))
            self.add_reorder(INDEX, region_desc([vals.size], i_off), SCRATCH,
                             region_desc([vals.size], sc[name]))
        if not q.compensated:
            return
        (wl, wl_off), (wi, wi_off) = self.src["weights_layer_desc"], self.src["weights_iter_desc"]
        b, b_off = self.src["bias_desc"]
        self.plan.kernel("rnn_int8_colsums",
                         ColumnSums(n=s.G * s.DHC, ka=s.SLC, kb=s.SIC, shift=q.data_shift,
                                    bias=True), build_column_sums,
                         out=SCRATCH, a=wl, b=wi, base=b, div=SCRATCH, out_off=sc["q_bias"],
                         a_off=wl_off, b_off=wi_off, base_off=b_off, div_off=sc["q_wsd"],
                         count=s.L * s.D)
        self.src["bias_desc"] = (SCRATCH, sc["q_bias"])
        if s.projection:
            wp, wp_off = self.src["weights_projection_desc"]
            self.plan.kernel("rnn_int8_colsums",
                             ColumnSums(n=s.DIC, ka=s.DHC, kb=0, shift=q.data_shift, bias=False),
                             build_column_sums, out=SCRATCH, a=wp, out_off=sc["q_pcomp"],
                             a_off=wp_off, count=s.L * s.D)

    def _int8_requant_projection(self, h_off: int, ld: int) -> None:
        """The projection GEMM's integer sums at h_off, dequantized with the projection
        scales and quantized again (oneDNN's lstm_projection_postgemm)."""
        s, sc = self.s, self.pd.scratch
        comp = self.pd.int8.compensated
        self.plan.kernel("rnn_int8_proj_requant", ProjRequant(s.DIC, self.quant, comp),
                         build_proj_requant, x=Ref(self.ws_key), div=SCRATCH, x_off=h_off,
                         div_off=sc["q_pwsd"], nrows=s.N,
                         **({"comp": SCRATCH, "comp_off": sc["q_pcomp"] + ld * s.DIC}
                            if comp else {}))

    def _int8_finish(self, off: int, count: int, saturate: bool, dequantize: bool,
                     k: int = 1) -> None:
        q = self.pd.int8
        lo, hi = q.types.limits
        self.plan.kernel("rnn_int8_finish",
                         Finish(q.data_scale, q.data_shift, float(lo), float(hi), saturate,
                                dequantize, k), build_finish, x=SCRATCH, off=off, count=count)

    def _plan_int8_outputs(self) -> None:
        """oneDNN's copy_res_layer / copy_res_iter for int8: the quantized states, as they are
        (u8/s8 outputs) or dequantized, ``(q - shift) / scale`` (f32 outputs); the two
        directions of bidirectional_sum add their quantized values, saturated to the data
        type, and an f32 dst_layer then subtracts the shift twice."""
        s, pd, sc = self.s, self.pd, self.pd.scratch
        N, T, ws = s.N, s.T, Ref(self.ws_key)
        types = pd.int8.types
        top = s.L - 1
        bisum = s.direction == rnn_direction.bidirectional_sum
        DLC = s.DLC
        for d in range(s.D):
            src_md = region_desc([T, N, s.DIC], self._reg("h", top, d, 0, N * s.DIC))
            col = d * s.DIC if s.direction == rnn_direction.bidirectional_concat else 0
            self.add_reorder(ws, src_md, SCRATCH,
                             region_desc([T, N, s.DIC], sc["q_out"] + col,
                                         strides=[N * DLC, DLC, 1]),
                             beta=1.0 if bisum and d == 1 else 0.0)
        deq = types.dst_layer == data_type.f32
        if bisum or deq:
            self._int8_finish(sc["q_out"], T * N * DLC, bisum, deq, 2 if bisum else 1)
        self.add_reorder(SCRATCH, region_desc([T, N, DLC], sc["q_out"]), Ref(ARG_DST_LAYER),
                         pd._descs["dst_layer_desc"])
        for name, reg, width, arg in (("dst_iter_desc", "h", s.DIC, ARG_DST_ITER),
                                      ("dst_iter_c_desc", "c", s.DHC, ARG_DST_ITER_C)):
            md = pd._descs.get(name)
            if md is None or md.is_zero():
                continue
            staged = reg == "h" and types.dst_iter == data_type.f32
            for d in range(s.D):
                t_last = T - 1 if self._ltr(d) else 0
                base = self.ws_off[reg] + (d * T + t_last) * N * width
                src_md = region_desc([s.L, 1, N, width], base,
                                     strides=[s.D * T * N * width, 0, width, 1])
                if staged:
                    self.add_reorder(ws, src_md, SCRATCH, region_desc(
                        [s.L, 1, N, width], sc["q_iter"] + d * N * width,
                        strides=[s.D * N * width, 0, width, 1]))
                else:
                    self.add_reorder(ws, src_md, Ref(arg),
                                     md.submemory_desc([s.L, 1, N, width], [0, d, 0, 0]))
            if staged:
                self._int8_finish(sc["q_iter"], s.L * s.D * N * width, False, True)
                self.add_reorder(SCRATCH, region_desc([s.L, s.D, N, width], sc["q_iter"]),
                                 Ref(arg), md)

    def _plan_outputs(self) -> None:
        if self.quant is not None:
            self._plan_int8_outputs()
            return
        s, pd = self.s, self.pd
        N, T = s.N, s.T
        ws = Ref(self.ws_key)
        dst_md = pd._descs["dst_layer_desc"]
        top = s.L - 1
        seq, sc, scr = self.seq, pd.scratch, SCRATCH
        sum_md = region_desc(dst_md.dims, sc["ysum"]) if "ysum" in sc else None
        for d in range(0 if self.h_in_dst else s.D):
            src_md = region_desc([T, N, s.DIC], self._reg("h", top, d, 0, N * s.DIC))
            src_ref = ws
            if self.dropout is not None and s.ext.dropout_output:
                # the top layer's output feeds another primitive's layer: drop it out too
                self._add_dropout(self.dropout_out, top, d, src_md.offset0, scr, sc["yd"])
                src_md, src_ref = region_desc([T, N, s.DIC], sc["yd"]), scr
            if seq is not None and s.ext.packed:  # the valid rows, packed
                self.add_gather(src_ref, src_md.offset0, s.DIC, scr, sc["yo"], s.DIC, s.DIC,
                                seq.pack_index(src_sorted=True))
                src_md, src_ref = region_desc([seq.S, s.DIC], sc["yo"]), scr
            elif seq is not None:  # back to the user's order, zeros after each sequence's end
                self.add_gather(src_ref, src_md.offset0, s.DIC, scr, sc["yo"], s.DIC, s.DIC,
                                seq.unsort_padded_index())
                src_md, src_ref = region_desc([T, N, s.DIC], sc["yo"]), scr
            if s.direction == rnn_direction.bidirectional_concat:
                rows = list(src_md.dims[:-1])
                target = dst_md.submemory_desc(rows + [s.DIC], [0] * len(rows) + [d * s.DIC])
                beta = 0.0
            else:
                target = dst_md
                beta = 1.0 if d == 1 else 0.0
            if sum_md is not None:
                self.add_reorder(src_ref, src_md, scr, sum_md, beta=beta)
                if d == s.D - 1:
                    self.add_reorder(scr, sum_md, Ref(ARG_DST_LAYER), dst_md)
                continue
            self.add_reorder(src_ref, src_md, Ref(ARG_DST_LAYER), target, beta=beta)
        for name, reg, width, arg in (("dst_iter_desc", "h", s.DIC, ARG_DST_ITER),
                                      ("dst_iter_c_desc", "c", s.DHC, ARG_DST_ITER_C)):
            md = pd._descs.get(name)
            if md is None or md.is_zero():
                continue
            if seq is not None:  # each sequence's state after its own last step
                self.add_gather(ws, self.ws_off[reg], width, scr, sc["io"], width, width,
                                seq.last_state_index(s.L, s.D, self._ltr))
                self.add_reorder(scr, region_desc([s.L, s.D, N, width], sc["io"]), Ref(arg), md)
                continue
            for d in range(s.D):
                t_last = T - 1 if self._ltr(d) else 0
                base = self.ws_off[reg] + (d * T + t_last) * N * width
                layers = s.L
                if reg == "h" and self.h_in_dst:  # the top layer's h is in dst_layer
                    layers = s.L - 1
                    self.add_reorder(Ref(ARG_DST_LAYER),
                                     region_desc([1, 1, N, width], t_last * N * width),
                                     Ref(arg), md.submemory_desc([1, 1, N, width],
                                                                 [layers, d, 0, 0]))
                if layers == 0:
                    continue
                src_md = region_desc([layers, 1, N, width], base,
                                     strides=[s.D * T * N * width, 0, width, 1])
                target = md.submemory_desc([layers, 1, N, width], [0, d, 0, 0])
                self.add_reorder(ws, src_md, Ref(arg), target)
