"""Generator of the grid-wide one-launch RNN recurrence: a layer and direction's whole
sequence in one launch of several work-groups, steps separated by a grid-wide barrier.

Work-group w owns channels ``[w * jb, (w + 1) * jb)`` of every gate and every batch row. It
loads its slice of the recurrent weights into local memory once (``[k][jj][gate]``: one
work-item reads its channel's gates together) and keeps it there across all steps; work-item
(n, jj) keeps the cell state of its row and channel in a register. Each step stages the
previous hidden state (written by every work-group, read around the L1 cache with volatile
loads) through local memory in chunks of ``kc`` columns, computes its gates' sums and the
cell, writes h, and meets the other work-groups at the barrier. A vanilla GRU meets them once
more between its two stages (its second GEMM reads every channel of r * h_prev).

Where a group's weight slice outgrows local memory, one-stage cells take a form that reads the
weights from global memory every step (``GridProblem.wglobal``: a work-item per four channels,
one float4 read per gate and column, k split over lanes meeting by shuffles and in local
memory).

The barrier is a monotonic arrival counter in global memory: group leaders fence (NVIDIA's
``membar.gl`` through inline PTX), add one, and spin on volatile reads until the count
reaches ``nwg`` times the barrier's number. It is correct only if all work-groups are
resident at once: the device rule launches no more groups than the device has compute
units, each sized (local memory, work-items) so that one fits on a unit. A spin that lasts
too long gives up and raises a flag word the plan leaves for tests and debugging, instead of
hanging the device.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..cells import get_cell
from .rnn_persistent import arg_names, cell_lines, param_decls, seq_step_lines, store_lines
from .source import KernelSource

OFFSET_ARGS = ("gx_off", "bias_off", "u_off", "h0_off", "c0_off", "h_off", "c_off",
               "gates_off", "gh_off", "peep_off", "att_off", "rh_off", "bar_off")
SIZE_ARGS = ("steps", "reverse")
BUFFERS = ("gx", "bias", "u", "h0", "c0", "h", "c", "gates", "gh", "peep", "att", "rh", "bar")
# spins of a barrier wait before it gives up (each a volatile read of L2: ~1 us); the flag word
# follows the counter
SPIN_LIMIT = 1 << 24
WARP = 32  # lanes of NVIDIA's shfl.sync
QUAD = 4  # channels per work-item of the global-weights form: one float4 weight read


@dataclass(frozen=True)
class GridProblem:
    """What the grid-wide recurrence depends on (the kernel-cache key)."""

    cell: str
    peephole: bool
    activation: str
    alpha: float
    dhc: int  # channels, the recurrent GEMM's k too (SIC == DHC)
    batch: int
    jb: int  # channels per work-group
    kc: int = 32  # columns of h staged in local memory at a time
    rn: int = 1  # batch rows per work-item (one-stage cells): rn h values per weight read
    ks: int = 1  # work-items sharing one output's k range (lanes of one warp, one-stage cells)
    # staged rows of h unpadded, columns XOR-swizzled by row (one-stage cells): a row is
    # kc floats, so a wider chunk fits where the padded rows would not
    swizzle: bool = False
    clip: tuple | None = None
    store_gates: bool = False
    store_gh: bool = False
    # weights read from global memory (L2) every step instead of held in local memory: for
    # slices that outgrow it (one-stage cells). Items are (row block, k lane, channel) with
    # the channel fastest, so a warp's weight reads are consecutive channels; the ks partial
    # sums meet in local memory
    wglobal: bool = False
    # sequences of several lengths, sorted longest first (``rnn_extensions.seq_lengths``):
    # step t runs its first ``bt`` rows and finds them at row ``gxt`` of the packed layer GEMM
    # values, both read from the int table ``seq`` ([T] counts, then [T] packed row offsets).
    # A row past its sequence's end (or, right to left, before its start) carries h and c
    # unchanged, so the state after a sequence's last step stays in place (each direction's
    # final state) and a right-to-left sequence starts from h0, and stores no gates
    seq: bool = False

    @property
    def groups(self) -> int:
        return -(-self.dhc // self.jb)

    @property
    def items(self) -> int:
        n = -(-self.batch // self.rn) * self.jb * self.ks
        if self.wglobal:  # a work-item per quad of channels; shuffles take whole warps
            n = -(-self.batch // self.rn) * (self.jb // QUAD) * self.ks
            return -(-n // WARP) * WARP
        # shuffles take whole warps: a split group is rounded up to them (the extra items
        # compute clamped rows and store nothing)
        return n if self.ks == 1 else -(-n // WARP) * WARP

    @property
    def k_padded(self) -> int:
        return -(-self.dhc // self.kc) * self.kc

    @property
    def hs_row(self) -> int:
        """Floats between staged rows of h."""
        return self.kc if self.swizzle else self.kc + 1

    def local_bytes(self, gates: int) -> int:
        return 4 * (self.us_floats(gates) + self.batch * self.hs_row)

    @property
    def warp_k_lanes(self) -> int:
        """Global-weights form: lanes of one output's k split within a warp (their sums meet
        by shuffles, the ``ks / warp_k_lanes`` warp sums in local memory)."""
        quads = self.jb // QUAD
        return min(self.ks, WARP // quads) if quads < WARP else 1

    def us_floats(self, gates: int) -> int:
        """Floats of the local array ``us``: the weight slice, or (``wglobal``) the partial
        sums of every row, k lane, channel and gate."""
        if self.wglobal:
            return self.batch * (self.ks // self.warp_k_lanes) * self.jb * gates
        return self.k_padded * self.jb * gate_stride(gates)


def gate_stride(gates: int) -> int:
    """Floats between one channel's gates and the next channel's in the local weight slice:
    three gates take four, so that a channel's gates are one aligned vector read."""
    return 4 if gates == 3 else gates


def weight_reads(gg, gates, base: str, gs: int) -> tuple[list[str], dict]:
    """Statements and per-gate expressions reading the stage's gates ``gg`` of one channel
    from local memory at ``base`` (a channel's gates at stride 1, ``gs`` floats apart per
    channel): one aligned vector read where the gates are the first 2, 3 or 4 of the slot,
    else one read per gate."""
    g0 = gates.index(gg[0])
    contiguous = [gates.index(g) for g in gg] == list(range(g0, g0 + len(gg)))
    width = {2: 2, 3: 4, 4: 4}.get(len(gg))
    if contiguous and width and g0 % width == 0 and gs % width == 0:
        vec = f"float{width}"
        return ([f"        const {vec} wv = *(const __local {vec} *)({base} + {g0});"],
                {g: f"wv.{c}" for c, g in zip("xyzw", gg)})
    return [], {g: f"{base}[{gates.index(g)}]" for g in gg}


def barriers_per_step(cell: str) -> int:
    """Grid barriers one step takes (one more per stage reading r * h_prev)."""
    spec = get_cell(cell)
    return 1 + sum(st.recurrent_gemm.source == "rh" for st in spec.forward_stages())


def build_grid(p: GridProblem) -> KernelSource:
    """OpenCL C (with inline PTX fences) of the whole recurrence; launched as ``p.groups``
    work-groups of ``p.items`` items."""
    spec = get_cell(p.cell)
    stages = spec.forward_stages(p.peephole, p.clip is not None)
    gates = spec.gate_names
    G, DHC, N, JB, KC, KP = spec.n_gates, p.dhc, p.batch, p.jb, p.kc, p.k_padded
    RN = p.rn
    if p.wglobal:
        return _build_global_weights(p, spec, stages)
    if RN > 1 or p.ks > 1 or p.swizzle:
        return _build_row_tiled(p, spec, stages)
    if p.store_gh and len(stages) != 1:
        raise ValueError(f"rnn_persistent_grid: cell {spec.name}: recurrent GEMM results are "
                         "kept for one-stage (LBR) cells only")
    GS = gate_stride(G)
    body: list[str] = weight_slice_lines(KP, JB, G, DHC, p.items)
    emit = body.append
    if spec.has_cell_state:
        emit(f"  float c_prev = c0[c0_off + n * {DHC} + j];")
    body.extend(step_head_lines(N, DHC))
    body.extend(seq_step_lines() if p.seq else [])
    emit(f"    const int gxo = gx_off + {gx_step(p, G)} + n * {G * DHC} + j;")
    reads_h_prev = any("h_prev" in st.inputs(()) for st in stages)
    if reads_h_prev:
        emit(f"    const float h_prev = hp[n * {DHC} + j];")
    if p.seq:
        emit("    const bool live = n < bt;")
    # the layer GEMM's values do not depend on h: read before the step's first wait
    for st in stages:
        for name in st.inputs(()):
            if name.startswith("gx_"):
                emit(f"    const float pgx_{name[3:]} = gx[gxo + {gates.index(name[3:]) * DHC}];")
    known: set[str] = set()
    for si, st in enumerate(stages):
        src = "hp" if st.recurrent_gemm.source == "h_prev" else "rp"
        if src == "rp":
            emit("    volatile __global const float *rp = rh + rh_off;")
        gg = st.recurrent_gemm.gates
        for g in gg:
            emit(f"    float acc_{g} = 0.0f;")
        # chunk kc + KC is loaded into registers while chunk kc is multiplied: the L2's
        # latency hides behind the arithmetic
        compute = [f"      const __local float *w = us + (kc * {JB} + jj) * {GS};",
                   "      #pragma unroll 8",
                   f"      for (int kk = 0; kk < {KC}; ++kk) {{",
                   f"        const float x = hs[n * {KC + 1} + kk];"]
        reads, wexpr = weight_reads(gg, gates, f"(w + kk * {JB * GS})", GS)
        compute += reads
        compute += [f"        acc_{g} = fma(x, {wexpr[g]}, acc_{g});" for g in gg]
        compute.append("      }")
        body.extend(chunk_loop_lines(f"pre{si}", src, N, DHC, KP, KC, p.items, compute))
        if p.store_gh:
            for g in gg:
                emit(f"    if ({live_guard(p, 'valid')}) gh[gh_off + t * {N * G * DHC} + "
                     f"n * {G * DHC} + {gates.index(g) * DHC} + j] = acc_{g};")
        # the formulas run on every item (an item past the last channel computes channel
        # DHC - 1 again, so that values stay in scope across stages); only valid ones store
        body.extend(cell_lines(spec, si, st, known, p.activation, p.alpha, p.clip, N, DHC,
                               gx_loaded=True))
        if "rh" in st.assigned:
            emit(f"    if (valid) rh[rh_off + n * {DHC} + j] = v_rh;")
        else:
            body.extend(carry_lines(p, spec, "h_prev" if reads_h_prev else None, "c_prev"))
            emit("    if (valid) {")
            body.extend("  " + ln for ln in store_lines(spec, stages, p.store_gates, N, DHC,
                                                         *stored_state(p)))
            emit("    }")
            if spec.has_cell_state:
                emit(f"    c_prev = {stored_state(p)[0]}_c;")
        # every group's rh (or h) is written before any group reads it
        emit(f"    pd_grid_sync(bar + bar_off, {p.groups}, ++epoch);")
    emit("  }")

    return _forward_source(p, spec, "n", body)


def _forward_source(p: GridProblem, spec, row: str, body: list[str]) -> KernelSource:
    """The forward kernel around ``body`` (``row``: the name of the item's batch row, or of
    its first row)."""
    name = f"pydnnl_rnn_grid_{spec.name}"
    source = kernel_lines(name, _params(p), p.items, row, p.jb, p.dhc,
                          p.us_floats(spec.n_gates), p.batch * p.hs_row, body,
                          1 if p.wglobal else p.ks)
    return KernelSource(name, source, (p.groups * p.items,), (p.items,), _names(p))


def _build_row_tiled(p: GridProblem, spec, stages) -> KernelSource:
    """The one-stage form with ``p.rn`` batch rows per work-item: each weight vector read from
    local memory serves rn rows (the one-row form reads one weight vector per multiply-add
    group and is bound by local-memory reads)."""
    gates = spec.gate_names
    G, DHC, N, JB, KC, KP, RN = spec.n_gates, p.dhc, p.batch, p.jb, p.kc, p.k_padded, p.rn
    KS = p.ks
    if len(stages) != 1:
        raise ValueError(f"rnn_persistent_grid: cell {spec.name}: rows per item need one stage")
    if KS & (KS - 1) or KS > WARP or KC % KS:
        raise ValueError(f"rnn_persistent_grid: k split {KS}: expected a power of two <= "
                         f"{WARP} dividing the chunk ({KC})")
    st = stages[0]
    gg = st.recurrent_gemm.gates
    gx_names = [name[3:] for name in st.inputs(()) if name.startswith("gx_")]
    GS = gate_stride(G)
    body: list[str] = weight_slice_lines(KP, JB, G, DHC, p.items)
    emit = body.append
    if spec.has_cell_state:
        emit(f"  float cs[{RN}];")
        emit(f"  for (int r = 0; r < {RN}; ++r) "
             f"cs[r] = c0[c0_off + min(nb * {RN} + r, {N - 1}) * {DHC} + j];")
    body.extend(step_head_lines(N, DHC))
    body.extend(seq_step_lines() if p.seq else [])
    for g in gx_names:
        emit(f"    float pgx_{g}_r[{RN}];")
    emit("    #pragma unroll")
    emit(f"    for (int r = 0; r < {RN}; ++r) {{")
    emit(f"      const int n = min(nb * {RN} + r, {N - 1});")
    for g in gx_names:
        emit(f"      pgx_{g}_r[r] = gx[gx_off + {gx_step(p, G)} + n * {G * DHC} + "
             f"{gates.index(g) * DHC} + j];")
    emit("    }")
    for g in gg:
        emit(f"    float acc_{g}_r[{RN}];")
        emit(f"    for (int r = 0; r < {RN}; ++r) acc_{g}_r[r] = 0.0f;")
    # with a k split, lane kp of each KS lanes takes columns kp, kp + KS, ... of a chunk
    if KS > 1:
        compute = [f"      const __local float *w = us + ((kc + kp) * {JB} + jj) * {GS};",
                   "      #pragma unroll 4",
                   f"      for (int kq = 0; kq < {KC // KS}; ++kq) {{",
                   f"        const int kk = kq * {KS} + kp;"]
    else:
        compute = [f"      const __local float *w = us + (kc * {JB} + jj) * {GS};",
                   "      #pragma unroll 4",
                   f"      for (int kk = 0; kk < {KC}; ++kk) {{"]
    kq = "kq" if KS > 1 else "kk"
    reads, wexpr = weight_reads(gg, gates, f"(w + {kq} * {KS * JB * GS})", GS)
    compute += reads
    compute += ["        #pragma unroll",
                f"        for (int r = 0; r < {RN}; ++r) {{",
                f"          const int hr = min(nb * {RN} + r, {N - 1});",
                f"          const float x = hs[{hs_at('hr', 'kk', KC, p.swizzle)}];"]
    compute += [f"          acc_{g}_r[r] = fma(x, {wexpr[g]}, acc_{g}_r[r]);" for g in gg]
    compute += ["        }", "      }"]
    body.extend(chunk_loop_lines("pre", "hp", N, DHC, KP, KC, p.items, compute,
                                 swizzle=p.swizzle))
    if KS > 1:  # the KS partial sums meet in every lane of their group (butterfly shuffles)
        emit("    #pragma unroll")
        emit(f"    for (int r = 0; r < {RN}; ++r) {{")
        for g in gg:
            emit(f"      for (int m = {KS // 2}; m > 0; m >>= 1) "
                 f"acc_{g}_r[r] += pd_shfl_xor(acc_{g}_r[r], m);")
        emit("    }")
    emit("    #pragma unroll")
    emit(f"    for (int r = 0; r < {RN}; ++r) {{")
    emit(f"    const int n = min(nb * {RN} + r, {N - 1});")
    emit(f"    const bool rvalid = valid && nb * {RN} + r < {N}{' && kp == 0' if KS > 1 else ''};")
    for g in gg:
        emit(f"    const float acc_{g} = acc_{g}_r[r];")
    body.extend(cell_tail_lines(p, spec, stages, gx_names, "r", "rvalid"))
    emit("    }")
    emit(f"    pd_grid_sync(bar + bar_off, {p.groups}, ++epoch);")
    emit("  }")
    return _forward_source(p, spec, "nb", body)



def _build_global_weights(p: GridProblem, spec, stages) -> KernelSource:
    """The one-stage form reading the recurrent weights from global memory every step (their
    slice outgrows local memory). Item ``(nb, kp, jq)`` (quad fastest) sums columns ``kp,
    kp + ks, ...`` of each staged chunk for rows ``nb * rn ..`` and the four channels of quad
    ``jq``: per column one aligned float4 read of each gate's weights, each serving ``rn``
    rows. The ``ks`` partial sums meet by shuffles within a warp, then in local memory; the
    cell then runs with the group's ``batch x jb`` outputs spread over all items."""
    gates = spec.gate_names
    G, DHC, N, JB, KC, KP, RN, KS = (spec.n_gates, p.dhc, p.batch, p.jb, p.kc, p.k_padded,
                                     p.rn, p.ks)
    if len(stages) != 1:
        raise ValueError(f"rnn_persistent_grid: cell {spec.name}: weights from global memory "
                         "need one stage")
    if KC % KS or KS & (KS - 1) or JB % QUAD or DHC % QUAD:
        raise ValueError(f"rnn_persistent_grid: global weights need a power-of-two k split "
                         f"dividing the chunk and channels in quads: ks {KS}, kc {KC}, jb {JB}, "
                         f"channels {DHC}")
    JQ = JB // QUAD
    items = p.items
    SW = p.warp_k_lanes
    KR = KS // SW  # partial sums per output left after the shuffles
    OUT = -(-N * JB // items)  # outputs (row, channel) per item in the cell phase
    st = stages[0]
    gg = st.recurrent_gemm.gates
    gx_names = [name[3:] for name in st.inputs(()) if name.startswith("gx_")]
    body: list[str] = [f"  const int qr = lid / {JQ}, kp = qr % {KS}, nb = qr / {KS};",
                       f"  const int jc0 = min(j0 + jj, {DHC - QUAD});"]
    emit = body.append

    def output(o: str) -> list[str]:  # output o of this item: its row n, channel j, validity
        return [f"      const int oi = lid + {o} * {items};",
                f"      const int n = min(oi / {JB}, {N - 1}), jl = oi % {JB};",
                f"      const int j = min(j0 + jl, {DHC - 1});",
                f"      const bool ovalid = oi < {N * JB} && j0 + jl < {DHC};"]

    if spec.has_cell_state:
        emit(f"  float cs[{OUT}];")
        emit(f"  for (int o = 0; o < {OUT}; ++o) {{")
        body.extend(output("o"))
        emit(f"      cs[o] = c0[c0_off + n * {DHC} + j];")
        emit("  }")
    body.extend(step_head_lines(N, DHC))
    body.extend(seq_step_lines() if p.seq else [])
    for g in gx_names:
        emit(f"    float pgx_{g}_r[{OUT}];")
    emit(f"    for (int o = 0; o < {OUT}; ++o) {{")
    body.extend(output("o"))
    for g in gx_names:
        emit(f"      pgx_{g}_r[o] = gx[gx_off + {gx_step(p, G)} + n * {G * DHC} + "
             f"{gates.index(g) * DHC} + j];")
    emit("    }")
    for g in gg:
        emit(f"    float4 acc_{g}_r[{RN}];")
        emit(f"    for (int r = 0; r < {RN}; ++r) acc_{g}_r[r] = (float4)(0.0f);")
    # a column past the last channel of h reads row DHC - 1 of u and is selected away (a NaN
    # there would otherwise leak into every sum)
    compute = ["      #pragma unroll 4",
               f"      for (int kq = 0; kq < {KC // KS}; ++kq) {{",
               f"        const int kk = kq * {KS} + kp, k = kc + kk;",
               "        const __global float4 *wk = (const __global float4 *)"
               f"(u + u_off + min(k, {DHC - 1}) * {G * DHC} + jc0);"]
    for g in gg:
        row = gates.index(g) * DHC // QUAD
        compute.append(f"        const float4 w_{g} = k < {DHC} ? wk[{row}] : (float4)(0.0f);")
    compute += ["        #pragma unroll",
                f"        for (int r = 0; r < {RN}; ++r) {{",
                f"          const int hr = min(nb * {RN} + r, {N - 1});",
                f"          const float4 x = (float4)(hs[{hs_at('hr', 'kk', KC, False)}]);"]
    compute += [f"          acc_{g}_r[r] = fma(x, w_{g}, acc_{g}_r[r]);" for g in gg]
    compute += ["        }", "      }"]
    body.extend(chunk_loop_lines("pre", "hp", N, DHC, KP, KC, items, compute))
    if SW > 1:  # the SW lanes of an output within a warp: butterfly shuffles
        emit("    #pragma unroll")
        emit(f"    for (int r = 0; r < {RN}; ++r) {{")
        for g in gg:
            for c in "xyzw":
                emit(f"      for (int m = {JQ}; m < {JQ * SW}; m <<= 1) "
                     f"acc_{g}_r[r].{c} += pd_shfl_xor(acc_{g}_r[r].{c}, m);")
        emit("    }")
    # partial sums: us[((n * KR + kr) * G + gate) * JB + channel], a quad one float4 write
    emit(f"    if (kp % {SW} == 0) {{")
    emit("      #pragma unroll")
    emit(f"      for (int r = 0; r < {RN}; ++r) {{")
    emit(f"        const int n = nb * {RN} + r;")
    emit(f"        if (n < {N}) {{")
    for g in gg:
        emit(f"          *(__local float4 *)(us + ((n * {KR} + kp / {SW}) * {G} + "
             f"{gates.index(g)}) * {JB} + jj) = acc_{g}_r[r];")
    emit("        }")
    emit("      }")
    emit("    }")
    emit("    barrier(CLK_LOCAL_MEM_FENCE);")
    emit(f"    for (int o = 0; o < {OUT}; ++o) {{")
    body.extend(output("o"))
    for g in gg:
        emit(f"    float acc_{g} = 0.0f;")
        emit(f"    for (int l = 0; l < {KR}; ++l) "
             f"acc_{g} += us[((n * {KR} + l) * {G} + {gates.index(g)}) * {JB} + jl];")
    body.extend(cell_tail_lines(p, spec, stages, gx_names, "o", "ovalid"))
    emit("    }")
    emit(f"    pd_grid_sync(bar + bar_off, {p.groups}, ++epoch);")
    emit("  }")
    pos = [f"  const int jj = (lid % {JQ}) * {QUAD};"]
    name = f"pydnnl_rnn_grid_{spec.name}"
    source = kernel_lines(name, _params(p), items, "", JB, DHC, p.us_floats(G),
                          N * p.hs_row, body, 1, pos=pos, shuffles=SW > 1)
    return KernelSource(name, source, (p.groups * items,), (items,), _names(p))

def cell_tail_lines(p: GridProblem, spec, stages, gx_names, idx: str, valid: str) -> list[str]:
    """A one-stage grid forward's cell for one (row n, channel j) of the item, whose sums
    ``acc_<gate>`` are in scope: the layer GEMM's values from ``pgx_<gate>_r[idx]``, the cell
    state from ``cs[idx]`` (updated), the stores (and LBR's recurrent sums) where ``valid``."""
    st = stages[0]
    G, DHC, N, gates = spec.n_gates, p.dhc, p.batch, spec.gate_names
    out = [f"    const float pgx_{g} = pgx_{g}_r[{idx}];" for g in gx_names]
    reads_h_prev = "h_prev" in st.inputs(())
    if reads_h_prev:
        out.append(f"    const float h_prev = hp[n * {DHC} + j];")
    if spec.has_cell_state:
        out.append(f"    const float c_prev = cs[{idx}];")
    if p.seq:
        out.append("    const bool live = n < bt;")
    if p.store_gh:
        out += [f"    if ({live_guard(p, valid)}) gh[gh_off + t * {N * G * DHC} + "
                f"n * {G * DHC} + {gates.index(g) * DHC} + j] = acc_{g};"
                for g in st.recurrent_gemm.gates]
    out += cell_lines(spec, 0, st, set(), p.activation, p.alpha, p.clip, N, DHC, gx_loaded=True)
    out += carry_lines(p, spec, "h_prev" if reads_h_prev else None, "c_prev")
    out.append(f"    if ({valid}) {{")
    out += ["  " + ln for ln in store_lines(spec, stages, p.store_gates, N, DHC,
                                             *stored_state(p))]
    out.append("    }")
    if spec.has_cell_state:
        out.append(f"    cs[{idx}] = {stored_state(p)[0]}_c;")
    return out


def gx_step(p: GridProblem, gates: int) -> str:
    """Offset in ``gx`` of step t's first row: t whole steps, or (``seq``) its packed row."""
    return f"gxt * {gates * p.dhc}" if p.seq else f"t * {p.batch * gates * p.dhc}"


def live_guard(p: GridProblem, valid: str) -> str:
    """``valid``, and with ``seq`` the row running at this step."""
    return f"{valid} && live" if p.seq else valid


def stored_state(p: GridProblem) -> tuple[str, str | None]:
    """``store_lines``' state prefix and gate guard: the cell's values, or (``seq``) the
    carried ones (``s_h``, ``s_c``) with gates stored for running rows only."""
    return ("s", "live") if p.seq else ("v", None)


def carry_lines(p: GridProblem, spec, h_prev: str | None, c_prev: str) -> list[str]:
    """With ``seq``: ``s_h``/``s_c``, the cell's new state where the row runs, else its
    previous one (``h_prev``: the name of a value already read, or None to read it)."""
    if not p.seq:
        return []
    keep = h_prev or f"hp[n * {p.dhc} + j]"
    out = [f"    const float s_h = live ? v_h : {keep};"]
    if spec.has_cell_state:
        out.append(f"    const float s_c = live ? v_c : {c_prev};")
    return out


def _names(p: GridProblem) -> tuple:
    """The forward kernel's arguments (``seq``: the lengths' table and its offset too)."""
    return arg_names(BUFFERS, OFFSET_ARGS, SIZE_ARGS, p.seq)


def _params(p: GridProblem) -> list[str]:
    return param_decls(_names(p), BUFFERS, ("h", "c", "gates", "gh", "rh"))


def step_head_lines(rows: int, dhc: int) -> list[str]:
    """The forward kernels' step loop up to its body: the barrier epoch, the loop over steps,
    this step's time index ``t`` and the previous one's ``tp``, and ``hp``, the previous
    hidden state (h0 at the first step), read volatile since other groups write it."""
    return ["  int epoch = 0;",
            "  for (int s = 0; s < steps; ++s) {",
            "    const int t = reverse ? steps - 1 - s : s;",
            "    const int tp = reverse ? t + 1 : t - 1;",
            f"    volatile __global const float *hp = s == 0 ? h0 + h0_off : "
            f"h + h_off + tp * {rows * dhc};"]


def weight_slice_lines(kp: int, jb: int, g: int, dhc: int, items: int) -> list[str]:
    """Load the group's slice of the recurrent weights into local memory, ``us[k][jj][gate]``
    (:func:`gate_stride` floats per channel), zero past the last channel and gate and past
    k = dhc."""
    gs = gate_stride(g)
    return [f"  for (int i = lid; i < {kp * jb * gs}; i += {items}) {{",
            f"    const int k = i / {jb * gs}, r = i - k * {jb * gs};",
            f"    const int q = r / {gs}, g = r - q * {gs};",
            f"    us[i] = (k < {dhc} && j0 + q < {dhc}{f' && g < {g}' if gs != g else ''}) ? "
            f"u[u_off + k * {g * dhc} + g * {dhc} + j0 + q] : 0.0f;",
            "  }"]


def hs_at(row: str, col: str, kc: int, swizzle: bool, pad: int = 1) -> str:
    """Index of the staged value (row, column) in ``hs``: rows ``kc + pad`` floats apart, or
    ``kc`` apart with the column XOR-ed by the row's low bits (neighbouring rows' same column
    then lies in different banks without padding)."""
    if swizzle:
        return f"{row} * {kc} + ({col} ^ ({row} & {min(kc, 32) - 1}))"
    return f"{row} * {kc + pad} + {col}"


def chunk_loop_lines(pre: str, src: str, rows: int, width: int, kp: int, kc: int, items: int,
                     compute: list[str], idx: str = "kk", pad: int = 1,
                     swizzle: bool = False) -> list[str]:
    """The staged product every grid kernel runs: ``rows x width`` values of ``src`` (written
    by other groups, read volatile) go through local memory ``hs`` in chunks of ``kc``
    columns (rows ``kc + pad`` floats apart), the next chunk loaded into the registers ``pre``
    while ``compute`` (the statements of one chunk, reading ``hs`` and the chunk start
    ``kc``) runs on this one."""
    R = -(-rows * kc // items)

    def load(start: str) -> list[str]:
        val = f"{src}[r * {width} + {start} + {idx}]"
        return [f"      for (int q = 0; q < {R}; ++q) {{",
                f"        const int i = lid + q * {items}, r = i / {kc}, {idx} = i - r * {kc};",
                f"        {pre}[q] = (i < {rows * kc} && {start} + {idx} < {width}) ? "
                f"{val} : 0.0f;",
                "      }"]

    return ([f"    float {pre}[{R}];", "    {"] + load("0") + ["    }",
            f"    for (int kc = 0; kc < {kp}; kc += {kc}) {{",
            "      barrier(CLK_LOCAL_MEM_FENCE);",
            f"      for (int q = 0; q < {R}; ++q) {{",
            f"        const int i = lid + q * {items}, r = i / {kc}, {idx} = i - r * {kc};",
            f"        if (i < {rows * kc}) hs[{hs_at('r', idx, kc, swizzle, pad)}] = {pre}[q];",
            "      }",
            "      barrier(CLK_LOCAL_MEM_FENCE);",
            f"      if (kc + {kc} < {kp}) {{"] + load(f"(kc + {kc})") + ["      }"]
            + compute + ["    }"])


def kernel_lines(name: str, params: list[str], items: int, row: str, jb: int, dhc: int,
                 us_size: int, hs_size: int, body: list[str], ks: int = 1,
                 pos: list[str] | None = None, shuffles: bool | None = None) -> str:
    """A grid kernel's source: the barrier, the signature, the item's position (``row`` the
    name of its batch row, or first row; with a k split ``ks``, ``kp`` its lane of the
    output's ``ks`` lanes), the local arrays, then ``body``."""
    if pos is None:
        pos = ([f"  const int {row} = lid / {jb}, jj = lid - {row} * {jb};"] if ks == 1 else
               [f"  const int kp = lid % {ks}, lq = lid / {ks};",
                f"  const int {row} = lq / {jb}, jj = lq - {row} * {jb};"])
    if shuffles is None:
        shuffles = ks > 1
    return "\n".join(
        [grid_sync_source()] + ([shuffle_source()] if shuffles else []) + ["",
         f"__kernel void __attribute__((reqd_work_group_size({items}, 1, 1)))",
         f"{name}({', '.join(params)})", "{",
         "  const int lid = get_local_id(0);"] + pos + [
         f"  const int j0 = get_group_id(0) * {jb};",
         f"  const bool valid = j0 + jj < {dhc};",
         f"  const int j = min(j0 + jj, {dhc - 1});  /* reads stay in bounds */",
         # float4 storage: vector reads of the weight slice are aligned
         f"  __local float4 us4[{-(-us_size // 4)}];",
         "  __local float *us = (__local float *)us4;",
         f"  __local float4 hs4[{-(-hs_size // 4)}];",
         "  __local float *hs = (__local float *)hs4;"]
        + body + ["}", ""])


def shuffle_source() -> str:
    """``pd_shfl_xor(v, m)``: lane ``laneid ^ m``'s ``v`` (NVIDIA's ``shfl.sync.bfly``; every
    lane of the warp takes part)."""
    return "\n".join([
        "static inline float pd_shfl_xor(float v, int m)",
        "{",
        "  uint r;",
        "  asm volatile(\"shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;\" : \"=r\"(r) "
        ": \"r\"(as_uint(v)), \"r\"(m));",
        "  return as_float(r);",
        "}",
    ])


def grid_sync_source() -> str:
    """The grid barrier both grid-wide kernels call: ``pd_grid_sync(counter, groups, k)``
    returns once ``groups`` work-groups have arrived ``k`` times (the counter only grows; the
    plan zeroes it before the launch). Group leaders order their group's writes before their
    arrival and the others' writes before their return with ``membar.gl``."""
    return "\n".join([
        "static void pd_grid_sync(__global int *bar, int groups, int epoch)",
        "{",
        "  barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);",
        "  if (get_local_id(0) == 0) {",
        "    asm volatile(\"membar.gl;\" ::: \"memory\");",
        "    atomic_add(bar, 1);",
        "    volatile __global int *c = bar;",
        "    const int target = groups * epoch;",
        "    int spins = 0;",
        f"    while (c[0] < target) {{ if (++spins > {SPIN_LIMIT}) {{ c[1] = 1; break; }} }}",
        "    asm volatile(\"membar.gl;\" ::: \"memory\");",
        "  }",
        "  barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);",
        "}",
    ])
