"""OpenCL C generators of the softmax kernels (forward and backward, accurate and log).

A problem is folded first (:func:`~pydnnl.kernels.reduction.fold_dims`): the softmax axis
stays one dim, the other dims ("rows") merge where they lie back to back in every tensor.
Data are stored as f32, f16 or bf16 (:attr:`SoftmaxProblem.dts`, one per argument) and
computed in float. Two shapes of kernel, both numerically stable (the row maximum is
subtracted before ``exp``):

- **row**: one work-group of ``wg`` work-items (a power of two) per softmax row; work-items
  stride along the axis (neighbours on neighbouring values where the axis is innermost in
  memory) and combine their partial results once per row: with sub-group reductions when
  ``subgroup`` (the work-group is one sub-group, as on CPU runtimes where it is one SIMD
  vector), else a local-memory tree. Forward, ``online`` (GPUs, where ``exp`` is cheap and
  memory is the bound): one read keeps a running maximum and a sum rescaled when the maximum
  grows, then one normalizing pass (2 reads + 1 write). Otherwise (CPUs, where ``exp`` is
  the bound): a max pass, then a pass that writes the exponentials to ``dst`` and sums them,
  then a scaling pass over ``dst`` (one ``exp`` per element; the row is re-read from cache).
  Where ``dst`` is not f32 the last pass recomputes the exponential instead (no double
  rounding). Backward reads the row twice.
- **vrow** (CPUs): one work-item per row walking it in ``floatV`` vectors (``vec`` values,
  then a scalar tail); the passes are those of **row** without ``online``, each vector's lanes
  summed once per row. Intel's CPU runtime otherwise runs a 16-lane work-group per row through
  its work-item vectorizer, whose loops cost about 1.7x these (256x1000: 0.084 -> 0.050 ms).
  The axis has stride 1 in every tensor; no post-ops.
- **strided**: one work-item per row walking the axis, neighbouring work-items on
  neighbouring positions of the rows' innermost dim (coalesced where the axis is an outer
  dim: ``nchw`` with axis 1). With ``vec`` > 1 each work-item owns ``vec`` adjacent positions
  of that dim (vector loads; the dim is contiguous in every tensor and a multiple of ``vec``).

Forward ``(src, dst)`` then the binary post-op operands ``po<i>_src1`` (f32; the chain,
eltwise and binary entries, applied as each value is finally stored:
:mod:`pydnnl.kernels.post_ops`); backward ``(dst, diff_dst, diff_src)``. Each work-item reads and
writes only its own elements once the row maximum is known, so ``dst`` may be ``src`` (and
``diff_src`` ``diff_dst``) when their layouts agree. The outermost row dim and the axis
length may be size variables bound at launch (:func:`runtime_form`; a run-time axis length
makes the strides of the dims outside it expressions of it). Pure: no engine, no argument maps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from . import post_ops as po
from .clhelpers import lane_reduce
from .reduction import decompose, io_preamble, ld, offset, ptr_decl, st, tree
from .sizevars import free_vars, is_var, size_var
from .source import KernelSource

LOG2E = "1.4426950408889634f"


@dataclass(frozen=True)
class SoftmaxProblem:
    """Softmax over folded ``dims`` along ``axis`` (an index into ``dims``); ``layouts`` and
    ``dts`` (``"f32"``, ``"f16"``, ``"bf16"``) in argument order (see :func:`arg_names`)."""

    log: bool
    backward: bool
    dims: tuple[int, ...]
    axis: int
    layouts: tuple
    variant: str = "row"
    wg: int = 64
    dts: tuple[str, ...] = ()
    subgroup: bool = False
    online: bool = False
    vec: int = 1
    # forward only: a post-op chain (:mod:`pydnnl.kernels.post_ops`: eltwise and binary
    # entries) applied to each value before its final store; a binary entry's layout is its
    # operand's over the folded ``dims`` (a broadcast dim a zero term)
    post_ops: tuple = ()
    # forward row kernel only, > 0: values of the row each work-item keeps in registers
    # (``cache * wg`` at least the axis length), so the row is read from memory once
    cache: int = 0

    @property
    def rows(self) -> int:
        return math.prod(v for d, v in enumerate(self.dims) if d != self.axis)

    @property
    def types(self) -> tuple[str, ...]:
        return self.dts or ("f32",) * len(self.layouts)


def arg_names(backward: bool) -> tuple[str, ...]:
    """The kernel's buffer arguments, in order."""
    return ("dst", "diff_dst", "diff_src") if backward else ("src", "dst")


def kernel_name(p: SoftmaxProblem) -> str:
    return f"pydnnl_softmax_{'bwd' if p.backward else 'fwd'}_{p.variant}"


def vrow_ok(dims, axis: int, layouts, post_ops=()) -> bool:
    """Whether the vector-row kernel applies: the axis plain with stride 1 in every tensor
    (no blocks anywhere) and no post-op chain."""
    return not post_ops and all(_dense(lay) and lay[1][axis][1] == 1 for lay in layouts)


def vec_ok(dims, axis: int, layouts, vec: int) -> bool:
    """Whether the strided kernel can give each work-item ``vec`` adjacent positions: the
    innermost folded dim is a row dim, plain with stride 1 in every tensor and a multiple of
    ``vec`` long."""
    last = len(dims) - 1
    if vec <= 1 or last == axis or dims[last] % vec:
        return False
    return all(lay[1][last] == (1, 1, ()) for lay in layouts)


# the size variables of the run-time form (never ``rows``, ``args`` or ``kernel``: Plan.launch's
# own parameters)
OUTER = "sm_outer"
AXIS = "sm_axis"


def _dense(lay: tuple) -> bool:
    """Whether folded layout ``lay`` is plain (no blocks); :func:`axis_strides` checks that
    its strides are dense too."""
    return all(blk == 1 and not inner for blk, _s, inner in lay[1])


def axis_strides(dims: tuple, lay: tuple, axis: int, C) -> tuple | None:
    """``lay`` with each stride that grows with the axis length (the dims outside the axis in
    memory) written as ``C`` times its stride over the axis length, or None where ``lay`` is
    not plain and dense (a stride then need not follow the length)."""
    if not _dense(lay):
        return None
    order = sorted((s, d) for d, (_b, s, _i) in enumerate(lay[1]) if dims[d] > 1 or d == axis)
    want = 1
    for s, d in order:
        if s != want:
            return None
        want = s * dims[d]
    sa, n = lay[1][axis][1], dims[axis]
    out = []
    for d, (blk, s, inner) in enumerate(lay[1]):
        if d != axis and s > sa and s % n == 0:  # a dim outside the axis (or of length 1)
            out.append((blk, C * (s // n) if s // n != 1 else C, inner))
        else:
            out.append((blk, s, inner))
    return (lay[0], tuple(out))


def runtime_form(p: SoftmaxProblem, axis: bool = False) -> tuple[SoftmaxProblem, dict]:
    """The run-time-size form of ``p``: ``(problem, values)`` with the outermost folded dim
    (the minibatch, or whatever the outer rows are merged into) a size variable ``sm_outer``
    bound at launch (``values``). Its stride in every tensor is the product of the dims inside
    it, so no stride changes with it, and the row index is split by the inner (baked) dims
    only: the kernel divides by no run-time size. ``axis``: the axis length too (``sm_axis``:
    the row loops' trip count, and the strides of the dims outside it in memory, which then
    grow with it), where every tensor is plain and dense and no binary post-op operand is
    read (its broadcast strides need not follow the length). One program then serves every
    outer count (and axis length) of the class (inner row dims, layouts, data types, kernel
    shape). ``(p, {})`` where neither applies (the outermost dim is the axis or blocked in
    some tensor, and the axis length baked)."""
    values: dict = {}
    dims = list(p.dims)
    layouts = p.layouts
    if axis and not is_var(dims[p.axis]) and not _po_layouts(p):
        C = size_var(AXIS)
        lays = tuple(axis_strides(p.dims, lay, p.axis, C) for lay in p.layouts)
        if all(lay is not None for lay in lays):
            layouts = lays
            dims[p.axis] = C
            values[AXIS] = int(p.dims[p.axis])
    if (len(p.dims) >= 2 and p.axis != 0 and not is_var(p.dims[0])
            and not any(lay[1][0][0] != 1 or lay[1][0][2] for lay in p.layouts + _po_layouts(p))):
        dims[0] = size_var(OUTER)
        values[OUTER] = int(p.dims[0])
    if not values:
        return p, {}
    return replace(p, dims=tuple(dims), layouts=layouts), values


def _po_layouts(p: SoftmaxProblem) -> tuple:
    """The folded layouts of the chain's binary operands."""
    return tuple(op[2] for op in p.post_ops if op[0] == "binary")


def build_softmax(p: SoftmaxProblem) -> KernelSource:
    """The kernel of ``p`` (see the module docstring)."""
    if p.variant == "vrow":
        return _build_vrow(p)
    if p.variant not in ("row", "strided"):
        raise ValueError(f"softmax kernel: unknown variant {p.variant!r}")
    row = p.variant == "row"
    V = 1 if row else p.vec
    if V > 1 and not vec_ok(p.dims, p.axis, p.layouts, V):
        raise ValueError(f"softmax kernel: vec={V} needs a contiguous innermost row dim")
    if p.post_ops and (p.backward or V > 1 or po.reads_prior(p.post_ops)):
        raise ValueError("softmax kernel: post-ops are forward only, with vec=1, and take no "
                         "sum entry (oneDNN's softmax takes eltwise and binary ones)")
    nd = len(p.dims)
    rows_d = [d for d in range(nd) if d != p.axis]
    names = {d: f"i{d}" for d in rows_d}
    sizes = [p.dims[d] // (V if d == nd - 1 else 1) for d in rows_d]
    C, L = p.dims[p.axis], p.wg
    names_t, dts = arg_names(p.backward), p.types
    code = decompose("row", sizes, [names[d] if d != nd - 1 or V == 1 else "iv"
                                    for d in rows_d])
    if V > 1:
        code += f"\n    const int i{nd - 1} = iv * {V};"
    T = "float" if V == 1 else f"float{V}"
    bases, idx = [], {}
    po_names = tuple(po.src1_name(i) for i, op in enumerate(p.post_ops) if op[0] == "binary")
    for n, lay in zip(names_t + po_names, p.layouts + _po_layouts(p)):
        bases.append(f"const int b_{n} = {offset(lay, names)};")
        idx[n] = f"b_{n} + {offset(lay, {p.axis: 'c'}, with_base=False)}"
    dt = dict(zip(names_t, dts))

    def LD(n):
        return ld(n, dt[n], idx[n], V)

    def ST(n, v):
        if n == "dst" and p.post_ops:  # the chain, on the value's final store
            v = po.apply_c(v, p.post_ops, lambda i, op: f"{po.src1_name(i)}"
                                                        f"[{idx[po.src1_name(i)]}]")
        return st(n, dt[n], idx[n], v, V)

    def RAW(v):  # an intermediate value into dst (no post-ops)
        return st("dst", dt["dst"], idx["dst"], v, V)

    loop = f"for (int c = l; c < {C}; c += {L})" if row else f"for (int c = 0; c < {C}; ++c)"

    def reduce_(op: str, var: str) -> str:
        """Make ``var`` the row-wide result (the row kernel combines its work-items)."""
        if not row:
            return ""
        if p.subgroup:
            return f"\n    {var} = sub_group_reduce_{op}({var});"
        combine = "fmax({a}, {b})" if op == "max" else "{a} + {b}"
        return (f"\n    red[l] = {var};\n    barrier(CLK_LOCAL_MEM_FENCE);{tree(L, combine)}"
                f"\n    {var} = red[0];\n    barrier(CLK_LOCAL_MEM_FENCE);")

    local = ""
    if p.cache and not (row and not p.backward and not p.subgroup):
        raise ValueError("softmax kernel: cache needs the forward row kernel with a "
                         "local-memory tree")
    if p.cache and not is_var(C) and p.cache * L < C:
        raise ValueError(f"softmax kernel: cache={p.cache} x wg={L} holds fewer than the axis "
                         f"length {C}")
    if not p.backward:
        x = LD("src")
        if p.cache:
            body = _cached_forward(p, C, L, x, ST, reduce_)
        elif row and p.online:
            # running (max, sum); pairs combine as (M, s1 e^(m1-M) + s2 e^(m2-M))
            body = f"""
    float m = -INFINITY, s = 0.0f;
    {loop} {{
        const float v = {x};
        const float e = v == m ? 1.0f : exp(-fabs(v - m));
        s = v > m ? s * e + 1.0f : s + e;
        m = fmax(m, v);
    }}"""
            if p.subgroup:
                body += """
    const float mx = sub_group_reduce_max(m);
    s = sub_group_reduce_add(s == 0.0f ? 0.0f : s * exp(m - mx));
    m = mx;"""
            else:
                local = f"__local float red[{L}], red2[{L}];"
                body += f"""
    red[l] = m; red2[l] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = {L} / 2; h > 0; h >>= 1) {{
        if (l < h) {{
            const float m1 = red[l], m2 = red[l + h], mx = fmax(m1, m2);
            const float s1 = red2[l], s2 = red2[l + h];
            red2[l] = (s1 == 0.0f ? 0.0f : s1 * exp(m1 - mx))
                      + (s2 == 0.0f ? 0.0f : s2 * exp(m2 - mx));
            red[l] = mx;
        }}
        barrier(CLK_LOCAL_MEM_FENCE);
    }}
    m = red[0]; s = red2[0];"""
            if p.log:
                body += f"""
    const float t = log(s);
    {loop} {ST("dst", f"({x} - m) - t")}"""
            else:
                body += f"""
    const float r = 1.0f / s;
    {loop} {ST("dst", f"exp({x} - m) * r")}"""
        else:
            ex = f"exp2(({x} - m) * {LOG2E})"
            body = f"""
    {T} m = -INFINITY;
    {loop} m = fmax(m, {x});{reduce_("max", "m")}
    {T} s = 0.0f;"""
            if p.log:
                body += f"""
    {loop} s += {ex};{reduce_("add", "s")}
    const {T} t = log(s);
    {loop} {ST("dst", f"({x} - m) - t")}"""
            elif dt["dst"] == "f32":  # dst holds the exponentials until the last pass
                body += f"""
    {loop} {{ const {T} e = {ex}; {RAW("e")} s += e; }}{reduce_("add", "s")}
    const {T} r = 1.0f / s;
    {loop} {ST("dst", LD("dst") + " * r")}"""
            else:  # no double rounding: recompute the exponential
                body += f"""
    {loop} s += {ex};{reduce_("add", "s")}
    const {T} r = 1.0f / s;
    {loop} {ST("dst", f"{ex} * r")}"""
    else:
        y, dy = LD("dst"), LD("diff_dst")
        if p.log:
            body = f"""
    {T} s = 0.0f;
    {loop} s += {dy};{reduce_("add", "s")}
    {loop} {ST("diff_src", f"{dy} - exp({y}) * s")}"""
        else:
            body = f"""
    {T} s = 0.0f;
    {loop} s += {dy} * {y};{reduce_("add", "s")}
    {loop} {{ const {T} yv = {y}; {ST("diff_src", f"yv * ({dy} - s)")} }}"""
    if row and not p.subgroup and not local:
        local = f"__local float red[{L}];"
    args = ", ".join([ptr_decl(n, dt[n], k < len(names_t) - 1) for k, n in enumerate(names_t)]
                     + [po.src1_c_arg(i, op) for i, op in enumerate(p.post_ops)
                        if op[0] == "binary"])
    # ``restrict`` is wrong for in-place use: drop it
    args = args.replace(" *restrict ", " *")
    runtime = bool(free_vars(p))
    if p.axis != 0 and is_var(p.dims[0]):  # rows = sm_outer * inner (the last dim, split by V,
        # is an inner one)
        inner = math.prod(v // (V if d == nd - 1 else 1) for d, v in enumerate(p.dims)
                          if d not in (0, p.axis))
        rows = f"{OUTER} * {inner}" if inner != 1 else OUTER
    else:
        rows = math.prod(v for d, v in enumerate(p.dims) if d != p.axis) // V
    if runtime:
        args += ", " + ", ".join(f"const int {n}" for n in free_vars(p))
    if row:
        head = f"""
    {local}
    const int l = get_local_id(0);
    const int row = get_group_id(0);"""
        attr = f"__attribute__((reqd_work_group_size({L}, 1, 1))) "
        if p.subgroup:
            attr += f"__attribute__((intel_reqd_sub_group_size({L}))) "
        gsize = f"{L} * {rows}" if runtime else L * rows
    else:
        head = f"""
    const int row = get_global_id(0);
    if (row >= {rows}) return;"""
        attr = ""
        gsize = f"({rows} + {L - 1}) // {L} * {L}" if runtime else -(-rows // L) * L
    name = kernel_name(p)
    helpers = "".join(h[1] + "\n" for h in po.helpers(p.post_ops))
    src = f"""{io_preamble(dts, V)}{helpers}
__kernel void {attr}{name}({args})
{{{head}
    {code}
    {" ".join(bases)}{body}
}}
"""
    if runtime:
        return KernelSource(name, src, None, (L,), names_t + po_names + tuple(free_vars(p)),
                            grid=(gsize,))
    return KernelSource(name, src, (gsize,), (L,), names_t + po_names)


def _cached_forward(p: SoftmaxProblem, C, L: int, x: str, ST, reduce_) -> str:
    """The forward row body with the row in registers: ``p.cache`` values per work-item
    (positions ``l + k * L``; -INFINITY past the axis end, which adds nothing), a max tree,
    the exponentials kept in place and a sum tree, then one store per value."""
    K = p.cache
    each = f"for (int k = 0; k < {K}; ++k)"
    pos = f"const int c = l + k * {L};"
    body = f"""
    float v[{K}];
    float m = -INFINITY;
    #pragma unroll
    {each} {{ {pos} v[k] = c < {C} ? {x} : -INFINITY; m = fmax(m, v[k]); }}{reduce_("max", "m")}
    float s = 0.0f;
    #pragma unroll
    {each} {{ {pos} if (c < {C}) {{ """
    if p.log:
        body += f"""v[k] -= m; s += exp(v[k]); }} }}{reduce_("add", "s")}
    const float t = log(s);
    #pragma unroll
    {each} {{ {pos} if (c < {C}) {ST("dst", "v[k] - t")} }}"""
    else:
        body += f"""v[k] = exp(v[k] - m); s += v[k]; }} }}{reduce_("add", "s")}
    const float r = 1.0f / s;
    #pragma unroll
    {each} {{ {pos} if (c < {C}) {ST("dst", "v[k] * r")} }}"""
    return body


def _build_vrow(p: SoftmaxProblem) -> KernelSource:
    """The vector-row kernel of ``p`` (see the module docstring)."""
    V = p.vec
    if V not in (2, 4, 8, 16) or not vrow_ok(p.dims, p.axis, p.layouts, p.post_ops):
        raise ValueError("softmax kernel: vrow needs vec in 2..16, a stride-1 plain axis and "
                         "no post-ops")
    nd = len(p.dims)
    rows_d = [d for d in range(nd) if d != p.axis]
    names = {d: f"i{d}" for d in rows_d}
    C = p.dims[p.axis]
    names_t, dts = arg_names(p.backward), p.types
    dt = dict(zip(names_t, dts))
    code = decompose("row", [p.dims[d] for d in rows_d], [names[d] for d in rows_d])
    bases = " ".join(f"const int b_{n} = {offset(lay, names)};"
                     for n, lay in zip(names_t, p.layouts))
    T = f"float{V}"

    def LD(n, w):
        return ld(n, dt[n], f"b_{n} + c", w)

    def ST(n, v, w):
        return st(n, dt[n], f"b_{n} + c", v, w)

    vloop = f"for (int c = 0; c < cv; c += {V})"
    tloop = f"for (int c = cv; c < {C}; ++c)"

    def both(stmt):
        """``stmt(w, acc)`` over the vector loop then the scalar tail."""
        return f"\n    {vloop} {{ {stmt(V, 'sv')} }}\n    {tloop} {{ {stmt(1, 's')} }}"

    def red_sum():
        return f"\n    s += {lane_reduce('sv', V)};"

    if not p.backward:
        def ex(w):
            return f"exp2(({LD('src', w)} - m) * {LOG2E})"
        body = f"""
    {T} mv = ({T})(-INFINITY);
    {vloop} mv = fmax(mv, {LD('src', V)});
    float m = {lane_reduce('mv', V, 'max')};
    {tloop} m = fmax(m, {LD('src', 1)});
    {T} sv = 0.0f;
    float s = 0.0f;"""
        if p.log:
            body += both(lambda w, a: f"{a} += {ex(w)};") + red_sum()
            body += "\n    const float t = log(s);"
            body += both(lambda w, a: ST("dst", f"({LD('src', w)} - m) - t", w))
        elif dt["dst"] == "f32":  # dst holds the exponentials until the last pass
            body += both(lambda w, a: f"const {'float' if w == 1 else T} e = {ex(w)}; "
                                      f"{ST('dst', 'e', w)} {a} += e;") + red_sum()
            body += "\n    const float r = 1.0f / s;"
            body += both(lambda w, a: ST("dst", f"{LD('dst', w)} * r", w))
        else:  # no double rounding: recompute the exponential
            body += both(lambda w, a: f"{a} += {ex(w)};") + red_sum()
            body += "\n    const float r = 1.0f / s;"
            body += both(lambda w, a: ST("dst", f"{ex(w)} * r", w))
    else:
        body = f"""
    {T} sv = 0.0f;
    float s = 0.0f;"""
        if p.log:
            body += both(lambda w, a: f"{a} += {LD('diff_dst', w)};") + red_sum()
            body += both(lambda w, a: ST(
                "diff_src", f"{LD('diff_dst', w)} - exp({LD('dst', w)}) * s", w))
        else:
            body += both(lambda w, a: f"{a} += {LD('diff_dst', w)} * {LD('dst', w)};") + red_sum()
            body += both(lambda w, a: f"{{ const {'float' if w == 1 else T} yv = {LD('dst', w)}; "
                                      + ST("diff_src", f"yv * ({LD('diff_dst', w)} - s)", w) + " }")
    args = ", ".join(ptr_decl(n, dt[n], k < len(names_t) - 1) for k, n in enumerate(names_t))
    args = args.replace(" *restrict ", " *")  # in-place use
    runtime = bool(free_vars(p))
    if p.axis != 0 and is_var(p.dims[0]):
        inner = math.prod(v for d, v in enumerate(p.dims) if d not in (0, p.axis))
        rows = f"{OUTER} * {inner}" if inner != 1 else OUTER
    else:
        rows = math.prod(v for d, v in enumerate(p.dims) if d != p.axis)
    if runtime:
        args += ", " + ", ".join(f"const int {n}" for n in free_vars(p))
    L = p.wg
    name = kernel_name(p)
    src = f"""{io_preamble(dts, V)}
__kernel void __attribute__((reqd_work_group_size({L}, 1, 1))) {name}({args})
{{
    const int row = get_global_id(0);
    if (row >= {rows}) return;
    {code}
    {bases}
    const int cv = {C} - {C} % {V};{body}
}}
"""
    gsize = f"({rows} + {L - 1}) // {L} * {L}" if runtime else -(-rows // L) * L
    if runtime:
        return KernelSource(name, src, None, (L,), names_t + tuple(free_vars(p)), grid=(gsize,))
    return KernelSource(name, src, (gsize,), (L,), names_t)
