"""Generated kernels as text: OpenCL source plus the launch sizes and argument names a
runtime needs. Kernel generators return a loopy ``TranslationUnit`` or a :class:`KernelSource`
for hand-written OpenCL C; :func:`source_from_loopy` turns the first into the second. Sizes are
fixed, or runtime scalar arguments of the kernel (``m``, ``rows``, ...): the launch grid is then
kept as integer expressions over those arguments and evaluated per launch
(:func:`launch_size`). Pure: nothing here touches a device."""
from __future__ import annotations

import ast
import functools
import json
import re
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from ..error import runtime_error


@dataclass(frozen=True)
class KernelSource:
    """Generated OpenCL source plus what is needed to launch it.

    ``grid``, when set, holds the global size per axis as integer expressions over the
    kernel's runtime size arguments (``global_size`` is then None): one program serves every
    value of those sizes, and :func:`launch_size` evaluates the grid per launch.
    ``local_grid`` does the same for the work-group size (``local_size`` is then None): a
    kernel of one work-group whose item count follows a size (:func:`local_launch_size`).
    """

    name: str
    source: str
    global_size: tuple[int, ...] | None
    local_size: tuple[int, ...] | None
    arg_names: tuple[str, ...]
    build_options: tuple[str, ...] = ()
    grid: tuple[str, ...] | None = None
    local_grid: tuple[str, ...] | None = None

    def to_json(self) -> str:
        d = {"name": self.name, "source": self.source,
             "global_size": None if self.global_size is None else list(self.global_size),
             "local_size": None if self.local_size is None else list(self.local_size),
             "arg_names": list(self.arg_names),
             "build_options": list(self.build_options),
             "grid": None if self.grid is None else list(self.grid)}
        if self.local_grid is not None:
            d["local_grid"] = list(self.local_grid)
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str) -> "KernelSource":
        d = json.loads(text)
        grid, local_grid = d.get("grid"), d.get("local_grid")
        return cls(d["name"], d["source"],
                   None if d["global_size"] is None else tuple(d["global_size"]),
                   None if d["local_size"] is None else tuple(d["local_size"]),
                   tuple(d["arg_names"]), tuple(d.get("build_options", ())),
                   None if grid is None else tuple(grid),
                   None if local_grid is None else tuple(local_grid))


_BINOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
           ast.Mult: lambda a, b: a * b, ast.FloorDiv: lambda a, b: a // b,
           ast.Mod: lambda a, b: a % b}


def eval_size(expr: str, values: dict) -> int:
    """The integer value of a grid expression (``+ - * // %``, ``min``, ``max``, integer
    constants and the names in ``values``); anything else raises."""
    return _compiled_size(expr)(values)


@functools.lru_cache(maxsize=4096)
def _compiled_size(expr: str):
    """``expr`` checked once and turned into a function of the size values: a plan binds
    every launch of every execution through it (parsing per call cost an RNN's bind 70 us
    a launch)."""
    def build(node):
        if isinstance(node, ast.Expression):
            return build(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            c = node.value
            return lambda v: c
        if isinstance(node, ast.Name):
            name = node.id

            def look(v):
                if name not in v:
                    raise runtime_error(f"grid expression {expr!r}: no value for size "
                                        f"{name!r}")
                return int(v[name])
            return look
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            op, left, right = _BINOPS[type(node.op)], build(node.left), build(node.right)
            return lambda v: op(left(v), right(v))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = build(node.operand)
            return lambda v: -inner(v)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("min", "max") and not node.keywords):
            f, parts = (min if node.func.id == "min" else max), [build(a) for a in node.args]
            return lambda v: f(p(v) for p in parts)
        raise runtime_error(f"grid expression {expr!r}: unsupported {ast.dump(node)[:60]}")
    return build(ast.parse(expr, mode="eval"))


def launch_size(src: KernelSource, args) -> tuple[int, ...]:
    """The global size of one launch of ``src`` with ``args`` (in the kernel's argument
    order, or a mapping by argument name): fixed, or its grid evaluated over the sizes."""
    if src.grid is None:
        return src.global_size
    values = args if isinstance(args, dict) else dict(zip(src.arg_names, args))
    return tuple(max(eval_size(e, values), 1) for e in src.grid)


def local_launch_size(src: KernelSource, args) -> tuple[int, ...] | None:
    """The work-group size of one launch of ``src``: fixed, or its ``local_grid`` evaluated
    over the sizes in ``args`` (as in :func:`launch_size`)."""
    if src.local_grid is None:
        return src.local_size
    values = args if isinstance(args, dict) else dict(zip(src.arg_names, args))
    return tuple(max(eval_size(e, values), 1) for e in src.local_grid)


def source_from_loopy(tu) -> KernelSource:
    """Generate OpenCL source and launch sizes from a loopy TranslationUnit. A launch size
    that depends on a size parameter (a ``ValueArg`` of the kernel) is kept as an expression."""
    import loopy as lp

    _reuse_loopy_loop_nest_class()
    with _without_loopy_disk_cache():
        # preprocessed once: code generation goes on from it (what generate_code_v2 would do
        # first), and the launch sizes come from it (reductions over local inames only then
        # get their sizes)
        pre = lp.preprocess_program(tu)
        code = lp.generate_code_v2(pre).device_code()
    knl = pre.default_entrypoint
    gsize, lsize = knl.get_grid_size_upper_bounds_as_exprs(pre.callables_table)

    params = {a.name for a in knl.args if isinstance(a, lp.ValueArg)}

    def _sizes(t, allow_expr):
        out = []
        for v in t:
            try:
                out.append(int(v))
            except TypeError:
                from pymbolic.mapper.dependency import DependencyMapper

                deps = {d.name for d in DependencyMapper()(v)}
                if not allow_expr or not deps <= params:
                    raise runtime_error(
                        f"kernel {knl.name}: launch size {v} depends on {sorted(deps - params)}, "
                        f"which are not size arguments of the kernel") from None
                out.append(str(v))
        return tuple(out)

    g, l = _sizes(gsize, True), _sizes(lsize, False)
    if not g and not l:
        g, l = (1,), (1,)
    if not l:
        l = (1,) * len(g)
    while len(l) < len(g):
        l = l + (1,)
    while len(g) < len(l):
        g = g + (1,)
    if all(isinstance(gi, int) for gi in g):
        global_size, grid = tuple(gi * li for gi, li in zip(g, l)), None
    else:
        global_size = None
        grid = tuple(str(gi * li) if isinstance(gi, int) else f"({gi}) * {li}"
                     for gi, li in zip(g, l))
    return KernelSource(knl.name, code, global_size, l, _signature_args(code, knl.name),
                        grid=grid)


_DATACLASSES: dict = {}

# Tried without gain: returning islpy.align_spaces' argument at once where its dims already
# bear the template's names in the template's order (27% of the calls in the LSTM training
# pair's generation; the rest need the moves): generation 1.79 -> 1.77 s, within noise.
# The conversions of index expressions to isl (loopy's simplify_using_aff, 22% of a GEMM's
# generation) and the per-lane bounds checks (97 of 101 calls distinct in a GEMM) repeat
# little across the unrolled lanes, so caches keyed on them would not hit.


def _reuse_loopy_loop_nest_class() -> None:
    """Make loopy's code generation define its per-call helper class once per process.

    ``loopy.codegen.control.build_loop_nest`` declares a frozen dataclass in its body, so
    every call (one per loop nest, and per value of every loopy-unrolled iname) runs the
    dataclass machinery again: 0.5-1 ms each, 500 calls and 0.25-0.5 s of the LSTM training
    pair's generation. The class body is the same on every call, so the first class made for
    each (module, name, fields, options) serves every later call; the generated code is
    unchanged (``tests/kernels/test_codegen_unchanged.py``). Installed once, and only where
    the module still uses the standard decorator (another loopy version is left alone)."""
    import dataclasses

    from loopy.codegen import control

    if getattr(control, "dataclass", None) is not dataclasses.dataclass:
        return  # already installed, or a loopy whose code differs: nothing to do

    def dataclass(cls=None, /, **options):
        def wrap(c):
            key = (c.__module__, c.__qualname__, tuple(c.__dict__.get("__annotations__", {})
                                                       .items()), tuple(sorted(options.items())))
            made = _DATACLASSES.get(key)
            if made is None:
                made = _DATACLASSES[key] = dataclasses.dataclass(c, **options)
            return made

        return wrap if cls is None else wrap(cls)

    control.dataclass = dataclass


@contextmanager
def _without_loopy_disk_cache():
    """loopy's own caches off while it generates for us: the kernel cache keeps every
    generated source, so loopy's (keys hashed from whole kernels, results pickled to disk)
    would only ever miss and store (5-15% of a generation)."""
    import loopy as lp

    before = lp.CACHING_ENABLED
    lp.set_caching_enabled(False)
    try:
        yield
    finally:
        lp.set_caching_enabled(before)


def _signature_params(code: str, name: str) -> list[str]:
    """The parameter declarations of kernel ``name`` in ``code``."""
    m = re.search(r"__kernel\s+void\s+(?:__attribute__\s*\(\(.*?\)\)\s*)?" + re.escape(name)
                  + r"\s*\((.*?)\)\s*\{", code, re.S)
    if m is None:
        raise runtime_error(f"kernel {name}: could not find its signature in the generated code")
    return [p.strip() for p in m.group(1).split(",") if p.strip()]


def _signature_args(code: str, name: str) -> tuple[str, ...]:
    """Parameter names of kernel ``name`` as generated (loopy leaves unused ones out)."""
    return tuple(re.findall(r"[A-Za-z_]\w*", p)[-1] for p in _signature_params(code, name))


# OpenCL scalar types -> numpy, for arguments given as Python ints or floats
_SCALARS = {"char": np.int8, "uchar": np.uint8, "short": np.int16, "ushort": np.uint16,
            "int": np.int32, "uint": np.uint32, "long": np.int64, "ulong": np.uint64,
            "float": np.float32, "double": np.float64}


def scalar_types(src: KernelSource) -> tuple:
    """Per argument of ``src``: the numpy type of a scalar parameter, None for a pointer."""
    out = []
    for p in _signature_params(src.source, src.name):
        words = re.findall(r"[A-Za-z_]\w*", p)[:-1]
        typ = next((_SCALARS[w] for w in words if w in _SCALARS), None)
        out.append(None if "*" in p else typ)
    return tuple(out)
