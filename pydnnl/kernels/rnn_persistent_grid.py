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
from .rnn_persistent import cell_lines, store_lines
from .source import KernelSource

OFFSET_ARGS = ("gx_off", "bias_off", "u_off", "h0_off", "c0_off", "h_off", "c_off",
               "gates_off", "gh_off", "peep_off", "att_off", "rh_off", "bar_off")
SIZE_ARGS = ("steps", "reverse")
BUFFERS = ("gx", "bias", "u", "h0", "c0", "h", "c", "gates", "gh", "peep", "att", "rh", "bar")
# spins of a barrier wait before it gives up (each a volatile read of L2: ~1 us); the flag word
# follows the counter
SPIN_LIMIT = 1 << 24


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
    clip: tuple | None = None
    store_gates: bool = False
    store_gh: bool = False

    @property
    def groups(self) -> int:
        return -(-self.dhc // self.jb)

    @property
    def items(self) -> int:
        return -(-self.batch // self.rn) * self.jb

    @property
    def k_padded(self) -> int:
        return -(-self.dhc // self.kc) * self.kc

    def local_bytes(self, gates: int) -> int:
        return 4 * (self.k_padded * self.jb * gates + self.batch * (self.kc + 1))


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
    if RN > 1:
        return _build_row_tiled(p, spec, stages)
    if p.store_gh and len(stages) != 1:
        raise ValueError(f"rnn_persistent_grid: cell {spec.name}: recurrent GEMM results are "
                         "kept for one-stage (LBR) cells only")
    body: list[str] = weight_slice_lines(KP, JB, G, DHC, p.items)
    emit = body.append
    if spec.has_cell_state:
        emit(f"  float c_prev = c0[c0_off + n * {DHC} + j];")
    emit("  int epoch = 0;")
    emit("  for (int s = 0; s < steps; ++s) {")
    emit("    const int t = reverse ? steps - 1 - s : s;")
    emit("    const int tp = reverse ? t + 1 : t - 1;")
    emit(f"    volatile __global const float *hp = s == 0 ? h0 + h0_off : "
         f"h + h_off + tp * {N * DHC};")
    emit(f"    const int gxo = gx_off + t * {N * G * DHC} + n * {G * DHC} + j;")
    if any("h_prev" in st.inputs(()) for st in stages):
        emit(f"    const float h_prev = hp[n * {DHC} + j];")
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
        compute = [f"      const __local float *w = us + (kc * {JB} + jj) * {G};",
                   "      #pragma unroll 8",
                   f"      for (int kk = 0; kk < {KC}; ++kk) {{",
                   f"        const float x = hs[n * {KC + 1} + kk];"]
        g0 = gates.index(gg[0])
        contiguous = [gates.index(g) for g in gg] == list(range(g0, g0 + len(gg)))
        if contiguous and len(gg) in (2, 3, 4):
            # the stage's gates of this channel side by side: one vector read
            compute.append(f"        const float{len(gg)} wv = "
                           f"vload{len(gg)}(0, w + kk * {JB * G} + {g0});")
            compute += [f"        acc_{g} = fma(x, wv.{c}, acc_{g});" for c, g in zip("xyzw", gg)]
        else:
            compute += [f"        acc_{g} = fma(x, w[kk * {JB * G} + {gates.index(g)}], acc_{g});"
                        for g in gg]
        compute.append("      }")
        body.extend(chunk_loop_lines(f"pre{si}", src, N, DHC, KP, KC, p.items, compute))
        if p.store_gh:
            for g in gg:
                emit(f"    if (valid) gh[gh_off + t * {N * G * DHC} + n * {G * DHC} + "
                     f"{gates.index(g) * DHC} + j] = acc_{g};")
        # the formulas run on every item (an item past the last channel computes channel
        # DHC - 1 again, so that values stay in scope across stages); only valid ones store
        body.extend(cell_lines(spec, si, st, known, p.activation, p.alpha, p.clip, N, DHC,
                               gx_loaded=True))
        if "rh" in st.assigned:
            emit(f"    if (valid) rh[rh_off + n * {DHC} + j] = v_rh;")
        else:
            emit("    if (valid) {")
            body.extend("  " + ln for ln in store_lines(spec, stages, p.store_gates, N, DHC))
            emit("    }")
            if spec.has_cell_state:
                emit("    c_prev = v_c;")
        # every group's rh (or h) is written before any group reads it
        emit(f"    pd_grid_sync(bar + bar_off, {p.groups}, ++epoch);")
    emit("  }")

    return _forward_source(p, spec, "n", body)


def _forward_source(p: GridProblem, spec, row: str, body: list[str]) -> KernelSource:
    """The forward kernel around ``body`` (``row``: the name of the item's batch row, or of
    its first row)."""
    name = f"pydnnl_rnn_grid_{spec.name}"
    source = kernel_lines(name, _params(), p.items, row, p.jb, p.dhc,
                          p.k_padded * p.jb * spec.n_gates, p.batch * (p.kc + 1), body)
    return KernelSource(name, source, (p.groups * p.items,), (p.items,),
                        BUFFERS + OFFSET_ARGS + SIZE_ARGS)


def _build_row_tiled(p: GridProblem, spec, stages) -> KernelSource:
    """The one-stage form with ``p.rn`` batch rows per work-item: each weight vector read from
    local memory serves rn rows (the one-row form reads one weight vector per multiply-add
    group and is bound by local-memory reads)."""
    gates = spec.gate_names
    G, DHC, N, JB, KC, KP, RN = spec.n_gates, p.dhc, p.batch, p.jb, p.kc, p.k_padded, p.rn
    if len(stages) != 1:
        raise ValueError(f"rnn_persistent_grid: cell {spec.name}: rows per item need one stage")
    st = stages[0]
    gg = st.recurrent_gemm.gates
    gx_names = [name[3:] for name in st.inputs(()) if name.startswith("gx_")]
    body: list[str] = weight_slice_lines(KP, JB, G, DHC, p.items)
    emit = body.append
    if spec.has_cell_state:
        emit(f"  float cs[{RN}];")
        emit(f"  for (int r = 0; r < {RN}; ++r) "
             f"cs[r] = c0[c0_off + min(nb * {RN} + r, {N - 1}) * {DHC} + j];")
    emit("  int epoch = 0;")
    emit("  for (int s = 0; s < steps; ++s) {")
    emit("    const int t = reverse ? steps - 1 - s : s;")
    emit("    const int tp = reverse ? t + 1 : t - 1;")
    emit(f"    volatile __global const float *hp = s == 0 ? h0 + h0_off : "
         f"h + h_off + tp * {N * DHC};")
    for g in gx_names:
        emit(f"    float pgx_{g}_r[{RN}];")
    emit("    #pragma unroll")
    emit(f"    for (int r = 0; r < {RN}; ++r) {{")
    emit(f"      const int n = min(nb * {RN} + r, {N - 1});")
    for g in gx_names:
        emit(f"      pgx_{g}_r[r] = gx[gx_off + t * {N * G * DHC} + n * {G * DHC} + "
             f"{gates.index(g) * DHC} + j];")
    emit("    }")
    for g in gg:
        emit(f"    float acc_{g}_r[{RN}];")
        emit(f"    for (int r = 0; r < {RN}; ++r) acc_{g}_r[r] = 0.0f;")
    compute = [f"      const __local float *w = us + (kc * {JB} + jj) * {G};",
               "      #pragma unroll 4",
               f"      for (int kk = 0; kk < {KC}; ++kk) {{"]
    g0 = gates.index(gg[0])
    if [gates.index(g) for g in gg] == list(range(g0, g0 + len(gg))) and len(gg) in (2, 3, 4):
        compute.append(f"        const float{len(gg)} wv = "
                       f"vload{len(gg)}(0, w + kk * {JB * G} + {g0});")
        wexpr = {g: f"wv.{c}" for c, g in zip("xyzw", gg)}
    else:
        wexpr = {g: f"w[kk * {JB * G} + {gates.index(g)}]" for g in gg}
    compute += ["        #pragma unroll",
                f"        for (int r = 0; r < {RN}; ++r) {{",
                f"          const float x = hs[min(nb * {RN} + r, {N - 1}) * {KC + 1} + kk];"]
    compute += [f"          acc_{g}_r[r] = fma(x, {wexpr[g]}, acc_{g}_r[r]);" for g in gg]
    compute += ["        }", "      }"]
    body.extend(chunk_loop_lines("pre", "hp", N, DHC, KP, KC, p.items, compute))
    emit("    #pragma unroll")
    emit(f"    for (int r = 0; r < {RN}; ++r) {{")
    emit(f"    const int n = min(nb * {RN} + r, {N - 1});")
    emit(f"    const bool rvalid = valid && nb * {RN} + r < {N};")
    for g in gg:
        emit(f"    const float acc_{g} = acc_{g}_r[r];")
    for g in gx_names:
        emit(f"    const float pgx_{g} = pgx_{g}_r[r];")
    if "h_prev" in st.inputs(()):
        emit(f"    const float h_prev = hp[n * {DHC} + j];")
    if spec.has_cell_state:
        emit("    const float c_prev = cs[r];")
    if p.store_gh:
        for g in gg:
            emit(f"    if (rvalid) gh[gh_off + t * {N * G * DHC} + n * {G * DHC} + "
                 f"{gates.index(g) * DHC} + j] = acc_{g};")
    body.extend(cell_lines(spec, 0, st, set(), p.activation, p.alpha, p.clip, N, DHC,
                           gx_loaded=True))
    emit("    if (rvalid) {")
    body.extend("  " + ln for ln in store_lines(spec, stages, p.store_gates, N, DHC))
    emit("    }")
    if spec.has_cell_state:
        emit("    cs[r] = v_c;")
    emit("    }")
    emit(f"    pd_grid_sync(bar + bar_off, {p.groups}, ++epoch);")
    emit("  }")
    return _forward_source(p, spec, "nb", body)


def _params() -> list[str]:
    out_bufs = ("h", "c", "gates", "gh", "rh")
    params = []
    for b in BUFFERS:
        if b == "bar":
            params.append("__global int *bar")
        else:
            params.append(f"__global {'' if b in out_bufs else 'const '}float *{b}")
    return params + [f"int {a}" for a in OFFSET_ARGS + SIZE_ARGS]


def weight_slice_lines(kp: int, jb: int, g: int, dhc: int, items: int) -> list[str]:
    """Load the group's slice of the recurrent weights into local memory, ``us[k][jj][gate]``,
    zero past the last channel and past k = dhc."""
    return [f"  for (int i = lid; i < {kp * jb * g}; i += {items}) {{",
            f"    const int k = i / {jb * g}, r = i - k * {jb * g};",
            f"    const int q = r / {g}, g = r - q * {g};",
            f"    us[i] = (k < {dhc} && j0 + q < {dhc}) ? "
            f"u[u_off + k * {g * dhc} + g * {dhc} + j0 + q] : 0.0f;",
            "  }"]


def chunk_loop_lines(pre: str, src: str, rows: int, width: int, kp: int, kc: int, items: int,
                     compute: list[str], idx: str = "kk") -> list[str]:
    """The staged product every grid kernel runs: ``rows x width`` values of ``src`` (written
    by other groups, read volatile) go through local memory ``hs`` in chunks of ``kc``
    columns, the next chunk loaded into the registers ``pre`` while ``compute`` (the
    statements of one chunk, reading ``hs`` and the chunk start ``kc``) runs on this one."""
    R = -(-rows * kc // items)

    def load(start: str) -> list[str]:
        return [f"      for (int q = 0; q < {R}; ++q) {{",
                f"        const int i = lid + q * {items}, r = i / {kc}, {idx} = i - r * {kc};",
                f"        {pre}[q] = (i < {rows * kc} && {start} + {idx} < {width}) ? "
                f"{src}[r * {width} + {start} + {idx}] : 0.0f;",
                "      }"]

    return ([f"    float {pre}[{R}];", "    {"] + load("0") + ["    }",
            f"    for (int kc = 0; kc < {kp}; kc += {kc}) {{",
            "      barrier(CLK_LOCAL_MEM_FENCE);",
            f"      for (int q = 0; q < {R}; ++q) {{",
            f"        const int i = lid + q * {items}, r = i / {kc}, {idx} = i - r * {kc};",
            f"        if (i < {rows * kc}) hs[r * {kc + 1} + {idx}] = {pre}[q];",
            "      }",
            "      barrier(CLK_LOCAL_MEM_FENCE);",
            f"      if (kc + {kc} < {kp}) {{"] + load(f"(kc + {kc})") + ["      }"]
            + compute + ["    }"])


def kernel_lines(name: str, params: list[str], items: int, row: str, jb: int, dhc: int,
                 us_size: int, hs_size: int, body: list[str]) -> str:
    """A grid kernel's source: the barrier, the signature, the item's position (``row`` the
    name of its batch row, or first row), the local arrays, then ``body``."""
    return "\n".join(
        [grid_sync_source(), "",
         f"__kernel void __attribute__((reqd_work_group_size({items}, 1, 1)))",
         f"{name}({', '.join(params)})", "{",
         "  const int lid = get_local_id(0);",
         f"  const int {row} = lid / {jb}, jj = lid - {row} * {jb};",
         f"  const int j0 = get_group_id(0) * {jb};",
         f"  const bool valid = j0 + jj < {dhc};",
         f"  const int j = min(j0 + jj, {dhc - 1});  /* reads stay in bounds */",
         f"  __local float us[{us_size}];",
         f"  __local float hs[{hs_size}];"]
        + body + ["}", ""])


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
