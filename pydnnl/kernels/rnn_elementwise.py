"""Loopy generator of the per-step RNN elementwise kernel of one cell stage.

The formulas come from the cell spec (:mod:`pydnnl.cells`): every input variable of the
stage's assignments is mapped to a buffer access, every assignment becomes a private
temporary, and the values the step must keep (activated gates, ``c``, ``h``, ``rh``) are
stored. Buffers are flat and addressed with run-time element offsets, and the batch is the
``batch`` argument (it only sizes the grid), so one kernel serves every time step, layer,
direction and batch size.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cells import get_cell

# Run-time offset arguments, in this order after the buffers, then the batch size.
OFFSET_ARGS = ("gx_off", "bias_off", "h_prev_off", "c_prev_off", "c_off", "h_off", "peep_off",
               "att_off", "gates_off", "gh_off", "rh_off", "src_off", "u_off")
SIZE_ARGS = ("batch",)


@dataclass(frozen=True)
class ElementwiseProblem:
    """What one stage kernel depends on (the kernel-cache key)."""

    cell: str
    stage: int
    peephole: bool
    activation: str  # "relu", "tanh", "logistic" (vanilla RNN only)
    alpha: float
    dhc: int
    ld_h_prev: int  # row stride of h_prev (SIC-wide state rows)
    ld_h: int  # row stride of the h written (DHC for the pre-projection buffer, else DIC)
    wg: int = 32
    clip: tuple | None = None  # LSTM cell-state clip (min, max, nan_to_min)
    # the stage's recurrent GEMM computed in the kernel (one launch per step instead of two;
    # small batches on GPUs): gh_X[n, j] = sum_k src[n, k] * u[k, X * dhc + j] for k < fused_k
    fused_k: int = 0
    ld_src: int = 0  # row stride of the GEMM source (h_prev or rh)
    ld_u: int = 0  # row stride of the weights u (G * DHC)
    # store the activated gates (training: the workspace keeps them for backward); inference
    # drops them in the last stage, where no later stage reads them (LSTM 512, N 64: 512 KB
    # of writes a step)
    store_gates: bool = True
    # int8 inference (oneDNN's u8/s8 RNNs): (data_scale, data_shift, lo, hi). The GEMM results
    # gx, gh are integer accumulators; a gate's pre-activation is (gx + gh) * dq[gate channel]
    # + bias (dq = 1 / (weights scale * data scale), the data shift's compensation already in
    # the bias), h_prev holds quantized values read as (h_prev - shift) / scale, and the h and
    # rh written are quantized: clamp(rint(v * scale + shift), lo, hi) (oneDNN's
    # ref_postgemm_lstm.cpp / ref_postgemm_gru.cpp)
    quant: tuple | None = None
    # tanh printed as 2 / (1 + exp(-2 x)) - 1 (one exp and a division) instead of a call of
    # tanh (a device rule: ``heuristics.rnn.cell_tanh_via_exp``); within 2 ulp-ish absolute
    # error of tanh, infinities and NaN as tanh's
    tanh_exp: bool = False


def stage_buffers(p: ElementwiseProblem) -> tuple[str, ...]:
    """The buffer arguments the stage kernel takes, in order."""
    spec = get_cell(p.cell)
    st = spec.forward_stages(p.peephole, p.clip is not None)[p.stage]
    names = set(st.inputs(()))
    assigned = set(st.assigned)
    bufs = ["gates"]
    if p.fused_k:
        bufs += ["src", "u"]
    if any(n.startswith("gx_") for n in names):
        bufs += ["gx", "bias"] + (["dq"] if p.quant else [])
    if any(n.startswith("gh_") for n in names):
        bufs.append("gh")
    if "h_prev" in names:
        bufs.append("h_prev")
    if "c_prev" in names:
        bufs.append("c_prev")
    if "c" in assigned:
        bufs.append("c")
    if "h" in assigned:
        bufs.append("h")
    if "rh" in assigned:
        bufs.append("rh")
    if any(n in names for n in ("p_i", "p_f", "p_o")):
        bufs.append("peep")
    if "att" in names:
        bufs.append("att")
    return tuple(bufs)


def _known_before(spec, p: ElementwiseProblem) -> tuple[str, ...]:
    out: list[str] = []
    for st in spec.forward_stages(p.peephole, p.clip is not None)[: p.stage]:
        out += st.assigned
    return tuple(out)


def stage_input_reads(p: ElementwiseProblem) -> dict:
    """Each input of stage ``p.stage`` as the buffer read (pymbolic) of row ``n``, channel
    ``j``, without quantization or a fused recurrent GEMM: ``gx``/``gh`` with their bias, the
    states, peepholes, attention; gates of earlier stages as ``("load", gates[...])``. Shared
    by the loopy builder and the printed kernels, so both read the same expressions."""
    from pymbolic import var

    spec = get_cell(p.cell)
    stage = spec.forward_stages(p.peephole, p.clip is not None)[p.stage]
    G, DHC, gates = spec.n_gates, p.dhc, spec.gate_names
    gemm_gates = stage.recurrent_gemm.gates
    n, j = var("n"), var("j")
    before = set(_known_before(spec, p))
    reads: dict = {}
    for name in stage.inputs(()):
        if name.startswith("gx_"):
            g = name[3:]
            e = var("gx")[var("gx_off") + (n * G + gates.index(g)) * DHC + j]
            b = spec.bias_gate_index("gx", g)
            if b is not None:
                e = e + var("bias")[var("bias_off") + b * DHC + j]
        elif name.startswith("gh_"):
            g = name[3:]
            e = var("gh")[var("gh_off") + (n * len(gemm_gates) + gemm_gates.index(g)) * DHC + j]
            b = spec.bias_gate_index("gh", g)
            if b is not None:
                e = e + var("bias")[var("bias_off") + b * DHC + j]
        elif name == "h_prev":
            e = var("h_prev")[var("h_prev_off") + n * p.ld_h_prev + j]
        elif name == "c_prev":
            e = var("c_prev")[var("c_prev_off") + n * DHC + j]
        elif name in ("p_i", "p_f", "p_o"):
            e = var("peep")[var("peep_off") + "ifo".index(name[2]) * DHC + j]
        elif name == "att":
            e = var("att")[var("att_off") + n]
        elif name in before and name in gates:
            e = ("load", var("gates")[var("gates_off") + (n * G + gates.index(name)) * DHC + j])
        else:
            raise ValueError(f"cell {spec.name} stage {p.stage}: no buffer for input {name!r}")
        reads[name] = e
    return reads


def stage_store_targets(p: ElementwiseProblem) -> list:
    """``(value name, target)`` of each value stage ``p.stage`` stores, in the stage's order:
    activated gates (not in the last stage of inference), ``c``, ``h``, ``rh`` (pymbolic
    subscripts of row ``n``, channel ``j``); intermediates such as ``u_tilde`` stay private."""
    from pymbolic import var

    spec = get_cell(p.cell)
    stages = spec.forward_stages(p.peephole, p.clip is not None)
    G, DHC, gates = spec.n_gates, p.dhc, spec.gate_names
    n, j = var("n"), var("j")
    last = p.stage == len(stages) - 1
    out = []
    for a in stages[p.stage].assignments:
        if a.name in gates:
            if last and not p.store_gates:
                continue
            target = var("gates")[var("gates_off") + (n * G + gates.index(a.name)) * DHC + j]
        elif a.name == "c":
            target = var("c")[var("c_off") + n * DHC + j]
        elif a.name == "h":
            target = var("h")[var("h_off") + n * p.ld_h + j]
        elif a.name == "rh":
            target = var("rh")[var("rh_off") + n * DHC + j]
        else:
            continue
        out.append((a.name, target))
    return out


def build_elementwise(p: ElementwiseProblem):
    """The kernel of one stage: printed OpenCL C
    (:func:`~pydnnl.kernels.rnn_elementwise_source.elementwise_source`: no loopy import or
    code generation in a first-ever creation) where it covers ``p``, else loopy's."""
    from .rnn_elementwise_source import elementwise_source

    src = elementwise_source(p)
    return src if src is not None else build_elementwise_loopy(p)


def build_elementwise_loopy(p: ElementwiseProblem):
    """loopy TranslationUnit of one stage; args: buffers (see :func:`stage_buffers`), then
    the int32 offsets of :data:`OFFSET_ARGS` (and ``dq_off`` when quantized) and the int32
    ``batch``."""
    import loopy as lp
    from pymbolic import var
    from pymbolic.mapper.substitutor import substitute

    spec = get_cell(p.cell)
    stage = spec.forward_stages(p.peephole, p.clip is not None)[p.stage]
    G = spec.n_gates
    gates = spec.gate_names
    gemm_gates = stage.recurrent_gemm.gates
    n, j = var("n"), var("j")
    DHC = p.dhc

    def off(name):
        return var(name)

    mapping = {}
    inputs = stage.inputs(())
    if p.quant:
        if p.fused_k:
            raise ValueError("rnn_elementwise: int8 stages take their GEMM results from gh")
        for name in inputs:
            if name.startswith("gx_") and "gh_" + name[3:] not in inputs:
                raise ValueError(f"cell {spec.name}: int8 needs gh_{name[3:]} beside {name}")
        q_scale, q_shift = np.float32(p.quant[0]), np.float32(p.quant[1])
    plain = stage_input_reads(p)
    for name in inputs:
        if p.quant and name.startswith("gx_"):
            # both GEMMs' integer sums first, then one dequantization (as oneDNN's s32 sum)
            g = name[3:]
            acc = (var("gx")[off("gx_off") + (n * G + gates.index(g)) * DHC + j]
                   + var("gh")[off("gh_off") + (n * len(gemm_gates) + gemm_gates.index(g))
                               * DHC + j])
            b = spec.bias_gate_index("gx", g)
            mapping[name] = (acc * var("dq")[off("dq_off") + gates.index(g) * DHC + j]
                             + var("bias")[off("bias_off") + b * DHC + j])
        elif p.quant and name.startswith("gh_"):
            mapping[name] = 0  # added with gx_ above
        elif p.quant and name == "h_prev":
            inv = np.float32(1) / q_scale
            mapping[name] = (var("h_prev")[off("h_prev_off") + n * p.ld_h_prev + j]
                             - q_shift) * inv
        elif p.fused_k and name.startswith("gh_"):
            g = name[3:]
            e = ("gemm", lp.Reduction("sum", "k", var("src")[
                off("src_off") + n * p.ld_src + var("k")] * var("u")[
                off("u_off") + var("k") * p.ld_u + gemm_gates.index(g) * DHC + j]))
            b = spec.bias_gate_index("gh", g)
            if b is not None:
                e = ("gemm", e[1], var("bias")[off("bias_off") + b * DHC + j])
            mapping[name] = e
        else:
            mapping[name] = plain[name]

    def fn_sub(expr):
        return _FunctionInliner(p.activation, p.alpha, p.clip, p.tanh_exp)(expr)

    temps, insns = [], []
    prev = frozenset()  # the instructions the next one waits for
    gemm_ids = []
    for name, m in list(mapping.items()):
        if isinstance(m, tuple) and m[0] == "gemm":
            # independent of each other: the dot products of all gates share one k loop
            # (src[n, k] read once for every gate)
            tname, iid = f"v_{name}", f"l_{name}"
            temps.append(lp.TemporaryVariable(tname, np.float32, shape=(),
                                              address_space=lp.AddressSpace.PRIVATE))
            insns.append(lp.Assignment(var(tname), m[1], id=iid, depends_on_is_final=True,
                                       depends_on=frozenset(),
                                       within_inames=frozenset(["n", "j"])))
            gemm_ids.append(iid)
            mapping[name] = var(tname) + m[2] if len(m) > 2 else var(tname)
    prev = frozenset(gemm_ids)
    # values of earlier stages are loaded first, so that every later instruction reads private
    # temporaries and the gate stores can all come last
    for name, m in list(mapping.items()):
        if isinstance(m, tuple):
            tname, iid = f"v_{name}", f"l_{name}"
            temps.append(lp.TemporaryVariable(tname, np.float32, shape=(),
                                              address_space=lp.AddressSpace.PRIVATE))
            insns.append(lp.Assignment(var(tname), m[1], id=iid, depends_on_is_final=True,
                                       depends_on=prev,
                                       within_inames=frozenset(["n", "j"])))
            prev = frozenset([iid])
            mapping[name] = var(tname)
    for a in stage.assignments:
        expr = fn_sub(substitute(a.expr, mapping))
        tname = f"v_{a.name}"
        temps.append(lp.TemporaryVariable(tname, np.float32, shape=(),
                                          address_space=lp.AddressSpace.PRIVATE))
        iid = f"i_{a.name}"
        insns.append(lp.Assignment(var(tname), expr, id=iid, depends_on_is_final=True,
                                   depends_on=prev, within_inames=frozenset(["n", "j"])))
        prev = frozenset([iid])
        mapping[a.name] = var(tname)
    stores = []
    for name, target in stage_store_targets(p):
        value = var(f"v_{name}")
        if p.quant and name in ("h", "rh"):
            value = var(quant_helper(p.quant)[0])(value)
        # one sequential chain: the explicit order is complete (a later stage reads gates
        # written by an earlier kernel, which loopy cannot tell apart from this one's stores)
        stores.append(lp.Assignment(target, value, id=f"s_{name}",
                                    depends_on=prev, depends_on_is_final=True,
                                    within_inames=frozenset(["n", "j"])))
        prev = frozenset([f"s_{name}"])
    # every work-item touches only its own (n, j) elements: no barrier is ever needed
    all_ids = [i.id for i in insns + stores]
    nosync = frozenset((i, "any") for i in all_ids)
    insns = [i.copy(no_sync_with=nosync) for i in insns]
    stores = [i.copy(no_sync_with=nosync) for i in stores]
    bufs = stage_buffers(p)
    args = []
    for b in bufs:
        out = b in ("gates", "c", "h", "rh")
        args.append(lp.GlobalArg(b, np.float32, shape=None, is_output=out,
                                 is_input=not out or b == "gates"))
    args += [lp.ValueArg(o, np.int32) for o in OFFSET_ARGS
             + (("dq_off",) if "dq" in bufs else ()) + SIZE_ARGS]
    dom = (f"{{[n, j, k]: 0 <= n < batch and 0 <= j < {DHC} and 0 <= k < {p.fused_k}}}"
           if p.fused_k else f"{{[n, j]: 0 <= n < batch and 0 <= j < {DHC}}}")
    # the plain OpenCL target: the device code is PyOpenCLTarget's, whose first use imported
    # its host-side library (random123, mako: 50-60 ms of a first creation)
    knl = lp.make_kernel(dom, insns + stores,
                         args + temps, name=f"rnn_{spec.name}_s{p.stage}",
                         lang_version=(2018, 2), target=lp.OpenCLTarget(),
                         seq_dependencies=False)
    wg = min(p.wg, DHC)
    knl = lp.split_iname(knl, "j", wg, inner_tag="l.0", outer_tag="g.0")
    knl = lp.tag_inames(knl, {"n": "g.1"})
    if p.quant:
        from .clhelpers import register_helpers

        knl = register_helpers(knl, [quant_helper(p.quant)])
    return knl


def quant_helper(quant: tuple) -> tuple[str, str, type, type]:
    """The OpenCL helper quantizing one value as oneDNN does (its ``qz_a1b0``): ``x * scale +
    shift`` in f32, rounded to nearest even, saturated to [lo, hi]; returned as a float (the
    emulated int8 path keeps quantized values in f32 buffers: integers, exact)."""
    scale, shift, lo, hi = quant
    name = "pd_rnn_quantize"
    body = (f"static inline float {name}(float x) {{ return clamp(rint(x * "
            f"{float(np.float32(scale)).hex()}f + {float(np.float32(shift)).hex()}f), "
            f"{float(lo):.1f}f, {float(hi):.1f}f); }}")
    return name, body, np.float32, np.float32


class _FunctionInliner:
    """Replace calls of logistic/tanh/act by OpenCL expressions loopy understands."""

    def __init__(self, activation: str, alpha: float, clip: tuple | None = None,
                 tanh_exp: bool = False):
        self.activation, self.alpha, self.clip = activation, alpha, clip
        self.tanh_exp = tanh_exp

    def __call__(self, expr):
        from pymbolic.mapper import IdentityMapper

        outer = self

        class M(IdentityMapper):
            def map_call(self, e, *args):
                params = tuple(self.rec(x) for x in e.parameters)
                name = e.function.name
                if name == "logistic":
                    return _logistic(params[0])
                if name == "tanh":
                    return _tanh(params[0], outer.tanh_exp)
                if name == "act":
                    return _activation(outer.activation, outer.alpha, params[0],
                                       outer.tanh_exp)
                if name == "clip":
                    return _clip(outer.clip, params[0])
                return type(e)(e.function, params)

        return M()(expr)


def _clip(clip: tuple, x):
    """min(max(x, lo), hi) written with comparisons, so that a NaN either propagates (it fails
    both tests) or, with nan_to_min, becomes lo."""
    import pymbolic.primitives as prim

    lo, hi, nan = np.float32(clip[0]), np.float32(clip[1]), clip[2]
    if nan:
        inner = prim.If(prim.Comparison(x, ">=", lo), x, lo)
    else:
        inner = prim.If(prim.Comparison(x, "<", lo), lo, x)
    return prim.If(prim.Comparison(x, ">", hi), hi, inner)


def _logistic(x):
    from pymbolic import var

    return 1.0 / (1.0 + var("exp")(-x))


def _tanh(x, via_exp: bool = False):
    """tanh(x): a call, or ``via_exp`` 2 / (1 + exp(-2 x)) - 1 (exp overflowing to inf gives
    -1, underflowing to 0 gives 1; absolute error a few f32 ulps of 1)."""
    from pymbolic import var

    if via_exp:
        return 2.0 / (1.0 + var("exp")(-2.0 * x)) - 1.0
    return var("tanh")(x)


def _activation(kind: str, alpha: float, x, tanh_exp: bool = False):
    import pymbolic.primitives as prim

    if kind == "tanh":
        return _tanh(x, tanh_exp)
    if kind == "logistic":
        return _logistic(x)
    if kind == "relu":
        return prim.If(prim.Comparison(x, ">", 0), x, np.float32(alpha) * x)
    raise ValueError(f"activation must be relu, tanh or logistic, got {kind!r}")
