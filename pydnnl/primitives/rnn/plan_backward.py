"""The backward RNN plan: back-propagation through time from the forward's workspace.

Per direction, layers from the top down; per layer the steps in reverse processing order:
the stage kernels generated from the cell spec (reverse mode) produce the gate gradients of the
step, the recurrent GEMM ``dh_prev += dG @ U^T`` carries the gradient to the previous step.
After the steps, the weight gradients are GEMMs over all steps at once (``dW += X^T dG``,
``dU += H_prev^T dG``), the bias and peephole gradients are column sums, and the input
gradient ``dX = dG W^T`` is one GEMM that becomes the output gradient of the layer below.

bf16 problems run this same f32 plan: the inputs backward reads (src_layer, attention, the
weights and the bias) are reordered into f32 copies in the scratchpad at the start of each
execution (``stage_inputs``), the workspace the forward filled is f32 already, and every
``diff_*`` tensor is f32 (oneDNN's rule), so the gradients are written directly.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...constants import (
    ARG_AUGRU_ATTENTION,
    ARG_BIAS,
    ARG_DIFF_AUGRU_ATTENTION,
    ARG_DIFF_BIAS,
    ARG_DIFF_DST_ITER,
    ARG_DIFF_DST_ITER_C,
    ARG_DIFF_DST_LAYER,
    ARG_DIFF_SRC_ITER,
    ARG_DIFF_SRC_ITER_C,
    ARG_DIFF_SRC_LAYER,
    ARG_DIFF_WEIGHTS_ITER,
    ARG_DIFF_WEIGHTS_LAYER,
    ARG_DIFF_WEIGHTS_PEEPHOLE,
    ARG_DIFF_WEIGHTS_PROJECTION,
    ARG_SRC_LAYER,
    ARG_WEIGHTS_ITER,
    ARG_WEIGHTS_LAYER,
    ARG_WEIGHTS_PEEPHOLE,
    ARG_WEIGHTS_PROJECTION,
    rnn_direction,
    rnn_flags,
)
from ...kernels.reductions import (
    Add2,
    ColSum,
    RowSum,
    Transpose,
    build_add2,
    build_colsum,
    build_rowsum,
    build_transpose,
)
from ...kernels.rnn_elementwise_bwd import (
    BackwardElementwiseProblem,
    backward_buffers,
    build_elementwise_bwd,
)
from ...kernels.rnn_persistent_grid_bwd import GridBackwardProblem, build_grid_bwd, supported
from ...runtime.gemm import GemmShape, get_gemm
from ...runtime.heuristics import reduction as reduction_rules
from ...runtime.heuristics import rnn as rnn_rules
from ...runtime.heuristics.reduction import colsum_row_lanes
from ...runtime.plan import INDEX, SCRATCH, Ref
from .layout import Regions, dropout_active, kernel_desc, region_desc, xin_offset
from .plan_common import PlanBuilder, reserve_no_bias, reserve_packed, role_gemm
from .plan_forward import _DIRECT, clip_key
from .seqlen import layer_rows

_INPUTS = {"src_layer_desc": ARG_SRC_LAYER, "attention_desc": ARG_AUGRU_ATTENTION,
           "weights_layer_desc": ARG_WEIGHTS_LAYER, "weights_iter_desc": ARG_WEIGHTS_ITER,
           "weights_peephole_desc": ARG_WEIGHTS_PEEPHOLE,
           "weights_projection_desc": ARG_WEIGHTS_PROJECTION, "bias_desc": ARG_BIAS}
# diff weights: desc name -> (argument, forward name)
_DIFF_W = {"diff_weights_layer_desc": (ARG_DIFF_WEIGHTS_LAYER, "weights_layer_desc"),
           "diff_weights_iter_desc": (ARG_DIFF_WEIGHTS_ITER, "weights_iter_desc"),
           "diff_weights_peephole_desc": (ARG_DIFF_WEIGHTS_PEEPHOLE, "weights_peephole_desc"),
           "diff_weights_projection_desc": (ARG_DIFF_WEIGHTS_PROJECTION, "weights_projection_desc"),
           "diff_bias_desc": (ARG_DIFF_BIAS, "bias_desc")}


def _canon(pd, name: str) -> bool:
    md = pd._descs.get(name)
    return (md is not None and not md.is_zero()
            and md == kernel_desc(name.replace("diff_", "", 1), md))


def grid_backward(engine, s) -> GridBackwardProblem | None:
    """The grid-wide one-launch backward of this problem (NVIDIA GPUs, one-stage cells; see
    :mod:`pydnnl.kernels.rnn_persistent_grid_bwd`) where the device rule gives it channels per
    work-group, its weights in local memory or (too large) read from global memory; None
    otherwise (projections and several stages run per step)."""
    if not (not s.projection and s.SIC == s.DHC == s.DIC and s.int8 is None
            and supported(s.spec.name, s.peephole) and s.G <= rnn_rules.GRID_BWD_MAX_GATES):
        return None
    from .plan_forward import clip_key

    first = first_dhp_writer(s.spec, s.peephole)
    GD = s.G * s.DHC

    def make(jb, rn, ks, wglobal=False):
        return GridBackwardProblem(s.spec.name, s.peephole, s.activation, s.alpha, s.DHC, s.N,
                                   jb, clip=clip_key(s), dhp_assign=first == ("elementwise", 0),
                                   rn=rn, ks=ks, wglobal=wglobal,
                                   seq=s.ext.seq_lengths is not None)

    def local(jb):
        return make(jb, *rnn_rules.grid_backward_split(engine.info, s.N, jb, GD))

    jb = rnn_rules.grid_recurrence(engine.info, s.N, s.DHC, lambda jb: local(jb).local_bytes(s.G))
    if jb is not None:
        return local(jb)
    form = rnn_rules.grid_backward_global(engine.info, s.N, s.DHC, GD)
    return None if form is None else make(*form, wglobal=True)


def weight_gemms(s, grid: bool = False, ut_copy: bool = False) -> dict:
    """GEMMs of the backward that read weights (transposed): role -> (shape, weights desc,
    first column, matrices, elements between matrices). ``ut_copy``: the recurrent GEMMs read
    a transposed copy of the recurrent weights (``weights_iter_t``, G*DHC rows of SIC)
    instead, plainly."""

    spec = s.spec
    G, DHC, N = s.G, s.DHC, s.N
    GD = G * DHC
    roles = {}
    for beta in ((0.0, 1.0) if s.D == 2 else (0.0,)) if dx_gemm_layers(s) else ():
        roles[f"dx_b{int(beta)}"] = (GemmShape(m=layer_rows(s), n=s.SLC, k=GD, lda=GD, ldb=GD,
                                               ldc=s.SLC, trans_b=True, beta=beta),
                                     "weights_layer_desc", 0, s.L * s.D, s.SLC * GD)
    first = first_dhp_writer(spec, s.peephole)
    for k, st in enumerate(spec.forward_stages(s.peephole) if not grid else ()):
        gates = st.recurrent_gemm.gates
        g0, ng = spec.gate_names.index(gates[0]), len(gates)
        beta = 0.0 if st.recurrent_gemm.source == "rh" or first == ("gemm", k) else 1.0
        if ut_copy:
            roles[f"dh{k}"] = (GemmShape(m=N, n=s.SIC, k=ng * DHC, lda=GD, ldb=s.SIC,
                                         ldc=s.SIC, beta=beta),
                               "weights_iter_t", g0 * DHC * s.SIC, s.L * s.D, s.SIC * GD)
            continue
        roles[f"dh{k}"] = (GemmShape(m=N, n=s.SIC, k=ng * DHC, lda=GD, ldb=GD, ldc=s.SIC,
                                     trans_b=True, beta=beta),
                           "weights_iter_desc", g0 * DHC, s.L * s.D, s.SIC * GD)
    if s.projection:
        roles["dht"] = (GemmShape(m=N, n=DHC, k=s.DIC, lda=s.DIC, ldb=s.DIC, ldc=DHC, trans_b=True),
                        "weights_projection_desc", 0, s.L * s.D, DHC * s.DIC)
    return roles


def first_dhp_writer(spec, peephole: bool) -> tuple[str, int]:
    """Which launch of a backward step writes the h_prev gradient first (stages run in
    reverse): ``("elementwise", k)`` or ``("gemm", k)``. It stores instead of accumulating,
    so that no zero fill is needed per step."""
    stages = spec.forward_stages(peephole)
    for k in range(len(stages) - 1, -1, -1):
        if "h_prev" in stages[k].inputs(()):
            return ("elementwise", k)
        if stages[k].recurrent_gemm.source == "h_prev":
            return ("gemm", k)
    raise ValueError(f"{spec.name}: no stage reads h_prev")


def dx_gemm_layers(s) -> list[int]:
    """Layers whose input gradient is a GEMM (not layer 0 with skip input)."""
    return [l for l in range(s.L) if not (l == 0 and s.ext.skip_input)]


def scratch_regions(pd) -> Regions:
    s = pd.shape
    r = Regions()
    W = max(s.SIC, s.DIC)
    r.add("dhl", s.D * s.T * s.N * s.DIC)
    if s.ext.layer_bidirectional and s.L > 1:
        r.add("dcat", s.T * s.N * s.layer_in)
    if s.projection:
        r.add("dha", s.T * s.N * s.DIC)
        r.add("dht", s.N * s.DHC)
    r.add("dh0", s.N * W)
    r.add("dh1", s.N * W)
    r.add("zero", s.N * max(W, s.DHC))
    if s.spec.has_cell_state:
        r.add("dc0", s.N * s.DHC)
        r.add("dc1", s.N * s.DHC)
    r.add("dgx", s.T * s.N * s.G * s.DHC)
    r.add("dgh", s.T * s.N * s.G * s.DHC)
    if s.spec.reads_reset_state:
        r.add("drh", s.N * s.DHC)
        r.add("rh", s.T * s.N * s.DHC)
        r.add("carry", s.N * s.G * s.DHC)
    if s.spec.has_attention:
        r.add("datt", s.T * s.N * s.DHC)
        if not _canon_attention(pd):
            r.add("dattn", s.T * s.N)
    if s.peephole:
        r.add("dpeep", s.T * s.N * 3 * s.DHC)
    if _present(pd, "diff_dst_iter_desc"):
        r.add("ddi", s.L * s.D * s.N * s.DIC)
    if _present(pd, "diff_dst_iter_c_desc"):
        r.add("ddic", s.L * s.D * s.N * s.DHC)
    if _present(pd, "diff_src_iter_desc"):
        r.add("dsi", s.L * s.D * s.N * s.SIC)
    if _present(pd, "diff_src_iter_c_desc"):
        r.add("dsic", s.L * s.D * s.N * s.DHC)
    if not _canon(pd, "diff_src_layer_desc"):
        r.add("dsrc", s.T * s.N * s.SLC)
    for name in _DIRECT:
        md = pd._descs.get(name)
        if md is not None and not md.is_zero() and md != kernel_desc(name, md):
            r.add("in_" + name, md.nelems())
    for dname in _DIFF_W:
        if _present(pd, dname) and not _canon(pd, dname):
            r.add("dw_" + dname, pd._descs[dname].nelems())
    if s.ext.seq_lengths is not None:
        S, GD = layer_rows(s), s.G * s.DHC
        r.add("dyu", s.T * s.N * s.DIC)
        r.add("xp", S * max(s.SLC, s.layer_in))
        r.add("dgxp", S * GD)
        r.add("dxp", S * s.SLC)
        r.add("dsrcs", s.T * s.N * s.SLC)
        r.add("dhz", s.N * W)
        if s.spec.has_cell_state:
            r.add("dcz", s.N * s.DHC)
        for reg in ("ddi", "ddic", "dsi", "dsic"):
            if reg in r:
                r.add(reg + "s", r.sizes[reg])
    rows = s.T * s.N
    if rnn_rules.weight_gradient_copies(pd.get_engine().info, rows,
                                        max(s.G * s.DHC, s.DIC)):
        # A^T and packed B of the weight-gradient GEMMs (see BackwardPlanBuilder._wgrad_gemm): k is
        # at most T*N rows; panels pad n by less than 64 columns
        r.add("wga", rows * max(s.SLC, s.layer_in, s.SIC, s.DIC, s.DHC))
        r.add("wgb", rows * (max(s.G * s.DHC, s.DIC) + 64))
    reserve_no_bias(r, s)
    grid = grid_backward(pd.get_engine(), s)
    if grid is not None:
        r.add("grid_bar", 2 * s.L * s.D)  # per layer and direction: counter, flag (int32)
    ut = recurrent_weights_copy(pd.get_engine(), s, grid is not None)
    if ut:
        r.add("ut", s.L * s.D * s.SIC * s.G * s.DHC)
    reserve_packed(r, pd.get_engine(), weight_gemms(s, grid is not None, ut), s)
    return r


def recurrent_weights_copy(engine, s, grid: bool) -> bool:
    """Whether the per-step backward's recurrent GEMMs read a transposed copy of the
    recurrent weights, made once per execution (device rule)."""
    return (not grid and s.int8 is None
            and rnn_rules.transposed_recurrent_weights(engine.info, s.SIC, s.G * s.DHC))


def _present(pd, name: str) -> bool:
    md = pd._descs.get(name)
    return md is not None and not md.is_zero()


def _canon_attention(pd) -> bool:
    md = pd._descs.get("diff_attention_desc")
    return md is None or md.is_zero() or md == kernel_desc("attention_desc", md)


class BackwardPlanBuilder(PlanBuilder):
    """Kernels and launch arguments of one backward RNN problem."""

    def __init__(self, pd):
        PlanBuilder.__init__(self, pd)
        s, eng, spec = self.s, self.engine, self.spec
        sc = pd.scratch
        self.ws_off = pd.ws_regions.offsets
        self.stage_inputs(_INPUTS, tuple(_INPUTS))
        DHC, N = s.DHC, s.N
        overwrite = bool(pd.get_flags() & rnn_flags.diff_weights_overwrite)
        scr = SCRATCH

        # -- diff weights: the user's buffers, or staged copies (accumulation needs the old values)
        self.dw: dict[str, tuple[Ref, int]] = {}
        for dname, (arg, _fname) in _DIFF_W.items():
            if not _present(pd, dname):
                continue
            md = pd._descs[dname]
            if _canon(pd, dname):
                ref, off = Ref(arg), 0
                if overwrite:
                    self.plan.zero(ref, 0, md.nelems())
            else:
                ref, off = scr, sc["dw_" + dname]
                if overwrite:
                    self.plan.zero(ref, off, md.nelems())
                else:
                    self.add_reorder(Ref(arg), md, ref, region_desc(md.dims, off))
            self.dw[dname] = (ref, off)
        self.plan.zero(scr, sc["zero"], sc.sizes["zero"])
        if self.seq is not None:
            # steps compute only the running sequences: the gradients at padding rows, which
            # the weight-gradient GEMMs read, stay zero
            for reg in ("dgx", "dgh", "rh", "dpeep"):
                if reg in sc:
                    self.plan.zero(scr, sc[reg], sc.sizes[reg])
        for dname, reg in (("diff_dst_iter_desc", "ddi"), ("diff_dst_iter_c_desc", "ddic")):
            if _present(pd, dname):
                md = pd._descs[dname]
                self.add_reorder(Ref(DIFF_ARG[dname]), md, scr, region_desc(md.dims, sc[reg]))
                if self.seq is not None:
                    w = md.dims[3]
                    self.add_gather(scr, sc[reg], w, scr, sc[reg + "s"], w, w,
                                    self.seq.sort_index(s.L * s.D))

        # -- kernels -----------------------------------------------------------------------------
        grid = grid_backward(eng, s)
        self.grid, self.grid_form = grid is not None, grid
        if self.grid:
            self.recurrence = self.plan.get("rnn_persistent_grid_bwd", grid, build_grid_bwd)
            self.plan.zero(scr, sc["grid_bar"], 2 * s.L * s.D)
        self.gemm, self.wsrc = {}, {}
        ut = recurrent_weights_copy(eng, s, self.grid)
        if ut:  # U^T of every layer and direction: [G * DHC rows][SIC]
            u_ref, u_base = self.src["weights_iter_desc"]
            GD = s.G * DHC
            for ld in range(s.L * s.D):
                tile = reduction_rules.transpose_tile(eng.info)
                self.plan.kernel("transpose", Transpose(cols=GD, ld=GD, tile=tile),
                                 build_transpose,
                                 out=scr, src=u_ref, o_off=sc["ut"] + ld * s.SIC * GD,
                                 i_off=u_base + ld * s.SIC * GD, nrows=s.SIC)
            self.src["weights_iter_t"] = (scr, sc["ut"])
        for role, (shape, src_name, col, count, stride) in weight_gemms(s, self.grid,
                                                                        ut).items():
            g = self.gemm[role] = role_gemm(eng, s, role, shape)
            self.wsrc[role] = self.weights_for(role, g, src_name, col, count, stride)
        stages = spec.forward_stages(s.peephole)
        first = first_dhp_writer(spec, s.peephole)
        self.stage_kernels = []
        for k, st in enumerate(stages):
            gates = st.recurrent_gemm.gates
            if self.grid:  # no per-step kernels; the weight gradients still read each stage
                self.stage_kernels.append((st, None, None, None,
                                           spec.gate_names.index(gates[0]), len(gates)))
                continue
            bp = BackwardElementwiseProblem(spec.name, k, s.peephole, s.activation, s.alpha,
                                            DHC, ld_h_prev=s.SIC,
                                            ld_dh=DHC if s.projection else s.DIC,
                                            two_dh=not s.projection, clip=clip_key(s),
                                            dhp_assign=first == ("elementwise", k),
                                            wg=rnn_rules.cell_wg(self.engine.info, DHC))
            kern = self.plan.get("rnn_elementwise_bwd", bp, build_elementwise_bwd)
            g0 = spec.gate_names.index(gates[0])
            ng = len(gates)
            # gradient to the GEMM's source: rh (written) or h_prev (accumulated)
            self.stage_kernels.append((st, kern, backward_buffers(bp), self.gemm[f"dh{k}"], g0, ng))
        self.add2 = (self.plan.get("add2", Add2(N * s.DIC), build_add2) if s.projection
                     else None)
        self.dropout = None
        if dropout_active(s, True):
            from ...runtime.dropout import get_dropout_bwd

            self.dropout = get_dropout_bwd(eng, rows=s.T * N, cols=s.DIC, ld_dy=s.DIC, ld_dx=s.DIC)
        # layer by layer from the top, both directions: in a per-layer bidirectional stack
        # both directions of layer l feed the gradient of both directions of layer l-1
        for l in range(s.L - 1, -1, -1):
            for d in range(s.D):
                if l == s.L - 1:
                    self._plan_top(d)
                    if self.dropout is not None and s.ext.dropout_output:
                        self._drop_bwd(l, d)
                else:
                    self._plan_layer_gradient(l, d)
            for d in range(s.D):
                self._plan_layer(l, d)
        self._plan_outputs()

    def _dhl(self, d: int) -> int:
        """Offset of direction d's output gradient [T, N, DIC] of the layer being processed."""
        s = self.s
        return self.pd.scratch["dhl"] + d * s.T * s.N * s.DIC

    def _plan_layer_gradient(self, l: int, d: int) -> None:
        """dhl[d] of layer l (< L-1): from the layer above, through the dropout mask."""
        s, sc = self.s, self.pd.scratch
        scr = SCRATCH
        if s.ext.layer_bidirectional:
            self.add_reorder(scr, region_desc([s.T, s.N, s.DIC], sc["dcat"] + d * s.DIC,
                                              strides=[s.N * s.layer_in, s.layer_in, 1]),
                             scr, region_desc([s.T, s.N, s.DIC], self._dhl(d)))
        if self.dropout is not None:
            self._drop_bwd(l, d)

    def _drop_bwd(self, l: int, d: int) -> None:
        """dhl[d] of layer l through the mask its forward output was dropped with."""
        s, scr = self.s, SCRATCH
        m_off = self.ws_off["mask"] * 4 + (l * s.D + d) * s.T * s.N * s.DIC
        args = self.dropout.ordered(scr, self._dhl(d), scr, self._dhl(d), Ref("ws"), m_off,
                                    s.ext.dropout)
        self.plan.launch(self.dropout.kernel, args)

    # -- helpers ---------------------------------------------------------------------------------

    def _wgrad_gemm(self, shape: GemmShape, a_ref, a_off, b_ref, b_off, c_ref, c_off,
                    like: GemmShape | None = None):
        """``C += A^T B`` of a weight gradient (A: [k rows, m], B: [k, n], both activations).
        Where the device rule says so (CPUs, a B larger than the cache) A is first copied
        transposed and B into the GEMM's panels (scratch ``wga``/``wgb``). ``like``: a
        sibling weight gradient (same m and n, a longer k) whose way ``shape`` goes, with
        its GEMM's tile, so that both share their programs."""
        rule = like if like is not None else shape
        if not rnn_rules.weight_gradient_copies(self.engine.info, rule.k, rule.n):
            self.plan.gemm(shape, a_ref, a_off, b_ref, b_off, c_ref, c_off)
            return
        sc, scr = self.pd.scratch, SCRATCH
        m, k = shape.m, shape.k
        self.plan.kernel("transpose", Transpose(cols=m, ld=shape.lda), build_transpose,
                         out=scr, src=a_ref, o_off=sc["wga"], i_off=a_off, nrows=k)
        params = None
        if like is not None:
            params = get_gemm(self.engine, replace(like, trans_a=False, lda=like.k),
                              static_b=True).params
        g = get_gemm(self.engine, replace(shape, trans_a=False, lda=k), static_b=True,
                     params=params)
        if g.packed:
            pk = g.activation_packer()
            self.plan.launch(pk, g.packer_args(pk, b_ref, b_off, scr, sc["wgb"]))
            b_ref, b_off = scr, sc["wgb"]
        self.plan.gemm(g, scr, sc["wga"], b_ref, b_off, c_ref, c_off)

    def _plan_top(self, d: int) -> None:
        """dhl = this direction's part of diff_dst_layer."""
        s, pd = self.s, self.pd
        md = pd._descs["diff_dst_layer_desc"]
        rows = list(md.dims[:-1])  # [T, N], or [rows] packed
        if s.direction == rnn_direction.bidirectional_concat:
            src = md.submemory_desc(rows + [s.DIC], [0] * len(rows) + [d * s.DIC])
        else:
            src = md
        if self.seq is None:
            self.add_reorder(Ref(ARG_DIFF_DST_LAYER), src, SCRATCH,
                             region_desc([s.T, s.N, s.DIC], self._dhl(d)))
            return
        # sorted by length; padded positions' gradients are ignored
        dyu = pd.scratch["dyu"]
        self.add_reorder(Ref(ARG_DIFF_DST_LAYER), src, SCRATCH,
                         region_desc(rows + [s.DIC], dyu))
        index = self.seq.unpack_index() if s.ext.packed else self.seq.sort_padded_index()
        self.add_gather(SCRATCH, dyu, s.DIC, SCRATCH, self._dhl(d), s.DIC, s.DIC,
                        index)

    def _plan_layer(self, l: int, d: int) -> None:
        s, pd = self.s, self.pd
        sc = pd.scratch
        G, DHC, N, T = s.G, s.DHC, s.N, s.T
        ws, scr = Ref("ws"), SCRATCH
        ld = l * s.D + d
        b_ref, b_off = self.src["bias_desc"]
        b_off += ld * s.Gb * DHC
        peep = self.src.get("weights_peephole_desc")
        att = self.src.get("attention_desc")
        order = list(range(T)) if self._ltr(d) else list(range(T - 1, -1, -1))
        per_g = N * G * DHC
        seq, ltr = self.seq, self._ltr(d)
        if self.grid:
            self._plan_grid_layer(l, d, b_ref, b_off, peep, att)
            self._plan_weight_grads(l, d, order)
            return
        sfx = "" if seq is None else "s"  # sorted copies of the state gradients
        for k in range(T):
            t = order[T - 1 - k]
            t_prev = order[T - 2 - k] if k < T - 1 else None
            first, last = k == 0, k == T - 1
            # gradient arriving from the next step (or diff_dst_iter), and its successor
            if first and seq is not None and ltr:
                # only the sequences that end at T-1 take diff_dst_iter now; the others
                # take it at their own last step (below), zero until then
                dh_cur, dc_cur = sc["dhz"], sc.offsets.get("dcz", 0)
                for reg, z, w in (("ddi", "dhz", s.DIC), ("ddic", "dcz", DHC)):
                    if z in sc:
                        self.plan.zero(scr, sc[z], N * w)
                        if reg in sc:
                            self.add_copy_rows(scr, sc[reg + "s"] + ld * N * w, scr, sc[z],
                                               int(seq.batch[T - 1]), w)
            elif first:
                dh_cur = (sc["ddi" + sfx] + ld * N * s.DIC) if "ddi" in sc else sc["zero"]
                dc_cur = (sc["ddic" + sfx] + ld * N * DHC) if "ddic" in sc else sc["zero"]
            else:
                dh_cur = sc["dh%d" % (k % 2)]
                dc_cur = sc["dc%d" % (k % 2)] if "dc0" in sc else 0
                if seq is not None and ltr:
                    # sequences whose last step is t start here: diff_dst_iter, or zero (the
                    # rows held whatever the steps' whole-row GEMMs left in them)
                    a, b = seq.new_rows(t)
                    for reg, cur, w in (("ddi", dh_cur, s.DIC), ("ddic", dc_cur, DHC)):
                        if reg == "ddic" and "dc0" not in sc:
                            continue
                        if reg in sc:
                            self.add_copy_rows(scr, sc[reg + "s"] + (ld * N + a) * w, scr,
                                               cur + a * w, b - a, w)
                        elif b > a:
                            self.plan.zero(scr, cur + a * w, (b - a) * w)
            # right to left with lengths, sequences end (in backward order) at different
            # steps: their initial-state gradients are taken out after each step (below)
            direct_out = last and (seq is None or ltr)
            if direct_out and "dsi" in sc:
                dh_nxt = sc["dsi" + sfx] + ld * N * s.SIC
            else:
                dh_nxt = sc["dh%d" % ((k + 1) % 2)]
            if direct_out and "dsic" in sc:
                dc_nxt = sc["dsic" + sfx] + ld * N * DHC
            else:
                dc_nxt = sc["dc%d" % ((k + 1) % 2)] if "dc0" in sc else 0
            # with lengths, rows past the running ones are never read before a sequence starts
            # there (left to right: zeroed or given diff_dst_iter above), so no step clears them
            h_prev = self._reg("h", l, d, t_prev, N * s.DIC) if t_prev is not None else \
                self.ws_off["h0"] + ld * N * s.SIC
            c_prev = (self._reg("c", l, d, t_prev, N * DHC) if t_prev is not None else
                      self.ws_off["c0"] + ld * N * DHC) if "c0" in self.ws_off else 0
            dhl_t = self._dhl(d) + t * N * s.DIC
            if s.projection:
                dha_t = sc["dha"] + t * N * s.DIC
                self.plan.launch(self.add2, out=scr, a=scr, b=scr, o_off=dha_t, a_off=dhl_t,
                                 b_off=dh_cur)
                r_ref, r_base, r_step = self.wsrc["dht"]
                self.plan.gemm(self.gemm["dht"], scr, dha_t, r_ref, r_base + ld * r_step, scr,
                               sc["dht"], rows=self.gemm_rows_at(self.gemm["dht"], t))
                dh_a, dh_b = sc["dht"], 0
            else:
                dh_a, dh_b = dhl_t, dh_cur
            vals = {
                "gates": ws, "c": ws, "c_prev": ws, "h_prev": ws, "att": att[0] if att else None,
                "peep": peep[0] if peep else None, "bias": b_ref, "gh": ws, "dh_a": scr,
                "dh_b": scr, "dc": scr, "dc_prev": scr, "drh": scr, "dgx": scr, "dgh": scr,
                "dhp": scr, "datt": scr, "dpeep": scr, "rh": scr, "carry": scr,
                "gates_off": self._reg("gates", l, d, t, per_g),
                "c_off": self._reg("c", l, d, t, N * DHC) if "c" in self.ws_off else 0,
                "c_prev_off": c_prev, "h_prev_off": h_prev,
                "att_off": (att[1] + t * N) if att else 0,
                "peep_off": (peep[1] + ld * 3 * DHC) if peep else 0,
                "bias_off": b_off,
                "gh_off": self._reg("gh", l, d, t, per_g) if "gh" in self.ws_off else 0,
                "dh_a_off": dh_a, "dh_b_off": dh_b, "dc_off": dc_cur, "dc_prev_off": dc_nxt,
                "drh_off": sc["drh"] if "drh" in sc else 0,
                "dgx_off": sc["dgx"] + t * per_g, "dgh_off": sc["dgh"] + t * per_g,
                "dhp_off": dh_nxt, "datt_off": (sc["datt"] + t * N * DHC) if "datt" in sc else 0,
                "dpeep_off": (sc["dpeep"] + t * N * 3 * DHC) if "dpeep" in sc else 0,
                "rh_off": (sc["rh"] + t * N * DHC) if "rh" in sc else 0,
                "carry_off": sc["carry"] if "carry" in sc else 0, "batch": N,
            }
            for k_st, (st, kern, _bufs, to_src, g0, _ng) in reversed(
                    list(enumerate(self.stage_kernels))):
                self.plan.launch(kern, rows=self.rows_at(t), **vals)
                ut_ref, ut_base, ut_step = self.wsrc[f"dh{k_st}"]
                target = sc["drh"] if st.recurrent_gemm.source == "rh" else dh_nxt
                self.plan.gemm(to_src, scr, sc["dgh"] + t * per_g + g0 * DHC, ut_ref,
                               ut_base + ld * ut_step, scr, target,
                               rows=self.gemm_rows_at(to_src, t))
            if seq is not None and not ltr:
                a, b = seq.new_rows(t)  # rows whose first forward step was t
                for reg, nxt, w in (("dsi", dh_nxt, s.SIC), ("dsic", dc_nxt, DHC)):
                    if reg == "dsic" and "dc0" not in sc:
                        continue
                    if reg in sc:
                        self.add_copy_rows(scr, nxt + a * w, scr, sc[reg + "s"] + (ld * N + a) * w,
                                           b - a, w)
                    if not last and b > a:  # their rows are padding from now on
                        self.plan.zero(scr, nxt + a * w, (b - a) * w)
        self._plan_weight_grads(l, d, order)

    def _plan_grid_layer(self, l: int, d: int, b_ref, b_off: int, peep, att) -> None:
        """Every step of layer l, direction d, in one launch (the grid-wide backward): the
        offsets of step 0 and the buffers the per-step plan alternates between."""
        s, sc = self.s, self.pd.scratch
        N, DHC, T = s.N, s.DHC, s.T
        ws, scr = Ref("ws"), SCRATCH
        ld = l * s.D + d
        per_g = N * s.G * DHC
        u_ref, u_base = self.src["weights_iter_desc"]
        last_parity = "dh%d" % (T % 2)
        sfx = "" if self.seq is None else "s"  # sorted copies of the state gradients
        vals = {
            "gates": ws, "c": ws, "c_prev": ws, "h_prev": ws, "gh": ws,
            "att": att[0] if att else scr, "peep": peep[0] if peep else scr, "bias": b_ref,
            "dh_a": scr, "dh_b": scr, "dc": scr, "dc_prev": scr, "dhp": scr, "datt": scr,
            "dpeep": scr, "dgx": scr, "dgh": scr, "u": u_ref, "bar": scr,
            "gates0": self._reg("gates", l, d, 0, per_g),
            "c0r": self._reg("c", l, d, 0, N * DHC) if "c" in self.ws_off else 0,
            "cinit": self.ws_off["c0"] + ld * N * DHC if "c0" in self.ws_off else 0,
            "h0r": self._reg("h", l, d, 0, N * s.DIC),
            "hinit": self.ws_off["h0"] + ld * N * s.SIC,
            "att0": att[1] if att else 0,
            "peep_b": (peep[1] + ld * 3 * DHC) if peep else 0, "bias_b": b_off,
            "gh0": self._reg("gh", l, d, 0, per_g) if "gh" in self.ws_off else 0,
            "dhl0": self._dhl(d), "dgx0": sc["dgx"], "dgh0": sc["dgh"],
            "datt0": sc["datt"] if "datt" in sc else 0,
            "dpeep0": sc["dpeep"] if "dpeep" in sc else 0,
            "dh_first": (sc["ddi" + sfx] + ld * N * s.DIC) if "ddi" in sc else sc["zero"],
            "dc_first": (sc["ddic" + sfx] + ld * N * DHC) if "ddic" in sc else sc["zero"],
            "dh_buf0": sc["dh0"], "dh_buf1": sc["dh1"],
            "dc_buf0": sc["dc0"] if "dc0" in sc else 0,
            "dc_buf1": sc["dc1"] if "dc1" in sc else 0,
            "dh_last": (sc["dsi" + sfx] + ld * N * s.SIC) if "dsi" in sc else sc[last_parity],
            "dc_last": ((sc["dsic" + sfx] + ld * N * DHC) if "dsic" in sc
                        else sc["dc%d" % (T % 2)] if "dc0" in sc else 0),
            "u_off": u_base + ld * s.SIC * s.G * DHC,
            "bar_off": sc["grid_bar"] + 2 * ld,
            "steps": T, "reverse": 0 if self._ltr(d) else 1,
        }
        if self.seq is not None:
            # running rows per step (the forward's table; its packed offsets unused here)
            if getattr(self, "_seq_table", None) is None:
                self._seq_table = self.plan.index(np.concatenate([self.seq.batch, self.seq.off]))
            vals.update(seq=INDEX, seq_off=self._seq_table)
        # float4 reads of U's rows (global-weights form): staged copies and user buffers
        # start on a 16-byte boundary, and layers lie G * DHC (a multiple of 4) floats apart
        assert not (self.grid_form.wglobal and vals["u_off"] % 4), vals["u_off"]
        self.plan.launch(self.recurrence, **vals)

    def _plan_weight_grads(self, l: int, d: int, order: list[int]) -> None:
        s, pd = self.s, self.pd
        sc = pd.scratch
        G, DHC, N, T = s.G, s.DHC, s.N, s.T
        ws, scr = Ref("ws"), SCRATCH
        ld = l * s.D + d
        GD = G * DHC
        # dW_layer += X^T dGx (layer 0 with skip input has no matrix)
        if l == 0:
            x_ref, x_off = self.src["src_layer_desc"]
            K = s.SLC
        elif "xin" in self.ws_off:
            x_ref, (x_off, K) = ws, xin_offset(s, True, self.ws_off["xin"], l, d)
        else:
            x_ref, x_off = ws, self._reg("h", l - 1, d, 0, N * s.DIC)
            K = s.DIC
        seq = self.seq
        dgx_off, rows = sc["dgx"], T * N
        if seq is not None:
            # the valid rows only, packed as the forward's layer GEMM read them
            rows = seq.S
            self.add_gather(scr, sc["dgx"], GD, scr, sc["dgxp"], GD, GD, seq.pack_index(True))
            dgx_off = sc["dgxp"]
            if not (l == 0 and (s.ext.skip_input or s.ext.packed)):
                self.add_gather(x_ref, x_off, K, scr, sc["xp"], K, K, seq.pack_index(l > 0))
                x_ref, x_off = scr, sc["xp"]
        if not (l == 0 and s.ext.skip_input):
            dwl_ref, dwl_off = self.dw["diff_weights_layer_desc"]
            self._wgrad_gemm(GemmShape(m=K, n=GD, k=rows, lda=K, ldb=GD, ldc=GD, trans_a=True,
                                 beta=1.0),
                       x_ref, x_off, scr, dgx_off, dwl_ref, dwl_off + ld * s.SLC * GD)
        # dU += H_prev^T dGh, per stage (vanilla GRU's o gate reads rh)
        dwi_ref, dwi_off = self.dw["diff_weights_iter_desc"]
        dwi_off += ld * s.SIC * GD
        t0 = order[0]
        for st, _, _, _, g0, ng in self.stage_kernels:
            cols = ng * DHC
            if st.recurrent_gemm.source == "rh":
                self._wgrad_gemm(GemmShape(m=s.SIC, n=cols, k=T * N, lda=DHC, ldb=GD, ldc=GD,
                                     trans_a=True, beta=1.0),
                           scr, sc["rh"], scr, sc["dgh"] + g0 * DHC,
                           dwi_ref, dwi_off + g0 * DHC)
                continue
            if T > 1:
                # steps after the first read h of the neighbouring step: contiguous rows
                h_first = self._reg("h", l, d, 0 if self._ltr(d) else 1, N * s.DIC)
                dg_first = sc["dgh"] + (1 if self._ltr(d) else 0) * N * GD + g0 * DHC
                self._wgrad_gemm(GemmShape(m=s.SIC, n=cols, k=(T - 1) * N, lda=s.DIC, ldb=GD,
                                           ldc=GD, trans_a=True, beta=1.0),
                           ws, h_first, scr, dg_first, dwi_ref, dwi_off + g0 * DHC)
            # the first step's h0 term (k = N) goes the way of the steps after it, so that it
            # takes their programs (transpose, packer, GEMM) instead of a GEMM of its own
            # (LSTM 512 T=50 N=64 training: 10 -> 9 programs)
            like = (GemmShape(m=s.SIC, n=cols, k=(T - 1) * N, lda=s.DIC, ldb=GD, ldc=GD,
                              trans_a=True, beta=1.0) if T > 1 else None)
            self._wgrad_gemm(GemmShape(m=s.SIC, n=cols, k=N, lda=s.SIC, ldb=GD, ldc=GD,
                                       trans_a=True, beta=1.0),
                       ws, self.ws_off["h0"] + ld * N * s.SIC, scr,
                       sc["dgh"] + t0 * N * GD + g0 * DHC, dwi_ref, dwi_off + g0 * DHC,
                       like=like)
        # bias: column sums of the gate gradients; bias gates whose gate gradients lie side
        # by side in one buffer go in one launch (LSTM: the four gates at once)
        db_ref, db_off = self.dw.get("diff_bias_desc", (None, 0))
        lanes = colsum_row_lanes(self.engine.info)
        runs: list[list] = []  # [first bias gate, source offset, gates, source region]
        for b, bg in enumerate(self.spec.bias_gates if db_ref is not None else ()):
            region = "dgx" if bg.target == "gx" else "dgh"
            src = sc[region] + self.spec.gate_names.index(bg.gate) * DHC
            if runs and region == runs[-1][3] and src == runs[-1][1] + runs[-1][2] * DHC:
                runs[-1][2] += 1
            else:
                runs.append([b, src, 1, region])
        for b, src, count, _ in runs:
            self.plan.kernel("colsum", ColSum(width=count * DHC, ld=GD, row_lanes=lanes),
                             build_colsum, out=db_ref, src=scr,
                             o_off=db_off + (ld * s.Gb + b) * DHC, i_off=src, nrows=T * N)
        if s.peephole:
            dp_ref, dp_off = self.dw["diff_weights_peephole_desc"]
            self.plan.kernel("colsum", ColSum(width=3 * DHC, ld=3 * DHC, row_lanes=lanes),
                             build_colsum, out=dp_ref, src=scr, o_off=dp_off + ld * 3 * DHC,
                             i_off=sc["dpeep"], nrows=T * N)
        if s.projection:
            dr_ref, dr_off = self.dw["diff_weights_projection_desc"]
            self._wgrad_gemm(GemmShape(m=DHC, n=s.DIC, k=T * N, lda=DHC, ldb=s.DIC, ldc=s.DIC,
                                 trans_a=True, beta=1.0),
                       ws, self._reg("ht", l, d, 0, N * DHC), scr, sc["dha"], dr_ref,
                       dr_off + ld * DHC * s.DIC)
        if "datt" in sc:
            if "dattn" in sc:
                out_ref, out_off = scr, sc["dattn"]
            else:
                out_ref, out_off = Ref(ARG_DIFF_AUGRU_ATTENTION), 0
            self.plan.kernel("rowsum", RowSum(rows=T * N, width=DHC, ld=DHC), build_rowsum,
                             out=out_ref, src=scr, o_off=out_off, i_off=sc["datt"])
        # dX = dGx W^T: the output gradient of the layer below, or diff_src_layer
        # (with L > 1, SLC equals the input width of every layer: one GEMM shape)
        accumulate = d > 0 and (l == 0 or s.ext.layer_bidirectional)
        if l > 0:
            out_ref, out_off = scr, sc["dcat"] if "dcat" in sc else self._dhl(d)
        elif seq is not None:
            out_ref, out_off = scr, sc["dsrcs"]
        elif "dsrc" in sc:
            out_ref, out_off = scr, sc["dsrc"]
        else:
            out_ref, out_off = Ref(ARG_DIFF_SRC_LAYER), 0
        if l == 0 and s.ext.skip_input:
            # x fed every gate: its gradient is the sum of the gate gradients
            for g in range(G):
                self.add_reorder(scr, region_desc([T, N, DHC], sc["dgx"] + g * DHC,
                                                  strides=[N * GD, GD, 1]),
                                 out_ref, region_desc([T, N, DHC], out_off),
                                 beta=1.0 if (accumulate or g > 0) else 0.0)
            return
        role = "dx_b1" if accumulate else "dx_b0"
        w_ref, w_base, w_step = self.wsrc[role]
        if seq is not None:  # packed rows, then back into the padded layout (zero padding)
            self.plan.gemm(self.gemm["dx_b0"], scr, dgx_off, w_ref, w_base + ld * w_step, scr,
                           sc["dxp"])
            self.add_gather(scr, sc["dxp"], s.SLC, out_ref, out_off, s.SLC, s.SLC,
                            seq.unpack_index(), accumulate=accumulate)
            return
        self.plan.gemm(self.gemm[role], scr, sc["dgx"], w_ref, w_base + ld * w_step, out_ref,
                       out_off)

    def _plan_outputs(self) -> None:
        pd = self.pd
        sc = pd.scratch
        scr = SCRATCH
        if self.seq is not None:  # back to the user's order
            md = pd._descs["diff_src_layer_desc"]
            s = self.s
            if "dsrc" in sc:
                out_ref, out_off = scr, sc["dsrc"]
            else:
                out_ref, out_off = Ref(ARG_DIFF_SRC_LAYER), 0
            self.add_gather(scr, sc["dsrcs"], s.SLC, out_ref, out_off, s.SLC, s.SLC,
                            self.seq.pack_index(src_sorted=True) if s.ext.packed
                            else self.seq.unsort_padded_index())
            for reg in ("dsi", "dsic"):
                if reg in sc:
                    w = sc.sizes[reg] // (s.L * s.D * s.N)
                    self.add_gather(scr, sc[reg + "s"], w, scr, sc[reg], w, w,
                                    self.seq.unsort_index(s.L * s.D))
        if "dsrc" in sc:
            md = pd._descs["diff_src_layer_desc"]
            self.add_reorder(scr, region_desc(md.dims, sc["dsrc"]), Ref(ARG_DIFF_SRC_LAYER), md)
        for dname, reg in (("diff_src_iter_desc", "dsi"), ("diff_src_iter_c_desc", "dsic")):
            if reg in sc:
                md = pd._descs[dname]
                self.add_reorder(scr, region_desc(md.dims, sc[reg]), Ref(DIFF_ARG[dname]), md)
        if "dattn" in sc:
            md = pd._descs["diff_attention_desc"]
            self.add_reorder(scr, region_desc(md.dims, sc["dattn"]), Ref(ARG_DIFF_AUGRU_ATTENTION),
                             md)
        for dname, (ref, off) in self.dw.items():
            if ref.key == "scratch":
                md = pd._descs[dname]
                self.add_reorder(scr, region_desc(md.dims, off), Ref(_DIFF_W[dname][0]), md)


DIFF_ARG = {"diff_dst_iter_desc": ARG_DIFF_DST_ITER, "diff_dst_iter_c_desc": ARG_DIFF_DST_ITER_C,
            "diff_src_iter_desc": ARG_DIFF_SRC_ITER, "diff_src_iter_c_desc": ARG_DIFF_SRC_ITER_C}
