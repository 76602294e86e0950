"""Generator of the grid-wide one-launch RNN backward recurrence (NVIDIA GPUs): all steps of
one layer and direction's back-propagation through time in one launch.

The same layout as the forward's grid kernel (:mod:`.rnn_persistent_grid`): work-group w owns
channels ``[w * jb, (w + 1) * jb)``, work-item (n, jj) one batch row and channel. Per step it
runs the cell's reverse-mode formulas, the very statement sequence of the per-step backward
kernel (:func:`.rnn_elementwise_bwd.stage_ops`, printed as C with the same buffers and
offsets), meets the other groups at the grid barrier once every gate gradient of the step is
written, and then computes its channels of ``dh_prev = dG @ U^T``, with its rows of the
recurrent weights held in local memory for the whole sequence and dG staged through local
memory in chunks. The h gradient each item carries to the next step is its own element, so the
per-step buffers the per-step plan alternates between keep their roles. One-stage cells only
(LSTM, LBR-GRU, vanilla RNN and their variants).

Where a group's rows of the weights outgrow local memory (``wglobal``, split form only) the
product reads them from global memory every step. With sequence lengths (``seq``, rows sorted
longest first, the forward's table of running rows per step) a step computes its running rows
only; a row's gradient starts from diff_dst_iter (or zero) at its last step left to right, and
right to left its h_prev and c_prev gradients go to the initial-state gradients at its first.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..cells import get_cell
from .rnn_elementwise_bwd import (
    OFFSET_ARGS as STAGE_OFFSETS,
)
from .rnn_elementwise_bwd import (
    BackwardElementwiseProblem,
    analyze,
    stage_ops,
)
from .rnn_persistent import arg_names
from .rnn_persistent_grid import WARP, chunk_loop_lines, kernel_lines
from .source import KernelSource

BUFFERS = ("gates", "c", "c_prev", "h_prev", "att", "peep", "gh", "bias", "dh_a", "dh_b", "dc",
           "dc_prev", "dhp", "datt", "dpeep", "dgx", "dgh", "u", "bar")
# element offsets of step 0 (per-step regions) or fixed, then the sizes
BASE_ARGS = ("gates0", "c0r", "cinit", "h0r", "hinit", "att0", "peep_b", "bias_b", "gh0",
             "dhl0", "dgx0", "dgh0", "datt0", "dpeep0", "dh_first", "dc_first", "dh_buf0",
             "dh_buf1", "dc_buf0", "dc_buf1", "dh_last", "dc_last", "u_off", "bar_off")
SIZE_ARGS = ("steps", "reverse")
# floats past each local row (a channel's weights, a row of the dG chunk): rows stay 16-byte
# aligned for vector reads while neighbouring rows start in different banks
PAD = 4


@dataclass(frozen=True)
class GridBackwardProblem:
    """What the grid-wide backward depends on (the kernel-cache key)."""

    cell: str
    peephole: bool
    activation: str
    alpha: float
    dhc: int  # channels (SIC == DHC == DIC)
    batch: int
    jb: int
    kc: int = 32
    clip: tuple | None = None
    dhp_assign: bool = False  # the cell stores h_prev's direct gradient (the GEMM adds to it)
    # the split form (ks > 1): item (row block, k lane) sums rn rows x every channel of the
    # group over the k columns kp, kp + ks, ... (four at a time), reading dG straight from
    # global memory (no staging, no local barriers); the ks lanes of a warp meet by shuffles
    rn: int = 1
    ks: int = 1
    wglobal: bool = False  # the product reads U from global memory (split form only)
    seq: bool = False  # sequence lengths: the int table ``seq`` of running rows per step

    @property
    def groups(self) -> int:
        return -(-self.dhc // self.jb)

    @property
    def items(self) -> int:
        if self.ks > 1:  # shuffles take whole warps
            return -(-(-(-self.batch // self.rn) * self.ks) // WARP) * WARP
        return self.batch * self.jb

    def k_padded(self, gates: int) -> int:
        if self.ks > 1:  # four columns a read
            return -(-gates * self.dhc // 4) * 4
        return -(-gates * self.dhc // self.kc) * self.kc

    def local_bytes(self, gates: int) -> int:
        if self.wglobal:
            return 16
        if self.ks > 1:
            return 4 * (self.k_padded(gates) + PAD) * self.jb
        return 4 * ((self.k_padded(gates) + PAD) * self.jb + self.batch * (self.kc + PAD))

    def stage(self) -> BackwardElementwiseProblem:
        """The per-step kernel's problem whose statements this kernel prints."""
        return BackwardElementwiseProblem(self.cell, 0, self.peephole, self.activation,
                                          self.alpha, self.dhc, ld_h_prev=self.dhc,
                                          ld_dh=self.dhc, two_dh=True, clip=self.clip,
                                          dhp_assign=self.dhp_assign)


def supported(cell: str, peephole: bool) -> bool:
    """One-stage cells: the step's only GEMM reads h_prev."""
    return len(get_cell(cell).forward_stages(peephole)) == 1


def build_grid_bwd(p: GridBackwardProblem) -> KernelSource:
    """OpenCL C (inline-PTX fences) of the whole backward recurrence of one layer and
    direction; launched as ``p.groups`` work-groups of ``p.items`` items."""
    from pymbolic import var

    from .clhelpers import c_mapper

    spec = get_cell(p.cell)
    if not supported(p.cell, p.peephole):
        raise ValueError(f"rnn_persistent_grid_bwd: cell {spec.name} has several stages")
    bp = p.stage()
    G, DHC, N, JB, KC = spec.n_gates, p.dhc, p.batch, p.jb, p.kc
    GD, KP = G * DHC, p.k_padded(spec.n_gates)
    PG = N * GD
    gemm_adds = "dhp" in dict(analyze(bp).buffers)  # the cell wrote h_prev's direct part
    cm = c_mapper()
    body: list[str] = []
    emit_line = body.append

    def emit(name, expr):
        emit_line(f"    const float t_{name} = {cm(expr)};")
        return var(f"t_{name}")

    guard = "valid && live" if p.seq else "valid"

    def store(target, expr, sid):
        emit_line(f"    if ({guard}) {cm(target)} = {cm(expr)};")

    split = p.ks > 1
    if split and (p.ks & (p.ks - 1) or p.ks > WARP or GD % 4):
        raise ValueError(f"rnn_persistent_grid_bwd: k split {p.ks}: expected a power of two "
                         f"<= {WARP} and gates x channels ({GD}) a multiple of 4")
    if p.wglobal and not split:
        raise ValueError("rnn_persistent_grid_bwd: weights from global memory need the split "
                         "form (ks > 1)")
    items = p.items
    KR = KP + PAD
    if not p.wglobal:
        # the group's rows of U, us[jj][c]: a work-item reads four columns of its row at once
        emit_line(f"  for (int i = lid; i < {KR * JB}; i += {items}) {{")
        emit_line(f"    const int q = i / {KR}, c = i - q * {KR};")
        emit_line(f"    us[i] = (c < {GD} && j0 + q < {DHC}) ? "
                  f"u[u_off + (j0 + q) * {GD} + c] : 0.0f;")
        emit_line("  }")
    emit_line("  int epoch = 0;")
    emit_line("  for (int k = 0; k < steps; ++k) {")
    emit_line("    const int t = reverse ? k : steps - 1 - k;")
    emit_line("    const int tp = reverse ? t + 1 : t - 1;")
    emit_line("    const bool more = k < steps - 1;")
    offs = {
        "gates_off": f"gates0 + t * {PG}",
        "c_off": f"c0r + t * {N * DHC}",
        "c_prev_off": f"more ? c0r + tp * {N * DHC} : cinit",
        "h_prev_off": f"more ? h0r + tp * {N * DHC} : hinit",
        "att_off": f"att0 + t * {N}",
        "peep_off": "peep_b",
        "bias_off": "bias_b",
        "gh_off": f"gh0 + t * {PG}",
        "dh_a_off": f"dhl0 + t * {N * DHC}",
        "dh_b_off": "k == 0 ? dh_first : ((k & 1) ? dh_buf1 : dh_buf0)",
        "dc_off": "k == 0 ? dc_first : ((k & 1) ? dc_buf1 : dc_buf0)",
        "dc_prev_off": "more ? ((k & 1) ? dc_buf0 : dc_buf1) : dc_last",
        "drh_off": "0",
        "dgx_off": f"dgx0 + t * {PG}",
        "dgh_off": f"dgh0 + t * {PG}",
        "dhp_off": "more ? ((k & 1) ? dh_buf0 : dh_buf1) : dh_last",
        "datt_off": f"datt0 + t * {N * DHC}",
        "dpeep_off": f"dpeep0 + t * {N * 3 * DHC}",
        "rh_off": "0",
        "carry_off": "0",
    }
    assert set(offs) == set(STAGE_OFFSETS)
    # with lengths, a row's gradient enters (left to right) or leaves (right to left) at its
    # sequence's last step: those four offsets depend on the row, the rest on the step only
    by_row = {"dh_b_off": ("dh_b_run", "!reverse", "dh_first"),
              "dc_off": ("dc_run", "!reverse", "dc_first"),
              "dhp_off": ("dhp_run", "reverse", "dh_last"),
              "dc_prev_off": ("dc_prev_run", "reverse", "dc_last")} if p.seq else {}
    for name in STAGE_OFFSETS:
        emit_line(f"    const int {by_row[name][0] if name in by_row else name} = {offs[name]};")
    if p.seq:  # running rows at t, and at the neighbouring step in forward time
        emit_line("    const int bt = seq[seq_off + t];")
        emit_line("    const int bn = t + 1 < steps ? seq[seq_off + t + 1] : 0;")
    if split:  # the cell's batch x jb outputs spread over the group's items
        emit_line(f"    for (int oi = lid; oi < {N * JB}; oi += {items}) {{")
        emit_line(f"    const int n = oi / {JB}, jj = oi - n * {JB};")
        emit_line(f"    const bool valid = j0 + jj < {DHC};")
        emit_line(f"    const int j = min(j0 + jj, {DHC - 1});")
    if p.seq:
        emit_line("    const bool live = n < bt, ends = live && n >= bn;")
        for name, (run, side, edge) in by_row.items():
            emit_line(f"    const int {name} = ({side} && ends) ? {edge} : {run};")
    stage_ops(bp, emit, store)
    if split:
        emit_line("    }")
    # every group's gate gradients of this step are written before any group reads them
    emit_line(f"    pd_grid_sync(bar + bar_off, {p.groups}, ++epoch);")
    target = f"dhp[dhp_off + n * {DHC} + j]"
    live = ""
    if p.seq:  # the product's running rows, each into its own dh_prev destination (at the
        # last step the others' would land on the initial-state gradients of sequences
        # that ended before)
        target = (f"dhp[((reverse && n >= bn) ? dh_last : dhp_run) + n * {DHC} + j]")
        live = " && n < bt"
    if split:
        body.extend(_split_product_lines(p, GD, KR, target, gemm_adds, live))
    else:
        emit_line("    volatile __global const float *dg = dgh + dgh_off;")
        emit_line("    float4 acc4 = (float4)(0.0f);")
        body.extend(chunk_loop_lines("pre", "dg", N, GD, KP, KC, items, [
            f"      const __local float4 *w4 = (const __local float4 *)(us + jj * {KR} + kc);",
            f"      const __local float4 *x4 = (const __local float4 *)(hs + n * {KC + PAD});",
            "      #pragma unroll 4",
            f"      for (int c4 = 0; c4 < {KC // 4}; ++c4)",
            "        acc4 = fma(x4[c4], w4[c4], acc4);"], idx="cc", pad=PAD))
        emit_line("    const float acc = (acc4.x + acc4.y) + (acc4.z + acc4.w);")
        emit_line(f"    if (valid{live}) {target} = {target + ' + acc' if gemm_adds else 'acc'};")
    emit_line("  }")

    name = f"pydnnl_rnn_grid_bwd_{spec.name}"
    names = arg_names(BUFFERS, BASE_ARGS, SIZE_ARGS, p.seq)
    params = ["__global int *bar" if b == "bar" else "__global const int *seq" if b == "seq"
              else f"__global float *{b}" if b in BUFFERS else f"int {b}" for b in names]
    if split:
        pos = [f"  const int kp = lid % {p.ks}, nb = lid / {p.ks}, jj = 0;"]
        source = kernel_lines(name, params, items, "", JB, DHC, 4 if p.wglobal else KR * JB, 4,
                              body, pos=pos, shuffles=True)
    else:
        source = kernel_lines(name, params, items, "n", JB, DHC, KR * JB, N * (KC + PAD), body)
    return KernelSource(name, source, (p.groups * items,), (items,), names)


def _split_product_lines(p: GridBackwardProblem, GD: int, KR: int, target: str,
                         gemm_adds: bool, live: str = "") -> list[str]:
    """The split form's ``dh_prev = dG U^T`` for one step: item (nb, kp) multiplies rows
    ``nb * rn ..`` of dG (float4 reads of global memory, written by every group before the
    grid barrier, read around the L1 cache) by every channel's row of U in local memory over
    the columns ``4 * (kp + i * ks) ..``; the ``ks`` lanes' sums meet by butterfly shuffles,
    after which lane v stores output v (row ``v / jb``, channel ``v % jb``)."""
    N, DHC, JB, RN, KS = p.batch, p.dhc, p.jb, p.rn, p.ks
    GD4 = GD // 4
    if p.wglobal:  # row j0 + q of U (clamped: the last group's rows past DHC are not stored)
        read_w = (f"w[q] = u4[min(j0 + q, {DHC - 1}) * {GD4} + c4];")
    else:
        read_w = f"w[q] = *(const __local float4 *)(us + q * {KR} + 4 * c4);"
    out = [f"    float acc[{RN * JB}];",
           "    #pragma unroll",
           f"    for (int v = 0; v < {RN * JB}; ++v) acc[v] = 0.0f;",
           "    volatile __global const float4 *dg4 = (volatile __global const float4 *)"
           "(dgh + dgh_off);"] + ([
           "    const __global float4 *u4 = (const __global float4 *)(u + u_off);"]
           if p.wglobal else []) + [
           "    #pragma unroll 2",
           f"    for (int c4 = kp; c4 < {GD4}; c4 += {KS}) {{",
           f"      float4 w[{JB}];",
           "      #pragma unroll",
           f"      for (int q = 0; q < {JB}; ++q) {read_w}",
           "      #pragma unroll",
           f"      for (int r = 0; r < {RN}; ++r) {{",
           f"        const float4 x = dg4[min(nb * {RN} + r, {N - 1}) * {GD4} + c4];",
           "        #pragma unroll",
           f"        for (int q = 0; q < {JB}; ++q)",
           f"          acc[r * {JB} + q] = fma(x.w, w[q].w, fma(x.z, w[q].z, "
           f"fma(x.y, w[q].y, fma(x.x, w[q].x, acc[r * {JB} + q]))));",
           "      }",
           "    }",
           "    #pragma unroll",
           f"    for (int v = 0; v < {RN * JB}; ++v)",
           f"      for (int m = {KS // 2}; m > 0; m >>= 1) acc[v] += pd_shfl_xor(acc[v], m);"]
    # lane v of the ks lanes stores output v: a select chain keeps acc in registers
    out += [f"    for (int v0 = 0; v0 < {RN * JB}; v0 += {KS}) {{",
            "      const int v = v0 + kp;",
            "      float a = acc[0];",
            "      #pragma unroll",
            f"      for (int u2 = 1; u2 < {RN * JB}; ++u2) a = u2 == v ? acc[u2] : a;",
            f"      const int n = nb * {RN} + v / {JB}, jv = v % {JB};",
            "      const int j = j0 + jv;",
            f"      if (v < {RN * JB} && n < {N} && j < {DHC}{live}) "
            f"{target} = {target + ' + a' if gemm_adds else 'a'};",
            "    }",
            # the next step's cell reads these values in other items of the group
            "    barrier(CLK_GLOBAL_MEM_FENCE);"]
    return out
