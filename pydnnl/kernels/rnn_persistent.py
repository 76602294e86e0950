"""Generator of the one-launch RNN recurrence: every time step of one layer and direction
inside one work-group.

The per-step path launches a recurrent GEMM and a cell kernel (or one fused kernel) per time
step; each enqueue costs 17 us on an NVIDIA GPU and 85-150 us on a CPU runtime, far more than
a small problem's step computes. Here one work-group of ``batch * dhc`` work-items walks the
whole sequence: work-item (n, j) owns output channel j of batch row n, keeps its cell state
in a register, and reads the previous hidden state from local memory, where every item left
its new h at the end of the step. Steps are separated by local barriers only, so the kernel
needs no grid-wide synchronization and runs on any OpenCL device.

The recurrent weights are read as they lie (``[SIC][G * DHC]``, consecutive items reading
consecutive columns) or, when a work-item's columns are few enough, loaded into registers once
(``u_private``). The formulas are the cell spec's (:mod:`pydnnl.cells`), printed as C. The
layer GEMM (``gx = x @ W`` over all steps) runs before, as on the per-step path; the kernel
writes the same workspace regions the per-step kernels write (h, c, activated gates, the LBR
recurrent GEMM results), so backward does not know which path ran forward.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..cells import get_cell
from .source import KernelSource

# run-time arguments after the buffers: element offsets of step 0, then the step count and
# the direction (1: the last step first)
OFFSET_ARGS = ("gx_off", "bias_off", "u_off", "h0_off", "c0_off", "h_off", "c_off",
               "gates_off", "gh_off", "peep_off", "att_off")
SIZE_ARGS = ("steps", "reverse", "batch")
# the work-group's local arrays hold this many rows x channels (the device rule keeps the
# item count within it)
MAX_ITEMS = 1024


@dataclass(frozen=True)
class PersistentProblem:
    """What the one-launch recurrence depends on (the kernel-cache key)."""

    cell: str
    peephole: bool
    activation: str  # vanilla RNN: "relu", "tanh", "logistic"
    alpha: float
    dhc: int  # channels (the recurrent GEMM's k as well: SIC == DHC == DIC here)
    clip: tuple | None = None  # LSTM cell-state clip (min, max, nan_to_min)
    store_gates: bool = False  # training: the activated gates of every step
    store_gh: bool = False  # training an LBR cell: the recurrent GEMM results of every step
    u_private: bool = False  # weights in registers, loaded once
    # sequences of several lengths, sorted longest first: step t runs its first ``bt`` rows,
    # found at row ``gxt`` of the packed layer GEMM values (both from the int table ``seq``:
    # [T] counts, then [T] packed row offsets); the other rows keep h and c (so the state
    # after a sequence's last step stays in place, and a right-to-left one starts from h0)
    # and store no gates
    seq: bool = False


# the buffer arguments, in order (the ones a cell does not read are still passed: one signature)
BUFFERS = ("gx", "bias", "u", "h0", "c0", "h", "c", "gates", "gh", "peep", "att")


def arg_names(buffers: tuple, offsets: tuple, sizes: tuple, seq: bool) -> tuple:
    """A one-launch kernel's arguments: buffers, offsets, sizes; with ``seq`` (sequence
    lengths) its int table after the buffers and the table's offset after the offsets."""
    if not seq:
        return buffers + offsets + sizes
    return buffers + ("seq",) + offsets + ("seq_off",) + sizes


#: buffer arguments of int type (the rest are float)
INT_BUFFERS = {"seq": "__global const int *seq", "bar": "__global int *bar"}


def param_decls(names: tuple, buffers: tuple, outputs: tuple) -> list[str]:
    """C parameters of ``names``: float buffers (``outputs`` writable), the int buffers of
    :data:`INT_BUFFERS`, ints."""
    out = []
    for b in names:
        if b in INT_BUFFERS:
            out.append(INT_BUFFERS[b])
        elif b in buffers:
            out.append(f"__global {'' if b in outputs else 'const '}float *{b}")
        else:
            out.append(f"int {b}")
    return out


def seq_step_lines() -> list[str]:
    """Step t's running rows ``bt`` and its first packed row ``gxt``, from the table."""
    return ["    const int bt = seq[seq_off + t], gxt = seq[seq_off + steps + t];"]


def build_persistent(p: PersistentProblem) -> KernelSource:
    """OpenCL C of the whole recurrence; launched as one work-group of ``batch * dhc``
    items (``batch`` is a run-time argument, at most ``MAX_ITEMS / dhc``)."""
    spec = get_cell(p.cell)
    stages = spec.forward_stages(p.peephole, p.clip is not None)
    gates = spec.gate_names
    G, DHC, N = spec.n_gates, p.dhc, "batch"
    if p.store_gh and len(stages) != 1:
        raise ValueError(f"rnn_persistent: cell {spec.name}: recurrent GEMM results are kept "
                         "for one-stage (LBR) cells only")
    f = "float"
    body: list[str] = []
    emit = body.append

    def wcol(gi: int) -> str:
        return f"{gi * DHC} + j"

    # -- weights in registers -----------------------------------------------------------------
    if p.u_private:
        for st in stages:
            for g in st.recurrent_gemm.gates:
                gi = gates.index(g)
                emit(f"  {f} w_{g}[{DHC}];")
                emit(f"  for (int k = 0; k < {DHC}; ++k) w_{g}[k] = "
                     f"u[u_off + k * {G * DHC} + {wcol(gi)}];")
    emit("  hl[lid] = h0[h0_off + lid];")
    if spec.has_cell_state:
        emit("  float c_prev = c0[c0_off + lid];")
    emit("  barrier(CLK_LOCAL_MEM_FENCE);")
    emit("  for (int s = 0; s < steps; ++s) {")
    emit("    const int t = reverse ? steps - 1 - s : s;")
    if p.seq:
        body += seq_step_lines()
        emit("    const bool live = n < bt;")
    step = "gxt" if p.seq else "t * batch"
    emit(f"    const int gxo = gx_off + {step} * {G * DHC} + n * {G * DHC} + j;")
    emit("    const float h_prev = hl[lid];")
    known: set[str] = set()  # cell values computed so far this step
    for si, st in enumerate(stages):
        src = "hl" if st.recurrent_gemm.source == "h_prev" else "rl"
        gg = st.recurrent_gemm.gates
        for g in gg:
            emit(f"    float acc_{g} = 0.0f;")
        emit(f"    for (int k = 0; k < {DHC}; ++k) {{")
        emit(f"      const float x = {src}[n * {DHC} + k];")
        for g in gg:
            w = (f"w_{g}[k]" if p.u_private
                 else f"u[u_off + k * {G * DHC} + {wcol(gates.index(g))}]")
            emit(f"      acc_{g} = fma(x, {w}, acc_{g});")
        emit("    }")
        if p.store_gh:
            for g in gg:
                emit(f"    {'if (live) ' if p.seq else ''}gh[gh_off + t * batch * {G * DHC} + "
                     f"n * {G * DHC} + {gates.index(g) * DHC} + j] = acc_{g};")
        body += cell_lines(spec, si, st, known, p.activation, p.alpha, p.clip, N, DHC)
        if "rh" in st.assigned:
            # the next stage's GEMM reads every item's rh; hl is not written before it
            emit("    rl[lid] = v_rh;")
            emit("    barrier(CLK_LOCAL_MEM_FENCE);")
    if len(stages) == 1:
        emit("    barrier(CLK_LOCAL_MEM_FENCE);  /* every item has read h_prev */")
    state = "v"
    if p.seq:  # a row not running keeps its state
        state = "s"
        emit("    const float s_h = live ? v_h : h_prev;")
        if spec.has_cell_state:
            emit("    const float s_c = live ? v_c : c_prev;")
    emit(f"    hl[lid] = {state}_h;")
    body += store_lines(spec, stages, p.store_gates, N, DHC, state,
                        "live" if p.seq else None)
    if spec.has_cell_state:
        emit(f"    c_prev = {state}_c;")
    emit("    barrier(CLK_LOCAL_MEM_FENCE);  /* h of this step is complete */")
    emit("  }")

    name = f"pydnnl_rnn_persist_{spec.name}"
    names = arg_names(BUFFERS, OFFSET_ARGS, SIZE_ARGS, p.seq)
    params = param_decls(names, BUFFERS, ("h", "c", "gates", "gh"))
    locals_ = [f"  __local float hl[{MAX_ITEMS}];"]
    if spec.reads_reset_state:
        locals_.append(f"  __local float rl[{MAX_ITEMS}];")
    source = "\n".join(
        [f"__kernel void {name}({', '.join(params)})", "{",
         "  const int lid = get_local_id(0);",
         # (j as lid - n * DHC: Oclgrind cannot follow the freeze LLVM puts on a div/rem pair)
         f"  const int n = lid / {DHC}, j = lid - n * {DHC};"]
        + locals_ + body + ["}", ""])
    items = f"batch * {DHC}"
    return KernelSource(name, source, None, None, names, grid=(items,), local_grid=(items,))


def cell_lines(spec, si: int, st, known: set, activation: str, alpha: float, clip, N: int,
               DHC: int, gx_loaded: bool = False) -> list[str]:
    """C statements of stage ``si``'s formulas, for the one-launch kernels: they read the C
    names ``n``, ``j``, ``t``, ``gxo`` (gx offset of this row and channel), ``acc_<gate>``
    (the stage's recurrent sums), ``h_prev``, ``c_prev`` and the buffers; every value is left
    in ``v_<name>``. ``known`` (values of earlier stages) is updated. ``gx_loaded``: the
    layer GEMM's values were read earlier into ``pgx_<gate>``."""
    from pymbolic import var
    from pymbolic.mapper.substitutor import substitute

    from .clhelpers import c_mapper
    from .rnn_elementwise import _FunctionInliner

    cm = c_mapper()
    inline = _FunctionInliner(activation, alpha, clip)
    gates = spec.gate_names
    out = []
    mapping: dict[str, object] = {}
    for name in st.inputs(()):
        if name.startswith("gx_"):
            g = name[3:]
            e = f"pgx_{g}" if gx_loaded else f"gx[gxo + {gates.index(g) * DHC}]"
            b = spec.bias_gate_index("gx", g)
            if b is not None:
                e += f" + bias[bias_off + {b * DHC} + j]"
        elif name.startswith("gh_"):
            g = name[3:]
            e = f"acc_{g}"
            b = spec.bias_gate_index("gh", g)
            if b is not None:
                e += f" + bias[bias_off + {b * DHC} + j]"
        elif name == "h_prev":
            e = "h_prev"
        elif name == "c_prev":
            e = "c_prev"
        elif name in ("p_i", "p_f", "p_o"):
            e = f"peep[peep_off + {'ifo'.index(name[2]) * DHC} + j]"
        elif name == "att":
            e = f"att[att_off + t * {N} + n]"  # N: an int or a C expression
        elif name in known:
            continue
        else:
            raise ValueError(f"cell {spec.name} stage {si}: no value for input {name!r}")
        out.append(f"    const float in{si}_{name} = {e};")
        mapping[name] = var(f"in{si}_{name}")
    for name in known:
        mapping[name] = var(f"v_{name}")
    for a in st.assignments:
        expr = inline(substitute(a.expr, mapping))
        out.append(f"    const float v_{a.name} = {cm(expr)};")
        mapping[a.name] = var(f"v_{a.name}")
        known.add(a.name)
    return out


def store_lines(spec, stages, store_gates: bool, N: int, DHC: int, state: str = "v",
                gate_guard: str | None = None) -> list[str]:
    """C statements storing a step's h, c and (``store_gates``) activated gates of row n,
    channel j; ``N`` (rows) is an int or a C expression. h and c come from ``<state>_h`` and
    ``<state>_c``; the gates are stored only where ``gate_guard`` (a C condition) holds."""
    G, gates = spec.n_gates, spec.gate_names

    def step(k: int) -> str:  # elements of a step holding k values per row and channel
        return str(N * k * DHC) if isinstance(N, int) else f"{N} * {k * DHC}"

    out = [f"    h[h_off + t * {step(1)} + n * {DHC} + j] = {state}_h;"]
    if spec.has_cell_state:
        out.append(f"    c[c_off + t * {step(1)} + n * {DHC} + j] = {state}_c;")
    gate_stores = []
    if store_gates:
        for st in stages:
            for a in st.assignments:
                if a.name in gates:
                    gate_stores.append(f"    gates[gates_off + t * {step(G)} + n * {G * DHC} + "
                                       f"{gates.index(a.name) * DHC} + j] = v_{a.name};")
    if gate_guard is not None and gate_stores:
        return out + [f"    if ({gate_guard}) {{"] + ["  " + ln for ln in gate_stores] + ["    }"]
    return out + gate_stores
