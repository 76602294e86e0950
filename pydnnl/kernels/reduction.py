"""OpenCL C generators of the reduction primitive's kernels, and the dim folding the softmax
kernels share.

Every tensor is addressed through its layout tuple (:func:`~pydnnl.kernels.reorder.layout_of`),
so plain layouts with any strides and blocked layouts are read and written in place. Before a
kernel is generated the problem is *folded* (:func:`fold_dims`): size-1 dims are dropped and
dims that lie back to back in every tensor (plain, ``stride[outer] == stride[inner] *
size[inner]``) and play the same role are merged, so ``8x16x32x32 -> 8x16x1x1`` in ``nchw``
becomes 128 outputs of 1024 contiguous values.

Kernels over ``O`` outputs, each a reduction of ``R`` values (the reduced dims, innermost in
memory fastest), cut into ``splits`` chunks:

- **row** (:attr:`ReductionProblem.variant` ``"row"``): ``wg`` work-items (a power of two)
  per output and chunk, ``rows`` outputs (neighbours) per work-group; a row's work-items
  stride over the chunk, neighbours reading neighbouring values where the reduced dims are
  innermost in memory; a local-memory tree within each row's work-items combines their
  partial results.
- **vrow** (``"vrow"``): one work-item per output and chunk where the innermost dim is
  reduced and contiguous: each run of it read with ``vloadN`` (``vec`` values) into N
  accumulators and a scalar tail, the outer reduced dims as a loop; chunks are whole runs, or
  N-aligned pieces of a single run.
- **strided** (``"strided"``): one work-item per output and chunk walking its values, the
  outputs' innermost dim fastest across work-items (coalesced where the kept dims are
  innermost in memory: reductions over outer dims).
- with ``splits > 1`` the first kernel leaves raw partial results in the scratchpad
  (``part[part_off + k * O + o]``) and a **final** kernel (one work-item per output)
  combines the chunks, finishes (mean, eps, root) and writes dst.

A one-kernel reduction's outermost kept dim may be a size variable bound at launch
(:func:`runtime_form`). Pure: no engine, no argument maps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .sizevars import free_vars, is_var, size_var
from .source import KernelSource

# algorithm names (oneDNN's without the ``reduction_`` prefix)
ALGORITHMS = ("max", "min", "sum", "mul", "mean", "norm_lp_max", "norm_lp_sum",
              "norm_lp_power_p_max", "norm_lp_power_p_sum")


# -- layouts -------------------------------------------------------------------------------------
def min_stride(layout: tuple, d: int) -> int:
    """The smallest storage step of dim ``d`` (its innermost block's stride where blocked)."""
    _blk, stride, inner = layout[1][d]
    return min([s for _m, _q, s in inner] + [stride])


def _plain_dim(layout: tuple, d: int) -> bool:
    blk, _stride, inner = layout[1][d]
    return blk == 1 and not inner


def fold_dims(dims, layouts, roles, ignore=None, keep=()):
    """Fold a problem over logical ``dims`` (see the module docstring).

    ``layouts``: one layout tuple per tensor; ``roles``: one hashable per dim (only dims of
    equal role merge); ``ignore``: per tensor, the dims whose index is always 0 in it (a
    reduction's dst along reduced dims), whose strides do not matter; ``keep``: dims never
    dropped even when of size 1. Returns ``(dims, layouts, roles)`` in the first tensor's
    memory order, outermost first (offset0 kept).
    """
    ignore = ignore or tuple(frozenset() for _ in layouts)
    live = [d for d in range(len(dims)) if dims[d] > 1 or d in keep]
    live.sort(key=lambda d: (-min_stride(layouts[0], d), -d))
    groups: list[list[int]] = []
    for d in live:
        if groups and _merges(dims, layouts, roles, ignore, groups[-1][-1], d):
            groups[-1].append(d)
        else:
            groups.append([d])
    out_dims, out_roles = [], []
    per = [[] for _ in layouts]
    for g in groups:
        out_dims.append(math.prod(dims[d] for d in g))
        out_roles.append(roles[g[0]])
        inner = g[-1]
        for k, lay in enumerate(layouts):
            if len(g) == 1:
                per[k].append(lay[1][inner])
            else:
                per[k].append((1, 0 if inner in ignore[k] else lay[1][inner][1], ()))
    return (tuple(out_dims), tuple((lay[0], tuple(p)) for lay, p in zip(layouts, per)),
            tuple(out_roles))


def _merges(dims, layouts, roles, ignore, a: int, b: int) -> bool:
    """Whether dim ``a`` (outer) and ``b`` (the next inner) lie back to back everywhere."""
    if roles[a] != roles[b]:
        return False
    for k, lay in enumerate(layouts):
        if a in ignore[k] and b in ignore[k]:
            continue
        if not (_plain_dim(lay, a) and _plain_dim(lay, b)):
            return False
        if lay[1][a][1] != lay[1][b][1] * dims[b]:
            return False
    return True


def terms(layout: tuple, idx: dict[int, str]) -> list[str]:
    """C terms of the storage offset contributed by the dims in ``idx`` (no offset0)."""
    out = []
    for d, x in idx.items():
        blk, stride, inner = layout[1][d]
        outer = f"({x} / {blk})" if blk > 1 else x
        if stride:
            out.append(f"{outer} * {stride}" if stride != 1 else outer)
        for mod, div, s in inner:
            t = f"({x} % {mod})"
            if div > 1:
                t = f"({t} / {div})"
            out.append(f"{t} * {s}" if s != 1 else t)
    return out


def offset(layout: tuple, idx: dict[int, str], with_base: bool = True) -> str:
    """C expression of the offset of ``idx`` (dims left out are index 0)."""
    t = terms(layout, idx)
    if with_base and layout[0]:
        t = [str(layout[0])] + t
    return "(" + " + ".join(t) + ")" if t else "0"


def decompose(var: str, dims: list[int], names: list[str]) -> str:
    """C statements splitting ``var`` (row-major over ``dims``, last fastest) into ``names``."""
    if not dims:
        return ""
    if len(dims) == 1:
        return f"const int {names[0]} = {var};"
    tmp = f"q_{names[0]}"
    lines = [f"int {tmp} = {var};"]
    for i in range(len(dims) - 1, 0, -1):
        lines.append(f"const int {names[i]} = {tmp} % {dims[i]}; {tmp} /= {dims[i]};")
    lines.append(f"const int {names[0]} = {tmp};")
    return "\n    ".join(lines)


def f32(v: float) -> str:
    """A float literal in C."""
    if math.isinf(v):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    return repr(float(v)) + "f"


def tree(L: int, combine: str) -> str:
    """A local-memory tree over ``red[0..L)`` (``combine`` with ``a`` and ``b``)."""
    c = combine.replace("{a}", "red[l]").replace("{b}", "red[l + h]")
    return f"""
    for (int h = {L} / 2; h > 0; h >>= 1) {{
        if (l < h) red[l] = {c};
        barrier(CLK_LOCAL_MEM_FENCE);
    }}"""


# -- reduction -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReductionProblem:
    """One kernel of a reduction over folded ``dims`` (``reduced`` says which), ``src`` and
    ``dst`` layout tuples (``dst`` of the final kernel only; a partial kernel writes the
    scratchpad), ``stage`` ``"full"`` (one kernel does it all), ``"partial"`` or ``"final"``."""

    alg: str
    p: float
    eps: float
    dims: tuple[int, ...]
    reduced: tuple[bool, ...]
    src: tuple
    dst: tuple
    variant: str = "row"
    wg: int = 64
    splits: int = 1
    stage: str = "full"
    part_off: int = 0
    sdt: str = "f32"
    ddt: str = "f32"
    vec: int = 1
    rows: int = 1                   # row kernel: outputs per work-group (``wg`` lanes each)

    @property
    def outputs(self) -> int:
        return math.prod(v for v, r in zip(self.dims, self.reduced) if not r)

    @property
    def count(self) -> int:
        return math.prod(v for v, r in zip(self.dims, self.reduced) if r)


# the size variable of the run-time form (never ``rows``, ``args`` or ``kernel``: Plan.launch's
# own parameters)
OUTER = "red_outer"


def runtime_form(p: ReductionProblem) -> tuple[ReductionProblem, dict]:
    """The run-time-size form of ``p``: ``(problem, values)`` with the outermost folded dim a
    size variable ``red_outer`` bound at launch, where it is kept (the minibatch of a
    reduction over inner dims: ``32x2048x7x7 -> 32x2048x1x1`` folds to 65536 outputs of 49
    values, ``red_outer`` = 65536). Its stride in src and dst is the product of the dims
    inside it, and an output's index is split by the inner (baked) dims only, so the kernel
    divides by no run-time size; the reduced extent, the chunking and the launch shape stay
    baked. ``(p, {})`` where that dim is reduced (a new minibatch of ``16x64x128x128 ->
    1x64x1x1`` changes the reduced extent, the chunks and the mean's divisor), blocked, or the
    problem is split in chunks (their count is chosen from the output count)."""
    if (len(p.dims) < 2 or p.reduced[0] or p.stage != "full" or p.splits != 1
            or is_var(p.dims[0])):
        return p, {}
    if any(lay[1][0][0] != 1 or lay[1][0][2] for lay in (p.src, p.dst)):
        return p, {}
    return replace(p, dims=(size_var(OUTER),) + tuple(p.dims[1:])), {OUTER: int(p.dims[0])}


def _outputs(p: ReductionProblem, per: int = 1):
    """``(outputs // per, runtime)``: an int, or a C expression over ``red_outer`` (``per``
    divides the inner kept dims' product)."""
    if not is_var(p.dims[0]):
        return p.outputs // per, False
    inner = math.prod(v for d, v in enumerate(p.dims) if d and not p.reduced[d]) // per
    return (f"{OUTER} * {inner}" if inner != 1 else OUTER), True


def _rt_source(name: str, src: str, count, L: int, per: int, arg_names: tuple,
               p: ReductionProblem) -> KernelSource:
    """The source of a kernel over ``count`` work-items (``per`` per work-group of ``L``):
    fixed launch sizes, or a grid over ``red_outer``."""
    if isinstance(count, int):
        return KernelSource(name, src, (L * -(-count // per),), (L,), arg_names)
    return KernelSource(name, src, None, (L,), arg_names + tuple(free_vars(p)),
                        grid=(f"({count} + {per - 1}) // {per} * {L}",))


def _size_params(p: ReductionProblem) -> str:
    return "".join(f", const int {n}" for n in free_vars(p))


def _ops(p: ReductionProblem) -> tuple[str, str, str, str]:
    """(initial value, load of ``v``, combine of ``{a}`` and ``{b}``, finish of ``acc``)."""
    a = p.alg
    if a not in ALGORITHMS:
        raise ValueError(f"reduction kernel: unknown algorithm {a!r}")
    if a == "max":
        return "(-INFINITY)", "v", "fmax({a}, {b})", "acc"
    if a == "min":
        return "INFINITY", "v", "fmin({a}, {b})", "acc"
    if a == "mul":
        return "1.0f", "v", "{a} * {b}", "acc"
    if a in ("sum", "mean"):
        return "0.0f", "v", "{a} + {b}", ("acc" if a == "sum" else f"acc / {f32(p.count)}")
    power = {1.0: "fabs(v)", 2.0: "v * v"}.get(float(p.p), f"pow(fabs(v), {f32(p.p)})")
    acc = f"fmax(acc, {f32(p.eps)})" if a.endswith("_max") else f"(acc + {f32(p.eps)})"
    if "power_p" in a:
        fin = acc
    else:
        fin = {1.0: acc, 2.0: f"sqrt({acc})"}.get(float(p.p), f"pow({acc}, {f32(1.0 / p.p)})")
    return "0.0f", power, "{a} + {b}", fin


def kernel_args(p: ReductionProblem) -> tuple[str, str]:
    """The kernel's two buffer arguments, in order."""
    return {"full": ("src", "dst"), "partial": ("src", "part"), "final": ("part", "dst")}[p.stage]


def vec_ok(dims, reduced, layouts, vec: int) -> bool:
    """Whether the strided kernel can give each work-item ``vec`` adjacent outputs: the
    innermost folded dim is kept, plain with stride 1 in every tensor, a multiple of ``vec``."""
    last = len(dims) - 1
    if vec <= 1 or reduced[last] or dims[last] % vec:
        return False
    return all(lay[1][last] == (1, 1, ()) for lay in layouts)


def build_reduction(p: ReductionProblem) -> KernelSource:
    """The kernel of one stage of ``p``: ``(src, dst)``, ``(src, part)`` or ``(part, dst)``."""
    init, load, combine, finish = _ops(p)
    comb = combine.replace("{a}", "acc").replace("{b}", "({val})")
    stepv = "acc = " + comb.format(val=load) + ";"
    nd = len(p.dims)
    if p.variant == "vrow" and p.stage != "final":
        return _build_vrow(p, init, load, combine, finish)
    V = p.vec if p.variant == "strided" and p.stage != "final" else 1
    if V > 1 and not vec_ok(p.dims, p.reduced, (p.src, p.dst), V):
        raise ValueError(f"reduction kernel: vec={V} needs a contiguous innermost kept dim")
    kept = [d for d in range(nd) if not p.reduced[d]]
    red = [d for d in range(nd) if p.reduced[d]]
    names = {d: f"i{d}" for d in range(nd)}
    O, R, S = p.outputs, p.count, p.splits
    # chunks of whole work-group strides: every work-item of a group runs the same trip count
    chunk = -(-R // S)
    if p.variant == "row" and S > 1:
        chunk = -(-chunk // p.wg) * p.wg
    ksizes = [p.dims[d] // (V if d == nd - 1 else 1) for d in kept]
    kept_code = decompose("ov" if V > 1 else "o", ksizes,
                          [names[d] if d != nd - 1 or V == 1 else "iv" for d in kept])
    if V > 1:
        kept_code += f"\n    const int i{nd - 1} = iv * {V};"
    dst_off = offset(p.dst, {d: names[d] for d in kept})
    if p.stage == "partial":
        store = st("part", "f32", f"{p.part_off} + k * {O} + o", "acc", V)
    else:
        store = st("dst", p.ddt, dst_off, finish, V)
    a_in, a_out = kernel_args(p)
    in_dt = "f32" if p.stage == "final" else p.sdt
    out_dt = "f32" if p.stage == "partial" else p.ddt
    args = f"{ptr_decl(a_in, in_dt, True)}, {ptr_decl(a_out, out_dt, False)}" + _size_params(p)
    pre = io_preamble((in_dt, out_dt), V)
    T = "float" if V == 1 else f"float{V}"
    if p.stage == "final":
        body = f"""
    const int o = get_global_id(0);
    if (o >= {O}) return;
    {kept_code}
    float acc = {init};
    for (int k = 0; k < {S}; ++k) acc = {comb.format(val=f"part[{p.part_off} + k * {O} + o]")};
    {store}"""
        name = "pydnnl_reduction_final"
        L = p.wg
        return KernelSource(name, pre + _kernel(name, args, body), (-(-O // L) * L,), (L,),
                            (a_in, a_out))
    base = offset(p.src, {d: names[d] for d in kept})
    red_code = decompose("r", [p.dims[d] for d in red], [names[d] for d in red])
    red_off = offset(p.src, {d: names[d] for d in red}, with_base=False)
    step = f"const {T} v = {ld('src', p.sdt, f'base + {red_off}', V)};\n        {stepv}"
    r0 = "k * " + str(chunk) if S > 1 else "0"
    r1 = f"min({R}, (k + 1) * {chunk})" if S > 1 else str(R)
    if p.variant == "row":
        # ``T`` lanes per output, ``G`` outputs per work-group (neighbouring outputs)
        T, G = p.wg, p.rows
        L = T * G
        OS, _rt = _outputs(p)  # run-time forms have one chunk: O * S = O
        if G == 1:
            ids = ("const int o = get_group_id(0) / {S};\n    const int k = get_group_id(0) % {S};"
                   .format(S=S) if S > 1 else "const int o = get_group_id(0);")
            ids = "const int lid = get_local_id(0);\n    const int l = lid;\n    " + ids
            live, guard = "", ""
        else:
            ids = (f"const int lid = get_local_id(0);\n    const int l = lid % {T};\n"
                   f"    const int og = get_group_id(0) * {G} + lid / {T};\n"
                   f"    const bool live = og < {OS if _rt else O * S};\n")
            ids += (f"    const int o = og / {S};\n    const int k = og % {S};" if S > 1
                    else "    const int o = og;")
            live, guard = "live ? ", " && live"
        r_end = f"{live}{r1}{' : 0' if live else ''}"
        c = combine.replace("{a}", "red[lid]").replace("{b}", "red[lid + h]")
        body = f"""
    __local float red[{L}];
    {ids}
    {kept_code}
    const int base = {base};
    float acc = {init};
    const int r_end = {r_end};
    for (int r = {r0} + l; r < r_end; r += {T}) {{
        {red_code}
        {step}
    }}
    red[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = {T} / 2; h > 0; h >>= 1) {{
        if (l < h) red[lid] = {c};
        barrier(CLK_LOCAL_MEM_FENCE);
    }}
    if (l == 0{guard}) {{
        acc = red[lid];
        {store}
    }}"""
        name = "pydnnl_reduction_row"
        src = pre + _kernel(name, args, body, L)
        return _rt_source(name, src, OS if _rt else O * S, L, G, (a_in, a_out), p)
    L = p.wg
    OV, _rt = _outputs(p, V)
    if S > 1:
        ids = f"const int ov = gid % {OV};\n    const int k = gid / {OV};"
    else:
        ids = "const int ov = gid;"
    if V == 1:
        ids = ids.replace("ov", "o")
    else:
        ids += f"\n    const int o = ov * {V};"
    body = f"""
    const int gid = get_global_id(0);
    if (gid >= {OV if _rt else OV * S}) return;
    {ids}
    {kept_code}
    const int base = {base};
    {T} acc = {init};
    const int r_end = {r1};
    for (int r = {r0}; r < r_end; ++r) {{
        {red_code}
        {step}
    }}
    {store}"""
    name = "pydnnl_reduction_strided"
    return _rt_source(name, pre + _kernel(name, args, body), OV if _rt else OV * S, L, L,
                      (a_in, a_out), p)


def vrow_ok(dims, reduced, src: tuple) -> bool:
    """Whether the ``vrow`` kernel applies: the innermost folded dim is reduced and plain with
    stride 1 in src (each output's values are runs of contiguous rows)."""
    last = len(dims) - 1
    return bool(dims) and reduced[last] and src[1][last] == (1, 1, ())


def _vec_load(load: str, p: ReductionProblem, T: str) -> str:
    """``load`` (an expression of ``v``) for a vector ``v`` of type ``T``."""
    return load.replace(f", {f32(p.p)})", f", ({T}){f32(p.p)})") if "pow(" in load else load


def _build_vrow(p: ReductionProblem, init: str, load: str, combine: str,
                finish: str) -> KernelSource:
    """One work-item per output (and chunk): its values, runs of ``n`` contiguous values (the
    innermost dim) over the outer reduced dims, read with ``vloadN`` into N accumulators
    combined once at the end (CPUs: no gathers across vectorized work-items)."""
    nd = len(p.dims)
    if not vrow_ok(p.dims, p.reduced, p.src):
        raise ValueError("reduction kernel: vrow needs a reduced, contiguous innermost dim")
    V = p.vec
    T = f"float{V}"
    kept = [d for d in range(nd) if not p.reduced[d]]
    outer = [d for d in range(nd - 1) if p.reduced[d]]
    n = p.dims[nd - 1]
    O, S = p.outputs, p.splits
    n_out = math.prod(p.dims[d] for d in outer)
    names = {d: f"i{d}" for d in range(nd)}
    kept_code = decompose("o", [p.dims[d] for d in kept], [names[d] for d in kept])
    base = offset(p.src, {d: names[d] for d in kept})
    outer_code = decompose("q", [p.dims[d] for d in outer], [names[d] for d in outer])
    outer_off = offset(p.src, {d: names[d] for d in outer}, with_base=False)
    vcomb = combine.replace("{a}", "av").replace("{b}", "({val})")
    scomb = combine.replace("{a}", "acc").replace("{b}", "({val})")
    hsum = []
    w, cur = V, "av"
    while w > 1:
        w //= 2
        nxt = f"h{w}"
        ty = f"float{w}" if w > 1 else "float"
        hsum.append(f"const {ty} {nxt} = " + combine.replace("{a}", f"{cur}.lo")
                    .replace("{b}", f"{cur}.hi") + ";")
        cur = nxt
    hsum.append("acc = " + scomb.format(val=cur) + ";")
    if p.stage == "partial":
        store = st("part", "f32", f"{p.part_off} + k * {O} + o", "acc")
        a_out, out_dt = "part", "f32"
    else:
        store = st("dst", p.ddt, offset(p.dst, {d: names[d] for d in kept}), finish)
        a_out, out_dt = "dst", p.ddt
    ids = (f"const int o = gid % {O};\n    const int k = gid / {O};" if S > 1
           else "const int o = gid;")
    # chunks: whole runs of the outer reduced dims, or (one run) pieces of it, N-aligned
    if S == 1:
        q0, q1, j0, j1 = "0", str(n_out), "0", str(n)
    elif n_out > 1:
        if S > n_out:
            raise ValueError(f"reduction kernel: vrow splits {S} > outer runs {n_out}")
        cq = -(-n_out // S)
        q0, q1, j0, j1 = f"k * {cq}", f"min({n_out}, (k + 1) * {cq})", "0", str(n)
    else:
        per = -(-n // S)
        cj = -(-per // V) * V
        q0, q1, j0, j1 = "0", "1", f"k * {cj}", f"min({n}, (k + 1) * {cj})"
    vload = ld("src", p.sdt, "rb + j", V)
    sload = ld("src", p.sdt, "rb + j")
    if j0 == "0" and j1 == str(n):
        loops = f"""for (int j = 0; j < {n // V * V}; j += {V}) {{
            const {T} v = {vload};
            av = {vcomb.format(val=_vec_load(load, p, T))};
        }}
        for (int j = {n // V * V}; j < {n}; ++j) {{
            const float v = {sload};
            acc = {scomb.format(val=load)};
        }}"""
    else:
        loops = f"""const int j1 = {j1};
        int j = {j0};
        for (; j + {V} <= j1; j += {V}) {{
            const {T} v = {vload};
            av = {vcomb.format(val=_vec_load(load, p, T))};
        }}
        for (; j < j1; ++j) {{
            const float v = {sload};
            acc = {scomb.format(val=load)};
        }}"""
    OS, _rt = _outputs(p)  # run-time forms have one chunk: O * S = O
    body = f"""
    const int gid = get_global_id(0);
    if (gid >= {OS if _rt else O * S}) return;
    {ids}
    {kept_code}
    const int base = {base};
    {T} av = ({T})({init});
    float acc = {init};
    const int q_end = {q1};
    for (int q = {q0}; q < q_end; ++q) {{
        {outer_code}
        const int rb = base + {outer_off};
        {loops}
    }}
    {chr(10).join("    " + h for h in hsum).strip()}
    {store}"""
    name = "pydnnl_reduction_vrow"
    args = (f"{ptr_decl('src', p.sdt, True)}, {ptr_decl(a_out, out_dt, False)}"
            + _size_params(p))
    pre = io_preamble((p.sdt, out_dt), V)
    L = p.wg
    return _rt_source(name, pre + _kernel(name, args, body), OS if _rt else O * S, L, L,
                      ("src", a_out), p)


def _kernel(name: str, args: str, body: str, reqd: int | None = None) -> str:
    attr = f"__attribute__((reqd_work_group_size({reqd}, 1, 1))) " if reqd else ""
    return f"""
__kernel void {attr}{name}({args})
{{{body}
}}
"""


# -- typed access (f32, f16, bf16 storage; float computation) ----------------------------------
DTYPES = ("f32", "f16", "bf16")
_CTYPE = {"f32": "float", "f16": "half", "bf16": "ushort"}
# bf16 from float with round-to-nearest-even (a NaN stays a quiet NaN), oneDNN's rounding
_BF16_ST = """static inline ushort pd_bf16_st(float x) {{
    const uint u = as_uint(x);
    if (isnan(x)) return (ushort)((u >> 16) | 0x40u);
    return (ushort)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}}
static inline float pd_bf16_ld(ushort x) {{ return as_float(((uint)x) << 16); }}
"""
_BF16_VEC = """static inline ushort{v} pd_bf16_st{v}(float{v} x) {{
    const uint{v} u = as_uint{v}(x);
    const uint{v} r = (u + (uint{v})0x7FFFu + ((u >> 16) & (uint{v})1u)) >> 16;
    return convert_ushort{v}(select(r, (u >> 16) | (uint{v})0x40u, isnan(x)));
}}
static inline float{v} pd_bf16_ld{v}(ushort{v} x) {{
    return as_float{v}(convert_uint{v}(x) << 16);
}}
"""


def io_preamble(dts, vec: int = 1) -> str:
    """OpenCL C helpers the typed accessors of ``dts`` need (vector width ``vec``)."""
    if "bf16" not in dts:
        return ""
    out = _BF16_ST.format()
    if vec > 1:
        out += _BF16_VEC.format(v=vec)
    return out


def ptr_decl(name: str, dt: str, const: bool) -> str:
    """The kernel argument of a buffer of ``dt`` elements."""
    return f"__global {'const ' if const else ''}{_CTYPE[dt]} *restrict {name}"


def ld(name: str, dt: str, i: str, vec: int = 1) -> str:
    """C expression: the float (``floatN`` for ``vec`` > 1) value(s) of ``name`` at ``i``."""
    if vec == 1:
        return {"f32": f"{name}[{i}]", "f16": f"vload_half({i}, {name})",
                "bf16": f"pd_bf16_ld({name}[{i}])"}[dt]
    return {"f32": f"vload{vec}(0, {name} + {i})", "f16": f"vload_half{vec}(0, {name} + {i})",
            "bf16": f"pd_bf16_ld{vec}(vload{vec}(0, {name} + {i}))"}[dt]


def st(name: str, dt: str, i: str, v: str, vec: int = 1) -> str:
    """C statement: store float value(s) ``v`` into ``name`` at ``i`` (rounded to ``dt``)."""
    if vec == 1:
        return {"f32": f"{name}[{i}] = {v};", "f16": f"vstore_half_rte({v}, {i}, {name});",
                "bf16": f"{name}[{i}] = pd_bf16_st({v});"}[dt]
    return {"f32": f"vstore{vec}({v}, 0, {name} + {i});",
            "f16": f"vstore_half{vec}_rte({v}, 0, {name} + {i});",
            "bf16": f"vstore{vec}(pd_bf16_st{vec}({v}), 0, {name} + {i});"}[dt]
