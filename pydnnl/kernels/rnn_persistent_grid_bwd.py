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
from .rnn_persistent_grid import chunk_loop_lines, kernel_lines
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

    @property
    def groups(self) -> int:
        return -(-self.dhc // self.jb)

    @property
    def items(self) -> int:
        return self.batch * self.jb

    def k_padded(self, gates: int) -> int:
        return -(-gates * self.dhc // self.kc) * self.kc

    def local_bytes(self, gates: int) -> int:
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

    def store(target, expr, sid):
        emit_line(f"    if (valid) {cm(target)} = {cm(expr)};")

    # the group's rows of U, us[jj][c]: a work-item reads four columns of its row at once
    KR = KP + PAD
    emit_line(f"  for (int i = lid; i < {KR * JB}; i += {p.items}) {{")
    emit_line(f"    const int q = i / {KR}, c = i - q * {KR};")
    emit_line(f"    us[i] = (c < {GD} && j0 + q < {DHC}) ? u[u_off + (j0 + q) * {GD} + c] : 0.0f;")
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
    for name in STAGE_OFFSETS:
        emit_line(f"    const int {name} = {offs[name]};")
    stage_ops(bp, emit, store)
    # every group's gate gradients of this step are written before any group reads them
    emit_line(f"    pd_grid_sync(bar + bar_off, {p.groups}, ++epoch);")
    emit_line("    volatile __global const float *dg = dgh + dgh_off;")
    emit_line("    float4 acc4 = (float4)(0.0f);")
    body.extend(chunk_loop_lines("pre", "dg", N, GD, KP, KC, p.items, [
        f"      const __local float4 *w4 = (const __local float4 *)(us + jj * {KR} + kc);",
        f"      const __local float4 *x4 = (const __local float4 *)(hs + n * {KC + PAD});",
        "      #pragma unroll 4",
        f"      for (int c4 = 0; c4 < {KC // 4}; ++c4)",
        "        acc4 = fma(x4[c4], w4[c4], acc4);"], idx="cc", pad=PAD))
    emit_line("    const float acc = (acc4.x + acc4.y) + (acc4.z + acc4.w);")
    target = f"dhp[dhp_off + n * {DHC} + j]"
    emit_line(f"    if (valid) {target} = {target + ' + acc' if gemm_adds else 'acc'};")
    emit_line("  }")

    name = f"pydnnl_rnn_grid_bwd_{spec.name}"
    params = ["__global int *bar" if b == "bar" else f"__global float *{b}" for b in BUFFERS]
    params += [f"int {a}" for a in BASE_ARGS + SIZE_ARGS]
    source = kernel_lines(name, params, p.items, "n", JB, DHC, KR * JB, N * (KC + PAD), body)
    return KernelSource(name, source, (p.groups * p.items,), (p.items,),
                        BUFFERS + BASE_ARGS + SIZE_ARGS)
