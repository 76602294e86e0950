"""Generated kernels as text: OpenCL source plus the launch sizes and argument names a
runtime needs. Kernel generators return a loopy ``TranslationUnit`` with every size fixed, or a
:class:`KernelSource` for hand-written OpenCL C; :func:`source_from_loopy` turns the first into
the second. Pure: nothing here touches a device."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np

from ..error import runtime_error


@dataclass(frozen=True)
class KernelSource:
    """Generated OpenCL source plus what is needed to launch it."""

    name: str
    source: str
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    arg_names: tuple[str, ...]
    build_options: tuple[str, ...] = ()

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "source": self.source,
                           "global_size": list(self.global_size),
                           "local_size": None if self.local_size is None else list(self.local_size),
                           "arg_names": list(self.arg_names),
                           "build_options": list(self.build_options)})

    @classmethod
    def from_json(cls, text: str) -> "KernelSource":
        d = json.loads(text)
        return cls(d["name"], d["source"], tuple(d["global_size"]),
                   None if d["local_size"] is None else tuple(d["local_size"]),
                   tuple(d["arg_names"]), tuple(d.get("build_options", ())))


def source_from_loopy(tu) -> KernelSource:
    """Generate OpenCL source and launch sizes from a loopy TranslationUnit with fixed sizes."""
    import loopy as lp

    code = lp.generate_code_v2(tu).device_code()
    # launch sizes after preprocessing: reductions over local inames only then get their sizes
    pre = lp.preprocess_program(tu)
    knl = pre.default_entrypoint
    gsize, lsize = knl.get_grid_size_upper_bounds_as_exprs(pre.callables_table)

    def _ints(t):
        out = []
        for v in t:
            try:
                out.append(int(v))
            except TypeError:
                raise runtime_error(
                    f"kernel {knl.name}: launch size {v} is not a constant; generators must fix "
                    f"every size parameter") from None
        return tuple(out)

    g, l = _ints(gsize), _ints(lsize)
    if not g and not l:
        g, l = (1,), (1,)
    if not l:
        l = (1,) * len(g)
    while len(l) < len(g):
        l = l + (1,)
    while len(g) < len(l):
        g = g + (1,)
    global_size = tuple(gi * li for gi, li in zip(g, l))
    return KernelSource(knl.name, code, global_size, l, _signature_args(code, knl.name))


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
